"""The decoding pool: priorities, and what a worker process that dies takes down with it."""

from __future__ import annotations

import asyncio
import concurrent.futures.process
import errno
import multiprocessing.queues
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from pathlib import Path

import pytest

from crawler.decode.pool import DecodeQueue
from crawler.decode.workers import decode_pool, manager_thread, processes, running
from crawler.errors import OutOfMemory, PoolError, WorkerError

from .conftest import dead_pid

# Slow (real worker processes, killed and restarted):
# not in the fast loop, pytest -m "not slow".
pytestmark = pytest.mark.slow


def _echo(text: str, url: str) -> bytes:
    return f"{text} from {url}".encode()


def _slow(text: str, url: str) -> bytes:
    time.sleep(0.1)
    return text.encode()


def _die(text: str, url: str) -> bytes:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def _first_time(marker: str) -> bool:
    """True the first time, which creates the marker file; False once it exists."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _die_once(marker: str, url: str) -> bytes:
    """Kill the worker the first time, succeed afterwards."""
    if _first_time(marker):
        os.kill(os.getpid(), signal.SIGKILL)
    return b"second try"


def _die_first_then(marker: str, url: str) -> bytes:
    """The first run kills its worker after a while; the next writes when it starts and ends
    to ``marker + ".again"``, taking a while, and succeeds."""
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    with open(marker + ".again", "w") as out:
        out.write(f"{time.time()} ")
        out.flush()
        time.sleep(0.3)
        out.write(f"{time.time()}")
    return url.encode()


def _no_memory(text: str, url: str) -> bytes:
    raise MemoryError


def _no_memory_to_map(text: str, url: str) -> bytes:
    """What ``mmap`` raises under an address-space limit."""
    raise OSError(errno.ENOMEM, "Cannot allocate memory")


def _no_memory_once(marker: str, url: str) -> bytes:
    """Run out of memory the first time, succeed afterwards."""
    if _first_time(marker):
        raise MemoryError
    return b"second try"


def _timed(log: str, url: str) -> bytes:
    """Take a while, and append its url, when it started and when it ended to ``log``."""
    started = time.time()
    time.sleep(0.15)
    with open(log, "a") as out:
        out.write(f"{url} {started} {time.time()}\n")
    return url.encode()


def _touch(marker: str, url: str) -> bytes:
    open(marker, "w").close()
    return url.encode()


async def _settled(
    queue: DecodeQueue, jobs: list[Coroutine[object, object, bytes]]
) -> list[bytes | BaseException]:
    """Each job's result or exception (within a minute); the queue is closed after."""
    try:
        return await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), 60)
    finally:
        queue.close()


def _recorded(pools: list[concurrent.futures.ProcessPoolExecutor], workers: int = 1) -> DecodeQueue:
    """A queue whose pools are appended to ``pools`` as they are made."""

    def new_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
        pools.append(decode_pool(workers))
        return pools[-1]

    return DecodeQueue(workers, new_pool)


async def _until(path: str) -> None:
    for _ in range(600):
        if os.path.exists(path):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_job_that_kills_its_worker_fails_alone(workers: int) -> None:
    """Every job in flight fails when a worker dies; each is run again, alone, on a new pool,
    so only the one that kills its worker again is reported, and the others succeed."""
    queue = DecodeQueue(workers)
    jobs = [queue.run(1, _echo, "a", "u1"), queue.run(1, _die, "b", "u2")]
    jobs += [queue.run(1, _echo, str(i), f"v{i}") for i in range(6)]
    results = await _settled(queue, jobs)
    assert results[0] == b"a from u1"
    assert isinstance(results[1], WorkerError)
    assert str(results[1]) == (
        "the process decoding u2 died (out of memory, killed, or an index file cut short as it "
        "was read)"
    )
    assert results[2:] == [f"{i} from v{i}".encode() for i in range(6)]


async def test_a_worker_that_dies_once_costs_no_job(
    tmp_path: os.PathLike[str], crawler_log: pytest.LogCaptureFixture
) -> None:
    """A worker killed once (say by the kernel, to free memory) fails nothing: every job in
    flight with it is run again, the one that was running included. The death is logged."""
    queue = DecodeQueue(1)
    marker = os.path.join(tmp_path, "died")
    try:
        jobs = [queue.run(1, _echo, "a", "u1"), queue.run(0, _die_once, marker, "u2")]
        jobs.append(queue.run(1, _echo, "c", "u3"))
        results = await asyncio.wait_for(asyncio.gather(*jobs), 60)
    finally:
        queue.close()
    assert results == [b"a from u1", b"second try", b"c from u3"]
    assert os.path.exists(marker)
    warnings = [r.getMessage() for r in crawler_log.records if r.levelname == "WARNING"]
    assert warnings == [
        "a decoding process died (out of memory, killed, or an index file cut short as it "
        "was read): the indexes in its pool are decoded again, one at a time"
    ]


