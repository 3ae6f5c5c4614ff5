"""The command line on plain build caches, as a user runs it (issue 23): ``main_async`` in
this process, whose loop serves the loopback mirror meanwhile."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from bench.synth import build_plain_cache, generate_specs
from crawler.cli.command import main_async

from .conftest import Done, ServeMirror

Crawl = Callable[..., Awaitable[Done]]


@pytest.fixture
def crawl(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Crawl:
    """``await crawl(*args)``: ``crawler ARGS`` in this process, run from ``tmp_path``."""
    monkeypatch.chdir(tmp_path)

    async def run(*args: str) -> Done:
        code = await main_async(list(args))
        out, err = capsys.readouterr()
        return Done(code, out, err)

    return run


async def test_sync_a_local_v3_cache_by_branch_then_list_it(crawl: Crawl, tmp_path: Path) -> None:
    specs = generate_specs(5, 10)
    build_plain_cache(tmp_path / "spack-cache", specs, views={"stable": specs[:3]})
    args = ("--mirror", str(tmp_path / "spack-cache"), "--output", str(tmp_path / "out"))
    done = await crawl("sync", *args, "--branch", "stable")
    assert done.code == 0, done.err
    index = json.loads((tmp_path / "out" / "stable" / "index.json").read_bytes())
    assert index["stats"]["specs"] == 3
    assert not (tmp_path / "out" / "spack-cache").exists()
    done = await crawl("branches", "--mirror", args[1])
    cache = (tmp_path / "spack-cache").as_uri()
    listed = f"spack-cache\troot\tindex of {cache}\nstable\troot\tv3 view 'stable' of {cache}\n"
    assert (done.code, done.out) == (0, listed), done.err


async def test_a_v2_cache_over_http_is_named_after_its_path(
    crawl: Crawl, mirror_server: ServeMirror, tmp_path: Path
) -> None:
    build_plain_cache(
        tmp_path / "site" / "old", generate_specs(6, 8), layout="v2", db_versions=(6,)
    )
    server = await mirror_server(tmp_path / "site")
    args = ("--mirror", f"{server.url}/old", "--output", str(tmp_path / "out"))
    # Over HTTP, where views cannot be listed, another name asked for is a view: never the
    # top-level index under that name (issue 40).
    two = ("--branch", "new", "--branch", "newer")
    done = await crawl("sync", *args, *two)
    assert done.code == 4
    for name in ("new", "newer"):
        missing = f"{server.url}/old/v3/manifests/index/{name}/index.manifest.json"
        assert f"branch {name} failed: view '{name}' not found: no {missing}" in done.err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".crawler"]

    done = await crawl("sync", *args, "--branch", "old")
    assert done.code == 0, done.err
    named = json.loads((tmp_path / "out" / "old" / "index.json").read_bytes())
    done = await crawl("sync", *args, "--all")
    assert done.code == 6, done.err
    index = json.loads((tmp_path / "out" / "old" / "index.json").read_bytes())
    assert index == named
    [source] = index["sources"]
    assert (source["url"], source["db_version"]) == (
        f"{server.url}/old/build_cache/index.json",
        "6",
    )
