"""Summarize: reduce one index file to what its branch needs, in a decoding worker.

:func:`summarize_stack` and :func:`summarize_root_shard` run in worker processes (see
:mod:`crawler.decode.pool`): they read an index file, decode its records
(:mod:`crawler.decode.records`), check each one (:mod:`crawler.decode.validate`) and return a
compact summary as msgpack bytes, cheap to send back. A root index is shared by every worker and
joined by :func:`merge_root`.

Reading. An index with Spack's usual envelope is read in pieces of whole records
(:mod:`crawler.decode.chunks`): a root shard reads only its share of the file, a few MB at a time,
and each piece is decoded in one pass straight into typed records. When a piece holds a record of
the wrong shape, that piece alone is decoded again record by record, so the bad record is
listed and the others kept. Anything else (gzip data, another envelope, a cut that turns out to
fall inside a record, a key repeated across pieces) is read whole (:func:`read_whole`): by one
worker, its ``installs`` taken as one raw value and cut into pieces by following its brackets,
never one dict of every record; it gives the same summary.

Memory. What a worker keeps grows with valid records only: an invalid record leaves the digest
of its key (8 bytes), and its reason only while it is among the first listed; an index with
more than :data:`crawler.decode.validate.MAX_INVALID` fails at once. A record longer than
:data:`chunks.MAX_RECORD_BYTES` (or whose key is over :data:`chunks.MAX_KEY_BYTES`) is refused
without being decoded.

Dependencies. A record is invalid when a dependency's hash is not a key of the index. A shard
that reads a share of the file cannot tell on its own, so it accepts such records and lists the
hashes it did not hold (``foreign``); :func:`root_gaps` looks them up among every shard's keys,
and when some are absent the shards are run again with that list, which then rejects the
records pointing at them.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import mmap
import os
import zlib
from array import array
from collections.abc import Container, Iterable, Iterator
from typing import BinaryIO, Generic, TypeVar, cast

import msgspec

from ..errors import IndexFormatError, UnsupportedVersionError
from ..files import open_regular
from . import chunks
from .records import (
    DEFAULT_MAX_INDEX_MB,
    SUPPORTED_VERSIONS,
    Buffer,
    Dependency,
    ParamValue,
    PlainNode,
    PlainRecord,
    PlainValue,
    Record,
    StackRecord,
    decode_document,
    decode_envelope,
    decode_mending,
)
from .validate import (
    FLAGS,
    HASH,
    IDENTITY_SEPARATOR,
    MAX_COMPILER,
    MAX_DEPENDENCIES,
    MAX_VARIANT,
    MAX_VARIANTS,
    InvalidRecord,
    SourceSummary,
    SpecRow,
    TooManyInvalid,
    _Checker,
    all_hashes,
    first_invalid,
    key_digest,
    own_compiler,
    render_variant,
    shorten,
    too_large,
)

R = TypeVar("R", Record, StackRecord)
_RAW = msgspec.json.Decoder(dict[str, msgspec.Raw])
_STR = msgspec.json.Decoder(str)
_MEMO_LIMIT = 50_000
#: ``max_index_mb``'s default, in bytes (workers are told the configured value).
DEFAULT_INDEX_LIMIT = DEFAULT_MAX_INDEX_MB << 20
_GUNZIP_BLOCK = 4 << 20
_FLAG = -1  # what a memo gives for compiler flags, which are not variants
_TOO_LONG = -2  # what :meth:`_RootPart._number` gives for a variant over its limit


class _Decoders(Generic[R]):
    """A piece's records in one pass (as the first of ``kinds`` that fits them all), or one
    record at a time as the last."""

    def __init__(self, *kinds: type[R]) -> None:
        self.pieces: list[msgspec.json.Decoder[dict[str, R]]] = [
            msgspec.json.Decoder(dict[str, kind])  # type: ignore[valid-type]
            for kind in kinds
        ]
        self.one: msgspec.json.Decoder[R] = msgspec.json.Decoder(kinds[-1])


_ROOT = _Decoders(PlainRecord, Record)
_STACK = _Decoders(StackRecord)
#: A piece's records: typed, or raw when one of them has the wrong shape (or is too long to
#: decode, :class:`chunks.Oversized`).
Records = dict[str, R] | dict[str, msgspec.Raw] | dict[str, chunks.Oversized]


class Overlap(Exception):
    """The pieces of an index hold the same key twice (the file is read whole instead)."""


def read_index(
    path: str, url: str, limit: int = DEFAULT_INDEX_LIMIT
) -> tuple[str, dict[str, msgspec.Raw]]:
    """Read a whole index file (gunzipped if it is gzip data, FORMAT.md section 1) and decode
    its envelope: the DB version and the raw records.

    The file is memory-mapped rather than read, so its pages are the page cache's. Gzip data is
    gunzipped into memory, at most ``limit`` bytes of it (``max_index_mb``): a few KB of gzip
    can stand for many GB.
    """
    return decode_document(_body(path, url, limit), url)


def _body(path: str, url: str, limit: int) -> Buffer:
    """The bytes of an index file, mapped, or gunzipped into memory (see :func:`read_index`)."""
    with open(open_regular(path), "rb") as file:
        if file.read(2) == b"\x1f\x8b":
            file.seek(0)
            return _gunzip(file, url, limit)
        try:
            return mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            return b""


def read_whole(
    path: str,
    url: str,
    decoders: _Decoders[R],
    limit: int = DEFAULT_INDEX_LIMIT,
    last_first: bool = False,
) -> tuple[str, Iterator[Records[R]]]:
    """Read a whole index file as :func:`read_index` does, and give its records a piece at a
    time, in file order; raises :class:`Overlap` at a key that occurs twice. With
    ``last_first``, the pieces are given from the last and each key once, with its last value,
    as a dict keeps it.

    Its ``installs`` are cut into pieces as a range that the fast cut cannot split is
    (:func:`chunks.split_range`): a document of millions of tiny records never becomes one dict
    of them. A document that is not plainly one object of records is decoded whole by
    :func:`read_index` (which says what is wrong with it).
    """
    body = _body(path, url, limit)
    found = decode_envelope(body, url)
    if found is None:
        version, installs = decode_document(body, url)
        return version, iter([installs])
    version, raw = found
    return version, _whole_pieces(body, raw, url, decoders, last_first)


def _whole_pieces(
    body: Buffer, raw: msgspec.Raw, url: str, decoders: _Decoders[R], last_first: bool
) -> Iterator[Records[R]]:
    """:func:`read_whole`'s pieces of ``raw``."""
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


