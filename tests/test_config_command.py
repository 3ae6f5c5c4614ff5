"""``crawler config --defaults`` and ``crawler completion bash|zsh``, run as a user runs them:
real processes where the streams or a shell are the point, ``main`` in this process else."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crawler.cli.command import main
from crawler.cli.configcmd import default_config

from .conftest import CLI_TIMEOUT, REPO, SAMPLE_MIRROR, Done, cli_env

DOCUMENTED = REPO / "config" / "crawler.yaml"


def crawler(*args: str, cwd: Path, stdout: int = subprocess.PIPE) -> Done:
    """Run the ``crawler`` command to completion; ``stdout``: where it writes (captured)."""
    proc = subprocess.run(
        [sys.executable, "-m", "crawler", *args],
        cwd=cwd,
        env=cli_env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    return Done(proc.returncode, proc.stdout or "", proc.stderr)


def shell(argv: list[str], cwd: Path) -> Done:
    """Run a shell with the ``crawler`` of this interpreter first on its PATH."""
    env = cli_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("ZDOTDIR", None)
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False
    )
    return Done(proc.returncode, proc.stdout, proc.stderr)


def test_the_packaged_defaults_are_the_documented_config() -> None:
    """The package's copy is what config/crawler.yaml documents, byte for byte."""
    assert default_config() == DOCUMENTED.read_text("utf-8"), (
        "crawler/config/defaults.yaml differs from config/crawler.yaml: "
        "cp config/crawler.yaml crawler/config/defaults.yaml"
    )


@pytest.mark.slow
def test_config_defaults_prints_the_documented_config(tmp_path: Path) -> None:
    done = crawler("config", "--defaults", cwd=tmp_path)
    assert (done.code, done.err) == (0, "")
    assert done.out == DOCUMENTED.read_text("utf-8")


def test_the_printed_defaults_are_a_config_sync_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Saved to a file and given to --config, the defaults run a sync; their output
    (../output) is beside the folder the file was saved in. (In this process: the test
    above reads the defaults from a real one.)"""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "etc").mkdir()
    saved = tmp_path / "etc" / "crawler.yaml"
    assert main(["config", "--defaults"]) == 0
    saved.write_text(capsys.readouterr().out)
    argv = ["sync", "--branch", "develop", "--config", str(saved), "--mirror", str(SAMPLE_MIRROR)]
    assert main([*argv, "-q"]) == 0, capsys.readouterr().err
    assert (tmp_path / "output" / "develop" / "index.json").is_file()


def test_config_without_defaults_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config"]) == 2
    assert capsys.readouterr() == (
        "",
        "error: crawler config: give --defaults to print the default config\n",
    )


@pytest.mark.slow
def test_config_defaults_to_a_closed_pipe_or_a_full_disk(tmp_path: Path) -> None:
    """A reader that closed the pipe gets 141, quietly; a full disk fails the command (4)."""
    read, write = os.pipe()
    os.close(read)
    try:
        closed = crawler("config", "--defaults", cwd=tmp_path, stdout=write)
    finally:
        os.close(write)
    assert (closed.code, closed.err) == (141, "")
    with open("/dev/full", "w") as full:
        done = crawler("config", "--defaults", cwd=tmp_path, stdout=full.fileno())
    assert done.code == 4
    assert done.err == (
        "error: cannot write the default config to standard output: No space left on device\n"
    )


@pytest.mark.slow
def test_bash_completion_registers_and_completes(tmp_path: Path) -> None:
    """Sourced in a real bash, the script completes commands, flags, shells, a config file and
    a branch folder."""
    (tmp_path / "published").mkdir()
    (tmp_path / "x.yaml").touch()
    script = """
        source <(crawler completion bash)
        complete -p crawler
        offer() { COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"
                  COMP_POINT=${#COMP_LINE}; COMPREPLY=()
                  _shtab_crawler crawler "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
                  echo "${COMPREPLY[*]}"; }
        offer crawler sy
        offer crawler sync --bra
        offer crawler completion ''
        offer crawler config --
        offer crawler sync --config x
        offer crawler verify pub
        offer crawler sync --output ''
    """
    done = shell(["bash", "--norc", "--noprofile", "-c", script], tmp_path)
    assert done.code == 0, done.err
    registered, *offered = done.out.splitlines()
    assert registered == "complete -o bashdefault -F _shtab_crawler crawler"
    assert offered[:3] == ["sync", "--branch", "bash zsh fish"]
    assert "--defaults" in offered[3].split()
    assert offered[4:] == ["x.yaml", "published", "published"]  # --output: folders only


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_completion_registers(tmp_path: Path) -> None:
    """Evaluated after compinit, or saved as _crawler on $fpath, zsh completes crawler with it."""
    init = f"autoload -Uz compinit && compinit -u -d {tmp_path / 'zcompdump'}"
    evaluated = shell(
        ["zsh", "-f", "-c", f'{init}; eval "$(crawler completion zsh)"; print -r $_comps[crawler]'],
        tmp_path,
    )
    assert (evaluated.code, evaluated.out, evaluated.err) == (0, "_shtab_crawler\n", "")
    functions = tmp_path / "zfunc"
    functions.mkdir()
    with (functions / "_crawler").open("w") as out:
        assert crawler("completion", "zsh", cwd=tmp_path, stdout=out.fileno()).code == 0
    (tmp_path / "zcompdump").unlink()
    on_fpath = shell(
        ["zsh", "-f", "-c", f"fpath=({functions} $fpath); {init}; print -r $_comps[crawler]"],
        tmp_path,
    )
    assert (on_fpath.code, on_fpath.out, on_fpath.err) == (0, "_crawler\n", "")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_completion_parses_and_completes(tmp_path: Path) -> None:
    """Saved where fish looks for completions, the script parses (``fish -n``) and completes
    commands, flags, shells and a config file."""
    (tmp_path / "x.yaml").touch()
    folder = tmp_path / "completions"
    folder.mkdir()
    with (folder / "crawler.fish").open("w") as out:
        assert crawler("completion", "fish", cwd=tmp_path, stdout=out.fileno()).code == 0
    parsed = shell(["fish", "--no-config", "-n", str(folder / "crawler.fish")], tmp_path)
    assert (parsed.code, parsed.err) == (0, "")
    asked = ["crawler sy", "crawler sync --bra", "crawler completion ", "crawler sync --config x"]
    script = f"set fish_complete_path {folder} $fish_complete_path; " + "; ".join(
        f"complete -C '{line}' | cut -f1 | string join ' '" for line in asked
    )  # string join fails when it joins a single word: the code is that of the last line's
    done = shell(["fish", "--no-config", "-c", script + "; true"], tmp_path)
    assert done.code == 0, done.err
    assert done.out.splitlines() == ["sync", "--branch", "bash zsh fish", "x.yaml"]


def test_completion_of_another_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "tcsh"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "invalid choice: 'tcsh' (choose from 'bash', 'zsh', 'fish')" in err
