"""Sources: bring one index of a branch from the mirror to a validated summary.

For each source, :class:`SourceReader` first tries to prove that a cached summary is current
(see :mod:`crawler.output.state`), and otherwise downloads the index (at most ``concurrency`` at a
time) and has it decoded by a pool of worker processes, so that a 300 MB index never stalls the
event loop or the other downloads; a root index is decoded while it downloads
(:mod:`crawler.decode.progressive`). Every outcome, good or bad, is returned as a
:class:`SourceOutcome`; only cancellation propagates.

``crawler sync --dry-run`` asks the same reader (:meth:`SourceReader.forecast`): the same
decisions in the same order, with the request a download starts with
(:meth:`~crawler.mirror.fetch.Fetcher.probe`) in place of the download, and nothing decoded or
written. Each outcome says why it was (or would be) downloaded or proven unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from functools import cached_property
from pathlib import Path

from ..config import Config
from ..decode.pool import DecodePool
from ..decode.validate import Kind, SourceSummary
from ..errors import (
    ChecksumError,
    CrawlerError,
    FetchError,
    NotFoundError,
    OutOfMemory,
    SourceChanged,
    out_of_memory,
)
from ..mirror.discovery import Source
from ..mirror.fetch import Fetcher
from ..mirror.http import usable_etag
from ..mirror.transport import Fetched, Probed
from ..output.state import BranchState, SourceState, Store
from .decoding import Decoding
from .outcome import SourceForecast, SourceOutcome, Status
from .reporting import Download, Reporter

log = logging.getLogger(__name__)

_SHA256 = re.compile(r"[0-9a-f]{64}")
#: Reads of a local index that keeps changing as it is read (:meth:`Fetched.check_unchanged`).
_CHANGING_ATTEMPTS = 3


def is_sha256(text: str | None) -> bool:
    """True for 64 lowercase hex characters (a sidecar must be exactly that to be used)."""
    return text is not None and _SHA256.fullmatch(text) is not None


class SourceReader:
    """Reads the sources of a run: one fetcher, one cache, one pool of decoding processes."""

    def __init__(
        self,
        config: Config,
        fetcher: Fetcher,
        store: Store,
        reporter: Reporter,
        pool: DecodePool | None = None,
        *,
        dry: bool = False,
    ):
        """``pool``: the decoding processes (by default ``decode_workers`` of them); ``dry``:
        a reader of forecasts (:meth:`forecast`) alone, which loads, decodes and writes
        nothing."""
        self.config = config
        self.fetcher = fetcher
        self.store = store
        self.reporter = reporter
        self._slot = asyncio.Semaphore(config.concurrency)
        self._pool = pool
        self._dry = dry
        #: The SHA-256 of every index read in this run (their cached summaries are kept).
        self.read_sha256: set[str] = set()

    @cached_property
    def decoding(self) -> Decoding:
        """The decoding of what is downloaded; made at the first read (never by a dry run:
        it makes the spec store's folder)."""
        pool = self._pool or DecodePool(self.config.decode_workers or min(os.cpu_count() or 1, 8))
        return Decoding(pool, self.store, self.config.max_index_bytes)

    async def settle(self) -> None:
        """Update the spec store with the last root read (once its branch is done)."""
        await self.decoding.settle()

    def close(self) -> None:
        """Stop the decoding workers (also on cancellation); a later read starts new ones."""
        self.decoding.pool.close()

    async def read(
        self, branch: str, source: Source, dest: Path, previous: BranchState | None
    ) -> SourceOutcome:
        """Fetch (or prove unchanged) and summarise one source; never raises but to cancel."""
        outcome = SourceOutcome(source)
        started = time.monotonic()
        try:
            for attempt in range(1, _CHANGING_ATTEMPTS + 1):
                async with self._slot:
                    fetched = await self._fetch(outcome, dest, previous, branch)
                outcome.fetch_seconds = time.monotonic() - started
                if not isinstance(fetched, Fetched):
                    break  # a cached summary was taken
                try:
                    await self.decoding.decode(fetched, outcome)
                    break
                except SourceChanged as err:  # a local file: read it again, hashing first
                    if attempt == _CHANGING_ATTEMPTS:
                        raise SourceChanged(err.url, err.reason, attempt) from None
                    log.info("%s %s, reading it again", branch, err)
        except Exception as err:
            _failed(outcome, err)
        finally:
            self.decoding.abandon(dest)
            dest.unlink(missing_ok=True)  # noqa: ASYNC240 - one unlink, not worth a thread hop
            outcome.retries = self.fetcher.retries.get(source.location, 0)
            if outcome.sha256 is not None:
                self.read_sha256.add(outcome.sha256)
        if outcome.status in ("missing", "failed"):
            outcome.use(None)
        if outcome.reason:
            log.debug("%s %s: %s (%s)", branch, source.label, outcome.status, outcome.reason)
        self.reporter.source_done(branch, outcome)
        return outcome

    async def forecast(self, source: Source, previous: BranchState | None) -> SourceForecast:
        """What :meth:`read` would do with ``source``, found out by the same decisions with
        the request a download starts with, its body left unread (``sync --dry-run``):
        nothing is downloaded, loaded, decoded or written. Never raises but to cancel."""
        assert self._dry, "a forecast is a dry reader's"
        outcome = SourceOutcome(source)
        try:
            async with self._slot:
                found = await self._fetch(outcome, None, previous, "")
        except Exception as err:
            _failed(outcome, err)
            return SourceForecast(outcome, None)
        return SourceForecast(outcome, found if isinstance(found, Probed) else None)

    def _reuse(
        self,
        outcome: SourceOutcome,
        sha256: str | None,
        status: Status,
        before: SourceState | None,
        why: str,
    ) -> bool:
        """Take the cached summary of bytes with this SHA-256, if there is one (``why``: what
        proved it current, for :attr:`SourceOutcome.reason`).

        When the last publish read the same bytes, its facts are enough for now and the summary
        itself is loaded only if the branch must be rebuilt. Bytes larger than ``max_index_mb``
        (lowered since they were read) are not taken: read again, they fail as they would in a
        cold sync. A dry run only looks for the summary: loading one may remove it (unreadable).
        """
        if sha256 is None:
            return False
        kind, limit = outcome.kind, self.config.max_index_bytes
        if before is not None and before.sha256 == sha256 and before.facts is not None:
            if not self.store.has(kind, sha256) or (before.size or 0) > limit:
                return False
            outcome.use_later(lambda: self._load(kind, sha256), before.facts)
            outcome.size = before.size
        elif self._dry:
            if not self.store.has(kind, sha256):
                return False
            why += ", but not the bytes of the last publish"
        else:
            cached = self.store.load(kind, sha256)
            if cached is None or cached.size > limit:
                return False
            outcome.use(cached.summary)
            outcome.size = cached.size
        outcome.sha256, outcome.status, outcome.reason = sha256, status, why
        return True

    def _load(self, kind: Kind, sha256: str) -> SourceSummary | None:
        cached = self.store.load(kind, sha256)
        return cached.summary if cached else None

    async def _fetch(
        self, outcome: SourceOutcome, dest: Path | None, previous: BranchState | None, branch: str
    ) -> Fetched | Probed | None:
        """Prove the cached summary current, or download the index (a dry run: probe it).

        Returns the file to decode (a dry run: what the request a download would start with
        was told), or None when a cached summary was taken.
        """
        source = outcome.source
        before = previous.source(source.label, source.url, source.location) if previous else None
        if before is not None:  # what the server is known for carries over to this run
            outcome.etag, outcome.downloaded = usable_etag(before.etag), before.downloaded
        if source.sidecar is not None and (before is None or before.etag is None):
            # The sidecar may serve as the validator (else it would only be reported).
            if before is not None or not self._dry:
                outcome.sidecar = await read_sidecar(self.fetcher, source.sidecar)
        elif source.sidecar is not None and not self._dry:
            # With an ETag the sidecar is only reported: fetch it alongside, not before.
            sidecar = asyncio.create_task(read_sidecar(self.fetcher, source.sidecar))
            try:
                path = await self._fetch_index(outcome, dest, before, branch)
            except BaseException:
                sidecar.cancel()
                await asyncio.gather(sidecar, return_exceptions=True)
                raise
            outcome.sidecar = await sidecar
            return path
        return await self._fetch_index(outcome, dest, before, branch)

    async def _fetch_index(
        self, outcome: SourceOutcome, dest: Path | None, before: SourceState | None, branch: str
    ) -> Fetched | Probed | None:
        source, fetcher = outcome.source, self.fetcher
        cached = before is not None and self.store.has(outcome.kind, before.sha256)
        etag = before.etag if before is not None and cached else None
        promised = promised_sha256(source, before, outcome.sidecar)
        if promised is not None and self.store.has(outcome.kind, promised):
            # A name or a sidecar vouches for the bytes, not that the index is still there:
            # unless HEAD confirms it, the download decides (a cold sync would say "missing").
            names = "its blob's checksum" if source.checksum else "its index.json.hash"
            why = f"{names} names cached bytes"
            if await fetcher.confirmed(source.location) and self._reuse(
                outcome, promised, "unchanged", before, why
            ):
                return None
        if dest is None:  # a dry run
            probed = await fetcher.probe(source.location, etag)
            return self._probed(outcome, before, etag, cached, probed)
        last = before.sha256 if before is not None else None
        root = None
        if not source.is_local:  # local files are only hashed here
            if etag is None:  # a body will come: workers start while it downloads
                self.decoding.pool.start()
            if source.is_root:
                root = self.decoding.root_parts(dest, source.location).written
        watch = Download(self.reporter, branch, source.label, root)
        progress, announced = watch.written, watch.announced
        fetched = await fetcher.download(
            source.location, dest, etag=etag, progress=progress, announced=announced
        )
        outcome.attempts, outcome.etag, outcome.downloaded = fetched.attempts, fetched.etag, True
        if fetched.not_modified:
            if self._reuse(outcome, last, "unchanged", before, _NOT_MODIFIED):
                return None
            # The cache was lost meanwhile (the 304 wrote nothing: the parts are still unused).
            fetched = await fetcher.download(
                source.location, dest, progress=progress, announced=announced
            )
        decoded = None
        if source.checksum is not None and fetched.sha256 != source.checksum and fetched.encoding:
            # A blob stored compressed and served with a Content-Encoding saying so (object
            # metadata): its name is the checksum of the bytes as stored, which Spack's own
            # client reads, and aiohttp undid the encoding. Asked for again, as stored.
            decoded = fetched
            fetched = await fetcher.download(
                source.location, dest, progress=progress, stored=True, announced=announced
            )
            outcome.attempts += fetched.attempts
            outcome.etag = fetched.etag
        outcome.sha256, outcome.size, outcome.status = fetched.sha256, fetched.size, "fetched"
        watch.arrived(fetched.size)
        check_checksum(source, fetched, decoded)
        if self._reuse(outcome, fetched.sha256, "fetched", before, _SAME_BYTES):
            return None  # same bytes as a cached summary: no need to decode them again
        outcome.reason = _changed(source, before, cached, known=True)
        return fetched

    def _probed(
        self,
        outcome: SourceOutcome,
        before: SourceState | None,
        etag: str | None,
        cached: bool,
        probed: Probed,
    ) -> Probed | None:
        """A dry run's decisions on the answer to the request a download would start with, as
        :meth:`_fetch_index` makes them on the download's (``cached``: the last publish's
        summary is in the cache)."""
        last = before.sha256 if before is not None else None
        if probed.not_modified and self._reuse(outcome, last, "unchanged", before, _NOT_MODIFIED):
            return None
        if self._reuse(outcome, probed.sha256, "unchanged", before, _SAME_BYTES):
            return None  # a local file, hashed in place
        if etag is not None and probed.etag == usable_etag(etag):
            # A server that ignores If-None-Match: a sync downloads it, and finds the same bytes.
            why = "same ETag; a sync downloads it again all the same"
            if self._reuse(outcome, last, "unchanged", before, why):
                return None
        outcome.status, outcome.size = "fetched", probed.size
        outcome.reason = _changed(outcome.source, before, cached, probed.sha256 is not None)
        return probed


_NOT_MODIFIED = "304 Not Modified"
_SAME_BYTES = "same bytes"


def _failed(outcome: SourceOutcome, err: Exception) -> None:
    """Set the outcome of a read (or a forecast) that raised ``err``."""
    if isinstance(err, NotFoundError):
        outcome.status, outcome.error = "missing", str(err)
    elif isinstance(err, CrawlerError):
        outcome.status, outcome.error = "failed", str(err)
    elif out_of_memory(err):  # here, not in a decoding process: no bug, no trace to log
        outcome.status, outcome.error = "failed", str(OutOfMemory(outcome.source.location))
    else:  # a bug: keep the branch's failure readable, log the trace
        log.exception("internal error on %s", outcome.source.location)
        outcome.status, outcome.error = "failed", f"internal error: {err!r}"


def _changed(source: Source, before: SourceState | None, cached: bool, known: bool) -> str:
    """Why a source is (or would be) downloaded, or a local one read and decoded again
    (``cached``: the summary of the last publish's bytes is in the cache; ``known``: the new
    bytes' SHA-256 is known)."""
    if before is None or before.sha256 is None:
        return "not read at the last publish" if before else "new since the last publish"
    if not cached:
        return "its cached summary is gone"
    if known:
        return "changed since the last publish"
    if before.etag is not None:
        return "changed: answered 200 to If-None-Match"
    if source.checksum is not None:
        return "changed: a new blob"
    return "no validator: the server sends no ETag and no usable index.json.hash"


def check_checksum(source: Source, fetched: Fetched, decoded: Fetched | None) -> None:
    """Raise :class:`ChecksumError` when a v3 blob's bytes are not what its name says
    (``decoded``: the same blob as first received, with a Content-Encoding undone)."""
    if source.checksum is not None and fetched.sha256 != source.checksum:
        raise ChecksumError(
            source.location,
            source.checksum,
            fetched.sha256 or "",
            encoding=decoded.encoding if decoded else None,
            decoded=decoded.sha256 if decoded else None,
        )


def promised_sha256(source: Source, before: SourceState | None, sidecar: str | None) -> str | None:
    """The SHA-256 the mirror vouches for without a download, if any (``before``: the source's
    state at the last publish, ``sidecar``: its v2 ``index.json.hash`` as read now).

    Nothing for a local mirror: hashing the file is exact and cheap. A v3 blob's name is its
    checksum. A v2 sidecar is uploaded after its index, so it can be stale for a moment: it
    is trusted only where a conditional request is impossible, that is for a URL that was
    downloaded before and whose server sent no ETag then (with an ETag, ``If-None-Match``
    is exact).
    """
    if source.is_local:
        return None
    if source.checksum is not None:
        return source.checksum
    if before is None:
        return None
    trusted = before.downloaded and before.etag is None and is_sha256(sidecar)
    return sidecar if trusted else None


async def read_sidecar(fetcher: Fetcher, location: str) -> str | None:
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
