"""Rendering: a branch's documents as the bytes that are published.

One piece: what the crawler writes must be byte-identical run after run (``index.json`` is
compared by its SHA-256, pages with the reference site's), so the two encoders live together.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import msgspec

from ..documents import PAGE_FIELDS, Links, PackageSummary
from ..linkfile import packed

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


#: Entries of a large map encoded into one chunk of :func:`encode_chunked`.
ENTRIES_PER_CHUNK = 200


def encode_chunked(document: msgspec.Struct, key: str) -> Iterator[bytes]:
    """:func:`encode_json` of ``document``, the same bytes, in chunks of a few entries of its
    map ``key`` (``index.json``'s packages, ``links.json``'s specs): a develop-sized branch's
    are tens of MB, which one buffer would hold at the peak of the run.

    The document is encoded with that map empty, and its entries are put where ``"key":{}``
    is: with sorted keys, that is the first place these bytes appear (in a string, the quotes
    would be escaped).

    The resolved :class:`~crawler.documents.Links` are written packed, as ``links.json``'s
    schema 2 (:mod:`crawler.linkfile`): no writer writes version 1 any more.
    """
    if isinstance(document, Links):
        document = packed(document)
    frame = _ENCODER.encode(msgspec.structs.replace(document, **{key: {}}))
    marker = _ENCODER.encode(key) + b":"
    head, found, tail = frame.partition(marker + b"{}")
    assert found, f"a document without its {key!r} map"
    yield head + marker + b"{"
    yield from _entries(list(getattr(document, key).items()))
    yield b"}" + tail + b"\n"


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
