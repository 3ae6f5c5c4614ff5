"""Progress: what a person (or a cron log) sees while a sync runs.

On a terminal, a live display, a line per branch: the time it has taken so far (running until
the branch is done), what it is doing (:meth:`BranchProgress.phase`), its sources done of its
total, the bytes fetched of the total known so far (each download's ``Content-Length`` adds to
it as it comes; ``+`` while some sources have not said), the rate and the time left while bytes
are still to come, and how many sources were fetched, found unchanged (nothing downloaded),
missing or failed. Log records are printed above the display, by rich's logging handler on the
display's own console.
Otherwise one log line per source (:class:`crawler.sync.reporting.LogReporter`), plain or JSON
(:mod:`.logformat`). ``--quiet`` shows only warnings and errors; ``--verbose`` adds debug
details.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from ..sync.outcome import SourceOutcome
from ..sync.reporting import Phase
from .logformat import TextFormatter, json_logs

if TYPE_CHECKING:  # rich is imported only when a terminal gets the live display
    from rich.progress import Task, TaskID

log = logging.getLogger("crawler")

#: Seconds of progress the rate is measured over: long enough to smooth a download's bursts,
#: short enough that a stalled one shows no rate (and no time left) within a few seconds.
RATE_WINDOW = 5.0


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


@dataclass
class BranchProgress:
    """One branch's sources and bytes, as the events tell them (from the event loop) and the
    display reads them (from rich's drawing thread: hence the lock)."""

    sources: int
    statuses: dict[str, int] = field(default_factory=dict)  # finished sources, by status
    fetched: int = 0  # bytes of the finished sources that were fetched (as the metrics count)
    running: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # label: done, total
    samples: deque[tuple[float, int]] = field(default_factory=deque)  # (when, bytes done)
    told: Phase | None = None  # the branch's phase once its sources are read
    done: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def downloading(self, label: str, done: int, total: int | None) -> None:
        with self.lock:
            self.running[label] = (done, total)
            self._sample()

    def finished(self, outcome: SourceOutcome) -> None:
        with self.lock:
            self.running.pop(outcome.label, None)
            self.statuses[outcome.status] = self.statuses.get(outcome.status, 0) + 1
            if outcome.status == "fetched":
                self.fetched += outcome.size or 0
            self._sample()

    def _sample(self) -> None:
        now = time.monotonic()
        self.samples.append((now, self._done()))
        while len(self.samples) > 2 and self.samples[1][0] < now - RATE_WINDOW:
            self.samples.popleft()

    def _done(self) -> int:
        return self.fetched + sum(done for done, _ in self.running.values())

    def phase(self) -> str:
        """``downloading`` while some source's bytes are still to come, then ``decoding`` (until
        the sources are read), ``building`` and ``publishing`` as the branch says, ``done``."""
        with self.lock:
            if self.done:
                return "done"
            if self.told is not None:
                return self.told
            coming = self.count + len(self.running) < self.sources or any(
                total is None or done < total for done, total in self.running.values()
            )
            return "downloading" if coming else "decoding"

    @property
    def count(self) -> int:  # sources finished
        return sum(self.statuses.values())

    def completed(self) -> float:
        """Sources finished, plus the part downloaded of each one downloading: the bar."""
        with self.lock:
            parts = sum(done / total for done, total in self.running.values() if total)
            return self.count + min(parts, len(self.running))

    def line(self) -> str:
        """``downloading 3/5 sources  25.4 MB of 50.7+ MB  8.1 MB/s  0:00:03+ left  2 fetched, 1
        unchanged`` (``+``: sources to come may add to it); the rate and time left only while
        bytes come. Once all are done: ``done 5/5 sources  5 unchanged  0 bytes downloaded``."""
        from rich.filesize import decimal

        with self.lock:
            done = self._done()
            known = self.fetched + sum(
                total if total is not None else now for now, total in self.running.values()
            )
            told = self.count + sum(total is not None for _, total in self.running.values())
            rate = self._rate()
            counts = ", ".join(f"{n} {status}" for status, n in self.statuses.items() if n)
            count, running = self.count, bool(self.running)
        parts = [f"{self.phase()} {count}/{self.sources} sources"]
        if (running or count < self.sources) and known:
            total = decimal(known)
            if told < self.sources:  # more may come: a lower bound
                number, _, unit = total.partition(" ")
                total = f"{number}+ {unit}"
            parts.append(f"{decimal(done)} of {total}")
            if rate and known > done:
                parts.append(f"{decimal(int(rate))}/s")
                more = "+" if told < self.sources else ""
                parts.append(f"{_duration((known - done) / rate)}{more} left")
        if counts:
            parts.append(counts)
        if not running and count == self.sources:
            parts.append(f"{decimal(done)} downloaded")
        return "  ".join(parts)

    def _rate(self) -> float:
        """Bytes a second over the last :data:`RATE_WINDOW` seconds; 0 when none came."""
        now = time.monotonic()
        recent = [(t, n) for t, n in self.samples if t >= now - RATE_WINDOW]
        if len(recent) < 2 or recent[-1][1] <= recent[0][1]:
            return 0.0
        return (recent[-1][1] - recent[0][1]) / max(now - recent[0][0], 0.5)


def _duration(seconds: float, up: bool = True) -> str:
    """``H:MM:SS``, rounded ``up`` (a time left) or down (a time elapsed)."""
    whole = int(seconds + 0.999) if up else int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class LiveReporter:
    """A rich progress display on the terminal; use as a context manager. While it runs, the
    ``crawler`` logger's records go to rich's logging handler on the same console: printed
    above the display, never over it."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.logging import RichHandler
        from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
        from rich.table import Column
        from rich.text import Text

        branches: dict[str, BranchProgress] = {}

        class Numbers(ProgressColumn):
            def render(self, task: Task) -> Text:
                branch = branches.get(task.fields.get("branch", ""))
                return Text(branch.line() if branch else "")

        class Clock(ProgressColumn):
            """The time since the branch started, until it is done (rich's elapsed column
            stops once ``completed`` reaches ``total``: as the last source is read)."""

            def render(self, task: Task) -> Text:
                return Text(_duration(task.elapsed or 0.0, up=False), style="progress.elapsed")

        self.terminal = _Terminal(sys.stderr)
        self.console = console = Console(file=self.terminal)  # type: ignore[arg-type]
        # The numbers last, cut rather than wrapped on a narrow terminal (80 columns: all but
        # the counts while bytes come).
        self.progress = Progress(
            TextColumn("[bold]{task.description}", markup=True),
            BarColumn(bar_width=16),
            Clock(),
            Numbers(table_column=Column(no_wrap=True, overflow="ellipsis")),
            console=console,
            transient=False,
        )
        self.handler = RichHandler(
            console=console, show_path=False, omit_repeated_times=False, log_time_format="[%X]"
        )
        self.handler.setFormatter(TextFormatter("%(message)s"))
        self.tasks: dict[str, TaskID] = {}
        self.branches = branches
        self._handlers: list[logging.Handler] = []

    def __enter__(self) -> LiveReporter:
        root = logging.getLogger("crawler")
        self._handlers, root.handlers = root.handlers, [self.handler]
        self._shown(self.progress.start)
        return self

    def __exit__(self, *exc: object) -> None:
        self._shown(self.progress.stop)
        logging.getLogger("crawler").handlers = self._handlers

    def branch_started(self, branch: str, sources: int) -> None:
        self.branches[branch] = BranchProgress(sources)
        self._shown(self._add_task, branch, sources)

    def _add_task(self, branch: str, sources: int) -> None:
        from rich.markup import escape

        self.tasks[branch] = self.progress.add_task(escape(branch), total=sources, branch=branch)

    def source_progress(self, branch: str, label: str, done: int, total: int | None) -> None:
        progress = self.branches.get(branch)
        if progress is not None:
            progress.downloading(label, done, total)
            self._advanced(branch, progress)

    def source_done(self, branch: str, outcome: SourceOutcome) -> None:
        progress = self.branches.get(branch)
        if progress is not None:
            progress.finished(outcome)
            self._advanced(branch, progress)
        if outcome.status == "failed":
            self._shown(self._say, f"{branch} {outcome.line()}", "red")
        else:
            log.debug("%s %s", branch, outcome.line())

    def _advanced(self, branch: str, progress: BranchProgress) -> None:
        task = self.tasks.get(branch)
        if task is not None:
            self._shown(self.progress.update, task, completed=progress.completed())

    def branch_phase(self, branch: str, phase: Phase) -> None:
        progress = self.branches.get(branch)
        if progress is not None:
            with progress.lock:
                progress.told = phase

    def branch_done(self, branch: str, line: str, ok: bool) -> None:
        progress = self.branches.get(branch)
        if progress is not None:
            with progress.lock:
                progress.done = True
        task = self.tasks.get(branch)
        if task is not None:
            self._shown(self.progress.stop_task, task)
        self._shown(self._say, f"{branch}: {line}", "green" if ok else "red")

    def _say(self, line: str, style: str) -> None:
        """A line above the display, as written (a URL's brackets are no markup)."""
        self.console.print(line, style=style, markup=False, highlight=False)

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


class Counting:
    """``checked 1,234 of 5,678`` on the terminal (stderr), redrawn at most ten times a
    second, and cleared at the end: the progress of a command that counts what it checks
    (audit, verify). A terminal that hung up is written to no more (:class:`_Terminal`)."""

    def __init__(self) -> None:
        self.terminal = _Terminal(sys.stderr)
        self._shown = 0.0

    def count(self, what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self._shown >= 0.1 or done == total:
            self._shown = now
            self._draw(f"\r{what} {done:,} of {total:,}\033[K")

    def end(self) -> None:
        self._draw("\r\033[K")

    def _draw(self, text: str) -> None:
        self.terminal.write(text)
        self.terminal.flush()


def wants_live(quiet: bool) -> bool:
    """A live display only on an interactive terminal, not with ``--quiet``, and not when the
    logs are JSON (for a log collector, which reads every line of stderr)."""
    return not quiet and not json_logs() and sys.stderr is not None and sys.stderr.isatty()
