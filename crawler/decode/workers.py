"""Workers: what runs in a decoding process before its first job.

Decoding a 100+ MB index holds the GIL for seconds, so it runs in the worker processes of a
plain ``ProcessPoolExecutor`` (:mod:`crawler.decode.pool`). Each worker is set up here by the
pool's ``initializer``: no cyclic garbage collector, the signals sent to the whole process
group ignored, and an exit of its own once the crawler has ended.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import threading
import time

from ..heap import tune_heap

#: What Ctrl-C, a closed terminal or ``systemctl stop`` send to the whole process group.
GROUP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def start_worker(crawler_pid: int) -> None:
    """Worker initializer: no cyclic garbage collector, large freed blocks given back to the
    system (:func:`~crawler.heap.tune_heap`), SIGINT, SIGTERM and SIGHUP ignored,
    and exit when the crawler is gone.

    Ctrl-C, a closed terminal and ``systemctl stop`` signal the whole process group: the
    crawler then shuts its pool down itself, and each worker ends once its job is done. A
    worker that took the signal would print its own KeyboardInterrupt traceback, or die and
    break the pool, failing the sources it was decoding.

    Decoding a piece of an index allocates tens of thousands of dicts and lists at once, and
    each batch of them starts a collection that walks every live container: with collections,
    a root index takes half as long again to summarise. The jobs create no reference cycles,
    so reference counting frees all they allocate.

    A crawler killed with SIGKILL cannot stop its pool, and idle workers would wait on their
    queue forever (keeping the forkserver, and the run's stdout and stderr, alive with them).
    So each worker exits when the crawler has ended, reaped or not: a parent that reads the
    run's output to its end before reaping it (cron's mailer, ``$(crawler sync ...)``,
    ``subprocess.run(capture_output=True)``) keeps a killed crawler a zombie until the pipes
    close, and the workers hold them.
    """
    gc.disable()
    tune_heap()
    for signum in GROUP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked by the forkserver (see .pool)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, GROUP_SIGNALS)
    threading.Thread(
        target=_exit_with, args=(crawler_pid,), name="exit-with-crawler", daemon=True
    ).start()


def _exit_with(pid: int) -> None:
    """Exit this process once process ``pid`` has ended (a zombie has ended)."""
    try:
        pidfd = os.pidfd_open(pid)  # Linux 5.3+: readable once the process has ended
    except ProcessLookupError:
        os._exit(1)
    except (AttributeError, OSError):  # not on this system: ask every half second
        while running(pid):
            time.sleep(0.5)
        os._exit(1)
    select.select([pidfd], [], [])
    os._exit(1)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (is no zombie, where /proc tells)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # a pid reused by another user: ours is gone
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def ready() -> bytes:
    """A job that only has the pool start a worker."""
    return b""
