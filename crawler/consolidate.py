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
from collections import Counter, defaultdict
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
    """Consolidates a ref: its root summary first, then its stacks one by one, in any order.

    A sync folds each stack in as soon as both it and the root are decoded, while other stacks
    are still decoding, so that little is left to do once the last one is in. The result does
    not depend on the order: labels are sorted, conflicts are listed by stack, then hash.
    """

    def __init__(self, root: SourceSummary, root_label: str = "root") -> None:
        with paused_gc():
            self.root = root
            self._ours = {row.hash: row.identity() for row in root.specs}
            self._specs = set(self._ours)
            self._agreed = set(self._ours.items())
            self._where = {key: [root_label] for key in self._ours}
            self._conflicts: dict[str, list[Conflict]] = {}
            self._finished = False
            # What the stacks cannot change, found now, while stacks still decode: the
            # packages, their specs sorted by hash, and the root's part of their meta.
            by_package: dict[str, list[SpecRow]] = defaultdict(list)
            for row in sorted(root.specs, key=attrgetter("hash")):  # details by hash
                by_package[row.name].append(row)
            self._packages = {
                name: (rows, _RootMeta.of(rows)) for name, rows in sorted(by_package.items())
            }

    @property
    def folded(self) -> set[str]:
        """The labels of the stacks folded in so far."""
        return set(self._conflicts)

    def add(self, label: str, hashes: list[str], identities: list[str]) -> None:
        """Fold in one stack (its valid records' hashes and identities, as in its
        :class:`SourceSummary`): which root specs it holds, where it disagrees with the root."""
        if label in self._conflicts:
            raise ValueError(f"stack {label!r} is already consolidated")
        if self._finished:
            raise ValueError("the consolidation is finished")
        with paused_gc():
            self._conflicts[label] = self._add(label, hashes, identities)

    def _add(self, label: str, hashes: list[str], identities: list[str]) -> list[Conflict]:
        held = self._specs.intersection(hashes)
        where = self._where
        for key in held:
            where[key].append(label)
        same = self._agreed.intersection(zip(hashes, identities, strict=True))
        if len(same) == len(held):
            return []  # the usual case, found with set operations alone
        theirs = dict(zip(hashes, identities, strict=True))
        conflicts = []
        for key in sorted(held - {key for key, _ in same}):
            for field, a, b in zip(
                IDENTITY_FIELDS,
                self._ours[key].split(IDENTITY_SEPARATOR),
                theirs[key].split(IDENTITY_SEPARATOR),
                strict=True,
            ):
                if a != b:
                    conflicts.append(Conflict(key, label, field, a, b))
        return conflicts

    def finish(self) -> tuple[dict[str, PackageSummary], list[Conflict]]:
        """Per-package summaries (sorted by name) and the conflicts, from what was folded in;
        nothing can be folded in afterwards."""
        if self._finished:
            raise ValueError("the consolidation is finished")
        self._finished = True
        with paused_gc():
            where = self._where
            # Free what only folding needed before the packages are built.
            self._ours, self._agreed, self._specs, self._where = {}, set(), set(), {}
            # Equal label tuples are shared: 60,000+ specs hold few distinct combinations.
            shared: dict[tuple[str, ...], tuple[str, ...]] = {}
            packages = {}
            for name, (rows, meta) in self._packages.items():
                labels = []
                for row in rows:
                    unsorted = tuple(where[row.hash])
                    sorted_labels = shared.get(unsorted)
                    if sorted_labels is None:
                        sorted_labels = shared[unsorted] = tuple(sorted(unsorted))
                    labels.append(sorted_labels)
                packages[name] = _package(rows, labels, meta)
            self._packages = {}
        conflicts = [c for label in sorted(self._conflicts) for c in self._conflicts[label]]
        return packages, conflicts


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
    consolidator = Consolidator(root, root_label)
    for label, summary in stacks.items():
        consolidator.add(label, summary.hashes, summary.identities)
    return consolidator.finish()
