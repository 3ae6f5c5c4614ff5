"""The keys a config file may hold, read from :class:`~.model.Config` itself, and the known key
closest to a mistyped one (``concurency``: did you mean ``concurrency``?)."""

from __future__ import annotations

import difflib
import re

import msgspec.inspect as mi

from .model import Config

#: Fields of Config that are no keys of the file (where the settings came from, the flags).
_INTERNAL = frozenset({"origin", "flags"})
#: A step of a key's path as msgspec names it: a key, or an item (``[0]``, ``[...]``).
_STEP = re.compile(r"\[[^\]]*\]|[^.\[]+")


def type_at(path: str) -> mi.Type | None:
    """The type of the value at ``path`` (``timeouts.read``, ``formats[0]``), as the model
    declares it; None when ``path`` leads nowhere."""
    current: mi.Type | None = mi.type_info(Config)
    for step in _STEP.findall(path):
        current = _inside(_container(current), step)
    return current


def known_keys(path: str) -> list[str]:
    """The keys the mapping at ``path`` (``""``, ``publish``, ``rewrites[0]``) may hold; none
    when ``path`` leads to no mapping of settings."""
    struct = _container(type_at(path))
    if not isinstance(struct, mi.StructType):
        return []
    names = (field.encode_name for field in struct.fields)
    return [name for name in names if not (struct.cls is Config and name in _INTERNAL)]


def closest_key(path: str, key: str) -> str | None:
    """The known key of the mapping at ``path`` that ``key`` most likely misspells (a key of
    that same mapping: ``max_drop`` for ``publish.max_drp``), or None when none is close."""
    close = difflib.get_close_matches(key, known_keys(path), n=1, cutoff=0.6)
    return close[0] if close else None


def _container(kind: mi.Type | None) -> mi.Type | None:
    """``kind``, or of a union (``str | IndexAt``, ``X | None``) the member holding keys."""
    if isinstance(kind, mi.UnionType):
        holding = (mi.StructType, mi.DictType, mi.VarTupleType, mi.ListType)
        return next((t for t in kind.types if isinstance(t, holding)), None)
    return kind


def _inside(kind: mi.Type | None, step: str) -> mi.Type | None:
    """The type one step inside ``kind``: a struct's field, a dict's value, a list's item (an
    entry named by its key, ``refs.develop``, too: an item the file keys by name)."""
    if isinstance(kind, mi.StructType):
        return next((f.type for f in kind.fields if f.encode_name == step), None)  # no "[0]"
    if isinstance(kind, mi.DictType):
        return kind.value_type
    if isinstance(kind, mi.VarTupleType | mi.ListType):
        return kind.item_type
    return None
