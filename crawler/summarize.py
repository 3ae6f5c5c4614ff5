"""Summarize: reduce one index file to what its branch needs, in a decoding worker.

:func:`summarize_stack` and :func:`summarize_root_shard` run in worker processes (see
:mod:`crawler.decodepool`): they read an index file, decode its records (:mod:`crawler.decode`),
check each one (:mod:`crawler.validate`) and return a compact summary as msgpack bytes, cheap
to send back. A root index is shared by every worker and joined by :func:`merge_root`.

Reading. An index with Spack's usual envelope is read in pieces of whole records
(:mod:`crawler.chunks`): a root shard reads only its share of the file, a few MB at a time, and
each piece is decoded in one pass straight into typed records. When a piece holds a record of
the wrong shape, that piece alone is decoded again record by record, so the bad record is
listed and the others kept. Anything else (gzip data, another envelope, a cut that turns out to
fall inside a record, a key repeated across pieces) is read whole, as one document, and gives
the same summary.

Dependencies. A record is invalid when a dependency's hash is not a key of the index. A shard
that reads a share of the file cannot tell on its own, so it accepts such records and lists the
hashes it did not hold (``foreign``); :func:`root_gaps` looks them up among every shard's keys,
and when some are absent the shards are run again with that list, which then rejects the
records pointing at them.
"""

from __future__ import annotations

import gzip
import itertools
import mmap
import os
import zlib
from array import array
from collections.abc import Container, Iterable, Iterator
from typing import BinaryIO, Generic, TypeVar, cast

import msgspec

from . import chunks
from .decode import (
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
    decode_mending,
)
from .errors import IndexFormatError, UnsupportedVersionError
from .files import open_regular
from .validate import (
    FLAGS,
    IDENTITY_SEPARATOR,
    InvalidRecord,
    SourceSummary,
    SpecRow,
    _Checker,
    own_compiler,
    render_variant,
)

R = TypeVar("R", Record, StackRecord)
_RAW = msgspec.json.Decoder(dict[str, msgspec.Raw])
_MEMO_LIMIT = 50_000
#: ``max_index_mb``'s default, in bytes (workers are told the configured value).
DEFAULT_INDEX_LIMIT = DEFAULT_MAX_INDEX_MB << 20
_GUNZIP_BLOCK = 4 << 20
_FLAG = -1  # what a memo gives for compiler flags, which are not variants


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
#: A piece's records: typed, or raw when one of them has the wrong shape.
Records = dict[str, R] | dict[str, msgspec.Raw]


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
    with open(open_regular(path), "rb") as file:
        if file.read(2) == b"\x1f\x8b":
            file.seek(0)
            return decode_document(_gunzip(file, url, limit), url)
        try:
            body: bytes | mmap.mmap = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            body = b""
    return decode_document(body, url)


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
    """The records of these ranges of a file (see :mod:`crawler.chunks`), a piece at a time."""
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedVersionError(url, version)
    for start, stop in ranges:
        records: Records[R]
        with chunks.mapped_piece(fd, start, stop) as data:
            try:
                records = _decode_piece(data, decoders)
            except (msgspec.DecodeError, UnicodeDecodeError) as err:  # a key is not UTF-8
                raise chunks.BadCut(f"piece at byte {start} of {url}: {err}") from None
            except RecursionError:  # read whole, the file gets its error there
                raise chunks.BadCut(f"piece at byte {start} of {url}: nested too deeply") from None
        yield records


