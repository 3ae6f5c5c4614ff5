"""Files and folders the user names are used only when they are what they must be (issue 25,
items 4 and 5): the config a regular file of at most 1 MiB, the metrics file a regular file of
at most 16 MiB, the output folder not ``/`` nor a system folder. Each refusal is a usage error
(exit 2) naming the path and why, before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from crawler.cli.checks import SYSTEM_FOLDERS
from crawler.cli.command import main
from crawler.config import MAX_CONFIG_BYTES, load_config
from crawler.errors import ConfigError
from crawler.ops.metrics import MAX_METRICS_BYTES

from .conftest import REPO, SAMPLE_MIRROR, cli_env, fast_config

#: A refused file must be refused at once: a hang is what is being tested against.
QUICK = 20.0


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m crawler ARGS``, killed (and the test failed) if it takes over QUICK s."""
    return subprocess.run(
        [sys.executable, "-m", "crawler", *args],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=QUICK,
    )


def sample_config(tmp_path: Path, output: str = "out") -> Path:
    """A config reading the sample mirror into ``tmp_path / output``."""
    path = tmp_path / "crawler.yaml"
    path.write_text(yaml.safe_dump(fast_config(str(SAMPLE_MIRROR), tmp_path / output)))
    return path


# --- the config file ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["/dev/zero", "named pipe"])
def test_a_config_that_is_a_device_or_a_pipe_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """``/dev/zero`` was read without end (400 MB/s), a named pipe waited on for ever."""
    config = Path(kind) if kind.startswith("/") else tmp_path / "pipe.yaml"
    if not kind.startswith("/"):
        os.mkfifo(config)
    for command in (["branches"], ["sync", "--branch", "develop"]):
        done = run_cli(*command, "--config", str(config), cwd=tmp_path)
        assert (done.returncode, done.stdout) == (2, "")
        assert done.stderr == (
            f"error: config error in {config}: cannot read file: not a regular file "
            "(a named pipe, a device or a socket)\n"
        )
    assert not (tmp_path / "out").exists()


def test_a_config_that_is_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path)
    assert str(caught.value) == f"config error in {tmp_path}: cannot read file: Is a directory"


def test_a_config_larger_than_1_mib_is_refused(tmp_path: Path) -> None:
    """Read up to the limit only, whatever the file's size (a sparse 1 TiB file here)."""
    exact = sample_config(tmp_path)
    text = exact.read_text()
    padding = MAX_CONFIG_BYTES - len(text.encode())
    exact.write_text(text + "#" * (padding - 1) + "\n")
    assert exact.stat().st_size == MAX_CONFIG_BYTES == 1 << 20
    assert load_config(exact).mirror == str(SAMPLE_MIRROR)  # the limit itself is fine

    with exact.open("a") as grown:
        grown.write("#")
    huge = tmp_path / "huge.yaml"
    huge.touch()
    os.truncate(huge, 1 << 40)
    for path in (exact, huge):
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        assert str(caught.value) == (
            f"config error in {path}: cannot read file: larger than 1 MiB (the most it may hold)"
        )


# --- the metrics file -----------------------------------------------------------------------


def test_a_metrics_file_larger_than_16_mib_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A large file is not one the crawler wrote (about 2 KB per branch): it would be read
    whole, then replaced."""
    monkeypatch.chdir(tmp_path)
    metrics = tmp_path / "big.prom"
    metrics.touch()
    os.truncate(metrics, MAX_METRICS_BYTES + 1)
    config = sample_config(tmp_path)

    code = main(["sync", "--branch", "develop", "--config", str(config), "--metrics", "big.prom"])

    assert code == 2
    assert capsys.readouterr().err == (
        f"error: config error in command line: key 'metrics': {metrics} is larger than 16 MiB "
        "(the most it may hold): not a metrics file it wrote\n"
    )
    assert metrics.stat().st_size == MAX_METRICS_BYTES + 1
    assert not (tmp_path / "out").exists()


# --- the output folder ----------------------------------------------------------------------


@pytest.mark.parametrize("folder", ["/", "/etc", "/usr", "/tmp", "/proc", "/home"])
def test_an_output_that_is_a_system_folder_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], folder: str
) -> None:
    """``--output /`` made ``/.crawler`` and ``/develop``."""
    assert not os.path.lexists(Path(folder, ".crawler"))
    monkeypatch.chdir(tmp_path)
    config = sample_config(tmp_path)

    code = main(["sync", "--branch", "develop", "--config", str(config), "--output", folder])

    assert code == 2
    assert capsys.readouterr().err == (
        f"error: config error in command line: key 'output': {folder} is "
        f"{SYSTEM_FOLDERS[folder]}: give a folder for the crawler's output alone\n"
    )
    assert not os.path.lexists(Path(folder, ".crawler"))
    assert not os.path.lexists(Path(folder, "develop")) or folder == "/tmp"


def test_an_output_leading_to_a_system_folder_is_refused_and_one_inside_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """By the folder it is, not the path written: a link to ``/etc`` is ``/etc``. What system
    folders hold is not refused (``/var/www``, a home folder): the list is of the folders
    themselves."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "etc").symlink_to("/etc")
    config = sample_config(tmp_path, "etc")

    assert main(["sync", "--branch", "develop", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        f"error: config error in {config}: key 'output': /etc is {SYSTEM_FOLDERS['/etc']}: "
        "give a folder for the crawler's output alone\n"
    )
    assert not os.path.lexists("/etc/.crawler")

    inside = sample_config(tmp_path)  # under /tmp: fine
    assert main(["sync", "--branch", "develop", "--config", str(inside)]) == 0
    assert (tmp_path / "out" / "develop" / "index.json").is_file()


def test_an_output_inside_proc_or_sys_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--output /proc/self`` failed only as it was written, saying '.crawler: not a folder'."""
    monkeypatch.chdir(tmp_path)
    config = sample_config(tmp_path)
    code = main(["sync", "--branch", "develop", "--config", str(config), "--output", "/proc/1"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: config error in command line: key 'output': /proc/1 is inside")
    assert "/proc, a folder of the kernel" in err


def test_every_system_folder_named_has_a_reason() -> None:
    assert all(folder.startswith("/") and reason for folder, reason in SYSTEM_FOLDERS.items())
    assert REPO.resolve() not in map(Path, SYSTEM_FOLDERS)
