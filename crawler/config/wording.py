"""msgspec's validation messages said in the project's words: the type expected in plain
words, the bounds and the valid values as the model declares them (``Expected 'float' > 0.0``:
``must be a number greater than 0``; ``Invalid enum value 'htm'``: ``'htm' is not one of
json, pages, html``). A message of another form is kept as msgspec wrote it, its backticks as
quotes."""

from __future__ import annotations

import re

import msgspec.inspect as mi

from .keys import type_at

#: What a value of each of msgspec's type names is, in a message.
_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "str": "text",
    "bool": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "null",
}
#: What a value given of some types is, where it is not what was expected.
_GOT_WORDS = {"float": "a number with a fraction", "bool": "a boolean (true or false)"}
#: What the model's patterns want (a message would otherwise quote the regular expression):
#: :data:`~.model.EnvName`'s and ``s3.region``'s.
_PATTERNS = {
    "^[A-Za-z_][A-Za-z0-9_]{0,127}$": (
        "the name of an environment variable (letters, digits and _, not starting with a "
        "digit, at most 128 characters)"
    ),
    "^[a-z0-9-]{1,64}$": "a region name (lowercase letters, digits and -, at most 64)",
}

_GOT = re.compile(r"Expected `(?P<want>[^`]+)`, got `(?P<got>[^`]+)`")
_BOUND = re.compile(r"Expected `(?P<want>int|float)` (?:>=|>|<=|<) \S+")
_LENGTH = re.compile(r"Expected `(?P<want>str|array|object)` of length >= 1")
_REGEX = re.compile(r"Expected `str` matching regex '(?P<regex>.*)'", re.S)
_ENUM = re.compile(r"Invalid enum value (?P<value>.*)", re.S)


def plain(message: str, path: str) -> str:
    """msgspec's ``message`` about the value at ``path``, in the project's words."""
    kind = type_at(path)
    if found := _GOT.fullmatch(message):
        got = _GOT_WORDS.get(found["got"]) or _word(found["got"])
        return f"expected {_word(found['want'])}, got {got}{_valid(kind)}"
    if found := _BOUND.fullmatch(message):
        bounds = _bounds(kind)
        return f"must be {_word(found['want'])}, {bounds}" if bounds else message.replace("`", "'")
    if found := _LENGTH.fullmatch(message):
        return f"must not be empty{_valid(kind)}"
    if found := _REGEX.fullmatch(message):
        wanted = _PATTERNS.get(found["regex"], f"text matching {found['regex']!r}")
        return f"must be {wanted}"
    if found := _ENUM.fullmatch(message):
        value = found["value"].replace("`", "'")
        return f"{value} is not one of the valid values: {', '.join(_values(kind))}"
    return message.replace("`", "'")


def _word(name: str) -> str:
    return " or ".join(_WORDS.get(part, part) for part in name.split(" | "))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _bounds(kind: mi.Type | None) -> str:
    """``from 1 to 256``, ``greater than 0``, ``0 or more``: the bounds the model sets."""
    if not isinstance(kind, mi.IntType | mi.FloatType):
        return ""
    if kind.ge is not None and kind.le is not None:
        return f"from {_number(kind.ge)} to {_number(kind.le)}"
    parts = [
        f"{words} {_number(bound)}".strip() if words else f"{_number(bound)} {after}"
        for bound, words, after in (
            (kind.ge, "", "or more"),
            (kind.gt, "greater than", ""),
            (kind.le, "", "or less"),
            (kind.lt, "less than", ""),
        )
        if bound is not None
    ]
    return " and ".join(parts)


def _values(kind: mi.Type | None) -> list[str]:
    """The values a Literal (or a list of one) takes, in the model's order."""
    if isinstance(kind, mi.VarTupleType | mi.ListType):
        kind = kind.item_type
    if isinstance(kind, mi.LiteralType):
        return [str(value) for value in kind.values]
    return []


def _valid(kind: mi.Type | None) -> str:
    values = _values(kind)
    return f" (valid values: {', '.join(values)})" if values else ""
