"""A root index decoded while it downloads gives what decoding it afterwards gives.

:mod:`crawler.decode.progressive` cuts a downloading root into parts and decodes each as soon as it
is on disk. Here the download reports progress every few KB and parts are a few KB, so a small
synthetic root is cut into many parts mid-download (the tests check that it was), and the
published index must equal the one a sync of the same mirror from a local folder publishes
(local files are read in place, never progressively). A download that starts over abandons its
parts: the first attempt serves other bytes, which must not reach the output.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from bench.synth import SynthRef, build_mirror, generate_specs, index_document
from crawler.build import consolidate
from crawler.build.consolidate import Consolidator
from crawler.build.locations import Caches
from crawler.cli.command import main, main_async
from crawler.decode import chunks, progressive
from crawler.decode.pool import DecodePool
from crawler.decode.progressive import RootParts
from crawler.decode.root import merge_root
from crawler.decode.validate import SourceSummary
from crawler.mirror.http import HTTPTransport
from crawler.sync import decoding

from .conftest import fast_config
from .schema import assert_valid_index

SPECS = tuple(generate_specs(11, 120, stacks=("e4s", "ml")))


@pytest.fixture
def parts_seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[Any]]]:
    """Small writes and parts, and a record of what RootParts did in this process."""
    monkeypatch.setattr(HTTPTransport, "write_batch", 4096)
    monkeypatch.setattr(progressive, "PART_BYTES", 6000)
    seen: dict[str, list[Any]] = {"written": [], "submitted": [], "complete": [], "abandoned": []}
    original_written, original_complete = RootParts.written, RootParts.complete
    original_abandon = RootParts.abandon

    def submitted(self: RootParts, before: int) -> None:
        """The parts submitted since there were ``before``, with the size written then."""
        now = seen["written"][-1] if seen["written"] else 0
        seen["submitted"] += [(start, stop, now) for start, stop in self.ranges[before:]]

    def written(self: RootParts, size: int) -> None:
        seen["written"].append(size)
        before = len(self.ranges)
        original_written(self, size)
        submitted(self, before)

    def complete(self: RootParts, size: int) -> bool:
        before = len(self.ranges)
        usable = original_complete(self, size)
        submitted(self, before)
        seen["complete"].append(usable)
        return usable

    def abandon(self: RootParts) -> None:
        seen["abandoned"].append(self.usable)
        original_abandon(self)

    monkeypatch.setattr(RootParts, "written", written)
    monkeypatch.setattr(RootParts, "complete", complete)
    monkeypatch.setattr(RootParts, "abandon", abandon)
    yield seen


async def _trickling(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
    root: Path,
    broken: dict[str, bytes] | None = None,
) -> str:
    """A loopback server that sends each file 8 KB at a time, as a slow link would, so that
    the download reports progress many times. The first request for a path in ``broken`` gets
    those bytes instead, announced whole but cut off after two thirds."""
    broken = dict(broken or {})

    async def handle(request: web.Request) -> web.StreamResponse:
        tail = request.match_info["tail"]
        file = root / tail
        if not file.is_file():
            return web.Response(status=404)
        data = broken.pop(tail, None)
        cut = None if data is None else len(data) * 2 // 3
        data = file.read_bytes() if data is None else data
        response = web.StreamResponse(headers={"Content-Length": str(len(data))})
        await response.prepare(request)
        for at in range(0, cut or len(data), 8192):
            await response.write(data[at : min(at + 8192, cut or len(data))])
            await asyncio.sleep(0.002)
        if cut is not None:
            assert request.transport is not None
            request.transport.close()
        return response

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


async def _sync(mirror: str, out: Path, tmp_path: Path) -> dict[str, Any]:
    config = tmp_path / f"{out.name}.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror, out, decode_workers=2)))
    assert await main_async(["sync", "--branch", "develop", "--config", str(config), "-q"]) == 0
    return assert_valid_index(out / "develop" / "index.json")


def _content(index: dict[str, Any]) -> dict[str, Any]:
    """What an index says about the mirror's content (not where the mirror was)."""
    sources = [{k: v for k, v in s.items() if k != "url"} for s in index["sources"]]
    return {"packages": index["packages"], "stats": index["stats"], "sources": sources}


@pytest.mark.slow
async def test_a_root_decoded_while_it_downloads_equals_one_read_from_disk(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
    tmp_path: Path,
    parts_seen: dict[str, list[Any]],
) -> None:
    mirror = tmp_path / "mirror"
    build_mirror(mirror, [SynthRef("develop", SPECS)])
    url = await _trickling(aiohttp_server, mirror)

    over_http = await _sync(url, tmp_path / "http", tmp_path)
    size = over_http["sources"][0]["bytes"]
    submitted = parts_seen["submitted"]
    # Really cut into parts, most of them before the download ended, and used.
    assert len(submitted) > 5
    assert sum(1 for _, _, written in submitted if written < size) > 3
    assert parts_seen["complete"] == [True]
    assert all(
        after == stop + 1 for (_, stop, _), (after, _, _) in itertools.pairwise(submitted)
    )  # the parts follow each other, a separating comma apart

    from_disk = await _sync(mirror.as_uri(), tmp_path / "disk", tmp_path)
    assert parts_seen["complete"] == [True]  # the local sync did not cut anything
    assert _content(over_http) == _content(from_disk)
    assert over_http["stats"]["specs"] == len(SPECS)


