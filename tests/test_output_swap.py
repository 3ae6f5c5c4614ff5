"""The lock protects what is written (issue 25, item 3): an output folder swapped for a link
during a sync does not carry the run's writes, nor its lock's protection, elsewhere.

The swap is made while the first run downloads (two real ``crawler sync`` processes, against a
loopback mirror whose answers are held back), and once it has built its branch, as it writes it
(the first run in this process, the second a real process started at that moment)."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import crawler.output.stage
from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async
from crawler.output.folder import REPLACED

from .conftest import (
    CLI_TIMEOUT,
    REPO,
    SAMPLE_MIRROR,
    Done,
    ServeSlowMirror,
    cli_env,
    fast_config,
    finish,
    start_cli,
    tree_bytes,
)

# Slow (real runs while the output folder is swapped):
# not in the fast loop, pytest -m "not slow".
pytestmark = pytest.mark.slow

SPECS = (
    SynthSpec("zlib", "1.3.1", stacks=("s1",)),
    SynthSpec("hdf5", "1.14.3", variants=(("mpi", True),), stacks=("s1", "s2")),
)
#: The mirror one step later: every index changes, so the next sync publishes.
NEXT = (*SPECS, SynthSpec("cmake", "3.30.5", stacks=("s1", "s2")))


async def sync(config: Path, cwd: Path, *flags: str) -> asyncio.subprocess.Process:
    """``crawler sync --branch develop`` with this config, started."""
    return await start_cli("sync", "--branch", "develop", "--config", str(config), *flags, cwd=cwd)


@pytest.mark.slow
async def test_an_output_swapped_for_a_link_mid_run_gets_nothing_from_that_run(
    slow_mirror_server: ServeSlowMirror, tmp_path: Path
) -> None:
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", SPECS)])
    server = await slow_mirror_server(root)
    out = tmp_path / "out"
    settings = fast_config(server.url, out, mutable_refs=["*"])
    settings["timeouts"] = {"connect": 2, "read": 60, "source": 120}
    config = tmp_path / "crawler.yaml"
    config.write_text(yaml.safe_dump(settings))
    repo = REPO

    # The publish before, in this process; the two runs the swap is made between are real.
    assert await main_async(["sync", "--branch", "develop", "--config", str(config), "-q"]) == 0
    published = tree_bytes(out / "develop")

    # The next state of the mirror, its stack s1 held back: the run is under way, its lock
    # taken, when the output folder is swapped for a link to another.
    shutil.rmtree(root)
    build_mirror(root, [SynthRef("develop", NEXT)])
    server.arrived.clear()
    url = next(e["url"] for e in discovery["develop"] if e["label"] == "s1")
    s1 = url.removeprefix("s3://spack-binaries")  # /develop/s1/build_cache/index.json
    server.delay(s1, 4.0)
    running = await sync(config, repo, "--format", "json,pages")
    try:
        for _ in range(2000):
            if server.arrivals(s1) or running.returncode is not None:
                break
            await asyncio.sleep(0.01)
        assert server.arrivals(s1) == 1, "the first sync never asked for s1"
        server.delays.clear()
        locked = tmp_path / "out.locked"
        out.rename(locked)
        other = tmp_path / "other"
        other.mkdir()
        out.symlink_to(other)

        # A second sync reaches the other folder, whose lock nobody holds, and publishes there.
        second = await finish(await sync(config, repo, "--format", "json"))
        assert second.code == 0, second.err
        theirs = tree_bytes(other / "develop")
        # No pages:
        assert sorted(theirs) == [
            "changes.json",
            "history.json",
            "index.json",
            "links.json",
            "report.json",
        ]

        done = await finish(running)
    finally:
        if running.returncode is None:
            running.send_signal(signal.SIGKILL)
            await running.wait()

    assert done.code == 4, done.err
    failed = f"branch develop failed: cannot write into {out}: {REPLACED}"
    assert f"ERROR develop: {failed}\n" in done.err, done.err
    assert done.err.endswith("error: 1 branch(es) failed: develop\n"), done.err
    assert "Traceback" not in done.err
    # Nothing through the link: the other folder holds the second run's branch only...
    assert tree_bytes(other / "develop") == theirs
    assert sorted(p.name for p in (other / ".crawler" / "staging").iterdir()) == []
    # ...and the folder the first run locked keeps its previous output, its lock released.
    assert tree_bytes(locked / "develop") == published
    assert (locked / ".crawler" / "lock").read_bytes() == b""
    assert sorted(p.name for p in (locked / ".crawler" / "staging").iterdir()) == []


async def test_an_output_swapped_for_a_link_while_a_branch_is_written_is_not_published_there(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The swap comes once the branch is built, as its first page is rendered (the moment
    the run used to publish through the link), and a second sync runs to its end then."""
    out = tmp_path / "out"
    config = tmp_path / "crawler.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(SAMPLE_MIRROR), out)))
    sync = ["sync", "--branch", "develop", "--config", str(config), "-q"]
    assert await main_async([*sync, "--format", "json"]) == 0
    published = tree_bytes(out / "develop")
    locked, other = tmp_path / "out.locked", tmp_path / "other"
    write = crawler.output.stage.BranchStage.write
    seconds: list[Done] = []

    def swap_then_write(stage: crawler.output.stage.BranchStage, name: str, data: bytes) -> None:
        if not name.startswith("pages/"):
            return write(stage, name, data)
        monkeypatch.setattr(crawler.output.stage.BranchStage, "write", write)
        out.rename(locked)
        other.mkdir()
        out.symlink_to(other)
        ran = subprocess.run(
            [sys.executable, "-m", "crawler", *sync, "--format", "json"],
            cwd=REPO,
            env=cli_env(),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
        )
        seconds.append(Done(ran.returncode, ran.stdout, ran.stderr))
        return write(stage, name, data)

    monkeypatch.setattr(crawler.output.stage.BranchStage, "write", swap_then_write)
    capsys.readouterr()

    code = await main_async([*sync, "--format", "json,pages"])

    assert seconds and seconds[0].code == 0, seconds
    theirs = tree_bytes(other / "develop")
    # JSON only:
    assert sorted(theirs) == [
        "changes.json",
        "history.json",
        "index.json",
        "links.json",
        "report.json",
    ]
    err = capsys.readouterr().err
    assert code == 4, err
    assert f"branch develop failed: cannot write into {out}: {REPLACED}" in err
    assert tree_bytes(other / "develop") == theirs  # not replaced by the first run's, with pages
    assert list((other / ".crawler" / "staging").iterdir()) == []
    assert tree_bytes(locked / "develop") == published
    assert list((locked / ".crawler" / "staging").iterdir()) == []
    assert (locked / ".crawler" / "lock").read_bytes() == b""
