"""How a run stops: on a signal, at its deadline, and for sure.

The first SIGINT, SIGTERM or SIGHUP, or the run's deadline, cancels the run's task: the run
removes what it staged, stops its decoding processes, releases the lock and exits with 128 + the
signal's number (the deadline: ``ExitCode.DEADLINE``, 9). That takes well under a second. The
handlers are plain signal handlers, not the event loop's: they run even while the loop is
blocked (a branch's output being built, a thread being joined), and hand the cancellation to
the loop, which delivers it at the run's next ``await``.

A command-line run (``hard=True``) is also ended for sure: should the clean stop not be done
within :data:`GRACE` seconds of the signal or the deadline, or should a second signal come, the
process ends there and then with the same code. Nothing is lost by that: the lock is an
``flock`` the kernel releases with the process, the decoding processes end with it, the output
a previous run published is untouched, and what this run staged is removed by the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from ..errors import ExitCode
from . import sigint

log = logging.getLogger("crawler")

#: Seconds a stopping run is given to end cleanly before it is ended at once.
GRACE = 5.0

#: What ``signal.getsignal`` gives (typeshed names it privately).
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The signals a process may have been started ignoring on purpose (see Stopper.installed).
_LEFT_IGNORED = (signal.SIGINT, signal.SIGHUP)


def exit_now(code: int, line: str) -> None:
    """End the process at once with ``code``, saying ``line`` on stderr if it can be written."""
    with contextlib.suppress(OSError):
        os.write(2, f"{line}\n".encode(errors="replace"))
    os._exit(code)


def timer(code: int) -> None:
    """End the process with ``code`` :data:`GRACE` seconds from now if it has not ended by
    itself, from a daemon thread (none where no thread can be started, ``ulimit -v``)."""
    line = "warning: the process did not end by itself; ended at once"
    watchdog = threading.Timer(GRACE, exit_now, (code, line))
    watchdog.daemon = True
    with contextlib.suppress(RuntimeError):
        watchdog.start()


class _Watchdog:
    """A daemon thread, started before any signal, that ends the process at the first alarm
    due (see :func:`exit_now`).

    A signal handler only appends an alarm to a list: starting a thread there could wait
    for ever on a lock of :mod:`threading` that the interrupted main thread holds (in the
    middle of starting a thread of its own), which would hang the very stop it is there for.
    """

    #: Seconds between two looks at the alarms.
    TICK = 0.05

    def __init__(self) -> None:
        self._alarms: list[tuple[float, int, str]] = []  # (when, code, line)
        self._stopped = False
        self._thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)

    def start(self) -> None:
        with contextlib.suppress(RuntimeError):  # no thread to be had (ulimit -v)
            self._thread.start()

    def arm(self, seconds: float, code: int, line: str) -> None:
        self._alarms.append((time.monotonic() + seconds, code, line))

    def stop(self) -> None:
        self._stopped = True

    def _watch(self) -> None:
        while not self._stopped:
            time.sleep(self.TICK)
            now = time.monotonic()
            for when, code, line in list(self._alarms):
                if now >= when and not self._stopped:
                    exit_now(code, line)


class Stopper:
    """Stops one run's task on the first signal or at the deadline (see the module's text).

    ``reason`` is None while the run goes on; then the signal that stopped it, or
    ``"deadline"``. ``code`` is the exit code that goes with it.
    """

    def __init__(self, deadline: float | None, *, hard: bool) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._hard = hard
        self._deadline = deadline
        self.reason: signal.Signals | str | None = None
        self._settled: int | None = None  # the run's exit code, once known (see settle)
        self._deadline_handle: asyncio.TimerHandle | None = None
        self._watchdog = _Watchdog()

    @property
    def code(self) -> int:
        if isinstance(self.reason, signal.Signals):
            return 128 + self.reason
        return ExitCode.DEADLINE

    def settle(self, code: int) -> None:
        """The run's outcome is known: a signal from now on changes nothing (see
        :meth:`installed`)."""
        self._settled = code

    @contextlib.contextmanager
    def installed(self) -> Iterator[Stopper]:
        """Handle the signals and arm the deadline while the run goes on. SIGHUP and SIGINT are
        left alone when they are ignored, as under ``nohup`` and in a background job of a
        shell script: Python leaves them so while the crawler starts, and a Ctrl-C meant for
        the script is not for its background jobs.

        Once the outcome is known (:meth:`settle`), a signal neither kills the process with the
        default action nor changes the code: it is ignored while the metrics are written; then,
        in a command-line run (``hard``), it ends the process at once with that code, as the
        process ends anyway (Python's exit joins threads); in-process, the caller's handlers
        are put back."""
        previous: dict[signal.Signals, Handler] = {}
        for signum in SIGNALS:
            handler = signal.getsignal(signum)
            if signum in _LEFT_IGNORED and handler == signal.SIG_IGN:
                continue
            try:
                signal.signal(signum, self._received)
            except ValueError:  # not the main thread: the caller handles its signals
                break
            previous[signum] = handler
        if self._hard:
            self._watchdog.start()  # none to be had (ulimit -v): the clean stop is all
        if self._deadline is not None:
            self._deadline_handle = self._loop.call_later(self._deadline, self._deadline_passed)
            if self._hard:  # the loop itself may be what is stuck
                line = f"error: the run did not stop at its deadline ({self._deadline:g} s)"
                self._watchdog.arm(
                    self._deadline + GRACE, ExitCode.DEADLINE, f"{line}; ended at once"
                )
        sigint.release()  # a Ctrl-C held since the command started is handled here and now
        try:
            yield self
        finally:
            self._watchdog.stop()
            if self._deadline_handle is not None:
                self._deadline_handle.cancel()
            for signum, handler in previous.items():
                if self._hard and self._settled is not None:
                    signal.signal(signum, self._received_at_the_end)
                else:
                    signal.signal(signum, signal.SIG_DFL if handler is None else handler)

    def _received(self, signum: int, frame: FrameType | None) -> None:
        """The handler, run in the main thread between two bytecodes, whatever the loop does:
        it arms the watchdog itself, and hands the stop to the loop."""
        received = signal.Signals(signum)
        if self._settled is not None:
            return
        if self.reason is not None:
            if self._hard:
                when = "again" if isinstance(self.reason, signal.Signals) else "while stopping"
                exit_now(self.code, f"received {received.name} {when}: exiting at once")
            return
        self.reason = received
        self._watch(received.name)
        self._loop.call_soon_threadsafe(self._stop, f"received {received.name}, stopping")

    def _received_at_the_end(self, signum: int, frame: FrameType | None) -> None:
        assert self._settled is not None
        exit_now(self._settled, f"received {signal.Signals(signum).name} as the run ended")

    def _deadline_passed(self) -> None:
        if self.reason is None and self._settled is None:
            self.reason = "deadline"
            self._watch("its deadline")
            self._stop(f"the run's deadline ({self._deadline:g} s) passed, stopping")

    def _watch(self, what: str) -> None:
        """In a command-line run, end the process :data:`GRACE` seconds from now unless the
        clean stop is done by then."""
        if self._hard:
            ended = f"error: the run did not stop within {GRACE:g} s of {what}; ended at once"
            self._watchdog.arm(GRACE, self.code, ended)

    def _stop(self, line: str) -> None:
        if self._settled is not None:  # the outcome came first
            return
        log.warning("%s", line)
        if self._task is not None:
            self._task.cancel()
