"""Rendering: a branch's documents as the bytes that are published.

One piece: what the crawler writes must be byte-identical run after run (``index.json`` is
compared by its SHA-256, pages with the reference site's), so the two encoders live together.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec

from ..documents import PAGE_FIELDS, Index, PackageSummary

_ENCODER = msgspec.json.Encoder(order="sorted")


def encode_json(document: Any) -> bytearray:
    """Deterministic JSON: keys sorted, compact, UTF-8, a final newline.

    Encoded into one buffer and the newline appended in place: a develop index is tens of MB,
    and ``encode(...) + b"\\n"`` would briefly hold it twice.
    """
    buffer = bytearray()
    _ENCODER.encode_into(document, buffer)
    buffer += b"\n"
    return buffer


#: Entries of ``packages`` or ``specs`` encoded into one chunk of :func:`encode_index`.
ENTRIES_PER_CHUNK = 200


def encode_index(index: Index[PackageSummary]) -> Iterator[bytes]:
    """:func:`encode_json` of ``index``, the same bytes, in chunks of a few packages or specs:
    a develop-sized index is over 100 MB, which one buffer would hold at the peak of the run.

    The document is encoded with its two large maps empty, and their entries are put where
    ``"packages":{}`` and ``"specs":{}`` are: with sorted keys, those are the first places
    these bytes appear, in this order (in a string, their quotes would be escaped).
    """
    frame = _ENCODER.encode(msgspec.structs.replace(index, packages={}, specs={}))
    rest = frame
    for key, entries in ((b'"packages":', index.packages), (b'"specs":', index.specs)):
        head, found, rest = rest.partition(key + b"{}")
        assert found, f"an index without its {key!r} map"
        yield head + key + b"{"
        yield from _entries(list(entries.items()))
        yield b"}"
    yield rest + b"\n"


def _entries(items: list[tuple[str, Any]]) -> Iterator[bytes]:
    """The entries of a JSON object, without its braces, a few at a time."""
    for start in range(0, len(items), ENTRIES_PER_CHUNK):
        chunk = _ENCODER.encode(dict(items[start : start + ENTRIES_PER_CHUNK]))
        yield (b"," if start else b"") + chunk[1:-1]


def render_page(package: str, ref: str, summary: PackageSummary) -> str:
    """The reference site's ``_cache/<ref>/<package>/specs.md``, byte for byte.

    The site serialises with Python's ``json.dumps(..., sort_keys=True)`` (separators ``", "``
    and ``": "``, non-ASCII escaped), so the same call is used here.
    """
    meta = json.dumps(msgspec.to_builtins(summary.meta), sort_keys=True)
    # Only the page's fields: those schema 2 added to the index are not on the site's pages.
    fields = [{name: getattr(d, name) for name in PAGE_FIELDS} for d in summary.spec_details]
    details = json.dumps(fields, sort_keys=True)
    return (
        f'---\ntitle: "{package}"\nlayout: cache\ncategories: [package, {ref}]\n'
        f"meta: {meta}\nspec_details: {details}\n---"
    )
