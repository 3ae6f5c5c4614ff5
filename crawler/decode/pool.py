"""Decoding processes: a pool of workers fed by priority, that dies with the crawler.

Decoding a 100+ MB index holds the GIL for seconds, so it runs in worker processes (forkserver
start: the event loop's threads are never forked; workers import the decoder once).
:class:`DecodeQueue` takes the most urgent job first: the parts or shards of a root index,
which everything waits for, go before stacks still queued.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import heapq
import itertools
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

from ..errors import OutOfMemory, PoolError, WorkerError, out_of_memory

log = logging.getLogger("crawler")

#: Priorities of :meth:`DecodeQueue.run` (lower first).
ROOT_FIRST, STACKS_AFTER = 0, 1
#: Jobs handed to the pool per worker: one running, the others waiting in the pool's queue.
_IN_FLIGHT = 3
#: Seconds between checks that the pool's manager thread still runs, while a job waits.
_MANAGER_CHECK = 1.0
#: Seconds :meth:`DecodeQueue.close` gives killed workers, then the pools' manager threads,
#: to end: a thread that does not end is left behind.
_STOP_GRACE = 1.0


def _decode_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    # forkserver: the event loop's threads are never forked; workers import the decoder once.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["crawler.decode.summarize"])
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
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _processes(pool: concurrent.futures.ProcessPoolExecutor) -> list[BaseProcess]:
    """The worker processes a pool has started (a private attribute, None after shutdown)."""
    return list((getattr(pool, "_processes", None) or {}).values())


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
    if hasattr(signal, "pthread_sigmask"):  # blocked by the forkserver (see _decode_pool)
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
        while _running(pid):
            time.sleep(0.5)
        os._exit(1)
    select.select([pidfd], [], [])
    os._exit(1)


def _running(pid: int) -> bool:
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


class _Leftovers(NamedTuple):
    """What a pool that was stopped without waiting leaves to be reaped."""

    processes: list[BaseProcess]
    manager: threading.Thread | None


def _retire(pool: concurrent.futures.ProcessPoolExecutor) -> _Leftovers:
    """Stop a pool without waiting: its workers are killed and its manager thread freed.

    The workers send their results through one pipe that the pool's manager thread reads. A
    worker ended while it sends (SIGTERM, the out-of-memory killer) leaves half a message
    there, and the manager thread then waits for the rest for ever (the pool's own
    ``shutdown(wait=True)`` with it, and Python's exit, which joins that thread). Our process
    holds a copy of the pipe's write end that it never writes to; closed, the pipe ends once
    the workers are gone, and the thread reads end of file and ends. (Private attributes, as
    in :func:`_processes`; without them, :meth:`DecodeQueue.close` still returns in bounded
    time, the thread is left behind.)"""
    leftovers = _Leftovers(_processes(pool), getattr(pool, "_executor_manager_thread", None))
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


def _reap(leftovers: list[_Leftovers], grace: float) -> None:
    """Wait up to ``grace`` seconds for stopped workers to end, kill those that did not, then
    give the pools' manager threads as long again. Bounded, whatever state the pools were
    left in: a stop must not hang with the lock held."""
    processes = [p for left in leftovers for p in left.processes]
    until = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, until - time.monotonic()))
    for process in processes:
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


def _unstartable(err: Exception) -> str:
    """Why a pool cannot start, for :class:`PoolError`."""
    return f"{err} (out of memory, or a limit on processes)"


def _warm_up(
    pool: concurrent.futures.ProcessPoolExecutor,
    workers: int,
    failed: Callable[[Exception], None],
) -> None:
    """Have the pool start its workers. A pool shut down meanwhile refuses (nothing to do);
    one whose manager thread cannot start (``ulimit -v``, a process limit) would never run a
    job: ``failed`` is told (:meth:`DecodeQueue._cannot_start` tells the two apart)."""
    try:
        for _ in range(workers):
            pool.submit(_ready)
    except concurrent.futures.process.BrokenProcessPool:
        pass
    except Exception as err:  # RuntimeError for a thread, OSError for a process (a limit)
        failed(err)


class DecodeQueue:
    """Runs decoding jobs on a process pool, by priority.

    A plain executor runs jobs in submission order; here a root part submitted late still goes
    before the stacks that are waiting, so the largest job is never last in line. The pool is
    handed :data:`_IN_FLIGHT` jobs per worker, not one: a worker that finishes a job starts the
    next at once, rather than idling until the event loop (busy merging a root, or folding a
    stack into the branch) gets round to handing it one. A root part submitted late waits
    behind at most two jobs per worker.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._queue: asyncio.PriorityQueue[_Entry] = asyncio.PriorityQueue()
        self._order = itertools.count()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._warning: asyncio.TimerHandle | None = None  # a death not yet logged
        self._retired: list[_Leftovers] = []  # of replaced pools
        self._runners: list[asyncio.Task[None]] = []
        self._running = 0  # jobs handed to the pool and not settled
        self._drained = asyncio.Event()  # set when none is
        self._drained.set()
        self._reruns: list[_Entry] = []  # a heap: jobs a dying worker took down, to run alone
        self._rerunner: asyncio.Task[None] | None = None
        self._open = asyncio.Event()  # cleared while there are reruns: other jobs wait
        self._open.set()
        self._unstartable: str | None = None  # why the pool cannot start, once it is known
        self._submitted: set[asyncio.Future[bytes]] = set()  # jobs handed to the pool

    def start(self) -> None:
        """Start the workers now, if not yet started, rather than on the first job.

        Starting the forkserver and the workers takes a few tenths of a second; a run that
        starts them as its first download begins has them ready when the download ends. (A run
        that downloads nothing never starts them.)
        """
        if self._runners:
            return
        self._new_pool()
        runners = self.workers * _IN_FLIGHT
        self._runners = [asyncio.create_task(self._runner()) for _ in range(runners)]

    def _new_pool(self) -> None:
        self._unstartable = None
        try:
            pool = self._pool = _decode_pool(self.workers)
        except Exception as err:  # its pipes and semaphores cannot be had (EMFILE, ENOMEM)
            self._pool = None  # its jobs fail with PoolError (see _attempt), none waits
            self._unstartable = _unstartable(err)
            return
        loop = asyncio.get_running_loop()

        def failed(err: Exception) -> None:
            loop.call_soon_threadsafe(self._cannot_start, pool, err)

        # Starting a process waits for the forkserver to answer: not on the event loop.
        warm_up = threading.Thread(target=_warm_up, args=(pool, self.workers, failed), daemon=True)
        try:
            warm_up.start()
        except RuntimeError as err:  # no thread to be had
            self._cannot_start(pool, err)

    def _cannot_start(self, pool: concurrent.futures.ProcessPoolExecutor, err: Exception) -> None:
        """The pool could not start a thread or a process it needs: it never will run a job.
        Its jobs, and all later ones, fail with :class:`PoolError`, rather than wait for ever
        (the lock held).

        Ignored for a pool that was replaced or closed meanwhile: its refusals are expected.
        """
        if pool is not self._pool:
            return
        self._unstartable = _unstartable(err)
        self._pool = None
        self._retired.append(_retire(pool))
        # Without its manager thread, the pool settles nothing: its jobs' waits are ended here
        # (see _attempt).
        for future in self._submitted:
            future.cancel()

    async def run(self, priority: int, fn: Callable[..., bytes], *args: object) -> bytes:
        """Run ``fn(*args)`` in a worker process when a worker is free; lower priority first.

        When a worker process dies (killed, out of memory), every job in the pool fails with
        it, whichever of them killed it. Those jobs are run again, by priority, each alone on
        the new pool (other jobs wait meanwhile), so that only one that kills its worker again
        fails, with :class:`WorkerError`. With 3 jobs per worker in the pool, a death on an
        8-worker pool means up to 24 jobs run one at a time: slow, but it happens only when a
        worker is killed. A job that raises ``MemoryError`` (its worker lives on) is run again
        alone in the same way, and fails with :class:`OutOfMemory` if it does so again.
        """
        self.start()
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        await self._queue.put((priority, next(self._order), (fn, args, done)))
        return await done

    async def _runner(self) -> None:
        while True:
            entry = await self._queue.get()
            try:
                while not self._open.is_set():  # jobs run again go first, alone
                    await self._open.wait()
                if not entry[2][2].cancelled() and await self._attempt(entry[2]):
                    self._rerun(entry)
            except asyncio.CancelledError:  # closed: its caller must not wait for ever
                entry[2][2].cancel()
                raise

    def _rerun(self, entry: _Entry) -> None:
        """Queue a job the pool broke under to run again alone (see :meth:`run`)."""
        heapq.heappush(self._reruns, entry)
        self._open.clear()
        if self._rerunner is None or self._rerunner.done():
            self._rerunner = asyncio.create_task(self._run_reruns())

    async def _run_reruns(self) -> None:
        try:
            while self._reruns:
                await self._drained.wait()  # the jobs still in the pool, broken or not
                _, _, (fn, args, done) = heapq.heappop(self._reruns)
                try:
                    broken = not done.cancelled() and await self._attempt((fn, args, done), True)
                    if broken and not done.cancelled():
                        done.set_exception(WorkerError(str(args[1])))
                except asyncio.CancelledError:  # closed: its caller must not wait for ever
                    done.cancel()
                    raise
        finally:
            self._open.set()

    async def _attempt(self, job: _Job, rerun: bool = False) -> bool:
        """Run a job on the pool and settle its result; True if the pool broke meanwhile (a
        job run again, alone, then fails: its caller reports that, no warning is logged), or
        if the job ran out of memory (run again alone, it fails with :class:`OutOfMemory`)."""
        fn, args, done = job
        pool = self._pool
        if pool is None:  # could not start (a closed queue has no runners)
            if not done.cancelled():
                done.set_exception(PoolError(self._unstartable or "closed"))
            return False
        self._running += 1
        self._drained.clear()
        future: asyncio.Future[bytes] | None = None
        try:
            submitted = self._submit(pool, fn, args)
            future = asyncio.wrap_future(submitted)
            self._submitted.add(future)
            result = await self._settled(pool, submitted, future)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._unstartable is None or (task is not None and task.cancelling()):
                raise
            if not done.cancelled():  # not this task: the pool that could not start
                done.set_exception(PoolError(self._unstartable))
        except concurrent.futures.process.BrokenProcessPool:
            if pool is self._pool:  # the first runner to notice replaces it, once
                self._restart(warn=not rerun)
            return True
        except Exception as err:
            if out_of_memory(err):  # the worker lives on; alone, the job may find the memory
                if not rerun:
                    return True
                err = OutOfMemory(str(args[1]))
            if not done.cancelled():  # handed to the waiting source, which reports it
                done.set_exception(err)
        else:
            if not done.cancelled():
                done.set_result(result)
        finally:
            if future is not None:
                self._submitted.discard(future)
            self._running -= 1
            if not self._running:
                self._drained.set()
        return False

    def _submit(
        self,
        pool: concurrent.futures.ProcessPoolExecutor,
        fn: Callable[..., bytes],
        args: tuple[object, ...],
    ) -> concurrent.futures.Future[bytes]:
        """``pool.submit(fn, *args)``. Submitting may start the pool's manager thread and its
        processes: when that cannot be done (RuntimeError for a thread, OSError for a process:
        a limit, no memory), the pool is given up (:meth:`_cannot_start`) and the job fails
        with :class:`PoolError`. A pool broken by a dying worker raises as it is."""
        try:
            return pool.submit(fn, *args)
        except concurrent.futures.process.BrokenProcessPool:  # a RuntimeError as well
            raise
        except (RuntimeError, OSError) as err:
            self._cannot_start(pool, err)
            raise PoolError(self._unstartable or str(err)) from None

    async def _settled(
        self,
        pool: concurrent.futures.ProcessPoolExecutor,
        submitted: concurrent.futures.Future[bytes],
        future: asyncio.Future[bytes],
    ) -> bytes:
        """The job's result, once the pool settles it. The pool's manager thread settles every
        job: if it ends while this one is not settled (a thread it needed could not start, say
        the queue's feeder under ``ulimit -v``), none ever will, and the pool is given up.

        The manager thread notices a worker's death at once and fails the pool's jobs. A worker
        found dead twice in a row while this job is unsettled died sending its result, and the
        thread waits for the rest of it (see :func:`_retire`): the pool is broken, and replaced.
        """
        died = False
        while True:
            try:
                await asyncio.wait([future], timeout=_MANAGER_CHECK)
            except asyncio.CancelledError:  # as ``await future`` would: the job goes too
                future.cancel()
                raise
            if future.done():
                return future.result()
            if died and not submitted.done():
                raise concurrent.futures.process.BrokenProcessPool("a worker died sending")
            died = any(process.exitcode is not None for process in _processes(pool))
            manager = getattr(pool, "_executor_manager_thread", None)  # private, as _processes
            if manager is not None and not manager.is_alive() and not submitted.done():
                if pool is not self._pool:  # replaced meanwhile: run the job again
                    raise concurrent.futures.process.BrokenProcessPool("left unsettled")
                self._cannot_start(pool, RuntimeError("a thread of the decoding pool ended"))

    def _restart(self, warn: bool = True) -> None:
        """Replace a pool whose process died (the jobs in it are run again, see :meth:`run`).

        Logged as a warning: the run goes on and may well succeed, but an operator should know
        that a process was killed (usually by the kernel's out-of-memory killer). The warning
        waits :data:`_WARNING_DELAY`: SIGTERM or SIGINT sent to the whole process group
        (``systemctl stop``, Ctrl-C) can end the workers just before the crawler's own handler
        runs, and that is no sign of trouble. :meth:`close` drops it when the run is being
        cancelled, and logs it at once otherwise."""
        if warn and self._warning is None:
            self._warning = asyncio.get_running_loop().call_later(_WARNING_DELAY, self._warn)
        if self._pool is not None:
            self._retired.append(_retire(self._pool))  # reaped by close()
        self._new_pool()

    def _warn(self) -> None:
        self._warning = None
        log.warning(
            "a decoding process died (out of memory, killed, or an index file cut short as it "
            "was read): the indexes in its pool are decoded again, one at a time"
        )

    def close(self) -> None:
        """Stop the runners and the workers; a decode still running is abandoned, and the
        callers of jobs not finished see them cancelled. A later :meth:`run` starts new ones."""
        if self._warning is not None:
            self._warning.cancel()
            task = asyncio.current_task()
            if task is None or not task.cancelling():  # not a SIGTERM or SIGINT: say it now
                self._warn()
            self._warning = None
        for runner in self._runners:
            runner.cancel()  # cancels the job it holds, if any
        self._runners = []
        if self._rerunner is not None:
            self._rerunner.cancel()
            self._rerunner = None
        waiting = self._reruns
        while not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        for _, _, (_, _, done) in waiting:
            done.cancel()
        self._reruns = []
        self._open.set()
        if self._pool is not None:
            self._retired.append(_retire(self._pool))
            self._pool = None
        _reap(self._retired, _STOP_GRACE)
        self._retired = []


#: Seconds a worker's death waits to be logged (see :meth:`DecodeQueue._restart`).
_WARNING_DELAY = 0.5

#: A job: the function, its arguments, and its result.
_Job = tuple[Callable[..., bytes], tuple[object, ...], "asyncio.Future[bytes]"]
#: A job in line: its priority, its place in the order jobs came, the job.
_Entry = tuple[int, int, _Job]
