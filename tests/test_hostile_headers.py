"""Answers no well-behaved HTTP server library would send: raw bytes in headers, a ``HEAD``
answered with a body, a body longer than its ``Content-Length``.

aiohttp's own server refuses to write such answers, so these tests serve the mirror from a
small HTTP/1.1 server written on ``asyncio.start_server``, on loopback, that writes its answers
byte for byte. The crawler runs in-process (``main_async``), as in ``test_faults.py``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async

from .conftest import SleepRecorder, fast_config, tree_bytes

SPECS = (
    SynthSpec("zlib", "1.3.1", stacks=("s1",)),
    SynthSpec("hdf5", "1.14.3", stacks=("s1", "s2")),
)


@dataclass
class RawServer:
    """Serves the files under ``root`` (GET and HEAD, keep-alive), each with an ETag derived
    from its bytes, honouring ``If-None-Match``. ``script(path, answer)`` replaces the next
    answer for ``path`` with raw bytes: ``{body}`` in them stands for the file's bytes and
    ``{length}`` for their number."""

    root: Path
    port: int = 0
    scripts: dict[str, list[bytes]] = field(default_factory=dict)
    #: (method, path, If-None-Match as raw bytes or None) of every request, in order.
    requests: list[tuple[str, str, bytes | None]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def script(self, path: str, answer: bytes) -> None:
        self.scripts.setdefault(path, []).append(answer)

    def sent(self, path: str) -> list[bytes | None]:
        """The If-None-Match of each GET of ``path``."""
        return [inm for method, p, inm in self.requests if method == "GET" and p == path]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.split(b"\r\n")
                method, target, _ = lines[0].decode().split(" ", 2)
                headers = dict(line.split(b": ", 1) for line in lines[1:] if b": " in line)
                path = target.lstrip("/")
                self.requests.append((method, path, headers.get(b"If-None-Match")))
                writer.write(self.answer(method, path, headers.get(b"If-None-Match")))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def answer(self, method: str, path: str, inm: bytes | None) -> bytes:
        file = self.root / path
        if not file.is_file():
            return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
        body = file.read_bytes()
        if self.scripts.get(path):
            raw = self.scripts[path].pop(0)
            raw = raw.replace(b"{length}", str(len(body)).encode())
            return raw.replace(b"{body}", body)
        etag = b'"' + hashlib.sha256(body).hexdigest()[:16].encode() + b'"'
        if inm == etag:
            return b"HTTP/1.1 304 Not Modified\r\nETag: " + etag + b"\r\n\r\n"
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nETag: %s\r\n\r\n" % (len(body), etag)
        return head if method == "HEAD" else head + body


@dataclass
class Site:
    server: RawServer
    discovery: dict[str, list[dict[str, str]]]
    config: Path
    out: Path
    sleep: SleepRecorder = field(default_factory=SleepRecorder)

    def path(self, label: str) -> str:
        url = next(e["url"] for e in self.discovery["develop"] if e["label"] == label)
        return url.removeprefix("s3://spack-binaries/")

    async def sync(self, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
        capsys.readouterr()
        argv = ["sync", "--branch", "develop", "--config", str(self.config), "-q"]
        code = await main_async(argv, sleep=self.sleep)
        return code, capsys.readouterr().err

    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(
            (self.out / ".crawler" / "reports" / "develop.json").read_bytes()
        )
        return data

    def source(self, label: str) -> dict[str, Any]:
        found: dict[str, Any] = next(s for s in self.report()["sources"] if s["label"] == label)
        return found


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    """Ref ``develop`` (v2: root, s1, s2) served by a :class:`RawServer`, published once."""
    mirror = tmp_path / "mirror"
    discovery = build_mirror(mirror, [SynthRef("develop", SPECS)])
    server = RawServer(mirror)
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    server.port = listening.sockets[0].getsockname()[1]
    config = tmp_path / "crawler.yaml"
    out = tmp_path / "out"
    config.write_text(yaml.safe_dump(fast_config(server.url, out)))
    try:
        yield Site(server, discovery, config, out)
    finally:
        listening.close()
        await listening.wait_closed()


@pytest.mark.parametrize(
    "etag", [b'"a\x1b[31mb\x01"', b'"caf\xe9"'], ids=["control-characters", "not-utf-8"]
)
async def test_an_etag_that_cannot_be_sent_back_is_dropped(
    site: Site, capsys: pytest.CaptureFixture[str], etag: bytes
) -> None:
    """An ETag with control characters cannot be sent in If-None-Match (aiohttp refuses the
    header), and one with a byte that is not UTF-8 cannot be saved in the branch's state
    (JSON holds no such string). Kept, the first failed every later run of the branch with an
    internal error, even once the server was mended; the second crashed the run (exit 1). Both
    are now dropped, as if the server had sent no ETag."""
    assert (await site.sync(capsys))[0] == 0
    before = tree_bytes(site.out / "develop")
    s1 = site.path("s1")
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nETag: " + etag + b"\r\n\r\n{body}"
    site.server.script(s1, answer)

    assert (await site.sync(capsys))[0] == 6
    assert (await site.sync(capsys))[0] == 6

    assert etag not in site.server.sent(s1)  # the dropped ETag is never sent back
    assert site.source("s1")["status"] == "unchanged"  # the sidecar vouches instead
    assert tree_bytes(site.out / "develop") == before


async def test_a_redirect_to_bytes_that_are_not_utf_8_fails_the_source_readably(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Location with a byte that is not UTF-8 and an escape sequence: the source fails (the
    redirect is not followed) with the bytes escaped in the message, on the terminal and in
    the report. It used to crash the run (exit 1) while writing the report."""
    assert (await site.sync(capsys))[0] == 0
    before = tree_bytes(site.out / "develop")
    location = b"http://elsewhere.example/caf\xe9\x1b[2J"
    for _ in range(3):
        site.server.script(
            site.path("root"),
            b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n",
        )

    code, err = await site.sync(capsys)

    assert code == 4
    shown = r"redirect to http://elsewhere.example/caf\xe9\x1b[2J not followed"
    assert shown in err
    assert "\x1b" not in err
    assert shown in site.source("root")["error"]
    assert tree_bytes(site.out / "develop") == before


