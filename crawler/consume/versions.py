"""Versions as Spack orders them, and the version queries of :mod:`crawler.consume.query`.

A version is cut into segments: runs of digits and runs of letters (``.``, ``-`` and ``_``
only separate them), so ``1.26.4``, ``2.1-rc2`` and ``develop``. Two versions compare segment by
segment, left to right:

* numbers numerically (``1.10`` is after ``1.9``);
* words alphabetically, and before any number (``1.2.rc1`` is before ``1.2.0``), except
  Spack's "infinity" words, after every number, in this order: ``stable``, ``trunk``, ``head``,
  ``master``, ``main``, ``develop``;
* a version that is a prefix of another is before it (``1.2`` is before ``1.2.1``).

A query (:func:`parse_versions`) is one of, or several separated by commas (any of them):

* ``1.26``: that version or any it is a prefix of, segment by segment (``1.26``, ``1.26.4``,
  not ``1.260``): Spack's ``@1.26``;
* ``=1.26``: exactly that version;
* ``1.2:1.4``, ``1.2:``, ``:1.4``: an inclusive range; the upper bound covers the versions it
  is a prefix of (``:1.4`` holds ``1.4.2``), as Spack's ``@1.2:1.4`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

from ..consumer_errors import QueryError

#: Spack's words that sort after every number, in increasing order.
INFINITY = ("stable", "trunk", "head", "master", "main", "develop")
_SEGMENT = re.compile(r"[0-9]+|[A-Za-z]+")
_VERSION = re.compile(r"[A-Za-z0-9_.-]+")

#: A version's sort key: one tuple per segment, its kind first: (0, word), (1, number of digits,
#: digits) for a number, leading zeros left out (ordered as the numbers, without int(), which
#: refuses thousands of digits), (2, rank) for infinity.
Key = tuple[tuple[int | str, ...], ...]


@lru_cache(maxsize=65536)  # an index has a few thousand distinct versions, each seen often
def version_key(version: str) -> Key:
    """The key that sorts versions as Spack does (see the module's docstring)."""
    return tuple(_segment(s) for s in _SEGMENT.findall(version))


def _segment(text: str) -> tuple[int | str, ...]:
    if text.isdigit():
        digits = text.lstrip("0") or "0"
        return (1, len(digits), digits)
    if text in INFINITY:
        return (2, INFINITY.index(text))
    return (0, text)


def _is_prefix(prefix: Key, key: Key) -> bool:
    return key[: len(prefix)] == prefix


#: Whether a version (a string of ``spec_details``' ``versions``) is one a query asks for.
VersionTest = Callable[[str], bool]


def parse_versions(query: str) -> VersionTest:
    """The test of a version query (see the module's docstring); a :class:`QueryError` naming
    what is wrong for a malformed one."""
    tests = [_parse_one(query, part) for part in query.split(",")]
    if len(tests) == 1:
        return tests[0]
    return lambda version: any(test(version) for test in tests)


def _parse_one(query: str, part: str) -> VersionTest:
    part = part.strip()
    if part.startswith("="):
        exact = _checked(query, part[1:])
        return lambda version: version == exact
    if ":" not in part:
        prefix = version_key(_checked(query, part))
        return lambda version: _is_prefix(prefix, version_key(version))
    low_text, _, high_text = part.partition(":")
    if ":" in high_text:
        raise QueryError("version", query, f"{part!r} has more than one ':'")
    if not low_text.strip() and not high_text.strip():
        raise QueryError("version", query, f"{part!r} gives no bound (write 1.2: or :1.4)")
    low = version_key(_checked(query, low_text)) if low_text.strip() else None
    high = version_key(_checked(query, high_text)) if high_text.strip() else None
    if low is not None and high is not None and high < low and not _is_prefix(high, low):
        raise QueryError("version", query, f"{part!r} is empty: its upper bound is below its lower")

    def within(version: str) -> bool:
        key = version_key(version)
        if low is not None and key < low:
            return False
        return high is None or key <= high or _is_prefix(high, key)

    return within


def _checked(query: str, text: str) -> str:
    text = text.strip()
    if not _VERSION.fullmatch(text) or not _SEGMENT.search(text):
        shown = repr(text) if text else "an empty version"
        raise QueryError(
            "version", query, f"{shown} is not a version (letters, digits, '.', '-', '_')"
        )
    return text
