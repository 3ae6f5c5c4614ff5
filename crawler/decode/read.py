"""Read: an index file's bytes to its records, a piece of whole records at a time.

An index with Spack's usual envelope is read in pieces of whole records
(:mod:`crawler.decode.chunks`), each decoded in one pass straight into typed records
(:func:`read_pieces`). When a piece holds a record of the wrong shape, that piece alone is
decoded again record by record (:func:`typed`), so the bad record is listed and the others kept.
Anything else (gzip data, another envelope, a cut that turns out to fall inside a record, a key
repeated across pieces) is read whole (:func:`read_whole`): its ``installs`` taken as one raw
value and cut into pieces by following its brackets, never one dict of every record. A record
longer than :data:`chunks.MAX_RECORD_BYTES` (or whose key is over :data:`chunks.MAX_KEY_BYTES`)
is refused without being decoded.

One piece: the summaries of roots (:mod:`.root`) and stacks (:mod:`.stack`) read alike.
"""

from __future__ import annotations

import contextlib
import gzip
import zlib
from array import array
from collections.abc import Callable, Iterator
from typing import BinaryIO, Generic, NamedTuple, TypeVar, cast

import msgspec

from ..config import DEFAULT_MAX_INDEX_MB
from ..errors import IndexFormatError, UnsupportedVersionError
from ..files import map_descriptor, open_regular
from . import chunks
from .records import (
    SUPPORTED_VERSIONS,
    Buffer,
    LegacyRecord,
    LegacyStackRecord,
    PlainRecord,
    Record,
    StackRecord,
    decode_document,
    decode_envelope,
    decode_mending,
    strict_utf8,
)
from .specstore import Known, RawRecord, digest
from .validate import Checker, TooManyInvalid, key_digest

R = TypeVar("R", Record, StackRecord)
_RAW = msgspec.json.Decoder(dict[str, msgspec.Raw])
_STR = strict_utf8(msgspec.json.Decoder(str).decode)
_RAW_RECORDS = msgspec.json.Decoder(dict[str, RawRecord])
_ENCODE = msgspec.json.Encoder()
#: ``max_index_mb``'s default, in bytes (workers are told the configured value).
DEFAULT_INDEX_LIMIT = DEFAULT_MAX_INDEX_MB << 20
_GUNZIP_BLOCK = 4 << 20


class Decoders(Generic[R]):
    """A piece's records in one pass (as the first of ``kinds`` that fits them all), or one
    record at a time as the last."""

    def __init__(self, *kinds: type[R]) -> None:
        self.pieces: list[Callable[[Buffer], dict[str, R]]] = [
            strict_utf8(msgspec.json.Decoder(dict[str, kind]).decode)  # type: ignore[valid-type]
            for kind in kinds
        ]
        self.one: Callable[[Buffer], R] = strict_utf8(msgspec.json.Decoder(kinds[-1]).decode)


#: A root's pieces: the common case first, older writers' spellings last (see :mod:`.records`,
#: which reads every supported version with these); a stack's.
ROOT = Decoders(PlainRecord, Record, LegacyRecord)
STACK = Decoders(StackRecord, LegacyStackRecord)
#: A piece's records: typed, or raw when one of them has the wrong shape (or is too long to
#: decode, :class:`chunks.Oversized`).
Records = dict[str, R] | dict[str, msgspec.Raw] | dict[str, chunks.Oversized]


class Overlap(Exception):
    """The pieces of an index hold the same key twice (the file is read whole instead)."""


def _body(path: str, url: str, limit: int) -> Buffer:
    """The bytes of an index file (gunzipped if it is gzip data, FORMAT.md section 1).

    The file is memory-mapped rather than read, so its pages are the page cache's. Gzip data is
    gunzipped into memory, at most ``limit`` bytes of it (``max_index_mb``): a few KB of gzip
    can stand for many GB.
    """
    with open(open_regular(path), "rb") as file:
        if file.read(2) == b"\x1f\x8b":
            file.seek(0)
            return _gunzip(file, url, limit)
        return map_descriptor(file.fileno())


def read_whole(
    path: str,
    url: str,
    decoders: Decoders[R],
    limit: int = DEFAULT_INDEX_LIMIT,
    last_first: bool = False,
) -> tuple[str, Iterator[Records[R]]]:
    """Read a whole index file (:func:`_body`), decode its envelope (the DB version), and give
    its records a piece at a time, in file order; raises :class:`Overlap` at a key that occurs
    twice. With ``last_first``, the pieces are given from the last and each key once, with its
    last value, as a dict keeps it.

    Its ``installs`` are cut into pieces as a range that the fast cut cannot split is
    (:func:`chunks.split_range`): a document of millions of tiny records never becomes one dict
    of them. A document that is not plainly one object of records is decoded whole
    (:func:`.records.decode_document`, which says what is wrong with it).
    """
    body = _body(path, url, limit)
    found = decode_envelope(body, url)
    if found is None:
        version, installs = decode_document(body, url)
        return version, iter([installs])
    version, raw = found
    return version, _whole_pieces(body, raw, url, decoders, last_first)


