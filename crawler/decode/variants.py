"""Variants: each distinct variant text of a root's records numbered once, as
:class:`~crawler.decode.shard.RootShard` sends them (an index into its ``strings``).

A develop root repeats a few thousand (name, value) pairs over half a million times: each is
rendered (:func:`.validate.render_variant`) and checked once, then found in a memo.
"""

from __future__ import annotations

from .problems import too_many_parameters, variant_problem
from .records import ParamValue, PlainValue
from .validate import FLAGS, MAX_VARIANT, MAX_VARIANTS, render_variant

_MEMO_LIMIT = 50_000
_FLAG = -1  # what a memo gives for compiler flags, which are not variants
_REFUSED = -2  # what :meth:`VariantNumbers.number` gives for a variant too long or not printable


class VariantNumbers:
    """The numbers of variant texts in one shard's ``strings`` (``numbers``, shared with its
    other text fields), and the memos that spare rendering a pair twice."""

    def __init__(self, numbers: dict[str, int]) -> None:
        self.numbers = numbers
        self.memo: dict[tuple[object, ...], int] = {}
        self.plain_memo: dict[tuple[str, PlainValue], int] = {}

    def plain(self, parameters: dict[str, PlainValue]) -> list[int] | str:
        """:meth:`of` for the common case: strings, booleans and tuples of them.

        Such (name, value) pairs never compare equal across types, so the items themselves key
        the memo and are looked up in one pass in C; only pairs seen for the first time are
        rendered.
        """
        if len(parameters) > MAX_VARIANTS:
            return too_many_parameters(parameters)
        found = list(map(self.plain_memo.get, parameters.items()))
        if None in found:
            for i, item in enumerate(parameters.items()):
                if found[i] is None:
                    found[i] = number = self.number(*item)
                    # Values unique to each record would not repeat; one refused is not kept.
                    if len(self.plain_memo) < _MEMO_LIMIT and number != _REFUSED:
                        self.plain_memo[item] = number
            if _REFUSED in found:
                return variant_problem(*list(parameters.items())[found.index(_REFUSED)])
        return list(filter(_FLAG.__ne__, found))  # type: ignore[arg-type]

    def number(self, name: str, value: ParamValue | PlainValue) -> int:
        """The number of a variant's text in ``strings``, :data:`_FLAG` for a flag, or
        :data:`_REFUSED` for a text over :data:`.validate.MAX_VARIANT` or not printable
        (:func:`.validate.unprintable`; not kept)."""
        if name in FLAGS:
            return _FLAG
        text = render_variant(name, value)
        if len(text) > MAX_VARIANT or not text.isprintable():
            return _REFUSED
        numbers = self.numbers
        return numbers.setdefault(text, len(numbers))

    def of(self, parameters: dict[str, ParamValue]) -> list[int] | str:
        """A spec's variants (their numbers in ``strings``), or why one is too long.

        Each (name, value) pair is rendered once. The memo's key holds the value's type, since
        True == 1 == 1.0 as keys but each renders differently, and floats and lists by their
        text (0.0 == -0.0, [1] == [True]).
        """
        if len(parameters) > MAX_VARIANTS:
            return too_many_parameters(parameters)
        memo, out = self.memo, []
        key: tuple[object, ...]
        for name, value in parameters.items():
            kind = type(value)
            if kind is str:
                key = (name, value)
            elif kind is bool or kind is int:
                key = (name, kind, value)
            else:
                key = (name, kind, repr(value))
            found = memo.get(key)
            if found is None:
                found = self.number(name, value)
                if found == _REFUSED:
                    return variant_problem(name, value)
                if len(memo) < _MEMO_LIMIT:  # values unique to each record would not repeat
                    memo[key] = found
            if found != _FLAG:
                out.append(found)
        return out
