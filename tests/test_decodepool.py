"""The decoding pool: priorities, and what a worker process that dies takes down with it."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from crawler.decodepool import DecodeQueue
from crawler.errors import WorkerError


def _echo(text: str, url: str) -> bytes:
    return f"{text} from {url}".encode()


def _slow(text: str, url: str) -> bytes:
    time.sleep(0.1)
    return text.encode()


def _die(text: str, url: str) -> bytes:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def _die_once(marker: str, url: str) -> bytes:
    """Kill the worker the first time (the marker file is created), succeed afterwards."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return b"second try"
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("workers", [1, 2])
async def test_a_job_that_kills_its_worker_fails_alone(workers: int) -> None:
    """Every job in flight fails when a worker dies; each is run again, alone, on a new pool,
    so only the one that kills its worker again is reported, and the others succeed."""
    queue = DecodeQueue(workers)
    try:
        jobs = [queue.run(1, _echo, "a", "u1"), queue.run(1, _die, "b", "u2")]
        jobs += [queue.run(1, _echo, str(i), f"v{i}") for i in range(6)]
        results = await asyncio.wait_for(asyncio.gather(*jobs, return_exceptions=True), 60)
    finally:
        queue.close()
    assert results[0] == b"a from u1"
    assert isinstance(results[1], WorkerError)
    assert str(results[1]) == "the process decoding u2 died (out of memory, or killed)"
    assert results[2:] == [f"{i} from v{i}".encode() for i in range(6)]


async def test_a_worker_that_dies_once_costs_no_job(tmp_path: os.PathLike[str]) -> None:
    """A worker killed once (say by the kernel, to free memory) fails nothing: every job in
    flight with it is run again, the one that was running included."""
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
