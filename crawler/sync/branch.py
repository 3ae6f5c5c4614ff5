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
from pathlib import Path

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
from ..build.changes import published, summary_line
from ..build.consolidate import paused_gc
from ..build.history import read_history
from ..build.locations import Caches
from ..config import Config
from ..decode.validate import SourceSummary
from ..documents import Report
from ..errors import BranchError, CrawlerError
from ..files import is_safe_name
from ..mirror.discovery import Discovery, Mirror, Source
from ..output.folder import replaced_error
from ..output.published import check_replaceable
from ..output.render import encode_json
from ..output.state import BranchState, Store
from ..output.workdir import work_folder
from .binaries import read_binaries
from .collect import EarlyConsolidation, check_sources, read_all
from .inputs import (
    BranchStatus,
    current_status,
    failure_line,
    inputs_of,
    is_current,
    published_filters,
    recorded_spec_stacks,
)
from .outcome import SourceOutcome
from .plan import BranchPlan, Planner
from .publish import after_publish, publish_branch, stamp, utc_now
from .reporting import Reporter
from .sources import SourceReader

log = logging.getLogger(__name__)


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
            started_at=utc_now(),
        )
        self.outcomes: list[SourceOutcome] = []
        self.early = EarlyConsolidation(branch)
        #: The filters the branch is published with (None: whole), as index.json states them.
        self.published_filters = published_filters(run.config)

    async def sync(self, discovery: Discovery) -> BranchResult:
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
        plan = await self.run.planner.plan(branch, self.reader.fetcher, discovery)
        if plan.previous is not None and plan.previous.stats is not None:
            self.report.stats = plan.previous.stats  # replaced below if the branch is rebuilt
        if plan.skip:
            return self._done("skipped", "immutable and published")
        self.outcomes = await self._read(plan.sources, plan.previous)
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
        """A branch whose output is current: keep what this run learnt of its sources (a new
        ETag for the same bytes, a server that stopped sending ETags), publish nothing."""
        known = [o.state() for o in self.outcomes]
        if known != previous.sources:
            state = msgspec.structs.replace(previous, sources=known)
            save = self.run.store.save_branch
            after_publish(lambda: save(self.branch, state), "output is current")
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
        facts: Facts = {}  # what the spec manifests say of the specs' binaries
        if self.run.config.binaries:
            label = self.outcomes[0].source.label
            facts = await read_binaries(
                self.reader.fetcher, self.run.output, branch, consolidated.links, label
            )
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
                started=self.clock,
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

    def _consolidated(
        self, root: SourceSummary, stacks: dict[str, SourceSummary], caches: Caches
    ) -> Consolidated:
        """The branch's specs deduplicated, those the filters keep (in a thread)."""
        with paused_gc():
            consolidated = self.early.finish(root, stacks, caches)
            if self.published_filters is None:
                return consolidated
            return filtered(consolidated, self.run.config.filters.keeps_package)

    def _previous(self, plan: BranchPlan) -> Previous:
        """The last publish, as the build compares with it (read from the output folder)."""
        last = published(self.run.output / self.branch / "index.json")
        specs = None
        if last is None and plan.previous is not None:  # a repair: compare with what it was
            specs = recorded_spec_stacks(self.run.store, self.branch, plan.previous)
        # The spec count the state recorded: the gate's reference when the published
        # index.json cannot be read (damaged, say), rather than none at all.
        stats = plan.record.stats if plan.record is not None else None
        return Previous(last, specs, stats.specs if stats is not None else None)

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
        stamp(self.report, self.clock)
        self._keep_report()
        if not failing:
            message = f"{status}: {message} ({report.duration_seconds:.2f}s)"
        self.run.reporter.branch_done(branch, message, ok=not failing)
        return BranchResult(branch, status, message, report)

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

    def _save_report(self) -> None:
        """Save the branch's run report in ``.crawler/reports/`` (none for a branch name no
        file may have)."""
        if is_safe_name(self.branch):
            report = encode_json(self.report)
            work_folder(self.run.output, "reports").write(f"{self.branch}.json", report)

    def _keep_report(self) -> None:
        """Save the run report of a branch that publishes nothing. It only tells what happened
        (the log says it too): failing to write it (a full disk) is logged, and neither fails
        the branch nor stops the run before the branches after it."""
        try:
            self._save_report()
        except CrawlerError as err:
            log.warning("%s: %s (the run report of this branch is not saved)", self.branch, err)
