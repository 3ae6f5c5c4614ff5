"""Consolidate: merge the summaries of one ref's indexes into per-package summaries.

This is the reference generator's algorithm (FORMAT.md section 3), with deduplication made
explicit: a spec is a root record in the build cache; its ``stacks`` are the labels of every
index of the ref (root included) whose ``installs`` hold its hash, in the build cache or not. A
hash that only a stack holds is not a spec. When a stack states a different name, version,
platform, os or target for a root spec's hash, a conflict is reported and the root's values are
kept; the stack still counts for that spec, since it holds the same hash.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections import Counter
from collections.abc import Iterator, Mapping
from operator import attrgetter
from typing import NamedTuple

import msgspec

from .validate import IDENTITY_FIELDS, IDENTITY_SEPARATOR, SourceSummary, SpecRow

SIZE_UNKNOWN = "-"


class SpecDetail(msgspec.Struct, frozen=True, gc=False):
    """One entry of ``spec_details``; field names are the JSON keys."""

    compiler: str
    hash: str
    os: str
    platform: str
    size: str
    stacks: tuple[str, ...]
    target: str
    variants: tuple[str, ...]
    versions: tuple[str]


class PackageMeta(msgspec.Struct, frozen=True, gc=False):
    """A package's ``meta``; field names are the JSON keys."""

    compilers: list[str]
    num_specs: int
    num_specs_by_stack: dict[str, int]
    oss: list[str]
    platforms: list[str]
    stacks: list[str]
    targets: list[str]
    versions: list[str]


class PackageSummary(msgspec.Struct, frozen=True, gc=False):
    """What a downstream consumer reads for one package of one ref."""

    meta: PackageMeta
    spec_details: list[SpecDetail]


class Conflict(msgspec.Struct, frozen=True, gc=False):
    """A stack disagreeing with the root about a spec; the root's value is kept."""

    hash: str
    source: str
    field: str
    root: str
    stack: str


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside the block.

    Building a branch's summaries allocates hundreds of thousands of tuples, strings and
    structs, and each few hundred allocations start a collection that walks the live
    containers: paused, the work takes about a third less time. None of it forms reference
    cycles, so nothing is left for the collector when it resumes.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Consolidator:
    """Consolidates a ref: its stacks one by one, in any order, and its root.

    A sync folds each stack in as soon as it is decoded, while the root and other stacks still
    download or decode: folding needs nothing of the root. It only notes, for every hash, the
    stacks holding it and what the first of them says it is (and what any other stack says, if
    it says something else). What only the root decides (its specs grouped by package and
    sorted, their identities, the root's part of each package's meta) is prepared when the root
    is in (:meth:`prepare`), while the last stacks still decode. :meth:`finish` is left with
    one pass over the root's specs for their stacks and conflicts. The result does not depend
    on the order: labels are sorted, conflicts are listed by stack, then hash.
    """

    def __init__(self, root_label: str = "root") -> None:
        self.root_label = root_label
        self._holders: dict[str, list[str]] = {}  # hash -> labels of the stacks holding it
        self._stated: dict[str, str] = {}  # hash -> identity its first stack states
        #: hash -> {label: identity} of the stacks that state another identity than the first
        self._unlike: dict[str, dict[str, str]] = {}
        self._folded: set[str] = set()
        self._root: _PreparedRoot | None = None
        self._finished = False

    @property
    def folded(self) -> set[str]:
        """The labels of the stacks folded in so far."""
        return set(self._folded)

    def add(self, label: str, hashes: list[str], identities: list[str]) -> None:
        """Fold in one stack: its valid records' hashes (each once) and identities, as in its
        :class:`SourceSummary`."""
        self._not_finished()
        if label in self._folded:
            raise ValueError(f"stack {label!r} is already consolidated")
        if label == self.root_label:
            raise ValueError(f"{label!r} is the root's label, not a stack's")
        if len(hashes) != len(identities):
            raise ValueError(f"stack {label!r}: {len(hashes)} hashes, {len(identities)} identities")
        self._folded.add(label)
        holders, stated = self._holders, self._stated
        with paused_gc():
            for key, text in zip(hashes, identities):  # noqa: B905 - lengths checked above
                labels = holders.get(key)
                if labels is None:
                    holders[key] = [label]
                    stated[key] = text
                elif labels[-1] != label:  # a hash listed twice counts once (summaries don't)
                    labels.append(label)
                    if text != stated[key]:
                        self._unlike.setdefault(key, {})[label] = text

    def prepare(self, root: SourceSummary) -> None:
        """Do now what only the root decides; :meth:`finish` with another root does it again."""
        self._not_finished()
        with paused_gc():
            self._root = _PreparedRoot(root)

    def finish(self, root: SourceSummary) -> tuple[dict[str, PackageSummary], list[Conflict]]:
        """Per-package summaries (sorted by name) and the conflicts, from the root and the
        stacks folded in; nothing can be folded in afterwards."""
        self._not_finished()
        self._finished = True
        with paused_gc():
            prepared = self._root
            if prepared is None or prepared.root is not root:
                prepared = _PreparedRoot(root)
            holders, stated, unlike = self._holders, self._stated, self._unlike
            # Free what only folding needed once it is used (the caller may hold the root).
            self._holders, self._stated, self._unlike, self._root = {}, {}, {}, None
            keys, rows = prepared.keys, prepared.rows
            held = list(map(holders.get, keys))
            conflicts: dict[str, list[Conflict]] = {label: [] for label in self._folded}
            firsts = list(map(stated.get, keys))
            for key, stacks, first, ours in zip(
                keys, held, firsts, prepared.identities, strict=True
            ):
                if stacks is not None and (first != ours or key in unlike):
                    their, stated_first = unlike.get(key, {}), stated[key]
                    for label in stacks:
                        theirs = their.get(label, stated_first)
                        _disagree(conflicts[label], key, label, ours, theirs)
            labels = self._labels(held)
            del holders, stated, unlike, held, firsts
            packages = {
                name: _package(rows[start:end], labels[start:end], meta)
                for name, start, end, meta in prepared.packages
            }
        # Found in package order: by stack, then hash (a stable sort keeps the fields' order).
        by_hash = attrgetter("hash")
        return packages, [
            c for label in sorted(conflicts) for c in sorted(conflicts[label], key=by_hash)
        ]

    def _labels(self, held: list[list[str] | None]) -> list[tuple[str, ...]]:
        """The sorted labels of each spec's indexes, from the stacks holding it (or None)."""
        alone: tuple[str, ...] = (self.root_label,)
        # Equal label lists are shared: 60,000+ specs hold few distinct combinations.
        shared: dict[tuple[str, ...], tuple[str, ...]] = {}
        labels = []
        for stacks in held:
            if stacks is None:
                labels.append(alone)
                continue
            unsorted = tuple(stacks)
            found = shared.get(unsorted)
            if found is None:
                found = shared[unsorted] = tuple(sorted((*stacks, self.root_label)))
            labels.append(found)
        return labels

    def _not_finished(self) -> None:
        if self._finished:
            raise ValueError("the consolidation is finished")


