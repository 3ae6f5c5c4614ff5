"""Spec store: what each root record was summarised to, by DAG hash, so that a run decodes
only the records it has not seen before.

A spec's DAG hash is computed over its node and its dependencies: a record keyed by a hash
that was summarised before, in any ref of the output folder, need not be decoded again. Its
``spec`` is read as raw JSON (:class:`RawRecord`, about a tenth of the cost of decoding it),
and its SHA-1 compared with the one summarised: the same bytes under the same key summarise
alike, so the stored summary is taken as it is (the checks of one record are a function of
its key and bytes). A record whose hash is known but whose bytes differ is decoded again from
its new bytes, as a cold run would, and named in a log line (see
:func:`crawler.sync.decoding.tell_rewritten`): a mirror rewrote it, harmlessly when its summary
comes out the same (a new writer's spelling), suspiciously when it does not.

What is kept, under ``<output>/.crawler/specs/<made by>-db<N>.msgpack`` (``0.4.0+rules4``, see
:func:`~crawler.decode.records.made_by`; one file per Database version: another version's
rules may read the same bytes otherwise), is what a
:class:`~crawler.decode.shard.RootShard` keeps of a record in the build cache: identity,
compiler or compiler edge, variants and edges, each distinct text once. Records that are not
in the build cache, or that fail a check, are decoded every time (a few percent of a root).

Bounds: an entry not seen for :data:`KEEP_DAYS` days is dropped, and at most
:data:`MAX_ENTRIES` (the most recently seen) are kept; a develop-sized root's entries take
about a tenth of the root's bytes. The store is only a cache: deleted, unreadable or written
by another version, it is ignored and written anew, and the output is the same.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import time
from array import array
from pathlib import Path

import msgspec

from ..files import read_regular
from .records import made_by

log = logging.getLogger(__name__)

STORE_FORMAT = 1
DIGEST_BYTES = 20  # SHA-1 of a record's ``spec`` JSON
NO_DIGEST = bytes(DIGEST_BYTES)  # a spec whose bytes were not digested (read whole)
KEEP_DAYS = 14
MAX_ENTRIES = 500_000

Edge = tuple[str, str, tuple[str, ...], tuple[str, ...]]  # hash, name, deptypes, virtuals


class RawRecord(msgspec.Struct, gc=False):
    """A record with its spec left as JSON: enough to look it up in the store."""

    spec: msgspec.Raw
    in_buildcache: bool = False


def digest(spec: msgspec.Raw | bytes | memoryview) -> bytes:
    """What identifies a record's bytes in the store (and the store's own, in its file)."""
    return hashlib.sha1(spec, usedforsecurity=False).digest()


class SpecStore(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The stored summaries of one Database version, columns of ``array("I")`` bytes."""

    format: int
    crawler: str
    db_version: str
    strings: list[str]  # every distinct text, numbered by position
    edge_table: list[Edge]  # every distinct edge, numbered by position
    keys: list[str]
    digests: bytes  # :data:`DIGEST_BYTES` per entry
    fields: bytes  # name, version, platform, os, target, compiler ("" for an edge): 6 each
    variants: bytes  # every entry's variants, one after the other
    counts: bytes  # how many variants each entry has
    edge_numbers: bytes  # every entry's edges, one after the other
    edge_counts: bytes  # how many edges each entry has
    compilers: list[tuple[int, str, str]]  # (entry, edge hash, edge name): compiler edges
    seen: bytes  # the day (since the epoch) each entry was last read


def store_path(folder: str, db_version: str) -> Path:
    return Path(folder) / f"{made_by()}-db{db_version}.msgpack"


