"""Progress: what a person (or a cron log) sees while a sync runs.

On a terminal, a live display per branch (sources done of total, bytes); otherwise one log line
per source (branch, label, status, bytes, records, seconds). Retries are logged as they happen.
``--quiet`` shows only warnings and errors; ``--verbose`` adds debug details.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # rich is imported only when a terminal gets the live display
    from rich.progress import TaskID

log = logging.getLogger("crawler")


class _Terminal:
    """The stream the display draws on. Once a write to it fails (the terminal hung up: EIO),
    every later write is dropped, whichever thread makes it: rich redraws the display from a
    thread of its own, whose error would otherwise end that thread with a traceback."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self.stream.write(text)
            except OSError:
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self.stream.flush()
            except OSError:
                self.gone = True

    def __getattr__(self, name: str) -> object:  # isatty, fileno, encoding: the stream's
        return getattr(self.stream, name)


class LiveReporter:
    """A rich progress display on the terminal; use as a context manager."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.terminal = _Terminal(sys.stderr)
        self.console = console = Console(file=self.terminal)  # type: ignore[arg-type]
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[size]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}
        self.bytes: dict[str, int] = {}

    def __enter__(self) -> LiveReporter:
        self._shown(self.progress.start)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._shown(self.progress.stop)

    def branch_started(self, branch: str, sources: int) -> None:
        self.bytes[branch] = 0
        self._shown(self._add_task, branch, sources)

    def _add_task(self, branch: str, sources: int) -> None:
        from rich.filesize import decimal

        self.tasks[branch] = self.progress.add_task(branch, total=sources, size=decimal(0))

    def source_done(self, branch: str, line: str, size: int, ok: bool) -> None:
        from rich.filesize import decimal

        self.bytes[branch] += size
        task = self.tasks.get(branch)
        if task is not None:
            now = decimal(self.bytes[branch])
            self._shown(self.progress.update, task, advance=1, size=now)
        if not ok:
            self._shown(self.console.print, f"[red]{branch} {line}")
        else:
            log.debug("%s %s", branch, line)

    def branch_done(self, branch: str, line: str, ok: bool) -> None:
        style = "green" if ok else "red"
        self._shown(self.console.print, f"[{style}]{branch}: {line}")

    def _shown(self, call: Callable[..., object], *args: object, **kwargs: object) -> None:
        """``call(...)`` on the display. The terminal may be gone (it hung up: EIO), as the
        display starts or at any time; that must not change the run's outcome, so the display
        is stopped and not drawn again: what it would have shown is lost (the log file and
        the exit code say it all)."""
        if not self.terminal.gone:
            try:
                call(*args, **kwargs)
            except OSError:
                self.terminal.gone = True
        if self.terminal.gone:
            with contextlib.suppress(OSError):
                self.progress.stop()  # ends rich's redrawing thread (idempotent)


def setup_logging(quiet: bool, verbose: bool) -> None:
    """Log to stderr: warnings with ``--quiet``, debug with ``--verbose``, info otherwise."""
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("crawler")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def wants_live(quiet: bool) -> bool:
    """A live display only on an interactive terminal and not with ``--quiet``."""
    return not quiet and sys.stderr is not None and sys.stderr.isatty()