async def test_a_death_as_the_run_is_cancelled_is_not_logged(
    tmp_path: os.PathLike[str], crawler_log: pytest.LogCaptureFixture
) -> None:
    """SIGTERM sent to the whole process group (``systemctl stop``) can end a worker just
    before the crawler's handler cancels the run, whose cleanup closes the queue: that death is
    no out-of-memory alarm, and is not logged. (A death in a run that goes on is, above.)"""
    pools: list[concurrent.futures.ProcessPoolExecutor] = []
    queue = _recorded(pools)
    marker = os.path.join(tmp_path, "died")

    async def run() -> None:
        try:
            await queue.run(0, _die_once, marker, "u1")
            await asyncio.sleep(60)
        finally:
            queue.close()

    task = asyncio.create_task(run())
    for _ in range(600):  # until the death is noticed (the pool replaced): its warning waits
        if len(pools) == 2:
            break
        await asyncio.sleep(0.01)
    assert len(pools) == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(1)  # past the warning's delay
    assert [r for r in crawler_log.records if r.levelname == "WARNING"] == []


async def test_a_job_out_of_memory_is_run_again_alone_then_fails_as_such(
    tmp_path: os.PathLike[str], crawler_log: pytest.LogCaptureFixture
) -> None:
    """A MemoryError in a job (``ulimit -v``: the worker lives on) is no bug: the job is run
    again alone, where it may find the memory it needs, and if it fails again the index is
    reported out of memory, not as an internal error. No process died: no warning."""
    queue = DecodeQueue(2)
    marker = os.path.join(tmp_path, "once")
    jobs = [queue.run(1, _echo, "a", "u1"), queue.run(1, _no_memory, "b", "u2")]
    jobs += [queue.run(1, _no_memory_once, marker, "u3"), queue.run(1, _echo, "d", "u4")]
    jobs.append(queue.run(1, _no_memory_to_map, "e", "u5"))
    results = await _settled(queue, jobs)
    assert results[0] == b"a from u1"
    assert [str(r) for r in results[1::3] if isinstance(r, OutOfMemory)] == [
        "out of memory decoding u2",
        "out of memory decoding u5",
    ]
    assert results[2:4] == [b"second try", b"d from u4"]
    assert [r for r in crawler_log.records if r.levelname == "WARNING"] == []


async def test_most_urgent_job_first() -> None:
    """Jobs queued while the pool is full start by priority, then in the order queued: a root
    part submitted late goes before the stacks still waiting (the pool holds 3 jobs per
    worker, so the first three stacks are already in it)."""
    queue = DecodeQueue(1)
    finished: list[str] = []

    async def job(priority: int, name: str) -> None:
        await queue.run(priority, _slow, name, "u")
        finished.append(name)

    try:
        await queue.run(0, _echo, "warm", "up")
        tasks = [asyncio.create_task(job(1, f"s{i}")) for i in range(1, 4)]
        await asyncio.sleep(0.1)  # the runners hand these three to the pool
        tasks += [asyncio.create_task(job(1, f"s{i}")) for i in range(4, 6)]
        tasks.append(asyncio.create_task(job(0, "root")))
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    finally:
        queue.close()
    assert finished == ["s1", "s2", "s3", "root", "s4", "s5"]


async def test_idle_while_no_job_is_queued_or_running() -> None:
    """What a read that is done with the workers asks before stopping them: a job queued
    or in the pool, awaited by its caller, would be cancelled."""
    queue = DecodeQueue(1)
    try:
        assert queue.idle
        tasks = [asyncio.create_task(queue.run(1, _slow, f"s{i}", "u")) for i in range(5)]
        await asyncio.sleep(0)  # queued
        assert not queue.idle
        await asyncio.sleep(0.25)  # the last ones in the pool, none queued
        assert not queue.idle
        assert await asyncio.wait_for(asyncio.gather(*tasks), 60) == [
            f"s{i}".encode() for i in range(5)
        ]
        assert queue.idle
    finally:
        queue.close()


