"""Symbolic links where the crawler keeps its own folders and files (issue 39, item 1): under
``<output>/.crawler/`` none is followed, for a read, a write, a rename or a delete; a link is
refused (exit 4) naming it, before any work; a prune deletes only files the crawler recorded
writing; ``cache_dir`` names a cache kept elsewhere."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async
from crawler.decode.records import made_by
from crawler.output.kept import LINKED, WRITTEN

from .conftest import fast_config, tree_bytes

OTHER = "0" * 64  # a SHA-256 no source has


def _mirror(tmp_path: Path, version: str) -> None:
    """The mirror, holding ``zlib@version`` (rewritten whole)."""
    mirror = tmp_path / "mirror"
    shutil.rmtree(mirror, ignore_errors=True)
    specs = (SynthSpec("zlib", version), SynthSpec("cmake", "3.30.0", stacks=("tools",)))
    build_mirror(mirror, (SynthRef("develop", specs),))


def _config(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "crawler.yaml"
    settings = fast_config((tmp_path / "mirror").as_uri(), tmp_path / "out", **extra)
    path.write_text(yaml.safe_dump(settings))
    return path


async def _sync(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``crawler sync --all``: its exit code and what it wrote to stderr."""
    capsys.readouterr()
    code = await main_async(["sync", "--all", "--config", str(config)])
    return code, capsys.readouterr().err


def _everything(root: Path) -> dict[str, bytes | str]:
    """Every folder, file and link under ``root`` (never followed), with its bytes or target."""
    found: dict[str, bytes | str] = {}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(folder, name)
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = f"-> {os.readlink(path)}"
            elif path.is_dir():
                found[key] = "folder"
            else:
                found[key] = path.read_bytes()
    return found


