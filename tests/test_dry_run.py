"""``crawler sync --dry-run`` (issue 26): what a sync would download and do with each branch,
with nothing written, and the exit code the sync would have.

Each test serves a small synthetic mirror on loopback (the server of tests/conftest.py, which
records every request) or reads it from a folder, runs the dry run, and checks what a user
sees (stdout, exit code), that the output and the mirror are the same to the byte and to the
nanosecond of every mtime (folders too: a file made and removed again changes its folder's),
and, where it matters, that a real sync then does what the dry run said.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror, index_document
from crawler.cli.command import main_async

from .conftest import (
    Fault,
    LockHolder,
    MirrorServer,
    ServeMirror,
    fast_config,
    finish,
    start_cli,
)

BRANCH = "develop"  # mutable by default: synced on every run
DISCOVERY = "/cache_spack_io_index.json"
SPECS = (
    SynthSpec("zlib", "1.3.1", stacks=("s1",)),
    SynthSpec("hdf5", "1.14.3", variants=(("mpi", True),), stacks=("s1", "s2")),
    SynthSpec("py-numpy", "2.0.0", compiler=None, stacks=("s2",)),
)
#: Stack s2 after one more spec was built in it (its index alone is written anew here).
MORE_IN_S2 = (*SPECS, SynthSpec("cmake", "3.30.5", stacks=("s2",)))
INDEXES = [f"/{BRANCH}/build_cache/index.json"] + [
    f"/{BRANCH}/{stack}/build_cache/index.json" for stack in ("s1", "s2")
]

Snapshot = dict[str, tuple[bytes | None, int]]


def snapshot(root: Path) -> Snapshot:
    """Every file and folder under ``root`` (``root`` included), with its bytes (None for a
    folder) and mtime in nanoseconds; empty when ``root`` does not exist."""
    if not root.exists():
        return {}
    found: Snapshot = {".": (None, root.stat().st_mtime_ns)}
    for path in sorted(root.rglob("*")):
        data = path.read_bytes() if path.is_file() else None
        found[str(path.relative_to(root))] = (data, path.lstat().st_mtime_ns)
    return found


def make_mirror(tmp_path: Path) -> Path:
    root = tmp_path / "mirror"
    build_mirror(root, (SynthRef(BRANCH, SPECS, extra_stacks=("x-gone",)),))
    return root


def build_more_in_s2(mirror: Path) -> Path:
    """Write stack s2's index anew with one more spec (root and s1 stay as they are)."""
    s2 = mirror / INDEXES[2].lstrip("/")
    s2.write_bytes(index_document(MORE_IN_S2, 8, stack="s2"))
    return s2


def write_config(tmp_path: Path, mirror: str, **extra: object) -> Path:
    config = tmp_path / "crawler.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror, tmp_path / "out", **extra)))
    return config


async def sync(config: Path, *flags: str) -> int:
    return await main_async(["sync", "--config", str(config), f"--branch={BRANCH}", *flags])