def today() -> int:
    """Days since the epoch: the unit of :attr:`SpecStore.seen`."""
    return int(time.time() // 86400)


class Known:
    """A store as a worker looks records up in it."""

    def __init__(self, store: SpecStore) -> None:
        self.strings = store.strings
        self.edge_table = store.edge_table
        self.edge_hashes = [edge[0] for edge in store.edge_table]
        #: Number of each text and edge (a part reading through the store starts from these).
        self.numbers = {text: i for i, text in enumerate(store.strings)}
        self.edge_numbering = {edge: i for i, edge in enumerate(store.edge_table)}
        self.where = {key: i for i, key in enumerate(store.keys)}
        self.digests = store.digests
        self.fields = array("I", store.fields)
        self.variants = array("I", store.variants)
        self.variant_at = array("I", itertools.accumulate(array("I", store.counts), initial=0))
        self.edge_numbers = array("I", store.edge_numbers)
        self.edge_at = array("I", itertools.accumulate(array("I", store.edge_counts), initial=0))
        # A develop root's 60,000 entries name a few compilers: each (hash, name) held once,
        # not once per entry (the store then takes 27 MB of a worker, not 37).
        shared: dict[tuple[str, str], tuple[str, str]] = {}
        self.compilers = {i: shared.setdefault((h, n), (h, n)) for i, h, n in store.compilers}

    def digest_of(self, i: int) -> bytes:
        return self.digests[i * DIGEST_BYTES : (i + 1) * DIGEST_BYTES]

    def texts(self, i: int) -> tuple[object, ...]:
        """Entry ``i`` as text: what its summary says, to compare with a new reading."""
        strings, edges = self.strings, self.edge_table
        fields = [strings[n] for n in self.fields[6 * i : 6 * i + 6]]
        variants = [strings[n] for n in self.variants[self.variant_at[i] : self.variant_at[i + 1]]]
        own = [edges[n] for n in self.edge_numbers[self.edge_at[i] : self.edge_at[i + 1]]]
        return fields, variants, own, self.compilers.get(i)


_DECODER = msgspec.msgpack.Decoder(SpecStore)
_ENCODER = msgspec.msgpack.Encoder()
#: The store each worker process read last, by path, with the file's identity.
_LOADED: dict[Path, tuple[tuple[int, int, int, int], Known | None]] = {}


def load_known(folder: str | None, db_version: str) -> Known | None:
    """The store of ``db_version`` in ``folder`` (read once per worker process while the file
    stays the same), or None when there is none usable: missing, unreadable, or written by
    another version (those are replaced at the end of the reading)."""
    if folder is None:
        return None
    path = store_path(folder, db_version)
    try:
        stat = os.stat(path, follow_symlinks=False)  # a link there is not read (see below)
    except OSError:
        return None
    identity = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    cached = _LOADED.get(path)
    if cached is not None and cached[0] == identity:
        return cached[1]
    store = read_store(path, db_version)
    known = Known(store) if store is not None else None
    _LOADED.clear()  # one store at a time: a worker reads one root at a time
    _LOADED[path] = (identity, known)
    return known


def encode_store(store: SpecStore) -> bytearray:
    """A store's file: the SHA-1 of its msgpack, then the msgpack (so that a file cut short
    or damaged is told from a sound one in one pass, far cheaper than checking every column)."""
    data = bytearray(DIGEST_BYTES)  # the payload written after it, not copied behind it
    _ENCODER.encode_into(store, data, DIGEST_BYTES)
    with memoryview(data) as view:
        data[:DIGEST_BYTES] = digest(view[DIGEST_BYTES:])
    return data


def forget_known() -> None:
    """Drop the store a worker holds (a few tens of MB): its root is read once stacks come."""
    _LOADED.clear()


def read_store(path: Path, db_version: str) -> SpecStore | None:
    """The store in ``path`` if this version wrote it for ``db_version`` and its checksum
    holds, else None (logged): a regular file, not a link (see :mod:`crawler.output.kept`)."""
    try:
        data = read_regular(path, follow=False)
    except FileNotFoundError:
        return None
    except OSError as err:
        log.info("ignoring the unreadable spec store %s: %s", path, err)
        return None
    payload = memoryview(data)[DIGEST_BYTES:]
    if digest(payload) != data[:DIGEST_BYTES]:
        log.info("ignoring the spec store %s: its checksum does not hold", path)
        return None
    try:
        store = _DECODER.decode(bytes(payload))
    except msgspec.DecodeError as err:
        log.info("ignoring the unreadable spec store %s: %s", path, err)
        return None
    made = (store.format, store.crawler, store.db_version)
    fits = made == (STORE_FORMAT, made_by(), db_version)
    if not fits or not _consistent(store):
        log.info("ignoring the spec store %s (another version's, or inconsistent)", path)
        return None
    return store


def _consistent(store: SpecStore) -> bool:
    """True when the columns of a store agree in length (its checksum held: this guards
    against a store written by a crawler with a bug, not against damage)."""
    entries = len(store.keys)
    counts, edge_counts = array("I"), array("I")
    try:
        counts.frombytes(store.counts)
        edge_counts.frombytes(store.edge_counts)
    except ValueError:
        return False
    return (
        len(store.digests) == DIGEST_BYTES * entries
        and len(store.seen) == 4 * entries
        and len(store.fields) == 24 * entries
        and len(counts) == len(edge_counts) == entries
        and 4 * sum(counts) == len(store.variants)
        and 4 * sum(edge_counts) == len(store.edge_numbers)
        and all(0 <= i < entries for i, _, _ in store.compilers)
    )