def _pieces(
    fd: int, ranges: list[tuple[int, int]], version: str, url: str, decoders: _Decoders[R]
) -> Iterator[Records[R]]:
    """The records of these ranges of a file (see :mod:`crawler.decode.chunks`), a piece at a
    time."""
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedVersionError(url, version)
    for piece in chunks.subdivide(fd, ranges):
        if isinstance(piece, chunks.Oversized):
            yield {_key(piece.key, url): piece}
            continue
        start, stop = piece
        records: Records[R]
        with chunks.mapped_piece(fd, start, stop) as data:
            try:
                records = _decode_piece(data, decoders)
            except (msgspec.DecodeError, UnicodeDecodeError) as err:  # a key is not UTF-8
                raise chunks.BadCut(f"piece at byte {start} of {url}: {err}") from None
            except RecursionError:  # read whole, the file gets its error there
                raise chunks.BadCut(f"piece at byte {start} of {url}: nested too deeply") from None
        yield records


def _key(text: bytes, url: str) -> str:
    try:
        return decode_mending(_STR.decode, text)
    except (msgspec.DecodeError, UnicodeDecodeError) as err:
        raise chunks.BadCut(f"a key of {url}: {err}") from None


def _decode_piece(data: Buffer, decoders: _Decoders[R]) -> Records[R]:
    # Lone surrogate escapes: the rare piece that Python's json reads, and msgspec does not.
    return decode_mending(lambda buffer: _decode_kinds(buffer, decoders), data)


def _decode_kinds(data: Buffer, decoders: _Decoders[R]) -> Records[R]:
    for decoder in decoders.pieces:
        try:
            return decoder.decode(data)
        except (msgspec.ValidationError, UnicodeDecodeError):
            continue  # a record that does not fit: try the next kind
    return _RAW.decode(bytes(data))  # raw records point into their buffer: copy it


