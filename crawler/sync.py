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
import hashlib
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
from .fetch import Fetcher, Sleep
from .progress import Reporter
from .state import BranchState, SourceState, Store, fingerprint
from .validate import InvalidRecord, Kind, SourceSummary, load_summary, summarize_index
from .write import BranchStage, atomic_write, encode_json, recover, render_page, state_dir

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
Status = Literal["fetched", "unchanged", "missing", "failed"]


@dataclass
class SourceOutcome:
    """What happened to one source of a branch.

    ``fetched``: downloaded (and decoded, unless a cached summary had the same SHA-256);
    ``unchanged``: a validator proved the cached summary current, nothing was downloaded;
    ``missing``: 404; ``failed``: anything else, with ``error``.
    """

    source: Source
    status: Status = "failed"
    summary: SourceSummary | None = None
    sha256: str | None = None
    size: int | None = None
    etag: str | None = None
    sidecar: str | None = None
    error: str | None = None
    attempts: int = 0
    retries: int = 0
    decoded: bool = False
    fetch_seconds: float = 0.0
    decode_seconds: float = 0.0

    @property
    def kind(self) -> Kind:
        """Root and stack indexes are summarised differently."""
        return "root" if self.source.is_root else "stack"

    def line(self) -> str:
        """One human line: label, status, bytes, records, seconds."""
        if self.summary is None:
            return f"{self.source.label}: {self.status} ({self.error})"
        seconds = self.fetch_seconds + self.decode_seconds
        return (
            f"{self.source.label}: {self.status} {self.size or 0:,} bytes, "
            f"{self.summary.records:,} records, {seconds:.2f}s"
        )

    def index_entry(self) -> dict[str, Any]:
        """The source as ``index.json`` lists it: only facts about the mirror's content."""
        summary = self.summary
        return {
            "label": self.source.label,
            "url": self.source.url,
            "layout": self.source.layout,
            "status": "ok" if summary is not None else self.status,
            "sha256": self.sha256 if summary else None,
            "bytes": self.size if summary else None,
            "db_version": summary.db_version if summary else None,
            "records": summary.records if summary else None,
            "in_buildcache": summary.in_buildcache if summary else None,
            "invalid_records": len(summary.invalid) if summary else None,
        }

    def report_entry(self) -> dict[str, Any]:
        """The source as ``report.json`` lists it, with how it was fetched."""
        return {
            **self.index_entry(),
            "status": self.status,
            "location": self.source.location,
            "sidecar_sha256": self.sidecar,
            "sidecar_matches": (
                None if self.sidecar is None or self.sha256 is None else self.sidecar == self.sha256
            ),
            "attempts": self.attempts,
            "retries": self.retries,
            "decoded": self.decoded,
            "fetch_seconds": round(self.fetch_seconds, 3),
            "decode_seconds": round(self.decode_seconds, 3),
            "error": self.error,
        }

    def state(self) -> SourceState:
        """What the next run needs to know about this source."""
        return SourceState(
            self.source.label, self.source.url, self.status, self.sha256, self.size, self.etag
        )


