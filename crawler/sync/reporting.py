"""What a sync tells as it goes: the events a run reports, and the cron log's way of telling
them (the terminal's live display is :class:`crawler.cli.display.LiveReporter`).

The cron log's records carry the run's facts as fields too (``event``, ``branch``, ``source``,
``url``: where the source was read, ``status``, ``bytes``), for ``--log-format json``
(:mod:`crawler.cli.display`).
"""

from __future__ import annotations

import logging
from typing import Literal, Protocol

from ..mirror.transport import Progress
from ..text import counted
from ..urls import redacted
from .outcome import SourceOutcome

log = logging.getLogger("crawler")

#: What a branch is doing once its sources are read: ``downloading`` and ``decoding`` are told
#: by the sources' own events (a source whose bytes are all in is being decoded).
Phase = Literal["building", "publishing"]


class Reporter(Protocol):
    """Receives the events of a run."""

    def branch_started(self, branch: str, sources: int) -> None:
        """A branch's sources are about to be fetched."""

    def source_progress(self, branch: str, label: str, done: int, total: int | None) -> None:
        """A source's download has ``done`` bytes on disk (0: an attempt starts over) of the
        ``total`` its answer announced (None: not announced, or not yet)."""

    def source_done(self, branch: str, outcome: SourceOutcome) -> None:
        """One source finished: fetched, unchanged, missing or failed."""

    def branch_phase(self, branch: str, phase: Phase) -> None:
        """A branch's sources are read, and it is now building (or publishing) its output."""

    def branch_done(self, branch: str, line: str, ok: bool) -> None:
        """A branch finished (published or failed)."""


class Download:
    """One source's download as the reporter hears of it: give :meth:`written` to the fetcher
    as its ``progress`` (it calls ``then`` first: the root's decoding while it downloads) and
    :meth:`announced` as its ``announced``."""

    def __init__(
        self, reporter: Reporter, branch: str, label: str, then: Progress | None = None
    ) -> None:
        self.reporter, self.branch, self.label, self.then = reporter, branch, label, then
        self.total: int | None = None

    def written(self, size: int) -> None:
        if self.then is not None:
            self.then(size)
        self.reporter.source_progress(self.branch, self.label, size, self.total)

    def announced(self, size: int) -> None:
        self.total = size
        self.reporter.source_progress(self.branch, self.label, 0, size)

    def arrived(self, size: int) -> None:
        """The download is whole: its total is known now, announced or not."""
        self.total = size
        self.reporter.source_progress(self.branch, self.label, size, size)


class LogReporter:
    """One log line per event, for cron and pipes."""

    def branch_started(self, branch: str, sources: int) -> None:
        fields = {"event": "branch_started", "branch": branch, "sources": sources}
        log.info("%s: fetching %s", branch, counted(sources, "source"), extra=fields)

    def source_progress(self, branch: str, label: str, done: int, total: int | None) -> None:
        """Nothing: a line a source is enough for a log."""

    def source_done(self, branch: str, outcome: SourceOutcome) -> None:
        ok = outcome.status != "failed"
        fields = {
            "event": "source_done",
            "branch": branch,
            "source": outcome.label,
            "url": redacted(outcome.source.location),  # where it was read, not as listed
            "status": outcome.status,
            "bytes": outcome.size,
        }
        (log.info if ok else log.error)("%s %s", branch, outcome.line(), extra=fields)

    def branch_phase(self, branch: str, phase: Phase) -> None:
        """Nothing: the branch's last line says what it built."""

    def branch_done(self, branch: str, line: str, ok: bool) -> None:
        fields = {"event": "branch_done", "branch": branch}
        (log.info if ok else log.error)("%s: %s", branch, line, extra=fields)
