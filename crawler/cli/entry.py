"""The ``crawler`` command's entry point (and ``python -m crawler``'s).

``crawler find``, ``crawler log`` and ``crawler diff`` run from here importing only what they
use, so that they answer in a fraction of a second; every other command goes through
:func:`crawler.cli.command.main`, whose imports (the whole sync) take about half a second.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
from typing import NoReturn

from . import sigint

#: The consumer's commands: they read a published branch, and import nothing of the sync.
_LIGHT = ("find", "log", "diff")


def run() -> None:
    """Console-script entry point."""
    sigint.hold()  # until the command can take a Ctrl-C (see crawler.cli.sigint)
    argv = sys.argv[1:]
    if argv[:1] and argv[0] in _LIGHT:
        # Nothing to clean up: freeing a 60,000-spec index object by object would take a
        # tenth of a second more than the query itself.
        exit_with(_light(argv[0], argv[1:]), at_once=True)
    try:
        from .command import main
    except KeyboardInterrupt:  # where SIGINT cannot be held
        exit_with(_interrupted(), at_once=True)
    exit_with(main(hard=True))


def _light(command: str, argv: list[str]) -> int:
    try:
        main = importlib.import_module(f".{command}", __package__).main  # named as the command
        sigint.release()
        return int(main(argv))
    except KeyboardInterrupt:
        return _interrupted()


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
