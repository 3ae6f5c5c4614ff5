"""What a sync tells as it goes: the events a run reports, and the cron log's way of telling
them (the terminal's live display is :class:`crawler.cli.display.LiveReporter`)."""

from __future__ import annotations

import logging
from typing import Protocol

from ..build.changes import counted

log = logging.getLogger("crawler")


class Reporter(Protocol):
    """Receives the events of a run."""

    def branch_started(self, branch: str, sources: int) -> None:
        """A branch's sources are about to be fetched."""

    def source_done(self, branch: str, line: str, size: int, ok: bool) -> None:
        """One source finished (``line`` is the human summary)."""

    def branch_done(self, branch: str, line: str, ok: bool) -> None:
        """A branch finished (published or failed)."""


class LogReporter:
    """One log line per event, for cron and pipes."""

    def branch_started(self, branch: str, sources: int) -> None:
        log.info("%s: fetching %s", branch, counted(sources, "source"))

    def source_done(self, branch: str, line: str, size: int, ok: bool) -> None:
        (log.info if ok else log.error)("%s %s", branch, line)

    def branch_done(self, branch: str, line: str, ok: bool) -> None:
        (log.info if ok else log.error)("%s: %s", branch, line)