@pytest.mark.parametrize("workers", [1, 2])
async def test_two_killers_in_a_stream(workers: int) -> None:
    """Two jobs that always kill their worker, among sixteen: exactly those two fail."""
    queue = DecodeQueue(workers)
    killers = {3, 11}
    try:
        jobs = [
            queue.run(1, _die, "x", f"u{i}") if i in killers else queue.run(1, _echo, "x", f"u{i}")
            for i in range(16)
        ]
        results = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), 120)
    finally:
        queue.close()
    for i, result in enumerate(results):
        if i in killers:
            assert isinstance(result, WorkerError), (i, result)
        else:
            assert result == f"x from u{i}".encode(), (i, result)


async def test_jobs_run_again_by_priority(tmp_path: os.PathLike[str]) -> None:
    """The jobs a dying worker took down run again most urgent first, then in the order they
    came, whatever the order in which their failures were noticed."""
    queue = DecodeQueue(1)
    finished: list[str] = []

    async def job(priority: int, fn: object, marker: str, name: str) -> None:
        await queue.run(priority, fn, marker, name)  # type: ignore[arg-type]
        finished.append(name)

    marker = os.path.join(tmp_path, "killer")
    try:
        await queue.run(0, _echo, "warm", "up")
        tasks = [asyncio.create_task(job(1, _die_first_then, marker, "killer"))]
        await _until(marker)  # the killer runs: the next two wait in the pool behind it
        tasks.append(asyncio.create_task(job(1, _echo, "", "stack")))
        tasks.append(asyncio.create_task(job(0, _echo, "", "root")))
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    finally:
        queue.close()
    assert finished == ["root", "killer", "stack"]


async def test_a_cancelled_job_is_not_run_again(tmp_path: os.PathLike[str]) -> None:
    """A job taken down by a dying worker and cancelled before its turn to run again (its
    source was abandoned meanwhile) is not run at all."""
    queue = DecodeQueue(1)
    killer = os.path.join(tmp_path, "killer")
    touched = os.path.join(tmp_path, "touched")
    try:
        await queue.run(0, _echo, "warm", "up")
        first = asyncio.create_task(queue.run(1, _die_first_then, killer, "k"))
        await _until(killer)
        second = asyncio.create_task(queue.run(1, _touch, touched, "t"))
        await _until(killer + ".again")  # the killer runs again, alone; the other waits
        second.cancel()
        assert await asyncio.wait_for(first, 60) == b"k"
        await queue.run(1, _echo, "after", "u")  # the queue goes on
    finally:
        queue.close()
    assert second.cancelled()
    assert not os.path.exists(touched)


async def test_a_job_run_again_runs_alone(tmp_path: os.PathLike[str]) -> None:
    """While a job taken down by a dying worker runs again, no other job runs, not even one
    queued after the death: were one to kill the worker, it could not tell which did."""
    queue = DecodeQueue(2)
    killer = os.path.join(tmp_path, "killer")
    log = os.path.join(tmp_path, "log")
    try:
        await queue.run(0, _echo, "warm", "up")
        jobs = [asyncio.create_task(queue.run(1, _die_first_then, killer, "k"))]
        await _until(killer)
        jobs += [asyncio.create_task(queue.run(1, _timed, log, f"n{i}")) for i in range(8)]
        await _until(killer + ".again")  # it runs again: jobs that come now must wait
        jobs += [asyncio.create_task(queue.run(0, _timed, log, f"n{i}")) for i in range(8, 10)]
        results = await asyncio.wait_for(asyncio.gather(*jobs), 60)
    finally:
        queue.close()
    assert results == [b"k", *(f"n{i}".encode() for i in range(10))]
    with open(killer + ".again") as again:
        alone_from, alone_to = map(float, again.read().split())
    with open(log) as lines:
        runs = [line.split() for line in lines]
    # Each ran, some maybe twice: one that had finished on the other worker but whose result
    # had not come back when the pool broke is run again too.
    assert {url for url, _, _ in runs} == {f"n{i}" for i in range(10)}
    others = [(float(a), float(b)) for _, a, b in runs]
    overlapping = [(a, b) for a, b in others if a < alone_to and b > alone_from]
    assert not overlapping, (alone_from, alone_to, overlapping)


async def test_close_while_jobs_wait_to_run_again(tmp_path: os.PathLike[str]) -> None:
    """Closing the queue while jobs wait to run again cancels them (their callers do not wait
    for ever), and the queue starts anew on the next job."""
    queue = DecodeQueue(1)
    killer = os.path.join(tmp_path, "killer")
    try:
        await queue.run(0, _echo, "warm", "up")
        first = asyncio.create_task(queue.run(1, _die_first_then, killer, "k"))
        await _until(killer)
        second = asyncio.create_task(queue.run(1, _echo, "s", "u"))
        await _until(killer + ".again")  # runs again alone; the second waits its turn
        queue.close()
        _, pending = await asyncio.wait([first, second], timeout=10)
        assert not pending
        assert first.cancelled() and second.cancelled()
        assert await asyncio.wait_for(queue.run(1, _echo, "after", "u"), 60) == b"after from u"
    finally:
        queue.close()


