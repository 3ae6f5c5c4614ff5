"""Sources: bring one index of a branch from the mirror to a validated summary.

For each source, :class:`SourceReader` first tries to prove that a cached summary is current
(see :mod:`crawler.output.state`), and otherwise downloads the index (at most ``concurrency`` at a
time) and has it decoded by a pool of worker processes, so that a 300 MB index never stalls the
event loop or the other downloads; a root index is decoded while it downloads
(:mod:`crawler.decode.progressive`). Every outcome, good or bad, is returned as a
:class:`SourceOutcome`; only cancellation propagates.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from ..build.consolidate import paused_gc
from ..config import Config
from ..decode.chunks import BadCut
from ..decode.pool import ROOT_FIRST, STACKS_AFTER, DecodeQueue
from ..decode.progressive import RootParts
from ..decode.summarize import (
    RootShard,
    load_root_shard,
    merge_root,
    root_gaps,
    summarize_root_shard,
    summarize_stack,
)
from ..decode.validate import Kind, SourceSummary
from ..documents import IndexSource, ReportSource
from ..errors import (
    ChecksumError,
    CrawlerError,
    FetchError,
    NotFoundError,
    OutOfMemory,
    OutputError,
    SourceChanged,
    out_of_memory,
)
from ..mirror.discovery import Source
from ..mirror.fetch import Fetched, Fetcher, usable_etag
from ..output.state import BranchState, SourceFacts, SourceState, Store, summary_of
from .reporting import Reporter

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"[0-9a-f]{64}")
#: Reads of a local index that keeps changing as it is read (:meth:`Fetched.check_unchanged`).
_CHANGING_ATTEMPTS = 3


def is_sha256(text: str | None) -> bool:
    """True for 64 lowercase hex characters (a sidecar must be exactly that to be used)."""
    return text is not None and _SHA256.fullmatch(text) is not None


Status = Literal["fetched", "unchanged", "missing", "failed", "not_read"]


@dataclass
class SourceOutcome:
    """What happened to one source of a branch.

    ``fetched``: downloaded (and decoded, unless a cached summary had the same SHA-256);
    ``unchanged``: a validator proved the cached summary current, nothing was downloaded;
    ``missing``: 404; ``failed``: anything else, with ``error``; ``not_read``: as the
    branch's root index is missing or unusable (see :func:`crawler.sync.run._read_all`).
    """

    source: Source
    status: Status = "failed"
    facts: SourceFacts | None = None
    sha256: str | None = None
    size: int | None = None
    etag: str | None = None
    sidecar: str | None = None
    error: str | None = None
    attempts: int = 0
    retries: int = 0
    decoded: bool = False
    downloaded: bool = False  # this URL has been downloaded at least once (carried over runs)
    fetch_seconds: float = 0.0
    #: From the end of the download to the summary (a root decoded while it downloads spent
    #: most of its decoding inside ``fetch_seconds``); waiting for a free worker included.
    decode_seconds: float = 0.0
    _summary: SourceSummary | None = None
    _loader: Callable[[], SourceSummary | None] | None = None

    @property
    def summary(self) -> SourceSummary | None:
        """The summary, loaded from the cache on first use when it was proven unchanged.

        An unchanged branch never needs it, so a warm run reads no summary at all.
        """
        if self._summary is None and self._loader is not None:
            self._summary, self._loader = self._loader(), None
        return self._summary

    def use(self, summary: SourceSummary | None, facts: SourceFacts | None = None) -> None:
        """Set the summary (or a way to load it later, with its facts), or clear both."""
        self._summary, self._loader = summary, None
        self.facts = facts
        if summary is not None:  # it lists only the first invalid records: count them all
            self.facts = msgspec.structs.replace(
                SourceFacts.of(summary), invalid_records=summary.invalid_total
            )

    def consolidated(self) -> None:
        """The summary's hashes and identities are consolidated: free them, keep the rest (its
        invalid records, for the report)."""
        if self._summary is not None:
            self._summary = msgspec.structs.replace(self._summary, hashes=[], identities=[])

    def release(self) -> None:
        """Forget the summary, keep its facts (for ``index.json`` and the branch state)."""
        self._summary, self._loader = None, None

    def use_later(self, loader: Callable[[], SourceSummary | None], facts: SourceFacts) -> None:
        """Defer loading the summary until something needs more than its facts."""
        self._summary, self._loader, self.facts = None, loader, facts

    @property
    def kind(self) -> Kind:
        """Root and stack indexes are summarised differently."""
        return "root" if self.source.is_root else "stack"

    @property
    def sidecar_matches(self) -> bool | None:
        """Whether a v2 ``index.json.hash`` names these bytes (None: no sidecar, or no bytes)."""
        if self.sidecar is None or self.sha256 is None:
            return None
        return self.sidecar == self.sha256

    def line(self) -> str:
        """One human line: label, status, bytes, records, seconds, and a sidecar that
        disagrees (a mirror being updated; the index itself is used)."""
        if self.facts is None:
            return f"{self.source.label}: {self.status} ({self.error})"
        seconds = self.fetch_seconds + self.decode_seconds
        line = (
            f"{self.source.label}: {self.status} {self.size or 0:,} bytes, "
            f"{self.facts.records:,} records, {seconds:.2f}s"
        )
        if self.sidecar_matches is False:
            line += f"; its index.json.hash disagrees ({self.sidecar})"
        return line

    def index_entry(self) -> IndexSource:
        """The source as ``index.json`` lists it: only facts about the mirror's content."""
        facts = self.facts
        return IndexSource(
            label=self.source.label,
            url=self.source.url,
            layout=self.source.layout,
            status="ok" if facts is not None else self.status,
            sha256=self.sha256 if facts else None,
            bytes=self.size if facts else None,
            db_version=facts.db_version if facts else None,
            records=facts.records if facts else None,
            in_buildcache=facts.in_buildcache if facts else None,
            invalid_records=facts.invalid_records if facts else None,
        )

    def report_entry(self) -> ReportSource:
        """The source as ``report.json`` lists it: its ``index.json`` entry with the outcome
        as its status, and how it was fetched."""
        entry = self.index_entry()
        return ReportSource(
            label=entry.label,
            url=entry.url,
            layout=entry.layout,
            status=self.status,
            sha256=entry.sha256,
            bytes=entry.bytes,
            db_version=entry.db_version,
            records=entry.records,
            in_buildcache=entry.in_buildcache,
            invalid_records=entry.invalid_records,
            location=self.source.location,
            sidecar_sha256=self.sidecar,
            sidecar_matches=self.sidecar_matches,
            attempts=self.attempts,
            retries=self.retries,
            decoded=self.decoded,
            fetch_seconds=round(self.fetch_seconds, 3),
            decode_seconds=round(self.decode_seconds, 3),
            error=self.error,
        )

    def state(self) -> SourceState:
        """What the next run needs to know about this source. One that was not read passes on
        nothing about its bytes or its server: what it received may be what made it fail (a v3
        blob that does not match its name), and must not pass as current next time."""
        if self.facts is None:
            return SourceState(self.source.label, self.source.url, self.status)
        return SourceState(
            self.source.label,
            self.source.url,
            self.status,
            self.sha256,
            self.size,
            self.etag,
            self.facts,
            self.downloaded,
            self.source.location,
        )