async def test_stray_bytes_on_a_kept_alive_connection_are_retried(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    """An answer followed by stray bytes on its connection (here a body longer than its
    Content-Length; a HEAD answered with a body does the same) is an error to aiohttp ("Bad
    status line"), on this request or the next one the connection serves. It is tried again,
    on a new connection, rather than failing its source (exit 4) with the stray bytes quoted in
    the message."""
    assert (await site.sync(capsys))[0] == 0
    before = tree_bytes(site.out / "develop")
    junk = b"{" + b"x" * 5000 + b"}"
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n{body}" + junk
    site.server.script(site.path("s1"), answer)

    code, err = await site.sync(capsys)

    assert code == 6, err
    assert tree_bytes(site.out / "develop") == before


async def test_an_answer_that_never_parses_fails_with_a_short_message(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    """An answer that is not HTTP at all, every time: the source fails after its attempts,
    and the message quotes at most a few hundred characters of what the server sent."""
    assert (await site.sync(capsys))[0] == 0
    before = tree_bytes(site.out / "develop")
    for _ in range(3):
        site.server.script(site.path("root"), b"NOT HTTP " + b"x" * 5000 + b"\r\n\r\n")

    code, err = await site.sync(capsys)

    assert code == 4
    error = site.source("root")["error"]
    assert "after 3 attempts" in error
    assert "Bad status line" in error and "... (" in error
    assert len(error) < 1000
    assert "x" * 400 not in err
    assert tree_bytes(site.out / "develop") == before


async def test_a_utf_8_etag_is_sent_back(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """An ETag in UTF-8 is a valid one (aiohttp sends it back byte for byte): it is kept and
    revalidated, not dropped for the sidecar's word."""
    assert (await site.sync(capsys))[0] == 0
    s1 = site.path("s1")
    etag = '"caf\u00e9"'.encode()
    site.server.script(
        s1, b"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\nETag: " + etag + b"\r\n\r\n{body}"
    )
    assert (await site.sync(capsys))[0] == 6

    assert (await site.sync(capsys))[0] == 6

    assert site.server.sent(s1)[-1] == etag


async def test_an_unsupported_content_encoding_is_not_retried(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    """A body in an encoding aiohttp cannot undo (Brotli without its module) would come back
    the same: one request, and the source fails saying why."""
    assert (await site.sync(capsys))[0] == 0
    before = tree_bytes(site.out / "develop")
    s1 = site.path("s1")
    site.server.requests.clear()
    for _ in range(3):
        site.server.script(
            s1, b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc"
        )

    code, _ = await site.sync(capsys)

    assert code == 4
    assert len(site.server.sent(s1)) == 1
    assert "content-encoding" in site.source("s1")["error"].lower()
    assert tree_bytes(site.out / "develop") == before
