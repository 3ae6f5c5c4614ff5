"""Recovery: what the decoding queue does when a worker dies, or a job runs out of memory.

Every job in the pool fails with the worker, whichever of them killed it: :class:`Reruns` runs
each again alone, so that only one that kills its worker again fails; :class:`DeathWarning`
tells the operator, unless the run is being stopped. Used by :class:`.pool.DecodeQueue`.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections.abc import Awaitable, Callable

from ..errors import WorkerError

log = logging.getLogger("crawler")

#: Seconds a worker's death waits to be logged (see :class:`DeathWarning`).
_WARNING_DELAY = 0.5


class DeathWarning:
    """The warning that a decoding process died, logged :data:`_WARNING_DELAY` seconds later.

    The run goes on and may well succeed, but an operator should know that a process was
    killed (usually by the kernel's out-of-memory killer). It waits: SIGTERM or SIGINT sent to
    the whole process group (``systemctl stop``, Ctrl-C) can end the workers just before the
    crawler's own handler runs, and that is no sign of trouble. :meth:`settle` (as the queue
    closes) drops it when the run is being cancelled, and logs it at once otherwise.
    """

    def __init__(self) -> None:
        self._handle: asyncio.TimerHandle | None = None  # a death not yet logged

    def schedule(self) -> None:
        """A process died: log it in a while (once, for deaths close together)."""
        if self._handle is None:
            self._handle = asyncio.get_running_loop().call_later(_WARNING_DELAY, self._log)

    def settle(self) -> None:
        """Log a warning still waiting now, or drop it if the run is being cancelled."""
        if self._handle is None:
            return
        self._handle.cancel()
        self._handle = None
        task = asyncio.current_task()
        if task is None or not task.cancelling():  # not a SIGTERM or SIGINT: say it now
            self._log()

    def _log(self) -> None:
        self._handle = None
        log.warning(
            "a decoding process died (out of memory, killed, or an index file cut short as it "
            "was read): the indexes in its pool are decoded again, one at a time"
        )


class Reruns:
    """The jobs a pool broke under, run again one at a time, most urgent first, while other
    jobs wait (see :meth:`.pool.DecodeQueue.run`): one that kills its worker again fails alone."""

    def __init__(
        self, attempt: Callable[[Job, bool], Awaitable[bool]], drained: asyncio.Event
    ) -> None:
        self._attempt = attempt  # True when the pool broke again
        self._drained = drained  # set when no job is in the pool
        self._heap: list[Entry] = []
        self._task: asyncio.Task[None] | None = None
        self.open = asyncio.Event()  # cleared while there are reruns: other jobs wait
        self.open.set()

    def add(self, entry: Entry) -> None:
        """Queue a job the pool broke under to run again alone."""
        heapq.heappush(self._heap, entry)
        self.open.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            while self._heap:
                await self._drained.wait()  # the jobs still in the pool, broken or not
                _, _, (fn, args, done) = heapq.heappop(self._heap)
                try:
                    broken = not done.cancelled() and await self._attempt((fn, args, done), True)
                    if broken and not done.cancelled():
                        done.set_exception(WorkerError(str(args[1])))
                except asyncio.CancelledError:  # closed: its caller must not wait for ever
                    done.cancel()
                    raise
        finally:
            self.open.set()

    def cancel(self) -> list[Entry]:
        """Stop running jobs again: those still waiting to are returned, to be cancelled."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        waiting, self._heap = self._heap, []
        self.open.set()
        return waiting


#: A job: the function, its arguments, and its result.
Job = tuple[Callable[..., bytes], tuple[object, ...], "asyncio.Future[bytes]"]
#: A job in line: its priority, its place in the order jobs came, the job.
Entry = tuple[int, int, Job]