def _typed(records: Records[R], decoders: _Decoders[R], check: _Checker) -> dict[str, R]:
    """The records of a piece, typed. A piece decodes typed or raw as a whole: a typed one is
    returned as it is, a raw one decoded record by record (a bad record is rejected)."""
    if type(next(iter(records.values()), None)) not in (msgspec.Raw, chunks.Oversized):
        return records  # type: ignore[return-value]
    raw = cast(dict[str, msgspec.Raw | chunks.Oversized], records)
    typed: dict[str, R] = {}
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
            typed[key] = decoders.one.decode(value)
        except msgspec.ValidationError as err:
            check.reject(key, f"bad record: {err}")
        except UnicodeDecodeError as err:
            check.reject(key, f"bad record: a string is not UTF-8 ({err.reason})")
    return typed


class RootShard(msgspec.Struct, frozen=True, gc=False):
    """One worker's share of a root index, before compilers are resolved across shards.

    The specs' text fields travel as indexes into ``strings``: a develop root repeats a few
    thousand distinct strings (platforms, targets, compilers, variants) over a million times,
    and sending each occurrence would make the receiving process build a string for each.
    """

    db_version: str
    records: int  # records this shard read, valid or not
    hashes: list[str]  # valid records of this shard
    versions: list[str]  # "name@version" of each of ``hashes``, for compiler edges
    strings: list[str]  # the distinct text of the specs
    specs: list[str]  # the hash of each valid record in the build cache
    #: ``array("I")`` bytes: name, version, platform, os, target, compiler of each spec ("" as
    #: compiler where ``edges`` has a say)
    fields: bytes
    variants: bytes  # ``array("I")`` bytes: the variants of every spec, one after the other
    counts: bytes  # ``array("I")`` bytes: how many variants each spec has
    edges: list[tuple[int, str, str]]  # (index in specs, edge hash, edge name)
    invalid: list[InvalidRecord]  # the first of them (see :func:`.validate.first_invalid`)
    foreign: list[str]  # dependency hashes not among this shard's records
    invalid_unlisted: int  # invalid records beyond ``invalid``
    rejected: bytes  # ``array("Q")`` bytes: :func:`.validate.key_digest` of each invalid key


