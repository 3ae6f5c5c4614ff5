"""One branch of a run, from its sources to its published folder.

What happens to a branch, as ``status`` in its report and in :class:`BranchResult`:

``published``
    every listed index was read (a stack answering 404 is only "missing") and the new output
    replaced the old one, with ``changes.json`` saying what changed.
``partial``
    published although some stacks failed (not 404), because their number is within
    ``publish.max_failed_stacks``; the failed stacks are listed with status ``failed``.
``unchanged``
    every input is the same as for the published output, which is intact: nothing was written.
``skipped``
    an immutable ref (a discovery document's, ``immutable_refs``, not ``mutable_refs``)
    that is already published.
``refused``
    the publish gate stopped it: an empty root, or fewer specs than
    ``(1 - publish.max_drop)`` times the last published count. ``--force`` lifts the gate.
``failed``
    the root index is missing or unreadable, too many stacks failed, or the output could not be
    written. The previous output stays as it was.

The report of every attempt, whatever its status, is ``<output>/.crawler/reports/<branch>.json``;
a published branch also carries its own ``report.json``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import msgspec
from msgspec import UNSET

from .. import __version__
from ..build.binaries import Facts
from ..build.branch import (
    BuildInput,
    Built,
    Consolidated,
    Previous,
    Refused,
    build,
    filtered,
)
from ..build.changes import SpecStacks, published, spec_stacks_of, summary_line
from ..build.consolidate import consolidate, paused_gc
from ..build.history import read_history
from ..build.locations import Caches
from ..config import Config
from ..decode.validate import SourceSummary
from ..documents import IndexFilters, Report, SpecLinks
from ..errors import BranchError, CrawlerError
from ..files import is_safe_name
from ..mirror.discovery import Discovery, Mirror, Source
from ..output.folder import replaced_error
from ..output.published import PublishedBranch, check_replaceable
from ..output.render import encode_json
from ..output.state import BranchState, Store, fingerprint
from ..output.workdir import work_folder
from .binaries import read_binaries
from .collect import EarlyConsolidation, check_sources, read_all
from .outcome import SourceOutcome
from .plan import BranchPlan, Planner
from .publish import after_publish, publish_branch
from .reporting import Reporter
from .sources import SourceReader

log = logging.getLogger(__name__)

BranchStatus = Literal["published", "partial", "unchanged", "skipped", "refused", "failed"]


@dataclass
class BranchResult:
    """The outcome of one branch."""

    branch: str
    status: BranchStatus
    message: str
    report: Report

    @property
    def ok(self) -> bool:
        """True when the branch's output is current (published, partial, unchanged, skipped)."""
        return self.status not in ("refused", "failed")


