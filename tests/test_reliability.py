"""Reliability: what an operator relies on when a run is refused, fails, overlaps another run, is
killed, or finds nothing to do.

Every test serves a synthetic mirror on loopback (``slow_mirror_server``: a ``mirror_server``
whose answers can be held back) and runs ``crawler sync`` either in this process
(``main_async``, retry waits recorded instead of slept) or as a real ``python -m crawler``
process where processes matter (locks, signals, ``SIGKILL``). Each test checks the exit code,
what the user is told, and that the published files did not change unless the run succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

import crawler.output.stage
from bench.interrupts import describe_process, session_members
from bench.synth import SynthRef, SynthSpec, build_mirror, generate_specs
from crawler import __version__
from crawler.build.changes import summary_line
from crawler.cli.command import main_async
from crawler.documents import Changes
from crawler.ops.verify import verify_branch
from crawler.text import counted

from .conftest import (
    Done,
    Fault,
    LockHolder,
    ServeSlowMirror,
    SleepRecorder,
    SlowMirrorServer,
    as_from_a_terminal,
    cli_env,
    dead_pid,
    fast_config,
    finish,
    tree_bytes,
)
from .conftest import start_cli as conftest_start_cli

# Slow (whole runs, many as real processes: locks, signals, SIGKILL):
# not in the fast loop, pytest -m "not slow".
pytestmark = pytest.mark.slow

BUCKET = "s3://spack-binaries/"
Discovery = dict[str, list[dict[str, str]]]
#: Timeouts for tests whose server holds answers back (longer than fast_config's 2 s reads).
SLOW = {"connect": 2, "read": 60, "source": 120}

ZLIB = SynthSpec("zlib", "1.3.1", stacks=("s1",))
HDF5 = SynthSpec("hdf5", "1.14.3", variants=(("mpi", True),), stacks=("s1", "s2"))
NUMPY = SynthSpec("py-numpy", "2.0.0", compiler=None, stacks=("s2",))
CMAKE = SynthSpec("cmake", "3.30.5", stacks=("s1", "s2"))
SPECS = (ZLIB, HDF5, NUMPY)
#: The mirror one step later: one more spec, in every index, so every checksum changes.
NEXT = (*SPECS, CMAKE)


# --- helpers ----------------------------------------------------------------------------------


@dataclass
class Site:
    """A served mirror, a config file pointing at it, and the output folder."""

    server: SlowMirrorServer
    discovery: Discovery
    config: Path
    out: Path
    capsys: pytest.CaptureFixture[str]
    settings: dict[str, object]
    sleep: SleepRecorder = field(default_factory=SleepRecorder)

    @property
    def mirror(self) -> Path:
        """The folder the server serves."""
        return self.server.root

    def path(self, ref: str, label: str = "root") -> str:
        """The URL path (relative to the mirror) of one index."""
        url = next(e["url"] for e in self.discovery[ref] if e["label"] == label)
        return url.removeprefix(BUCKET)

    def location(self, ref: str, label: str = "root") -> str:
        """The http:// URL the crawler fetches one index from."""
        return f"{self.server.url}/{self.path(ref, label)}"

    def rebuild(self, *refs: SynthRef) -> None:
        """Replace the mirror's content and forget the requests seen so far."""
        shutil.rmtree(self.mirror)
        self.discovery = build_mirror(self.mirror, refs)
        self.server.requests.clear()
        self.server.arrived.clear()
        self.sleep.waits.clear()

    def write_config(self, name: str, **overrides: object) -> Path:
        """Another config file for the same mirror and output."""
        path = self.config.with_name(name)
        path.write_text(yaml.safe_dump({**self.settings, **overrides}))
        return path

    def argv(self, *branches: str, flags: Sequence[str] = (), quiet: bool = True) -> list[str]:
        """``sync`` arguments for these branches."""
        args = ["sync", "--config", str(self.config), *(["-q"] if quiet else []), *flags]
        return args + [f"--branch={b}" for b in branches]

    async def sync(self, *branches: str, flags: Sequence[str] = (), quiet: bool = True) -> Done:
        """``crawler sync`` in this process; returns what it printed."""
        self.capsys.readouterr()
        code = await main_async(self.argv(*branches, flags=flags, quiet=quiet), sleep=self.sleep)
        captured = self.capsys.readouterr()
        return Done(code, captured.out, captured.err)

    async def run(self, *args: str) -> Done:
        """``crawler ARGS`` in this process; returns what it printed."""
        self.capsys.readouterr()
        code = await main_async(list(args))
        captured = self.capsys.readouterr()
        return Done(code, captured.out, captured.err)

    async def publish(self, *branches: str) -> dict[str, dict[str, bytes]]:
        """A clean sync that must publish; returns each branch's published files."""
        done = await self.sync(*branches)
        assert done.code == 0, done.err
        return {b: tree_bytes(self.out / b) for b in branches}

    def index(self, branch: str) -> dict[str, Any]:
        """The published ``index.json`` of ``branch``."""
        data: dict[str, Any] = json.loads((self.out / branch / "index.json").read_bytes())
        return data

    def report(self, branch: str) -> dict[str, Any]:
        """The report of the latest attempt at ``branch``, published or not."""
        path = self.out / ".crawler" / "reports" / f"{branch}.json"
        data: dict[str, Any] = json.loads(path.read_bytes())
        return data

    def source_report(self, branch: str, label: str) -> dict[str, Any]:
        """One source's entry in the latest report of ``branch``."""
        entry: dict[str, Any] = next(
            s for s in self.report(branch)["sources"] if s["label"] == label
        )
        return entry

    def leftovers(self) -> list[str]:
        """Whatever runs left in the staging and download folders."""
        found = []
        for name in ("staging", "tmp"):
            folder = self.out / ".crawler" / name
            if folder.is_dir():
                found += [f"{name}/{p.name}" for p in folder.iterdir()]
        return sorted(found)


MakeSite = Callable[..., Awaitable[Site]]


