"""The floor: the least work any crawler of a ref must do, measured on the same served mirror.

* download: every index file of the ref at once (one aiohttp session, no connection limit),
  bodies counted and dropped: nothing decoded, hashed or written;
* decode: the same files (read from the mirror folder, i.e. the page cache) decoded with msgspec
  into structs holding only what the summary needs (root: name, version, arch, compiler or
  dependency edges, parameters, annotations, ``in_buildcache``; stacks: the keys of ``installs``
  only), on a pool of warm worker processes (2 by default), largest file first, with the cyclic
  garbage collector off (see :func:`decode_file`).

floor = download + decode: a crawler may overlap the two, so this is a fair bound to beat by at
most 2x, not a hard lower bound.

For a shaped network, :func:`download_pooled` gives the other yardstick: the same files
downloaded by 8 parallel plain downloads (a pool of 8 connections, each file once, bodies
dropped), as a user would fetch them without a crawler.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import msgspec

PLAIN_CONNECTIONS = 8  # issue 43: "8 parallel plain downloads of the same files"

Scalar = bool | int | float | str
ParamValue = Scalar | list[Scalar]


class _Target(msgspec.Struct, gc=False):
    name: str


class _Arch(msgspec.Struct, gc=False):
    platform: str
    platform_os: str
    target: str | _Target


class _Compiler(msgspec.Struct, gc=False):
    name: str
    version: str


class _EdgeParameters(msgspec.Struct, gc=False):
    virtuals: list[str] = []


class _Edge(msgspec.Struct, gc=False):
    hash: str
    parameters: _EdgeParameters | None = None


class _Annotations(msgspec.Struct, gc=False):
    compiler: str | None = None


class _Node(msgspec.Struct, gc=False):
    name: str
    version: str
    arch: _Arch
    compiler: _Compiler | None = None
    parameters: dict[str, ParamValue] = {}
    dependencies: list[_Edge] = []
    annotations: _Annotations | None = None


class _Record(msgspec.Struct, gc=False):
    spec: _Node
    in_buildcache: bool = False


class _RootDatabase(msgspec.Struct, gc=False):
    version: str
    installs: dict[str, _Record]


class _RootDocument(msgspec.Struct, gc=False):
    database: _RootDatabase


class _Skipped(msgspec.Struct, gc=False):
    """A record of which nothing is read (msgspec skips every field)."""


class _StackDatabase(msgspec.Struct, gc=False):
    installs: dict[str, _Skipped]


class _StackDocument(msgspec.Struct, gc=False):
    database: _StackDatabase


_ROOT = msgspec.json.Decoder(_RootDocument)
_STACK = msgspec.json.Decoder(_StackDocument)


def decode_file(path: str, is_root: bool) -> int:
    """Decode one index file minimally; returns its number of records (runs in a worker).

    The cyclic garbage collector is off meanwhile: decoded indexes hold no reference cycles, and
    its passes over the millions of new dicts and lists would otherwise double the time.
    """
    body = Path(path).read_bytes()
    enabled = gc.isenabled()
    gc.disable()
    try:
        if is_root:
            return len(_ROOT.decode(body).database.installs)
        return len(_STACK.decode(body).database.installs)
    finally:
        if enabled:
            gc.enable()


def _ready() -> int:
    time.sleep(0.2)  # keeps this worker busy so the pool starts the next one
    return 0


@dataclass(frozen=True)
class FloorFigures:
    """Download and decode times of one ref's index files."""

    files: int
    bytes: int
    records: int
    download_seconds: float
    decode_seconds: float
    decode_workers: int

    @property
    def seconds(self) -> float:
        """The floor: download + decode."""
        return self.download_seconds + self.decode_seconds

    @property
    def download_mb_s(self) -> float:
        """Download throughput, MB (10^6 bytes) per second."""
        return self.bytes / 1e6 / self.download_seconds if self.download_seconds else 0.0


async def download_all(urls: Sequence[str]) -> tuple[float, int]:
    """Wall time and total bytes of fetching every URL at once (bodies dropped): one
    connection each (:func:`download_pooled`)."""
    return await download_pooled(urls, max(1, len(urls)))


async def download_pooled(
    urls: Sequence[str], connections: int = PLAIN_CONNECTIONS
) -> tuple[float, int]:
    """Wall time and total bytes of fetching each URL once, ``connections`` at a time.

    ``connections`` workers take the URLs in the order given, each over the one keep-alive
    connection it holds at a time (the connector's limit): against ``bench/server.py`` each
    request waits the latency and each connection gets the full bandwidth, as the crawler's do.
    Bodies are counted and dropped.
    """
    if connections < 1:
        raise ValueError("connections must be >= 1")
    connector = aiohttp.TCPConnector(limit=connections)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    pending = iter(urls)  # shared by the workers: each takes the next URL not yet taken
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> int:
            size = 0
            for url in pending:
                async with session.get(url) as response:
                    response.raise_for_status()
                    async for chunk in response.content.iter_any():
                        size += len(chunk)
            return size

        started = time.perf_counter()
        sizes = await asyncio.gather(*(worker() for _ in range(connections)))
        return time.perf_counter() - started, sum(sizes)


def decode_all(files: Sequence[tuple[Path, bool]], workers: int = 2) -> tuple[float, int]:
    """Wall time and total records of decoding ``(path, is_root)`` files on warm workers."""
    context = multiprocessing.get_context("forkserver")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        for future in [pool.submit(_ready) for _ in range(workers)]:
            future.result()
        ordered = sorted(files, key=lambda f: f[0].stat().st_size, reverse=True)
        started = time.perf_counter()
        futures = [pool.submit(decode_file, str(path), is_root) for path, is_root in ordered]
        records = sum(f.result() for f in futures)
        return time.perf_counter() - started, records


def measure_floor(
    urls: Sequence[str], files: Sequence[tuple[Path, bool]], workers: int = 2
) -> FloorFigures:
    """Download ``urls`` (the served copies of ``files``), then decode ``files``."""
    download_seconds, size = asyncio.run(download_all(urls))
    decode_seconds, records = decode_all(files, workers)
    return FloorFigures(len(urls), size, records, download_seconds, decode_seconds, workers)
