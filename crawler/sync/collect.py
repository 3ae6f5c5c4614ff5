"""Collect: a branch's sources read at once, root first, and handed to its consolidation as
each is decoded (so that folding the stacks in overlaps with the downloads); then whether
what was read can be published (:func:`check_sources`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence

from ..build import consolidate
from ..build.branch import Consolidated
from ..build.locations import Caches
from ..decode.validate import SourceSummary
from ..errors import BranchError
from ..mirror.discovery import Source
from ..targets import archspec_version as version
from ..text import counted
from .outcome import SourceOutcome

log = logging.getLogger(__name__)


class EarlyConsolidation:
    """Hands a branch's sources to its consolidation as they come in, while others still
    download or decode (see :class:`~crawler.build.consolidate.Consolidator`).

    Only summaries decoded by this run are handed over early (a summary proven unchanged is
    not even loaded unless the branch must be rebuilt); :meth:`finish` adds the rest. Nothing
    is published from it before every source is in and the branch passed its checks.
    """

    def __init__(self, branch: str) -> None:
        self.branch = branch
        self._consolidator = consolidate.Consolidator()

    async def offer(self, outcome: SourceOutcome) -> None:
        """A source is read: hand it over if this run decoded it."""
        summary = outcome.summary if outcome.decoded else None
        if summary is None:
            return
        if outcome.source.is_root:
            prepared = await asyncio.to_thread(consolidate.prepare_root, summary)
            self._consolidator.prepare(summary, prepared)
            return
        self._consolidator.add(outcome.source.label, summary.hashes, summary.identities)
        outcome.consolidated()  # its hashes are not needed again: do not hold them

    def finish(
        self, root: SourceSummary, stacks: dict[str, SourceSummary], caches: Caches
    ) -> Consolidated:
        """:func:`crawler.build.consolidate.consolidate` of the final summaries, and the
        branch's links (its specs' paths under ``caches``)."""
        consolidator = self._consolidator
        # A decoded stack is never read again: these are the summaries folded in (whose
        # hashes were freed since, so that they could not be folded in anew).
        if not consolidator.folded <= stacks.keys():
            raise RuntimeError("a consolidated summary was replaced")
        for label in stacks.keys() - consolidator.folded:
            consolidator.add(label, stacks[label].hashes, stacks[label].identities)
        packages, conflicts = consolidator.finish(root, caches)
        if consolidator.unknown_targets:  # a newer archspec may know them: no error
            unknown = ", ".join(consolidator.unknown_targets)
            log.warning(
                "%s: targets unknown to archspec %s have no family: %s",
                self.branch,
                version(),
                unknown,
            )
        return Consolidated(packages, conflicts, consolidator.links(self.branch))


async def read_all(
    branch: str, sources: Sequence[Source], read: Callable[[int, Source], Awaitable[SourceOutcome]]
) -> list[SourceOutcome]:
    """Every source's outcome (``read(i, source)``), root first, the reads running at once.

    A branch whose root index is missing or unusable fails whatever its stacks hold: the reads
    still running then are stopped (downloads and queued decoding jobs alike), and their
    sources reported as ``not_read``.
    """
    tasks = [asyncio.ensure_future(read(i, source)) for i, source in enumerate(sources)]
    try:
        root = await tasks[0]
        if root.facts is not None:
            return [root, *await asyncio.gather(*tasks[1:])]
        for task in tasks[1:]:
            task.cancel()
        done = await asyncio.gather(*tasks[1:], return_exceptions=True)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    outcomes = [root]
    for source, outcome in zip(sources[1:], done, strict=True):
        if isinstance(outcome, SourceOutcome):  # it was done before the root
            outcomes.append(outcome)
        elif isinstance(outcome, asyncio.CancelledError):
            reason = "not read: the root index is missing or unusable"
            outcomes.append(SourceOutcome(source, status="not_read", error=reason))
        else:  # read() raises nothing but a cancellation
            raise outcome
    unread = sum(o.status == "not_read" for o in outcomes)
    if unread:
        log.info("%s: root index %s: %s not read", branch, root.status, counted(unread, "source"))
    return outcomes


def check_sources(
    branch: str, outcomes: list[SourceOutcome], excused: Collection[str], budget: int
) -> list[SourceOutcome]:
    """The failed stacks (at most ``budget``, or more when all are ``excused``); raises
    :class:`~crawler.errors.BranchError` with the reason the branch cannot be published."""
    root = outcomes[0]
    if root.status == "missing":
        raise BranchError(branch, f"root index not found at {root.source.location}")
    if root.status == "failed":  # else it was read, or proven unchanged: its facts are known
        raise BranchError(branch, f"root index failed: {root.error}")
    failed = [o for o in outcomes[1:] if o.status == "failed"]
    # Beyond the budget only stacks the output was published without may fail (all of them
    # excused): one it holds is never dropped past the budget.
    if len(failed) > budget and not all(o.source.label in excused for o in failed):
        listed = "; ".join(f"{o.source.label}: {o.error}" for o in failed[:3])
        more = f"; and {len(failed) - 3} more (see the report)" if len(failed) > 3 else ""
        raise BranchError(
            branch,
            f"{len(failed)} stack(s) failed (publish.max_failed_stacks is {budget}): "
            f"{listed}{more}",
        )
    return failed
