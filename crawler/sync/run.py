"""Sync: the branches of a mirror, each fetched, consolidated, checked and published whole.

A run holds the output folder's lock (:mod:`crawler.output.lock`) from start to end, reads the
mirror's discovery document, then syncs the requested branches one after the other with one HTTP
session and one pool of decoding processes (:mod:`crawler.sync.sources`).

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
    an immutable ref (``immutable_refs``, not ``mutable_refs``) that is already published.
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
import contextlib
import hashlib
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import msgspec
from msgspec import UNSET

from .. import __version__
from ..build.changes import SpecStacks, changes_between, counted, spec_stacks_of, summary_line
from ..build.consolidate import (
    Consolidator,
    consolidate,
    paused_gc,
    prepare_root,
)
from ..build.report import branch_stats, published_spec_stacks, record_findings
from ..config import Config, normal_formats
from ..decode.validate import SourceSummary
from ..documents import Changes, Conflict, Index, PackageSummary, Report
from ..errors import (
    BranchError,
    CrawlerError,
    IndexFormatError,
    OutputError,
    PublishRefused,
    UsageError,
    shown,
)
from ..mirror.discovery import Discovery, Mirror, Source, is_safe_name, parse_discovery
from ..mirror.fetch import Fetcher, Sleep
from ..mirror.urls import redacted
from ..output.lock import RunLock, replaced_error
from ..output.published import PublishedBranch
from ..output.state import BranchState, PagesDigest, Store, fingerprint
from ..output.write import (
    BranchStage,
    atomic_write,
    check_replaceable,
    check_work_folders,
    encode_json,
    recover,
    render_page,
    state_dir,
)
from .reporting import Reporter
from .sources import SourceOutcome, SourceReader

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


@dataclass
class RunResult:
    """The outcome of a whole run."""

    branches: list[BranchResult]
    seconds: float = 0.0

    @property
    def failed(self) -> list[BranchResult]:
        """Branches whose new output was not published."""
        return [b for b in self.branches if not b.ok]


class _EarlyConsolidation:
    """Hands a branch's sources to its consolidation as they come in, while others still
    download or decode (see :class:`~crawler.build.consolidate.Consolidator`).

    Only summaries decoded by this run are handed over early (a summary proven unchanged is
    not even loaded unless the branch must be rebuilt); :meth:`finish` adds the rest. Nothing
    is published from it before every source is in and the branch passed its checks.
    """

    def __init__(self) -> None:
        self._consolidator = Consolidator()

    async def offer(self, outcome: SourceOutcome) -> None:
        """A source is read: hand it over if this run decoded it."""
        summary = outcome.summary if outcome.decoded else None
        if summary is None:
            return
        if outcome.source.is_root:
            prepared = await asyncio.to_thread(prepare_root, summary)
            self._consolidator.prepare(summary, prepared)
            return
        self._consolidator.add(outcome.source.label, summary.hashes, summary.identities)
        outcome.consolidated()  # its hashes are not needed again: do not hold them

    def finish(
        self, root: SourceSummary, stacks: dict[str, SourceSummary]
    ) -> tuple[dict[str, PackageSummary], list[Conflict]]:
        """:func:`crawler.build.consolidate.consolidate` of the final summaries."""
        consolidator = self._consolidator
        # A decoded stack is never read again: these are the summaries folded in (whose
        # hashes were freed since, so that they could not be folded in anew).
        if not consolidator.folded <= stacks.keys():
            raise RuntimeError("a consolidated summary was replaced")
        for label in stacks.keys() - consolidator.folded:
            consolidator.add(label, stacks[label].hashes, stacks[label].identities)
        return consolidator.finish(root)


async def _read_all(
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


def _published_count(previous: BranchState | None) -> int | None:
    """The spec count of the last publish as its state recorded it: the gate's reference when
    the published ``index.json`` cannot be read (damaged, say), rather than none at all."""
    if previous is None:
        return None
    return previous.stats.specs if previous.stats is not None else None


#: Pages written between two checks for a signal (a few milliseconds' work).
_PAGES_PER_CHECKPOINT = 50


async def _checkpoint() -> None:
    """Give the event loop a turn in a long synchronous stretch, so that a SIGTERM or SIGINT
    that came meanwhile is handled (it cancels the run, raising CancelledError here).

    A signal reaches asyncio through a pipe: one turn polls it and queues the reading of the
    pipe, the next reads it and queues the handler, the third runs the handler before this task
    goes on. So it takes three turns for the cancellation to land here rather than later.
    """
    for _ in range(3):
        await asyncio.sleep(0)


#: Seconds a look for a stack missing at an immutable ref's publish may take (see
#: :meth:`Syncer._missing_back`).
_PROBE_SECONDS = 10.0


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Syncer:
    """Runs syncs against one mirror with one config."""

    def __init__(
        self,
        config: Config,
        reporter: Reporter,
        *,
        sleep: Sleep = asyncio.sleep,
        force: bool = False,
    ):
        self.config = config
        self.reporter = reporter
        self.mirror = Mirror.parse(config.mirror)
        self.output = config.output_dir.resolve()
        self.force = force
        self._sleep = sleep
        #: Branches finished so far (also readable after the run was cancelled).
        self.results: list[BranchResult] = []
        self.store = Store(self.output)
        self._probing = True  # see _missing_back

    async def discover(self, fetcher: Fetcher) -> Discovery:
        """Fetch and parse the mirror's discovery document."""
        url = self.mirror.discovery_url
        return parse_discovery(await fetcher.read(url), url, self.mirror, self.config)

    async def branches(self) -> Discovery:
        """The discovery document alone (for ``crawler branches``)."""
        async with Fetcher(self.config, sleep=self._sleep) as fetcher:
            return await self.discover(fetcher)

    async def run(self, branches: Sequence[str] | None) -> RunResult:
        """Sync the named branches (None: every ref of the mirror) under the output's lock."""
        started = time.monotonic()
        for name in branches or ():
            if not is_safe_name(name):
                raise UsageError(f"branch name {name!r} is not a safe folder name")
        async with RunLock(self.output, wait=self.config.lock_wait) as lock:
            if lock.broken:
                log.warning("%s", lock.broken)
            for line in [*recover(self.output), *check_work_folders(self.output)]:
                log.warning("%s", line)
            async with Fetcher(self.config, sleep=self._sleep) as fetcher:
                discovery = await self.discover(fetcher)
                wanted = self._wanted(discovery, branches)
                reader = SourceReader(self.config, fetcher, self.store, self.reporter)
                with self._workspace(reader) as work:
                    for branch in wanted:
                        if branches is None and branch in discovery.problems:
                            # --all: the mirror lists it, nobody asked for it. Not a result:
                            # neither a failure to alert on forever, nor a success in metrics.
                            problem = discovery.problems[branch]
                            log.warning(
                                "%s: unusable in the discovery document: %s", shown(branch), problem
                            )
                            continue
                        result = await self._branch(reader, discovery, branch, work)
                        self.results.append(result)
                if branches is None and not discovery.refs:
                    # --all with nothing to sync is no "nothing changed" (exit 6): the refs
                    # published before would go stale with every run passing.
                    raise IndexFormatError(
                        discovery.url,
                        "the discovery document lists no usable ref "
                        f"({counted(len(discovery.problems), 'unusable ref')}: see the warnings)",
                    )
        return RunResult(self.results, time.monotonic() - started)

    @staticmethod
    def _wanted(discovery: Discovery, branches: Sequence[str] | None) -> list[str]:
        known = sorted({*discovery.refs, *discovery.problems})
        wanted = list(dict.fromkeys(branches)) if branches is not None else known
        unknown = [b for b in wanted if b not in known]
        if unknown:
            raise UsageError(
                f"unknown branch {', '.join(unknown)} in {discovery.url} "
                f"(known: {', '.join(known) or 'none'})"
            )
        return wanted

    @contextlib.contextmanager
    def _workspace(self, reader: SourceReader) -> Iterator[Path]:
        work = state_dir(self.output) / "tmp" / str(os.getpid())
        try:
            work.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutputError(str(work), err.strerror or str(err)) from None
        try:
            yield work
        finally:
            reader.close()
            shutil.rmtree(work, ignore_errors=True)
            # Also when the run fails or is stopped (a time limit killing it every night
            # would otherwise let the cache grow); what this run read is kept.
            self.store.prune(reader.read_sha256)

    async def _branch(
        self,
        reader: SourceReader,
        discovery: Discovery,
        branch: str,
        work: Path,
    ) -> BranchResult:
        clock = time.monotonic()
        report = Report(
            tool=f"spack-cache-crawler {__version__}",
            branch=branch,
            mirror=self.mirror.base,
            started_at=_now(),
        )
        outcomes: list[SourceOutcome] = []
        try:
            if branch in discovery.problems:  # asked for by name (--all skips it, see run())
                raise BranchError(branch, discovery.problems[branch])
            published = self.output / branch / "index.json"
            previous = self.store.branch(branch)
            if previous is not None and previous.stats is not None:
                report.stats = previous.stats  # replaced below if the branch is rebuilt
            # What the last publish wrote, whichever version did (after an upgrade too).
            record = previous or self.store.branch(branch, any_version=True)
            excused: frozenset[str] = frozenset()  # stacks that may fail beyond the budget
            formats: list[str] = list(self.config.formats)
            immutable = self.config.is_immutable(branch)
            # Pages in the folder, whatever the state says (deleting .crawler/ is allowed).
            published_branch = PublishedBranch(self.output, branch)
            had_pages = published_branch.has_pages()
            if immutable:
                # It stays put: a rebuild (a repair, even of a deleted index.json) keeps the
                # formats it was published in too.
                was = [*(record.formats if record else []), *(["pages"] if had_pages else [])]
                formats = normal_formats([*formats, *was])
            if immutable and published.is_file():
                without = published_branch.published_without(previous)
                asked: list[str] = list(self.config.formats)
                damaged = not (
                    published_branch.intact(record, asked, exact=False)
                    if record is not None
                    else published_branch.whole(asked)
                )
                if without is None and not damaged and not self.force:
                    back = await self._missing_back(reader.fetcher, discovery.refs[branch], record)
                    if not back:
                        reason = "immutable and published"
                        return self._done(branch, "skipped", report, clock, reason)
                    log.info(
                        "%s: immutable, but the mirror now has %s, missing when it was "
                        "published: syncing it",
                        branch,
                        ", ".join(back),
                    )
                    excused = frozenset(back)  # one that fails now leaves it partial at worst
                if damaged:
                    log.info(
                        "%s: immutable, but its output is not as published: syncing it", branch
                    )
                if without is not None:  # with --force too: it may not fail more than it did
                    log.info("%s: immutable, but published without some stacks: syncing it", branch)
                    excused = without
            sources = discovery.refs[branch]
            self.reporter.branch_started(branch, len(sources))
            early = _EarlyConsolidation()

            async def read(i: int, source: Source) -> SourceOutcome:
                # Per branch: a worker may still map the previous branch's file of that name.
                outcome = await reader.read(branch, source, work / f"{branch}-{i}.json", previous)
                await early.offer(outcome)
                return outcome

            outcomes = await _read_all(branch, sources, read)
            report.sources = [o.report_entry() for o in outcomes]
            failed = self._check(branch, outcomes, excused)
            entries = [o.index_entry() for o in outcomes]
            locations = [o.source.location for o in outcomes]
            inputs = fingerprint(entries, formats, self.mirror.base, locations)
            if previous is None:
                log.debug("%s: no state of an earlier publish by this version", branch)
            if previous is not None and self._current(branch, previous, inputs, formats):
                self._remember(branch, previous, outcomes)
                if failed:  # still partial: the published output lacks the failing stacks
                    report.failed_stacks = [o.source.label for o in failed]
                    labels = ", ".join(o.source.label for o in failed)
                    reason = f"output is current, but stacks still fail: {labels}"
                    return self._done(branch, "partial", report, clock, reason)
                return self._done(branch, "unchanged", report, clock, "output is current")
            # Once the branch is known to change (an unchanged one replaces nothing), before
            # the work of building it; checked again at the swap.
            check_replaceable(self.output / branch)
            root, stacks = await self._summaries(reader, branch, outcomes, work)
            reader.close()  # nothing is left to decode: free the workers' memory for the output
            # A source read again (unreadable cache) may have brought other bytes.
            entries = [o.index_entry() for o in outcomes]
            inputs = fingerprint(entries, formats, self.mirror.base, locations)
            with paused_gc():  # everything up to the publish builds acyclic data
                # The build is synchronous work in steps of up to a second or so (more for a
                # large branch); between them, _checkpoint() lets SIGTERM or SIGINT stop it.
                packages, conflicts = early.finish(root, stacks)
                await _checkpoint()
                stats = branch_stats(outcomes, packages, conflicts)
                record_findings(report, outcomes, conflicts)
                report.stats = stats
                del root, stacks
                for o in outcomes:
                    o.release()  # the summaries are consolidated: free them before serialising
                old = published_spec_stacks(published)
                if old is None and previous is not None:  # a repair: compare with what it was
                    old = self._recorded_spec_stacks(branch, previous)
                before = len(old) if old is not None else _published_count(record)
                self._gate(branch, before, stats.specs)
                await _checkpoint()
                changes = changes_between(branch, old, spec_stacks_of(packages))
                await _checkpoint()
                index = Index(
                    branch=branch,
                    mirror=self.mirror.base,
                    sources=entries,
                    stats=stats,
                    packages=packages,
                )
                status: BranchStatus = "partial" if failed else "published"
                report.status, report.error, report.changes = status, None, changes.totals
                digest, pages, swapped = await self._publish(
                    branch, index, packages, changes, report, clock, "pages" in formats
                )
            if swapped and pages is None and had_pages:
                log.warning(
                    "%s: published without the pages it had (formats: %s); "
                    "add pages to formats, or run with --format json,pages, to keep them",
                    branch,
                    ",".join(formats),
                )
            learnt = [o.state() for o in outcomes]
            state = BranchState(__version__, inputs, digest, formats, learnt, stats, pages)
            self._after_publish(
                lambda: self.store.save_branch(branch, state),
                "published" if swapped else "output is current",
            )
            if not swapped:
                now: BranchStatus = "partial" if failed else "unchanged"
                reason = "output is current (rebuilt to the very files published)"
                return self._done(branch, now, report, clock, reason)
        except PublishRefused as err:
            return self._done(branch, "refused", report, clock, str(err), outcomes)
        except CrawlerError as err:
            message = str(err) if isinstance(err, BranchError) else f"branch {branch} failed: {err}"
            return self._done(branch, "failed", report, clock, message, outcomes)
        except OSError as err:  # the output as the filesystem has it: a folder not searchable
            where = f"cannot use {err.filename}: " if err.filename is not None else ""
            message = f"branch {branch} failed: {where}{err.strerror or err}"
            return self._done(branch, "failed", report, clock, message, outcomes)
        except MemoryError:  # ``ulimit -v``, or a full machine: no bug, no traceback
            message = f"branch {branch} failed: out of memory building its output"
            return self._done(branch, "failed", report, clock, message, outcomes)
        line = summary_line(changes).removeprefix(f"{branch}: ")  # the reporter names the branch
        message = f"{status} {self.output / branch}: {line} ({report.duration_seconds:.2f}s)"
        self.reporter.branch_done(branch, message, ok=True)
        return BranchResult(branch, status, message, report)

    def _done(
        self,
        branch: str,
        status: BranchStatus,
        report: Report,
        clock: float,
        message: str,
        outcomes: Sequence[SourceOutcome] = (),
    ) -> BranchResult:
        """Finish a branch that publishes nothing: record why, tell the user."""
        if report.sources is UNSET:  # else as read: a source read again failed
            report.sources = [o.report_entry() for o in outcomes]
        failing = status in ("failed", "refused")
        if failing and (replaced := replaced_error(self.output)) is not None:
            status, message = "failed", f"branch {branch} failed: {replaced}"  # whatever failed
        if failing:
            report.stats = UNSET  # only the stats of what is published are meaningful
        report.status, report.error = status, message if failing else None
        self._finish(report, clock)
        self._keep_report(branch, report)
        if not failing:
            message = f"{status}: {message} ({report.duration_seconds:.2f}s)"
        self.reporter.branch_done(branch, message, ok=not failing)
        return BranchResult(branch, status, message, report)

    async def _missing_back(
        self, fetcher: Fetcher, sources: Sequence[Source], published: BranchState | None
    ) -> list[str]:
        """The labels of the stacks that were missing (404) when an immutable ref was published
        and that the mirror now has (a ``HEAD`` answers 200; a local file is there).

        One request per such stack, at once, each given :data:`_PROBE_SECONDS`, not retried.
        An answer that proves nothing (a server that does not allow ``HEAD``, an error, no
        answer in time) leaves the ref skipped, and stops these looks for the rest of the run:
        a run over hundreds of refs must not wait on each.
        """
        if published is None or not self._probing:
            return []
        missing = {source.label for source in published.sources if source.status == "missing"}
        probed = [source for source in sources if source.label in missing]
        found = await asyncio.gather(
            *(fetcher.present(source.location, _PROBE_SECONDS) for source in probed)
        )
        pairs = list(zip(probed, found, strict=True))
        unknown = [source.location for source, there in pairs if there is None]
        if unknown:
            self._probing = False
            log.info(
                "%s: a HEAD request does not tell whether it is there now; stacks missing when "
                "their ref was published are not looked for again in this run",
                redacted(unknown[0]),
            )
        return [source.label for source, there in pairs if there]

    def _recorded_spec_stacks(self, branch: str, previous: BranchState) -> SpecStacks | None:
        """The specs (and their stacks) of the last publish, rebuilt from the cached summaries
        of its sources, when its ``index.json`` cannot be read (deleted, damaged): the changes
        of a repair are those since that publish, not a first publish's. None when a summary
        is not in the cache any more."""
        summaries: dict[str, SourceSummary] = {}
        for i, source in enumerate(previous.sources):
            if source.sha256 is None or source.facts is None:  # missing or failed then
                continue
            cached = self.store.load("root" if i == 0 else "stack", source.sha256)
            if cached is None:
                log.info(
                    "%s: the last publish's summaries are gone: comparing against nothing", branch
                )
                return None
            summaries[source.label] = cached.summary
        root = summaries.pop(previous.sources[0].label, None) if previous.sources else None
        if root is None:
            return None
        packages, _ = consolidate(root, summaries)
        log.info("%s: changes are against the last publish's specs, from its summaries", branch)
        return spec_stacks_of(packages)

    def _gate(self, branch: str, before: int | None, specs: int) -> None:
        """Refuse to publish an empty root or a large drop in specs against the ``before``
        published (None: nothing known), unless forced."""
        if self.force:
            return
        if specs == 0:
            raise PublishRefused(
                f"branch {branch}: refused to publish: the root index has no specs"
            )
        if before is None:
            return
        floor = before * (1 - self.config.publish.max_drop)
        if specs < floor:
            raise PublishRefused(
                f"branch {branch}: refused to publish: {counted(specs, 'spec')} against {before:,} "
                f"published (a drop of more than {self.config.publish.max_drop:.0%}); "
                "use --force to publish anyway"
            )

    def _remember(self, branch: str, previous: BranchState, outcomes: list[SourceOutcome]) -> None:
        """Keep what this run learnt about the sources (a new ETag for the same bytes, a server
        that stopped sending ETags) although nothing is published."""
        sources = [o.state() for o in outcomes]
        if sources != previous.sources:
            state = msgspec.structs.replace(previous, sources=sources)
            self._after_publish(lambda: self.store.save_branch(branch, state), "output is current")

    def _current(self, branch: str, previous: BranchState, inputs: str, formats: list[str]) -> bool:
        """True when the published branch was made from exactly these inputs and is intact in
        the ``formats`` this run would write."""
        if previous.fingerprint != inputs:
            log.debug("%s: inputs differ from the last publish's", branch)
            return False
        return PublishedBranch(self.output, branch).intact(previous, formats)

    def _check(
        self, branch: str, outcomes: list[SourceOutcome], excused: Collection[str] = ()
    ) -> list[SourceOutcome]:
        """The failed stacks (within the budget, or beyond it when all are ``excused``), or the
        reason the branch cannot be published."""
        root = outcomes[0]
        if root.status == "missing":
            raise BranchError(branch, f"root index not found at {root.source.location}")
        if root.facts is None:
            raise BranchError(branch, f"root index failed: {root.error}")
        failed = [o for o in outcomes[1:] if o.status == "failed"]
        budget = self.config.publish.max_failed_stacks
        # Beyond the budget only stacks the output was published without may fail (all of
        # them excused): one it holds is never dropped past the budget.
        if len(failed) > budget and not all(o.source.label in excused for o in failed):
            listed = "; ".join(f"{o.source.label}: {o.error}" for o in failed[:3])
            more = f"; and {len(failed) - 3} more (see the report)" if len(failed) > 3 else ""
            raise BranchError(
                branch,
                f"{len(failed)} stack(s) failed (publish.max_failed_stacks is {budget}): "
                f"{listed}{more}",
            )
        return failed

    async def _summaries(
        self, reader: SourceReader, branch: str, outcomes: list[SourceOutcome], work: Path
    ) -> tuple[SourceSummary, dict[str, SourceSummary]]:
        """The root's and the readable stacks' summaries (loaded from the cache if need be).

        A cached summary found unreadable now (a crash can leave one half-written) is dropped
        and its source read again, bypassing the cache.
        """
        summaries = {}
        for i, o in enumerate(outcomes):
            if o.facts is None:
                continue
            if o.summary is None:
                log.warning(
                    "%s %s: cached summary unreadable, reading again", branch, o.source.label
                )
                o = outcomes[i] = await reader.read(branch, o.source, work / f"again-{i}", None)
                if o.summary is None:
                    raise BranchError(branch, f"{o.source.label}: {o.error}")
            summaries[o.source.label] = o.summary
        root = summaries.pop(outcomes[0].source.label)
        return root, summaries

    def _finish(self, report: Report, clock: float) -> None:
        report.finished_at = _now()
        report.duration_seconds = round(time.monotonic() - clock, 3)

    def _save_report(self, branch: str, report: Report) -> None:
        if is_safe_name(branch):
            atomic_write(state_dir(self.output) / "reports" / f"{branch}.json", encode_json(report))

    def _keep_report(self, branch: str, report: Report) -> None:
        """Save the run report of a branch that publishes nothing. It only tells what happened
        (the log says it too): failing to write it (a full disk) is logged, and neither fails
        the branch nor stops the run before the branches after it."""
        try:
            self._save_report(branch, report)
        except CrawlerError as err:
            log.warning("%s: %s (the run report of this branch is not saved)", branch, err)

    async def _publish(
        self,
        branch: str,
        index: Index[PackageSummary],
        packages: dict[str, PackageSummary],
        changes: Changes,
        report: Report,
        clock: float,
        with_pages: bool,
    ) -> tuple[str, str | None, bool]:
        """Stage and publish a branch, with its pages or not; returns the SHA-256 of its
        index.json, the :class:`~crawler.output.state.PagesDigest` of its pages (None without), and
        whether it was swapped in.

        It is not when the published folder already holds exactly these ``index.json`` and
        pages, and intact companions: a run stopped (SIGKILL, a power cut) after its swap but
        before it saved the state left it so. Swapping in the same index would replace that
        run's ``changes.json`` by one listing no change.

        A signal that comes before the staged branch is swapped in cancels the publish (at the
        next :func:`_checkpoint`, every few dozen pages): the staging folder is removed and the
        published branch stays as it was.
        """
        stage = BranchStage(self.output, branch)
        try:
            encoded = encode_json(index)
            await _checkpoint()
            stage.write("index.json", encoded)
            stage.write("changes.json", encode_json(changes))
            pages = PagesDigest() if with_pages else None
            if pages is not None:
                for i, (name, summary) in enumerate(packages.items()):  # sorted by name
                    if i % _PAGES_PER_CHECKPOINT == 0:
                        await _checkpoint()
                    page = render_page(name, branch, summary).encode()
                    stage.write(f"pages/{name}/specs.md", page)
                    pages.add(name, page)
            digest = hashlib.sha256(encoded).hexdigest()
            pages_digest = pages.hexdigest() if pages else None
            if PublishedBranch(self.output, branch).holds(digest, pages_digest):
                return digest, pages_digest, False
            self._finish(report, clock)
            stage.write("report.json", encode_json(report))
            await _checkpoint()
            stage.publish()
        finally:
            stage.discard()
        self._after_publish(lambda: self._save_report(branch, report))
        return digest, pages_digest, True

    @staticmethod
    def _after_publish(bookkeeping: Callable[[], None], done: str = "published") -> None:
        """Run bookkeeping that follows a publish (or finding the output ``done`` otherwise):
        the publish stands even if it fails."""
        try:
            bookkeeping()
        except CrawlerError as err:
            log.warning("%s, but %s (the next run redoes it)", done, err)
