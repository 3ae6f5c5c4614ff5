"""A loopback HTTP server for a mirror folder, with optional latency and bandwidth shaping.

``python bench/server.py DIR [--port 0] [--latency-ms 50] [--bandwidth-mbps 50]`` serves the
files under ``DIR`` on ``127.0.0.1`` (never another interface) and prints one line,
``serving DIR at http://127.0.0.1:PORT``, then runs until interrupted. In-process::

    async with serve(Path("mirror"), latency_ms=50) as url:
        ...

Behaviour (documented choices):

* only regular files under ``DIR`` are served (``GET`` and ``HEAD``); anything else, including a
  path that resolves outside ``DIR`` through ``..`` or a symlink, is a 404;
* ``ETag`` is ``"<mtime_ns hex>-<size hex>"`` (nginx's and aiohttp's scheme: it changes when a
  file is rewritten); ``If-None-Match`` naming it (or ``*``, or a weak ``W/`` form) gets ``304``;
* ``--latency-ms``: every request waits that long before its status line (one round trip to the
  first byte, 304 and 404 answers included);
* ``--bandwidth-mbps``: each response body is written in chunks paced to that many megabytes
  (10^6 bytes) per second. HTTP/1.1 sends one response at a time per connection, so this caps
  each connection; parallel connections each get the full rate (like a per-flow limit).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

HOST = "127.0.0.1"
_CHUNK = 1 << 20  # unshaped: large writes, the fastest Python can push
_MIN_SHAPED_CHUNK = 16 << 10


@dataclass(frozen=True)
class Shaping:
    """Per-request latency (seconds) and per-connection bandwidth (bytes/s, None: unlimited)."""

    latency: float = 0.0
    bandwidth: float | None = None

    @classmethod
    def from_options(cls, latency_ms: float = 0.0, bandwidth_mbps: float | None = None) -> Shaping:
        """From the command-line units: milliseconds and megabytes per second."""
        if latency_ms < 0 or (bandwidth_mbps is not None and bandwidth_mbps <= 0):
            raise ValueError("latency must be >= 0 and bandwidth > 0")
        rate = bandwidth_mbps * 1e6 if bandwidth_mbps else None
        return cls(latency_ms / 1000.0, rate)


def etag_of(stat: os.stat_result) -> str:
    """The strong ETag of a file with this ``stat``."""
    return f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'


def etag_matches(header: str | None, etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``etag`` (weak comparison, as RFC 9110 asks)."""
    if not header:
        return False
    for item in header.split(","):
        tag = item.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False


class MirrorHandler:
    """Serves one folder with one :class:`Shaping`."""

    def __init__(self, root: Path, shaping: Shaping) -> None:
        self.root = root.resolve()
        self.shaping = shaping
        self.requests = 0

    def _file(self, path: str) -> Path | None:
        candidate = (self.root / path.lstrip("/")).resolve()
        if candidate != self.root and self.root not in candidate.parents:
            return None
        return candidate if candidate.is_file() else None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Answer one ``GET``/``HEAD``: 404, 304 or the file (paced when shaped)."""
        self.requests += 1
        if self.shaping.latency:
            await asyncio.sleep(self.shaping.latency)
        file = self._file(request.match_info["tail"])
        if file is None:
            return web.Response(status=404, text="not found\n")
        stat = file.stat()
        etag = etag_of(stat)
        if etag_matches(request.headers.get("If-None-Match"), etag):
            return web.Response(status=304, headers={"ETag": etag})
        response = web.StreamResponse(headers={"ETag": etag, "Content-Type": _type(file)})
        response.content_length = stat.st_size
        await response.prepare(request)
        if request.method != "HEAD":
            await self._send(response, file)
        await response.write_eof()
        return response

    async def _send(self, response: web.StreamResponse, file: Path) -> None:
        rate = self.shaping.bandwidth
        # ~100 paced writes a second keep the rate smooth without busy-looping.
        chunk = _CHUNK if rate is None else max(_MIN_SHAPED_CHUNK, min(_CHUNK, int(rate / 100)))
        started = time.monotonic()
        sent = 0
        with file.open("rb") as src:  # page-cached reads; a thread hop per chunk costs more
            while data := src.read(chunk):
                sent += len(data)
                if rate is not None:
                    # A chunk leaves only once the rate allows all bytes up to its end, so no
                    # client ever receives more than rate x elapsed time.
                    early = started + sent / rate - time.monotonic()
                    if early > 0:
                        await asyncio.sleep(early)
                await response.write(data)


def _type(file: Path) -> str:
    return "application/json" if file.suffix == ".json" else "application/octet-stream"


def make_app(root: Path, shaping: Shaping) -> web.Application:
    """The aiohttp application serving ``root``."""
    handler = MirrorHandler(root, shaping)
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler.handle)  # HEAD is routed here too
    return app


@contextlib.asynccontextmanager
async def serve(
    root: Path, *, latency_ms: float = 0.0, bandwidth_mbps: float | None = None, port: int = 0
) -> AsyncIterator[str]:
    """Serve ``root`` on 127.0.0.1 in the running loop; yields the base URL (no trailing /)."""
    if not root.is_dir():
        raise NotADirectoryError(root)
    app = make_app(root, Shaping.from_options(latency_ms, bandwidth_mbps))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))  # bound here so that an ephemeral port is known
        site = web.SockSite(runner, sock)
        await site.start()
        yield f"http://{HOST}:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()
        sock.close()


class ServerProcess:
    """``bench/server.py`` running as a child process (its CPU time is not the client's)."""

    def __init__(self, process: subprocess.Popen[str], url: str) -> None:
        self.process = process
        self.url = url

    @classmethod
    def start(
        cls,
        root: Path,
        *,
        latency_ms: float = 0.0,
        bandwidth_mbps: float | None = None,
        python: str = sys.executable,
    ) -> ServerProcess:
        """Start the server and wait for the line announcing its URL."""
        argv = [python, str(Path(__file__).resolve()), str(root), "--port", "0"]
        argv += ["--latency-ms", str(latency_ms)]
        if bandwidth_mbps is not None:
            argv += ["--bandwidth-mbps", str(bandwidth_mbps)]
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert process.stdout is not None
        line = process.stdout.readline()
        if " at http://" not in line:
            process.kill()
            process.wait()
            raise RuntimeError(f"bench server did not start: {line!r}")
        return cls(process, line.rsplit(" at ", 1)[1].strip())

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def _run(root: Path, args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with serve(
        root, latency_ms=args.latency_ms, bandwidth_mbps=args.bandwidth_mbps, port=args.port
    ) as url:
        print(f"serving {root} at {url}", flush=True)
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="Serve a mirror folder on 127.0.0.1.")
    parser.add_argument("root", type=Path, help="mirror folder")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (default)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before each answer")
    parser.add_argument(
        "--bandwidth-mbps", type=float, default=None, help="MB/s (10^6 bytes) per connection"
    )
    args = parser.parse_args(argv)
    if not args.root.is_dir():
        parser.error(f"{args.root} is not a folder")
    asyncio.run(_run(args.root.resolve(), args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
