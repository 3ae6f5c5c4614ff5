"""Forecast: what a sync would do with each branch, found out without writing anything
(``crawler sync --dry-run``).

A forecast makes the decisions a sync makes, with the same code where it can: the
:class:`~crawler.sync.plan.Planner` (formats, immutable refs skipped or synced again), the checks
of :func:`~crawler.sync.collect.check_sources` (a root missing or failing, too many stacks
failing), the fingerprint and the intact published folder that make a branch unchanged, and
:func:`~crawler.output.published.check_replaceable`. Where a sync downloads a source, a forecast
sends the request the download starts with (conditional with the stored ETag, retried alike,
:meth:`~crawler.mirror.fetch.Fetcher.probe`) and leaves its body unread; a local file is hashed
in place. Nothing is downloaded, decoded or written: no lock, state, cache, report or folder.

So what a forecast cannot know is what changed bytes hold: a branch with a source to download
"would be published" (``partial`` with failed stacks within the budget) though a sync may find
the same bytes again (a server that sends no validator) or the publish gate may refuse it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..decode.validate import Kind
from ..errors import BranchError, CrawlerError, NotFoundError
from ..mirror.discovery import Discovery, Source
from ..mirror.fetch import Fetcher
from ..mirror.http import usable_etag
from ..mirror.transport import Probed
from ..output.published import check_replaceable
from ..output.state import BranchState, SourceState
from ..text import counted
from .branch import RunContext
from .collect import check_sources
from .inputs import (
    BranchStatus,
    branch_sources,
    current_status,
    failure_line,
    inputs_of,
    is_current,
    published_filters,
)
from .outcome import SourceOutcome, Status
from .plan import BranchPlan
from .sources import promised_sha256, read_sidecar

#: What a sync would do with a source: download it (read it again, for a local file), or not,
#: as proven unchanged; or find it missing (404), or fail on it.
Verdict = Literal["download", "unchanged", "missing", "failed"]
_STATUS: dict[Verdict, Status] = {
    "download": "fetched",
    "unchanged": "unchanged",
    "missing": "missing",
    "failed": "failed",
}


@dataclass
class SourceForecast:
    """What a sync would most likely do with one source, and what told it (``why``)."""

    source: Source
    verdict: Verdict
    why: str
    #: Bytes: announced by the server (Content-Length), or a local file's; None if unknown.
    size: int | None = None
    #: The last publish's state of the source, when these are the very bytes it read.
    same: SourceState | None = None

    def outcome(self) -> SourceOutcome:
        """The outcome a sync would have as far as its checks read it: its status, and for
        the bytes of the last publish, what that publish knew of them."""
        failing = self.verdict in ("missing", "failed")
        outcome = SourceOutcome(
            self.source, status=_STATUS[self.verdict], error=self.why if failing else None
        )
        if self.same is not None:
            outcome.sha256, outcome.size, outcome.facts = (
                self.same.sha256,
                self.same.size,
                self.same.facts,
            )
        return outcome

    def line(self) -> str:
        """``label: verdict [size] (why)``, as the dry run prints it."""
        local = self.source.is_local
        if self.verdict in ("missing", "failed"):
            return self.outcome().line()  # as a sync logs it
        if self.verdict == "unchanged":
            return f"{self.source.label}: unchanged ({self.why})"
        what = "would read" if local else "would download"
        size = f" {self.size:,} bytes" if self.size is not None else ""
        return f"{self.source.label}: {what}{size} ({self.why})"


@dataclass
class BranchForecast:
    """What a sync would most likely do with one branch: the status it would end with (as
    :class:`~crawler.sync.branch.BranchResult` has them; ``refused`` is never foreseen) and why."""

    branch: str
    status: BranchStatus
    message: str
    sources: list[SourceForecast] = field(default_factory=list)


class Forecaster:
    """Forecasts the branches of one run: one fetcher, the run's planner and store (read)."""

    def __init__(self, run: RunContext, fetcher: Fetcher) -> None:
        self.run = run
        self.fetcher = fetcher
        self._slot = asyncio.Semaphore(run.config.concurrency)

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
        if branch in discovery.problems:  # asked for by name
            raise BranchError(branch, discovery.problems[branch])
        sources = branch_sources(run.config, discovery, branch)
        immutable = discovery.is_immutable(branch, run.config)
        plan = await run.planner.plan(branch, self.fetcher, sources, immutable=immutable)
        if plan.skip:
            found.status, found.message = "skipped", "immutable and published"
            return
        found.sources = list(
            await asyncio.gather(*(self._source(s, plan.previous) for s in sources))
        )
        outcomes = [s.outcome() for s in found.sources]
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
        fresh = [s for s in sources if s.verdict in ("download", "unchanged") and s.same is None]
        if plan.record is None:
            return False, "first publish"
        if plan.previous is None:
            return False, "no state of an earlier publish by this version: built anew"
        if not fresh:
            return True, ""
        sizes = [s.size for s in fresh if s.verdict == "download"]
        announced = sum(size for size in sizes if size is not None)
        told = f", {announced:,} bytes announced" if announced else ""
        return False, f"{counted(len(fresh), 'source')} changed{told}"

    async def _source(self, source: Source, previous: BranchState | None) -> SourceForecast:
        before = previous.source(source.label, source.url, source.location) if previous else None
        try:
            async with self._slot:
                return await self._probe(source, before)
        except NotFoundError as err:
            return SourceForecast(source, "missing", str(err))
        except CrawlerError as err:
            return SourceForecast(source, "failed", str(err))

    async def _probe(self, source: Source, before: SourceState | None) -> SourceForecast:
        """The checks :meth:`~crawler.sync.sources.SourceReader.read` makes before it would
        download, in its order: a checksum the mirror vouches for, then the conditional
        request (or the hash of a local file)."""
        kind, store = source.kind, self.run.store
        cached_before = before is not None and store.has(kind, before.sha256)
        etag = before.etag if before is not None and cached_before else None
        sidecar = None
        if source.sidecar is not None and before is not None and before.etag is None:
            sidecar = await read_sidecar(self.fetcher, source.sidecar)  # may be the validator
        promised = promised_sha256(source, before, sidecar)
        vouched = promised is not None and self._cached(kind, promised, before)
        if vouched and await self.fetcher.confirmed(source.location):
            names = "its blob's checksum" if source.checksum else "its index.json.hash"
            why = f"{names} names cached bytes"
            return self._unchanged(source, promised, before, why)
        probed = await self.fetcher.probe(source.location, etag)
        last = before.sha256 if before is not None else None
        if probed.not_modified and self._cached(kind, last, before):
            return self._unchanged(source, last, before, "304 Not Modified")
        if probed.sha256 is not None and probed.sha256 == last and self._cached(kind, last, before):
            return self._unchanged(source, last, before, "same bytes")
        if etag is not None and probed.etag == usable_etag(etag):
            # A server that ignores If-None-Match: a sync downloads it, and finds the same bytes.
            why = "same ETag; a sync downloads it again all the same"
            return self._unchanged(source, last, before, why)
        why = _changed(source, before, cached_before, probed)
        return SourceForecast(source, "download", why, probed.size)

    def _cached(self, kind: Kind, sha256: str | None, before: SourceState | None) -> bool:
        """Whether a sync would take the cached summary of these bytes (see
        :meth:`~crawler.sync.sources.SourceReader._reuse`), its summary not loaded."""
        if sha256 is None or not self.run.store.has(kind, sha256):
            return False
        if before is not None and before.sha256 == sha256 and before.facts is not None:
            return (before.size or 0) <= self.run.config.max_index_bytes
        return True

    @staticmethod
    def _unchanged(
        source: Source, sha256: str | None, before: SourceState | None, why: str
    ) -> SourceForecast:
        same = before if before is not None and before.sha256 == sha256 else None
        if same is None:
            why += ", but not the bytes of the last publish"
        return SourceForecast(source, "unchanged", why, same=same)


def _changed(source: Source, before: SourceState | None, cached: bool, probed: Probed) -> str:
    """Why a source would be downloaded (or a local one read and decoded again); ``cached``:
    the summary of the last publish's bytes is in the cache."""
    if before is None or before.sha256 is None:
        return "not read at the last publish" if before else "new since the last publish"
    if not cached:
        return "its cached summary is gone"
    if probed.sha256 is not None:
        return "changed since the last publish"
    if before.etag is not None:
        return "changed: answered 200 to If-None-Match"
    if source.checksum is not None:
        return "changed: a new blob"
    return "no validator: the server sends no ETag and no usable index.json.hash"