@pytest.mark.slow
async def test_a_download_that_starts_over_abandons_its_parts(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
    tmp_path: Path,
    parts_seen: dict[str, list[Any]],
) -> None:
    """The first attempt sends most of another root, then breaks off; the retry sends the
    real one. Parts cut from the first attempt's bytes must not reach the output."""
    mirror = tmp_path / "mirror"
    discovery = build_mirror(mirror, [SynthRef("develop", SPECS)])
    other = index_document(list(generate_specs(99, 120, stacks=("e4s", "ml"))), 8)
    root = "develop/build_cache/index.json"
    assert discovery["develop"][0]["url"].endswith(root)
    url = await _trickling(aiohttp_server, mirror, {root: other})

    over_http = await _sync(url, tmp_path / "http", tmp_path)
    assert parts_seen["submitted"], "the first attempt was cut into parts"
    assert parts_seen["abandoned"][0] is True  # abandoned while usable: by the retry
    assert parts_seen["complete"] == [False]
    report = json.loads((tmp_path / "http" / "develop" / "report.json").read_bytes())
    assert report["sources"][0]["attempts"] == 2

    from_disk = await _sync(mirror.as_uri(), tmp_path / "disk", tmp_path)
    assert _content(over_http) == _content(from_disk)
    names = {spec.name for spec in SPECS}
    assert set(over_http["packages"]) == names


def test_a_file_without_boundaries_is_searched_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a download grows, each search for a cut resumes where the last one gave up: a root
    without record boundaries (one huge record) is not scanned again at every write."""
    monkeypatch.setattr(progressive, "PART_BYTES", 1000)
    searched: list[tuple[int, int]] = []
    cut_after = chunks.cut_after

    def spy(fd: int, offset: int, limit: int) -> int | None:
        searched.append((offset, limit))
        return cut_after(fd, offset, limit)

    monkeypatch.setattr(chunks, "cut_after", spy)
    path = tmp_path / "index.json"
    head = b'{"database": {"version": "8", "installs": {"' + b"a" * 32 + b'": {"x": "'
    parts = RootParts(DecodePool(1), path, "u")
    with path.open("wb") as out:
        out.write(head)
        parts.written(0)
        for _ in range(50):
            out.write(b"y" * 100_000)
            out.flush()
            parts.written(out.tell())
        size = out.tell()
    assert len(searched) == 50
    scanned = sum(limit - offset for offset, limit in searched)
    assert scanned < size + 50 * chunks.OVERLAP  # linear, not 50 times the file
    parts.abandon()


def test_a_warm_sync_of_a_local_mirror_starts_no_decoding_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror = tmp_path / "mirror"
    build_mirror(mirror, [SynthRef("develop", SPECS)])
    started: list[DecodePool] = []
    start = DecodePool.start

    def count(self: DecodePool) -> None:
        if not self.started:
            started.append(self)
        start(self)

    monkeypatch.setattr(DecodePool, "start", count)
    config = tmp_path / "local.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror.as_uri(), tmp_path / "out")))
    argv = ["sync", "--branch", "develop", "--config", str(config), "-q"]
    assert main(argv) == 0
    assert len(started) == 1
    assert main(argv) == 6  # unchanged
    assert len(started) == 1


def test_decoding_processes_stop_before_the_output_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workers are idle once every source of a branch is read, but hold their memory: they
    are stopped before the branch's output is built (when the main process peaks), and the next
    branch starts new ones."""
    mirror = tmp_path / "mirror"
    build_mirror(mirror, [SynthRef("develop", SPECS), SynthRef("v1.0", SPECS[:5])])
    events: list[str] = []
    start, close, finish = DecodePool.start, DecodePool.close, Consolidator.finish

    def starting(self: DecodePool) -> None:
        if not self.started:
            events.append("start")
        start(self)

    def closing(self: DecodePool) -> None:
        if self.started:
            events.append("close")
        close(self)

    def finishing(self: Consolidator, root: SourceSummary, caches: Caches) -> tuple[object, object]:
        events.append("finish")
        return finish(self, root, caches)

    monkeypatch.setattr(DecodePool, "start", starting)
    monkeypatch.setattr(DecodePool, "close", closing)
    monkeypatch.setattr(Consolidator, "finish", finishing)
    config = tmp_path / "local.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror.as_uri(), tmp_path / "out")))
    assert main(["sync", "--all", "--config", str(config), "-q"]) == 0
    assert events == ["start", "close", "finish"] * 2


async def test_the_root_is_merged_and_prepared_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Joining a develop root's parts and preparing its consolidation take tenths of a second:
    on the event loop, the decoding workers would sit idle meanwhile, with stacks still queued
    for them. Both run in a thread; the result is the same (the other tests here)."""
    loop_thread = threading.get_ident()
    ran: list[tuple[str, bool]] = []

    def recorded(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            ran.append((fn.__name__, threading.get_ident() == loop_thread))
            return fn(*args)

        return run

    monkeypatch.setattr(decoding, "merge_root", recorded(merge_root))
    monkeypatch.setattr(consolidate, "prepare_root", recorded(consolidate.prepare_root))
    mirror = tmp_path / "mirror"
    build_mirror(mirror, [SynthRef("develop", SPECS)])

    index = await _sync(mirror.as_uri(), tmp_path / "out", tmp_path)

    assert index["stats"]["specs"] == len(SPECS)
    assert ran == [("merge_root", False), ("prepare_root", False)]
