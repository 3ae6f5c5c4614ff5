"""Fault injection over loopback HTTP: what a user sees when the mirror misbehaves.

Each test builds a small synthetic mirror, serves it with ``mirror_server``, scripts faults on
exact URL paths and runs ``crawler sync`` in-process (``main_async``). Retry waits are recorded
by a fake ``sleep`` instead of slept, so nothing here waits on a backoff.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import email.utils
import gzip
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async
from crawler.config import Config
from crawler.mirror.fetch import Fetcher

from .conftest import Fault, MirrorServer, ServeMirror, SleepRecorder, fast_config, tree_bytes

BUCKET = "s3://spack-binaries/"
Discovery = dict[str, list[dict[str, str]]]

SPECS = (
    SynthSpec("zlib", "1.3.1", stacks=("s1",)),
    SynthSpec("hdf5", "1.14.3", variants=(("mpi", True),), stacks=("s1", "s2")),
    SynthSpec("py-numpy", "2.0.0", compiler=None, stacks=("s2",)),
)
#: The next state of the mirror: one more spec, in every index, so every checksum changes.
NEXT_SPECS = (*SPECS, SynthSpec("cmake", "3.30.5", stacks=("s1", "s2")))


@dataclass
class Scenario:
    """A served mirror, a config file pointing at it, and the output folder."""

    server: MirrorServer
    refs: tuple[SynthRef, ...]
    discovery: Discovery
    config: Path
    out: Path
    sleep: SleepRecorder = field(default_factory=SleepRecorder)

    def listed(self, ref: str, label: str = "root") -> str:
        """The source URL as the discovery document lists it."""
        return next(e["url"] for e in self.discovery[ref] if e["label"] == label)

    def path(self, ref: str, label: str = "root") -> str:
        """The URL path (relative to the mirror) the source is fetched from."""
        return self.listed(ref, label).removeprefix(BUCKET)

    def location(self, ref: str, label: str = "root") -> str:
        """The full http:// URL the source is fetched from."""
        return f"{self.server.url}/{self.path(ref, label)}"

    async def sync(self, *branches: str, all_refs: bool = False) -> int:
        """``crawler sync -q`` of the branches; returns the exit code."""
        argv = ["sync", "--config", str(self.config), "-q"]
        argv += ["--all"] if all_refs else [f"--branch={b}" for b in branches]
        return await main_async(argv, sleep=self.sleep)

    def report(self, branch: str) -> dict[str, Any]:
        """The report of the latest attempt at ``branch``."""
        data: dict[str, Any] = json.loads(
            (self.out / ".crawler" / "reports" / f"{branch}.json").read_bytes()
        )
        return data

    def source_report(self, branch: str, label: str = "root") -> dict[str, Any]:
        """One source's entry in the latest report of ``branch``."""
        entry: dict[str, Any] = next(
            s for s in self.report(branch)["sources"] if s["label"] == label
        )
        return entry

    async def publish_then_update(self, branch: str) -> dict[str, bytes]:
        """Sync ``branch`` cleanly, then move the mirror on to new content (so that the next
        sync has to download every index again) and forget the requests seen so far.

        Returns the published files, which a failing sync must leave as they are.
        """
        assert await self.sync(branch) == 0
        before = tree_bytes(self.out / branch)
        assert "index.json" in before
        self.refs = tuple(
            SynthRef(r.name, NEXT_SPECS, r.db_version, r.layout, r.extra_stacks) for r in self.refs
        )
        shutil.rmtree(self.server.root)
        self.discovery = build_mirror(self.server.root, self.refs)
        self.server.requests.clear()
        self.sleep.waits.clear()
        return before


async def serve(
    mirror_server: ServeMirror,
    tmp_path: Path,
    refs: tuple[SynthRef, ...],
    discovery: Discovery | None = None,
    **config: object,
) -> Scenario:
    """Build ``refs`` under ``tmp_path/mirror`` (optionally replacing the discovery document),
    serve it and write a fast config for it."""
    root = tmp_path / "mirror"
    built = build_mirror(root, refs)
    if discovery is not None:
        built = discovery
        (root / "cache_spack_io_index.json").write_text(json.dumps(discovery))
    server = await mirror_server(root)
    out = tmp_path / "out"
    path = tmp_path / "crawler.yaml"
    # every ref is re-synced on each run (by default only develop is; the others are immutable)
    settings = fast_config(server.url, out, **{"mutable_refs": ["*"], **config})
    path.write_text(yaml.safe_dump(settings))
    return Scenario(server, refs, built, path, out)