class _PreparedRoot:
    """What only the root decides: its specs sorted by package, then hash, with their hashes
    and identities in the same order, and each package's span of them and root meta."""

    def __init__(self, root: SourceSummary) -> None:
        self.root = root
        self.rows = sorted(root.specs, key=attrgetter("name", "hash"))
        self.keys = [row.hash for row in self.rows]
        self.identities = [row.identity() for row in self.rows]
        self.packages: list[tuple[str, int, int, _RootMeta]] = []
        start = 0
        for name, group in itertools.groupby(self.rows, key=attrgetter("name")):
            rows = list(group)
            end = start + len(rows)
            self.packages.append((name, start, end, _RootMeta.of(rows)))
            start = end


def _disagree(conflicts: list[Conflict], key: str, label: str, ours: str, theirs: str) -> None:
    """Note where a stack's identity of a root spec differs from the root's, field by field."""
    if theirs == ours:
        return
    for field, a, b in zip(
        IDENTITY_FIELDS,
        ours.split(IDENTITY_SEPARATOR),
        theirs.split(IDENTITY_SEPARATOR),
        strict=True,
    ):
        if a != b:
            conflicts.append(Conflict(key, label, field, a, b))


class _RootMeta(NamedTuple):
    """The part of a package's ``meta`` that only the root's records decide."""

    compilers: list[str]
    oss: list[str]
    platforms: list[str]
    targets: list[str]
    versions: list[str]

    @classmethod
    def of(cls, rows: list[SpecRow]) -> _RootMeta:
        return cls(
            compilers=sorted({row.compiler for row in rows}),
            oss=sorted({row.os for row in rows}),
            platforms=sorted({row.platform for row in rows}),
            targets=sorted({row.target for row in rows}),
            versions=sorted({row.version for row in rows}),
        )


def _package(rows: list[SpecRow], labels: list[tuple[str, ...]], meta: _RootMeta) -> PackageSummary:
    """A package's summary from its rows, sorted by hash, and each one's stacks."""
    details = [
        SpecDetail(
            row.compiler,
            row.hash,
            row.os,
            row.platform,
            SIZE_UNKNOWN,
            stacks,
            row.target,
            row.variants,
            (row.version,),
        )
        for row, stacks in zip(rows, labels, strict=True)
    ]
    by_stack = Counter(itertools.chain.from_iterable(labels))
    return PackageSummary(
        PackageMeta(
            compilers=meta.compilers,
            num_specs=len(details),
            num_specs_by_stack=dict(sorted(by_stack.items())),
            oss=meta.oss,
            platforms=meta.platforms,
            stacks=sorted(by_stack),
            targets=meta.targets,
            versions=meta.versions,
        ),
        details,
    )


def consolidate(
    root: SourceSummary, stacks: Mapping[str, SourceSummary], root_label: str = "root"
) -> tuple[dict[str, PackageSummary], list[Conflict]]:
    """Per-package summaries of a ref (sorted by name) and the conflicts between its indexes."""
    consolidator = Consolidator(root_label)
    for label, summary in stacks.items():
        consolidator.add(label, summary.hashes, summary.identities)
    return consolidator.finish(root)