@dataclass(frozen=True)
class RunContext:
    """What every branch of a run shares."""

    config: Config
    reporter: Reporter
    mirror: Mirror
    output: Path
    store: Store
    planner: Planner
    force: bool


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class BranchSync:
    """Syncs one branch: plan, read, check, build, gate, publish. Whatever happens, the result
    is a :class:`BranchResult` and a saved report; only a cancellation (a signal) goes through."""

    def __init__(self, run: RunContext, reader: SourceReader, branch: str, work: Path) -> None:
        self.run = run
        self.reader = reader
        self.branch = branch
        self.work = work
        self.clock = time.monotonic()
        self.report = Report(
            tool=f"spack-cache-crawler {__version__}",
            branch=branch,
            mirror=run.mirror.base,
            started_at=_now(),
        )
        self.outcomes: list[SourceOutcome] = []
        self.early = EarlyConsolidation(branch)
        self.filters = run.config.filters
        #: The filters the branch is published with (None: whole), as index.json states them.
        self.published_filters = published_filters(run.config)

    async def sync(self, discovery: Discovery) -> BranchResult:
        """Sync the branch as ``discovery`` lists it."""
        branch = self.branch
        try:
            return await self._sync(discovery)
        except (CrawlerError, OSError) as err:  # OSError: a folder of the output not searchable
            return self._done("failed", failure_line(branch, err))
        except MemoryError:  # ``ulimit -v``, or a full machine: no bug, no traceback
            return self._done(
                "failed", f"branch {branch} failed: out of memory building its output"
            )

    async def _sync(self, discovery: Discovery) -> BranchResult:
        branch = self.branch
        if branch in discovery.problems:  # asked for by name (--all skips it, see Syncer.run)
            raise BranchError(branch, discovery.problems[branch])
        sources = branch_sources(self.run.config, discovery, branch)
        immutable = discovery.is_immutable(branch, self.run.config)
        plan = await self.run.planner.plan(
            branch, self.reader.fetcher, sources, immutable=immutable
        )
        if plan.previous is not None and plan.previous.stats is not None:
            self.report.stats = plan.previous.stats  # replaced below if the branch is rebuilt
        if plan.skip:
            return self._done("skipped", "immutable and published")
        self.outcomes = await self._read(sources, plan.previous)
        self.report.sources = [o.report_entry() for o in self.outcomes]
        budget = self.run.config.publish.max_failed_stacks
        failed = check_sources(branch, self.outcomes, plan.excused, budget)
        if plan.previous is None:
            log.debug("%s: no state of an earlier publish by this version", branch)
        else:
            inputs = self._fingerprint(plan.formats)
            if is_current(self.run.output, branch, plan.previous, inputs, plan.formats):
                return self._unchanged(plan.previous, failed)
        # Once the branch is known to change (an unchanged one replaces nothing), before the
        # work of building it; checked again at the swap.
        check_replaceable(self.run.output / branch)
        return await self._rebuild(plan, failed)

    async def _read(
        self, sources: Sequence[Source], previous: BranchState | None
    ) -> list[SourceOutcome]:
        self.run.reporter.branch_started(self.branch, len(sources))

        async def read(i: int, source: Source) -> SourceOutcome:
            # Per branch: a worker may still map the previous branch's file of that name.
            path = self.work / f"{self.branch}-{i}.json"
            outcome = await self.reader.read(self.branch, source, path, previous)
            await self.early.offer(outcome)
            return outcome

        return await read_all(self.branch, sources, read)

    def _fingerprint(self, formats: list[str]) -> str:
        """The branch's inputs as read: what an unchanged branch has the same of."""
        return inputs_of(self.outcomes, formats, self.run.mirror, self.published_filters)

    def _unchanged(self, previous: BranchState, failed: list[SourceOutcome]) -> BranchResult:
        self._remember(previous)
        if failed:  # still partial: the published output lacks the failing stacks
            self.report.failed_stacks = [o.source.label for o in failed]
        return self._done(*current_status(failed))

    async def _rebuild(self, plan: BranchPlan, failed: list[SourceOutcome]) -> BranchResult:
        branch = self.branch
        self.run.reporter.branch_phase(branch, "building")
        root, stacks = await self._summaries()
        self.reader.close()  # the workers, idle now, free their memory for the output
        inputs = self._fingerprint(plan.formats)  # a source read again may have other bytes
        caches = Caches.of(o.source for o in self.outcomes)
        consolidated = await asyncio.to_thread(self._consolidated, root, stacks, caches)
        del root, stacks
        facts = await self._binaries(consolidated.links)
        previous = await asyncio.to_thread(self._previous, plan)
        given = BuildInput(
            branch=branch,
            mirror=self.run.mirror.base,
            sources=self.outcomes,
            consolidated=consolidated,
            facts=facts,
            previous=previous,
            filters=self.published_filters,
            max_drop=None if self.run.force else self.run.config.publish.max_drop,
            report=self.report,
        )
        del consolidated
        built = await asyncio.to_thread(build, given)
        del given, previous
        self.report = built.report
        if isinstance(built, Refused):
            return self._done("refused", built.message)
        for o in self.outcomes:
            o.release()  # the summaries are built in: free them before serialising
        return await self._publish(plan, failed, built, inputs)

    async def _publish(
        self, plan: BranchPlan, failed: list[SourceOutcome], built: Built, inputs: str
    ) -> BranchResult:
        branch, report, changes = self.branch, self.report, built.changes
        status: BranchStatus = "partial" if failed else "published"
        report.status, report.error, report.changes = status, None, changes.totals
        keep = self.run.config.history
        folder = self.run.output / branch
        self.run.reporter.branch_phase(branch, "publishing")
        with paused_gc():
            written = await publish_branch(
                self.run.output,
                built,
                with_pages="pages" in plan.formats,
                with_site="html" in plan.formats,
                finish=self._finish,
                history=read_history(folder / "history.json", branch) if keep else None,
                keep=keep,
            )
        if written.swapped:
            after_publish(self._save_report)
        state = BranchState(
            __version__,
            inputs,
            written.index_sha256,
            plan.formats,
            [o.state() for o in self.outcomes],
            built.index.stats,
            written.pages_sha256,
            written.links_size,
        )
        after_publish(
            lambda: self.run.store.save_branch(branch, state),
            "published" if written.swapped else "output is current",
        )
        if not written.swapped:
            now: BranchStatus = "partial" if failed else "unchanged"
            return self._done(now, "output is current (rebuilt to the very files published)")
        line = summary_line(changes).removeprefix(f"{branch}: ")  # the reporter names the branch
        message = f"{status} {self.run.output / branch}: {line} ({report.duration_seconds:.2f}s)"
        self.run.reporter.branch_done(branch, message, ok=True)
        return BranchResult(branch, status, message, report)

    async def _binaries(self, links: dict[str, SpecLinks]) -> Facts:
        """What the spec manifests say of the published specs' binaries (none with
        ``binaries: false``; see :mod:`crawler.sync.binaries`)."""
        if not self.run.config.binaries:
            return {}
        root = self.outcomes[0].source.label
        return await read_binaries(self.reader.fetcher, self.run.output, self.branch, links, root)

    def _consolidated(
        self, root: SourceSummary, stacks: dict[str, SourceSummary], caches: Caches
    ) -> Consolidated:
        """The branch's specs deduplicated, those the filters keep (in a thread)."""
        with paused_gc():
            consolidated = self.early.finish(root, stacks, caches)
            if self.published_filters is None:
                return consolidated
            return filtered(consolidated, self.filters.keeps_package)

    def _previous(self, plan: BranchPlan) -> Previous:
        """The last publish, as the build compares with it (read from the output folder)."""
        last = published(self.run.output / self.branch / "index.json")
        specs = None
        if last is None and plan.previous is not None:  # a repair: compare with what it was
            specs = _recorded_spec_stacks(self.run.store, self.branch, plan.previous)
        return Previous(last, specs, _published_count(plan.record))

    def _done(self, status: BranchStatus, message: str) -> BranchResult:
        """Finish a branch that publishes nothing: record why, tell the user."""
        branch, report = self.branch, self.report
        if report.sources is UNSET:  # else as read: a source read again failed
            report.sources = [o.report_entry() for o in self.outcomes]
        failing = status in ("failed", "refused")
        if failing and (replaced := replaced_error(self.run.output)) is not None:
            status, message = "failed", f"branch {branch} failed: {replaced}"  # whatever failed
        if failing:
            report.stats = UNSET  # only the stats of what is published are meaningful
        report.changes = UNSET  # set for a publish that then failed or wrote the same files
        report.status, report.error = status, message if failing else None
        self._finish()
        self._keep_report()
        if not failing:
            message = f"{status}: {message} ({report.duration_seconds:.2f}s)"
        self.run.reporter.branch_done(branch, message, ok=not failing)
        return BranchResult(branch, status, message, report)

    def _remember(self, previous: BranchState) -> None:
        """Keep what this run learnt about the sources (a new ETag for the same bytes, a server
        that stopped sending ETags) although nothing is published."""
        sources = [o.state() for o in self.outcomes]
        if sources != previous.sources:
            state = msgspec.structs.replace(previous, sources=sources)
            after_publish(
                lambda: self.run.store.save_branch(self.branch, state), "output is current"
            )

    async def _summaries(self) -> tuple[SourceSummary, dict[str, SourceSummary]]:
        """The root's and the readable stacks' summaries (loaded from the cache if need be).

        A cached summary found unreadable now (a crash can leave one half-written) is dropped
        and its source read again, bypassing the cache.
        """
        branch, outcomes = self.branch, self.outcomes
        summaries = {}
        for i, o in enumerate(outcomes):
            if o.facts is None:
                continue
            if o.summary is None:
                log.warning(
                    "%s %s: cached summary unreadable, reading again", branch, o.source.label
                )
                path = self.work / f"again-{i}"
                o = outcomes[i] = await self.reader.read(branch, o.source, path, None)
                if o.summary is None:
                    raise BranchError(branch, f"{o.source.label}: {o.error}")
            summaries[o.source.label] = o.summary
        root = summaries.pop(outcomes[0].source.label)
        return root, summaries

    def _finish(self) -> None:
        self.report.finished_at = _now()
        self.report.duration_seconds = round(time.monotonic() - self.clock, 3)

    def _save_report(self) -> None:
        if is_safe_name(self.branch):
            reports = work_folder(self.run.output, "reports")
            reports.write(f"{self.branch}.json", encode_json(self.report))

    def _keep_report(self) -> None:
        """Save the run report of a branch that publishes nothing. It only tells what happened
        (the log says it too): failing to write it (a full disk) is logged, and neither fails
        the branch nor stops the run before the branches after it."""
        try:
            self._save_report()
        except CrawlerError as err:
            log.warning("%s: %s (the run report of this branch is not saved)", self.branch, err)