def _whole_pieces(
    body: Buffer, raw: msgspec.Raw, url: str, decoders: Decoders[R], last_first: bool
) -> Iterator[Records[R]]:
    view = memoryview(raw)
    seen: set[str] = set()
    ranges = chunks.split_range(view, 1, len(view) - 1)  # cut as it goes, unless backwards
    for piece in reversed(list(ranges)) if last_first else ranges:
        records: Records[R]
        if isinstance(piece, chunks.Oversized):
            try:
                records = {_key(piece.key, url): piece}
            except chunks.BadCut:
                decode_document(body, url)  # says what is wrong
                raise
        else:
            try:
                records = _decode_piece(b"{" + bytes(view[piece[0] : piece[1]]) + b"}", decoders)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                decode_document(body, url)  # says what is wrong (a key that is not UTF-8)
                raise
        if seen.intersection(records):
            if not last_first:
                raise Overlap
            records = {k: v for k, v in records.items() if k not in seen}  # type: ignore[assignment]
        seen.update(records)
        yield records


def _gunzip(file: BinaryIO, url: str, limit: int) -> bytearray:
    """The gunzipped bytes, read a block at a time (``read(limit)`` would allocate ``limit``
    bytes up front, however small the data)."""
    body = bytearray()
    try:
        with gzip.GzipFile(fileobj=file) as unzipped:
            while block := unzipped.read(_GUNZIP_BLOCK):
                body += block
                if len(body) > limit:
                    raise IndexFormatError(
                        url, f"larger than max_index_mb ({limit >> 20} MiB) once gunzipped"
                    )
    except (OSError, EOFError, zlib.error) as err:
        raise IndexFormatError(url, f"bad gzip data: {err}") from None
    return body


def read_pieces(
    fd: int, ranges: list[tuple[int, int]], version: str, url: str, decoders: Decoders[R]
) -> Iterator[Records[R]]:
    """The records of these ranges of a file (see :mod:`crawler.decode.chunks`), a piece at a
    time."""
    for piece in _mapped_pieces(fd, ranges, version, url):
        yield piece if isinstance(piece, dict) else _decode_at(piece[1], decoders, piece[0], url)


def _mapped_pieces(
    fd: int, ranges: list[tuple[int, int]], version: str, url: str
) -> Iterator[tuple[int, Buffer] | dict[str, chunks.Oversized]]:
    """Each piece of these ranges as (its first byte, its bytes mapped, only until the next
    piece is asked for), or a record too long to decode (by its key)."""
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedVersionError(url, version)
    for piece in chunks.subdivide(fd, ranges):
        if isinstance(piece, chunks.Oversized):
            yield {_key(piece.key, url): piece}
            continue
        with chunks.mapped_piece(fd, *piece) as data:
            yield piece[0], data


class Digested(NamedTuple):
    """A piece of a root read through the spec store (:func:`read_digested`)."""

    records: Records[Record]  # to check and reduce
    digests: dict[str, bytes]  # of each record in the build cache, by key
    known: tuple[tuple[str, int], ...] | list[tuple[str, int]] = ()  # (key, store entry)
    rewritten: tuple[tuple[str, int], ...] | list[tuple[str, int]] = ()  # other bytes, same key


def read_digested(
    fd: int, ranges: list[tuple[int, int]], version: str, url: str, known: Known | None
) -> Iterator[Digested]:
    """:func:`read_pieces` of a root, through the spec store (see :mod:`.specstore`): each
    piece's records in the build cache are digested, and those the store ``known`` summarised
    from the same bytes are not decoded. A piece mostly new is decoded whole in one pass (the
    fastest way); else its new records alone."""
    for mapped in _mapped_pieces(fd, ranges, version, url):
        if isinstance(mapped, dict):
            yield Digested(mapped, {})
            continue
        start, piece = mapped[0], bytes(mapped[1])  # raw records point into it: a copy
        try:
            raw = _RAW_RECORDS.decode(piece)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            yield Digested(_decode_at(piece, ROOT, start, url), {})  # says what is wrong
            continue
        digests, hits, rewritten = {}, [], []
        where = known.where if known is not None else {}
        for key, record in raw.items():
            if not record.in_buildcache:
                continue
            found = digests[key] = digest(record.spec)
            i = where.get(key)
            if i is not None:
                assert known is not None
                if known.digest_of(i) == found:
                    hits.append((key, i))
                else:
                    rewritten.append((key, i))
        if 2 * len(hits) < len(raw):
            del raw  # its records point into the piece: let them go before it is decoded
            yield Digested(_decode_at(piece, ROOT, start, url), digests, (), rewritten)
            continue
        taken = {key for key, _ in hits}
        new = [(k, r) for k, r in raw.items() if k not in taken]
        records = _decode_at(_piece_of(new), ROOT, start, url) if new else {}
        yield Digested(records, digests, hits, rewritten)


