"""Chunks: cut an index file into runs of whole records, without parsing it first.

A develop root index is hundreds of MB. Reading it whole costs every worker a full parse (to find
where its records are) and the memory of the whole file; cut into runs of whole records, each
worker reads and decodes only its share, a few MB at a time.

The cut needs no parse: Spack writes ``{"database": {"version": "8", "installs": {...}}}``, so
the records sit between a short header and a ``}}}`` trailer, and two records meet where a
closing brace, a comma and a quoted 32-character hash followed by ``: {`` occur in a row. Such a
pattern could also occur inside a string value; a cut there is caught because the piece before
it is then not a complete JSON object: pieces are decoded in file order, each wrapped in
``{`` and ``}``, and the first piece starts at the true start of ``installs``, so every piece
that decodes ends at a true record boundary (JSON is read left to right, and a piece that stops
inside a string or a nested value cannot be closed by one brace). A caller that meets a piece
that does not decode treats the cut as unusable and reads the file whole (:class:`BadCut`).

A file whose envelope is anything else (gzip data, other keys before ``installs``,
``version`` after ``installs``, a number for ``version``) has no :func:`layout`, and is read
whole too. (A key after ``installs`` whose value is an object ending the file, as in
``..., "installs": {...}, "x": {}}}``, does pass for a layout, with the records running up to
that last object; the last piece then does not decode, and the file is read whole.)
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

#: Target size of a piece: big enough that per-piece costs vanish, small enough to bound memory.
PIECE_BYTES = 4 << 20
_WINDOW = 64 << 10
_OVERLAP = 1 << 10
_WS = rb"[ \t\n\r]*"  # JSON's whitespace (``\s`` would also accept \x0b and \x0c)
_HEADER = re.compile(
    _WS + rb'\{' + _WS + rb'"database"' + _WS + rb":" + _WS + rb"\{" + _WS + rb'"version"'
    + _WS + rb":" + _WS + rb'"([0-9A-Za-z.]{1,16})"' + _WS + rb"," + _WS + rb'"installs"' + _WS
    + rb":" + _WS + rb"\{"
)  # fmt: skip
_TRAILER = re.compile(rb"\}" + _WS + rb"\}" + _WS + rb"\}" + _WS + rb"\Z")
_BOUNDARY = re.compile(
    rb"\}" + _WS + rb"(,)" + _WS + rb'"[a-z2-7]{32}"' + _WS + rb":" + _WS + rb"\{"
)


class BadCut(Exception):
    """A piece did not decode: the cut fell inside a record, or the file is not valid JSON."""


@dataclass(frozen=True)
class Layout:
    """Where the records of an index file are: ``installs`` spans ``[start, end)``."""

    version: str
    start: int  # just after the "{" that opens installs
    end: int  # the "}" that closes installs
    size: int  # of the file


def layout(fd: int) -> Layout | None:
    """The records' span of an uncompressed index with Spack's envelope, or None."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, 4096, 0)
    match = _HEADER.match(head)
    if match is None:
        return None
    tail_at = max(match.end(), size - 4096)
    tail = os.pread(fd, size - tail_at, tail_at)
    closing = _TRAILER.search(tail)
    if closing is None:
        return None
    return Layout(match.group(1).decode(), match.end(), tail_at + closing.start(), size)


def _cut_after(fd: int, span: Layout, offset: int) -> int:
    """The first comma between two records at or after ``offset``; ``span.end`` if none."""
    at = offset
    while at < span.end:
        window = os.pread(fd, min(_WINDOW, span.end - at), at)
        match = _BOUNDARY.search(window)
        if match is not None:
            return at + match.start(1)
        if at + len(window) >= span.end:
            break
        at += len(window) - _OVERLAP  # a separator may straddle two windows
    return span.end


def pieces(fd: int, span: Layout, part: int, parts: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` byte ranges of records that part ``part`` of ``parts`` reads.

    The file is cut into pieces of about :data:`PIECE_BYTES`; each part takes a contiguous run
    of them. Every part computes the same cuts, so the parts cover the records exactly once.
    """
    length = span.end - span.start
    count = max(parts, -(-length // PIECE_BYTES))
    first, last = part * count // parts, (part + 1) * count // parts

    def cut(i: int) -> int:  # where piece i starts: after the cut before it
        if i == 0:
            return span.start
        if i >= count:
            return span.end + 1
        return _cut_after(fd, span, span.start + i * length // count) + 1

    bounds = [cut(i) for i in range(first, last + 1)]
    return [(a, b - 1) for a, b in itertools.pairwise(bounds) if b > a]


@contextlib.contextmanager
def mapped_piece(fd: int, start: int, stop: int) -> Iterator[memoryview]:
    """The bytes ``[start, stop)`` wrapped in ``{`` and ``}``: a JSON object of records.

    The file is mapped copy-on-write and the bytes just before and after the range (the ``{``
    or ``,`` before it, the ``,`` or ``}`` after it) are overwritten in this process's copy
    only: no bytes are copied, and the pages are unmapped when the block ends.
    """
    before = start - 1
    base = before - before % mmap.ALLOCATIONGRANULARITY
    mapping = mmap.mmap(fd, stop + 1 - base, access=mmap.ACCESS_COPY, offset=base)
    try:
        mapping[before - base] = ord("{")
        mapping[stop - base] = ord("}")
        with memoryview(mapping) as whole, whole[before - base :] as view:
            yield view
    finally:
        mapping.close()
