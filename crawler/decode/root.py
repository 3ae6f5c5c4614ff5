"""Root: a root index summarised by every worker at once, and its shards joined.

:func:`summarize_root_shard` and :func:`summarize_root_part` run in worker processes (see
:mod:`crawler.decode.pool`): each reads a share of the file (:mod:`.read`) and returns one
:class:`.shard.RootShard` as msgpack bytes, cheap to send back. The main process checks the
shards' dependencies across each other (:func:`root_gaps`) and joins them
(:func:`merge_root`), resolving compiler edges against every record of the index.
"""

from __future__ import annotations

import itertools
import os
from array import array

import msgspec

from ..documents import SpecDependency
from ..files import open_regular
from . import chunks
from .read import (
    DEFAULT_INDEX_LIMIT,
    ROOT,
    Overlap,
    at_most_invalid,
    distinct,
    read_digested,
    read_pieces,
    read_whole,
)
from .shard import RootPart, RootShard
from .specstore import Edge, load_known
from .stack import load_summary
from .validate import (
    InvalidRecord,
    Kind,
    SourceSummary,
    SpecRow,
    first_invalid,
    key_digest,
)


def summarize_root_part(
    path: str,
    url: str,
    version: str,
    start: int,
    stop: int,
    missing: tuple[str, ...] = (),
    file_id: tuple[int, int] | None = None,
    store: str | None = None,
) -> bytes:
    """Check and reduce the records ``[start, stop)`` of a root index of DB ``version`` (a
    worker's job): a part cut while the file was downloading (see :mod:`.progressive`).
    ``store``: the spec store's folder (:mod:`.specstore`), if records are read through it.

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
        with at_most_invalid(url):
            ranges = chunks.split(fd, start, stop)
            return _root_ranges(fd, ranges, version, url, missing, store)


def _root_ranges(
    fd: int,
    ranges: list[tuple[int, int]],
    version: str,
    url: str,
    missing: tuple[str, ...],
    store: str | None,
) -> bytes:
    if store is None:
        part = RootPart(frozenset(missing))
        for piece in read_pieces(fd, ranges, version, url, ROOT):
            part.add(piece)
    else:
        known = load_known(store, version)
        part = RootPart(frozenset(missing), known)
        for digested in read_digested(fd, ranges, version, url, known):
            part.add_digested(digested)
    return msgspec.msgpack.encode(part.shard(version))


def summarize_root_shard(
    path: str,
    url: str,
    shard: int = 0,
    shards: int = 1,
    missing: tuple[str, ...] = (),
    whole: bool = False,
    limit: int = DEFAULT_INDEX_LIMIT,
    store: str | None = None,
) -> bytes:
    """Check and reduce shard ``shard`` of ``shards`` of a root index (a worker's job).

    Read in pieces, a shard is a contiguous share of the file; read ``whole`` (or when the file
    cannot be cut), every shard decodes the whole envelope and takes every ``shards``-th record.
    ``missing`` lists dependency hashes known to be absent from the index (see
    :func:`root_gaps`); ``limit`` bounds a gunzipped index (:func:`.read.read_whole`). Returns
    msgpack of :class:`RootShard`; raises :class:`chunks.BadCut` when a piece does not decode
    (the caller then asks for ``whole``). ``store`` as for :func:`summarize_root_part` (a
    root read whole does not go through it).
    """
    with open(open_regular(path), "rb") as file:
        fd = file.fileno()
        span = None if whole else chunks.layout(fd)
        if span is not None:
            ranges = chunks.pieces(fd, span, shard, shards)
            with at_most_invalid(url):
                return _root_ranges(fd, ranges, span.version, url, missing, store)
    if shard:  # read whole, a document is one job: the other shards are empty
        return msgspec.msgpack.encode(RootPart(frozenset()).shard(""))
    with at_most_invalid(url):
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
    version, pieces = read_whole(path, url, ROOT, limit, last_first)
    part = RootPart(frozenset(missing))
    for piece in pieces:
        part.add(piece)
    return part.shard(version)


def load_root_shard(data: bytes) -> RootShard:
    """Decode what :func:`summarize_root_shard` returned."""
    return msgspec.msgpack.decode(data, type=RootShard)


def root_gaps(shards: list[RootShard]) -> list[str] | None:
    """Dependency hashes that no shard holds, or None when shards hold the same key twice."""
    valid = set(itertools.chain.from_iterable(shard.hashes for shard in shards))
    rejected = array("Q")
    for shard in shards:
        rejected.frombytes(shard.rejected)
    if distinct(valid, rejected) != sum(shard.records for shard in shards):
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
    table: dict[Edge, int] = {}
    for shard in shards:
        number = table.setdefault
        edge_numbers = [number(edge, len(table)) for edge in shard.edge_table]
        spec_edges = [edge_numbers[n] for n in array("I", shard.edge_numbers)]
        edge_counts = array("I", shard.edge_counts)
        edge_at = 0
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
            own = tuple(spec_edges[edge_at : edge_at + edge_counts[i]])
            edge_at += edge_counts[i]
            if key in rejected:
                continue
            if i in edges:
                compiler = valid[edges[i]]
            row = SpecRow(key, name, version, platform, os_, target, compiler, rendered, own)
            specs.append(row)
    records = sum(shard.records for shard in shards)
    hashes = [h for shard in shards for h in shard.hashes if h not in rejected]
    dependencies = [SpecDependency(*edge) for edge in table]
    return SourceSummary(
        shards[0].db_version,
        records,
        len(specs),
        hashes,
        specs,
        [],
        invalid,
        total - len(invalid),
        dependencies,
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


def summary_of(kind: Kind, parts: list[bytes]) -> SourceSummary:
    """The summary of what the decoding workers returned for one index (a root's shards
    joined, a stack's one part), from a read or from the cache."""
    if kind == "root":
        return merge_root([load_root_shard(part) for part in parts])
    (part,) = parts
    return load_summary(part)
