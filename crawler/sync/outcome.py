"""Outcome: what happened to one source of a branch, and how each document tells it (its
entry in ``index.json`` and ``report.json``, its state for the next run); and what a dry run
foresees for it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import msgspec

from ..decode.validate import Kind, SourceSummary
from ..documents import IndexSource, ReportSource
from ..mirror.discovery import Source, manifest_facts
from ..mirror.transport import Probed
from ..output.state import SourceFacts, SourceState

Status = Literal["fetched", "unchanged", "missing", "failed", "not_read"]


@dataclass
class SourceOutcome:
    """What happened to one source of a branch.

    ``fetched``: downloaded (and decoded, unless a cached summary had the same SHA-256);
    ``unchanged``: a validator proved the cached summary current, nothing was downloaded;
    ``missing``: 404; ``failed``: anything else, with ``error``; ``not_read``: as the
    branch's root index is missing or unusable (see :func:`crawler.sync.collect.read_all`).
    """

    source: Source
    status: Status = "failed"
    facts: SourceFacts | None = None
    sha256: str | None = None
    size: int | None = None
    etag: str | None = None
    sidecar: str | None = None
    error: str | None = None
    #: Why it was (or, in a dry run, would be) downloaded, or what proved it unchanged.
    reason: str = ""
    attempts: int = 0
    retries: int = 0
    decoded: bool = False
    downloaded: bool = False  # this URL has been downloaded at least once (carried over runs)
    fetch_seconds: float = 0.0
    #: From the end of the download to the summary (a root decoded while it downloads spent
    #: most of its decoding inside ``fetch_seconds``); waiting for a free worker included.
    decode_seconds: float = 0.0
    #: A root read through the spec store: how many of its records the store held.
    known: int | None = None
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
        self._summary, self._loader, self.facts = None, loader, facts

    @property
    def label(self) -> str:
        """The source's label (``root`` or the stack's name)."""
        return self.source.label

    @property
    def kind(self) -> Kind:
        """Root and stack indexes are summarised differently."""
        return self.source.kind

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
            return f"{self.source.label}: {self._status_told()} ({self.error})"
        seconds = self.fetch_seconds + self.decode_seconds
        known = "" if self.known is None else f" ({self.known:,} known from the spec store)"
        line = (
            f"{self.source.label}: {self.status} {self.size or 0:,} bytes, "
            f"{self.facts.records:,} records{known}, {seconds:.2f}s"
        )
        if self.sidecar_matches is False:
            line += f"; its index.json.hash disagrees ({self.sidecar})"
        return line

    def _status_told(self) -> str:
        """The status, and what "missing" means: a stack's is no error, which a newcomer
        reading the word beside "cannot fetch" would take it for."""
        if self.status != "missing":
            return self.status
        if self.source.is_root:
            return "missing: the mirror has no root index for this ref, the branch cannot be built"
        return (
            "missing, not an error: the mirror has no index for this stack, "
            "the branch is built without it"
        )

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
        entry = msgspec.structs.asdict(self.index_entry())
        return ReportSource(
            **{**entry, "status": self.status},
            location=self.source.location,
            sidecar_sha256=self.sidecar,
            sidecar_matches=self.sidecar_matches,
            attempts=self.attempts,
            retries=self.retries,
            decoded=self.decoded,
            fetch_seconds=round(self.fetch_seconds, 3),
            decode_seconds=round(self.decode_seconds, 3),
            error=self.error,
            **manifest_facts(self.source),
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


@dataclass
class SourceForecast:
    """What a sync would most likely do with one source, as a dry run's reader found out
    (:meth:`~crawler.sync.sources.SourceReader.forecast`): its outcome as far as the sync's
    checks read it, and ``probed`` when it would be downloaded."""

    outcome: SourceOutcome
    probed: Probed | None

    @property
    def same(self) -> bool:
        """Whether these are the bytes of the last publish, known without a download."""
        return self.probed is None and self.outcome.facts is not None

    def line(self) -> str:
        """``label: verdict [size] (why)``, as the dry run prints it."""
        outcome = self.outcome
        if outcome.status in ("missing", "failed"):
            return outcome.line()  # as a sync logs it
        if self.probed is None:
            return f"{outcome.label}: unchanged ({outcome.reason})"
        what = "would read" if outcome.source.is_local else "would download"
        size = f" {self.probed.size:,} bytes" if self.probed.size is not None else ""
        return f"{outcome.label}: {what}{size} ({outcome.reason})"