def _piece_of(records: list[tuple[str, RawRecord]]) -> bytes:
    """A piece of these records, as JSON (their other fields are not read anyway)."""
    flag = {True: b'{"in_buildcache":true,"spec":', False: b'{"in_buildcache":false,"spec":'}
    return b"{%s}" % b",".join(
        b"%s:%s%s}" % (_ENCODE.encode(key), flag[record.in_buildcache], bytes(record.spec))
        for key, record in records
    )


def _decode_at(data: Buffer, decoders: Decoders[R], start: int, url: str) -> Records[R]:
    """:func:`_decode_piece` of the piece at byte ``start`` of ``url``; :class:`chunks.BadCut`
    when it does not decode (the file is then read whole)."""
    try:
        return _decode_piece(data, decoders)
    except (msgspec.DecodeError, UnicodeDecodeError) as err:  # a key is not UTF-8
        raise chunks.BadCut(f"piece at byte {start} of {url}: {err}") from None
    except RecursionError:  # read whole, the file gets its error there
        raise chunks.BadCut(f"piece at byte {start} of {url}: nested too deeply") from None


def _key(text: bytes, url: str) -> str:
    try:
        return decode_mending(_STR, text)
    except (msgspec.DecodeError, UnicodeDecodeError) as err:
        raise chunks.BadCut(f"a key of {url}: {err}") from None


def _decode_piece(data: Buffer, decoders: Decoders[R]) -> Records[R]:
    # Lone surrogate escapes: the rare piece that Python's json reads, and msgspec does not.
    return decode_mending(lambda buffer: _decode_kinds(buffer, decoders), data)


def _decode_kinds(data: Buffer, decoders: Decoders[R]) -> Records[R]:
    for decoder in decoders.pieces:
        try:
            return decoder(data)
        except (msgspec.ValidationError, UnicodeDecodeError):
            continue  # a record that does not fit: try the next kind
    return _RAW.decode(bytes(data))  # raw records point into their buffer: copy it


def typed(records: Records[R], decoders: Decoders[R], check: Checker) -> dict[str, R]:
    """The records of a piece, typed. A piece decodes typed or raw as a whole: a typed one is
    returned as it is, a raw one decoded record by record (a bad record is rejected)."""
    if type(next(iter(records.values()), None)) not in (msgspec.Raw, chunks.Oversized):
        return records  # type: ignore[return-value]
    raw = cast(dict[str, msgspec.Raw | chunks.Oversized], records)
    decoded: dict[str, R] = {}
    for key, value in raw.items():
        size = value.size if isinstance(value, chunks.Oversized) else len(value)
        if isinstance(value, chunks.Oversized) and value.key_size > chunks.MAX_KEY_BYTES:
            limit = chunks.MAX_KEY_BYTES
            check.reject(key, f"key is {value.key_size:,} bytes of JSON, more than {limit:,}")
            continue
        if isinstance(value, chunks.Oversized) or size > chunks.MAX_RECORD_BYTES:
            limit = chunks.MAX_RECORD_BYTES  # never decoded: it could take GBs
            check.reject(key, f"record is {size:,} bytes of JSON, more than the limit of {limit:,}")
            continue
        try:
            decoded[key] = decoders.one(value)
        except msgspec.ValidationError as err:
            check.reject(key, f"bad record: {err}")
        except UnicodeDecodeError as err:
            check.reject(key, f"bad record: a string is not UTF-8 ({err.reason})")
    return decoded


@contextlib.contextmanager
def at_most_invalid(url: str) -> Iterator[None]:
    """Fail the index when it holds more invalid records than a Spack index could
    (:data:`crawler.decode.validate.MAX_INVALID`), as soon as it does."""
    try:
        yield
    except TooManyInvalid as err:
        raise IndexFormatError(url, str(err)) from None


def distinct(valid: set[str], rejected: array[int]) -> int:
    """How many distinct keys a reading listed, valid (``valid``) or not (the digests of their
    keys): as many as the records it read, unless its pieces repeated a key.

    Invalid keys are compared by digest (8 bytes each, whatever the key's length), and valid
    keys against them only when there are any (a collision counts as a repeat).
    """
    if not rejected:
        return len(valid)
    digests = set(rejected)
    if len(digests) != len(rejected):
        return len(valid) + len(digests)  # a repeat among the invalid keys
    return len(digests.union(map(key_digest, valid)))
