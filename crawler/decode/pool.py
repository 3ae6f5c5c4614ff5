"""Pool: the decoding jobs of a run, on a plain ``concurrent.futures.ProcessPoolExecutor``.

Jobs run in the order they are submitted: the priority the root's jobs had over the stacks
bought no figure an interleaved A/B run could see (docs/performance.md). What befalls a job
is what befalls its source:

* a worker that dies (killed, out of memory, an index file cut short under its mapping)
  breaks the pool, and every job in it fails with :class:`WorkerError` naming its index: its
  source fails, and the next run reads it again. Later jobs start a new pool.
* a job that runs out of memory fails with :class:`OutOfMemory`;
* a pool that cannot start (no thread or process to be had: a limit, ``ulimit -v``) fails
  the job with :class:`PoolError`.

:meth:`DecodePool.close` shuts the pool down, on every way out of a run: jobs not started are
cancelled, the workers end once their running job is done (a second or so), and Python's exit
waits for them. The worker processes' own set-up is :mod:`.workers`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ..errors import OutOfMemory, PoolError, WorkerError, out_of_memory
from .workers import GROUP_SIGNALS, ready, start_worker

#: The modules the forkserver imports once, for every worker: the jobs' functions.
DECODER_MODULES = ["crawler.decode.root", "crawler.decode.stack"]

#: Seconds :meth:`DecodePool.close` waits for a pool still being started (see there).
START_GRACE = 2.0

Launch = concurrent.futures.Future[ProcessPoolExecutor]


class DecodePool:
    """Runs decoding jobs on ``workers`` processes, started at the first job (or by
    :meth:`start`) and shut down by :meth:`close`; a later job starts new ones."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._launch: Launch | None = None
        self._jobs = 0  # calls of run() not returned

    @property
    def idle(self) -> bool:
        """Whether no job is submitted or waiting to be."""
        return not self._jobs

    @property
    def started(self) -> bool:
        """Whether the workers are started (or starting), and not shut down since."""
        return self._launch is not None

    def start(self) -> None:
        """Start the workers now, in a thread, if they are not started.

        Starting the forkserver and the workers takes a few tenths of a second; a run that
        starts them as its first download begins has them ready when the download ends.
        """
        if self._launch is None:
            self._launch = _launched(self.workers)

    async def run(self, fn: Callable[..., bytes], path: str, url: str, /, *args: object) -> bytes:
        """``fn(path, url, *args)`` in a worker process: its result, or its error (see the
        module's docstring for a worker's death, memory and a pool that cannot start)."""
        self._jobs += 1
        try:
            launch, job = await self._submit(fn, (path, url, *args), url)
            try:
                return await asyncio.wrap_future(job)
            except BrokenProcessPool:
                self._forget(launch)
                raise WorkerError(url) from None
            except Exception as err:
                if out_of_memory(err):
                    raise OutOfMemory(url) from None
                raise
        finally:
            self._jobs -= 1

    async def _submit(
        self, fn: Callable[..., bytes], args: tuple[object, ...], url: str, again: bool = True
    ) -> tuple[Launch, concurrent.futures.Future[bytes]]:
        self.start()
        launch = self._launch
        assert launch is not None
        try:
            return launch, (await asyncio.wrap_future(launch)).submit(fn, *args)
        except BrokenProcessPool:  # a worker died between jobs: this one never ran
            self._forget(launch)
            if again:
                return await self._submit(fn, args, url, again=False)
            raise WorkerError(url) from None
        except (RuntimeError, OSError) as err:  # no thread or process to be had
            self._forget(launch)
            raise PoolError(f"{err} (out of memory, or a limit on processes)") from None

    def _forget(self, launch: Launch) -> None:
        """A pool that is broken or could not start: shut down, the next job starts another."""
        if launch is self._launch:
            self.close()

    def close_if_idle(self) -> None:
        """:meth:`close`, unless a job is submitted or waiting to be."""
        if self.idle:
            self.close()

    def close(self) -> None:
        """Shut the workers down (see the module's docstring); a job still waiting in the pool
        is cancelled, a decode still running is left to end."""
        launch, self._launch = self._launch, None
        if launch is None:
            return
        # A stop as the first download begins finds the workers starting: they are waited
        # for, briefly, so that the pool is shut down before Python's exit (which would find
        # a half-started pool, and a worker its semaphores gone: a traceback on stderr).
        concurrent.futures.wait([launch], timeout=START_GRACE)
        launch.add_done_callback(_shut_down)  # at once, or once started


def _launched(workers: int) -> Launch:
    """A pool of ``workers`` processes, being started in a thread: the first process waits for
    the forkserver to start, which must not stall the event loop."""
    launch: Launch = concurrent.futures.Future()
    launch.set_running_or_notify_cancel()  # a caller's cancelled wait must not cancel it

    def start() -> None:
        try:
            launch.set_result(_new_pool(workers))
        except BaseException as err:
            launch.set_exception(err)

    try:
        threading.Thread(target=start, name="decode-pool-start").start()
    except RuntimeError as err:  # no thread to be had
        launch.set_exception(err)
    return launch


def _new_pool(workers: int) -> ProcessPoolExecutor:
    """A started pool, its helper processes started with the group's signals blocked.

    Python blocks SIGINT and SIGTERM for multiprocessing's resource tracker, not SIGHUP, which
    killed it, and nothing for the forkserver, which a signal during its start-up ended with
    a "Fatal Python error". Both inherit this thread's mask, and still end with the crawler;
    the workers the forkserver forks inherit it too, and unblock the signals first thing
    (:func:`.workers.start_worker`). The mask is this thread's alone, and restored after.
    """
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
    try:
        # forkserver: the event loop's threads are never forked; workers import the decoder once.
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(DECODER_MODULES)
        # Its queues start the resource tracker, whose start unblocks SIGINT and SIGTERM as it
        # ends (whatever the mask was): blocked again before the forkserver starts.
        pool = ProcessPoolExecutor(
            workers, mp_context=context, initializer=start_worker, initargs=(os.getpid(),)
        )
        signal.pthread_sigmask(signal.SIG_BLOCK, GROUP_SIGNALS)
        try:
            for _ in range(workers):
                pool.submit(ready)  # starts a worker while none is idle
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return pool
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _shut_down(launch: Launch) -> None:
    if launch.exception() is None:
        launch.result().shutdown(wait=False, cancel_futures=True)
