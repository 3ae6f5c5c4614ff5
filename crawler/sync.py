"""Sync: fetch, decode, validate, consolidate and publish the branches of a mirror.

For one run there is one :class:`~crawler.fetch.Fetcher` (one HTTP session) and one pool of
worker processes that decode indexes, so a 300 MB index never stalls the event loop or the other
downloads. Branches are synced one after the other; the sources of a branch are fetched at once,
at most ``concurrency`` at a time, and each is decoded as soon as its download ends.

A branch is published only when its root index and every listed stack that exists were read;
a stack answering 404 is recorded as missing and the branch goes on. Any other failure fails the
branch: its previous output stays as it was, the reason goes to the run report
(``<output>/.crawler/reports/<branch>.json``) and the other branches still run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from . import __version__
from .config import Config
from .consolidate import Conflict, PackageSummary, consolidate
from .discovery import Discovery, Mirror, Source, is_safe_name, parse_discovery
from .errors import BranchError, ChecksumError, CrawlerError, NotFoundError, UsageError
from .fetch import Fetched, Fetcher, Sleep
from .progress import Reporter
from .validate import InvalidRecord, Kind, SourceSummary, load_summary, summarize_index
from .write import BranchStage, atomic_write, encode_json, recover, render_page, state_dir

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
Status = Literal["fetched", "missing", "failed"]


@dataclass
class SourceOutcome:
    """What happened to one source of a branch."""

    source: Source
    status: Status
    summary: SourceSummary | None = None
    fetched: Fetched | None = None
    sidecar: str | None = None
    error: str | None = None
    decode_seconds: float = 0.0
    retries: int = 0

    def line(self) -> str:
        """One human line: label, status, bytes, records, seconds."""
        if self.status != "fetched" or self.fetched is None or self.summary is None:
            return f"{self.source.label}: {self.status} ({self.error})"
        seconds = self.fetched.seconds + self.decode_seconds
        return (
            f"{self.source.label}: {self.status} {self.fetched.size:,} bytes, "
            f"{self.summary.records:,} records, {seconds:.2f}s"
        )

    def index_entry(self) -> dict[str, Any]:
        """The source as ``index.json`` lists it: only facts about the mirror's content."""
        summary, fetched = self.summary, self.fetched
        return {
            "label": self.source.label,
            "url": self.source.url,
            "layout": self.source.layout,
            "status": "ok" if self.status == "fetched" else self.status,
            "sha256": fetched.sha256 if fetched else None,
            "bytes": fetched.size if fetched else None,
            "db_version": summary.db_version if summary else None,
            "records": summary.records if summary else None,
            "in_buildcache": summary.in_buildcache if summary else None,
            "invalid_records": len(summary.invalid) if summary else None,
        }

    def report_entry(self) -> dict[str, Any]:
        """The source as ``report.json`` lists it, with how it was fetched."""
        fetched = self.fetched
        return {
            **self.index_entry(),
            "status": self.status,
            "location": self.source.location,
            "sidecar_sha256": self.sidecar,
            "sidecar_matches": (
                None if self.sidecar is None or fetched is None else self.sidecar == fetched.sha256
            ),
            "attempts": fetched.attempts if fetched else None,
            "retries": self.retries,
            "fetch_seconds": round(fetched.seconds, 3) if fetched else None,
            "decode_seconds": round(self.decode_seconds, 3),
            "error": self.error,
        }


@dataclass
class BranchResult:
    """The outcome of one branch."""

    branch: str
    ok: bool
    message: str
    report: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


@dataclass
class RunResult:
    """The outcome of a whole run."""

    branches: list[BranchResult]

    @property
    def failed(self) -> list[BranchResult]:
        """Branches that were not published."""
        return [b for b in self.branches if not b.ok]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _decode_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    # forkserver: the event loop's threads are never forked; workers import the decoder once.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["crawler.validate"])
    return concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=context)