#: In each folder, files (or folders) named as the crawler names its own, which it did not write.
DECOYS = {
    "cache": [f"root-{OTHER}.0.0.1.parts.msgpack", f"stack-{OTHER}{'.' + made_by()}.parts.msgpack"],
    "specs": ["0.0.1-db8.msgpack", f"{made_by()}-db7.msgpack"],
    "state": ["develop.json", ".develop.json.0badc0de.tmp"],
    "reports": ["develop.json", ".develop.json.0badc0de.tmp"],
    "tmp": ["4242/"],
    "staging": ["new-develop.0a1b2c3d/", "old-develop.0a1b2c3d/"],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", [*DECOYS, "."])
async def test_a_linked_work_folder_is_refused_and_nothing_is_done_through_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Publish, replace a folder of ``.crawler`` (or ``.crawler`` itself) by a link to a
    folder holding its files and others named like them, change the mirror and sync again.
    The run wrote its summaries there and pruned the others, wrote a state and a report named
    after the ref there, downloaded, staged and cleaned up there; now it stops before any work
    (exit 4), naming the link and what to do, and nothing changes, there or in the output."""
    _mirror(tmp_path, "1.3.0")
    config = _config(tmp_path)
    assert (await _sync(config, capsys))[0] == 0
    out = tmp_path / "out"
    link = out / ".crawler" / name if name != "." else out / ".crawler"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(link, elsewhere)
    for decoy in DECOYS.get(name, [f"{n}/{d}" for n, decoys in DECOYS.items() for d in decoys]):
        path = elsewhere / decoy
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(exist_ok=True) if decoy.endswith("/") else path.write_bytes(b"theirs")
    link.symlink_to(elsewhere)
    there, published = _everything(elsewhere), tree_bytes(out)
    _mirror(tmp_path, "1.3.1")

    code, err = await _sync(config, capsys)

    assert (code, err.splitlines()[-1:]) == (4, [f"error: cannot write {link}: {LINKED}"]), err
    assert "Traceback" not in err and "develop" not in err  # refused before the branch
    assert _everything(elsewhere) == there
    assert tree_bytes(out) == published and link.is_symlink()


def _summary(out: Path) -> Path:
    return next((out / ".crawler" / "cache").glob("root-*.parts.msgpack"))


def _store(out: Path) -> Path:
    return next((out / ".crawler" / "specs").glob("*-db*.msgpack"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "file", ["state/develop.json", "reports/develop.json", "summary", "store", f"cache/{WRITTEN}"]
)
async def test_a_link_at_a_file_the_crawler_keeps_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], file: str
) -> None:
    """A state, a report, a cached summary, a spec store or the record of what was written,
    replaced by a link to a file elsewhere: it was read through (a summary that did not
    decode was then deleted), or replaced by the run's file; now the run stops (exit 4)
    naming it, and the link and its file stay as they were."""
    _mirror(tmp_path, "1.3.0")
    config = _config(tmp_path)
    assert (await _sync(config, capsys))[0] == 0
    out = tmp_path / "out"
    path = {"summary": _summary(out), "store": _store(out)}.get(file, out / ".crawler" / file)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    path.unlink()
    path.symlink_to(victim)
    published = tree_bytes(out)
    _mirror(tmp_path, "1.3.1")

    code, err = await _sync(config, capsys)

    assert (code, err.splitlines()[-1:]) == (4, [f"error: cannot write {path}: {LINKED}"]), err
    assert "Traceback" not in err
    assert victim.read_bytes() == b"precious" and path.is_symlink()
    assert tree_bytes(out) == published


@pytest.mark.slow
async def test_a_prune_deletes_only_the_files_the_crawler_recorded_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Summaries no state refers to any more are deleted, and the spec stores of other
    versions, when the crawler wrote them; files merely named like them were deleted too, and
    are left alone now."""
    _mirror(tmp_path, "1.3.0")
    config = _config(tmp_path)
    assert (await _sync(config, capsys))[0] == 0
    out = tmp_path / "out"
    before = _summary(out)
    decoys = [
        out / ".crawler" / folder / name
        for folder in ("cache", "specs", "state", "reports")
        for name in DECOYS[folder]
        if name != "develop.json"
    ]
    for decoy in decoys:
        decoy.write_bytes(b"theirs")
    _mirror(tmp_path, "1.3.1")

    assert (await _sync(config, capsys))[0] == 0

    assert not before.exists() and _summary(out) != before  # recorded, then no longer needed
    assert [decoy.read_bytes() for decoy in decoys] == [b"theirs"] * len(decoys)


@pytest.mark.slow
async def test_cache_dir_keeps_the_summaries_in_the_folder_it_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The way of keeping the cache on another disk: the folder is the config's (a link in its
    path is the operator's too), the output has no cache, and a warm run uses it."""
    _mirror(tmp_path, "1.3.0")
    disk = tmp_path / "disk"
    (disk / "cache").mkdir(parents=True)
    (tmp_path / "mounted").symlink_to(disk)
    config = _config(tmp_path, cache_dir="mounted/cache")
    assert (await _sync(config, capsys))[0] == 0
    out = tmp_path / "out"
    cached = sorted(p.name for p in (disk / "cache").iterdir())
    assert len([n for n in cached if n.endswith(".parts.msgpack")]) == 2, cached
    assert WRITTEN in cached and not (out / ".crawler" / "cache").exists()
    code, err = await _sync(config, capsys)
    assert (code, "WARNING" in err) == (6, False), err
    # A link among its files is refused as anywhere else.
    summary = next((disk / "cache").glob("root-*"))
    summary.unlink()
    summary.symlink_to(tmp_path / "victim")
    code, err = await _sync(config, capsys)
    assert (code, err.splitlines()[-1:]) == (4, [f"error: cannot write {summary}: {LINKED}"])


@pytest.mark.slow
async def test_a_cache_dir_not_there_is_told_once_and_not_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A volume not mounted yet: the run goes on without the cache, says so once, and does
    not make the folder (it would be written under the mount point)."""
    _mirror(tmp_path, "1.3.0")
    gone = tmp_path / "not-mounted" / "cache"
    code, err = await _sync(_config(tmp_path, cache_dir=str(gone)), capsys)
    warnings = [line for line in err.splitlines() if " WARNING " in line]
    assert (code, len(warnings)) == (0, 1), err
    assert warnings[0].endswith(
        "WARNING cannot cache summaries (the next run decodes them again): cache_dir "
        f"{gone} does not exist (a volume not mounted?)"
    )
    assert not gone.parent.exists()


@pytest.mark.parametrize(
    ("cache_dir", "reason"),
    [
        ("out/.crawler/cache", "is inside the output folder"),
        ("out/x", "is inside the output folder"),
        ("mirror/cache", "is inside the mirror"),
        ("crawler.yaml", "is not a folder"),
        ("s3://bucket/cache", "must name a folder, not a URL"),
    ],
)
async def test_a_cache_dir_that_cannot_be_one_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cache_dir: str, reason: str
) -> None:
    """Inside the output, anyone who may write there could make it a link again."""
    _mirror(tmp_path, "1.3.0")
    code, err = await _sync(_config(tmp_path, cache_dir=cache_dir), capsys)
    assert code == 2 and "key 'cache_dir'" in err and reason in err, err
    assert not (tmp_path / "out").exists()


async def test_a_link_put_at_a_downloads_name_after_the_unlink_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A download under ``.crawler/tmp/<pid>/`` was opened by path after the unlink of an
    earlier attempt's file: a link put back in between made the crawler truncate and write the
    file it names. The race is made certain: the unlink itself plants the link."""
    from crawler.errors import OutputError
    from crawler.mirror.stream import stream_to

    precious = tmp_path / "precious"
    precious.write_text("kept")
    dest = tmp_path / "download"
    dest.write_text("an earlier attempt")
    unlink = Path.unlink

    def unlink_then_plant(path: Path, missing_ok: bool = False) -> None:
        unlink(path, missing_ok=missing_ok)
        if path == dest:
            path.symlink_to(precious)

    monkeypatch.setattr(Path, "unlink", unlink_then_plant)

    async def body() -> AsyncIterator[bytes]:
        yield b"the mirror's bytes"

    with pytest.raises(OutputError, match="put at this name while it was being replaced"):
        await stream_to(body(), dest, "http://m/x", 1 << 20, None, 1 << 16)
    assert precious.read_text() == "kept"
    assert dest.is_symlink()


@pytest.mark.slow  # 65 MiB written
def test_a_record_grown_past_any_limit_is_compacted_and_still_prunes(tmp_path: Path) -> None:
    """Once ``.written`` was over 64 MiB, a prune only said it could not read it: the record
    then grew without end and nothing was pruned again. It is read a line at a time now, and
    rewritten with the names of files still there."""
    from crawler.output.kept import KeptFolder

    folder = KeptFolder(tmp_path, ("cache",))
    (tmp_path / "cache").mkdir()
    for name in ("old", "new", "theirs"):
        (tmp_path / "cache" / name).write_text(name)
    line = b"gone-long-ago-" + b"x" * 50 + b"\n"
    with (tmp_path / "cache" / WRITTEN).open("wb") as record:
        record.write(b"old\n" + b"z" * 5000 + b"\n")  # a line too long to be a name: skipped
        for _ in range((65 << 20) // (len(line) * 1024)):
            record.write(line * 1024)
        record.write(b"new\nold\nnew")  # the last line without its newline

    pruned = folder.prune(lambda name: name == "new")

    assert (pruned.removed, pruned.problems) == (["old"], [])
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [WRITTEN, "new", "theirs"]
    assert (tmp_path / "cache" / WRITTEN).read_bytes() == b"new\n"


def test_a_record_that_cannot_be_read_is_started_anew_and_deletes_nothing(
    tmp_path: Path,
) -> None:
    from crawler.output.kept import KeptFolder

    folder = KeptFolder(tmp_path, ("cache",))
    (tmp_path / "cache").mkdir()
    os.mkfifo(tmp_path / "cache" / WRITTEN)  # no regular file: it cannot be read
    (tmp_path / "cache" / "old").write_text("old")

    pruned = folder.prune(lambda name: False)

    assert pruned.removed == []
    assert [p.split(":")[0] for p in pruned.problems] == [f"cannot read {folder.path / WRITTEN}"]
    assert "recorded anew, empty (the files it named are left alone)" in pruned.problems[0]
    assert (tmp_path / "cache" / "old").read_text() == "old"
    assert (tmp_path / "cache" / WRITTEN).read_bytes() == b""


async def test_a_linked_binaries_folder_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``.crawler/binaries`` (what was read of the spec manifests) is kept as the other folders
    are: a link there, planted before the folder was ever made, stops the run (exit 4)."""
    _mirror(tmp_path, "1.3.0")
    config = _config(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "develop.json").write_bytes(b"theirs")
    link = tmp_path / "out" / ".crawler" / "binaries"
    link.parent.mkdir(parents=True)
    link.symlink_to(elsewhere)

    code, err = await _sync(config, capsys)

    assert (code, err.splitlines()[-1:]) == (4, [f"error: cannot write {link}: {LINKED}"]), err
    assert _everything(elsewhere) == {"develop.json": b"theirs"}