@pytest.fixture
def site(
    slow_mirror_server: ServeSlowMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> MakeSite:
    """``await site(refs, **config)``: build and serve ``refs`` and write a fast config.

    Every ref is mutable (re-checked on each run) unless ``default_refs=True`` keeps the
    built-in ``immutable_refs`` / ``mutable_refs``.
    """

    async def make(
        refs: Sequence[SynthRef], *, default_refs: bool = False, **config: object
    ) -> Site:
        root = tmp_path / "mirror"
        discovery = build_mirror(root, refs)
        server = await slow_mirror_server(root)
        out = tmp_path / "out"
        extra: dict[str, object] = {} if default_refs else {"mutable_refs": ["*"]}
        settings = fast_config(server.url, out, **{**extra, **config})
        path = tmp_path / "crawler.yaml"
        path.write_text(yaml.safe_dump(settings))
        return Site(server, discovery, path, out, capsys, settings)

    return make


def ref(name: str = "a", specs: tuple[SynthSpec, ...] = SPECS, layout: str = "v2") -> SynthRef:
    """A DB 8 ref; with the default specs its stacks are ``s1`` and ``s2``."""
    return SynthRef(name, specs, layout=layout)


#: Process groups of the crawler processes started by the running test (see ``crawlers``).
_GROUPS: list[int] = []


async def start_cli(
    *args: str, cwd: Path, prefix: Sequence[str] = ()
) -> asyncio.subprocess.Process:
    """conftest's :func:`start_cli`, leading a new process group, so that whatever the crawler
    starts (decoding workers) can be found, and ended, even after it died."""
    proc = await conftest_start_cli(*args, cwd=cwd, new_session=True, prefix=prefix)
    _GROUPS.append(proc.pid)
    return proc


async def run_cli(*args: str, cwd: Path) -> Done:
    """Run ``python -m crawler ARGS`` to completion."""
    return await finish(await start_cli(*args, cwd=cwd))


async def until(
    condition: Callable[[], bool], what: str, seconds: float = 20.0, *, every: float = 0.002
) -> None:
    """Poll ``condition`` (the event loop keeps serving meanwhile) until it holds."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(every)


def end_group(pgid: int) -> None:
    """SIGKILL, one pid at a time, whatever is left of a crawler's process group."""
    for pid in session_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(autouse=True)
def _no_stray_processes() -> Iterator[None]:
    """Whatever a test's crawler processes left running is ended when the test ends."""
    yield
    while _GROUPS:
        end_group(_GROUPS.pop())


async def kill9(proc: asyncio.subprocess.Process) -> tuple[Done, list[str]]:
    """SIGKILL the crawler process alone, as the OOM killer would.

    Returns what it printed, and the processes it had started that were still running a second
    after its death (they are then killed, so that its output pipes close).
    """
    proc.kill()
    # not proc.wait(): it also waits for the output pipes, which survivors may hold open
    await until(lambda: proc.returncode is not None, "the killed process to be reaped")
    with contextlib.suppress(AssertionError):
        await until(lambda: not session_members(proc.pid), "its processes to end", 1.0, every=0.05)
    survivors = [describe_process(pid) for pid in session_members(proc.pid)]
    end_group(proc.pid)
    return await finish(proc), survivors


def metric_samples(text: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample line of a metrics file."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


# --- 1. the publish gate ----------------------------------------------------------------------

FOUR = (ZLIB, HDF5, NUMPY, CMAKE)


async def test_a_large_drop_is_refused_and_force_publishes_it(site: MakeSite) -> None:
    s = await site((ref("a", FOUR),))
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", (ZLIB,)))

    done = await s.sync("a")

    assert done.code == 4
    refusal = (
        "branch a: refused to publish: 1 spec against 4 published (a drop of more than 50%); "
        "use --force to publish anyway"
    )
    assert refusal in done.err
    assert done.err.endswith("error: 1 branch(es) failed: a\n")
    assert (s.report("a")["status"], s.report("a")["error"]) == ("refused", refusal)
    assert tree_bytes(s.out / "a") == before

    forced = await s.sync("a", flags=["--force"])

    assert (forced.code, forced.err) == (0, "")
    assert list(s.index("a")["packages"]) == ["zlib"]
    changes = json.loads((s.out / "a" / "changes.json").read_bytes())
    assert changes["totals"] == {"specs_before": 4, "specs_after": 1, "added": 0, "removed": 3}
    assert s.report("a")["status"] == "published"


async def test_runs_stopped_before_their_end_still_prune_the_cache(site: MakeSite) -> None:
    """A run that never ends well (a time limit stopping it each night while a stack hangs)
    still prunes the cache: when the prune came only at the end of a run, each night's
    summaries of the branch published before the hang stayed for good."""
    s = await site((ref("a"), ref("zz")))
    await s.publish("a", "zz")
    cache = s.out / ".crawler" / "cache"

    def cached() -> set[str]:
        return {p.name.split("-", 1)[1].split(".", 1)[0] for p in cache.glob("*-*")}

    def read_by(report: dict[str, Any]) -> set[str]:
        return {source["sha256"] for source in report["sources"]}

    hung = "zz/s1/build_cache/index.json"
    read: list[set[str]] = []
    for night in range(3):
        s.rebuild(
            ref("a", (*SPECS, SynthSpec(f"tool{night}", "1.0", stacks=("s1", "s2")))), ref("zz")
        )
        s.server.delay(hung, 30)
        before = read_by(s.report("a"))
        run = asyncio.create_task(s.sync("a", "zz"))
        try:
            # The night's time limit, once "a" is published and the run waits for zz (within
            # the 3 s the fixed limit this replaces gave it).
            await until(lambda: s.server.arrivals(hung) > 0, "the run held up by zz", 3)
            assert read_by(s.report("a")) != before, "a was not published first"
        finally:
            run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        assert s.report("a")["status"] == "published"
        read.append(read_by(s.report("a")))
    assert read[2] <= cached()
    assert not (read[0] | read[1]) & cached()  # neither in a state nor read by the last run


async def test_the_gate_holds_when_the_published_index_cannot_be_read(site: MakeSite) -> None:
    """A damaged published index.json (a byte changed) cannot give the spec count to compare
    with: the count the state recorded at that publish serves, rather than nothing (which let
    an 89% drop through as a "first publish")."""
    s = await site((ref("a", FOUR),))
    await s.publish("a")
    index = s.out / "a" / "index.json"
    good = index.read_bytes()
    index.write_bytes(good[:-10])  # not JSON any more
    s.rebuild(ref("a", (ZLIB,)))

    done = await s.sync("a")

    assert done.code == 4, done.err
    assert "refused to publish: 1 spec against 4 published" in done.err
    assert index.read_bytes() == good[:-10]  # left as it was
    index.write_bytes(good)  # for the schema check of every index a test leaves


@pytest.mark.parametrize(
    ("max_drop", "kept", "code"),
    [
        pytest.param(0.5, FOUR[:2], 0, id="half-of-4-within-0.5"),
        pytest.param(0.2, FOUR[:3], 4, id="quarter-of-4-beyond-0.2"),
        pytest.param(1.0, FOUR[:1], 0, id="three-quarters-within-1.0"),
    ],
)
async def test_the_gate_follows_publish_max_drop(
    site: MakeSite, max_drop: float, kept: tuple[SynthSpec, ...], code: int
) -> None:
    s = await site((ref("a", FOUR),), publish={"max_drop": max_drop})
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", kept))

    done = await s.sync("a")

    assert done.code == code, done.err
    if code == 0:
        assert done.err == ""
        assert s.index("a")["stats"]["specs"] == len(kept)
    else:
        assert f"refused to publish: {counted(len(kept), 'spec')} against 4 published" in done.err
        assert f"a drop of more than {max_drop:.0%}" in done.err
        assert tree_bytes(s.out / "a") == before


async def test_an_empty_root_is_refused_even_on_a_first_publish(site: MakeSite) -> None:
    s = await site((ref("a", ()),))

    done = await s.sync("a")

    assert done.code == 4
    assert "branch a: refused to publish: the root index has no specs" in done.err
    assert s.report("a")["status"] == "refused"
    assert not (s.out / "a").exists()

    forced = await s.sync("a", flags=["--force"])

    assert (forced.code, forced.err) == (0, "")
    assert s.index("a")["packages"] == {}
    assert verify_branch(s.out / "a") == []


async def test_a_root_that_empties_is_refused_and_the_output_kept(site: MakeSite) -> None:
    s = await site((ref("a"),))
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", ()))

    done = await s.sync("a")

    assert done.code == 4
    assert "refused to publish: the root index has no specs" in done.err
    assert tree_bytes(s.out / "a") == before


# --- 2. immutable refs ------------------------------------------------------------------------


async def test_a_published_immutable_ref_is_skipped_until_forced(site: MakeSite) -> None:
    develop = ref("develop", (ZLIB, HDF5))  # not v1.0's bytes: each ref downloads its own
    s = await site((ref("v1.0"), develop), default_refs=True)
    before = await s.publish("v1.0", "develop")
    # a release that changes on the mirror is not expected; it proves nothing is read
    s.rebuild(ref("v1.0", NEXT), develop)

    done = await s.sync("v1.0", "develop", quiet=False)

    assert done.code == 6, done.err
    assert "v1.0: skipped: immutable and published" in done.err
    assert "develop: unchanged: output is current" in done.err
    assert [p for p, _ in s.server.requests if p.startswith("/v1.0/")] == []
    assert s.server.hits(s.path("develop")) == 1  # develop is mutable: re-checked
    assert s.report("v1.0")["status"] == "skipped"
    assert tree_bytes(s.out / "v1.0") == before["v1.0"]

    forced = await s.sync("v1.0", "develop", flags=["--force"])

    assert (forced.code, forced.err) == (0, "")
    assert s.server.hits(s.path("v1.0")) == 1
    assert "cmake" in s.index("v1.0")["packages"]
    assert tree_bytes(s.out / "develop") == before["develop"]


@pytest.mark.parametrize(
    "damage",
    [
        "index-truncated",
        "page-deleted",
        "page-renamed",
        "pages-asked-for",
        "state-of-another-version",
    ],
)
async def test_an_immutable_ref_whose_output_is_not_as_published_is_synced_again(
    site: MakeSite, damage: str
) -> None:
    """An immutable ref is skipped once published, but only while its output is what was
    published, in the formats asked for: a damaged index.json, a deleted page or pages asked
    for now are repaired (from the cache), as for a mutable branch. Skipped, it stayed broken
    for good, 'crawler verify' failing, and metrics counting it a success. A state written by
    another version of the tool (after an upgrade) still tells what was published."""
    s = await site(
        (ref("v1.0"),),
        default_refs=True,
        formats=["json"] if damage == "pages-asked-for" else ["json", "pages"],
    )
    assert (await s.sync("v1.0")).code == 0
    folder = s.out / "v1.0"
    if damage == "index-truncated":
        (folder / "index.json").write_bytes((folder / "index.json").read_bytes()[:100])
    elif damage == "state-of-another-version":
        state = s.out / ".crawler" / "state" / "v1.0.json"
        state.write_text(state.read_text().replace(f'"version":"{__version__}"', '"version":"0.1"'))
        (folder / "index.json").write_bytes((folder / "index.json").read_bytes()[:100])
    elif damage == "page-deleted":
        (folder / "pages" / "zlib" / "specs.md").unlink()
    elif damage == "page-renamed":  # as many pages as packages, but not theirs
        (folder / "pages" / "zlib").rename(folder / "pages" / "zlib-ng")
    else:
        s.config.write_text(
            yaml.safe_dump({**yaml.safe_load(s.config.read_text()), "formats": ["json", "pages"]})
        )

    done = await s.sync("v1.0", quiet=False)

    assert done.code == 0, done.err
    assert "v1.0: immutable, but its output is not as published: syncing it" in done.err
    assert (folder / "pages" / "zlib" / "specs.md").is_file()
    assert not (folder / "pages" / "zlib-ng").exists()
    if damage == "page-deleted":  # repaired by a run asking for json alone: the pages stay
        (folder / "pages" / "zlib" / "specs.md").unlink()
        assert (await s.sync("v1.0", flags=["--format", "json"])).code == 0
        assert {p.parent.name for p in (folder / "pages").glob("*/specs.md")} == {
            spec.name for spec in SPECS
        }
    assert s.index("v1.0")["stats"]["specs"] == len(SPECS)
    assert (await s.sync("v1.0")).code == 6
    assert s.report("v1.0")["status"] == "skipped"


@pytest.mark.parametrize("damaged", [False, True], ids=["intact", "damaged"])
async def test_an_immutable_ref_without_a_record_of_its_publish_is_checked_by_its_files(
    site: MakeSite, damaged: bool
) -> None:
    """Without its state (``.crawler/`` deleted, or a run killed between the swap and the
    save), an immutable ref's files are checked as they are: whole, it is skipped without a
    request; cut or missing a page, it is synced, which repairs it and records the publish.
    It used to be skipped for good, damage and all, every run passing while ``crawler
    verify`` failed."""
    s = await site((ref("v1.0"),), default_refs=True, formats=["json", "pages"])
    assert (await s.sync("v1.0")).code == 0
    folder = s.out / "v1.0"
    before = _index_and_pages(folder)
    (s.out / ".crawler" / "state" / "v1.0.json").unlink()
    if damaged:
        (folder / "index.json").write_bytes((folder / "index.json").read_bytes()[:100])
        shutil.rmtree(folder / "pages" / "zlib")
    s.server.requests.clear()

    done = await s.sync("v1.0", quiet=False)

    if not damaged:
        assert done.code == 6 and "v1.0: skipped: immutable and published" in done.err
        assert [path for path, _ in s.server.requests] == ["/cache_spack_io_index.json"]
        return
    assert done.code == 0, done.err
    assert "v1.0: immutable, but its output is not as published: syncing it" in done.err
    assert _index_and_pages(folder) == before
    assert (s.out / ".crawler" / "state" / "v1.0.json").is_file()
    again = await s.sync("v1.0", quiet=False)
    assert again.code == 6 and "v1.0: skipped: immutable and published" in again.err


async def test_stacks_missing_at_a_publish_are_looked_for_once_a_run_where_head_tells_nothing(
    site: MakeSite,
) -> None:
    """Each immutable ref that would be skipped has its stacks missing at its publish looked
    for with one HEAD, not retried. A server that does not allow HEAD (405, as this one) tells
    nothing: the ref is skipped, and no other ref is looked at in that run, so a run over
    hundreds of refs does not wait on each."""
    refs = [SynthRef(name, SPECS, extra_stacks=("s3",)) for name in ("v1.0", "v1.1")]
    s = await site(refs, default_refs=True)
    assert (await s.sync("v1.0", "v1.1")).code == 0
    s.server.requests.clear()

    done = await s.sync("v1.0", "v1.1", flags=["-v"], quiet=False)

    assert done.code == 6, done.err
    assert [p for p, _ in s.server.requests] == ["/cache_spack_io_index.json"]  # no GET
    heads = [line for line in done.err.splitlines() if " DEBUG HEAD " in line]
    assert len(heads) == 1 and heads[0].endswith(f"HEAD {s.location('v1.0', 's3')}: HTTP 405")
    assert (
        f"{s.location('v1.0', 's3')}: a HEAD request does not tell whether it is there now; "
        "stacks missing when their ref was published are not looked for again in this run"
    ) in done.err
    assert done.err.count("skipped: immutable and published") == 2


async def test_a_stack_missing_at_a_publish_that_comes_back_broken_leaves_the_ref_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stack found again is synced as one the ref was published without: if it fails, the
    ref is published partial (exit 5), not failed every night (exit 4)."""
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("v1.0", SPECS, extra_stacks=("s3",))])
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(root.as_uri(), tmp_path / "out")))
    argv = ["sync", "--branch", "v1.0", "--config", str(config), "-q"]
    assert await main_async(argv) == 0
    s3 = root / "v1.0" / "s3" / "build_cache" / "index.json"
    s3.parent.mkdir(parents=True)
    s3.write_text('{"database": {"version": "5", "installs": {}}}')

    assert await main_async(argv) == 5
    assert await main_async(argv) == 5
    statuses = {
        source["label"]: source["status"]
        for source in json.loads((tmp_path / "out" / "v1.0" / "index.json").read_bytes())["sources"]
    }
    assert statuses == {"root": "ok", "s1": "ok", "s2": "ok", "s3": "failed"}
    assert "unsupported database version '5'" in capsys.readouterr().err


def _index_and_pages(folder: Path) -> dict[str, bytes]:
    """What a repair restores (it writes a changes.json and a report.json of its own)."""
    return {k: v for k, v in tree_bytes(folder).items() if k == "index.json" or "/" in k}


@pytest.mark.parametrize(
    "flags", [["--format", "json"], ["--format", "pages"], ["--format", "pages", "old-state"]]
)
async def test_an_immutable_ref_stays_put_whatever_the_formats_are_spelt_or_narrowed_to(
    site: MakeSite, flags: list[str]
) -> None:
    """Published with pages (asked for in the config as ``[pages]``): a run asking for them as
    ``--format pages`` (json is always written) finds it as published, and one asking for json
    alone leaves its pages, as an old ref should stay put. Before, both republished it. A state
    written before formats were normalised recorded ``[pages]`` alone: the same."""
    s = await site((ref("v1.0"),), default_refs=True, formats=["pages"])
    assert (await s.sync("v1.0")).code == 0
    before = tree_bytes(s.out / "v1.0")
    if flags[-1] == "old-state":
        flags = flags[:-1]
        state = s.out / ".crawler" / "state" / "v1.0.json"
        state.write_text(
            state.read_text().replace('"formats":["json","pages"]', '"formats":["pages"]')
        )
        assert '"formats":["pages"]' in state.read_text()

    done = await s.sync("v1.0", flags=flags)

    assert done.code == 6, done.err
    assert s.report("v1.0")["status"] == "skipped"
    assert tree_bytes(s.out / "v1.0") == before


async def test_an_immutable_ref_whose_index_was_deleted_is_repaired_with_its_pages(
    site: MakeSite,
) -> None:
    """A release published with pages, whose index.json was deleted, repaired by a run asking
    for json alone: it is published again as it was, pages included (they were all deleted)."""
    s = await site((ref("v1.0"),), default_refs=True, formats=["json", "pages"])
    assert (await s.sync("v1.0")).code == 0
    pages = {p.parent.name for p in (s.out / "v1.0" / "pages").glob("*/specs.md")}
    (s.out / "v1.0" / "index.json").unlink()

    assert (await s.sync("v1.0", flags=["--format", "json"])).code == 0

    assert {p.parent.name for p in (s.out / "v1.0" / "pages").glob("*/specs.md")} == pages
    assert (await s.sync("v1.0", flags=["--format", "json"])).code == 6


async def test_a_forced_immutable_ref_asked_for_in_json_alone_is_unchanged(
    site: MakeSite,
) -> None:
    """Published with pages, then synced with --force asking for json alone: the run would
    write its pages too (it stays put), so it finds the output current. It used to compare with
    json alone, and republished the ref, every page and a '+0 specs' changes.json, each time."""
    s = await site((ref("v1.0"),), default_refs=True, formats=["json", "pages"])
    assert (await s.sync("v1.0")).code == 0
    before = tree_bytes(s.out / "v1.0")

    for _ in range(2):
        done = await s.sync("v1.0", flags=["--force", "--format", "json"])
        assert done.code == 6, done.err
        assert s.report("v1.0")["status"] == "unchanged"
    assert tree_bytes(s.out / "v1.0") == before


@pytest.mark.parametrize("state", ["kept", "lost"])
async def test_an_immutable_ref_published_without_a_stack_is_synced_until_complete(
    site: MakeSite, state: str
) -> None:
    """A release published as partial (a stack failed, within the budget) is not "published"
    for good: it is synced again, by its state or else its report.json, until every stack is
    in; then it is skipped as any other."""
    s = await site((ref("v1.0"),), default_refs=True)
    s2 = s.mirror / s.path("v1.0", "s2")
    good = s2.read_bytes()
    s2.write_bytes(b"{not json")
    assert (await s.sync("v1.0", flags=["--max-failed-stacks=1"])).code == 5
    assert s.report("v1.0")["failed_stacks"] == ["s2"]
    partial = tree_bytes(s.out / "v1.0")
    if state == "lost":
        shutil.rmtree(s.out / ".crawler")

    # still failing: that stack does not fail the ref (beyond the budget), which stays partial;
    # --force, which lifts restrictions, does not make it stricter
    for flags in ([], ["--force"]):
        still = await s.sync("v1.0", flags=flags)
        assert still.code == 5, (flags, still.err)
        assert s.report("v1.0")["status"] == "partial"
        assert tree_bytes(s.out / "v1.0").keys() == partial.keys()
    s2.write_bytes(good)

    done = await s.sync("v1.0", quiet=False)

    assert done.code == 0, done.err
    assert "v1.0: immutable, but published without some stacks: syncing it" in done.err
    assert s.report("v1.0")["status"] == "published"
    assert all(source["status"] == "ok" for source in s.index("v1.0")["sources"])
    assert (await s.sync("v1.0")).code == 6
    assert s.report("v1.0")["status"] == "skipped"


@pytest.mark.parametrize(
    "report",
    [
        pytest.param(None, id="no-report"),
        pytest.param({"status": "partial"}, id="no-failed-stacks"),
        pytest.param({"status": "partial", "failed_stacks": 5}, id="failed-stacks-a-number"),
        pytest.param({"status": "partial", "failed_stacks": "s2"}, id="failed-stacks-a-string"),
        pytest.param([], id="not-an-object"),
    ],
)
@pytest.mark.damages_output  # its report.json, on purpose
async def test_an_immutable_ref_whose_publish_cannot_be_told_is_synced_and_excuses_nothing(
    site: MakeSite, report: object
) -> None:
    """Without a state (``.crawler/`` deleted) and a report.json that says which stacks it was
    published without, an immutable ref is synced again, and any failing stack fails it: the
    output stays as published, whatever the report held."""
    s = await site((ref("v1.0"),), default_refs=True)
    s2 = s.mirror / s.path("v1.0", "s2")
    s2.write_bytes(b"{not json")
    assert (await s.sync("v1.0", flags=["--max-failed-stacks=1"])).code == 5
    shutil.rmtree(s.out / ".crawler")
    if report is None:
        (s.out / "v1.0" / "report.json").unlink()
    else:
        (s.out / "v1.0" / "report.json").write_text(json.dumps(report))
    before = tree_bytes(s.out / "v1.0")

    done = await s.sync("v1.0")

    assert done.code == 4, done.err
    assert "1 stack(s) failed (publish.max_failed_stacks is 0): s2" in done.err
    assert tree_bytes(s.out / "v1.0") == before


async def test_an_immutable_ref_never_loses_a_stack_it_holds_past_the_budget(
    site: MakeSite,
) -> None:
    """Published without s2 (budget 1), then s1 fails too: s2 alone is excused, so two failed
    stacks are over the budget and the ref keeps the s1 it was published with."""
    s = await site((ref("v1.0"),), default_refs=True, publish={"max_failed_stacks": 1})
    s1, s2 = (s.mirror / s.path("v1.0", label) for label in ("s1", "s2"))
    s2.write_bytes(b"{not json")
    assert (await s.sync("v1.0")).code == 5
    before = tree_bytes(s.out / "v1.0")
    s1.write_bytes(b"{not json")

    done = await s.sync("v1.0")

    assert done.code == 4, done.err
    assert tree_bytes(s.out / "v1.0") == before


# --- 3. the failure budget --------------------------------------------------------------------


async def test_a_failed_stack_fails_the_branch_without_a_budget(site: MakeSite) -> None:
    s = await site((ref("a"),))
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    s.server.script(s.path("a", "s1"), *[Fault(500)] * 3)

    done = await s.sync("a")

    assert done.code == 4
    expected = (
        "branch a failed: 1 stack(s) failed (publish.max_failed_stacks is 0): "
        f"s1: cannot fetch {s.location('a', 's1')}: HTTP 500 after 3 attempts"
    )
    assert expected in done.err
    assert s.report("a")["error"] == expected
    assert tree_bytes(s.out / "a") == before


async def test_a_failed_stack_within_the_budget_publishes_partial(site: MakeSite) -> None:
    s = await site((ref("a"),))
    await s.publish("a")
    s.rebuild(ref("a", NEXT))
    s.server.script(s.path("a", "s1"), *[Fault(500)] * 3)

    done = await s.sync("a", flags=["--max-failed-stacks", "1"], quiet=False)

    assert done.code == 5, done.err
    lines = done.err.splitlines()
    failure = f"a s1: failed (cannot fetch {s.location('a', 's1')}: HTTP 500 after 3 attempts)"
    assert any(" ERROR " in line and line.endswith(failure) for line in lines), done.err
    assert f" INFO a: partial {s.out / 'a'}: +1 spec, -0 specs (3 -> 4)" in lines[-1]
    index = s.index("a")
    s1 = next(source for source in index["sources"] if source["label"] == "s1")
    assert (s1["status"], s1["sha256"], s1["records"]) == ("failed", None, None)
    assert index["stats"]["sources_failed"] == 1
    stacks = {d["hash"]: d["stacks"] for p in index["packages"].values() for d in p["spec_details"]}
    assert stacks[CMAKE.dag_hash] == ["root", "s2"]  # s1 could not say
    report = json.loads((s.out / "a" / "report.json").read_bytes())
    assert (report["status"], report["failed_stacks"]) == ("partial", ["s1"])
    assert verify_branch(s.out / "a") == []


async def test_a_stack_that_keeps_failing_keeps_the_branch_partial(site: MakeSite) -> None:
    """The next run, with the same stack still failing, changes nothing, but the published
    branch still lacks that stack: it must still say so (exit 5, status partial), or a cron
    check on the exit code, or the ``branch_status{status="partial"}`` alert that
    crawler/ops/metrics.py recommends, clears while the stack is still broken."""
    s = await site((ref("a"),))
    await s.publish("a")
    s.rebuild(ref("a", NEXT))
    s.server.script(s.path("a", "s1"), *[Fault(500)] * 3)
    assert (await s.sync("a", flags=["--max-failed-stacks=1"])).code == 5
    published = tree_bytes(s.out / "a")
    s.server.script(s.path("a", "s1"), *[Fault(500)] * 3)

    again = await s.sync("a", flags=["--max-failed-stacks=1"])

    failure = f"a s1: failed (cannot fetch {s.location('a', 's1')}: HTTP 500 after 3 attempts)"
    assert failure in again.err
    assert tree_bytes(s.out / "a") == published
    assert (again.code, s.report("a")["status"]) == (5, "partial")


async def test_a_failed_root_fails_the_branch_whatever_the_budget(site: MakeSite) -> None:
    s = await site((ref("a"),))
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    s.server.script(s.path("a"), *[Fault(500)] * 3)

    done = await s.sync("a", flags=["--max-failed-stacks", "10"])

    assert done.code == 4
    assert (
        f"branch a failed: root index failed: cannot fetch {s.location('a')}: "
        "HTTP 500 after 3 attempts"
    ) in done.err
    assert done.err.endswith("error: 1 branch(es) failed: a\n")
    assert tree_bytes(s.out / "a") == before


@pytest.mark.parametrize("fault", [Fault(404), Fault(body=b"not an index")], ids=["404", "bad"])
async def test_a_root_that_fails_stops_the_other_downloads(site: MakeSite, fault: Fault) -> None:
    """The branch fails whatever its stacks hold: they are not waited for, nor decoded."""
    s = await site((ref("a"),), timeouts=SLOW)
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    s.server.script(s.path("a"), fault)
    s.server.delay("s1/build_cache/index.json", 30)  # would outlast the test's timeout
    s.server.delay("s2/build_cache/index.json", 30)
    started = time.monotonic()

    done = await s.sync("a", quiet=False)

    assert time.monotonic() - started < 10
    assert done.code == 4 and "root index" in done.err
    statuses = {e["label"]: e["status"] for e in s.report("a")["sources"]}
    assert statuses == {"root": statuses["root"], "s1": "not_read", "s2": "not_read"}
    assert statuses["root"] in ("missing", "failed")
    s1 = s.source_report("a", "s1")
    assert s1["error"] == "not read: the root index is missing or unusable"
    assert f"a: root index {statuses['root']}: 2 sources not read" in done.err
    assert s.server.arrivals("s1/build_cache/index.json") == 1  # started, then stopped
    assert s.leftovers() == []
    assert tree_bytes(s.out / "a") == before


# --- 4. exit codes across runs and branches ---------------------------------------------------


async def test_exit_6_when_nothing_changed_and_0_when_something_did(site: MakeSite) -> None:
    s = await site((ref("a"),))
    before = (await s.publish("a"))["a"]

    again = await s.sync("a", quiet=False)

    assert again.code == 6
    assert (
        again.err.splitlines()[-1]
        .split(" INFO ", 1)[1]
        .startswith("a: unchanged: output is current (")
    )
    assert tree_bytes(s.out / "a") == before

    s.rebuild(ref("a", NEXT))
    moved = await s.sync("a")

    assert (moved.code, moved.err) == (0, "")
    assert "cmake" in s.index("a")["packages"]


async def test_the_most_serious_branch_outcome_decides_the_exit_code(site: MakeSite) -> None:
    s = await site((ref("a"), ref("b")))
    before = await s.publish("a", "b")
    s.rebuild(ref("a", NEXT), ref("b", NEXT))
    s.server.script(s.path("a"), *[Fault(500)] * 3)

    failed_and_published = await s.sync("a", "b")

    assert failed_and_published.code == 4
    assert failed_and_published.err.endswith("error: 1 branch(es) failed: a\n")
    assert tree_bytes(s.out / "a") == before["a"]
    assert "cmake" in s.index("b")["packages"]

    s.server.script(s.path("a", "s2"), *[Fault(500)] * 3)
    partial_and_unchanged = await s.sync("a", "b", flags=["--max-failed-stacks=1"])

    assert partial_and_unchanged.code == 5, partial_and_unchanged.err
    assert "branch(es) failed" not in partial_and_unchanged.err
    assert (s.report("a")["status"], s.report("b")["status"]) == ("partial", "unchanged")


# --- 5. changes.json --------------------------------------------------------------------------


async def test_changes_json_and_the_last_log_line_say_what_changed(site: MakeSite) -> None:
    s = await site((ref("a"),))
    first = await s.sync("a", quiet=False)
    assert first.code == 0, first.err
    assert "a: first publish, 3 specs in 3 packages" in first.err.splitlines()[-1]
    # zlib goes, cmake comes, py-numpy moves from stack s2 to s1 (same hash)
    moved = SynthSpec("py-numpy", "2.0.0", compiler=None, stacks=("s1",))
    s.rebuild(ref("a", (HDF5, moved, CMAKE)))

    done = await s.sync("a", quiet=False)

    assert done.code == 0, done.err
    changes = json.loads((s.out / "a" / "changes.json").read_bytes())
    assert set(changes.pop("removed_specs")) == set(changes["removed"])  # named: test_changes
    assert changes == {
        "branch": "a",
        "first_publish": False,
        "added": {"cmake": [CMAKE.dag_hash]},
        "removed": {"zlib": [ZLIB.dag_hash]},
        "by_stack": {
            "root": {"added": 1, "removed": 1},
            "s1": {"added": 2, "removed": 1},
            "s2": {"added": 1, "removed": 1},
        },
        "packages_added": ["cmake"],
        "packages_removed": ["zlib"],
        "totals": {"specs_before": 3, "specs_after": 3, "added": 1, "removed": 1},
    }
    last = done.err.splitlines()[-1]
    line = "a: +1 spec, -1 spec (3 -> 3), 1 package added, 1 removed"
    assert summary_line(msgspec.convert(changes, Changes)) == line
    # The log names the branch once: "a: published <folder>: +1 spec, ..."
    assert f" INFO a: published {s.out / 'a'}: {line.removeprefix('a: ')} (" in last
    assert s.report("a")["changes"] == changes["totals"]


# --- 6. the run lock --------------------------------------------------------------------------


async def test_a_live_lock_holder_makes_sync_exit_7_at_once(
    site: MakeSite, tmp_path: Path, holders: list[LockHolder]
) -> None:
    s = await site((ref("a"),))
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    holder = LockHolder(s.out, 30)
    holders.append(holder)

    started = time.monotonic()
    done = await run_cli(*s.argv("a"), cwd=tmp_path)
    elapsed = time.monotonic() - started

    assert done.code == 7
    assert done.err.startswith(
        f"error: output folder is locked by another crawler run: pid {holder.pid} "
        f"on {socket.gethostname()} (started "
    )
    assert f"(lock file {s.out / '.crawler' / 'lock'})" in done.err
    assert elapsed < 5, f"a busy lock took {elapsed:.1f}s to report"
    assert s.server.requests == []  # not even the discovery document was read
    assert tree_bytes(s.out / "a") == before


async def test_lock_wait_outlasts_a_holder_that_finishes(
    site: MakeSite, holders: list[LockHolder]
) -> None:
    s = await site((ref("a"),), lock_wait=2)
    holder = LockHolder(s.out, 0.5)
    holders.append(holder)

    started = time.monotonic()
    done = await s.sync("a")

    assert (done.code, done.err) == (0, "")
    assert time.monotonic() - started >= 0.2  # it did wait for the holder
    assert holder.process.poll() == 0
    assert s.index("a")["stats"]["specs"] == 3


async def test_a_stale_lock_of_a_dead_process_is_broken_and_logged(site: MakeSite) -> None:
    s = await site((ref("a"),))
    pid, host = dead_pid(), socket.gethostname()
    lock = s.out / ".crawler" / "lock"
    lock.parent.mkdir(parents=True)
    started = "2025-04-20T02:30:00+00:00"
    lock.write_text(json.dumps({"pid": pid, "host": host, "started_at": started}))

    done = await s.sync("a")

    assert done.code == 0, done.err
    assert f"WARNING broke stale lock of pid {pid} on {host} (started {started})" in done.err
    assert lock.read_bytes() == b""  # released cleanly this time
    assert verify_branch(s.out / "a") == []


# --- 7. two runs at once ----------------------------------------------------------------------


async def test_two_runs_at_once_one_publishes_the_other_exits_7(
    site: MakeSite, tmp_path: Path
) -> None:
    s = await site((ref("a"),), timeouts=SLOW)
    s.server.delay(s.path("a"), 2.0)  # the first run holds the lock for at least that long

    procs = [await start_cli(*s.argv("a"), cwd=tmp_path) for _ in range(2)]
    done = await asyncio.gather(*(finish(p) for p in procs))

    assert sorted(d.code for d in done) == [0, 7], [d.err for d in done]
    winner = 0 if done[0].code == 0 else 1
    assert done[winner].err == ""
    # the holder is named, unless the loser looked in the instant between the winner's flock
    # and its writing of the lock file (then "an unknown process")
    assert re.search(
        rf"locked by another crawler run: (pid {procs[winner].pid} |an unknown process)",
        done[1 - winner].err,
    ), done[1 - winner].err
    assert s.server.arrivals(s.path("a")) == 1  # only the winner read the index
    assert s.index("a")["stats"]["specs"] == 3
    assert verify_branch(s.out / "a") == []
    assert s.leftovers() == []


async def test_two_runs_at_once_with_lock_wait_run_one_after_the_other(
    site: MakeSite, tmp_path: Path
) -> None:
    s = await site((ref("a"),), lock_wait=20, timeouts=SLOW)
    s.server.delay(s.path("a"), 1.0)

    procs = [await start_cli(*s.argv("a"), cwd=tmp_path) for _ in range(2)]
    done = await asyncio.gather(*(finish(p) for p in procs))

    # the second finds the first one's output current
    assert sorted(d.code for d in done) == [0, 6], [d.err for d in done]
    assert [d.err for d in done] == ["", ""]
    assert s.server.arrivals(s.path("a")) == 2
    assert s.index("a")["stats"]["specs"] == 3
    assert verify_branch(s.out / "a") == []
    assert s.leftovers() == []


# --- 8. SIGKILL at any moment -----------------------------------------------------------------

BIG_STACKS = ("s1", "s2", "s3", "s4", "s5")
BIG_PACKAGES = 600  # enough that the output takes a while to stage


async def test_sigkill_at_any_moment_leaves_the_published_branch_whole(
    site: MakeSite, tmp_path: Path
) -> None:
    s = await site(
        (SynthRef("big", tuple(generate_specs(11, BIG_PACKAGES, stacks=BIG_STACKS))),),
        timeouts=SLOW,
    )
    before = (await s.publish("big"))["big"]
    assert verify_branch(s.out / "big", schema=False) == []
    # the mirror moves on (50 more packages, every index changes): a run has work to do
    more = generate_specs(11, BIG_PACKAGES + 50, stacks=BIG_STACKS)
    s.rebuild(SynthRef("big", tuple(more)))
    s.server.delay("/index.json", 1.0)  # every index answer takes a second
    staging = s.out / ".crawler" / "staging"

    def staged() -> bool:
        return staging.is_dir() and any(staging.glob("new-big.*"))

    moments: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        # start-up, the downloads, the publish: one kill each (the release check's interrupt
        # trials stop runs at sixty random moments)
        ("after 0.2s", lambda: asyncio.sleep(0.2)),
        ("mid-download", lambda: until(lambda: s.server.arrivals("/index.json") > 0, "a GET")),
        ("once staging exists", lambda: until(staged, "the staging folder")),
    ]
    pid = 0
    for moment, reach in moments:
        s.server.arrived.clear()
        proc = await start_cli(*s.argv("big"), cwd=tmp_path)
        await reach()
        done, _ = await kill9(proc)  # stray workers: see the next test
        pid = proc.pid

        assert done.code == -signal.SIGKILL, f"{moment}: the run ended by itself: {done.err}"
        assert tree_bytes(s.out / "big") == before, f"killed {moment}, the output changed"
        assert json.loads((s.out / "big" / "index.json").read_bytes())["branch"] == "big"
    assert verify_branch(s.out / "big", schema=False) == []

    s.server.delays.clear()
    final = await s.sync("big")  # the next run, in this process, cleans up after the killed ones

    assert final.code == 0, final.err
    assert f"WARNING broke stale lock of pid {pid} on {socket.gethostname()}" in final.err
    assert re.search(r"removed new-big\.\w+ left by an interrupted run", final.err)  # staging
    assert s.leftovers() == []
    assert s.index("big")["stats"]["packages"] == BIG_PACKAGES + 50
    assert verify_branch(s.out / "big", schema=False) == []


async def test_sigkill_leaves_no_decoding_processes_behind(site: MakeSite, tmp_path: Path) -> None:
    """A crawler killed by the OOM killer or a supervisor's SIGKILL must not leave its decoding
    workers running: they would live forever, holding memory and the run's stdout and stderr
    (a cron job whose output pipe never closes never ends)."""
    s = await site((ref("a"),), timeouts=SLOW)
    # The stacks are decoded meanwhile; the workers stay up for the root (they are stopped
    # once its pieces are back).
    s.server.delay(s.path("a"), 30)
    proc = await start_cli(*s.argv("a"), cwd=tmp_path)
    await until(lambda: s.server.arrivals(s.path("a")) > 0, "the download of the root")
    # give the decoding of the stacks (and so the worker processes) time to start
    with contextlib.suppress(AssertionError):
        await until(lambda: len(session_members(proc.pid)) >= 4, "decoding workers", 3)

    done, survivors = await kill9(proc)

    assert done.code == -signal.SIGKILL
    assert survivors == [], "processes of the killed crawler still running:\n" + "\n".join(
        survivors
    )


async def test_sigkill_leaves_no_decoding_processes_behind_before_it_is_reaped(
    site: MakeSite, tmp_path: Path
) -> None:
    """A parent that reads the run's output to its end before reaping it (cron's mailer,
    ``out=$(crawler sync ...)``, ``subprocess.run(capture_output=True)``) keeps a killed crawler
    a zombie until its pipes close. The workers, which only asked whether its pid existed,
    waited for ever holding those pipes, and the parent with them."""
    s = await site((ref("a"),), timeouts=SLOW)
    s.server.delay(s.path("a"), 30)  # the stacks are decoded meanwhile (see above)
    command = [sys.executable, "-m", "crawler", *s.argv("a")]
    pipes = subprocess.PIPE
    # subprocess, not asyncio: asyncio's child watcher would reap the crawler as it dies
    proc = subprocess.Popen(  # noqa: ASYNC220 - started, not waited for, here
        command, cwd=tmp_path, env=cli_env(), stdout=pipes, stderr=pipes, start_new_session=True
    )
    _GROUPS.append(proc.pid)
    try:
        await until(lambda: s.server.arrivals(s.path("a")) > 0, "the download of the root")
        await until(lambda: len(session_members(proc.pid)) >= 4, "decoding workers", 10)

        os.kill(proc.pid, signal.SIGKILL)

        # group_members leaves zombies out: the crawler itself, not reaped yet
        await until(lambda: not session_members(proc.pid), "its processes to end", 5, every=0.05)
        assert Path(f"/proc/{proc.pid}").exists()  # still unreaped: the case at hand
    finally:
        end_group(proc.pid)
        await asyncio.to_thread(proc.communicate)
    assert proc.returncode == -signal.SIGKILL


# --- 9. SIGTERM and SIGINT --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "code"),
    [
        pytest.param(signal.SIGTERM, 143, id="SIGTERM"),
        pytest.param(signal.SIGINT, 130, id="INT"),
        pytest.param(signal.SIGHUP, 129, id="HUP"),  # used to end it at once, leaving its files
    ],
)
@pytest.mark.parametrize("group", [False, True], ids=["process", "group"])
async def test_a_signal_during_downloads_stops_cleanly(
    site: MakeSite, tmp_path: Path, signum: signal.Signals, code: int, group: bool
) -> None:
    """Sent to the process, or to its whole group as Ctrl-C and a closed terminal do: then
    its decoding processes and Python's resource tracker get it too, and used to print
    tracebacks (KeyboardInterrupt; the tracker killed by SIGHUP)."""
    s = await site((ref("a"),), timeouts=SLOW)
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    s.server.delay(s.path("a", "s2"), 30)
    proc = await start_cli(*s.argv("a"), cwd=tmp_path)
    await until(lambda: s.server.arrivals(s.path("a", "s2")) > 0, "the download of s2")
    if group:  # the decoding processes are under way
        await until(lambda: len(session_members(proc.pid)) >= 3, "the decoding processes", 10)

    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    started = time.monotonic()
    done = await finish(proc)

    assert time.monotonic() - started < 5
    assert done.code == code
    assert f"WARNING received {signum.name}, stopping" in done.err
    assert done.err.endswith(f"interrupted by {signum.name}; published output untouched\n")
    assert "Traceback" not in done.err, done.err
    assert tree_bytes(s.out / "a") == before
    assert s.leftovers() == []
    assert (s.out / ".crawler" / "lock").read_bytes() == b""  # released


async def test_sighup_is_left_ignored_under_nohup(site: MakeSite, tmp_path: Path) -> None:
    s = await site((ref("a"),), timeouts=SLOW)
    s.server.delay(s.path("a", "s2"), 1)
    proc = await start_cli(*s.argv("a"), cwd=tmp_path, prefix=["nohup"])
    await until(lambda: s.server.arrivals(s.path("a", "s2")) > 0, "the download of s2")

    proc.send_signal(signal.SIGHUP)
    done = await finish(proc)

    assert done.code == 0, done.err
    assert "SIGHUP" not in done.err
    assert (s.out / "a" / "index.json").is_file()


async def test_a_signal_while_the_branch_is_written_stops_before_the_publish(
    site: MakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Consolidating and writing a branch is synchronous work (seconds for a large one): a
    SIGTERM that comes meanwhile must still stop the run before the new branch is swapped in,
    not be dropped when the run ends. The signal is sent as the first page is rendered."""
    s = await site((ref("a"),))
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    write = crawler.output.stage.BranchStage.write

    def write_and_signal(stage: crawler.output.stage.BranchStage, name: str, data: bytes) -> None:
        if name.startswith("pages/"):
            monkeypatch.setattr(crawler.output.stage.BranchStage, "write", write)
            os.kill(os.getpid(), signal.SIGTERM)
        write(stage, name, data)

    monkeypatch.setattr(crawler.output.stage.BranchStage, "write", write_and_signal)

    done = await s.sync("a")

    assert done.code == 143
    assert done.err.endswith("interrupted by SIGTERM; published output untouched\n")
    assert tree_bytes(s.out / "a") == before
    assert s.leftovers() == []


async def test_a_signal_during_a_swap_lets_that_branch_stand_and_says_so(
    site: MakeSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal that comes while a branch is swapped in is handled after the swap: that branch
    is published, the next one is not started, and the message says which is which."""
    s = await site((ref("a"), ref("b", NEXT)))
    swap = crawler.output.stage.BranchStage.publish

    def swap_and_signal(stage: crawler.output.stage.BranchStage) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        swap(stage)

    monkeypatch.setattr(crawler.output.stage.BranchStage, "publish", swap_and_signal)

    done = await s.sync("a", "b")

    assert done.code == 143
    assert done.err.endswith(
        "interrupted by SIGTERM after a (published); the rest of the output untouched\n"
    )
    assert (s.out / "a" / "index.json").is_file()
    assert not (s.out / "b").exists()
    assert s.leftovers() == []


#: ``crawler`` whose lock is not released when a run stops: its clean stop then never ends.
#: ``crawler`` whose lock is not released when a run stops: its clean stop then never ends.
_STUCK_STOP = (
    "import time, crawler.output.lock as m; m.RunLock.release = lambda self: time.sleep(60)"
)
#: ``crawler`` whose event loop is blocked for 30 s once the lock is taken (as a long
#: synchronous stretch would: a branch's output built, a busy disk's flush).
_BLOCKED_LOOP = (
    "import time, crawler.mirror.fetch as m; m.Fetcher.read = lambda *a, **k: time.sleep(30)"
)


def _lock_free(out: Path) -> bool:
    with open(out / ".crawler" / "lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(lock, fcntl.LOCK_UN)
    return True


async def _start_stuck_stop(
    s: Site, tmp_path: Path, patch: str = _STUCK_STOP
) -> asyncio.subprocess.Process:
    """``crawler sync`` with ``patch`` applied, once it has started the download of ``s2``
    (or, for :data:`_BLOCKED_LOOP`, blocked its loop)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        f"{patch}\nfrom crawler.cli.entry import run\nrun()\n",
        *s.argv("a"),
        cwd=tmp_path,
        env=cli_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,  # the SIGINT it is sent must not be ignored
    )
    _GROUPS.append(proc.pid)
    if patch == _BLOCKED_LOOP:
        lock = s.out / ".crawler" / "lock"
        await until(lambda: lock.is_file() and lock.stat().st_size > 0, "the lock taken")
        await asyncio.sleep(0.3)
    else:
        await until(lambda: s.server.arrivals(s.path("a", "s2")) > 0, "the download of s2")
    return proc


@pytest.mark.parametrize("patch", [_STUCK_STOP, _BLOCKED_LOOP], ids=["stuck-stop", "blocked-loop"])
async def test_a_stop_that_does_not_end_is_ended_after_its_grace(
    site: MakeSite, tmp_path: Path, patch: str
) -> None:
    """Whatever keeps a stopping run from ending (releasing its lock never returns; the event
    loop blocked, so that the stop cannot even start), the process ends within a few seconds
    of the signal, with the signal's code; the kernel releases the lock, and the next run
    removes what it staged. (The blocked loop took 28.7 s: the watchdog waited for the loop.)"""
    s = await site((ref("a"),), timeouts=SLOW)
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    s.server.delay(s.path("a", "s2"), 30)
    proc = await _start_stuck_stop(s, tmp_path, patch)

    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    done = await finish(proc)

    assert 4 < time.monotonic() - started < 8
    assert done.code == 143, done.err
    # (Python's resource tracker may add a warning as it removes the pool's semaphores.)
    assert (
        "error: the run did not stop within 5 s of SIGTERM; ended at once" in done.err.splitlines()
    )
    assert _lock_free(s.out)
    await until(lambda: session_members(proc.pid) == [], "the run's processes to end", 5)
    assert tree_bytes(s.out / "a") == before
    s.server.delays.clear()  # else the next run, too, waits 30 s for s2
    assert (await s.sync("a")).code == 0
    assert s.leftovers() == []


async def test_a_second_signal_ends_a_stopping_run_at_once(site: MakeSite, tmp_path: Path) -> None:
    """The exit code stays the first signal's: the run was stopping because of it."""
    s = await site((ref("a"),), timeouts=SLOW)
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    s.server.delay(s.path("a", "s2"), 30)
    proc = await _start_stuck_stop(s, tmp_path)

    proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    done = await finish(proc)

    assert time.monotonic() - started < 1
    assert done.code == 143, done.err
    assert "\nreceived SIGINT again: exiting at once\n" in done.err
    assert _lock_free(s.out)
    await until(lambda: session_members(proc.pid) == [], "the run's processes to end", 5)
    assert tree_bytes(s.out / "a") == before


@pytest.mark.parametrize("where", ["flag", "config"])
async def test_the_deadline_stops_a_run_as_an_interrupt_would(
    site: MakeSite, tmp_path: Path, where: str
) -> None:
    """A server that holds an index back for longer than the run may take: the run stops at
    its deadline, keeps the published output, says so, and exits 9 (metrics say it too)."""
    s = await site((ref("a"),), timeouts=SLOW)
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    s.server.delay(s.path("a", "s2"), 30)
    metrics = tmp_path / "m.prom"
    flags = ["--metrics", str(metrics)]
    if where == "flag":
        flags += ["--deadline", "0.5"]
    else:
        s.config = s.write_config("deadline.yaml", deadline=0.5)

    started = time.monotonic()
    done = await s.sync("a", flags=flags)

    assert 0.5 <= time.monotonic() - started < 3
    assert done.code == 9
    assert done.err.endswith(
        "error: stopped at the run's deadline (0.5 s); published output untouched\n"
    )
    assert "spack_cache_crawler_run_exit_code 9" in metrics.read_text()
    assert tree_bytes(s.out / "a") == before
    assert s.leftovers() == []
    assert _lock_free(s.out)


# --- 10. indexes that change under the crawler ------------------------------------------------


async def test_a_stale_v2_sidecar_does_not_hide_a_new_index(site: MakeSite) -> None:
    s = await site((ref("a"),))
    await s.publish("a")
    sidecar = s.mirror / (s.path("a", "s1") + ".hash")
    old = sidecar.read_text()
    s.rebuild(ref("a", NEXT))
    sidecar.write_text(old)  # index.json uploaded, its .hash not yet

    done = await s.sync("a")

    assert (done.code, done.err) == (0, "")
    new = hashlib.sha256((s.mirror / s.path("a", "s1")).read_bytes()).hexdigest()
    s1 = s.source_report("a", "s1")
    assert (s1["status"], s1["sha256"], s1["sidecar_sha256"]) == ("fetched", new, old)
    assert s1["sidecar_matches"] is False
    index = s.index("a")
    assert next(x for x in index["sources"] if x["label"] == "s1")["sha256"] == new
    assert index["packages"]["cmake"]["spec_details"][0]["stacks"] == ["root", "s1", "s2"]


async def test_a_stale_sidecar_is_not_trusted_when_the_etag_was_never_learnt(
    site: MakeSite,
) -> None:
    """Refs ``a`` and ``b`` start with the same bytes. ``b``'s sidecar names bytes ``a``'s cached
    summary already covers, but a sidecar is only trusted for a URL whose server was seen to send
    no ETag (crawler/sync/sources.py ``promised_sha256``), so ``b`` is downloaded once and its ETag
    learnt. When ``b``'s root index later changes while its sidecar still names the old one, the
    conditional request sees the change: the new index must be read, not the old summary."""
    s = await site((ref("a"), ref("b")))
    await s.publish("a", "b")
    assert s.server.hits(s.path("b")) == 1  # not skipped on the sidecar's word alone
    sidecar = s.mirror / (s.path("b") + ".hash")
    old = sidecar.read_text()
    s.rebuild(ref("a"), ref("b", NEXT))
    sidecar.write_text(old)  # b's new index.json is uploaded, its .hash not yet

    done = await s.sync("b")

    assert (done.code, done.err) == (0, "")
    new = hashlib.sha256((s.mirror / s.path("b")).read_bytes()).hexdigest()
    root = s.source_report("b", "root")
    assert (root["sha256"], root["sidecar_sha256"], root["sidecar_matches"]) == (new, old, False)
    assert "cmake" in s.index("b")["packages"]


async def test_a_v3_blob_that_does_not_match_its_name_fails_its_source(site: MakeSite) -> None:
    s = await site((ref("b", layout="v3"),))
    before = (await s.publish("b"))["b"]
    s.rebuild(ref("b", NEXT, layout="v3"))
    blob = s.mirror / s.path("b", "s1")
    wrong = (s.mirror / s.path("b", "s2")).read_bytes()
    blob.write_bytes(wrong)
    expected, actual = blob.name, hashlib.sha256(wrong).hexdigest()
    problem = f"s1: cannot fetch {s.location('b', 's1')}: sha256 is {actual}, expected {expected}"

    done = await s.sync("b")

    assert done.code == 4
    assert problem in done.err
    assert tree_bytes(s.out / "b") == before

    partial = await s.sync("b", flags=["--max-failed-stacks=1"])

    assert partial.code == 5, partial.err
    s1 = s.source_report("b", "s1")
    assert s1["status"] == "failed"
    assert f"sha256 is {actual}, expected {expected}" in s1["error"]
    assert s.report("b")["failed_stacks"] == ["s1"]


# --- 11. crawler verify -----------------------------------------------------------------------


async def test_crawler_verify_exits_0_then_8_on_a_corrupted_page(site: MakeSite) -> None:
    """In this process: tests/test_cli.py checks verify's codes through real ones."""
    s = await site((ref("a"),))
    await s.publish("a")
    branch = s.out / "a"

    clean = await s.run("verify", str(branch))

    assert (clean.code, clean.out, clean.err) == (0, f"{branch}: all checks hold\n", "")

    page = branch / "pages" / "zlib" / "specs.md"
    good = page.read_bytes()
    bad = good.replace(b"1.3.1", b"1.3.2")
    page.write_bytes(bad)
    at = next(i for i, (x, y) in enumerate(zip(good, bad, strict=True)) if x != y)

    broken = await s.run("verify", str(branch))

    assert broken.code == 8
    assert broken.out == (
        f"pages/zlib/specs.md: differs from package zlib in index.json "
        f"(first difference at byte {at})\n"
    )
    assert broken.err == f"{branch}: 1 problem\n"
    quiet = await s.run("verify", "-q", str(branch))
    assert (quiet.code, quiet.out, quiet.err) == (8, broken.out, "")  # "print problems only"


# --- 12. metrics ------------------------------------------------------------------------------


async def test_metrics_keep_the_last_success_across_a_failed_run(
    site: MakeSite, tmp_path: Path
) -> None:
    s = await site((ref("a"),))
    metrics = tmp_path / "prom" / "crawler.prom"
    metrics.parent.mkdir()  # node_exporter's textfile folder: the crawler does not make it
    last = 'spack_cache_crawler_last_success_timestamp_seconds{branch="a"}'

    started = time.time()
    ok = await s.sync("a", flags=["--metrics", str(metrics)])

    assert (ok.code, ok.err) == (0, "")
    text = metrics.read_text()
    assert text.endswith("\n# EOF\n")
    first = metric_samples(text)
    assert started <= first[last] <= time.time()
    assert first["spack_cache_crawler_run_exit_code"] == 0
    assert first['spack_cache_crawler_branch_status{branch="a",status="published"}'] == 1

    s.rebuild(ref("a", NEXT))
    s.server.script(s.path("a"), *[Fault(500)] * 3)
    failed = await s.sync("a", flags=["--metrics", str(metrics)])

    assert failed.code == 4
    text = metrics.read_text()
    assert text.endswith("\n# EOF\n")
    second = metric_samples(text)
    assert second[last] == first[last]
    assert second["spack_cache_crawler_run_exit_code"] == 4
    assert second['spack_cache_crawler_branch_status{branch="a",status="failed"}'] == 1
    assert second['spack_cache_crawler_branch_status{branch="a",status="published"}'] == 0
    assert second["spack_cache_crawler_last_run_timestamp_seconds"] > first[last]


# --- 13. transient failures -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "faults", "problem"),
    [
        pytest.param("root", [Fault(truncate=100)] * 3, "body cut short", id="reset-mid-body-root"),
        pytest.param("s2", [Fault(500)] * 3, "HTTP 500 after 3 attempts", id="500-storm-stack"),
    ],
)
async def test_failures_outlasting_the_retries_keep_the_output(
    site: MakeSite, label: str, faults: list[Fault], problem: str
) -> None:
    s = await site((ref("a"),))
    before = (await s.publish("a"))["a"]
    s.rebuild(ref("a", NEXT))
    s.server.script(s.path("a", label), *faults)

    done = await s.sync("a")

    assert done.code == 4
    assert f"cannot fetch {s.location('a', label)}: {problem}" in done.err
    assert done.err.endswith("error: 1 branch(es) failed: a\n")
    assert s.server.hits(s.path("a", label)) == 3
    assert s.report("a")["status"] == "failed"
    assert tree_bytes(s.out / "a") == before
    assert s.leftovers() == []


async def test_429_with_retry_after_is_waited_out(site: MakeSite) -> None:
    s = await site((ref("a"),), retry={"attempts": 3, "backoff": 0, "max_wait": 30})
    s.server.script(s.path("a", "s1"), Fault(429, headers={"Retry-After": "7"}))

    done = await s.sync("a")

    assert (done.code, done.err) == (0, "")
    assert s.sleep.waits == [7.0]
    s1 = s.source_report("a", "s1")
    assert (s1["status"], s1["attempts"], s1["retries"]) == ("fetched", 2, 1)
