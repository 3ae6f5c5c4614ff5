"""Pool: decoding jobs fed by priority to the worker processes, none waiting for ever.

:class:`DecodeQueue` takes the most urgent job first: the parts or shards of a root index,
which everything waits for, go before stacks still queued. It is one piece because each job's
wait must end, whatever befalls the pool: a worker that dies (its jobs run again,
:mod:`.recovery`), a pool or a thread that cannot start, a stop. The processes themselves, and
all that reaches into the executor, are in :mod:`.workers`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
import time
from collections.abc import Callable

from ..errors import OutOfMemory, PoolError, out_of_memory
from .recovery import DeathWarning, Entry, Job, Reruns
from .workers import (
    Leftovers,
    decode_pool,
    manager_thread,
    processes,
    reap,
    retire,
    unstartable,
    warm_up,
)

#: Priorities of :meth:`DecodeQueue.run` (lower first).
ROOT_FIRST, STACKS_AFTER = 0, 1
#: Jobs handed to the pool per worker: one running, the others waiting in the pool's queue.
_IN_FLIGHT = 3
#: Seconds between checks that the pool's manager thread still runs, while a job waits.
_MANAGER_CHECK = 1.0
#: Seconds :meth:`DecodeQueue.close` gives killed workers, then the pools' manager threads,
#: to end: a thread that does not end is left behind.
_STOP_GRACE = 1.0


class DecodeQueue:
    """Runs decoding jobs on a process pool, by priority.

    A plain executor runs jobs in submission order; here a root part submitted late still goes
    before the stacks that are waiting, so the largest job is never last in line. The pool is
    handed :data:`_IN_FLIGHT` jobs per worker, not one: a worker that finishes a job starts the
    next at once, rather than idling until the event loop (busy merging a root, or folding a
    stack into the branch) gets round to handing it one. A root part submitted late waits
    behind at most two jobs per worker.

    ``new_pool`` makes a pool of so many workers (:func:`.workers.decode_pool`, unless a caller
    wants to see or fail the pools made).
    """

    def __init__(
        self,
        workers: int,
        new_pool: Callable[[int], concurrent.futures.ProcessPoolExecutor] = decode_pool,
    ) -> None:
        self.workers = workers
        self._make_pool = new_pool
        self._queue: asyncio.PriorityQueue[Entry] = asyncio.PriorityQueue()
        self._order = itertools.count()
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._warning = DeathWarning()
        self._retired: list[Leftovers] = []  # of replaced pools
        self._warming: list[threading.Thread] = []  # starting a pool's workers
        self._runners: list[asyncio.Task[None]] = []
        self._running = 0  # jobs handed to the pool and not settled
        self._drained = asyncio.Event()  # set when none is
        self._drained.set()
        self._reruns = Reruns(self._attempt, self._drained)
        self._unstartable: str | None = None  # why the pool cannot start, once it is known
        self._submitted: set[asyncio.Future[bytes]] = set()  # jobs handed to the pool
        self._callers = 0  # callers of run() waiting for their job
        self._users = 0  # PoolUse objects held
        self._unused = False  # the last one was released while callers still unwound

    @property
    def started(self) -> bool:
        """Whether the workers are started (:meth:`start`) and not closed since."""
        return bool(self._runners)

    @property
    def idle(self) -> bool:
        """Whether no caller of :meth:`run` waits for a job: :meth:`close` would cancel none
        that anyone awaits (counted where jobs enter, not from the runners' state, which a
        job run again after a worker's death passes through unseen)."""
        return not self._callers

    def use(self) -> PoolUse:
        """A hold on the workers for a read that may hand them jobs (see :class:`PoolUse`)."""
        return PoolUse(self)

    def _count_use(self, change: int) -> None:
        self._users += change
        self._unused = not self._users
        self._stop_unused()

    def _stop_unused(self) -> None:
        """Stop the workers once the last hold is released and no caller waits. Jobs a read
        cancelled as it ended (a root's parts, found cached) unwind a moment later: the last
        of them has this called again, from the event loop (not in its cancelled task)."""
        if self._unused and not self._users and self.idle:
            self._unused = False
            self.close()

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
            pool = self._pool = self._make_pool(self.workers)
        except Exception as err:  # its pipes and semaphores cannot be had (EMFILE, ENOMEM)
            self._pool = None  # its jobs fail with PoolError (see _attempt), none waits
            self._unstartable = unstartable(err)
            return
        loop = asyncio.get_running_loop()

        def failed(err: Exception) -> None:
            loop.call_soon_threadsafe(self._cannot_start, pool, err)

        # Starting a process waits for the forkserver to answer: not on the event loop.
        warming = threading.Thread(target=warm_up, args=(pool, self.workers, failed), daemon=True)
        try:
            warming.start()
        except RuntimeError as err:  # no thread to be had
            self._cannot_start(pool, err)
        else:
            self._warming = [w for w in self._warming if w.is_alive()] + [warming]

    def _cannot_start(self, pool: concurrent.futures.ProcessPoolExecutor, err: Exception) -> None:
        """The pool could not start a thread or a process it needs: it never will run a job.
        Its jobs, and all later ones, fail with :class:`PoolError`, rather than wait for ever
        (the lock held).

        Ignored for a pool that was replaced or closed meanwhile: its refusals are expected.
        """
        if pool is not self._pool:
            return
        self._unstartable = unstartable(err)
        self._pool = None
        self._retired.append(retire(pool))
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
        self._callers += 1
        try:
            await self._queue.put((priority, next(self._order), (fn, args, done)))
            return await done
        finally:
            self._callers -= 1
            if self._unused and not self._callers:
                asyncio.get_running_loop().call_soon(self._stop_unused)

    async def _runner(self) -> None:
        while True:
            entry = await self._queue.get()
            try:
                while not self._reruns.open.is_set():  # jobs run again go first, alone
                    await self._reruns.open.wait()
                if not entry[2][2].cancelled() and await self._attempt(entry[2]):
                    self._reruns.add(entry)
            except asyncio.CancelledError:  # closed: its caller must not wait for ever
                entry[2][2].cancel()
                raise

    async def _attempt(self, job: Job, rerun: bool = False) -> bool:
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
        thread waits for the rest of it (see :func:`.workers.retire`): the pool is broken, and
        replaced.
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
            died = any(process.exitcode is not None for process in processes(pool))
            manager = manager_thread(pool)
            if manager is not None and not manager.is_alive() and not submitted.done():
                if pool is not self._pool:  # replaced meanwhile: run the job again
                    raise concurrent.futures.process.BrokenProcessPool("left unsettled")
                self._cannot_start(pool, RuntimeError("a thread of the decoding pool ended"))

    def _restart(self, warn: bool = True) -> None:
        """Replace a pool whose process died (the jobs in it are run again, see :meth:`run`),
        with a warning (:class:`DeathWarning`) unless ``warn`` is false."""
        if warn:
            self._warning.schedule()
        if self._pool is not None:
            self._retired.append(retire(self._pool))  # reaped by close()
        self._new_pool()

    def close(self) -> None:
        """Stop the runners and the workers; a decode still running is abandoned, and the
        callers of jobs not finished see them cancelled. A later :meth:`run` starts new ones."""
        self._warning.settle()
        for runner in self._runners:
            runner.cancel()  # cancels the job it holds, if any
        self._runners = []
        waiting = self._reruns.cancel()
        while not self._queue.empty():
            waiting.append(self._queue.get_nowait())
        for _, _, (_, _, done) in waiting:
            done.cancel()
        # Workers still being started are not yet the pool's to stop: once started, they would
        # outlive it, and one still reading its start-up data as the run ends (a Ctrl-C as the
        # first download begins) finds the pool's semaphores removed and prints a traceback.
        until = time.monotonic() + _STOP_GRACE
        for warming in self._warming:
            warming.join(max(0.0, until - time.monotonic()))
        self._warming = []
        if self._pool is not None:
            self._retired.append(retire(self._pool))
            self._pool = None
        reap(self._retired, _STOP_GRACE)
        self._retired = []


class PoolUse:
    """A read's hold on the workers of a :class:`DecodeQueue`, held from the start.

    The read releases it once the workers have done their part (a root's pieces come back
    before they are loaded and merged) and holds it again for a round again. The last release
    of an idle pool stops the workers: a develop branch's two hold 130-odd MB, which the
    root's merge and the output can use. A job after that starts new ones.
    """

    def __init__(self, queue: DecodeQueue) -> None:
        self._queue = queue
        self._held = False
        self.hold()

    def hold(self) -> None:
        """Keep the workers (again); a hold already held counts once."""
        if not self._held:
            self._held = True
            self._queue._count_use(+1)

    def release(self) -> None:
        """Done with the workers for now; a hold not held does nothing."""
        if self._held:
            self._held = False
            self._queue._count_use(-1)
