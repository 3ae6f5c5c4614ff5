"""Workers: the decoding processes, from their start to their reaping.

Decoding a 100+ MB index holds the GIL for seconds, so it runs in worker processes of a
``ProcessPoolExecutor`` (forkserver start: the event loop's threads are never forked; workers
import the decoder once). Here is all that reaches into the executor: how its processes and
the helper processes start with the group's signals blocked, how a worker exits with the
crawler, and how a pool is stopped without waiting and reaped in bounded time. The queue that
feeds them is :mod:`crawler.decode.pool`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import gc
import logging
import multiprocessing
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing import forkserver, resource_tracker
from multiprocessing.process import BaseProcess
from typing import NamedTuple

log = logging.getLogger("crawler")

#: The modules the forkserver imports once, for every worker: the jobs' functions.
DECODER_MODULES = ["crawler.decode.root", "crawler.decode.stack"]


def decode_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of ``workers`` decoding processes (started at its first job)."""
    # forkserver: the event loop's threads are never forked; workers import the decoder once.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(DECODER_MODULES)
    _start_helper_processes()
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(os.getpid(),),
    )
    # All workers at the first job, none later. Otherwise (forkserver) Python 3.11+ starts them
    # one by one as jobs come; a worker that dies while another is being started leaves the
    # newcomer unknown to the pool's manager thread, which then waits for it forever, and the
    # crawler with it at exit. The attribute is private; without it, workers come one by one.
    if hasattr(pool, "_safe_to_dynamically_spawn_children"):
        pool._safe_to_dynamically_spawn_children = False
    return pool


#: What Ctrl-C, a closed terminal or ``systemctl stop`` send to the whole process group.
_GROUP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _start_helper_processes() -> None:
    """Start multiprocessing's resource tracker and the forkserver (the pool would start them
    anyway) with the signals sent to the whole group blocked, so that they inherit them
    blocked: Python blocks SIGINT and SIGTERM for the tracker, not SIGHUP, which killed it,
    and nothing for the forkserver, which a signal during its start-up ended with a "Fatal
    Python error". Both still end with the crawler. The workers the forkserver forks inherit
    the mask too, and unblock the signals first thing (:func:`_start_worker`)."""
    if not hasattr(signal, "pthread_sigmask"):
        return
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS)
    try:
        resource_tracker.ensure_running()
        # Starting the tracker ends by unblocking SIGINT and SIGTERM (it blocks them for its
        # child, then unblocks, whatever the mask was): blocked again for the forkserver's.
        signal.pthread_sigmask(signal.SIG_BLOCK, _GROUP_SIGNALS)
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def processes(pool: concurrent.futures.ProcessPoolExecutor) -> list[BaseProcess]:
    """The worker processes a pool has started (a private attribute, None after shutdown)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def manager_thread(pool: concurrent.futures.ProcessPoolExecutor) -> threading.Thread | None:
    """The thread of a pool that settles its jobs (a private attribute, as in :func:`processes`;
    None where it is missing or not started)."""
    return getattr(pool, "_executor_manager_thread", None)


def _start_worker(crawler_pid: int) -> None:
    """Worker initializer: no cyclic garbage collector, SIGINT, SIGTERM and SIGHUP ignored,
    and exit when the crawler is gone.

    Ctrl-C, a closed terminal and ``systemctl stop`` signal the whole process group: the
    crawler then stops its workers itself (SIGKILL: they hold nothing to clean up). A worker
    that took the signal would print its own KeyboardInterrupt traceback, or die and break the
    pool, which the crawler would replace as it stops (a new worker then fails to rebuild a
    semaphore already removed, with a traceback).

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
    for signum in _GROUP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):  # blocked by the forkserver (see decode_pool)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _GROUP_SIGNALS)
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


class Leftovers(NamedTuple):
    """What a pool that was stopped without waiting leaves to be reaped."""

    processes: list[BaseProcess]
    manager: threading.Thread | None


def retire(pool: concurrent.futures.ProcessPoolExecutor) -> Leftovers:
    """Stop a pool without waiting: its workers are killed and its manager thread freed.

    The workers send their results through one pipe that the pool's manager thread reads. A
    worker ended while it sends (SIGTERM, the out-of-memory killer) leaves half a message
    there, and the manager thread then waits for the rest for ever (the pool's own
    ``shutdown(wait=True)`` with it, and Python's exit, which joins that thread). Our process
    holds a copy of the pipe's write end that it never writes to; closed, the pipe ends once
    the workers are gone, and the thread reads end of file and ends. (Private attributes, as
    in :func:`processes`; without them, :meth:`.pool.DecodeQueue.close` still returns in bounded
    time, the thread is left behind.)"""
    leftovers = Leftovers(processes(pool), manager_thread(pool))
    for process in leftovers.processes:
        with contextlib.suppress(OSError, ValueError):  # ended and closed meanwhile
            process.kill()  # it ignores the signals sent to the group (see _start_worker)
    writer = getattr(getattr(pool, "_result_queue", None), "_writer", None)
    if writer is not None:
        with contextlib.suppress(OSError):
            writer.close()
    with contextlib.suppress(RuntimeError):  # a manager thread that never started
        pool.shutdown(wait=False, cancel_futures=True)
    return leftovers


def reap(leftovers: list[Leftovers], grace: float) -> None:
    """Wait up to ``grace`` seconds for stopped workers to end, kill those that did not, then
    give the pools' manager threads as long again. Bounded, whatever state the pools were
    left in: a stop must not hang with the lock held."""
    stopped = [p for left in leftovers for p in left.processes]
    until = time.monotonic() + grace
    for process in stopped:
        process.join(max(0.0, until - time.monotonic()))
    for process in stopped:
        if process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                process.kill()
                process.join(grace)
    until = time.monotonic() + grace
    for left in leftovers:
        if left.manager is not None and left.manager.is_alive():
            left.manager.join(max(0.0, until - time.monotonic()))
            if left.manager.is_alive():
                log.debug("a decoding pool's manager thread did not end; left behind")


def _ready() -> bytes:
    """A job that only makes the pool start a worker."""
    return b""


def unstartable(err: Exception) -> str:
    """Why a pool cannot start, for :class:`crawler.errors.PoolError`."""
    return f"{err} (out of memory, or a limit on processes)"


def warm_up(
    pool: concurrent.futures.ProcessPoolExecutor,
    workers: int,
    failed: Callable[[Exception], None],
) -> None:
    """Have the pool start its workers. A pool shut down meanwhile refuses (nothing to do);
    one whose manager thread cannot start (``ulimit -v``, a process limit) would never run a
    job: ``failed`` is told (:meth:`.pool.DecodeQueue._cannot_start` tells the two apart)."""
    try:
        for _ in range(workers):
            pool.submit(_ready)
    except concurrent.futures.process.BrokenProcessPool:
        pass
    except Exception as err:  # RuntimeError for a thread, OSError for a process (a limit)
        failed(err)