def _decode_piece(data: memoryview, decoders: _Decoders[R]) -> Records[R]:
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
    if type(next(iter(records.values()), None)) is not msgspec.Raw:
        return records  # type: ignore[return-value]
    raw = cast(dict[str, msgspec.Raw], records)
    typed: dict[str, R] = {}
    for key, value in raw.items():
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
    invalid: list[InvalidRecord]
    foreign: list[str]  # dependency hashes not among this shard's records


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
        if not self.complete:
            keys = self.keys
            assert isinstance(keys, set)
            keys.update(records)
        check, number = self.check, self.numbers.setdefault
        for key, record in _typed(records, _ROOT, check).items():
            node = record.spec
            arch = node.arch
            fields = (node.name, node.version, arch.platform, arch.platform_os, arch.target_name)
            problem = check.problem(key, node.hash, fields) or self._dependencies(node.dependencies)
            if problem:
                check.reject(key, problem)
                continue
            self.hashes.append(key)
            self.versions.append(f"{node.name}@{node.version}")
            if not record.in_buildcache:
                continue
            compiler = own_compiler(node)
            if isinstance(compiler, Dependency):  # an edge: resolved by merge_root
                self.edges.append((len(self.specs), compiler.hash, compiler.name))
                compiler = ""
            self.specs.append(key)
            self.fields.extend([number(text, len(self.numbers)) for text in (*fields, compiler)])
            if type(node) is PlainNode:
                self._plain_variants(node.parameters)
            else:
                self._variants(node.parameters)

    def _dependencies(self, dependencies: list[Dependency]) -> str | None:
        """Why the edges make a record invalid, or None (see the module docstring).

        The common case in a few C-level calls: every edge is a key of the whole index, or, for
        a part, none is known to be missing (all become ``foreign``; :meth:`shard` keeps those
        that are not keys of the part).
        """
        hashes = [dep.hash for dep in dependencies]
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

    def _plain_variants(self, parameters: dict[str, PlainValue]) -> None:
        """:meth:`_variants` for the common case: strings, booleans and tuples of them.

        Such (name, value) pairs never compare equal across types, so the items themselves key
        the memo and are looked up in one pass in C; only pairs seen for the first time are
        rendered.
        """
        found = list(map(self.plain.get, parameters.items()))
        if None in found:
            for i, item in enumerate(parameters.items()):
                if found[i] is None:
                    found[i] = self._plain_miss(item)
        self.counts.append(len(found) - found.count(_FLAG))
        self.variants.extend(filter(_FLAG.__ne__, found))  # type: ignore[arg-type]

    def _plain_miss(self, item: tuple[str, PlainValue]) -> int:
        found = self._number(*item)
        if len(self.plain) < _MEMO_LIMIT:  # values unique to each record would not repeat
            self.plain[item] = found
        return found

    def _number(self, name: str, value: ParamValue | PlainValue) -> int:
        """The number of a variant's text in ``strings``, or :data:`_FLAG` for a flag."""
        if name in FLAGS:
            return _FLAG
        numbers = self.numbers
        return numbers.setdefault(render_variant(name, value), len(numbers))

    def _variants(self, parameters: dict[str, ParamValue]) -> None:
        """Append a spec's variants (their numbers in ``strings``) and their count.

        Each (name, value) pair is rendered once. The memo's key holds the value's type, since
        True == 1 == 1.0 as keys but each renders differently, and floats and lists by their
        text (0.0 == -0.0, [1] == [True]).
        """
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
                if len(memo) < _MEMO_LIMIT:  # values unique to each record would not repeat
                    memo[key] = found
            if found != _FLAG:
                out.append(found)
        self.counts.append(len(out))
        self.variants.extend(out)

    def shard(self, version: str) -> RootShard:
        """The finished shard."""
        check = self.check
        foreign = [] if self.complete else sorted(self.foreign - self.keys)  # type: ignore[operator]
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
        )


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
    worker's job): a part cut while the file was downloading (see :mod:`crawler.progressive`).

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
            return _root_ranges(fd, ranges, span.version, url, missing)
    version, installs = read_index(path, url, limit)
    mine = {k: v for i, (k, v) in enumerate(installs.items()) if i % shards == shard}
    part = _RootPart(installs, frozenset(missing))
    part.add(mine)
    return msgspec.msgpack.encode(part.shard(version))


def load_root_shard(data: bytes) -> RootShard:
    """Decode what :func:`summarize_root_shard` returned."""
    return msgspec.msgpack.decode(data, type=RootShard)


def _keys(valid: Iterable[str], invalid: Iterable[InvalidRecord]) -> set[str]:
    """Every key a reading listed, valid or not: as many as the records it read, unless its
    pieces repeated a key."""
    keys = set(valid)
    keys.update(record.hash for record in invalid)
    return keys


def root_gaps(shards: list[RootShard]) -> list[str] | None:
    """Dependency hashes that no shard holds, or None when shards hold the same key twice."""
    keys = _keys(
        itertools.chain.from_iterable(shard.hashes for shard in shards),
        itertools.chain.from_iterable(shard.invalid for shard in shards),
    )
    if len(keys) != sum(shard.records for shard in shards):
        return None
    return sorted({h for shard in shards for h in shard.foreign if h not in keys})


def merge_root(shards: list[RootShard]) -> SourceSummary:
    """Join the shards of a root index and resolve compiler edges against all its records."""
    valid: dict[str, str] = {}
    for shard in shards:
        valid.update(zip(shard.hashes, shard.versions, strict=True))
    rejected = _unresolved_compilers(shards, valid)
    specs: list[SpecRow] = []
    invalid: list[InvalidRecord] = [InvalidRecord(k, reason) for k, reason in rejected.items()]
    for shard in shards:
        invalid += shard.invalid
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
    invalid.sort(key=lambda r: (r.hash, r.reason))
    records = sum(shard.records for shard in shards)
    hashes = [h for shard in shards for h in shard.hashes if h not in rejected]
    summary = SourceSummary(shards[0].db_version, records, len(specs), hashes, specs, [], invalid)
    return summary


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
        if check.all_pass(keys, [n.hash for n in nodes], texts, {n.name for n in nodes}):
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
    if len(_keys(hashes, check.invalid)) != records:
        raise Overlap
    invalid = sorted(check.invalid, key=lambda r: (r.hash, r.reason))
    return SourceSummary(version, records, 0, hashes, [], identities, invalid)


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
                summary = _stack(span.version, pieces)
                return msgspec.msgpack.encode(summary)
            except (chunks.BadCut, Overlap):
                pass  # read whole below
    version, installs = read_index(path, url, limit)
    return msgspec.msgpack.encode(_stack(version, [installs]))


def load_summary(data: bytes) -> SourceSummary:
    """Decode what :func:`summarize_stack` returned."""
    return msgspec.msgpack.decode(data, type=SourceSummary)