def v2_ref(name: str = "a", **kwargs: Any) -> SynthRef:
    """A DB 8 ref in the v2 layout with stacks ``s1`` and ``s2``."""
    return SynthRef(name, SPECS, layout="v2", **kwargs)


def v3_ref(name: str = "b", **kwargs: Any) -> SynthRef:
    """A DB 8 ref in the v3 layout with stacks ``s1`` and ``s2``."""
    return SynthRef(name, SPECS, layout="v3", **kwargs)


def error_of(scenario: Scenario, branch: str) -> str:
    """The ``error`` of the branch's latest report (it must be a failure)."""
    report = scenario.report(branch)
    assert report["status"] == "failed"
    error = report["error"]
    assert isinstance(error, str)
    return error


# --- transient failures that end well -------------------------------------------------------


async def test_503_then_success_is_retried_once(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    sc.server.script(sc.path("a"), Fault(503))

    assert await sc.sync("a") == 0

    assert capsys.readouterr().err == ""
    root = json.loads((sc.out / "a" / "report.json").read_bytes())["sources"][0]
    assert (root["label"], root["status"], root["attempts"], root["retries"]) == (
        "root",
        "fetched",
        2,
        1,
    )
    assert sc.server.hits(sc.path("a")) == 2
    assert sc.sleep.waits == [0.0]


async def test_connection_reset_is_retried(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v3_ref(),))
    sc.server.script(sc.path("b", "s1"), Fault(reset=True))

    assert await sc.sync("b") == 0

    assert capsys.readouterr().err == ""
    # aiohttp itself may resend once on a reused keep-alive connection, so the crawler's own
    # attempt count is 1 or 2; the server must have seen the request twice either way.
    source = sc.source_report("b", "s1")
    assert source["status"] == "fetched"
    assert source["attempts"] == 1 + source["retries"]
    assert sc.server.hits(sc.path("b", "s1")) == 2


async def test_connection_reset_storm_fails_the_branch(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v3_ref(),))
    before = await sc.publish_then_update("b")
    # twice the attempts: aiohttp may resend once per attempt on a reused connection
    sc.server.script(sc.path("b", "s1"), *[Fault(reset=True)] * 6)

    assert await sc.sync("b") == 4

    err = capsys.readouterr().err
    message = f"s1: cannot fetch {sc.location('b', 's1')}: ServerDisconnectedError"
    assert message in error_of(sc, "b")
    assert "after 3 attempts" in error_of(sc, "b")
    assert message in err
    assert sc.server.hits(sc.path("b", "s1")) >= 3
    assert tree_bytes(sc.out / "b") == before