class _RootPart:
    """Builds a :class:`RootShard`, piece after piece."""

    def __init__(self, keys: Container[str] | None, missing: frozenset[str]) -> None:
        self.check = _Checker()
        #: Every key of the index when the shard read it whole; else the keys seen so far.
        self.complete = keys is not None
        self.keys: Container[str] = keys if keys is not None else set()
        self.missing = missing
        self.foreign: set[str] = set()
        self.records = 0
        self.numbers: dict[str, int] = {}
        self.memo: dict[tuple[object, ...], int] = {}
        self.plain: dict[tuple[str, PlainValue], int] = {}
        self.hashes: list[str] = []
        self.versions: list[str] = []
        self.specs: list[str] = []
        self.fields = array("I")
        self.variants = array("I")
        self.counts = array("I")
        self.edges: list[tuple[int, str, str]] = []

    def add(self, records: Records[Record]) -> None:
        """Check and reduce every record of a piece."""
        self.records += len(records)
        check, number = self.check, self.numbers.setdefault
        before = len(self.hashes)
        for key, record in _typed(records, _ROOT, check).items():
            node = record.spec
            arch = node.arch
            fields = (node.name, node.version, arch.platform, arch.platform_os, arch.target_name)
            problem = check.problem(key, node.hash, fields) or self._dependencies(node.dependencies)
            found: list[int] | str = []
            if not problem and record.in_buildcache:
                compiler = own_compiler(node)
                if type(node) is PlainNode:
                    found = self._plain_variants(node.parameters)
                else:
                    found = self._variants(node.parameters)
                if type(found) is str:
                    problem = found
                elif type(compiler) is not str or len(compiler) > MAX_COMPILER:
                    problem = _compiler_problem(compiler)  # the common case passes in C above
            if problem:
                check.reject(key, problem)
                continue
            self.hashes.append(key)
            self.versions.append(f"{node.name}@{node.version}")
            if not record.in_buildcache:
                continue
            if isinstance(compiler, Dependency):  # an edge: resolved by merge_root
                self.edges.append((len(self.specs), compiler.hash, compiler.name))
                compiler = ""
            self.specs.append(key)
            self.fields.extend([number(text, len(self.numbers)) for text in (*fields, compiler)])
            self.counts.append(len(found))
            self.variants.extend(found)  # type: ignore[arg-type]
        if not self.complete:  # only valid keys: an invalid one may be of any length
            keys = self.keys
            assert isinstance(keys, set)
            keys.update(self.hashes[before:])

    def _dependencies(self, dependencies: list[Dependency]) -> str | None:
        """Why the edges make a record invalid, or None (see the module docstring).

        The common case in a few C-level calls: every edge is a key of the whole index, or, for
        a part, none is known to be missing (all become ``foreign``; :meth:`shard` keeps those
        that are not keys of the part).
        """
        if len(dependencies) > MAX_DEPENDENCIES:
            return too_large("dependencies", len(dependencies), MAX_DEPENDENCIES, "edges")
        hashes = [dep.hash for dep in dependencies]
        if not all_hashes(hashes):
            return _bad_edge(dependencies)
        if self.complete:
            if all(map(self.keys.__contains__, hashes)):
                return None
        elif not self.missing or self.missing.isdisjoint(hashes):
            self.foreign.update(hashes)
            return None
        return self._bad_dependency(dependencies)

    def _bad_dependency(self, dependencies: list[Dependency]) -> str | None:
        keys = self.keys
        for dep in dependencies:
            found = dep.hash
            if found in keys:
                continue
            if self.complete or found in self.missing:
                return f"dependency {dep.name}/{found} is not in this index"
            self.foreign.add(found)
        return None

    def _plain_variants(self, parameters: dict[str, PlainValue]) -> list[int] | str:
        """:meth:`_variants` for the common case: strings, booleans and tuples of them.

        Such (name, value) pairs never compare equal across types, so the items themselves key
        the memo and are looked up in one pass in C; only pairs seen for the first time are
        rendered.
        """
        if len(parameters) > MAX_VARIANTS:
            return _too_many(parameters)
        found = list(map(self.plain.get, parameters.items()))
        if None in found:
            for i, item in enumerate(parameters.items()):
                if found[i] is None:
                    found[i] = self._plain_miss(item)
            if _TOO_LONG in found:
                return _long_variant(parameters, found)  # type: ignore[arg-type]
        return list(filter(_FLAG.__ne__, found))  # type: ignore[arg-type]

    def _plain_miss(self, item: tuple[str, PlainValue]) -> int:
        found = self._number(*item)
        # Values unique to each record would not repeat; one too long is not kept.
        if len(self.plain) < _MEMO_LIMIT and found != _TOO_LONG:
            self.plain[item] = found
        return found

    def _number(self, name: str, value: ParamValue | PlainValue) -> int:
        """The number of a variant's text in ``strings``, :data:`_FLAG` for a flag, or
        :data:`_TOO_LONG` for a text over :data:`.validate.MAX_VARIANT` (not kept)."""
        if name in FLAGS:
            return _FLAG
        text = render_variant(name, value)
        if len(text) > MAX_VARIANT:
            return _TOO_LONG
        numbers = self.numbers
        return numbers.setdefault(text, len(numbers))

    def _variants(self, parameters: dict[str, ParamValue]) -> list[int] | str:
        """A spec's variants (their numbers in ``strings``), or why one is too long.

        Each (name, value) pair is rendered once. The memo's key holds the value's type, since
        True == 1 == 1.0 as keys but each renders differently, and floats and lists by their
        text (0.0 == -0.0, [1] == [True]).
        """
        if len(parameters) > MAX_VARIANTS:
            return _too_many(parameters)
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
                found = self._number(name, value)
                if found == _TOO_LONG:
                    return _too_long_variant(name, value)
                if len(memo) < _MEMO_LIMIT:  # values unique to each record would not repeat
                    memo[key] = found
            if found != _FLAG:
                out.append(found)
        return out

    def shard(self, version: str) -> RootShard:
        """The finished shard."""
        check = self.check
        foreign = [] if self.complete else sorted(self.foreign - self.keys)  # type: ignore[operator]
        if foreign and check.keys:  # an edge to an invalid record of this shard is no gap
            rejected = set(check.keys)
            foreign = [h for h in foreign if key_digest(h) not in rejected]
        return RootShard(
            version,
            self.records,
            self.hashes,
            self.versions,
            list(self.numbers),  # dicts keep insertion order: position == number
            self.specs,
            self.fields.tobytes(),
            self.variants.tobytes(),
            self.counts.tobytes(),
            self.edges,
            check.invalid,
            foreign,
            check.unlisted,
            check.keys.tobytes(),
        )


