"""The decoding pool: what a job's caller sees when a worker dies, memory runs out or no
process can be started, and that the pool's processes end with it."""

from __future__ import annotations

import asyncio
import errno
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.synth import index_document
from crawler.config import Config
from crawler.decode.pool import DecodePool
from crawler.decode.workers import running
from crawler.errors import OutOfMemory, PoolError, WorkerError
from crawler.mirror.discovery import Source
from crawler.mirror.fetch import Fetcher
from crawler.output.state import Store
from crawler.sync.reporting import LogReporter
from crawler.sync.sources import SourceReader

from .conftest import dead_pid

# Slow (real worker processes, killed and restarted):
# not in the fast loop, pytest -m "not slow".
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


def _echo(text: str, url: str) -> bytes:
    return f"{text} from {url}".encode()


def _pid(text: str, url: str) -> bytes:
    return str(os.getpid()).encode()


def _slow(text: str, url: str) -> bytes:
    time.sleep(float(text))
    return url.encode()


def _die(text: str, url: str) -> bytes:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def _no_memory(text: str, url: str) -> bytes:
    raise MemoryError


def _no_memory_to_map(text: str, url: str) -> bytes:
    """What ``mmap`` raises under an address-space limit."""
    raise OSError(errno.ENOMEM, "Cannot allocate memory")


def _bad(text: str, url: str) -> bytes:
    raise ValueError(f"{url}: {text}")


async def _settled(pool: DecodePool, *jobs: asyncio.Future[bytes]) -> list[object]:
    try:
        return await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), 60)
    finally:
        pool.close()


async def _no_children() -> bool:
    """Whether this process's pool workers have all ended, within ten seconds."""
    for _ in range(200):
        if not multiprocessing.active_children():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_worker_that_dies_fails_the_indexes_in_its_pool_and_the_next_job_runs() -> None:
    """Each job in the broken pool fails naming its own index (its source fails, the next
    run reads it again); a job after that runs on new processes."""
    pool = DecodePool(2)
    try:
        assert await pool.run(_echo, "warm", "up") == b"warm from up"
        slow = asyncio.ensure_future(pool.run(_slow, "5", "u1"))
        await asyncio.sleep(0.3)  # running on one worker
        killer = asyncio.ensure_future(pool.run(_die, "x", "u2"))
        results = await asyncio.wait_for(asyncio.gather(slow, killer, return_exceptions=True), 30)
        assert [str(r) for r in results] == [
            f"a decoding process died while {url} was being decoded (out of memory, killed, or "
            "an index file cut short as it was read); the next run reads it again"
            for url in ("u1", "u2")
        ]
        assert all(isinstance(r, WorkerError) for r in results)
        assert await asyncio.wait_for(pool.run(_echo, "b", "u3"), 30) == b"b from u3"
    finally:
        pool.close()
    assert await _no_children()


