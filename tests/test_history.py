"""history.json and ``crawler log``: a branch's last publishes, newest first, bounded by the
config's ``history``, carried from one publish to the next."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async

from .conftest import fast_config, finish, start_cli

VERSIONS = ("1.3.0", "1.3.1", "1.3.2")


def _site(tmp_path: Path, **extra: object) -> Path:
    config = tmp_path / "crawler.yaml"
    data = fast_config((tmp_path / "mirror").as_uri(), tmp_path / "out", **extra)
    config.write_text(yaml.safe_dump(data))
    return config


def _mirror(tmp_path: Path, version: str) -> None:
    mirror = tmp_path / "mirror"
    for path in sorted(mirror.rglob("*"), reverse=True) if mirror.exists() else ():
        path.unlink() if path.is_file() else path.rmdir()
    build_mirror(
        mirror, (SynthRef("develop", (SynthSpec("zlib", version), SynthSpec("cmake", "3.30.0"))),)
    )


async def _publish(tmp_path: Path, config: Path, version: str) -> int:
    _mirror(tmp_path, version)
    return await main_async(["sync", "--branch", "develop", "--config", str(config), "-q"])


def _history(tmp_path: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((tmp_path / "out" / "develop" / "history.json").read_text())
    return found


async def test_each_publish_is_kept_newest_first_up_to_the_configured_number(
    tmp_path: Path,
) -> None:
    config = _site(tmp_path, history=2)
    for version in VERSIONS:
        assert await _publish(tmp_path, config, version) == 0
    assert await _publish(tmp_path, config, VERSIONS[-1]) == 6  # unchanged: no publish

    history = _history(tmp_path)
    assert history["branch"] == "develop"
    publishes = history["publishes"]
    assert len(publishes) == 2
    newest, older = publishes
    index = (tmp_path / "out" / "develop" / "index.json").read_bytes()
    assert newest["index_sha256"] == hashlib.sha256(index).hexdigest()
    assert newest["published_at"] >= older["published_at"]
    removed = newest["changes"]["removed_specs"]["zlib"]
    assert [s["version"] for s in removed] == ["1.3.1"]
    assert older["changes"]["removed_specs"]["zlib"][0]["version"] == "1.3.0"
    assert not older["changes"]["first_publish"]  # the first publish fell off the end

    listed = await finish(await start_cli("log", "--output", str(tmp_path / "out"), cwd=tmp_path))
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split() == ["PUBLISHED", "SPECS", "ADDED", "REMOVED", "PACKAGES"]
    assert lines[1].split()[1:] == ["2", "->", "2", "+1", "-1", "+0", "-0"]
    assert len(lines) == 3

    as_json = await finish(
        await start_cli(
            "log", "--in", str(tmp_path / "out" / "develop"), "--json", "-n", "1", cwd=tmp_path
        )
    )
    (entry,) = [json.loads(line) for line in as_json.out.splitlines()]
    assert entry["index_sha256"] == newest["index_sha256"]
    assert entry["totals"] == {"specs_before": 2, "specs_after": 2, "added": 1, "removed": 1}

    # -n 0 lists none, as `git log -n 0` (it listed them all); below 0 is a usage error.
    branch = str(tmp_path / "out" / "develop")
    none = await finish(await start_cli("log", "--in", branch, "-n", "0", cwd=tmp_path))
    assert (none.code, none.out.split()) == (
        0,
        ["PUBLISHED", "SPECS", "ADDED", "REMOVED", "PACKAGES"],
    )
    none = await finish(await start_cli("log", "--in", branch, "-n", "0", "--json", cwd=tmp_path))
    assert (none.code, none.out) == (0, "")
    below = await finish(await start_cli("log", "--in", branch, "-n", "-1", cwd=tmp_path))
    assert (below.code, below.out) == (2, "")
    assert "argument -n/--max-count: must be 0 or more, got -1" in below.err


async def test_no_history_when_the_config_keeps_none(tmp_path: Path) -> None:
    config = _site(tmp_path, history=0)
    assert await _publish(tmp_path, config, VERSIONS[0]) == 0
    assert not (tmp_path / "out" / "develop" / "history.json").exists()

    listed = await finish(await start_cli("log", "--output", str(tmp_path / "out"), cwd=tmp_path))
    assert listed.code == 11
    assert "it holds no history.json" in listed.err, listed.err


async def test_a_damaged_history_starts_anew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It only tells what happened: a publish is not held back by it (the branch, no longer
    as published, is published again), and a warning says the history was lost."""
    config = _site(tmp_path)
    assert await _publish(tmp_path, config, VERSIONS[0]) == 0
    (tmp_path / "out" / "develop" / "history.json").write_text('{"branch": "develop"')
    capsys.readouterr()

    assert await _publish(tmp_path, config, VERSIONS[1]) == 0

    assert "the history starts anew" in capsys.readouterr().err
    assert len(_history(tmp_path)["publishes"]) == 1


async def test_a_removed_spec_the_last_index_cannot_name_is_named_by_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A published index edited so that a spec lacks its compiler (still an index for the
    comparison): the next publish goes on, that package's removed spec listed by hash, with
    a warning naming the package."""
    config = _site(tmp_path)
    assert await _publish(tmp_path, config, VERSIONS[0]) == 0
    path = tmp_path / "out" / "develop" / "index.json"
    index = json.loads(path.read_bytes())
    del index["packages"]["zlib"]["spec_details"][0]["compiler"]
    path.write_text(json.dumps(index))
    capsys.readouterr()

    assert await _publish(tmp_path, config, VERSIONS[1]) == 0

    err = capsys.readouterr().err
    assert "previous index.json of develop: package zlib: " in err
    assert "its removed specs named by hash" in err
    changes = _history(tmp_path)["publishes"][0]["changes"]
    assert list(changes["removed"]) == ["zlib"] and changes["removed_specs"] == {}