def _too_many(parameters: dict[str, PlainValue] | dict[str, ParamValue]) -> str:
    return f"parameters is {len(parameters):,} entries, more than the limit of {MAX_VARIANTS:,}"


def _compiler_problem(compiler: str | Dependency) -> str | None:
    """Why a compiler (or the name of the edge that gives it) is too long, or None."""
    if isinstance(compiler, Dependency):
        return too_large("the compiler dependency's name", len(compiler.name), MAX_COMPILER)
    return too_large("compiler", len(compiler), MAX_COMPILER)


def _bad_edge(dependencies: list[Dependency]) -> str:
    for dep in dependencies:
        if not HASH.fullmatch(dep.hash):
            name = shorten(dep.name, 64)
            return f"dependency {name!r} has a hash that is not a 32-character base32 DAG hash"
    raise AssertionError("no bad edge")  # pragma: no cover


def _long_variant(parameters: dict[str, PlainValue], found: list[int]) -> str:
    name, value = next(
        item for item, n in zip(parameters.items(), found, strict=True) if n == _TOO_LONG
    )
    return _too_long_variant(name, value)


def _too_long_variant(name: str, value: ParamValue | PlainValue) -> str:
    size = len(render_variant(name, value))
    limit = f"more than the limit of {MAX_VARIANT:,}"
    return f"variant {shorten(name, 64)!r} is {size:,} characters, {limit}"


def summarize_root_part(
    path: str,
    url: str,
    version: str,
    start: int,
    stop: int,
    missing: tuple[str, ...] = (),
    file_id: tuple[int, int] | None = None,
) -> bytes:
    """Check and reduce the records ``[start, stop)`` of a root index of DB ``version`` (a
    worker's job): a part cut while the file was downloading (see :mod:`.progressive`).

    ``file_id`` is the ``(st_dev, st_ino)`` of the file the part was cut from: a download that
    starts over replaces the file, and a job still queued then must not read the new one.
    Returns msgpack of :class:`RootShard`; raises :class:`chunks.BadCut` as a shard does, and
    when the file is not (or no longer) the one the part was cut from.
    """
    with open(open_regular(path), "rb") as file:
        fd = file.fileno()
        stat = os.fstat(fd)
        if file_id is not None and (stat.st_dev, stat.st_ino) != file_id:
            raise chunks.BadCut(f"{path} was replaced since its part was cut")
        if stat.st_size <= stop:
            raise chunks.BadCut(f"{path} is shorter than its part ({stop} bytes)")
        with _at_most_invalid(url):
            return _root_ranges(fd, chunks.split(fd, start, stop), version, url, missing)


def _root_ranges(
    fd: int, ranges: list[tuple[int, int]], version: str, url: str, missing: tuple[str, ...]
) -> bytes:
    part = _RootPart(None, frozenset(missing))
    for piece in _pieces(fd, ranges, version, url, _ROOT):
        part.add(piece)
    return msgspec.msgpack.encode(part.shard(version))