async def dry_run(
    config: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[int, list[str]]:
    """``crawler sync --dry-run``: its exit code and the lines it printed on stdout."""
    capsys.readouterr()
    code = await sync(config, "--dry-run", *flags)
    return code, capsys.readouterr().out.splitlines()


async def test_a_cold_output_would_download_everything_and_nothing_is_written(
    tmp_path: Path, mirror_server: ServeMirror, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror = make_mirror(tmp_path)
    server = await mirror_server(mirror)
    config = write_config(tmp_path, server.url, metrics=str(tmp_path / "crawler.prom"))
    before = snapshot(tmp_path)

    code, out = await dry_run(config, capsys)

    assert code == 0  # as a first sync, which publishes
    assert out[0] == f"{BRANCH}: would be published (first publish)"
    sizes = {i: (mirror / i.lstrip("/")).stat().st_size for i in INDEXES}
    assert out[1:4] == [
        f"  {label}: would download {sizes[index]:,} bytes (new since the last publish)"
        for label, index in zip(("root", "s1", "s2"), INDEXES, strict=True)
    ]
    assert out[4].startswith("  x-gone: missing, not an error: ")
    assert out[5] == "dry run, nothing written: a sync now would most likely exit 0"
    assert snapshot(tmp_path) == before  # no output folder, no metrics file, mirror as it was
    # The discovery document, and each index once, as a download would start (no sidecar:
    # with no earlier publish, it cannot serve as a validator).
    gone = f"/{BRANCH}/x-gone/build_cache/index.json"
    assert sorted(path for path, _ in server.requests) == sorted([DISCOVERY, *INDEXES, gone])
    assert all(etag is None for _, etag in server.requests)


async def test_a_warm_output_is_unchanged_by_conditional_requests(
    tmp_path: Path, mirror_server: ServeMirror, capsys: pytest.CaptureFixture[str]
) -> None:
    server = await mirror_server(make_mirror(tmp_path))
    config = write_config(tmp_path, server.url)
    assert await sync(config, "-q") == 0
    before = snapshot(tmp_path)
    server.requests.clear()

    code, out = await dry_run(config, capsys)

    assert code == 6  # a sync finding nothing changed exits 6
    assert out[:4] == [
        f"{BRANCH}: unchanged (output is current)",
        "  root: unchanged (304 Not Modified)",
        "  s1: unchanged (304 Not Modified)",
        "  s2: unchanged (304 Not Modified)",
    ]
    assert snapshot(tmp_path) == before
    indexes = [(path, etag) for path, etag in server.requests if path in INDEXES]
    assert sorted(path for path, _ in indexes) == INDEXES
    assert all(etag is not None for _, etag in indexes)  # each asked If-None-Match
    assert await sync(config, "-q") == 6  # and so does the sync


async def test_a_changed_stack_alone_would_be_downloaded(
    tmp_path: Path, mirror_server: ServeMirror, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror = make_mirror(tmp_path)
    server = await mirror_server(mirror)
    config = write_config(tmp_path, server.url)
    assert await sync(config, "-q") == 0
    s2 = build_more_in_s2(mirror)
    before = snapshot(tmp_path)

    code, out = await dry_run(config, capsys)

    assert code == 0
    assert out[:4] == [
        f"{BRANCH}: would be published (1 source changed, {s2.stat().st_size:,} bytes announced)",
        "  root: unchanged (304 Not Modified)",
        "  s1: unchanged (304 Not Modified)",
        f"  s2: would download {s2.stat().st_size:,} bytes (changed: answered 200 to "
        "If-None-Match)",
    ]
    assert snapshot(tmp_path) == before
    server.requests.clear()
    capsys.readouterr()
    assert await sync(config, "-v") == 0  # the sync publishes, downloading s2 alone
    report = (tmp_path / "out" / ".crawler" / "reports" / f"{BRANCH}.json").read_text()
    assert report.count('"status":"fetched"') == 1
    # Decided by the same reader, for the same reasons, which the sync logs.
    err = capsys.readouterr().err
    assert f"{BRANCH} root: unchanged (304 Not Modified)" in err
    assert f"{BRANCH} s2: fetched (changed since the last publish)" in err


@pytest.mark.parametrize(
    ("budget", "code", "verdict"),
    [("0", 4, "would fail"), ("1", 5, "would be published as partial")],
)
async def test_a_failing_stack_gives_the_exit_code_of_a_sync(
    tmp_path: Path,
    mirror_server: ServeMirror,
    capsys: pytest.CaptureFixture[str],
    budget: str,
    code: int,
    verdict: str,
) -> None:
    server = await mirror_server(make_mirror(tmp_path))
    config = write_config(tmp_path, server.url)
    assert await sync(config, "-q") == 0
    before = snapshot(tmp_path)

    def fail_s1(server: MirrorServer) -> None:
        server.script(INDEXES[1], *[Fault(status=500)] * 3)  # each of the 3 attempts

    fail_s1(server)
    done, out = await dry_run(config, capsys, f"--max-failed-stacks={budget}")

    assert done == code
    assert out[0].startswith(f"{BRANCH}: {verdict} (")
    assert (
        out[2] == f"  s1: failed (cannot fetch {server.url}{INDEXES[1]}: HTTP 500 after 3 attempts)"
    )
    assert snapshot(tmp_path) == before
    fail_s1(server)
    assert await sync(config, "-q", f"--max-failed-stacks={budget}") == code  # as the sync


async def test_a_live_lock_holder_is_told_not_waited_for_nor_touched(
    tmp_path: Path,
    mirror_server: ServeMirror,
    capsys: pytest.CaptureFixture[str],
    holders: list[LockHolder],
) -> None:
    server = await mirror_server(make_mirror(tmp_path))
    config = write_config(tmp_path, server.url)
    assert await sync(config, "-q") == 0
    holder = LockHolder(tmp_path / "out", 30)
    holders.append(holder)
    before = snapshot(tmp_path / "out")

    capsys.readouterr()
    code = await sync(config, "--dry-run")
    out, err = capsys.readouterr()

    assert code == 6  # as a sync would, once the lock is free
    assert out.startswith(f"{BRANCH}: unchanged (output is current)\n")
    lock = tmp_path / "out" / ".crawler" / "lock"
    told = f"{lock} names pid {holder.pid} on {os.uname().nodename}"
    assert told in err
    assert "a sync may be running; a dry run does not wait for it" in err
    assert snapshot(tmp_path / "out") == before
    assert await sync(config, "-q") == 7  # the sync itself is locked out

    holder.stop()  # killed: the file still names it, a pid of this host that is gone
    assert str(holder.pid).encode() in lock.read_bytes()
    capsys.readouterr()
    assert await sync(config, "--dry-run") == 6
    assert "a sync may be running" not in capsys.readouterr().err


async def test_a_local_mirror_is_hashed_in_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror = make_mirror(tmp_path)
    config = write_config(tmp_path, str(mirror))
    before = snapshot(tmp_path)
    code, out = await dry_run(config, capsys)
    assert code == 0
    assert out[1] == (
        f"  root: would read {(mirror / INDEXES[0].lstrip('/')).stat().st_size:,} bytes "
        "(new since the last publish)"
    )
    assert snapshot(tmp_path) == before

    assert await sync(config, "-q") == 0
    s2 = build_more_in_s2(mirror)
    before = snapshot(tmp_path)
    code, out = await dry_run(config, capsys)

    assert code == 0
    assert out[1:4] == [
        "  root: unchanged (same bytes)",
        "  s1: unchanged (same bytes)",
        f"  s2: would read {s2.stat().st_size:,} bytes (changed since the last publish)",
    ]
    assert snapshot(tmp_path) == before
    assert await sync(config, "-q") == 0
    code, out = await dry_run(config, capsys)
    assert (code, out[0]) == (6, f"{BRANCH}: unchanged (output is current)")


@pytest.mark.slow
async def test_the_command_prints_the_forecast_and_exits_as_a_sync_would(
    tmp_path: Path, mirror_server: ServeMirror
) -> None:
    server = await mirror_server(make_mirror(tmp_path))
    args = ("--mirror", server.url, "--output", str(tmp_path / "out"), "--all")
    done = await finish(await start_cli("sync", *args, "--dry-run", cwd=tmp_path))
    assert done.code == 0, done.err
    assert done.out.endswith("dry run, nothing written: a sync now would most likely exit 0\n")
    assert f"{BRANCH}: would be published" in done.out
    assert not (tmp_path / "out").exists()


async def test_immutable_refs_are_skipped_as_a_sync_skips_them(
    tmp_path: Path, mirror_server: ServeMirror, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "mirror"
    build_mirror(root, (SynthRef(BRANCH, SPECS), SynthRef("v1.0", SPECS[:1])))
    server = await mirror_server(root)
    config = write_config(tmp_path, server.url)
    assert await main_async(["sync", "--config", str(config), "--all", "-q"]) == 0
    capsys.readouterr()

    assert await main_async(["sync", "--config", str(config), "--all", "--dry-run"]) == 6
    out = capsys.readouterr().out.splitlines()
    assert f"{BRANCH}: unchanged (output is current)" in out
    assert "v1.0: skipped (immutable and published)" in out

    (tmp_path / "out" / "v1.0" / "index.json").unlink()  # damaged: synced again
    before = snapshot(tmp_path)
    assert await main_async(["sync", "--config", str(config), "--all", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].endswith("would most likely exit 0")
    assert out[-4:-1] == [
        "v1.0: would be published (its sources are unchanged, but its published files are not "
        "as published)",
        "  root: unchanged (304 Not Modified)",
        "  s1: unchanged (304 Not Modified)",
    ]
    assert snapshot(tmp_path) == before


async def test_errors_of_the_command_and_the_mirror_keep_their_codes(
    tmp_path: Path, mirror_server: ServeMirror, capsys: pytest.CaptureFixture[str]
) -> None:
    server = await mirror_server(make_mirror(tmp_path))
    config = write_config(tmp_path, server.url)
    argv = ["sync", "--config", str(config), "--dry-run", "--branch"]
    assert await main_async([*argv, "nope"]) == 2  # unknown branch
    server.script(DISCOVERY, *[Fault(status=503)] * 3)
    assert await main_async([*argv, BRANCH]) == 3  # the mirror unusable
    assert not (tmp_path / "out").exists()


async def test_sidecars_without_etags_and_a_lost_cache_say_so_as_the_sync_decides(
    tmp_path: Path, mirror_server: ServeMirror, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror = make_mirror(tmp_path)
    server = await mirror_server(mirror, head=True)  # HEAD confirms what a sidecar vouches for
    server.etags = False  # a server sending no validator: the v2 sidecars serve as one
    config = write_config(tmp_path, server.url)
    assert await sync(config, "-q") == 0

    code, out = await dry_run(config, capsys)
    assert code == 6, out
    assert out[1:4] == [
        f"  {label}: unchanged (its index.json.hash names cached bytes)"
        for label in ("root", "s1", "s2")
    ]
    (mirror / INDEXES[1].lstrip("/")).with_suffix(".json.hash").unlink()  # s1's
    for cached in (tmp_path / "out" / ".crawler" / "cache").glob("stack-*"):
        cached.unlink()  # the stacks' summaries: s2's too
    code, out = await dry_run(config, capsys)
    sizes = [(mirror / i.lstrip("/")).stat().st_size for i in INDEXES]
    assert code == 0
    assert out[2:4] == [
        f"  s1: would download {sizes[1]:,} bytes (its cached summary is gone)",
        f"  s2: would download {sizes[2]:,} bytes (its cached summary is gone)",
    ]
    capsys.readouterr()
    assert await sync(config, "-v") == 6  # the same bytes after all: unchanged
    err = capsys.readouterr().err
    assert f"{BRANCH} root: unchanged (its index.json.hash names cached bytes)" in err
    assert f"{BRANCH} s1: fetched (its cached summary is gone)" in err

    capsys.readouterr()
    code, out = await dry_run(config, capsys)  # s1 has no sidecar now, nor an ETag
    assert out[2] == (
        f"  s1: would download {sizes[1]:,} bytes "
        "(no validator: the server sends no ETag and no usable index.json.hash)"
    )
