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

from ..decode.validate import IDENTITY_FIELDS, IDENTITY_SEPARATOR, SourceSummary, SpecRow
from ..documents import (
    Conflict,
    PackageMeta,
    PackageSummary,
    SpecDependency,
    SpecDetail,
)
from ..linkfile import EdgeTable, PackedLinks, PackedSpecLinks, Renumbering
from ..mirror.discovery import ROOT_LABEL
from ..targets import Targets
from .locations import Caches

SIZE_UNKNOWN = "-"


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """No cyclic garbage collection inside the block.

    Building a branch's summaries allocates hundreds of thousands of tuples, strings and
    structs, and each few hundred allocations start a collection that walks the live
    containers: paused, the work takes about a third less time. None of it forms reference
    cycles, so nothing is left for the collector when it resumes.

    Resumed as it is, the collector would walk all of it once at its next pass (half a second
    after a develop-sized build, measured; a cold sync's main process 1.2 CPU-s, see
    docs/performance.md, 2026-12-01): what the process tracks is frozen instead (all of
    it, not only what the block made: moved out of the collector's generations; reference
    counting still frees it), and :func:`thawed_gc` around each branch of a run gives it back
    to the collector once the branch is done, so that a reference cycle frozen meanwhile is
    not kept until the run ends.

    The switch is the process's: a block in a thread (see :func:`prepare_root`) pauses the
    collector for the event loop's thread too, and blocks that overlap in two threads may
    resume it before the later one ends. Either costs time at most, never correctness.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.enable()


@contextlib.contextmanager
def thawed_gc() -> Iterator[None]:
    """Whatever :func:`paused_gc` froze inside the block is given back to the collector at
    its end: a cycle made before a freeze (by the event loop, a library) is then collected
    as usual, also in a program that runs many syncs. (Objects a host program froze itself
    are given back too: they are collected only if they are garbage.)"""
    try:
        yield
    finally:
        gc.unfreeze()


class Consolidator:
    """Consolidates a ref: its stacks one by one, in any order, and its root.

    A sync hands each stack over as soon as it is decoded. Before the root is in, a stack waits
    with its hashes and identities joined into two strings (a few MB, where 180,000 string
    objects take tens, and free in one piece). When the root is in (:meth:`prepare`), while
    the last stacks still decode, what only the root decides is prepared (its specs grouped by
    package and sorted, their identities, the root's part of each package's meta), and every
    stack is folded in: which specs it holds, where it disagrees with the root. :meth:`finish`
    is left with the label tuples, the conflicts and the packages. The result does not depend
    on the order: labels are sorted, conflicts are listed by stack, then hash.
    """

    def __init__(self) -> None:
        self._waiting: list[tuple[str, str, str]] = []  # label, hashes, identities
        self._folded: set[str] = set()
        self._root: PreparedRoot | None = None
        self._holders: list[list[str] | None] = []  # of each prepared spec: stacks holding it
        #: label -> (spec, identity) of each spec the stack states another identity for
        self._unlike: dict[str, list[tuple[int, str]]] = {}
        self._finished = False
        #: Known once :meth:`finish` ran: the specs' targets that archspec does not know.
        self.unknown_targets: list[str] = []
        self._details: _Details | None = None

    @property
    def folded(self) -> set[str]:
        """The labels of the stacks handed over so far."""
        return set(self._folded)

    def add(self, label: str, hashes: list[str], identities: list[str]) -> None:
        """Fold in one stack (or keep it until the root is in): its valid records' hashes
        (each once) and identities, as in its :class:`SourceSummary`."""
        self._not_finished()
        if label in self._folded:
            raise ValueError(f"stack {label!r} is already consolidated")
        if label == ROOT_LABEL:
            raise ValueError(f"{label!r} is the root's label, not a stack's")
        if len(hashes) != len(identities):
            raise ValueError(f"stack {label!r}: {len(hashes)} hashes, {len(identities)} identities")
        self._folded.add(label)
        if self._root is None:  # newlines: never in hashes or printable identities
            self._waiting.append((label, "\n".join(hashes), "\n".join(identities)))
            return
        with paused_gc():
            self._fold(self._root, label, hashes, identities)

    def prepare(self, root: SourceSummary, prepared: PreparedRoot | None = None) -> None:
        """The root is in: prepare what only it decides (unless given ``prepared``, from
        :func:`prepare_root` of the same root), and fold in the stacks kept so far."""
        self._not_finished()
        if self._root is not None:
            raise ValueError("the root is already prepared")
        if prepared is not None and prepared.root is not root:
            raise ValueError("the root was prepared from another summary")
        with paused_gc():
            if prepared is None:
                prepared = PreparedRoot(root)
            self._root = prepared
            self._holders = [None] * len(prepared.keys)
            while self._waiting:  # each freed once folded in (the order does not matter)
                label, hashes, identities = self._waiting.pop()
                self._fold(prepared, label, _lines(hashes), _lines(identities))

    def _fold(self, root: PreparedRoot, label: str, hashes: list[str], texts: list[str]) -> None:
        where, ours, holders = root.where, root.identities, self._holders
        unlike = []
        for key, text in zip(hashes, texts):  # noqa: B905 - lengths checked by add()
            i = where.get(key)
            if i is None:  # not a spec of the root
                continue
            held = holders[i]
            if held is None:
                holders[i] = [label]
            elif held[-1] == label:  # a hash listed twice counts once (summaries don't)
                continue
            else:
                held.append(label)
            if text != ours[i]:
                unlike.append((i, text))
        if unlike:
            self._unlike[label] = unlike

    def finish(
        self, root: SourceSummary, caches: Caches | None = None
    ) -> tuple[dict[str, PackageSummary], list[Conflict]]:
        """Per-package summaries (sorted by name) and the conflicts, from the root (prepared
        now if it was not) and the stacks folded in; nothing can be folded in afterwards.
        ``caches`` gives each spec its paths (none without): :meth:`links`."""
        self._not_finished()
        if self._root is None:
            self.prepare(root)
        prepared = self._root
        assert prepared is not None
        if prepared.root is not root and prepared.root != root:
            raise ValueError("the consolidation was prepared with another root")
        self._finished = True
        with paused_gc():
            conflicts = self._conflicts(prepared)
            labels = self._labels(self._holders)
            # Free what only folding needed before the packages are built (the caller may
            # hold the root).
            self._root, self._holders, self._unlike = None, [], {}
            prepared.forget_folding()
            rows = prepared.rows
            details = _Details(root.dependencies, caches or Caches({}))
            packages = {
                name: _package(details.of(rows[start:end], labels[start:end]), meta)
                for name, start, end, meta in prepared.packages
            }
        self.unknown_targets = sorted(details.targets.unknown)
        self._details = details
        return packages, conflicts

    def links(self, branch: str) -> PackedLinks:
        """Once :meth:`finish` ran, the ``links.json`` of branch ``branch``: each spec's
        dependencies and paths under the caches, as :mod:`crawler.linkfile` packs them."""
        if self._details is None:
            raise ValueError("the consolidation is not finished")
        details = self._details
        return PackedLinks(
            branch=branch,
            caches=details.caches.urls(),
            edges=details.edges.edges,
            names=details.edges.sorted_names(),
            specs=details.links,
        )

    def _conflicts(self, prepared: PreparedRoot) -> list[Conflict]:
        """Where stacks disagree with the root: by stack, then hash (a stable sort keeps each
        spec's fields in order)."""
        keys, identities = prepared.keys, prepared.identities
        conflicts: list[Conflict] = []
        for label, unlike in sorted(self._unlike.items()):
            for i, theirs in sorted(unlike, key=lambda found: keys[found[0]]):
                _disagree(conflicts, keys[i], label, identities[i], theirs)
        return conflicts

    def _labels(self, held: list[list[str] | None]) -> list[tuple[str, ...]]:
        """The sorted labels of each spec's indexes, from the stacks holding it (or None)."""
        alone: tuple[str, ...] = (ROOT_LABEL,)
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
                found = shared[unsorted] = tuple(sorted((*stacks, ROOT_LABEL)))
            labels.append(found)
        return labels

    def _not_finished(self) -> None:
        if self._finished:
            raise ValueError("the consolidation is finished")


class PreparedRoot:
    """What only the root decides: its specs sorted by package, then hash, with their hashes,
    identities and positions in that order, and each package's span of them and root meta."""

    def __init__(self, root: SourceSummary) -> None:
        self.root = root
        self.rows = sorted(root.specs, key=attrgetter("name", "hash"))
        self.keys = [row.hash for row in self.rows]
        self.identities = [row.identity() for row in self.rows]
        self.where = {key: i for i, key in enumerate(self.keys)}
        self.packages: list[tuple[str, int, int, _RootMeta]] = []
        start = 0
        for name, group in itertools.groupby(self.rows, key=attrgetter("name")):
            rows = list(group)
            end = start + len(rows)
            self.packages.append((name, start, end, _RootMeta.of(rows)))
            start = end

    def forget_folding(self) -> None:
        """Free what only folding stacks in needs; the specs and packages stay."""
        self.keys, self.identities, self.where = [], [], {}


def prepare_root(root: SourceSummary) -> PreparedRoot:
    """What only the root decides, for :meth:`Consolidator.prepare`.

    It reads nothing but ``root``, so a sync builds it in a thread: a develop root takes a
    few tenths of a second, during which the event loop goes on handing jobs to the decoding
    workers and taking their results.
    """
    with paused_gc():
        return PreparedRoot(root)


def _lines(joined: str) -> list[str]:
    return joined.split("\n") if joined else []


def _disagree(conflicts: list[Conflict], key: str, label: str, ours: str, theirs: str) -> None:
    """Note where a stack's identity of a root spec differs from the root's, field by field."""
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


class _Details:
    """Builds the :class:`SpecDetail` of rows, with their target's family (archspec's answers
    cached by target), and their entries of ``links.json`` as it is written: dependencies
    numbered in its table of edges (from the root summary's numbering, each of its edges
    looked up once), paths under ``caches``."""

    def __init__(self, dependencies: list[SpecDependency], caches: Caches) -> None:
        self.edges = EdgeTable()
        self.numbering = Renumbering(dependencies, self.edges)
        self.caches = caches
        self.targets = Targets()
        self.links: dict[str, PackedSpecLinks] = {}

    def of(self, rows: list[SpecRow], labels: list[tuple[str, ...]]) -> list[SpecDetail]:
        numbers, family, paths = self.numbering.numbers, self.targets.family, self.caches.paths
        links, details = self.links, []
        for row, stacks in zip(rows, labels, strict=True):
            links[row.hash] = PackedSpecLinks(numbers(row.dependencies), paths(row, stacks))
            details.append(
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
                    family(row.target),
                )
            )
        return details


def _package(details: list[SpecDetail], meta: _RootMeta) -> PackageSummary:
    """A package's summary from its specs' details, sorted by hash."""
    labels = [detail.stacks for detail in details]
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
    root: SourceSummary, stacks: Mapping[str, SourceSummary]
) -> tuple[dict[str, PackageSummary], list[Conflict]]:
    """Per-package summaries of a ref (sorted by name) and the conflicts between its indexes."""
    consolidator = Consolidator()
    for label, summary in stacks.items():
        consolidator.add(label, summary.hashes, summary.identities)
    return consolidator.finish(root)