def summarize_root_shard(
    path: str,
    url: str,
    shard: int = 0,
    shards: int = 1,
    missing: tuple[str, ...] = (),
    whole: bool = False,
    limit: int = DEFAULT_INDEX_LIMIT,
) -> bytes:
    """Check and reduce shard ``shard`` of ``shards`` of a root index (a worker's job).

    Read in pieces, a shard is a contiguous share of the file; read ``whole`` (or when the file
    cannot be cut), every shard decodes the whole envelope and takes every ``shards``-th record.
    ``missing`` lists dependency hashes known to be absent from the index (see
    :func:`root_gaps`); ``limit`` bounds a gunzipped index (:func:`read_index`). Returns msgpack
    of :class:`RootShard`; raises :class:`chunks.BadCut` when a piece does not decode (the
    caller then asks for ``whole``).
    """
    with open(open_regular(path), "rb") as file:
        fd = file.fileno()
        span = None if whole else chunks.layout(fd)
        if span is not None:
            ranges = chunks.pieces(fd, span, shard, shards)
            with _at_most_invalid(url):
                return _root_ranges(fd, ranges, span.version, url, missing)
    if shard:  # read whole, a document is one job: the other shards are empty
        return msgspec.msgpack.encode(_RootPart(None, frozenset()).shard(""))
    with _at_most_invalid(url):
        return msgspec.msgpack.encode(_root_whole(path, url, limit, missing))


def _root_whole(path: str, url: str, limit: int, missing: tuple[str, ...]) -> RootShard:
    """The one shard of a root index read whole; every dependency that it does not hold is
    missing, so records pointing at one are rejected here (a second pass if need be)."""
    try:
        shard = _root_read(path, url, limit, missing, last_first=False)
    except Overlap:  # a key repeated: its last value counts, as in a dict
        shard = _root_read(path, url, limit, missing, last_first=True)
    if set(shard.foreign).difference(missing):  # they are no key of the index
        return _root_whole(path, url, limit, (*missing, *shard.foreign))
    return shard


def _root_read(
    path: str, url: str, limit: int, missing: tuple[str, ...], last_first: bool
) -> RootShard:
    version, pieces = read_whole(path, url, _ROOT, limit, last_first)
    part = _RootPart(None, frozenset(missing))
    for piece in pieces:
        part.add(piece)
    return part.shard(version)


@contextlib.contextmanager
def _at_most_invalid(url: str) -> Iterator[None]:
    """Fail the index when it holds more invalid records than a Spack index could
    (:data:`crawler.decode.validate.MAX_INVALID`), as soon as it does."""
    try:
        yield
    except TooManyInvalid as err:
        raise IndexFormatError(url, str(err)) from None


def load_root_shard(data: bytes) -> RootShard:
    """Decode what :func:`summarize_root_shard` returned."""
    return msgspec.msgpack.decode(data, type=RootShard)


def _distinct(valid: set[str], rejected: array[int]) -> int:
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


def root_gaps(shards: list[RootShard]) -> list[str] | None:
    """Dependency hashes that no shard holds, or None when shards hold the same key twice."""
    valid = set(itertools.chain.from_iterable(shard.hashes for shard in shards))
    rejected = array("Q")
    for shard in shards:
        rejected.frombytes(shard.rejected)
    if _distinct(valid, rejected) != sum(shard.records for shard in shards):
        return None
    absent = {h for shard in shards for h in shard.foreign if h not in valid}
    if absent and rejected:  # an edge to an invalid record is not a gap
        digests = set(rejected)
        absent = {h for h in absent if key_digest(h) not in digests}
    return sorted(absent)


def merge_root(shards: list[RootShard]) -> SourceSummary:
    """Join the shards of a root index and resolve compiler edges against all its records."""
    valid: dict[str, str] = {}
    for shard in shards:
        valid.update(zip(shard.hashes, shard.versions, strict=True))
    rejected = _unresolved_compilers(shards, valid)
    specs: list[SpecRow] = []
    invalid = [InvalidRecord(k, reason) for k, reason in rejected.items()]
    total = len(invalid)
    for shard in shards:
        invalid = first_invalid([*invalid, *shard.invalid])
        total += len(shard.invalid) + shard.invalid_unlisted
        edges = {i: h for i, h, _ in shard.edges}
        text = shard.strings.__getitem__
        fields = list(map(text, array("I", shard.fields)))
        variants = list(map(text, array("I", shard.variants)))
        at = 0
        for i, (key, count) in enumerate(zip(shard.specs, array("I", shard.counts), strict=True)):
            name, version, platform, os_, target, compiler = fields[6 * i : 6 * i + 6]
            rendered = tuple(variants[at : at + count])
            at += count
            if key in rejected:
                continue
            if i in edges:
                compiler = valid[edges[i]]
            specs.append(SpecRow(key, name, version, platform, os_, target, compiler, rendered))
    records = sum(shard.records for shard in shards)
    hashes = [h for shard in shards for h in shard.hashes if h not in rejected]
    return SourceSummary(
        shards[0].db_version, records, len(specs), hashes, specs, [], invalid, total - len(invalid)
    )