def test_without_pidfd_a_zombie_counts_as_ended() -> None:
    """Where ``pidfd_open`` is missing, workers ask every half second whether the crawler runs:
    a crawler killed but not yet reaped by its parent has ended too."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        stat = Path(f"/proc/{child.pid}/stat")
        for _ in range(200):
            if stat.read_bytes().rpartition(b")")[2].split()[0] == b"Z":
                break
            time.sleep(0.05)
        assert not running(child.pid)
    finally:
        child.wait()
    assert not running(dead_pid())
    assert running(os.getpid())


@pytest.mark.parametrize("failures", [1, 100])
async def test_a_pool_that_cannot_start_fails_its_jobs_rather_than_hang(
    monkeypatch: pytest.MonkeyPatch, failures: int
) -> None:
    """Under ``ulimit -v`` (or a process limit) the pool's manager thread may not start. The
    pool then never runs a job, and the jobs waited for ever: a cron run that never ends, its
    lock held. They fail now, saying why; the next queue (a later run) starts afresh."""
    manager = concurrent.futures.process._ExecutorManagerThread
    start = manager.start
    left = [failures]

    def start_or_fail(self: threading.Thread) -> None:
        if left[0]:
            left[0] -= 1
            raise RuntimeError("can't start new thread")
        start(self)

    monkeypatch.setattr(manager, "start", start_or_fail)
    queue = DecodeQueue(2)
    results = await _settled(queue, [queue.run(1, _echo, str(i), f"u{i}") for i in range(4)])
    assert all(isinstance(r, PoolError) for r in results), results
    assert str(results[0]) == (
        "cannot start the decoding processes: can't start new thread "
        "(out of memory, or a limit on processes)"
    )

    left[0] = 0
    queue = DecodeQueue(2)
    assert await _settled(queue, [queue.run(1, _echo, "a", "u")]) == [b"a from u"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_a_pool_whose_manager_thread_dies_fails_its_jobs_rather_than_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool's manager thread started, but the thread feeding the workers' queue could not
    (``ulimit -v``): the manager thread died of it, and nothing settled the jobs any more. The
    queue notices within a second and fails them."""
    feeder = multiprocessing.queues.Queue._start_thread  # type: ignore[attr-defined]

    def no_feeder(self: multiprocessing.queues.Queue[object]) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(multiprocessing.queues.Queue, "_start_thread", no_feeder)
    queue = DecodeQueue(1)
    results = await _settled(queue, [queue.run(1, _echo, str(i), f"u{i}") for i in range(3)])
    assert [str(r) for r in results] == 3 * [
        "cannot start the decoding processes: a thread of the decoding pool ended "
        "(out of memory, or a limit on processes)"
    ]

    monkeypatch.setattr(multiprocessing.queues.Queue, "_start_thread", feeder)
    queue = DecodeQueue(1)
    assert await _settled(queue, [queue.run(1, _echo, "a", "u")]) == [b"a from u"]


async def test_a_worker_killed_while_idle_costs_no_job(
    crawler_log: pytest.LogCaptureFixture,
) -> None:
    """A worker killed between jobs (the OOM killer during a download) breaks the pool, and the
    next submit says so: the jobs run on a new pool. (For a while that submit's error, a
    RuntimeError as well, was taken for a thread that cannot start: every job failed.)"""
    pools: list[concurrent.futures.ProcessPoolExecutor] = []
    queue = _recorded(pools, 2)
    try:
        assert await asyncio.wait_for(queue.run(1, _echo, "a", "u0"), 60) == b"a from u0"
        worker = processes(pools[0])[0]
        os.kill(worker.pid or 0, signal.SIGKILL)
        worker.join()
        await asyncio.sleep(0.5)  # the pool's manager thread finds it broken
        jobs = [queue.run(1, _echo, "b", f"u{i}") for i in range(1, 4)]
        assert await asyncio.wait_for(asyncio.gather(*jobs), 60) == [
            f"b from u{i}".encode() for i in range(1, 4)
        ]
    finally:
        queue.close()
    assert any("a decoding process died" in r.getMessage() for r in crawler_log.records)