@dataclass
class BranchResult:
    """The outcome of one branch."""

    branch: str
    ok: bool
    message: str
    report: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    changed: bool = True


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
        self.store = Store(self.output)

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
        clock = time.monotonic()
        report: dict[str, Any] = {
            "tool": f"spack-cache-crawler {__version__}",
            "branch": branch,
            "mirror": self.mirror.base,
            "started_at": _now(),
        }
        outcomes: list[SourceOutcome] = []
        try:
            if branch in discovery.problems:
                raise BranchError(branch, discovery.problems[branch])
            sources = discovery.refs[branch]
            previous = self.store.branch(branch)
            self.reporter.branch_started(branch, len(sources))
            outcomes = list(
                await asyncio.gather(
                    *(
                        self._source(fetcher, branch, s, work / f"{i}.json", previous)
                        for i, s in enumerate(sources)
                    )
                )
            )
            report["sources"] = [o.report_entry() for o in outcomes]
            root, stacks = self._check(branch, outcomes)
            entries = [o.index_entry() for o in outcomes]
            formats: list[str] = sorted(self.config.formats)
            inputs = fingerprint(entries, formats)
            if self._current(branch, previous, inputs):
                return self._unchanged(branch, report, clock)
            packages, conflicts = consolidate(root, stacks)
            stats = self._stats(outcomes, packages, conflicts)
            report.update(self._findings(outcomes, conflicts), stats=stats)
            index = {
                "schema_version": SCHEMA_VERSION,
                "branch": branch,
                "mirror": self.mirror.base,
                "sources": entries,
                "stats": stats,
                "packages": packages,
            }
            report.update(status="published", error=None)
            path, digest = self._publish(branch, index, packages, report, clock)
            state = BranchState(__version__, inputs, digest, formats, [o.state() for o in outcomes])
            self.store.save_branch(branch, state)
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

    def _current(self, branch: str, previous: BranchState | None, inputs: str) -> bool:
        """True when the published branch was made from exactly these inputs and is intact."""
        if previous is None or previous.fingerprint != inputs:
            return False
        return self.store.published_sha256(self.output / branch / "index.json") == (
            previous.index_sha256
        )

    def _unchanged(self, branch: str, report: dict[str, Any], clock: float) -> BranchResult:
        report.update(status="unchanged", error=None)
        self._finish(report, clock)
        self._save_report(branch, report)
        message = (
            f"unchanged, {self.output / branch} is current ({report['duration_seconds']:.2f}s)"
        )
        self.reporter.branch_done(branch, message, ok=True)
        return BranchResult(branch, True, message, report, self.output / branch, changed=False)

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
    ) -> tuple[Path, str]:
        """Stage and publish a branch; returns its folder and the SHA-256 of its index.json."""
        stage = BranchStage(self.output, branch)
        encoded = encode_json(index)
        try:
            stage.write("index.json", encoded)
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
        return path, hashlib.sha256(encoded).hexdigest()

    async def _source(
        self,
        fetcher: Fetcher,
        branch: str,
        source: Source,
        dest: Path,
        previous: BranchState | None,
    ) -> SourceOutcome:
        outcome = SourceOutcome(source)
        started = time.monotonic()
        try:
            async with self._slot:
                path = await self._fetch(fetcher, outcome, dest, previous)
            outcome.fetch_seconds = time.monotonic() - started
            if path is not None:
                await self._decode(path, outcome)
        except NotFoundError as err:
            outcome.status, outcome.error = "missing", str(err)
        except CrawlerError as err:
            outcome.status, outcome.error = "failed", str(err)
        except Exception as err:  # a bug: keep the branch's failure readable, log the trace
            log.exception("internal error on %s", source.location)
            outcome.status, outcome.error = "failed", f"internal error: {err!r}"
        finally:
            dest.unlink(missing_ok=True)  # noqa: ASYNC240 - one unlink, not worth a thread hop
            outcome.retries = fetcher.retries.get(source.location, 0)
        if outcome.status in ("missing", "failed"):
            outcome.summary = None
        ok = outcome.status != "failed"
        self.reporter.source_done(branch, outcome.line(), outcome.size or 0, ok)
        return outcome

    def _reuse(self, outcome: SourceOutcome, sha256: str | None, status: Status) -> bool:
        """Take the cached summary of bytes with this SHA-256, if there is one."""
        cached = self.store.load(outcome.kind, sha256) if sha256 else None
        if cached is None:
            return False
        outcome.summary, outcome.sha256, outcome.size = cached.summary, sha256, cached.size
        outcome.status = status
        return True

    async def _fetch(
        self, fetcher: Fetcher, outcome: SourceOutcome, dest: Path, previous: BranchState | None
    ) -> Path | None:
        """Prove the cached summary current, or download the index.

        Returns the file to decode, or None when a cached summary was taken.
        """
        source = outcome.source
        if source.sidecar is not None:
            outcome.sidecar = await self._sidecar(fetcher, source.sidecar)
        promised = source.checksum or outcome.sidecar
        if self._reuse(outcome, promised, "unchanged"):
            return None
        before = previous.source(source.label, source.url) if previous else None
        etag = before.etag if before and self.store.has(outcome.kind, before.sha256) else None
        fetched = await fetcher.download(source.location, dest, etag=etag)
        outcome.attempts, outcome.etag = fetched.attempts, fetched.etag
        if fetched.not_modified:
            assert before is not None and before.sha256 is not None
            if self._reuse(outcome, before.sha256, "unchanged"):
                return None
            fetched = await fetcher.download(source.location, dest)  # cache lost meanwhile
        outcome.sha256, outcome.size, outcome.status = fetched.sha256, fetched.size, "fetched"
        if source.checksum is not None and fetched.sha256 != source.checksum:
            raise ChecksumError(source.location, source.checksum, fetched.sha256 or "")
        if self._reuse(outcome, fetched.sha256, "fetched"):
            return None  # same bytes as a cached summary: no need to decode them again
        return fetched.path

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

    async def _decode(self, path: Path, outcome: SourceOutcome) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        kind, url = outcome.kind, outcome.source.url
        data = await loop.run_in_executor(self.pool, summarize_index, str(path), url, kind)
        outcome.summary, outcome.decoded = load_summary(data), True
        outcome.decode_seconds = time.monotonic() - started
        if outcome.sha256 is not None and outcome.size is not None:
            self.store.save(kind, outcome.sha256, outcome.size, outcome.summary)
