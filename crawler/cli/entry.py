"""The ``crawler`` command's entry point (and ``python -m crawler``'s).

``crawler find``, ``crawler log`` and ``crawler diff`` run from here importing only what they
use, so that they answer in a fraction of a second; every other command goes through
:func:`crawler.cli.command.main`, whose imports (the whole sync) take about half a second.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import NoReturn

#: The consumer's commands: they read a published branch, and import nothing of the sync.
_LIGHT = ("find", "log", "diff")


def run() -> None:
    """Console-script entry point."""
    argv = sys.argv[1:]
    if argv[:1] and argv[0] in _LIGHT:
        # Nothing to clean up: freeing a 60,000-spec index object by object would take a
        # tenth of a second more than the query itself.
        exit_with(_light(argv[0], argv[1:]), at_once=True)
    try:
        with _sigint_held():  # the sync's modules load: half a second or more
            from .command import main
    except KeyboardInterrupt:
        exit_with(_interrupted(), at_once=True)
    exit_with(main(hard=True))


def _light(command: str, argv: list[str]) -> int:
    try:
        with _sigint_held():
            if command == "find":
                from .find import main
            elif command == "diff":
                from .diff import main
            else:
                from .log import main
        return main(argv)
    except KeyboardInterrupt:
        return _interrupted()


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold SIGINT while modules load; one that came meanwhile raises KeyboardInterrupt as the
    block ends (``pthread_sigmask`` runs the handler as it unblocks).

    Raised during an import, KeyboardInterrupt can be swallowed where nothing reports it: in
    a weak reference's callback of the import machinery (the run then went on as if no Ctrl-C
    had come), or in msgspec's start-up, whose import of :mod:`datetime` fails without a word
    and leaves msgspec to crash (SIGSEGV) at the first decoder it builds."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _interrupted() -> int:
    """Say so, as the sync's own handlers would (one line, no traceback); the exit code."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        print("interrupted", file=sys.stderr, flush=True)
    return 128 + signal.SIGINT


def exit_with(code: int, *, at_once: bool = False) -> NoReturn:
    """End the process with ``code``, whatever its standard streams still hold; ``at_once``
    without Python's teardown (only for a process that holds nothing to release)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # closed when the process started (>&-)
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            # What it holds cannot be written (a full disk, a closed pipe): Python would report
            # that at exit and make the code 120. As its documentation advises for a closed
            # pipe, the rest goes to /dev/null; the exit code stands.
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    if at_once:
        os._exit(code)
    sys.exit(code)
