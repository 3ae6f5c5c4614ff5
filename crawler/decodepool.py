"""Decoding processes: a pool of workers fed by priority, that dies with the crawler.

Decoding a 100+ MB index holds the GIL for seconds, so it runs in worker processes (forkserver
start: the event loop's threads are never forked; workers import the decoder once).
:class:`DecodeQueue` runs at most one job per worker and takes the most urgent first: the
shards of a root index, which everything waits for, go before stacks still queued.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import multiprocessing
import os
import threading
import time
from collections.abc import Callable

from .errors import WorkerError

#: Priorities of :meth:`DecodeQueue.run` (lower first).
ROOT_FIRST, STACKS_AFTER = 0, 1


def _decode_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    # forkserver: the event loop's threads are never forked; workers import the decoder once.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["crawler.validate"])
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_exit_with,
        initargs=(os.getpid(),),
    )


def _exit_with(crawler_pid: int) -> None:
    """Worker initializer: exit when the crawler process is gone.

    A crawler killed with SIGKILL cannot stop its pool, and idle workers would wait on their
    queue forever (keeping the forkserver, and the run's stdout and stderr, alive with them).
    """

    def watch() -> None:
        while True:
            time.sleep(0.5)
            try:
                os.kill(crawler_pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:  # pid reused by another user's process: ours is gone
                os._exit(1)

    threading.Thread(target=watch, name="exit-with-crawler", daemon=True).start()


class DecodeQueue:
    """Runs decoding jobs on a process pool, at most one per worker, by priority.

    A plain executor runs jobs in submission order; here a root shard submitted late still goes
    before the stacks that are waiting, so the largest job is never last in line.
    """

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._queue: asyncio.PriorityQueue[tuple[int, int, _Job]] = asyncio.PriorityQueue()
        self._order = itertools.count()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._runners: list[asyncio.Task[None]] = []

    async def run(self, priority: int, fn: Callable[..., bytes], *args: object) -> bytes:
        """Run ``fn(*args)`` in a worker process when a worker is free; lower priority first."""
        if not self._runners:
            self._pool = _decode_pool(self.workers)
            self._runners = [asyncio.create_task(self._runner()) for _ in range(self.workers)]
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        await self._queue.put((priority, next(self._order), (fn, args, done)))
        return await done

    async def _runner(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            _, _, (fn, args, done) = await self._queue.get()
            if done.cancelled():
                continue
            pool = self._pool
            try:
                result = await loop.run_in_executor(pool, fn, *args)
            except concurrent.futures.process.BrokenProcessPool:
                if pool is self._pool:  # the first runner to notice replaces it, once
                    self._restart()
                if not done.cancelled():
                    done.set_exception(WorkerError(str(args[1])))
            except Exception as err:  # handed to the waiting source, which reports it
                if not done.cancelled():
                    done.set_exception(err)
            else:
                if not done.cancelled():
                    done.set_result(result)

    def _restart(self) -> None:
        """Replace a pool whose process died (the other jobs in it fail and are reported)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = _decode_pool(self.workers)

    def close(self) -> None:
        """Stop the runners and the workers; a decode still running is abandoned."""
        for runner in self._runners:
            runner.cancel()
        self._runners = []
        if self._pool is not None:
            for process in list(getattr(self._pool, "_processes", {}).values()):
                process.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


_Job = tuple[Callable[..., bytes], tuple[object, ...], "asyncio.Future[bytes]"]
