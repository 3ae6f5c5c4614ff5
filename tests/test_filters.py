"""Filters: the packages and stacks a branch is published with, and the refs ``--all`` syncs.

Each test builds a small mirror with :mod:`bench.synth`, syncs it through the command line, and
checks what is published: only the packages and stacks the filters keep, ``filters`` in
``index.json``, and a change of filters treated as a change of the branch's inputs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async

from .conftest import fast_config, finish, start_cli
from .schema import assert_valid_index

SPECS = (
    SynthSpec("py-numpy", "1.26.4", stacks=("e4s", "ml-cpu")),
    SynthSpec("py-scipy", "1.13.0", stacks=("ml-cpu",)),
    SynthSpec("zlib", "1.3.1", stacks=("e4s",)),
    SynthSpec("cmake", "3.30.0"),
)


def _site(tmp_path: Path, refs: tuple[SynthRef, ...] = (SynthRef("develop", SPECS),)) -> Path:
    """A local mirror of ``refs`` and a config for it; returns the config's path."""
    mirror = tmp_path / "mirror"
    build_mirror(mirror, refs)
    config = tmp_path / "crawler.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror.as_uri(), tmp_path / "out")))
    return config


async def _sync(config: Path, *flags: str) -> int:
    return await main_async(["sync", "--config", str(config), "-q", *flags])


def _index(tmp_path: Path, branch: str = "develop") -> dict[str, Any]:
    return assert_valid_index(tmp_path / "out" / branch / "index.json")


def _specs(index: dict[str, Any]) -> dict[str, list[str]]:
    """Each package's stacks, over its specs."""
    return {
        name: sorted({s for spec in package["spec_details"] for s in spec["stacks"]})
        for name, package in index["packages"].items()
    }


async def test_packages_and_stacks_are_published_as_the_filters_say(tmp_path: Path) -> None:
    config = _site(tmp_path)
    flags = ("--branch", "develop", "--package", "py-*", "--exclude-stack", "ml-*")

    assert await _sync(config, *flags) == 0

    index = _index(tmp_path)
    assert _specs(index) == {"py-numpy": ["e4s", "root"], "py-scipy": ["root"]}
    assert [s["label"] for s in index["sources"]] == ["root", "e4s"]
    assert index["filters"] == {"packages": ["py-*"], "exclude_stacks": ["ml-*"]}
    assert index["stats"]["packages"] == 2 and index["stats"]["specs"] == 2
    folder = str(tmp_path / "out" / "develop")
    verify = await finish(await start_cli("verify", folder, cwd=tmp_path))
    assert verify.code == 0, verify.out + verify.err


async def test_a_stack_left_out_is_not_even_fetched(tmp_path: Path) -> None:
    """Its index is not read: a mirror that lacks it (or where it is broken) is no matter."""
    config = _site(tmp_path)
    discovery = json.loads((tmp_path / "mirror" / "cache_spack_io_index.json").read_text())
    ml = next(e["url"] for e in discovery["develop"] if e["label"] == "ml-cpu")
    stack = tmp_path / "mirror" / ml.removeprefix("s3://spack-binaries/")
    stack.write_bytes(b"not an index")

    assert await _sync(config, "--branch", "develop", "--stack", "e4s") == 0
    assert [s["label"] for s in _index(tmp_path)["sources"]] == ["root", "e4s"]
    assert await _sync(config, "--branch", "develop") == 4  # read, it fails the branch


async def test_changing_filters_is_a_change_of_inputs_and_no_drop_to_refuse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Narrowing a branch to one package of four would be a drop of 75%: the gate compares a
    publish with the last one under the same filters only. Keeping the filters, a branch is
    unchanged; lifting them is a change again."""
    config = _site(tmp_path)
    assert await _sync(config, "--branch", "develop") == 0
    whole = (tmp_path / "out" / "develop" / "index.json").read_bytes()

    assert await _sync(config, "--branch", "develop", "--package", "zlib") == 0
    assert list(_index(tmp_path)["packages"]) == ["zlib"]
    assert await _sync(config, "--branch", "develop", "--package", "zlib") == 6
    changes = json.loads((tmp_path / "out" / "develop" / "changes.json").read_text())
    assert changes["totals"]["removed"] == 3
    named = {
        n: [(s["version"], s["compiler"]) for s in v] for n, v in changes["removed_specs"].items()
    }
    assert named == {
        "cmake": [("3.30.0", "gcc@13.2.0")],
        "py-numpy": [("1.26.4", "gcc@13.2.0")],
        "py-scipy": [("1.13.0", "gcc@13.2.0")],
    }

    assert await _sync(config, "--branch", "develop") == 0
    assert (tmp_path / "out" / "develop" / "index.json").read_bytes() == whole
    assert "refused" not in capsys.readouterr().err


async def test_filters_from_the_config_and_flags_that_replace_them(tmp_path: Path) -> None:
    config = _site(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["filters"] = {"packages": ["zlib", "cmake"], "exclude_packages": ["cmake"]}
    config.write_text(yaml.safe_dump(data))

    assert await _sync(config, "--branch", "develop") == 0
    assert list(_index(tmp_path)["packages"]) == ["zlib"]

    assert await _sync(config, "--branch", "develop", "--package", "py-*") == 0
    assert list(_index(tmp_path)["packages"]) == ["py-numpy", "py-scipy"]  # cmake still out


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ({"package": ["zlib"]}, "key 'filters.package': unknown key"),
        ({"packages": "zlib"}, "filters.packages"),
        ({"packages": [""]}, "filters.packages[0]"),
    ],
)
async def test_a_bad_filter_in_the_config_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], filters: object, message: str
) -> None:
    config = _site(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["filters"] = filters
    config.write_text(yaml.safe_dump(data))
    capsys.readouterr()

    assert await _sync(config, "--branch", "develop") == 2
    err = capsys.readouterr().err
    assert message in err and str(config) in err, err
    assert not (tmp_path / "out" / "develop").exists()


async def test_refs_patterns_choose_what_all_syncs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refs = tuple(SynthRef(name, SPECS[:1]) for name in ("develop", "v1.0.0", "v1.1.0"))
    config = _site(tmp_path, refs)

    assert await _sync(config, "--all", "--ref", "v*", "--exclude-ref", "v1.0*") == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".crawler", "v1.1.0"]

    capsys.readouterr()
    assert await _sync(config, "--all", "--ref", "release-*") == 2
    assert "no ref of" in capsys.readouterr().err
    assert await _sync(config, "--branch", "develop", "--ref", "v*") == 2
    assert "--ref and --exclude-ref choose among the refs of --all" in capsys.readouterr().err