class _KillsOnce(DecodePool):
    """The real pool; its first job kills the worker that takes it, as the OOM killer would."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.killed = False

    async def run(self, fn: Callable[..., bytes], path: str, url: str, /, *args: object) -> bytes:
        if not self.killed:
            self.killed = True
            return await super().run(_die, path, url)
        return await super().run(fn, path, url, *args)


async def test_a_source_whose_worker_died_fails_and_is_read_again_next_time(
    tmp_path: Path,
) -> None:
    """Its summary is not cached: the next read (the next run) decodes it, and succeeds."""
    index = tmp_path / "index.json"
    index.write_bytes(index_document([], 8))
    config = Config(output=str(tmp_path / "out"), decode_workers=1)
    source = Source("develop", "s1", index.as_uri(), index.as_uri(), "v2", None)
    pool = _KillsOnce(1)
    try:
        async with Fetcher(config) as fetcher:
            reader = SourceReader(config, fetcher, Store(tmp_path / "out"), LogReporter(), pool)
            first = await reader.read("develop", source, tmp_path / "1.json", None)
            again = await reader.read("develop", source, tmp_path / "2.json", None)
    finally:
        pool.close()
    assert (first.status, first.decoded) == ("failed", False)
    assert first.error == (
        f"a decoding process died while {index.as_uri()} was being decoded (out of memory, "
        "killed, or an index file cut short as it was read); the next run reads it again"
    )
    assert (again.status, again.decoded) == ("fetched", True), again.error


async def test_a_worker_killed_while_idle_costs_no_job() -> None:
    """A worker killed between jobs (the OOM killer during a download) breaks the pool before
    the next job is handed to it: that job runs on a new pool."""
    pool = DecodePool(1)
    try:
        worker = int(await asyncio.wait_for(pool.run(_pid, "", "u0"), 60))
        os.kill(worker, signal.SIGKILL)
        await asyncio.sleep(0.5)  # the pool finds it broken
        assert await asyncio.wait_for(pool.run(_echo, "b", "u1"), 60) == b"b from u1"
    finally:
        pool.close()


async def test_a_job_out_of_memory_fails_as_such() -> None:
    """A MemoryError in a job (``ulimit -v``: the worker lives on) is no bug: the index is
    reported out of memory, not as an internal error, and the other jobs go on."""
    pool = DecodePool(2)
    jobs = [pool.run(_no_memory, "", "u1"), pool.run(_echo, "b", "u2")]
    jobs += [pool.run(_no_memory_to_map, "", "u3"), pool.run(_bad, "bad", "u4")]
    results = await _settled(pool, *map(asyncio.ensure_future, jobs))
    assert isinstance(results[0], OutOfMemory) and isinstance(results[2], OutOfMemory)
    assert [str(results[0]), str(results[2])] == [
        "out of memory decoding u1",
        "out of memory decoding u3",
    ]
    assert results[1] == b"b from u2"
    assert isinstance(results[3], ValueError) and str(results[3]) == "u4: bad"


async def test_a_cancelled_wait_leaves_the_pool_usable() -> None:
    """A read that abandons its jobs (a root's parts) as the pool starts must not cancel the
    start the other jobs wait for."""
    pool = DecodePool(1)
    try:
        first = asyncio.ensure_future(pool.run(_echo, "a", "u1"))
        second = asyncio.ensure_future(pool.run(_echo, "b", "u2"))
        await asyncio.sleep(0)
        first.cancel()
        assert await asyncio.wait_for(second, 60) == b"b from u2"
        assert first.cancelled()
    finally:
        pool.close()


async def test_close_leaves_no_process_behind_and_a_later_job_starts_anew() -> None:
    pool = DecodePool(2)
    assert not pool.started
    assert await asyncio.wait_for(pool.run(_echo, "a", "u"), 60) == b"a from u"
    assert pool.started and multiprocessing.active_children()
    pool.close()
    assert not pool.started
    assert await _no_children()
    assert await _settled(pool, asyncio.ensure_future(pool.run(_echo, "b", "u"))) == [b"b from u"]
    assert await _no_children()


async def test_close_if_idle_spares_a_pool_with_a_job_to_do() -> None:
    """What a root's read asks once its pieces are back: a stack still decoding keeps the
    workers; once it is done, they go."""
    pool = DecodePool(1)
    try:
        job = asyncio.ensure_future(pool.run(_slow, "0.5", "u"))
        await asyncio.sleep(0)
        assert not pool.idle
        pool.close_if_idle()
        assert pool.started
        assert await asyncio.wait_for(job, 60) == b"u"
        assert pool.idle
        pool.close_if_idle()
        assert not pool.started
    finally:
        pool.close()


async def test_close_while_the_pool_starts_leaves_no_process_behind() -> None:
    """Ctrl-C as the first download begins: the pool is still being started in its thread."""
    pool = DecodePool(2)
    pool.start()
    pool.close()
    await asyncio.sleep(2)  # the start goes on, then shuts the pool down
    assert await _no_children()


_LIMITED = """
import asyncio, resource
from crawler.decode.pool import DecodePool
from tests.test_decodepool import _echo

async def main():
    pool = DecodePool(1)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (int(open("/proc/self/statm").read().split()[0])
                       * resource.getpagesize() + (4 << 20), hard))
    try:
        await pool.run(_echo, "a", "u")
    except Exception as err:
        print(type(err).__name__, err)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    print((await pool.run(_echo, "b", "u")).decode())
    pool.close()

asyncio.run(main())
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc")
def test_a_pool_that_cannot_start_fails_its_job_and_the_next_one_starts() -> None:
    """Under ``ulimit -v`` no thread or process can be started: the job fails, saying why,
    rather than wait for ever with the lock held; once memory can be had, a job runs."""
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    assert lines[0].startswith(f"{PoolError.__name__} cannot start the decoding processes: ")
    assert lines[0].endswith("(out of memory, or a limit on processes)")
    assert lines[1:] == ["b from u"]


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


_MASKS = """
import asyncio, os, signal
from crawler.decode.pool import DecodePool
from tests.test_decodepool import _pid

def signals(pid, field):
    status = open(f"/proc/{pid}/status").read()
    mask = int(next(l for l in status.splitlines() if l.startswith(field)).split()[1], 16)
    names = ("SIGINT", "SIGTERM", "SIGHUP")
    return sorted(n for n in names if mask >> (getattr(signal, n) - 1) & 1)

def forkserver():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat, cmdline = (open(f"/proc/{pid}/{f}", "rb").read() for f in ("stat", "cmdline"))
        except OSError:
            continue  # ended meanwhile
        parent = stat.rpartition(b")")[2].split()[1]
        if parent == str(os.getpid()).encode() and b"forkserver" in cmdline:
            return pid

pool = DecodePool(1)
worker = int(asyncio.run(pool.run(_pid, "", "u")))
print(signals(forkserver(), "SigBlk:"), signals(os.getpid(), "SigBlk:"))
print(signals(worker, "SigBlk:"), signals(worker, "SigIgn:"))
pool.close()
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_the_forkserver_starts_with_the_group_signals_blocked() -> None:
    """Ctrl-C while the forkserver's interpreter starts killed it with a "Fatal Python error:
    init_import_site ... KeyboardInterrupt" on the terminal: it starts with SIGINT, SIGTERM
    and SIGHUP blocked (the crawler's own mask untouched), and its workers unblock them and
    ignore them, as the crawler stops its pool itself."""
    done = subprocess.run(
        [sys.executable, "-c", _MASKS], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, done.stderr
    group = "['SIGHUP', 'SIGINT', 'SIGTERM']"
    assert done.stdout.splitlines() == [f"{group} []", f"[] {group}"]