def failure_line(branch: str, err: CrawlerError | OSError) -> str:
    """The line a branch that failed ends with (a sync's, a dry run's)."""
    if isinstance(err, BranchError):
        return str(err)
    if isinstance(err, OSError):  # the output as the filesystem has it
        where = f"cannot use {err.filename}: " if err.filename is not None else ""
        return f"branch {branch} failed: {where}{err.strerror or err}"
    return f"branch {branch} failed: {err}"


def current_status(failed: Sequence[SourceOutcome]) -> tuple[BranchStatus, str]:
    """The status and line of a branch whose output is current, its ``failed`` stacks apart."""
    if not failed:
        return "unchanged", "output is current"
    labels = ", ".join(o.source.label for o in failed)
    return "partial", f"output is current, but stacks still fail: {labels}"


def branch_sources(config: Config, discovery: Discovery, branch: str) -> list[Source]:
    """The sources of ``branch`` a sync reads: the root, and the stacks the filters keep."""
    filters = config.filters
    return [s for s in discovery.refs[branch] if s.is_root or filters.keeps_stack(s.label)]


def published_filters(config: Config) -> IndexFilters | None:
    """The filters a branch is published with (None: whole), as ``index.json`` states them."""
    f = config.filters  # refs apart: they choose branches, not what a branch holds
    shaped = IndexFilters(
        packages=list(f.packages),
        exclude_packages=list(f.exclude_packages),
        stacks=list(f.stacks),
        exclude_stacks=list(f.exclude_stacks),
    )
    return shaped if shaped != IndexFilters() else None


