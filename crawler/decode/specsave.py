"""Spec store, written: the store of a Database version after a root was read (see
:mod:`.specstore`), made from the root's shards by the main process once the root's branch is
done: it takes about 100 MB for a develop-sized root, which reuses what the branch's output
freed (made while the workers decode, by a worker while the output is built, or before the
output, it added up to 100 MB to the run's peak, to 380-430 MB of process tree).

The new store holds every record of the root that was digested (read through the store), seen
today, then the entries of the old store that the root did not hold, seen within
:data:`~.specstore.KEEP_DAYS` days, the most recently seen first, up to
:data:`~.specstore.MAX_ENTRIES` in all.
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Callable

import msgspec

from .records import made_by
from .specstore import (
    DIGEST_BYTES,
    KEEP_DAYS,
    MAX_ENTRIES,
    NO_DIGEST,
    STORE_FORMAT,
    Edge,
    SpecStore,
    encode_store,
    read_store,
    store_path,
)


class _Specs(msgspec.Struct, frozen=True, gc=False):
    """What the store keeps of a :class:`~.shard.RootShard` (its other fields are not decoded:
    the hashes and versions of every record alone are a third of a shard's memory), under the
    names of a :class:`SpecStore`'s columns."""

    strings: list[str]
    keys: list[str] = msgspec.field(name="specs")
    fields: bytes
    variants: bytes
    counts: bytes
    compilers: list[tuple[int, str, str]] = msgspec.field(name="edges")
    edge_table: list[Edge]
    edge_numbers: bytes
    edge_counts: bytes
    digests: bytes = b""


_SPECS = msgspec.msgpack.Decoder(_Specs)


class _Builder:
    """A store's columns, entry after entry; texts and edges numbered as they first come."""

    def __init__(self) -> None:
        self.strings: dict[str, int] = {}
        self.edges: dict[Edge, int] = {}
        self.keys: list[str] = []
        self.digests = bytearray()
        self.fields, self.variants, self.counts = array("I"), array("I"), array("I")
        self.edge_numbers, self.edge_counts = array("I"), array("I")
        self.compilers: list[tuple[int, str, str]] = []
        self.seen = array("I")

    def numbering(self, strings: list[str], edges: list[Edge]) -> tuple[list[int], list[int]]:
        """This store's numbers of another table's texts and edges."""
        text, edge = self.strings.setdefault, self.edges.setdefault
        return (
            [text(s, len(self.strings)) for s in strings],
            [edge(e, len(self.edges)) for e in edges],
        )

    def add_shard(self, shard: _Specs, day: int) -> None:
        """Every digested spec of a shard, seen on ``day``: whole columns at a time (a shard
        holds a few digests of nothing only when a piece could not be read through the store,
        and is then taken entry by entry)."""
        if not shard.digests:
            return
        texts, edges = self.numbering(shard.strings, shard.edge_table)
        data, step = shard.digests, DIGEST_BYTES
        digests = [data[i : i + step] for i in range(0, len(data), step)]
        if NO_DIGEST in digests:
            chosen = [j for j, found in enumerate(digests) if found != NO_DIGEST]
            self._add_entries(shard, texts, edges, chosen, lambda _: day)
            return
        first = len(self.keys)
        self.keys += shard.keys
        self.digests += shard.digests
        self.fields.extend(map(texts.__getitem__, array("I", shard.fields)))
        self.variants.extend(map(texts.__getitem__, array("I", shard.variants)))
        self.counts.frombytes(shard.counts)
        self.edge_numbers.extend(map(edges.__getitem__, array("I", shard.edge_numbers)))
        self.edge_counts.frombytes(shard.edge_counts)
        self.compilers += [(first + i, h, name) for i, h, name in shard.compilers]
        self.seen.extend([day] * len(shard.keys))

    def add_old(self, old: SpecStore, day: int) -> None:
        """The old store's entries that are neither in this one nor too old, newest first."""
        taken = set(self.keys)
        seen = array("I", old.seen)
        kept = [
            i for i, key in enumerate(old.keys) if key not in taken and day - seen[i] <= KEEP_DAYS
        ]
        kept.sort(key=seen.__getitem__, reverse=True)  # stable: ties keep the old order
        kept = sorted(kept[: max(0, MAX_ENTRIES - len(self.keys))])
        if kept:
            texts, edges = self.numbering(old.strings, old.edge_table)
            self._add_entries(old, texts, edges, kept, seen.__getitem__)

    def _add_entries(
        self,
        source: _Specs | SpecStore,
        texts: list[int],
        edges: list[int],
        chosen: list[int],
        seen: Callable[[int], int],
    ) -> None:
        """Entries ``chosen`` of a shard or a store, one at a time, numbered as this store
        numbers ``source``'s ``texts`` and ``edges``; ``seen`` gives each one's day."""
        fields, variants = array("I", source.fields), array("I", source.variants)
        edge_numbers = array("I", source.edge_numbers)
        variant_at = list(itertools.accumulate(array("I", source.counts), initial=0))
        edge_at = list(itertools.accumulate(array("I", source.edge_counts), initial=0))
        compilers = {i: (h, name) for i, h, name in source.compilers}
        for i in chosen:
            compiler = compilers.get(i)
            if compiler is not None:
                self.compilers.append((len(self.keys), *compiler))
            self.keys.append(source.keys[i])
            self.digests += source.digests[i * DIGEST_BYTES : (i + 1) * DIGEST_BYTES]
            self.fields.extend([texts[n] for n in fields[6 * i : 6 * i + 6]])
            self.counts.append(variant_at[i + 1] - variant_at[i])
            self.variants.extend([texts[n] for n in variants[variant_at[i] : variant_at[i + 1]]])
            self.edge_counts.append(edge_at[i + 1] - edge_at[i])
            self.edge_numbers.extend([edges[n] for n in edge_numbers[edge_at[i] : edge_at[i + 1]]])
            self.seen.append(seen(i))

    def store(self, db_version: str) -> SpecStore:
        return SpecStore(
            STORE_FORMAT,
            made_by(),
            db_version,
            list(self.strings),  # insertion order: position == number
            list(self.edges),
            self.keys,
            bytes(self.digests),
            self.fields.tobytes(),
            self.variants.tobytes(),
            self.counts.tobytes(),
            self.edge_numbers.tobytes(),
            self.edge_counts.tobytes(),
            self.compilers,
            self.seen.tobytes(),
        )


def updated_store(folder: str, db_version: str, shards: list[bytes], day: int) -> bytearray:
    """The store of ``db_version`` in ``folder`` once the root whose shards these are (as the
    workers encoded them) was read on ``day``, as its file holds it."""
    builder = _Builder()
    for data in shards:  # one at a time: each is a few tens of MB decoded
        builder.add_shard(_SPECS.decode(data), day)
    old = read_store(store_path(folder, db_version), db_version)
    if old is not None:
        builder.add_old(old, day)
    return encode_store(builder.store(db_version))
