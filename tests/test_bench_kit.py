"""The benchmark kit (bench/): the generator, the baseline and the crawler agree; the server shapes.

A small generated mirror is crawled by the real crawler and summarized by the sequential baseline
(bench/baseline.py, an independent implementation of FORMAT.md section 3): both must give the same
packages, byte for byte once loaded, and the generator's own counts must match what the crawler
read. The loopback server must delay, pace, answer 304 and never leave its folder; the plain
downloads the shaped target is measured against must see its shaping over 8 connections.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

import bench.run
import crawler
import crawler.sync.run
from bench.baseline import summarize_ref
from bench.bytecode import compile_crawler
from bench.floor import download_pooled
from bench.generate import MirrorParams, generate_mirror
from bench.server import serve
from crawler.cli.command import main_async

from .conftest import REPO, tree_bytes

# Slow (whole benchmarks on small mirrors):
# not in the fast loop, pytest -m "not slow".
pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    "params",
    [
        MirrorParams(records=300, stacks=4, layout="v2"),
        MirrorParams(records=300, stacks=4, refs=3, db="mixed", layout="v3"),
    ],
    ids=["v2-db8", "v3-db876"],
)
async def test_crawler_and_baseline_agree_on_generated_mirror(
    tmp_path: Path, params: MirrorParams
) -> None:
    mirror, out = tmp_path / "mirror", tmp_path / "out"
    generated = generate_mirror(mirror, params)
    assert len(generated.refs) == params.refs
    branches = [arg for ref in generated.refs for arg in ("--branch", ref)]
    argv = ["sync", *branches, "--mirror", str(mirror), "--output", str(out), "-q"]
    assert await main_async(argv) == 0
    for index_number, ref in enumerate(generated.refs):
        index = json.loads((out / ref / "index.json").read_bytes())
        assert index["stats"]["specs"] == params.records
        assert index["stats"]["sources"] == params.stacks + 1
        assert {s["db_version"] for s in index["sources"]} == {str(params.db_of(index_number))}
        files = {f.label: f for f in generated.files if f.ref == ref}
        for source in index["sources"]:
            assert source["records"] == files[source["label"]].records
            assert source["bytes"] == files[source["label"]].bytes
        packages, stats = summarize_ref(str(mirror), ref)
        assert stats.missing == []
        assert sum(p["meta"]["num_specs"] for p in packages.values()) == params.records
        for package in index["packages"].values():  # the baseline writes the pages' fields
            for spec in package["spec_details"]:
                del spec["family"]
        assert packages == index["packages"]


def test_generator_is_deterministic_and_realistic(tmp_path: Path) -> None:
    params = MirrorParams(records=120, stacks=5, seed=7)
    first = generate_mirror(tmp_path / "a", params)
    generate_mirror(tmp_path / "b", params)
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    other = generate_mirror(tmp_path / "c", MirrorParams(records=120, stacks=5, seed=8))
    assert [f.bytes for f in other.files] != [f.bytes for f in first.files]

    root = next(f for f in first.files if f.label == "root")
    assert root.in_buildcache == 120 and root.records > 120  # plus dependency records
    installs = json.loads((first.root / root.path).read_bytes())["database"]["installs"]
    specs = [r["spec"] for r in installs.values() if r["in_buildcache"]]
    assert all(10 <= len(s["parameters"]) <= 41 for s in specs)
    assert all(len(s.get("dependencies", [])) >= 3 for s in specs if "compiler" not in s)
    assert any(isinstance(s["arch"]["target"], dict) for s in specs)
    assert any(isinstance(s["arch"]["target"], str) for s in specs)
    # Every root spec is in 1-4 stacks.
    stack_hashes = [
        set(json.loads((first.root / f.path).read_bytes())["database"]["installs"])
        for f in first.files
        if f.label != "root"
    ]
    for key, record in installs.items():
        if record["in_buildcache"]:
            assert 1 <= sum(key in hashes for hashes in stack_hashes) <= 4


async def test_server_shapes_answers_304_and_stays_in_its_folder(tmp_path: Path) -> None:
    root = tmp_path / "mirror"
    root.mkdir()
    (root / "index.json").write_bytes(b"x" * 200_000)
    (tmp_path / "secret.txt").write_text("outside")
    (root / "link.txt").symlink_to(tmp_path / "secret.txt")
    async with (
        serve(root, latency_ms=100, bandwidth_mbps=1.0) as url,
        aiohttp.ClientSession() as session,
    ):
        started = time.monotonic()
        async with session.get(f"{url}/index.json") as response:
            body = await response.read()
            etag = response.headers["ETag"]
        elapsed = time.monotonic() - started
        assert response.status == 200 and len(body) == 200_000
        assert elapsed >= 0.1 + 0.2  # latency + 200 kB at 1 MB/s

        started = time.monotonic()
        headers = {"If-None-Match": f'"other", W/{etag}'}
        async with session.get(f"{url}/index.json", headers=headers) as response:
            assert response.status == 304
            assert response.headers["ETag"] == etag
            assert await response.read() == b""
        assert time.monotonic() - started >= 0.1

        for path in ("/link.txt", "/missing.json", "/"):
            async with session.get(f"{url}{path}") as response:
                assert response.status == 404, path
        # Sent raw: an HTTP client would normalise the dot segments away.
        for path in ("/../secret.txt", "/%2E%2E/secret.txt", "/sub/../../secret.txt"):
            answer = await _raw_get(url, path)
            assert answer.startswith(b"HTTP/1.1 404 ") and b"outside" not in answer, path


async def test_plain_downloads_take_each_file_once_over_8_shaped_connections(
    tmp_path: Path,
) -> None:
    """16 files, each 0.3 s of latency and 0.1 s of body on its connection: 8 connections take
    two rounds (0.8 s); 7 would take three, 16 (or no limit, as the floor has) one."""
    root = tmp_path / "mirror"
    root.mkdir()
    for number in range(16):
        (root / f"{number}.json").write_bytes(b"x" * 100_000)
    async with serve(root, latency_ms=300, bandwidth_mbps=1.0) as url:
        seconds, size = await download_pooled([f"{url}/{n}.json" for n in range(16)])
    assert size == 16 * 100_000  # each file once, whole
    assert 0.8 <= seconds < 1.15


async def _raw_get(url: str, path: str) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", URL(url).port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    answer = await reader.read()
    writer.close()
    await writer.wait_closed()
    return answer


def test_the_runner_compiles_the_crawler_bytecode_as_an_install_does() -> None:
    """The runner measures the venv's crawler as installed, with its modules compiled, even
    where PYTHONDONTWRITEBYTECODE keeps an editable install from writing them."""
    source = Path(crawler.sync.run.__file__)
    compiled = Path(importlib.util.cache_from_source(str(source)))
    compiled.unlink(missing_ok=True)
    line = compile_crawler()
    assert str(Path(crawler.__file__).parent) in line
    assert compiled.is_file()
    assert compiled.stat().st_mtime >= source.stat().st_mtime


def test_the_benchmark_runs_from_its_one_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bench/run.py``, as bench/README.md gives it, on a tiny mirror with a shaped server:
    every figure is printed and saved, the targets set for unshaped loopback are said to be for
    comparison only (and are not so said unshaped), and the shaped network's target is checked
    against 8 parallel plain downloads (and skipped unshaped)."""
    saved = tmp_path / "figures.json"
    argv = [sys.executable, str(REPO / "bench" / "run.py"), "--records", "200", "--stacks", "3"]
    argv += ["--skip-baseline", "--latency-ms", "1", "--out", "out"]  # relative to the cwd
    argv += ["--crawler", f"{sys.executable} -m crawler", "--json", str(saved)]
    done = subprocess.run(
        argv, cwd=tmp_path, capture_output=True, text=True, timeout=50, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    starts = ("floor      download", "plain      download", "cold       wall", "warm       wall")
    for start in (*starts, "cold_over_floor", "cold_over_8_parallel"):
        assert f"\n{start}" in done.stdout, start
    assert "\nPASS  warm index.json identical\n" in done.stdout
    assert f"\n{_COMPARISON}\n" in done.stdout
    assert "\ntarget set for a shaped network (50 ms a request, " in done.stdout
    assert (tmp_path / "out" / "mirrors").is_dir() and (tmp_path / "out" / "runs").is_dir()

    figures = json.loads(saved.read_text())
    assert figures["shaping"]["name"] == "lat1"
    assert figures["targets"]["warm index.json identical"] is True
    assert figures["targets"]["baseline/cold >= 8"] is None  # skipped
    plain = figures["plain_downloads"]
    assert plain["connections"] == 8 and plain["files"] == figures["mirror"]["branch_files"]
    assert plain["bytes"] == figures["mirror"]["branch_bytes"]
    ratio = figures["ratios"]["cold_over_8_parallel"]
    assert ratio == pytest.approx(figures["cold"]["seconds"] / plain["seconds"])
    shaped_ok = figures["targets"][_SHAPED]
    assert shaped_ok is (ratio <= 1.5)
    assert f"\n{'PASS' if shaped_ok else 'FAIL'}  {_SHAPED}\n" in done.stdout

    # Unshaped: no comparison line, and the shaped target skipped, in the figures as printed.
    unshaped = {
        **figures,
        "shaping": {**figures["shaping"], "name": "unshaped"},
        "ratios": dict(figures["ratios"]),
        "targets": dict(figures["targets"]),
    }
    bench.run._add_shaped_target(unshaped)
    assert unshaped["targets"][_SHAPED] is None
    capsys.readouterr()
    bench.run._print(unshaped)
    printed = capsys.readouterr().out
    assert "\nPASS  warm index.json identical\n" in printed and _COMPARISON not in printed
    assert f"\nSKIP  {_SHAPED}\n" in printed


_SHAPED = "cold <= 1.5x 8 parallel downloads (shaped)"
_COMPARISON = "targets are set for unshaped loopback; with shaping they are for comparison only"
