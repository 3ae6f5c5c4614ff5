"""Chunks: cut an index file into runs of whole records, without parsing it first.

A develop root index is hundreds of MB. Reading it whole costs every worker a full parse (to find
where its records are) and the memory of the whole file; cut into runs of whole records, each
worker reads and decodes only its share, a few MB at a time.

The cut needs no parse: Spack writes ``{"database": {"version": "8", "installs": {...}}}``, so
the records sit between a short header and a ``}}}`` trailer, and two records meet where a
closing brace, a comma and a quoted 32-character hash followed by ``: {`` occur in a row. In
valid JSON the pattern cannot occur inside a string (its quotes would be escaped), but it does
occur inside a record that holds an object keyed by hash-like strings. A cut there is caught
because the piece before it is then not a complete JSON object: each piece is decoded wrapped
in ``{`` and ``}``, the first piece starts at the true start of ``installs``, and a piece that
stops inside a nested value cannot be closed by one brace, so every piece that decodes ends at
a true record boundary. A caller that meets a piece that does not decode treats the cut as
unusable and reads the file whole (:class:`BadCut`).

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
#: How much of a file's start :func:`header` needs (Spack's header is about 45 bytes).
HEADER_BYTES = 4096
_WINDOW = 64 << 10
#: How far back a search resumes, since a separator may straddle where the last one stopped.
OVERLAP = 1 << 10
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


def header(head: bytes) -> tuple[str, int] | None:
    """From a file's first :data:`HEADER_BYTES` bytes: its DB version, and where its records
    start (just after the ``{`` that opens ``installs``); None for any other envelope."""
    match = _HEADER.match(head)
    return None if match is None else (match.group(1).decode(), match.end())


def records_end(fd: int, size: int, start: int) -> int | None:
    """Where ``installs`` closes in a complete file of ``size`` bytes whose records start at
    ``start`` (the first of the three closing braces), or None."""
    tail_at = max(start, size - 4096)
    closing = _TRAILER.search(os.pread(fd, size - tail_at, tail_at))
    return None if closing is None else tail_at + closing.start()


def layout(fd: int) -> Layout | None:
    """The records' span of an uncompressed index with Spack's envelope, or None."""
    size = os.fstat(fd).st_size
    found = header(os.pread(fd, HEADER_BYTES, 0))
    if found is None:
        return None
    version, start = found
    end = records_end(fd, size, start)
    return None if end is None else Layout(version, start, end, size)


def cut_after(fd: int, offset: int, limit: int) -> int | None:
    """The first comma between two records at or after ``offset``, its pattern wholly before
    ``limit`` (the file may still be growing past it); None if there is none."""
    at = offset
    while at < limit:
        wanted = min(_WINDOW, limit - at)
        window = os.pread(fd, wanted, at)
        match = _BOUNDARY.search(window)
        if match is not None:
            return at + match.start(1)
        if len(window) < wanted or at + wanted >= limit:  # the end (or a file cut short)
            break
        at += wanted - OVERLAP  # a separator may straddle two windows
    return None


def pieces(fd: int, span: Layout, part: int, parts: int) -> list[tuple[int, int]]:
    """The ``[start, stop)`` byte ranges of records that part ``part`` of ``parts`` reads.

    The file is cut into pieces of about :data:`PIECE_BYTES`; each part takes a contiguous run
    of them. Every part computes the same cuts, so the parts cover the records exactly once.
    """
    length = span.end - span.start
    count = max(parts, -(-length // PIECE_BYTES))
    first, last = part * count // parts, (part + 1) * count // parts

    bounds = []
    for i in range(first, last + 1):  # where piece i starts: after the cut before it
        if i == 0:
            bounds.append(span.start)
        elif i >= count or (bounds and bounds[-1] > span.end):
            bounds.append(span.end + 1)  # no boundary after an earlier target: none after this
        else:
            found = cut_after(fd, span.start + i * length // count, span.end)
            bounds.append((span.end if found is None else found) + 1)
    return [(a, b - 1) for a, b in itertools.pairwise(bounds) if b > a]


def split(fd: int, start: int, stop: int) -> list[tuple[int, int]]:
    """A run of whole records ``[start, stop)`` as pieces of about :data:`PIECE_BYTES`."""
    ranges = []
    while stop - start > PIECE_BYTES:
        cut = cut_after(fd, start + PIECE_BYTES, stop)
        if cut is None:
            break
        ranges.append((start, cut))
        start = cut + 1
    ranges.append((start, stop))
    return ranges


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
