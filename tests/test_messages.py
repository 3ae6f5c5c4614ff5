"""Messages a newcomer reads right: what "missing" means, and the key a mistyped one meant."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crawler import load_config
from crawler.config.keys import closest_key, known_keys
from crawler.errors import ConfigError

from .conftest import CLI_TIMEOUT, SAMPLE_MIRROR, Done, InProcess, cli_env

STACK_LINE = (
    "ml-darwin-aarch64-mps: missing, not an error: the mirror has no index for this stack, "
    "the branch is built without it (cannot fetch file://"
)


def crawler(*args: str, cwd: Path) -> Done:
    """``python -m crawler ARGS`` in a process of its own, run from ``cwd``."""
    proc = subprocess.run(
        [sys.executable, "-m", "crawler", *args],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    return Done(proc.returncode, proc.stdout, proc.stderr)


Here = InProcess


@pytest.fixture
def here(in_process: InProcess) -> Here:
    """``here(*args, cwd=...)``: ``crawler ARGS`` in this process (conftest's ``in_process``)."""
    return in_process


def unknown_key(path: Path, text: str) -> ConfigError:
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return caught.value


def test_a_missing_stack_says_it_is_no_error(here: Here, tmp_path: Path) -> None:
    """The sample mirror's first run: one stack has no index, and the line says what that
    means; the branch is published (exit 0)."""
    done = here(
        "sync", "--branch", "develop", "--mirror", str(SAMPLE_MIRROR),
        "--output", str(tmp_path / "out"), cwd=tmp_path,
    )  # fmt: skip
    assert done.code == 0, done.err
    [line] = [line for line in done.err.splitlines() if "ml-darwin-aarch64-mps" in line]
    assert f" INFO develop {STACK_LINE}" in line
    assert line.endswith(": no such file)")


def test_a_missing_root_says_the_branch_cannot_be_built(here: Here, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    shutil.copytree(SAMPLE_MIRROR, mirror)
    for blob in (mirror / "develop" / "blobs").rglob("*"):  # the root index's, alone
        if blob.is_file():
            blob.unlink()
    done = here(
        "sync", "--branch", "develop", "--mirror", str(mirror), "--output", str(tmp_path / "out"),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.code == 4, done.err
    assert (
        " INFO develop root: missing: the mirror has no root index for this ref, the branch "
        "cannot be built (cannot fetch file://"
    ) in done.err


def test_a_mistyped_key_names_the_key_it_meant(here: Here, tmp_path: Path) -> None:
    config = tmp_path / "crawler.yaml"
    config.write_text(f"mirror: {SAMPLE_MIRROR}\nconcurency: 4\n", encoding="utf-8")
    done = here("sync", "--branch", "develop", "--config", str(config), cwd=tmp_path)
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: config error in {config}: key 'concurency': unknown key "
        "(did you mean 'concurrency'?)\n"
    )
    assert not (tmp_path / "output").exists()


@pytest.mark.parametrize(
    ("text", "key", "meant"),
    [
        ("Mirror: x\n", "Mirror", "mirror"),
        ("timeouts:\n  conect: 3\n", "timeouts.conect", "connect"),
        ("publish:\n  max_drp: 0.2\n", "publish.max_drp", "max_drop"),
        ("rewrites:\n  - prefix: a\n    replacment: b\n", "rewrites[0].replacment", "replacement"),
    ],
)
def test_the_closest_key_is_suggested_where_the_typo_is(
    tmp_path: Path, text: str, key: str, meant: str
) -> None:
    error = unknown_key(tmp_path / "c.yaml", text)
    assert (error.key, error.reason) == (key, f"unknown key (did you mean '{meant}'?)")


@pytest.mark.parametrize("text", ["bogus: 1\n", "retry:\n  tries: 3\n", "publish:\n  origin: x\n"])
def test_no_suggestion_when_no_key_is_close(tmp_path: Path, text: str) -> None:
    assert unknown_key(tmp_path / "c.yaml", text).reason == "unknown key"


def test_known_keys_leave_out_what_no_file_sets() -> None:
    """origin and flags are the Config's own fields, not keys: never suggested."""
    top = known_keys("")
    assert {"mirror", "concurrency", "publish"} <= set(top)
    assert not {"origin", "flags"} & set(top)
    assert closest_key("", "origins") is None
    assert known_keys("publish.max_drop") == []  # a value, not a mapping
    assert known_keys("no.such.section") == []