class Syncer:
    """Runs syncs against one mirror with one config."""

    def __init__(self, config: Config, reporter: Reporter, *, sleep: Sleep = asyncio.sleep):
        self.config = config
        self.reporter = reporter
        self.mirror = Mirror.parse(config.mirror)
        self.output = config.output_dir.resolve()
        self._sleep = sleep
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    async def discover(self, fetcher: Fetcher) -> Discovery:
        """Fetch and parse the mirror's discovery document."""
        url = self.mirror.discovery_url
        return parse_discovery(await fetcher.read(url), url, self.mirror, self.config)

    async def branches(self) -> Discovery:
        """The discovery document alone (for ``crawler branches``)."""
        async with Fetcher(self.config, sleep=self._sleep) as fetcher:
            return await self.discover(fetcher)

    async def run(self, branches: Sequence[str] | None) -> RunResult:
        """Sync the named branches (None: every ref of the mirror)."""
        for name in branches or ():
            if not is_safe_name(name):
                raise UsageError(f"branch name {name!r} is not a safe folder name")
        for line in recover(self.output):
            log.warning("%s", line)
        async with Fetcher(self.config, sleep=self._sleep) as fetcher:
            discovery = await self.discover(fetcher)
            known = sorted({*discovery.refs, *discovery.problems})
            wanted = list(dict.fromkeys(branches)) if branches is not None else known
            unknown = [b for b in wanted if b not in known]
            if unknown:
                raise UsageError(
                    f"unknown branch {', '.join(unknown)} in {discovery.url} "
                    f"(known: {', '.join(known) or 'none'})"
                )
            with self._workspace() as work:
                results = []
                for branch in wanted:
                    results.append(await self._branch(fetcher, discovery, branch, work))
        return RunResult(results)

    @contextlib.contextmanager
    def _workspace(self) -> Iterator[Path]:
        work = state_dir(self.output) / "tmp" / str(os.getpid())
        work.mkdir(parents=True, exist_ok=True)
        try:
            yield work
        finally:
            shutil.rmtree(work, ignore_errors=True)
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None

    @property
    def pool(self) -> concurrent.futures.ProcessPoolExecutor:
        """The decode workers, started on first use."""
        if self._pool is None:
            workers = self.config.decode_workers or min(os.cpu_count() or 1, 8)
            self._pool = _decode_pool(workers)
        return self._pool

    async def _branch(
        self, fetcher: Fetcher, discovery: Discovery, branch: str, work: Path
    ) -> BranchResult:
        started, clock = _now(), time.monotonic()
        report: dict[str, Any] = {
            "tool": f"spack-cache-crawler {__version__}",
            "branch": branch,
            "mirror": self.mirror.base,
            "started_at": started,
        }
        outcomes: list[SourceOutcome] = []
        try:
            if branch in discovery.problems:
                raise BranchError(branch, discovery.problems[branch])
            sources = discovery.refs[branch]
            self.reporter.branch_started(branch, len(sources))
            outcomes = list(
                await asyncio.gather(
                    *(
                        self._source(fetcher, branch, s, work / f"{i}.json")
                        for i, s in enumerate(sources)
                    )
                )
            )
            report["sources"] = [o.report_entry() for o in outcomes]
            root, stacks = self._check(branch, outcomes)
            packages, conflicts = consolidate(root, stacks)
            stats = self._stats(outcomes, packages, conflicts)
            report.update(self._findings(outcomes, conflicts), stats=stats)
            index = {
                "schema_version": SCHEMA_VERSION,
                "branch": branch,
                "mirror": self.mirror.base,
                "sources": [o.index_entry() for o in outcomes],
                "stats": stats,
                "packages": packages,
            }
            report.update(status="published", error=None)
            path = self._publish(branch, index, packages, report, clock)
        except CrawlerError as err:
            message = str(err) if isinstance(err, BranchError) else f"branch {branch} failed: {err}"
            report.setdefault("sources", [o.report_entry() for o in outcomes])
            report.update(status="failed", error=message)
            self._finish(report, clock)
            self._save_report(branch, report)
            self.reporter.branch_done(branch, message, ok=False)
            return BranchResult(branch, False, message, report)
        specs = report["stats"]["specs"]
        message = (
            f"published {path} ({len(packages):,} packages, {specs:,} specs, "
            f"{report['duration_seconds']:.2f}s)"
        )
        self.reporter.branch_done(branch, message, ok=True)
        return BranchResult(branch, True, message, report, path)

    def _check(
        self, branch: str, outcomes: list[SourceOutcome]
    ) -> tuple[SourceSummary, dict[str, SourceSummary]]:
        """The root's and the stacks' summaries, or the reason the branch cannot be published."""
        root = outcomes[0]
        if root.status == "missing":
            raise BranchError(branch, f"root index not found at {root.source.location}")
        failed = [o for o in outcomes if o.status == "failed"]
        if failed:
            reasons = "; ".join(f"{o.source.label}: {o.error}" for o in failed)
            raise BranchError(branch, f"{len(failed)} source(s) failed: {reasons}")
        assert root.summary is not None
        stacks = {o.source.label: o.summary for o in outcomes[1:] if o.summary is not None}
        return root.summary, stacks

    @staticmethod
    def _findings(outcomes: list[SourceOutcome], conflicts: list[Conflict]) -> dict[str, Any]:
        invalid: list[dict[str, str]] = []
        for o in outcomes:
            records: list[InvalidRecord] = o.summary.invalid if o.summary else []
            invalid += [
                {"source": o.source.label, "hash": r.hash, "reason": r.reason} for r in records
            ]
        return {
            "invalid_records": invalid,
            "conflicts": conflicts,
            "missing_stacks": [o.source.label for o in outcomes if o.status == "missing"],
        }

    @staticmethod
    def _stats(
        outcomes: list[SourceOutcome],
        packages: dict[str, PackageSummary],
        conflicts: list[Conflict],
    ) -> dict[str, int]:
        root = outcomes[0].summary
        return {
            "packages": len(packages),
            "specs": sum(p.meta.num_specs for p in packages.values()),
            "root_records": root.records if root else 0,
            "sources": len(outcomes),
            "sources_missing": sum(o.status == "missing" for o in outcomes),
            "invalid_records": sum(len(o.summary.invalid) for o in outcomes if o.summary),
            "conflicts": len(conflicts),
        }

    def _finish(self, report: dict[str, Any], clock: float) -> None:
        report["finished_at"] = _now()
        report["duration_seconds"] = round(time.monotonic() - clock, 3)

    def _save_report(self, branch: str, report: dict[str, Any]) -> None:
        if is_safe_name(branch):
            atomic_write(state_dir(self.output) / "reports" / f"{branch}.json", encode_json(report))

    def _publish(
        self,
        branch: str,
        index: dict[str, Any],
        packages: dict[str, PackageSummary],
        report: dict[str, Any],
        clock: float,
    ) -> Path:
        stage = BranchStage(self.output, branch)
        try:
            stage.write("index.json", encode_json(index))
            if "pages" in self.config.formats:
                for name, summary in packages.items():
                    page = render_page(name, branch, summary).encode()
                    stage.write(f"pages/{name}/specs.md", page)
            self._finish(report, clock)
            stage.write("report.json", encode_json(report))
            path = stage.publish()
        finally:
            stage.discard()
        self._save_report(branch, report)
        return path

    async def _source(
        self, fetcher: Fetcher, branch: str, source: Source, dest: Path
    ) -> SourceOutcome:
        outcome = SourceOutcome(source, "failed")
        try:
            async with self._slot:
                if source.sidecar is not None:
                    outcome.sidecar = await self._sidecar(fetcher, source.sidecar)
                outcome.fetched = fetched = await fetcher.download(source.location, dest)
            if source.checksum is not None and fetched.sha256 != source.checksum:
                raise ChecksumError(source.location, source.checksum, fetched.sha256 or "")
            assert fetched.path is not None
            outcome.summary = await self._decode(fetched.path, source, outcome)
            outcome.status = "fetched"
        except NotFoundError as err:
            outcome.status, outcome.error = "missing", str(err)
        except CrawlerError as err:
            outcome.error = str(err)
        except Exception as err:  # a bug: keep the branch's failure readable, log the trace
            log.exception("internal error on %s", source.location)
            outcome.error = f"internal error: {err!r}"
        finally:
            dest.unlink(missing_ok=True)  # noqa: ASYNC240 - one unlink, not worth a thread hop
            outcome.retries = fetcher.retries.get(source.location, 0)
        size = outcome.fetched.size if outcome.fetched else 0
        ok = outcome.status != "failed"
        self.reporter.source_done(branch, outcome.line(), size, ok)
        return outcome

    @property
    def _slot(self) -> asyncio.Semaphore:
        if not hasattr(self, "_semaphore"):
            self._semaphore = asyncio.Semaphore(self.config.concurrency)
        return self._semaphore

    @staticmethod
    async def _sidecar(fetcher: Fetcher, location: str) -> str | None:
        """A v2 ``index.json.hash`` if there is one: recorded, compared, never trusted blindly."""
        try:
            text = (await fetcher.read(location)).decode("ascii", "replace").strip()
        except NotFoundError:
            return None
        return text if len(text) == 64 else f"invalid: {text[:80]!r}"

    async def _decode(self, path: Path, source: Source, outcome: SourceOutcome) -> SourceSummary:
        kind: Kind = "root" if source.is_root else "stack"
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        data = await loop.run_in_executor(self.pool, summarize_index, str(path), source.url, kind)
        outcome.decode_seconds = time.monotonic() - started
        return load_summary(data)