async def test_truncated_body_is_retried(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    sc.server.script(sc.path("a"), Fault(truncate=100))

    assert await sc.sync("a") == 0

    assert capsys.readouterr().err == ""
    root = sc.source_report("a")
    assert (root["status"], root["attempts"], root["retries"]) == ("fetched", 2, 1)
    assert root["bytes"] == (sc.server.root / sc.path("a")).stat().st_size


@pytest.mark.parametrize(("max_wait", "expected"), [(30, 7.0), (2.5, 2.5)])
async def test_429_honours_retry_after_capped_by_max_wait(
    mirror_server: ServeMirror,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    max_wait: float,
    expected: float,
) -> None:
    retry = {"attempts": 3, "backoff": 0, "max_wait": max_wait}
    sc = await serve(mirror_server, tmp_path, (v2_ref(),), retry=retry)
    sc.server.script(sc.path("a", "s2"), Fault(429, headers={"Retry-After": "7"}))

    assert await sc.sync("a") == 0

    assert sc.sleep.waits == [expected]
    assert capsys.readouterr().err == ""
    assert sc.source_report("a", "s2")["retries"] == 1


async def test_retry_after_as_http_date_is_capped(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    retry = {"attempts": 3, "backoff": 0, "max_wait": 4}
    sc = await serve(mirror_server, tmp_path, (v2_ref(),), retry=retry)
    later = email.utils.formatdate(time.time() + 3600, usegmt=True)
    sc.server.script(sc.path("a"), Fault(503, headers={"Retry-After": later}))

    assert await sc.sync("a") == 0

    assert sc.sleep.waits == [4.0]


@pytest.mark.parametrize("value", ["\u00b2", "soon", "-3"])
async def test_a_retry_after_that_is_no_number_of_seconds_nor_a_date_is_ignored(
    mirror_server: ServeMirror, tmp_path: Path, value: str
) -> None:
    """Such a value leaves the wait to the backoff (none in these tests). "\u00b2" (a
    superscript two) passes str.isdigit() but not float(): it crashed the source."""
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    sc.server.script(sc.path("a", "s1"), Fault(503, headers={"Retry-After": value}))

    assert await sc.sync("a") == 0

    assert sc.source_report("a", "s1")["retries"] == 1


# --- failures that fail the branch and keep its previous output -----------------------------


async def test_500_storm_outlasting_retries_fails_the_branch(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    before = await sc.publish_then_update("a")
    sc.server.script(sc.path("a"), *[Fault(500)] * 3)

    assert await sc.sync("a") == 4

    err = capsys.readouterr().err
    message = f"cannot fetch {sc.location('a')}: HTTP 500 after 3 attempts"
    assert message in error_of(sc, "a")
    assert message in err
    assert "error: 1 branch(es) failed: a" in err
    assert sc.server.hits(sc.path("a")) == 3
    assert sc.source_report("a")["status"] == "failed"
    assert tree_bytes(sc.out / "a") == before


async def test_404_root_fails_the_branch(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v3_ref(),))
    before = await sc.publish_then_update("b")
    sc.server.script(sc.path("b"), Fault(404))

    assert await sc.sync("b") == 4

    err = capsys.readouterr().err
    assert f"root index not found at {sc.location('b')}" in error_of(sc, "b")
    assert "root index not found" in err
    assert sc.server.hits(sc.path("b")) == 1  # a 404 is never retried
    assert tree_bytes(sc.out / "b") == before


async def test_404_stack_is_missing_and_the_branch_publishes(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(extra_stacks=("gone",)),))
    sc.server.script(sc.path("a", "s1"), Fault(404))

    assert await sc.sync("a") == 0

    assert capsys.readouterr().err == ""
    report = json.loads((sc.out / "a" / "report.json").read_bytes())
    assert report["status"] == "published"
    assert sorted(report["missing_stacks"]) == ["gone", "s1"]
    index = json.loads((sc.out / "a" / "index.json").read_bytes())
    statuses = {s["label"]: s["status"] for s in index["sources"]}
    assert statuses == {"root": "ok", "s1": "missing", "s2": "ok", "gone": "missing"}
    assert index["stats"]["sources_missing"] == 2
    assert sc.server.hits(sc.path("a", "s1")) == 1


async def test_403_on_a_stack_is_not_retried(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v3_ref(),))
    before = await sc.publish_then_update("b")
    sc.server.script(sc.path("b", "s2"), *[Fault(403)] * 3)

    assert await sc.sync("b") == 4

    err = capsys.readouterr().err
    assert sc.server.hits(sc.path("b", "s2")) == 1
    message = f"s2: cannot fetch {sc.location('b', 's2')}: HTTP 403"
    assert message in error_of(sc, "b")
    assert "after" not in sc.source_report("b", "s2")["error"]
    assert "HTTP 403" in err
    assert tree_bytes(sc.out / "b") == before


