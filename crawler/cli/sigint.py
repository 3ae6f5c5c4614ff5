"""SIGINT held from a command's first line until the command can take a Ctrl-C cleanly.

Python's own handler raises KeyboardInterrupt wherever the main thread is, and a command's
start-up has moments where one goes wrong: raised as msgspec's start-up imports
:mod:`datetime`, it is swallowed there, and msgspec crashes (SIGSEGV) at the first decoder it
builds; raised in a weak reference's callback of the import machinery, it is lost (the run went
on as if no Ctrl-C had come); raised while the event loop is built, it leaves a half-built loop
whose finalizer prints a traceback.

So the command line (:mod:`crawler.cli.entry`) blocks SIGINT first thing (:func:`hold`), and
:func:`release` unblocks it once the command is ready for it: a sync or ``branches`` once its
own handlers are installed (:meth:`crawler.cli.stopping.Stopper.installed`), any other command
once its modules are loaded, with Python's handler back (``crawler.cli.command``'s
``_interruptible``). ``pthread_sigmask`` runs the handler as it unblocks, so a Ctrl-C that came
meanwhile is taken at that moment. Other signals are not held: their default action ends the
process, which holds nothing yet. Where ``pthread_sigmask`` is missing, nothing is held.
"""

from __future__ import annotations

import signal

#: While SIGINT is held: whether it was blocked already (inherited so), and stays so.
_held: list[bool] = []


def hold() -> None:
    """Block SIGINT until :func:`release` (once; a second call changes nothing)."""
    if not _held and hasattr(signal, "pthread_sigmask"):
        before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        _held.append(signal.SIGINT in before)


def release() -> None:
    """Unblock SIGINT if :func:`hold` blocked it: one that came meanwhile goes to the handler
    now (the caller sets the handler it wants first)."""
    if _held and not _held.pop():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
