"""Forecast: what a sync would do with each branch, found out without writing anything
(``crawler sync --dry-run``).

A forecast makes the decisions a sync makes, with the same code: the
:class:`~crawler.sync.plan.Planner` (formats, immutable refs skipped or synced again), the checks
of :func:`~crawler.sync.collect.check_sources` (a root missing or failing, too many stacks
failing), the fingerprint and the intact published folder that make a branch unchanged,
:func:`~crawler.output.published.check_replaceable`, and for each source the sync's own reader
(:meth:`~crawler.sync.sources.SourceReader.forecast`), which sends the request a download
starts with (conditional with the stored ETag, retried alike) and leaves its body unread; a
local file is hashed in place. Nothing is downloaded, decoded or written: no lock, state,
cache, report or folder.

So what a forecast cannot know is what changed bytes hold: a branch with a source to download
"would be published" (``partial`` with failed stacks within the budget) though a sync may find
the same bytes again (a server that sends no validator) or the publish gate may refuse it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..errors import CrawlerError
from ..mirror.discovery import Discovery
from ..mirror.fetch import Fetcher
from ..output.published import check_replaceable
from ..text import counted
from .branch import RunContext
from .collect import check_sources
from .inputs import (
    BranchStatus,
    current_status,
    failure_line,
    inputs_of,
    is_current,
    published_filters,
)
from .outcome import SourceForecast
from .plan import BranchPlan
from .sources import SourceReader


@dataclass
class BranchForecast:
    """What a sync would most likely do with one branch: the status it would end with (as
    :class:`~crawler.sync.branch.BranchResult` has them; ``refused`` is never foreseen) and why."""

    branch: str
    status: BranchStatus
    message: str
    sources: list[SourceForecast] = field(default_factory=list)


class Forecaster:
    """Forecasts the branches of one run: the run's planner and store (read), and a dry
    :class:`~crawler.sync.sources.SourceReader`, which decides for each source as a sync does."""

    def __init__(self, run: RunContext, fetcher: Fetcher) -> None:
        self.run = run
        self.fetcher = fetcher
        self.reader = SourceReader(run.config, fetcher, run.store, run.reporter, dry=True)

    async def branch(self, branch: str, discovery: Discovery) -> BranchForecast:
        """The forecast of ``branch`` as ``discovery`` lists it; never raises but to cancel."""
        found = BranchForecast(branch, "failed", "")
        try:
            await self._branch(found, discovery)
        except (CrawlerError, OSError) as err:  # OSError: a folder of the output not searchable
            found.status, found.message = "failed", failure_line(branch, err)
        return found

    async def _branch(self, found: BranchForecast, discovery: Discovery) -> None:
        branch, run = found.branch, self.run
        plan = await run.planner.plan(branch, self.fetcher, discovery)
        if plan.skip:
            found.status, found.message = "skipped", "immutable and published"
            return
        read = (self.reader.forecast(s, plan.previous) for s in plan.sources)
        found.sources = list(await asyncio.gather(*read))
        outcomes = [s.outcome for s in found.sources]
        budget = run.config.publish.max_failed_stacks
        failed = check_sources(branch, outcomes, plan.excused, budget)
        known, why = self._known_inputs(found.sources, plan)
        if known and plan.previous is not None:
            inputs = inputs_of(outcomes, plan.formats, run.mirror, published_filters(run.config))
            if is_current(run.output, branch, plan.previous, inputs, plan.formats):
                found.status, found.message = current_status(failed)
                return
            why = (
                "its sources are unchanged, but not its formats or filters"
                if inputs != plan.previous.fingerprint
                else "its sources are unchanged, but its published files are not as published"
            )
        check_replaceable(run.output / branch)
        found.status = "partial" if failed else "published"
        labels = ", ".join(o.source.label for o in failed)
        found.message = f"{why}; stacks failing: {labels}" if failed else why

    @staticmethod
    def _known_inputs(sources: Sequence[SourceForecast], plan: BranchPlan) -> tuple[bool, str]:
        """Whether every source read is the last publish's bytes (so the branch's inputs are
        known without a download), and if not, why a sync would build it."""
        ok = [s for s in sources if s.outcome.status not in ("missing", "failed")]
        fresh = [s for s in ok if not s.same]
        if plan.record is None:
            return False, "first publish"
        if plan.previous is None:
            return False, "no state of an earlier publish by this version: built anew"
        if not fresh:
            return True, ""
        sizes = [s.probed.size for s in fresh if s.probed is not None]
        announced = sum(size for size in sizes if size is not None)
        told = f", {announced:,} bytes announced" if announced else ""
        return False, f"{counted(len(fresh), 'source')} changed{told}"
