"""Shard: a root index's records, checked and reduced to one :class:`RootShard`.

:class:`RootPart` takes a shard's pieces (:mod:`.read`) one after the other, and keeps what the
branch needs of each valid record: its hash, its identity, its variants (each distinct text
once) and its compiler, or the edge that names it (resolved by :func:`.root.merge_root`).

Memory. What a worker keeps grows with valid records only: an invalid record leaves the digest
of its key (8 bytes), and its reason only while it is among the first listed; an index with
more than :data:`crawler.decode.validate.MAX_INVALID` fails at once.

Dependencies. A record is invalid when a dependency's hash is not a key of the index. A shard
that reads a share of the file cannot tell on its own, so it accepts such records and lists the
hashes it did not hold (``foreign``); :func:`.root.root_gaps` looks them up among every shard's
keys, and when some are absent the shards are run again with that list, which then rejects the
records pointing at them.

The spec store. A part reading through it (:mod:`.specstore`, :meth:`RootPart.add_digested`)
takes the records it summarised from it, and decodes the others; it keeps each spec's digest,
for the store to be written anew (:mod:`.specsave`).
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Sequence

import msgspec

from .problems import bad_edge, compiler_problem, virtuals_problem
from .read import ROOT, Digested, Records, typed
from .records import Dependency, PlainNode, Record
from .specstore import NO_DIGEST, Edge, Known
from .validate import (
    MAX_COMPILER,
    MAX_DEPENDENCIES,
    Checker,
    InvalidRecord,
    all_hashes,
    key_digest,
    own_compiler,
    too_large,
    unprintable,
)
from .variants import VariantNumbers


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
    #: The distinct edges of the specs, (hash, name, dependency types, virtuals) each once: a
    #: develop root's 60,000 specs have about 800,000 edges, mostly to the same few thousand
    #: records.
    edge_table: list[Edge]
    edge_numbers: bytes  # ``array("I")`` bytes: each spec's edges, numbers in ``edge_table``
    edge_counts: bytes  # ``array("I")`` bytes: how many edges each spec has
    #: Read through the spec store: each spec's :func:`.specstore.digest` (or
    #: :data:`.specstore.NO_DIGEST`), for the store to keep; else empty.
    digests: bytes = b""
    #: Records whose hash the store knew with other bytes, and whether their summary changed.
    rewritten: list[tuple[str, bool]] = []
    known: int = 0  # records taken from the spec store, not decoded


class RootPart:
    """Builds a :class:`RootShard`, piece after piece."""

    def __init__(self, missing: frozenset[str], known: Known | None = None) -> None:
        self.check = Checker()
        self.keys: set[str] = set()  # the valid keys seen so far
        self.missing = missing
        self.foreign: set[str] = set()
        self.records = 0
        self.numbers: dict[str, int] = {}
        self.hashes: list[str] = []
        self.versions: list[str] = []
        self.specs: list[str] = []
        self.fields = array("I")
        self.variants = array("I")
        self.counts = array("I")
        self.edges: list[tuple[int, str, str]] = []
        self.edge_table: dict[Edge, int] = {}
        self.edge_numbers = array("I")
        self.edge_counts = array("I")
        self.known = known  # the spec store, if it has entries (see :meth:`add_digested`)
        self.taken = 0  # records taken from the store
        self.digests: bytearray | None = None  # each spec's, read through the store
        self.rewritten: list[tuple[str, bool]] = []
        if known is not None:  # numbered as the store numbers them (see :meth:`_take`)
            self.numbers = known.numbers.copy()
            self.edge_table = known.edge_numbering.copy()
        self.variant_numbers = VariantNumbers(self.numbers)  # shares the strings' numbering

    def add_digested(self, piece: Digested) -> None:
        """A piece read through the spec store: its known records taken from the store, the
        others checked and reduced, each spec's digest kept."""
        if self.digests is None:
            self.digests = bytearray()
        if piece.known:
            self._take(piece.known)
        before = len(self.specs)
        self.add(piece.records, piece.digests)
        if piece.rewritten:
            assert self.known is not None
            changed = self._changed(before, piece.rewritten)
            self.rewritten += [(key, key in changed) for key, _ in piece.rewritten]

    def add(self, records: Records[Record], digests: dict[str, bytes] | None = None) -> None:
        """Check and reduce every record of a piece (with their ``digests``, if read through
        the spec store)."""
        self.records += len(records)
        check, number = self.check, self.numbers.setdefault
        before = len(self.hashes)
        for key, record in typed(records, ROOT, check).items():
            node = record.spec
            arch = node.arch
            fields = (node.name, node.version, arch.platform, arch.platform_os, arch.target_name)
            problem = check.problem(key, node.hash, fields) or self._dependencies(node.dependencies)
            found: list[int] | str = []
            if not problem and record.in_buildcache:
                compiler = own_compiler(node)
                if type(node) is PlainNode:
                    found = self.variant_numbers.plain(node.parameters)
                else:
                    found = self.variant_numbers.of(node.parameters)
                if type(found) is str:
                    problem = found
                elif (  # each case that compiler_problem names, tested in C first
                    type(compiler) is not str
                    or len(compiler) > MAX_COMPILER
                    or compiler[:1] in ("", "@")
                    or not compiler.isprintable()
                ):
                    problem = compiler_problem(compiler)  # the common case passes in C above
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
            self._edges(node.dependencies)
            if self.digests is not None:
                self.digests += digests.get(key, NO_DIGEST) if digests else NO_DIGEST
        self.keys.update(self.hashes[before:])  # only valid keys: an invalid one may be long

    def _take(self, hits: Sequence[tuple[str, int]]) -> None:
        """Entries of the spec store, records whose bytes it summarised (in the build cache,
        valid but for their edges, which are checked here as a decoded record's), by key.

        A piece's entries at once, their numbers copied as they are: the part numbers texts
        and edges as the store does (see :meth:`__init__`)."""
        known = self.known
        assert known is not None
        self.records += len(hits)
        self.taken += len(hits)
        if self.missing:
            hits = self._reject_missing(hits)
        fields, variants, edges = known.fields, known.variants, known.edge_numbers
        variant_at, edge_at = known.variant_at, known.edge_at
        first, start = len(self.specs), len(self.fields)
        add_fields, add_variants, add_edges = (
            self.fields.extend,
            self.variants.extend,
            self.edge_numbers.extend,
        )
        for _, i in hits:  # the part numbers texts and edges as the store does: no translation
            add_fields(fields[6 * i : 6 * i + 6])
            add_variants(variants[variant_at[i] : variant_at[i + 1]])
            add_edges(edges[edge_at[i] : edge_at[i + 1]])
        self.counts.extend([variant_at[i + 1] - variant_at[i] for _, i in hits])
        self.edge_counts.extend([edge_at[i + 1] - edge_at[i] for _, i in hits])
        used = {n for _, i in hits for n in edges[edge_at[i] : edge_at[i + 1]]}
        self.foreign.update(map(known.edge_hashes.__getitem__, used))
        keys = [key for key, _ in hits]
        strings, taken = known.strings, self.fields[start:]
        self.hashes += keys
        self.versions += [
            f"{strings[name]}@{strings[version]}"
            for name, version in zip(taken[0::6], taken[1::6], strict=True)
        ]
        compilers = known.compilers
        self.edges += [
            (first + j, *compilers[i]) for j, (_, i) in enumerate(hits) if i in compilers
        ]
        self.specs += keys
        assert self.digests is not None
        self.digests += b"".join(map(known.digest_of, (i for _, i in hits)))
        self.keys.update(keys)

    def _reject_missing(self, hits: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
        """The entries whose edges point at no dependency known to be absent; the others are
        rejected as a decoded record would be."""
        known = self.known
        assert known is not None
        kept = []
        for key, i in hits:
            numbers = known.edge_numbers[known.edge_at[i] : known.edge_at[i + 1]]
            edges = [known.edge_table[n] for n in numbers]
            if self.missing.isdisjoint(edge[0] for edge in edges):
                kept.append((key, i))
                continue
            problem = self._bad_dependency([Dependency(name, h) for h, name, *_ in edges])
            assert problem is not None  # an edge is missing: never among the keys
            self.check.reject(key, problem)
        return kept

    def _changed(self, start: int, rewritten: Sequence[tuple[str, int]]) -> set[str]:
        """Which rewritten records (added from ``start`` on) summarise otherwise than the
        store's entries for their hash (or are now rejected)."""
        known = self.known
        assert known is not None
        texts, edge_list = list(self.numbers), list(self.edge_table)
        at = {key: j for j, key in enumerate(self.specs[start:], start)}
        compilers = {j: (h, name) for j, h, name in self.edges if j >= start}
        variant_at = list(itertools.accumulate(self.counts, initial=0))
        edge_at = list(itertools.accumulate(self.edge_counts, initial=0))
        changed = set()
        for key, i in rewritten:
            j = at.get(key)
            if j is None:
                changed.add(key)
                continue
            ours = (
                [texts[n] for n in self.fields[6 * j : 6 * j + 6]],
                [texts[n] for n in self.variants[variant_at[j] : variant_at[j + 1]]],
                [edge_list[n] for n in self.edge_numbers[edge_at[j] : edge_at[j + 1]]],
                compilers.get(j),
            )
            if ours != known.texts(i):
                changed.add(key)
        return changed

    def _edges(self, dependencies: list[Dependency]) -> None:
        """Note a spec's edges, each distinct one numbered once."""
        table = self.edge_table
        number = table.setdefault
        self.edge_counts.append(len(dependencies))
        self.edge_numbers.extend(
            [
                number((dep.hash, dep.name, dep.deptypes(), dep.virtuals()), len(table))
                for dep in dependencies
            ]
        )

    def _dependencies(self, dependencies: list[Dependency]) -> str | None:
        """Why the edges make a record invalid, or None (see the module docstring).

        The common case in a few C-level calls: no edge is known to be missing (all become
        ``foreign``; :meth:`shard` keeps those that are not keys of the part).
        """
        if len(dependencies) > MAX_DEPENDENCIES:
            return too_large("dependencies", len(dependencies), MAX_DEPENDENCIES, "edges")
        hashes = [dep.hash for dep in dependencies]
        if not all_hashes(hashes):
            return bad_edge(dependencies)
        if not "".join([dep.name for dep in dependencies]).isprintable():  # C first, then which
            return next(filter(None, (unprintable("dependency", d.name) for d in dependencies)))
        problem = virtuals_problem(dependencies)  # published in links.json
        if problem:
            return problem
        if not self.missing or self.missing.isdisjoint(hashes):
            self.foreign.update(hashes)
            return None
        return self._bad_dependency(dependencies)

    def _bad_dependency(self, dependencies: list[Dependency]) -> str | None:
        keys = self.keys
        for dep in dependencies:
            found = dep.hash
            if found in keys:
                continue
            if found in self.missing:
                return f"dependency {dep.name}/{found} is not in this index"
            self.foreign.add(found)
        return None

    def shard(self, version: str) -> RootShard:
        check = self.check
        foreign = sorted(self.foreign - self.keys)
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
            list(self.edge_table),  # insertion order: position == number
            self.edge_numbers.tobytes(),
            self.edge_counts.tobytes(),
            bytes(self.digests) if self.digests is not None else b"",
            self.rewritten,
            self.taken,
        )
