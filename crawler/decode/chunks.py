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

The pattern misses boundaries where records are not objects keyed by hashes (millions of tiny
invalid records, ``"k": 0``), and a run of records can be one huge record: a range longer than
:data:`LARGE_RANGE` is then cut by :func:`subdivide`, which follows the JSON's strings and
brackets to find the commas between records, so that no piece decodes more than about
:data:`PIECE_BYTES` of small records at once, and a record whose value is longer than
:data:`MAX_RECORD_BYTES`, or whose key is longer than :data:`MAX_KEY_BYTES`, is measured there
and never decoded (see :class:`Oversized`). A document read whole is cut the same way
(:func:`split_range`).

A file whose envelope is anything else (gzip data, other keys before ``installs``,
``version`` after ``installs``, a number for ``version``) has no :func:`layout`, and is read
whole too. (A key after ``installs`` whose value is an object ending the file, as in
``..., "installs": {...}, "x": {}}}``, does pass for a layout, with the records running up to
that last object; the last piece then does not decode, and the file is read whole.)
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import mmap
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

#: Target size of a piece: big enough that per-piece costs vanish, small enough to bound memory.
PIECE_BYTES = 4 << 20
#: A range longer than this is cut by :func:`subdivide` (a record may be this long, at most).
LARGE_RANGE = 16 << 20
#: The longest record (its value, as JSON text) that is decoded; a longer one is invalid.
MAX_RECORD_BYTES = LARGE_RANGE
#: A key of a record longer than :data:`LARGE_RANGE` is kept whole up to this length (JSON).
MAX_KEY_BYTES = 4096
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


#: A string, opening brackets (group 1), closing ones (group 2), or a comma (group 3).
_STRING = rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"'  # a run of plain characters matched in one step
_TOKEN = re.compile(_STRING + rb"|([\[{]++)|([\]}]++)|(,)", re.S)
_KEY = re.compile(_WS + rb"(" + _STRING + rb")" + _WS + rb":" + _WS, re.S)


_Data = bytes | bytearray | memoryview | mmap.mmap


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


@dataclass(frozen=True)
class Oversized:
    """A record longer than :data:`LARGE_RANGE`, key included, never decoded: its key (the
    JSON text, whole if it is at most :data:`MAX_KEY_BYTES`, else its first bytes and a digest
    of it all), the key's length and the value's."""

    key: bytes
    key_size: int
    size: int


def subdivide(fd: int, ranges: list[tuple[int, int]]) -> Iterator[tuple[int, int] | Oversized]:
    """``ranges`` of records (see :func:`pieces`), those longer than :data:`LARGE_RANGE` cut
    into pieces of about :data:`PIECE_BYTES` at the commas between records, and records longer
    than :data:`MAX_RECORD_BYTES` set apart as :class:`Oversized`.

    The cut follows every string and bracket of such a range in Python (about a second for
    4 million tiny records): it is only for ranges the fast cut could not split. Raises
    :class:`BadCut` when the brackets do not balance (the file is then read whole).
    """
    for start, stop in ranges:
        if stop - start <= LARGE_RANGE:
            yield start, stop
            continue
        base = start - start % mmap.ALLOCATIONGRANULARITY
        with mmap.mmap(fd, stop - base, access=mmap.ACCESS_READ, offset=base) as data:
            for piece in split_range(data, start - base, stop - base):
                yield piece if isinstance(piece, Oversized) else (piece[0] + base, piece[1] + base)


def split_range(data: _Data, start: int, stop: int) -> Iterator[tuple[int, int] | Oversized]:
    """The records ``data[start:stop]`` (the inside of an object, between its braces) cut at
    the commas between them as :func:`subdivide` does; the ranges are offsets in ``data``."""
    depth, piece = 0, start  # piece: where the piece being read starts
    ends = []  # where records end: the commas between them, then the range's end
    for token in _TOKEN.finditer(data, start, stop):
        kind = token.lastindex
        if kind is None:  # a string
            continue
        if kind == 1:
            depth += token.end() - token.start()
        elif kind == 2:
            depth -= token.end() - token.start()
            if depth < 0:
                raise BadCut(f"a closing bracket without its opening one at byte {token.start()}")
        elif depth == 0:  # a comma between records
            ends.append(token.start())
            if token.start() - piece >= PIECE_BYTES:
                yield from _cut(data, piece, ends)
                piece = ends[-1] + 1
                ends.clear()
    if depth:
        raise BadCut(f"brackets left open at byte {stop}")
    ends.append(stop)
    yield from _cut(data, piece, ends)


def _cut(data: _Data, start: int, ends: list[int]) -> Iterator[tuple[int, int] | Oversized]:
    """The records from ``start`` to each of ``ends`` in turn, as one piece, except that a
    record longer than :data:`LARGE_RANGE` is a piece alone, or :class:`Oversized`."""
    piece = record = start
    for end in ends:
        if end - record > LARGE_RANGE:
            if record > piece:
                yield piece, record - 1  # the records before it, without its comma
            found = _oversized(data, record, end)
            too_long = found.size > MAX_RECORD_BYTES or found.key_size > MAX_KEY_BYTES
            yield found if too_long else (record, end)
            piece = end + 1
        record = end + 1
    if ends and ends[-1] > piece:
        yield piece, ends[-1]


def _oversized(data: _Data, start: int, stop: int) -> Oversized:
    """The record ``[start, stop)``: its key, and the length of its value (whitespace after it
    left out, as a decoder measures it)."""
    key = _KEY.match(data, start, stop)
    if key is None:
        raise BadCut(f"no key at byte {start}")
    tail = bytes(data[max(stop - 64, key.end()) : stop])
    size = stop - (len(tail) - len(tail.rstrip(b" \t\n\r"))) - key.end()
    first, last = key.start(1), key.end(1)
    if last - first <= MAX_KEY_BYTES:
        return Oversized(bytes(data[first:last]), last - first, size)
    with memoryview(data) as view, view[first:last] as text:  # hashed where it lies
        digest = hashlib.blake2b(text, digest_size=16).hexdigest().encode()
    # Its start, with no escape nor character cut in two.
    head = bytes(data[first : first + 64]).replace(b"\\", b"").decode(errors="ignore").encode()
    return Oversized(head + b"..." + digest + b'"', last - first, size)


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