def _unresolved_compilers(shards: list[RootShard], valid: dict[str, str]) -> dict[str, str]:
    """The specs whose compiler edge points at a record that is absent or invalid, and why.

    A spec rejected this way is invalid in turn, so a spec whose compiler it was is rejected
    too: the search goes on until a pass rejects nothing new (usually the first).
    """
    edges = [(shard.specs[i], h, name) for shard in shards for i, h, name in shard.edges]
    rejected: dict[str, str] = {}
    while True:
        newly = {
            key: f"compiler dependency {name}/{h} is not a valid record"
            for key, h, name in edges
            if key not in rejected and (h not in valid or h in rejected)
        }
        if not newly:
            return rejected
        rejected.update(newly)


def _stack(version: str, pieces: Iterable[Records[StackRecord]]) -> SourceSummary:
    check = _Checker()
    hashes: list[str] = []
    identities: list[str] = []
    records = 0
    for piece in pieces:
        records += len(piece)
        typed = _typed(piece, _STACK, check)
        keys = list(typed)
        nodes = [record.spec for record in typed.values()]
        archs = [node.arch for node in nodes]
        # Column by column: a few comprehensions over a whole piece cost less than a loop body
        # per record.
        fields = list(
            zip(
                [node.name for node in nodes],
                [node.version for node in nodes],
                [arch.platform for arch in archs],
                [arch.platform_os for arch in archs],
                [a.target if type(a.target) is str else a.target.name for a in archs],  # type: ignore[union-attr]
                strict=True,
            )
        )
        texts = list(map(IDENTITY_SEPARATOR.join, fields))
        spec_hashes, names = [n.hash for n in nodes], {n.name for n in nodes}
        if check.fit(fields) and check.all_pass(keys, spec_hashes, texts, names):
            hashes += keys
            identities += texts
            continue
        for key, node, these, text in zip(keys, nodes, fields, texts, strict=True):
            problem = check.problem(key, node.hash, these)
            if problem:
                check.reject(key, problem)
                continue
            hashes.append(key)
            identities.append(text)
    if _distinct(set(hashes), check.keys) != records:
        raise Overlap
    return SourceSummary(version, records, 0, hashes, [], identities, check.invalid, check.unlisted)


def summarize_stack(path: str, url: str, limit: int = DEFAULT_INDEX_LIMIT) -> bytes:
    """Check and reduce a stack index (a worker's job); msgpack of :class:`SourceSummary`.

    A stack index only contributes which hashes it holds and what it says they are, so its
    records' edges and parameters are not read. ``limit`` bounds a gunzipped index.
    """
    with open(open_regular(path), "rb") as file:
        span = chunks.layout(file.fileno())
        if span is not None:
            try:
                ranges = chunks.pieces(file.fileno(), span, 0, 1)
                pieces = _pieces(file.fileno(), ranges, span.version, url, _STACK)
                with _at_most_invalid(url):
                    summary = _stack(span.version, pieces)
                return msgspec.msgpack.encode(summary)
            except (chunks.BadCut, Overlap):
                pass  # read whole below
    with _at_most_invalid(url):
        try:
            summary = _stack(*read_whole(path, url, _STACK, limit))
        except Overlap:  # a key repeated: its last value counts, as in a dict
            summary = _stack(*read_whole(path, url, _STACK, limit, last_first=True))
        return msgspec.msgpack.encode(summary)


def load_summary(data: bytes) -> SourceSummary:
    """Decode what :func:`summarize_stack` returned."""
    return msgspec.msgpack.decode(data, type=SourceSummary)