async def test_truncated_body_on_every_attempt_fails(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    before = await sc.publish_then_update("a")
    sc.server.script(sc.path("a", "s1"), *[Fault(truncate=100)] * 3)

    assert await sc.sync("a") == 4

    err = capsys.readouterr().err
    error = error_of(sc, "a")
    assert f"s1: cannot fetch {sc.location('a', 's1')}: body cut short" in error
    assert "after 3 attempts" in error
    assert "body cut short" in err
    assert sc.server.hits(sc.path("a", "s1")) == 3
    assert tree_bytes(sc.out / "a") == before


@pytest.mark.slow
async def test_stall_after_headers_times_out_and_is_retried(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timeouts = {"connect": 2, "read": 0.3, "source": 20}
    sc = await serve(mirror_server, tmp_path, (v2_ref(),), timeouts=timeouts)
    before = await sc.publish_then_update("a")
    sc.server.script(sc.path("a"), *[Fault(stall=5)] * 3)

    started = time.monotonic()
    assert await sc.sync("a") == 4
    elapsed = time.monotonic() - started

    assert elapsed < 3.0, f"three 0.3 s read timeouts took {elapsed:.1f}s"
    err = capsys.readouterr().err
    assert f"cannot fetch {sc.location('a')}: timed out after 3 attempts" in error_of(sc, "a")
    assert "timed out" in err
    assert sc.server.hits(sc.path("a")) == 3
    assert tree_bytes(sc.out / "a") == before


async def test_200_with_truncated_json_is_not_retried(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    before = await sc.publish_then_update("a")
    valid = (sc.server.root / sc.path("a")).read_bytes()
    sc.server.script(sc.path("a"), *[Fault(body=valid[: len(valid) // 2])] * 3)

    assert await sc.sync("a") == 4

    err = capsys.readouterr().err
    error = error_of(sc, "a")
    assert sc.location("a") in error
    assert "truncated" in error
    assert "truncated" in err
    assert sc.server.hits(sc.path("a")) == 1
    assert tree_bytes(sc.out / "a") == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("body", "problem"),
    [
        pytest.param(b"<html>Access Denied</html>", "not valid JSON", id="not-json"),
        pytest.param(b"", "empty body", id="empty"),
        pytest.param(b'{"foo": 1}', "not a Spack database index", id="not-a-database"),
        pytest.param(
            b'{"database": {"version": "5", "installs": {}}}',
            "unsupported database version '5'",
            id="version-5",
        ),
        pytest.param(
            b'{"database": {"version": 8, "installs": {}}}',
            "unsupported database version 8 (a number, not a string; "
            "supported: '6', '7', '8', '9')",
            id="version-int",
        ),
        pytest.param(
            b'{"database": {"version": "8"}}',
            "not a Spack database index: Object missing required field `installs`",
            id="no-installs",
        ),
        pytest.param(b"[1, 2]", "not a Spack database index", id="list"),
    ],
)
async def test_bad_index_body_fails_the_source(
    mirror_server: ServeMirror,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    body: bytes,
    problem: str,
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    before = await sc.publish_then_update("a")
    sc.server.script(sc.path("a", "s2"), *[Fault(body=body)] * 3)

    assert await sc.sync("a") == 4

    err = capsys.readouterr().err
    error = error_of(sc, "a")
    assert f"s2: bad document at {sc.location('a', 's2')}: {problem}" in error
    assert problem in err
    assert sc.server.hits(sc.path("a", "s2")) == 1
    assert tree_bytes(sc.out / "a") == before


async def test_v3_blob_with_wrong_checksum_fails(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v3_ref(),))
    before = await sc.publish_then_update("b")
    other = (sc.server.root / sc.path("b", "s2")).read_bytes()
    sc.server.script(sc.path("b", "s1"), Fault(body=other))

    assert await sc.sync("b") == 4

    err = capsys.readouterr().err
    expected = sc.path("b", "s1").rsplit("/", 1)[1]
    actual = hashlib.sha256(other).hexdigest()
    assert f"sha256 is {actual}, expected {expected}" in error_of(sc, "b")
    assert f"cannot fetch {sc.location('b', 's1')}" in err
    assert tree_bytes(sc.out / "b") == before


@pytest.mark.parametrize("label", ["root", "s1"])
async def test_a_v3_blob_stored_gzipped_and_sent_with_a_content_encoding_is_read_as_stored(
    mirror_server: ServeMirror, tmp_path: Path, label: str
) -> None:
    """A blob stored gzipped with object metadata saying ``Content-Encoding: gzip`` (S3 sends
    it with every answer): its name is the checksum of the gzip bytes, which Spack's own client
    reads as they are. aiohttp undoes the encoding, so the first download does not match;
    asked for again as stored, it does, and is read (gunzipped) as any gzip index."""
    sc = await serve(mirror_server, tmp_path, (v3_ref(),))
    plain = sc.server.root / sc.path("b", label)
    packed = gzip.compress(plain.read_bytes(), mtime=0)
    name = hashlib.sha256(packed).hexdigest()
    url = (
        sc.listed("b", label)
        .replace(plain.name, name)
        .replace(f"/{plain.name[:2]}/", f"/{name[:2]}/")
    )
    (sc.server.root / url.removeprefix(BUCKET)).parent.mkdir(parents=True, exist_ok=True)
    (sc.server.root / url.removeprefix(BUCKET)).write_bytes(packed)
    for entry in sc.discovery["b"]:
        if entry["label"] == label:
            entry["url"] = url
    (sc.server.root / "cache_spack_io_index.json").write_text(json.dumps(sc.discovery))
    as_stored = Fault(body=packed, headers={"Content-Encoding": "gzip"})
    sc.server.script(sc.path("b", label), as_stored, as_stored)

    assert await sc.sync("b") == 0

    source = sc.source_report("b", label)
    assert (source["status"], source["sha256"], source["attempts"]) == ("fetched", name, 2)
    assert source["records"] == len(json.loads(plain.read_bytes())["database"]["installs"])
    published = json.loads((sc.out / "b" / "index.json").read_bytes())
    assert published["packages"]["zlib"]["spec_details"][0]["stacks"] == ["root", "s1"]
    # The second request asked for no encoding, and aiohttp did not undo the one that came.
    encodings = sc.server.encodings["/" + sc.path("b", label)]
    assert len(encodings) == 2 and encodings[0] != "identity" and encodings[1] == "identity"


async def test_a_v3_blob_sent_with_a_content_encoding_says_so_when_it_fails_its_checksum(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """Neither the body with its ``Content-Encoding`` undone nor the bytes as sent match the
    blob's name: the source fails, as for any other mismatch, and the message says both were
    tried, so that an operator can tell this case from a plain corrupt blob."""
    sc = await serve(mirror_server, tmp_path, (v3_ref(),))
    before = await sc.publish_then_update("b")
    other = gzip.compress((sc.server.root / sc.path("b", "s2")).read_bytes())
    wrong = Fault(body=other, headers={"Content-Encoding": "gzip"})
    sc.server.script(sc.path("b", "s1"), wrong, wrong)

    assert await sc.sync("b") == 4

    error = error_of(sc, "b")
    expected = sc.path("b", "s1").rsplit("/", 1)[1]
    as_sent = hashlib.sha256(other).hexdigest()
    decoded = hashlib.sha256(gzip.decompress(other)).hexdigest()
    assert (
        f"sha256 is {as_sent}, expected {expected} (of the bytes as sent with Content-Encoding"
        f" gzip; once that is undone, {decoded})"
    ) in error
    assert sc.server.hits(sc.path("b", "s1")) == 2
    assert tree_bytes(sc.out / "b") == before


# --- discovery document ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "problem"),
    [
        pytest.param(Fault(404), "is no build cache", id="404"),
        pytest.param(Fault(body=b"{oops"), "not valid JSON", id="not-json"),
        pytest.param(Fault(body=b"[]"), "not a discovery document", id="list"),
        pytest.param(
            Fault(body=b'{"a": [{"label": 1, "url": "x"}]}'),
            "not a discovery document",
            id="bad-entry",
        ),
    ],
)
async def test_unusable_discovery_document_exits_3(
    mirror_server: ServeMirror,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fault: Fault,
    problem: str,
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    before = await sc.publish_then_update("a")
    sc.server.script("cache_spack_io_index.json", fault)

    assert await sc.sync("a") == 3

    err = capsys.readouterr().err
    assert err.startswith("error: mirror unusable: ")
    assert f"{sc.server.url}/cache_spack_io_index.json" in err
    assert problem in err
    assert tree_bytes(sc.out / "a") == before


async def test_discovery_500_storm_exits_3(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    sc.server.script("cache_spack_io_index.json", *[Fault(500)] * 3)

    assert await sc.sync("a") == 3

    url = f"{sc.server.url}/cache_spack_io_index.json"
    assert f"cannot fetch {url}: HTTP 500 after 3 attempts" in capsys.readouterr().err
    assert not (sc.out / "a").exists()


async def test_ref_with_unusable_url_fails_alone(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refs = (v2_ref("a"), v3_ref("b"))
    discovery = build_mirror(tmp_path / "scratch", refs)
    weird = f"{BUCKET}b/weird/index.txt"
    discovery["b"].append({"label": "weird", "url": weird})
    sc = await serve(mirror_server, tmp_path, refs, discovery=discovery)

    assert await sc.sync("a", "b") == 4

    err = capsys.readouterr().err
    error = error_of(sc, "b")
    assert weird in error
    assert "neither .../build_cache/index.json nor .../blobs/sha256/<xx>/<sha256>" in error
    assert weird in err
    assert "error: 1 branch(es) failed: b" in err
    assert json.loads((sc.out / "a" / "report.json").read_bytes())["status"] == "published"
    assert not (sc.out / "b").exists()
    assert sc.server.hits("/b/build_cache/index.json") == 0


@pytest.mark.parametrize("evil", ["../evil", "..%2Fevil", ".hidden", "a/../../evil"])
async def test_unsafe_ref_in_discovery_is_reported_and_never_written(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str], evil: str
) -> None:
    refs = (v2_ref("a"),)
    discovery = build_mirror(tmp_path / "scratch", refs)
    discovery[evil] = [dict(e) for e in discovery["a"]]
    sc = await serve(mirror_server, tmp_path, refs, discovery=discovery)
    outside = {p for p in tmp_path.rglob("*") if sc.out not in (p, *p.parents)}

    # --all syncs what the mirror lists: an unusable ref is reported and skipped, not a
    # failure that would alert a cron job forever.
    assert await sc.sync(all_refs=True) == 0

    err = capsys.readouterr().err
    assert f"ref name {evil!r} is not a safe folder name" in err
    assert "WARNING" in err and "failed" not in err
    assert {p for p in tmp_path.rglob("*") if sc.out not in (p, *p.parents)} == outside
    assert sorted(p.name for p in sc.out.iterdir()) == [".crawler", "a"]
    assert sorted(p.name for p in (sc.out / ".crawler" / "reports").glob("*.json")) == ["a.json"]
    assert json.loads((sc.out / "a" / "report.json").read_bytes())["status"] == "published"


async def test_one_branch_failing_does_not_stop_another(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref("a"), v3_ref("b")))
    sc.server.script(sc.path("a"), Fault(404))

    assert await sc.sync("a", "b") == 4

    err = capsys.readouterr().err
    assert "error: 1 branch(es) failed: a" in err
    assert "root index not found" in error_of(sc, "a")
    assert not (sc.out / "a").exists()
    published = json.loads((sc.out / "b" / "report.json").read_bytes())
    assert published["status"] == "published"
    assert sc.report("b") == published


async def test_sidecar_disagreeing_with_index_is_reported_not_fatal(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    stale = "0" * 64
    sc.server.script(sc.path("a") + ".hash", Fault(body=stale.encode()))

    assert await sc.sync("a") == 0

    assert capsys.readouterr().err == ""
    root, s1 = sc.source_report("a", "root"), sc.source_report("a", "s1")
    assert (root["sidecar_sha256"], root["sidecar_matches"]) == (stale, False)
    assert (
        root["sha256"] == hashlib.sha256((sc.server.root / sc.path("a")).read_bytes()).hexdigest()
    )
    assert (s1["sidecar_sha256"], s1["sidecar_matches"]) == (s1["sha256"], True)


async def test_sidecar_that_is_not_a_checksum_is_reported(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    sc.server.script(sc.path("a", "s2") + ".hash", Fault(body=b"<html>oops</html>"))

    assert await sc.sync("a") == 0

    assert capsys.readouterr().err == ""
    s2 = sc.source_report("a", "s2")
    assert (s2["status"], s2["sidecar_sha256"], s2["sidecar_matches"]) == (
        "fetched",
        "invalid: '<html>oops</html>'",
        False,
    )


@pytest.mark.parametrize(
    "faults",
    [
        pytest.param((Fault(404),), id="404"),
        pytest.param((Fault(403),), id="403"),
        pytest.param((Fault(500),) * 3, id="500-storm"),
    ],
)
async def test_unavailable_sidecar_does_not_fail_the_source(
    mirror_server: ServeMirror,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    faults: tuple[Fault, ...],
) -> None:
    """The sidecar is advisory (FORMAT.md: it may disagree with the index); the index itself
    answered fine, so the source is read and the branch published without a sidecar."""
    sc = await serve(mirror_server, tmp_path, (v2_ref(),))
    sc.server.script(sc.path("a", "s1") + ".hash", *faults)

    assert await sc.sync("a") == 0, capsys.readouterr().err

    s1 = sc.source_report("a", "s1")
    assert (s1["status"], s1["sidecar_sha256"], s1["sidecar_matches"]) == ("fetched", None, None)
    assert sc.server.hits(sc.path("a", "s1")) == 1


def _open_files() -> list[str]:
    """What this process's file descriptors point at."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            found.append(os.readlink(f"/proc/self/fd/{fd}"))
    return found


@pytest.mark.parametrize("size", [0, 100])
async def test_a_download_cancelled_while_threads_are_busy_closes_its_file(
    mirror_server: ServeMirror, tmp_path: Path, size: int
) -> None:
    """A branch's stacks are cancelled when its root fails; SIGTERM cancels every download. One
    cancelled while waiting for a free worker thread (all busy hashing and writing other
    downloads) must still close the file it writes."""
    root = tmp_path / "mirror"
    root.mkdir()
    (root / "index.json").write_bytes(b"x" * size)
    server = await mirror_server(root)
    dest = tmp_path / "dest.json"
    loop = asyncio.get_running_loop()
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    gate = threading.Event()
    busy = loop.run_in_executor(None, gate.wait)  # the only worker thread
    try:
        async with Fetcher(Config(output=str(tmp_path / "out"))) as fetcher:
            writing = asyncio.Event()
            url = f"{server.url}/index.json"
            download = asyncio.create_task(
                fetcher.download(url, dest, progress=lambda _: writing.set())
            )
            await writing.wait()
            await asyncio.sleep(0.1)  # the body is in: only a thread's work is left
            download.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await download

            assert str(dest) not in _open_files()
    finally:
        gate.set()
        await busy


async def test_a_head_that_tells_nothing_is_given_up_in_time(
    aiohttp_server: Callable[..., Awaitable[Any]], tmp_path: Path
) -> None:
    """``Fetcher.present`` (the look for a stack missing at an immutable ref's publish) makes
    one HEAD, not retried, within its time limit: 200 is there, 404 is not, and anything else,
    an answer that never comes included, proves nothing (None)."""
    heads: list[str] = []

    async def head(request: web.Request) -> web.Response:
        heads.append(request.path)
        if request.path == "/hangs":
            await asyncio.sleep(30)
        status = {"/there": 200, "/gone": 404}.get(request.path, 503)
        return web.Response(status=status)

    app = web.Application()
    app.router.add_route("HEAD", "/{tail:.*}", head)
    server = await aiohttp_server(app)
    base = str(server.make_url("")).rstrip("/")
    async with Fetcher(Config(output=str(tmp_path / "out"))) as fetcher:
        assert await fetcher.present(f"{base}/there", 5) is True
        assert await fetcher.present(f"{base}/gone", 5) is False
        assert await fetcher.present(f"{base}/busy", 5) is None
        started = time.monotonic()
        assert await fetcher.present(f"{base}/hangs", 0.3) is None
        assert time.monotonic() - started < 2
    assert heads == ["/there", "/gone", "/busy", "/hangs"]  # none retried