async def test_a_process_that_cannot_be_started_fails_its_job_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """fork() at a process limit raises BlockingIOError as the pool submits; that used to
    escape the runner, and the job's caller waited for ever."""

    def no_fork(self: object) -> None:
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")

    monkeypatch.setattr(
        concurrent.futures.process.ProcessPoolExecutor, "_launch_processes", no_fork
    )
    queue = DecodeQueue(1)
    results = await _settled(queue, [queue.run(1, _echo, "a", "u")])
    assert isinstance(results[0], PoolError)
    assert "Resource temporarily unavailable (out of memory, or a limit" in str(results[0])


async def test_a_pool_that_cannot_be_replaced_fails_its_jobs_rather_than_hang() -> None:
    """A worker dies and no new pool can be made (its pipes and semaphores: EMFILE at the
    open-file limit, ENOMEM): the error escaped the runner, and the jobs waited for ever."""
    pools = [0]

    def second_pool_fails(workers: int) -> concurrent.futures.ProcessPoolExecutor:
        pools[0] += 1
        if pools[0] > 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return decode_pool(workers)

    queue = DecodeQueue(1, second_pool_fails)
    jobs = [queue.run(1, _die, "a", "u1"), queue.run(1, _echo, "b", "u2")]
    results = await _settled(queue, jobs)
    assert [str(r) for r in results] == 2 * [
        "cannot start the decoding processes: [Errno 24] Too many open files "
        "(out of memory, or a limit on processes)"
    ]


def _die_sending(marker: str, url: str) -> bytes:
    """The first time, write the start of a result message into the pool's result pipe and
    die, as a worker ended while it sends its result does; succeed afterwards."""
    if _first_time(marker):
        import gc
        import struct

        pipe = next(
            o for o in gc.get_objects() if isinstance(o, multiprocessing.queues.SimpleQueue)
        )
        writer = pipe._writer  # type: ignore[attr-defined]
        os.write(writer.fileno(), struct.pack("!i", 1 << 20) + b"half a message")
        os.kill(os.getpid(), signal.SIGKILL)
    return b"second try"


async def test_a_worker_that_dies_sending_its_result_costs_no_job(tmp_path: Path) -> None:
    """The pool's manager thread then waits for the rest of the message for ever and never
    fails the pool's jobs: the queue finds the worker dead, replaces the pool and runs the job
    again, rather than waiting with the lock held."""
    queue = DecodeQueue(2)
    try:
        job = queue.run(1, _die_sending, str(tmp_path / "marker"), "u")
        assert await asyncio.wait_for(job, 30) == b"second try"
    finally:
        started = time.monotonic()
        queue.close()
    assert time.monotonic() - started < 5


async def test_close_ends_in_bounded_time_after_a_half_sent_result(tmp_path: Path) -> None:
    """SIGTERM while a root decodes: close() used to wait in the pool's shutdown(wait=True)
    for the manager thread, itself waiting for the rest of a half-sent result, for ever. Now
    it returns within its grace, and the thread ends too (Python's exit joins it)."""
    pools: list[concurrent.futures.ProcessPoolExecutor] = []
    queue = _recorded(pools)
    job = asyncio.ensure_future(queue.run(1, _die_sending, str(tmp_path / "marker"), "u"))
    for _ in range(400):  # until the worker is dead
        await asyncio.sleep(0.05)
        if any(p.exitcode is not None for p in processes(pools[0])):
            break
    manager = manager_thread(pools[0])
    started = time.monotonic()
    queue.close()
    assert time.monotonic() - started < 5
    assert manager is not None
    manager.join(5)
    assert not manager.is_alive()
    with pytest.raises(asyncio.CancelledError):
        await job


_MASK_SCRIPT = """
import multiprocessing, signal
from multiprocessing import forkserver
from crawler.decode.workers import decode_pool
decode_pool(1)  # starts the resource tracker and the forkserver
pid = forkserver._forkserver._forkserver_pid
status = open(f"/proc/{pid}/status").read()
blocked = int(next(l for l in status.splitlines() if l.startswith("SigBlk:")).split()[1], 16)
print(" ".join(s.name for s in signal.Signals if blocked >> (s - 1) & 1))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_the_forkserver_starts_with_the_group_signals_blocked() -> None:
    """Ctrl-C while the forkserver's interpreter starts killed it with a "Fatal Python error:
    init_import_site ... KeyboardInterrupt" on the terminal: starting the resource tracker
    first unblocked SIGINT and SIGTERM for the thread that then started the forkserver. Its
    mask, as the kernel shows it, holds all three (it ignores SIGINT once started)."""
    done = subprocess.run(
        [sys.executable, "-c", _MASK_SCRIPT], capture_output=True, text=True, check=True
    )
    assert {"SIGINT", "SIGTERM", "SIGHUP"} <= set(done.stdout.split()), done.stdout