def inputs_of(
    outcomes: Sequence[SourceOutcome],
    formats: list[str],
    mirror: Mirror,
    filters: IndexFilters | None,
) -> str:
    """A branch's inputs as read (its sources' outcomes, written in ``formats``, published
    with ``filters``): what an unchanged branch has the same of."""
    entries = [o.index_entry() for o in outcomes]
    locations = [o.source.location for o in outcomes]
    return fingerprint(entries, formats, mirror.base, locations, filters)


def is_current(
    output: Path, branch: str, previous: BranchState, inputs: str, formats: list[str]
) -> bool:
    """True when the published branch was made from exactly these inputs and is intact in
    the ``formats`` a run would write."""
    if previous.fingerprint != inputs:
        log.debug("%s: inputs differ from the last publish's", branch)
        return False
    return PublishedBranch(output, branch).intact(previous, formats)


def _published_count(previous: BranchState | None) -> int | None:
    """The spec count of the last publish as its state recorded it: the gate's reference when
    the published ``index.json`` cannot be read (damaged, say), rather than none at all."""
    if previous is None:
        return None
    return previous.stats.specs if previous.stats is not None else None


def _recorded_spec_stacks(store: Store, branch: str, previous: BranchState) -> SpecStacks | None:
    """The specs (and their stacks) of the last publish, rebuilt from the cached summaries
    of its sources, when its ``index.json`` cannot be read (deleted, damaged): the changes
    of a repair are those since that publish, not a first publish's. None when a summary
    is not in the cache any more."""
    summaries: dict[str, SourceSummary] = {}
    for i, source in enumerate(previous.sources):
        if source.sha256 is None or source.facts is None:  # missing or failed then
            continue
        cached = store.load("root" if i == 0 else "stack", source.sha256)
        if cached is None:
            log.info(
                "%s: the last publish's summaries are gone: comparing against nothing",
                branch,
            )
            return None
        summaries[source.label] = cached.summary
    root = summaries.pop(previous.sources[0].label, None) if previous.sources else None
    if root is None:
        return None
    packages, _ = consolidate(root, summaries)
    log.info("%s: changes are against the last publish's specs, from its summaries", branch)
    return spec_stacks_of(packages)