async def _all_or_none(jobs: Iterable[Awaitable[bytes]]) -> list[bytes]:
    """Every job's result, in order; at the first failure the others are cancelled."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _load_shards(results: list[bytes]) -> tuple[list[RootShard], list[str] | None]:
    """The workers' shards of a root, and :func:`root_gaps` of them.

    This and :func:`_merged` run in a thread: they take a few tenths of a second for a
    develop root, during which the event loop goes on handing the stacks still queued to the
    decoding workers (which would otherwise sit idle) and taking their results.
    """
    with paused_gc():
        loaded = [load_root_shard(p) for p in results]
        return loaded, root_gaps(loaded)


def _merged(loaded: list[RootShard]) -> SourceSummary:
    """:func:`merge_root` of the shards, in a thread (see :func:`_load_shards`)."""
    with paused_gc():
        return merge_root(loaded)


class SourceReader:
    """Reads the sources of a run: one fetcher, one cache, one pool of decoding processes."""

    def __init__(self, config: Config, fetcher: Fetcher, store: Store, reporter: Reporter):
        self.config = config
        self.fetcher = fetcher
        self.store = store
        self.reporter = reporter
        self._slot = asyncio.Semaphore(config.concurrency)
        self._parts: dict[Path, RootParts] = {}  # root downloads decoding as they come
        self.decoder = DecodeQueue(config.decode_workers or min(os.cpu_count() or 1, 8))
        #: The SHA-256 of every index read in this run (their cached summaries are kept).
        self.read_sha256: set[str] = set()

    def close(self) -> None:
        """Stop the decoding workers (also on cancellation); a later read starts new ones."""
        self.decoder.close()

    async def read(
        self, branch: str, source: Source, dest: Path, previous: BranchState | None
    ) -> SourceOutcome:
        """Fetch (or prove unchanged) and summarise one source; never raises but to cancel."""
        fetcher = self.fetcher
        outcome = SourceOutcome(source)
        started = time.monotonic()
        try:
            for attempt in range(1, _CHANGING_ATTEMPTS + 1):
                async with self._slot:
                    fetched = await self._fetch(fetcher, outcome, dest, previous)
                outcome.fetch_seconds = time.monotonic() - started
                if fetched is None:
                    break
                try:
                    await self._decode(fetched, outcome)
                    break
                except SourceChanged as err:  # a local file: read it again, hashing first
                    if attempt == _CHANGING_ATTEMPTS:
                        raise SourceChanged(err.url, err.reason, attempt) from None
                    log.info("%s %s, reading it again", branch, err)
        except NotFoundError as err:
            outcome.status, outcome.error = "missing", str(err)
        except CrawlerError as err:
            outcome.status, outcome.error = "failed", str(err)
        except Exception as err:
            if out_of_memory(err):  # here, not in a decoding process: no bug, no trace to log
                outcome.status, outcome.error = "failed", str(OutOfMemory(source.location))
            else:  # a bug: keep the branch's failure readable, log the trace
                log.exception("internal error on %s", source.location)
                outcome.status, outcome.error = "failed", f"internal error: {err!r}"
        finally:
            parts = self._parts.pop(dest, None)
            if parts is not None:
                parts.abandon()
            dest.unlink(missing_ok=True)  # noqa: ASYNC240 - one unlink, not worth a thread hop
            outcome.retries = fetcher.retries.get(source.location, 0)
            if outcome.sha256 is not None:
                self.read_sha256.add(outcome.sha256)
        if outcome.status in ("missing", "failed"):
            outcome.use(None)
        ok = outcome.status != "failed"
        self.reporter.source_done(branch, outcome.line(), outcome.size or 0, ok)
        return outcome

    def _reuse(
        self,
        outcome: SourceOutcome,
        sha256: str | None,
        status: Status,
        before: SourceState | None = None,
    ) -> bool:
        """Take the cached summary of bytes with this SHA-256, if there is one.

        When the last publish read the same bytes, its facts are enough for now and the summary
        itself is loaded only if the branch must be rebuilt. Bytes larger than ``max_index_mb``
        (lowered since they were read) are not taken: read again, they fail as they would in a
        cold sync.
        """
        if sha256 is None:
            return False
        kind, limit = outcome.kind, self.config.max_index_bytes
        if before is not None and before.sha256 == sha256 and before.facts is not None:
            if not self.store.has(kind, sha256) or (before.size or 0) > limit:
                return False
            outcome.use_later(lambda: self._load(kind, sha256), before.facts)
            outcome.size = before.size
        else:
            cached = self.store.load(kind, sha256)
            if cached is None or cached.size > limit:
                return False
            outcome.use(cached.summary)
            outcome.size = cached.size
        outcome.sha256, outcome.status = sha256, status
        return True

    def _load(self, kind: Kind, sha256: str) -> SourceSummary | None:
        cached = self.store.load(kind, sha256)
        return cached.summary if cached else None

    @staticmethod
    def _promised(outcome: SourceOutcome, before: SourceState | None) -> str | None:
        """The SHA-256 the mirror vouches for without a download, if any.

        Nothing for a local mirror: hashing the file is exact and cheap. A v3 blob's name is its
        checksum. A v2 sidecar is uploaded after its index, so it can be stale for a moment: it
        is trusted only where a conditional request is impossible, that is for a URL that was
        downloaded before and whose server sent no ETag then (with an ETag, ``If-None-Match``
        is exact).
        """
        source = outcome.source
        if source.location.startswith("file://"):
            return None
        if source.checksum is not None:
            return source.checksum
        if before is None:
            return None
        sidecar = outcome.sidecar
        trusted = before.downloaded and before.etag is None and is_sha256(sidecar)
        return sidecar if trusted else None

    async def _fetch(
        self, fetcher: Fetcher, outcome: SourceOutcome, dest: Path, previous: BranchState | None
    ) -> Fetched | None:
        """Prove the cached summary current, or download the index.

        Returns the file to decode, or None when a cached summary was taken.
        """
        source = outcome.source
        before = previous.source(source.label, source.url, source.location) if previous else None
        if before is not None:  # what the server is known for carries over to this run
            outcome.etag, outcome.downloaded = usable_etag(before.etag), before.downloaded
        if source.sidecar is None:
            return await self._fetch_index(fetcher, outcome, dest, before)
        if before is None or before.etag is None:  # the sidecar may serve as the validator
            outcome.sidecar = await self._sidecar(fetcher, source.sidecar)
            return await self._fetch_index(fetcher, outcome, dest, before)
        # With an ETag the sidecar is only reported: fetch it alongside, not before.
        sidecar = asyncio.create_task(self._sidecar(fetcher, source.sidecar))
        try:
            path = await self._fetch_index(fetcher, outcome, dest, before)
        except BaseException:
            sidecar.cancel()
            await asyncio.gather(sidecar, return_exceptions=True)
            raise
        outcome.sidecar = await sidecar
        return path

    async def _fetch_index(
        self,
        fetcher: Fetcher,
        outcome: SourceOutcome,
        dest: Path,
        before: SourceState | None,
    ) -> Fetched | None:
        source = outcome.source
        etag = before.etag if before and self.store.has(outcome.kind, before.sha256) else None
        promised = self._promised(outcome, before)
        if promised is not None and self.store.has(outcome.kind, promised):
            # A name or a sidecar vouches for the bytes, not that the index is still there:
            # unless HEAD confirms it, the download decides (a cold sync would say "missing").
            confirmed = await fetcher.confirmed(source.location)
            if confirmed and self._reuse(outcome, promised, "unchanged", before):
                return None
        progress = None
        if not source.location.startswith("file://"):  # local files are only hashed here
            if etag is None:  # a body will come: workers start while it downloads
                self.decoder.start()
            if source.is_root:
                parts = self._parts[dest] = RootParts(self.decoder, dest, source.location)
                progress = parts.written
        fetched = await fetcher.download(source.location, dest, etag=etag, progress=progress)
        outcome.attempts, outcome.etag, outcome.downloaded = fetched.attempts, fetched.etag, True
        if fetched.not_modified:
            assert before is not None and before.sha256 is not None
            if self._reuse(outcome, before.sha256, "unchanged", before):
                return None
            # The cache was lost meanwhile (the 304 wrote nothing: the parts are still unused).
            fetched = await fetcher.download(source.location, dest, progress=progress)
        decoded = None
        if source.checksum is not None and fetched.sha256 != source.checksum and fetched.encoding:
            # A blob stored compressed and served with a Content-Encoding saying so (object
            # metadata): its name is the checksum of the bytes as stored, which Spack's own
            # client reads, and aiohttp undid the encoding. Asked for again, as stored.
            decoded = fetched
            fetched = await fetcher.download(source.location, dest, progress=progress, stored=True)
            outcome.attempts += fetched.attempts
            outcome.etag = fetched.etag
        outcome.sha256, outcome.size, outcome.status = fetched.sha256, fetched.size, "fetched"
        if source.checksum is not None and fetched.sha256 != source.checksum:
            raise ChecksumError(
                source.location,
                source.checksum,
                fetched.sha256 or "",
                encoding=decoded.encoding if decoded else None,
                decoded=decoded.sha256 if decoded else None,
            )
        if self._reuse(outcome, fetched.sha256, "fetched"):
            return None  # same bytes as a cached summary: no need to decode them again
        return fetched

    @staticmethod
    async def _sidecar(fetcher: Fetcher, location: str) -> str | None:
        """A v2 ``index.json.hash`` if there is one (None if absent or unreadable).

        It is recorded in the report and compared with the index's SHA-256; as a validator it
        can spare a download (see :mod:`crawler.output.state`).
        """
        try:
            text = (await fetcher.read(location, sidecar=True)).decode("ascii", "replace").strip()
        except NotFoundError:
            return None
        except FetchError as err:  # only a validator: the index itself decides
            log.warning("ignoring unreadable sidecar: %s", err)
            return None
        return text if is_sha256(text) else f"invalid: {text[:80]!r}"

    async def _root_summary(
        self, path: Path, url: str, size: int
    ) -> tuple[list[bytes], SourceSummary]:
        """Summarise a root index on every worker at once (see :mod:`crawler.decode.summarize`);
        returns what the workers encoded, and the summary.

        The root is the largest index and everything waits for it: its jobs go ahead of any
        stack still queued. A root downloaded from a server was cut into parts that were
        decoding while it downloaded (:mod:`crawler.decode.progressive`); otherwise each worker
        takes a shard. Parts or shards read in pieces are read again whole if a piece does not
        decode or two pieces hold the same key, and again with the missing hashes if records
        point at dependencies that none of them holds.
        """
        parts = self._parts.pop(path, None)
        if parts is not None and not parts.complete(size):
            parts = None
        try:
            return await self._root_rounds(path, url, parts)
        finally:
            if parts is not None:
                parts.abandon()  # parts still running after a failure are of no use

    async def _root_rounds(
        self, path: Path, url: str, parts: RootParts | None
    ) -> tuple[list[bytes], SourceSummary]:
        """The rounds of :meth:`_root_summary`: parts or shards, then again if need be."""
        shards = self.decoder.workers
        whole = False
        missing: tuple[str, ...] = ()
        while True:
            try:
                if parts is not None and not whole:
                    results = await parts.results(missing)
                else:
                    results = await _all_or_none(
                        self.decoder.run(
                            ROOT_FIRST,
                            summarize_root_shard,
                            str(path),
                            url,
                            i,
                            shards,
                            missing,
                            whole,
                            self.config.max_index_bytes,
                        )
                        for i in range(shards)
                    )
            except BadCut as err:
                log.info("reading %s whole: %s", url, err)
                if parts is not None:
                    parts.abandon()
                whole = True
                continue
            loaded, gaps = await asyncio.to_thread(_load_shards, results)
            if gaps is None:
                if whole:  # shards of one decoded document cannot share a key
                    raise AssertionError(f"{url}: a key in two shards of a whole read")
                log.info("reading %s whole: a key occurs in two of its pieces", url)
                whole = True
            elif gaps and not missing:
                missing = tuple(gaps)
            else:
                return results, await asyncio.to_thread(_merged, loaded)

    async def _decode(self, fetched: Fetched, outcome: SourceOutcome) -> None:
        """Summarise a fetched index and cache the summary under its SHA-256; raises
        :class:`SourceChanged` when a local file changed meanwhile (nothing is cached)."""
        started = time.monotonic()
        # Errors name where the bytes came from, as fetch errors do (not the listed s3:// URL).
        kind, url, path = outcome.kind, outcome.source.location, fetched.path
        assert path is not None
        try:
            if kind == "root":
                parts, summary = await self._root_summary(path, url, outcome.size or 0)
            else:
                limit = self.config.max_index_bytes
                parts = [
                    await self.decoder.run(STACKS_AFTER, summarize_stack, str(path), url, limit)
                ]
                summary = summary_of(kind, parts)
        except Exception as err:
            # Bytes half written meanwhile, or shards of a root that read two versions of it
            # (whatever that made of them): read again, not failed.
            fetched.check_unchanged()
            if isinstance(err, OSError) and err.filename == str(path) and not fetched.identity:
                # The crawler's own download, gone from .crawler/tmp (or unreadable) meanwhile:
                # a problem of the output folder, not of the mirror, and no bug.
                raise OutputError(str(path), err.strerror or str(err), "read") from None
            raise
        fetched.check_unchanged()
        outcome.use(summary)
        outcome.decoded = True
        outcome.decode_seconds = time.monotonic() - started
        if outcome.sha256 is not None and outcome.size is not None:
            self.store.save(kind, outcome.sha256, outcome.size, parts)
