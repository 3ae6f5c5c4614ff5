"""Build: one branch's documents from what its sync read, a pure function.

:func:`build` takes the consolidated specs (:mod:`.consolidate`), what the spec manifests said
of their binaries (:mod:`.binaries`), the sources as read and the branch's last publish, and
gives the documents to publish, or the publish gate's refusal. It reads and writes nothing and
awaits nothing, so it is tested in-process, and a sync runs it in a thread: the event loop
stays free to take a signal while a develop-sized branch is built (about a second).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec
from msgspec import UNSET

from ..documents import (
    Changes,
    Conflict,
    Index,
    IndexFilters,
    IndexSource,
    PackageSummary,
    Report,
)
from ..errors import PublishRefused
from ..linkfile import PackedLinks, subset
from .binaries import Facts, record_binaries, with_sizes, with_tarballs
from .changes import Published, SpecStacks, changes_between, spec_stacks_of
from .consolidate import paused_gc
from .gate import check_gate
from .report import ReadSource, branch_stats, record_findings

log = logging.getLogger(__name__)


class BuiltSource(ReadSource, Protocol):
    """What the build needs of a source once read (a :class:`crawler.sync.outcome.SourceOutcome`):
    its report's view, and its entry in ``index.json``."""

    def index_entry(self) -> IndexSource: ...


@dataclass(frozen=True)
class Consolidated:
    """A branch's specs deduplicated across its stacks (:mod:`.consolidate`): its packages,
    the conflicts between stacks, and the branch's links (``links.json``, packed as it is
    written: :mod:`crawler.linkfile`)."""

    packages: dict[str, PackageSummary]
    conflicts: list[Conflict]
    links: PackedLinks


@dataclass(frozen=True)
class Previous:
    """The branch's last publish, as a build compares with it.

    ``published``: its ``index.json`` as read (None: none, or unreadable). ``specs``: when that
    is unreadable, its specs rebuilt from the cached summaries of its sources (a repair's
    changes are those since that publish). ``count``: its spec count as the state recorded it,
    the gate's reference when neither is known.
    """

    published: Published | None = None
    specs: SpecStacks | None = None
    count: int | None = None


@dataclass(frozen=True)
class BuildInput:
    """Everything a branch's build depends on."""

    branch: str
    mirror: str
    sources: Sequence[BuiltSource]
    consolidated: Consolidated
    facts: Facts
    previous: Previous
    #: The filters it is published with (None: whole; ``consolidated`` is :func:`filtered`).
    filters: IndexFilters | None
    #: The gate's ``publish.max_drop``; None with ``--force`` (no gate).
    max_drop: float | None
    report: Report


@dataclass(frozen=True)
class Built:
    """A branch's documents, ready to publish."""

    index: Index[PackageSummary]
    links: PackedLinks
    changes: Changes
    report: Report


@dataclass(frozen=True)
class Refused:
    """The publish gate's refusal, and the report as far as the build got."""

    message: str
    report: Report


def filtered(consolidated: Consolidated, keeps: Callable[[str], bool]) -> Consolidated:
    """The packages ``keeps`` keeps, and the links of their specs alone."""
    packages = {name: p for name, p in consolidated.packages.items() if keeps(name)}
    keys = (d.hash for p in packages.values() for d in p.spec_details)
    return Consolidated(packages, consolidated.conflicts, subset(consolidated.links, keys))


def build(given: BuildInput) -> Built | Refused:
    """The branch's documents, or why the gate refuses them (its report carries the stats and
    findings either way)."""
    with paused_gc():  # acyclic data only (see paused_gc)
        return _build(given)


def _build(given: BuildInput) -> Built | Refused:
    branch, consolidated, facts = given.branch, given.consolidated, given.facts
    packages = with_sizes(consolidated.packages, facts)
    links = with_tarballs(consolidated.links, facts)
    report = msgspec.structs.replace(given.report)  # a copy: the caller's stays as it was
    record_binaries(report, packages, facts)
    stats = branch_stats(given.sources, packages, consolidated.conflicts)
    record_findings(report, given.sources, consolidated.conflicts)
    report.stats = stats
    last = given.previous.published
    old = last.specs if last is not None else given.previous.specs
    before = len(old) if old is not None else given.previous.count
    if last is not None and last.filters != given.filters:
        # Under other filters the counts are not comparable: no drop to refuse.
        log.info("%s: filters changed since the last publish: no drop is checked", branch)
        before = None
    if given.max_drop is not None:
        try:
            check_gate(branch, before, stats.specs, given.max_drop)
        except PublishRefused as err:
            return Refused(str(err), report)
    changes = changes_between(branch, old, spec_stacks_of(packages))
    if last is not None:
        changes = last.removed_specs(changes)
    index = Index(
        branch=branch,
        mirror=given.mirror,
        filters=given.filters or UNSET,
        sources=[s.index_entry() for s in given.sources],
        stats=stats,
        packages=packages,
    )
    return Built(index, links, changes, report)
