"""The ``crawler`` command as a user runs it: exit codes and what they print.

Most commands run in this process (``crawler.cli.command.main``, the ``here`` fixture), whose
working directory is the test's own folder (so the repository's ``config/crawler.yaml`` is never
picked up by accident). What only a whole process shows runs as ``python -m crawler ...`` in a
fresh one: signals, closed or full standard streams, a working folder that is gone, rights
dropped (``setpriv``), arguments that are not UTF-8, and each kind of exit once (0, 2, 3, 4,
130). Tests that need a loopback server are async and use ``asyncio.create_subprocess_exec`` so
the server keeps answering while the process runs.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml

import crawler.ops.metrics
import crawler.output.workdir
from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler import __version__, load_links
from crawler.cli.command import main, main_async
from crawler.errors import OutputError
from crawler.ops.verify import verify_branch
from crawler.output.atomic import FSYNC_EACH_UP_TO, flush_tree
from crawler.output.kept import LINKED, WRITTEN
from crawler.output.stage import BranchStage
from crawler.sync.plan import other_mirror
from crawler.urls import redacted

from .conftest import (
    CLI_TIMEOUT,
    SAMPLE_MIRROR,
    Done,
    Fault,
    ServeMirror,
    as_from_a_terminal,
    cli_env,
    fast_config,
    finish,
    start_cli,
    tree_bytes,
)

# The tests of real processes, or of whole syncs, are marked slow: not in the fast loop,
# pytest -m "not slow".


def run_cli(
    *args: str, cwd: Path, prefix: Sequence[str] = (), stdout: int = subprocess.PIPE
) -> Done:
    """Run ``python -m crawler ARGS`` to completion (no server involved), after ``prefix``;
    its stdout captured, or written to the file descriptor ``stdout`` (then ``out`` is "")."""
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "crawler", *args],
        cwd=cwd,
        env=cli_env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    return Done(proc.returncode, proc.stdout or "", proc.stderr)


async def run_cli_async(*args: str, cwd: Path) -> Done:
    """Run ``python -m crawler ARGS`` to completion while the event loop keeps serving."""
    return await finish(await start_cli(*args, cwd=cwd))


RunHere = Callable[..., Done]


@pytest.fixture
def here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> RunHere:
    """Run ``crawler.cli.command.main(ARGS)`` in this process, in ``tmp_path``, capturing its
    output.

    The exhaustive matrices use it (a real process costs ~0.4 s of imports); every kind of
    outcome is also checked once through a real process below.
    """
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> Done:
        code = main(list(args))
        captured = capsys.readouterr()
        return Done(code, captured.out, captured.err)

    return run


async def run_here_async(capsys: pytest.CaptureFixture[str], *args: str) -> Done:
    """``crawler.cli.command.main_async(ARGS)`` in this process's running loop, capturing its
    output."""
    code = await main_async(list(args))
    captured = capsys.readouterr()
    return Done(code, captured.out, captured.err)


def write_config(path: Path, settings: dict[str, Any] | str) -> Path:
    """Write a YAML config (a mapping, or raw text) and return its path."""
    path.write_text(settings if isinstance(settings, str) else yaml.safe_dump(settings))
    return path


def sample_config(tmp_path: Path, **extra: object) -> Path:
    """A config reading the committed sample mirror from its folder into ``tmp_path/out``."""
    return write_config(
        tmp_path / "sample.yaml", fast_config(str(SAMPLE_MIRROR), tmp_path / "out", **extra)
    )


def sample_labels() -> dict[str, list[str]]:
    """Labels of every ref of the sample mirror, root first then sorted."""
    document = json.loads((SAMPLE_MIRROR / "cache_spack_io_index.json").read_bytes())
    return {
        ref: sorted((e["label"] for e in entries), key=lambda label: (label != "root", label))
        for ref, entries in document.items()
    }


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- --version and --help -------------------------------------------------------------------


@pytest.mark.slow
def test_version(tmp_path: Path) -> None:
    done = run_cli("--version", cwd=tmp_path)
    assert (done.code, done.out.strip(), done.err) == (0, f"crawler {__version__}", "")


@pytest.mark.parametrize(
    ("command", "mentions"),
    [
        pytest.param((), ["sync", "branches", "--version"], id="crawler"),
        pytest.param(
            ("sync",),
            [
                "--branch",
                "--all",
                "--config",
                "--mirror",
                "--output",
                "--format",
                "--concurrency",
                "--quiet",
                "--verbose",
            ],
            id="sync",
        ),
        pytest.param(("branches",), ["--config", "--mirror", "--quiet"], id="branches"),
    ],
)
def test_help(here: RunHere, command: tuple[str, ...], mentions: list[str]) -> None:
    """In this process: test_version checks a real one's exit 0 and output."""
    done = here(*command, "--help")
    assert done.code == 0, done.err
    assert done.err == ""
    assert done.out.startswith(f"usage: crawler {' '.join(command)}".rstrip())
    for flag in mentions:
        assert flag in done.out, flag


# --- usage and config errors: exit 2 --------------------------------------------------------


def test_missing_config_file(here: RunHere, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yaml"
    done = here("sync", "--branch", "develop", "--config", str(missing))
    assert done.code == 2
    assert done.err == f"error: config error in {missing}: file not found\n"
    assert done.out == ""


def test_unknown_config_key(here: RunHere, tmp_path: Path) -> None:
    """In this process: test_bad_config_value checks a config error through a real one."""
    config = write_config(tmp_path / "x.yaml", {"mirror": str(SAMPLE_MIRROR), "mirorr": "y"})
    done = here("sync", "--branch", "develop", "--config", str(config))
    assert done.code == 2
    assert done.err == (
        f"error: config error in {config}: key 'mirorr': unknown key (did you mean 'mirror'?)\n"
    )


@pytest.mark.slow
def test_bad_config_value(tmp_path: Path) -> None:
    config = write_config(tmp_path / "bad.yaml", {"mirror": str(SAMPLE_MIRROR), "concurrency": 0})
    done = run_cli("sync", "--branch", "develop", "--config", str(config), cwd=tmp_path)
    assert done.code == 2
    assert done.err == (
        f"error: config error in {config}: key 'concurrency': "
        "must be a whole number, from 1 to 256\n"
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        pytest.param({"concurrency": "many"}, "concurrency", id="concurrency-str"),
        pytest.param({"concurrency": 1000}, "concurrency", id="concurrency-big"),
        pytest.param({"timeouts": {"read": -1}}, "timeouts.read", id="read-negative"),
        pytest.param({"timeouts": {"connect": 0}}, "timeouts.connect", id="connect-0"),
        pytest.param({"timeouts": 5}, "timeouts", id="timeouts-scalar"),
        pytest.param({"retry": {"attempts": 0}}, "retry.attempts", id="attempts-0"),
        pytest.param({"formats": ["xml"]}, "formats[0]", id="formats-xml"),
        pytest.param({"formats": []}, "formats", id="formats-empty"),
        pytest.param({"mirror": "ftp://x"}, "mirror", id="mirror-ftp"),
        pytest.param({"mirror": ""}, "mirror", id="mirror-empty"),
        pytest.param({"timeouts": {"bogus": 1}}, "timeouts.bogus", id="nested-unknown"),
        pytest.param({"rewrites": [{"replacement": "x"}]}, "rewrites[0].prefix", id="rewrite"),
    ],
)
def test_bad_config_values(
    here: RunHere, tmp_path: Path, settings: dict[str, Any], key: str
) -> None:
    config = write_config(tmp_path / "bad.yaml", {"mirror": str(SAMPLE_MIRROR), **settings})
    done = here("sync", "--branch", "develop", "--config", str(config))
    assert done.code == 2
    assert done.err.startswith(f"error: config error in {config}: key '{key}': "), done.err
    assert done.err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_mirror_url_no_request_could_use_is_a_usage_error(here: RunHere) -> None:
    """Refused at once (exit 2), not tried as a mirror that turns out unusable (exit 3)."""
    done = here("branches", "--mirror", "http://host:99999/")
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "error: config error in command line: key 'mirror': 'http://host:99999/' is not a "
        "valid URL: Port out of range 0-65535\n"
    )


@pytest.mark.parametrize("below", ["", "sub"])
def test_an_output_that_is_a_file_is_a_usage_error(
    here: RunHere, tmp_path: Path, below: str
) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    output = file / below if below else file
    config = sample_config(tmp_path)
    done = here("sync", "--branch", "develop", "--config", str(config), "--output", str(output))
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: config error in command line: key 'output': {file} is a file, not a folder\n"
    )
    assert file.read_text() == "mine"


@pytest.mark.slow
def test_an_output_whose_parent_folder_is_missing_is_a_usage_error(
    here: RunHere, tmp_path: Path
) -> None:
    """A mistyped output path used to be created, parents and all, and published into (exit 0,
    night after night, while the real output went stale): the crawler makes the output folder
    alone."""
    output = tmp_path / "typo" / "out"
    config = write_config(tmp_path / "c.yaml", fast_config(str(SAMPLE_MIRROR), output))
    done = here("sync", "--branch", "develop", "--config", str(config))
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: config error in {config}: key 'output': {output.parent} does not exist "
        "(the crawler makes the output folder, not the folders above it)\n"
    )
    assert not output.parent.exists()
    output.parent.mkdir()
    done = here("sync", "--branch", "develop", "--config", str(config))
    assert done.code == 0, done.err
    assert (output / "develop" / "index.json").is_file()


def test_an_output_under_a_dangling_link_names_the_link_too(here: RunHere, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tmp_path / "gone" / "x")
    output = tmp_path / "link" / "out"
    done = here(
        "sync",
        "--branch",
        "develop",
        "--config",
        str(sample_config(tmp_path)),
        "--output",
        str(output),
    )
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: config error in command line: key 'output': {tmp_path / 'gone' / 'x'} does not "
        f"exist ({tmp_path / 'link'} leads there) (the crawler makes the output folder, not the "
        "folders above it)\n"
    )


def test_an_output_that_cannot_be_looked_at_fails_when_written(
    here: RunHere, tmp_path: Path
) -> None:
    """Whether it is a file cannot be told (here: a name too long): the run fails when it
    writes there, naming the path, as before the check."""
    output = tmp_path / ("x" * 300) / "out"
    config = sample_config(tmp_path)
    done = here("sync", "--branch", "develop", "--config", str(config), "--output", str(output))
    assert (done.code, done.out) == (4, "")
    assert done.err.startswith(f"error: cannot write {output}") and "too long" in done.err


@pytest.mark.parametrize("value", ["", " ", "\t"], ids=["empty", "space", "tab"])
@pytest.mark.parametrize("flag", ["--output", "--mirror", "--metrics"])
def test_an_empty_path_flag_is_a_usage_error(
    here: RunHere, tmp_path: Path, flag: str, value: str
) -> None:
    """`--output "$UNSET"` in a cron line must not publish into the working directory."""
    config = sample_config(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    done = here("sync", "--branch", "develop", "--config", str(config), flag, value)
    assert (done.code, done.out) == (2, "")
    key = flag.removeprefix("--")
    assert done.err == (
        f"error: config error in command line: key '{key}': must not be empty or blank\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("command", ["sync", "branches"])
def test_an_empty_config_flag_is_a_usage_error(here: RunHere, tmp_path: Path, command: str) -> None:
    """`--config "$UNSET"` was read as the folder "." ("config error in .: Is a directory")."""
    args = [command, "--config", ""] + (["--branch", "develop"] if command == "sync" else [])
    done = here(*args)
    assert (done.code, done.out) == (2, "")
    assert done.err.endswith(f"crawler {command}: argument --config: must not be empty or blank\n")


@pytest.mark.slow
@pytest.mark.parametrize("output", ["mirror", "mirror/out"])
def test_an_output_in_a_local_mirror_is_a_usage_error(
    here: RunHere, tmp_path: Path, output: str
) -> None:
    """Its branch folders would be the mirror's ref folders: nothing is written there."""
    mirror = tmp_path / "mirror"
    shutil.copytree(SAMPLE_MIRROR, mirror)
    before = sorted(p.relative_to(mirror) for p in mirror.rglob("*"))
    done = here("sync", "--branch", "develop", "--mirror", str(mirror), "--output", output)
    assert (done.code, done.out) == (2, "")
    where = "the mirror folder" if output == "mirror" else f"inside the mirror {mirror}"
    assert done.err == (
        f"error: config error in command line: key 'output': {tmp_path / output} is {where}\n"
    )
    assert sorted(p.relative_to(mirror) for p in mirror.rglob("*")) == before


@pytest.mark.slow
def test_a_mirror_flag_that_holds_the_configs_output_is_blamed(
    here: RunHere, tmp_path: Path
) -> None:
    """--mirror given alone, to the folder the config's output is in: the flag is what is
    wrong, not the file's output key."""
    mirror = tmp_path / "mirror"
    shutil.copytree(SAMPLE_MIRROR, mirror)
    config = tmp_path / "c.yaml"
    config.write_text(f"output: {mirror / 'out'}\n")
    done = here("sync", "--branch", "develop", "--config", str(config), "--mirror", str(mirror))
    assert (done.code, done.err) == (
        2,
        f"error: config error in command line: key 'mirror': {mirror / 'out'} is inside the "
        f"mirror {mirror}\n",
    )


def _published(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A sync of the sample's develop into ``tmp_path/out``: its config and the output's files."""
    config = sample_config(tmp_path)
    assert main(["sync", "--branch", "develop", "--config", str(config), "-q"]) == 0
    return config, tree_bytes(tmp_path / "out")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--mirror", "https:/binaries.spack.io"],
            "key 'mirror': 'https:/binaries.spack.io' looks like a mistyped URL: "
            "'https://binaries.spack.io'? (write ./https:/binaries.spack.io for a folder)",
        ),
        (["--max-failed-stacks", "10001"], "argument --max-failed-stacks: must be from 0 to"),
    ],
)
def test_a_mistyped_mirror_or_too_large_budget_leaves_the_output_alone(
    here: RunHere, tmp_path: Path, flags: list[str], message: str
) -> None:
    config, before = _published(tmp_path)

    done = here("sync", "--branch", "develop", "--config", str(config), *flags)

    assert (done.code, done.out) == (2, "")
    assert message in done.err
    assert tree_bytes(tmp_path / "out") == before


@pytest.mark.slow
def test_a_too_large_budget_in_the_config_leaves_the_output_alone(
    here: RunHere, tmp_path: Path
) -> None:
    config, before = _published(tmp_path)
    settings = yaml.safe_load(config.read_text())
    write_config(config, {**settings, "publish": {"max_failed_stacks": 10001}})

    done = here("sync", "--branch", "develop", "--config", str(config))

    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: config error in {config}: key 'publish.max_failed_stacks': "
        "must be a whole number, from 0 to 10000\n"
    )
    assert tree_bytes(tmp_path / "out") == before


@pytest.mark.slow
@pytest.mark.parametrize(
    ("metrics", "reason"),
    [
        ("out/develop/index.json", "{metrics} is inside the output folder {out}"),
        ("out/metrics.prom", "{metrics} is inside the output folder {out}"),
        ("sample.yaml", "{metrics} is the config file"),
        ("pipe", "{metrics} is not a regular file"),
        ("folder", "{metrics} is not a regular file"),
        ("mirror/m.prom", "{metrics} is inside the mirror {mirror}"),
        (
            "link.prom",
            "{metrics} is a symbolic link: give the file it points to (a link in a folder "
            "others may write to could make the run replace any file)",
        ),
        (
            "textfile-colector/m.prom",
            "{parent} does not exist (the crawler makes the metrics file, not its folder)",
        ),
        (
            "victim/m.prom",
            "{parent} is a file, not a folder (the crawler makes the metrics file, not its folder)",
        ),
    ],
)
def test_a_metrics_file_the_crawler_must_not_replace_is_a_usage_error(
    here: RunHere, tmp_path: Path, metrics: str, reason: str
) -> None:
    """A metrics file in the output folder would overwrite a published file (or be a foreign
    entry of a branch folder, failing every later publish); the config file would be lost; a
    device (``/dev/null``, as root) replaced by a file, a named pipe waited on for ever. A
    link (planted in a group-writable collector folder) had the file it points to replaced; a
    mistyped folder let the sync pass with no metrics, so that alerts on them stayed silent."""
    config, before = _published(tmp_path)
    mirror = tmp_path / "mirror"
    shutil.copytree(SAMPLE_MIRROR, mirror)
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "folder").mkdir()
    (tmp_path / "victim").write_text("root's file\n")
    (tmp_path / "link.prom").symlink_to(tmp_path / "victim")
    config_text = config.read_text()
    flags = ["--config", str(config), "--metrics", metrics]
    if metrics.startswith("mirror/"):
        flags += ["--mirror", str(mirror)]

    done = here("sync", "--branch", "develop", *flags)

    assert (done.code, done.out) == (2, "")
    shown = reason.format(
        metrics=tmp_path / metrics,
        parent=(tmp_path / metrics).parent,
        out=tmp_path / "out",
        mirror=mirror,
    )
    assert done.err == f"error: config error in command line: key 'metrics': {shown}\n"
    assert tree_bytes(tmp_path / "out") == before
    assert (tmp_path / "victim").read_text() == "root's file\n"
    assert not (tmp_path / "textfile-colector").exists()
    assert config.read_text() == config_text
    assert not (mirror / "m.prom").exists()
    assert stat.S_ISFIFO((tmp_path / "pipe").lstat().st_mode)


@pytest.mark.slow
@pytest.mark.parametrize(
    "inside", ["develop/index.json", "develop/extra.prom", ".crawler/state/develop.json"]
)
def test_a_metrics_file_inside_another_outputs_branch_is_a_usage_error(
    here: RunHere, tmp_path: Path, inside: str
) -> None:
    """A run into another output folder wrote its metrics over that folder's published
    ``index.json`` (or its state, whose next sync then skipped the publish gate), or dropped
    a foreign file into one of its branch folders, which later publishes refuse to replace."""
    config, before = _published(tmp_path)
    state = tmp_path / "out" / ".crawler" / "state" / "develop.json"
    state_bytes = state.read_bytes()
    metrics = tmp_path / "out" / inside
    other = ("--output", str(tmp_path / "other"), "--metrics", str(metrics))

    done = here("sync", "--branch", "develop", "--config", str(config), *other)

    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: config error in command line: key 'metrics': {metrics} is inside a branch "
        f"folder or the .crawler of the output folder {tmp_path / 'out'}\n"
    )
    assert tree_bytes(tmp_path / "out") == before
    assert state.read_bytes() == state_bytes
    assert not (tmp_path / "other").exists()


@pytest.mark.slow
@pytest.mark.parametrize("inside", ["develop", "develop/sub", ".crawler"])
def test_an_output_inside_another_output_is_a_usage_error(
    here: RunHere, tmp_path: Path, inside: str
) -> None:
    """``--output out/develop`` for ``--output out``: its runs would put ``.crawler/`` and
    ``develop/`` into the published branch, which later publishes refuse to replace."""
    config, before = _published(tmp_path)
    output = tmp_path / "out" / inside

    done = here("sync", "--branch", "develop", "--config", str(config), "--output", str(output))

    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: config error in command line: key 'output': {output} lies inside the output "
        f"folder {tmp_path / 'out'} of other runs\n"
    )
    assert tree_bytes(tmp_path / "out") == before


@pytest.mark.slow
@pytest.mark.parametrize("beside", ["home-dotfolder", "archive-in-output"])
def test_an_output_beside_published_branches_is_no_problem(
    here: RunHere, tmp_path: Path, beside: str
) -> None:
    """A ``.crawler`` folder of another tool in a parent (``$HOME/.crawler``), or a folder of
    an output that is no branch of it (``out/archive``): neither is a published branch."""
    config, _ = _published(tmp_path)
    if beside == "home-dotfolder":
        (tmp_path / "home" / ".crawler").mkdir(parents=True)
        (tmp_path / "home" / "spack").mkdir()
        output = tmp_path / "home" / "spack" / "output"
    else:
        output = tmp_path / "out" / "archive"
    done = here("sync", "--branch", "develop", "--config", str(config), "--output", str(output))
    assert done.code == 0, done.err
    assert (output / "develop" / "index.json").is_file()


def test_a_config_file_error_names_the_file_even_with_flags(here: RunHere, tmp_path: Path) -> None:
    """An error about a value the file gave names the file, whatever flags are given (cron
    lines pass ``--metrics``); one about a flag's value names the command line."""
    (tmp_path / "afile").write_text("not a folder")
    config = write_config(tmp_path / "c.yaml", fast_config(str(SAMPLE_MIRROR), tmp_path / "afile"))
    sync = ("sync", "--branch", "develop", "--config", str(config))

    done = here(*sync, "--metrics", str(tmp_path / "m.prom"), "--concurrency", "4")
    assert (done.code, done.err) == (
        2,
        f"error: config error in {config}: key 'output': {tmp_path / 'afile'} is a file, "
        "not a folder\n",
    )
    done = here(*sync, "--output", str(tmp_path / "afile" / "out"))
    assert (done.code, done.err) == (
        2,
        f"error: config error in command line: key 'output': {tmp_path / 'afile'} is a file, "
        "not a folder\n",
    )


@pytest.mark.parametrize("flag", ["--output", "--mirror", "--metrics"])
@pytest.mark.parametrize("value", ["~no-such-user-here/x", "loop/x", "/ABS/loop/x"])
def test_a_path_that_cannot_be_resolved_is_a_usage_error(
    here: RunHere, tmp_path: Path, flag: str, value: str
) -> None:
    """An unknown user's home, a symbolic link loop (by a relative or an absolute path): exit 2
    naming the key, not a crash."""
    (tmp_path / "loop").symlink_to("loop")
    value = value.replace("/ABS", str(tmp_path))
    config = sample_config(tmp_path)

    done = here("sync", "--branch", "develop", "--config", str(config), flag, value)

    assert (done.code, done.out) == (2, "")
    assert done.err.startswith(
        f"error: config error in command line: key '{flag[2:]}': cannot resolve {value!r}: "
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_relative_flags_from_a_deleted_working_folder_are_a_usage_error(tmp_path: Path) -> None:
    """Absolute ones need no working folder: they work from anywhere."""
    gone = tmp_path / "gone"
    gone.mkdir()
    out = tmp_path / "out"
    code = (
        "import os, sys; from crawler.cli.command import main; os.chdir(sys.argv[1]); "
        "os.rmdir(sys.argv[1]); sys.exit(main(sys.argv[2:]))"
    )
    sync = ["sync", "--branch", "develop", "--mirror", str(SAMPLE_MIRROR), "-q"]

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        gone.mkdir(exist_ok=True)
        argv = [sys.executable, "-c", code, str(gone), *sync, *flags]
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=CLI_TIMEOUT, env=cli_env(), check=False
        )

    done = run("--output", "out")
    assert (done.returncode, done.stderr) == (
        2,
        "error: config error in command line: key 'output': relative, and the working folder "
        "is gone\n",
    )
    # The built-in output is relative too: not `/output`, whatever else is absolute.
    done = run("--metrics", str(tmp_path / "m.prom"))
    assert (done.returncode, done.stderr) == (
        2,
        "error: config error in <defaults>: key 'output': 'output' is relative, and the "
        "working folder is gone\n",
    )
    done = run("--output", str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "develop" / "index.json").is_file()
    (tmp_path / "c.yaml").write_text("concurrency: 4\n")
    done = run("--config", "../c.yaml", "--output", str(out))
    assert (done.returncode, done.stderr) == (
        2,
        "error: config error in ../c.yaml: relative, and the working folder is gone\n",
    )
    # A command without an output or a metrics file does not mind.
    gone.mkdir(exist_ok=True)
    argv = [sys.executable, "-c", code, str(gone), "branches", "--mirror", str(SAMPLE_MIRROR)]
    listed = subprocess.run(
        argv, capture_output=True, text=True, timeout=CLI_TIMEOUT, env=cli_env(), check=False
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("develop\troot ")


@pytest.mark.slow
def test_dot_dot_after_a_link_follows_the_filesystem(
    here: RunHere, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``link/../mirror`` is the folder ``ls`` shows there (beside the link's target), for the
    mirror and the output alike, as before paths were kept as given."""
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    shutil.copytree(SAMPLE_MIRROR, real / "mirror")
    work = tmp_path / "w"
    work.mkdir()
    (work / "link").symlink_to(real / "sub")
    monkeypatch.chdir(work)
    done = here(
        "sync", "--branch", "develop", "--mirror", "link/../mirror", "--output", "link/../out",
        "-q",
    )  # fmt: skip
    assert done.code == 0, done.err
    assert (real / "out" / "develop" / "index.json").is_file()
    assert not (work / "out").exists()


def test_a_file_url_may_name_localhost_in_any_case(here: RunHere) -> None:
    for host in ("localhost", "LOCALHOST"):
        done = here("branches", "--mirror", f"file://{host}{SAMPLE_MIRROR}")
        assert done.code == 0, done.err
        assert done.out.startswith("develop\troot ")


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file://sample/mirror", "names the host 'sample': a file URL names a folder of this"),
        ("file:///srv/m?x=1", "has a query or fragment"),
        ("file:///srv/m#top", "has a query or fragment"),
        ("file:///srv/a%00b", "holds a NUL character (%00)"),
    ],
)
def test_a_file_url_that_names_no_folder_as_written_is_a_usage_error(
    here: RunHere, url: str, reason: str
) -> None:
    """``file://sample/mirror`` used to read ``/mirror`` (the host dropped), a query or a
    fragment was dropped, and ``%00`` ended in an internal error."""
    done = here("branches", "--mirror", url)
    assert (done.code, done.out) == (2, "")
    shown = redacted(url)  # a query or a fragment is left out
    assert done.err.startswith(f"error: config error in command line: key 'mirror': {shown!r} ")
    assert reason in done.err


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:9/?x=1", "http://127.0.0.1:9/?…"),
        ("https://user:secret@127.0.0.1:9/m#top", "https://…@127.0.0.1:9/m#…"),
        ("http://127.0.0.1:9/?X-Amz-Signature=secret", "http://127.0.0.1:9/?…"),
    ],
)
def test_an_http_mirror_with_a_query_or_fragment_is_a_usage_error(
    here: RunHere, tmp_path: Path, url: str, shown: str
) -> None:
    """A query or fragment used to be kept, the files' paths added after it: the discovery
    document's request went to the server's root, which failed as "not valid JSON" (exit 3).
    The message leaves the query and the fragment out, as it leaves credentials out: they may
    be a secret (a signature, a token), and the message was printed whole."""
    done = here("sync", "--branch", "develop", "--mirror", url, "--output", "out")
    assert (done.code, done.out) == (2, "")
    assert done.err.startswith(
        f"error: config error in command line: key 'mirror': {shown!r} has a query or fragment"
    ), done.err
    assert "secret" not in done.err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("folder", "encoded"),
    [
        pytest.param("m#1 ?%41", "m%231%20%3F%2541", id="url-characters"),
        pytest.param("mirrör", "mirr%C3%B6r", id="utf-8"),
        pytest.param(os.fsdecode(b"m\xff"), "m%FF", id="not-utf-8"),
    ],
)
def test_a_mirror_folder_may_be_named_with_any_characters(
    here: RunHere, tmp_path: Path, folder: str, encoded: str
) -> None:
    """A folder's name is not a URL: ``#``, ``?`` and ``%`` are part of it, and ``index.json``
    names the mirror as the ``file://`` URL of the folder, percent-encoded. (A name that is not
    UTF-8 reaches a real process as the bytes of its arguments; the others run in this one.)"""
    run = partial(run_cli, cwd=tmp_path) if "\udcff" in folder else here
    mirror = tmp_path / folder
    shutil.copytree(SAMPLE_MIRROR, mirror)
    sync = ("sync", "--branch", "develop", "--mirror")
    done = run(*sync, folder, "--output", "out", "-q")
    assert done.code == 0, done.err
    published = json.loads((tmp_path / "out" / "develop" / "index.json").read_bytes())
    assert published["mirror"] == f"file://{quote(os.fsencode(tmp_path))}/{encoded}"
    assert published["stats"]["specs"] > 0
    # The same folder as a file:// URL, and an output inside it, refused as inside a mirror.
    done = run(*sync, published["mirror"], "--output", f"{folder}/out")
    assert (done.code, done.out) == (2, "")
    inside = f"{tmp_path / folder / 'out'} is inside the mirror {mirror}\n"
    # A byte that is not UTF-8 as \xNN, as in JSON (operations.md)
    shown = inside.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    assert done.err.endswith(shown)


@pytest.mark.slow
def test_a_mirror_inside_the_output_folder_is_fine(here: RunHere, tmp_path: Path) -> None:
    shutil.copytree(SAMPLE_MIRROR, tmp_path / "mirror")
    done = here("sync", "--branch", "develop", "--mirror", "mirror", "--output", ".", "-q")
    assert done.code == 0, done.err
    assert (tmp_path / "develop" / "index.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "named"),
    [
        pytest.param({"notes.txt": "mine", "photos/a.jpg": "x"}, "notes.txt, photos", id="files"),
        pytest.param({"pages/photos/a.jpg": "x"}, "pages/photos/a.jpg", id="in-pages"),
        pytest.param({"pages/zlib/thesis.tex": "x"}, "pages/zlib/thesis.tex", id="in-a-page"),
        pytest.param({"index.json/thesis.tex": "x"}, "index.json", id="index-a-folder"),
        pytest.param({"pages": "x"}, "pages", id="pages-a-file"),
    ],
)
def test_a_folder_the_crawler_did_not_publish_is_never_replaced(
    here: RunHere, tmp_path: Path, make: dict[str, str], named: str
) -> None:
    """The output folder may be shared (a home folder): a branch folder holding anything but
    what a publish writes stays as it is, and the branch fails."""
    config = sample_config(tmp_path)
    branch = tmp_path / "out" / "develop"
    for relative, text in make.items():
        (branch / relative).parent.mkdir(parents=True, exist_ok=True)
        (branch / relative).write_text(text)
    before = tree_bytes(branch)
    done = here("sync", "--branch", "develop", "--config", str(config))
    assert done.code == 4
    assert (
        f"branch develop failed: cannot write {branch}: holds {named}, which the crawler did "
        "not write and a publish would delete; move them away or choose another output folder"
    ) in done.err
    assert tree_bytes(branch) == before
    assert sorted(p.relative_to(branch) for p in branch.rglob("*")) == sorted(
        {Path(r) for r in make} | {p for r in make for p in Path(r).parents if str(p) != "."}
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fifo", "code"),
    [("index.json", 4), ("pages/adios2/specs.md", 4), ("report.json", 4)],
)
def test_a_named_pipe_in_a_published_branch_is_never_read(
    here: RunHere, tmp_path: Path, fifo: str, code: int
) -> None:
    """Where a published file was, a named pipe: reading it would wait for a writer for ever,
    the lock held and SIGTERM unheard. Sync sees a foreign entry and verify a file that is not
    one; neither waits (in this process: the per-test timeout ends a wait)."""
    config = sample_config(tmp_path)
    assert here("sync", "--branch", "develop", "--config", str(config)).code == 0
    branch = tmp_path / "out" / "develop"
    published = (branch / fifo).read_bytes()
    (branch / fifo).unlink()
    os.mkfifo(branch / fifo)
    try:
        done = here("sync", "--branch", "develop", "--config", str(config))
        assert done.code == code, done.err
        if code == 4:
            assert f"cannot write {branch}: holds {fifo}, which the crawler did not" in done.err
        checked = here("verify", str(branch))
        assert checked.code == 8
        assert f"{fifo}: " in checked.out and "not a regular file" in checked.out
        assert stat.S_ISFIFO((branch / fifo).lstat().st_mode)
    finally:  # for the check of every index.json left published
        (branch / fifo).unlink()
        (branch / fifo).write_bytes(published)


@pytest.mark.slow
def test_a_branch_folder_with_finder_litter_or_unchanged_is_no_problem(
    here: RunHere, tmp_path: Path
) -> None:
    """``.DS_Store`` (macOS Finder) is replaced with the rest; a branch that does not change
    replaces nothing, so a foreign file does not fail it."""
    config = sample_config(tmp_path)
    branch = tmp_path / "out" / "develop"
    branch.mkdir(parents=True)
    (branch / ".DS_Store").write_text("finder")
    assert here("sync", "--branch", "develop", "--config", str(config)).code == 0
    assert (branch / "index.json").is_file() and not (branch / ".DS_Store").exists()
    (branch / "README").write_text("served by nginx")
    assert here("sync", "--branch", "develop", "--config", str(config)).code == 6
    assert (branch / "README").read_text() == "served by nginx"


def test_a_publish_checks_the_folder_it_replaces_again(tmp_path: Path) -> None:
    """What appeared there while the branch was being read is not replaced either."""
    stage = BranchStage(tmp_path, "develop")
    stage.write("index.json", b"{}")
    (tmp_path / "develop").mkdir()
    (tmp_path / "develop" / "mine.txt").write_text("mine")
    with pytest.raises(OutputError, match=re.escape("holds mine.txt, which")):
        stage.publish()
    stage.discard()
    assert sorted(p.name for p in (tmp_path / "develop").iterdir()) == ["mine.txt"]


@pytest.mark.parametrize("pages", [2, FSYNC_EACH_UP_TO])
def test_a_staged_branch_is_flushed_file_by_file_or_all_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pages: int
) -> None:
    """A few staged files are flushed one by one: syncing the whole filesystem would wait for
    everything else unwritten on it (the summary cache, other programs' files). Thousands of
    pages are flushed with one syncfs instead of one journal commit each."""
    flushed: list[str] = []
    whole: list[Path] = []
    fsync = os.fsync

    def recorded(fd: int) -> None:
        flushed.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recorded)
    stage = BranchStage(tmp_path, "develop", flush=partial(flush_tree, flush_all=whole.append))
    staged = stage.path
    names = ["index.json", "changes.json", *(f"pages/p{i}/specs.md" for i in range(pages))]
    for name in names:
        stage.write(name, b"{}")

    published = stage.publish()

    assert sorted(p.relative_to(published).as_posix() for p in published.rglob("*.*")) == sorted(
        names
    )
    mine = {Path(p).relative_to(staged).as_posix() for p in flushed if p.startswith(str(staged))}
    if len(names) <= FSYNC_EACH_UP_TO:
        folders = {".", "pages", *(f"pages/p{i}" for i in range(pages))}
        assert mine == {*names, *folders}
        assert whole == []
    else:
        assert mine == set()
        assert whole == [staged]


def test_a_pipe_or_a_link_in_a_staged_branch_does_not_stop_its_flush(tmp_path: Path) -> None:
    """The crawler stages regular files only; a named pipe another program put there is not
    opened for reading (that would wait for a writer for ever), nor a link followed."""
    stage = BranchStage(tmp_path, "develop")
    stage.write("index.json", b"{}")
    os.mkfifo(stage.path / "pipe")
    (stage.path / "link").symlink_to("/etc/hostname")

    published = stage.publish()

    assert sorted(p.name for p in published.iterdir()) == ["index.json", "link", "pipe"]


def _publish_written_into(tmp_path: Path, write: Callable[[Path], None]) -> Path:
    """Publish a branch over a published one, ``write`` putting files into the published
    folder while the staged files are flushed, after the folder was checked."""
    old = BranchStage(tmp_path, "develop")
    old.write("index.json", b"{}")
    old.write("pages/zlib/specs.md", b"old")
    old.publish()

    def flush_while_written(path: Path) -> None:
        write(tmp_path / "develop")
        flush_tree(path)

    new = BranchStage(tmp_path, "develop", flush=flush_while_written)
    new.write("index.json", b'{"new": 1}')
    new.write("pages/zlib/specs.md", b"new")
    new.publish()
    return tmp_path / "develop"


def test_what_is_written_into_a_branch_while_it_is_replaced_is_moved_into_the_new_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The folder is checked before its replacement is flushed, which can take a while; what
    was written meanwhile was deleted with the previous folder. It is moved into the new one,
    where the next publish stops on it."""

    def write(branch: Path) -> None:
        (branch / "mine.txt").write_text("mine")
        (branch / "pages" / "zlib" / "notes.md").write_text("notes")

    branch = _publish_written_into(tmp_path, write)
    assert (branch / "index.json").read_bytes() == b'{"new": 1}'
    assert (branch / "pages" / "zlib" / "specs.md").read_bytes() == b"new"
    assert (branch / "mine.txt").read_text() == "mine"
    assert (branch / "pages" / "zlib" / "notes.md").read_text() == "notes"
    assert [p.name for p in crawler.output.workdir.staging_dir(tmp_path).iterdir()] == []
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [
        f"develop: {name} was written into {branch} while it was replaced: moved into the "
        "new one, where the next publish stops on it"
        for name in ("mine.txt", "pages/zlib/notes.md")
    ]
    with pytest.raises(OutputError, match=re.escape("holds mine.txt, pages/zlib/notes.md,")):
        BranchStage(tmp_path, "develop").publish()


def test_what_cannot_be_moved_into_the_new_branch_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A name the new folder holds too (here a folder written where index.json was) cannot be
    moved back: the previous folder is kept whole, where no run removes it."""

    def write(branch: Path) -> None:
        (branch / "index.json").unlink()
        (branch / "index.json").mkdir()
        (branch / "index.json" / "mine.txt").write_text("mine")

    branch = _publish_written_into(tmp_path, write)
    assert (branch / "index.json").read_bytes() == b'{"new": 1}'
    (kept,) = (tmp_path / ".crawler" / "staging").iterdir()
    assert kept.name.startswith("kept-develop.")
    assert (kept / "index.json" / "mine.txt").read_text() == "mine"
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "develop: the previous branch folder held what the crawler did not write, written "
        "while it was replaced, and not all of it could be moved into the new one: kept in "
        f"{kept}"
    ]
    crawler.output.workdir.recover(tmp_path)
    assert (kept / "index.json" / "mine.txt").read_text() == "mine"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[Path]:
    """An empty folder on another filesystem than ``tmp_path`` (a tmpfs, or the disk when
    ``tmp_path`` is in one): skipped where there is none."""
    device = os.stat(tmp_path).st_dev
    others = [
        place
        for place in map(Path, ("/dev/shm", "/var/tmp", "/tmp"))
        if place.is_dir() and os.access(place, os.W_OK) and os.stat(place).st_dev != device
    ]
    if not others:
        pytest.skip("no folder on another filesystem than the tests' temporary folder")
    folder = Path(tempfile.mkdtemp(dir=others[0], prefix="crawler-test-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_crawler_folder_linked_to_another_filesystem_is_refused_before_any_work(
    here: RunHere, tmp_path: Path, elsewhere: Path
) -> None:
    """``.crawler`` on its own volume: every publish used to fail after all the downloading
    and decoding, as "cannot write out/develop: Invalid cross-device link". As a link, it is
    refused as any link under the output (a ``.crawler`` mounted elsewhere is refused as on
    another filesystem)."""
    output = tmp_path / "out"
    output.mkdir()
    (output / ".crawler").symlink_to(elsewhere)
    config = sample_config(tmp_path)
    done = here("sync", "--branch", "develop", "--config", str(config))
    assert (done.code, done.out) == (4, "")
    assert done.err.endswith(f"error: cannot write {output / '.crawler'}: {LINKED}\n"), done.err
    assert "develop" not in done.err  # refused before the branch was read
    assert sorted(p.name for p in output.iterdir()) == [".crawler"]
    assert not any(elsewhere.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "what"),
    [
        *[(name, "file") for name in ("staging", "state", "reports", "tmp", "cache", "specs")],
        *[(name, "dangling link") for name in ("staging", "state", "reports", "tmp", "cache")],
    ],
)
def test_a_file_where_a_work_folder_goes_is_removed(
    here: RunHere, tmp_path: Path, name: str, what: str
) -> None:
    """At ``staging`` it failed every publish, night after night ("cannot write
    .../staging/new-develop.<hex>: File exists"); at ``state`` no run could record what it
    read, so each read everything again and warned that the next would do better; at
    ``cache``, none could use the cache, and each warned twice about every source. A link,
    even one leading nowhere, is refused instead (anyone who may write in the output may have
    put it there): the run fails before any work, naming it (at ``cache``, a volume not
    mounted yet used to be a warning: ``cache_dir`` names such a folder now). In this
    process, but for one case in a real one."""
    real = (name, what) == ("staging", "file")
    run = partial(run_cli, cwd=tmp_path) if real else here
    config = sample_config(tmp_path)
    folder = tmp_path / "out" / ".crawler" / name
    folder.parent.mkdir(parents=True)
    if what == "file":
        folder.write_text("not a folder")
    else:
        folder.symlink_to(tmp_path / "gone")
    done = run("sync", "--branch", "develop", "--config", str(config))
    if what == "dangling link":
        assert (done.code, done.out) == (4, "")
        assert done.err.endswith(f"error: cannot write {folder}: {LINKED}\n"), done.err
        assert folder.is_symlink() and not (tmp_path / "gone").exists()
        return
    assert done.code == 0, done.err
    assert f"WARNING removed {folder}, which was not a folder" in done.err
    again = run("sync", "--branch", "develop", "--config", str(config))
    assert (again.code, again.err.count("WARNING")) == (6, 0), again.err
    assert folder.is_dir() or name == "reports"  # made when a branch fails
    if name == "cache":
        assert any(folder.iterdir())


@pytest.mark.slow
def test_a_cache_that_cannot_be_written_warns_for_each_summary(tmp_path: Path) -> None:
    """Only a cache: a folder the run may not write to (or a full disk) costs each summary a
    warning with the reason, and the run goes on."""
    config = sample_config(tmp_path)
    cache = tmp_path / "out" / ".crawler" / "cache"
    cache.mkdir(parents=True)
    done = _run_as_a_user_while(
        cache, 0o555, "sync", "--branch", "develop", "--config", str(config), cwd=tmp_path
    )
    assert done.code == 0, done.err
    warnings = [line for line in done.err.splitlines() if " WARNING " in line]
    assert len(warnings) == 5, done.err  # the root and the 4 stacks there (one is missing)
    for line in warnings:
        assert (
            "WARNING cannot cache a summary (the next run decodes it again): cannot write " in line
        )
        assert line.endswith(": Permission denied"), line


@pytest.mark.slow
def test_a_crawler_folder_that_cannot_be_listed_is_named(tmp_path: Path) -> None:
    """The error named ``.crawler`` whichever of its folders could not be listed."""
    config, _ = _published(tmp_path)
    staging = tmp_path / "out" / ".crawler" / "staging"
    done = _run_as_a_user_while(
        staging, 0, "sync", "--branch", "develop", "--config", str(config), cwd=tmp_path
    )
    assert (done.code, done.out) == (4, "")
    assert done.err.endswith(f"error: cannot write {staging}: Permission denied\n"), done.err


def test_a_staging_folder_linked_elsewhere_is_not_staged_in(
    tmp_path: Path, elsewhere: Path
) -> None:
    """Staged through, it failed at the swap (another filesystem), or published what was
    built in the folder the link led to."""
    (tmp_path / ".crawler").mkdir()
    staging = tmp_path / ".crawler" / "staging"
    staging.symlink_to(elsewhere)
    with pytest.raises(OutputError) as caught:
        BranchStage(tmp_path, "develop")
    assert str(caught.value) == f"cannot write {staging}: {LINKED}"
    assert not (tmp_path / "develop").exists() and not any(elsewhere.iterdir())


def test_yaml_syntax_error(here: RunHere, tmp_path: Path) -> None:
    config = write_config(tmp_path / "broken.yaml", "mirror: [unclosed\nconcurrency: 3\n")
    done = here("branches", "--config", str(config))
    assert done.code == 2
    assert done.err.startswith(f"error: config error in {config}: not valid YAML")
    assert "Traceback" not in done.err


def test_default_config_is_read_from_the_working_directory(here: RunHere, tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    write_config(tmp_path / "config" / "crawler.yaml", {"concurrency": -3})
    done = here("branches")
    assert done.code == 2
    assert done.err.startswith(
        f"error: config error in {Path('config') / 'crawler.yaml'}: key 'concurrency': "
    )


def test_sync_needs_branch_or_all(here: RunHere, tmp_path: Path) -> None:
    done = here("sync", "--config", str(sample_config(tmp_path)))
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "error: crawler sync: give --branch NAME (repeatable) or --all, to say which branches\n"
    )
    assert not (tmp_path / "out").exists()


def test_unknown_flag(here: RunHere) -> None:
    done = here("sync", "--all", "--bogus")
    assert (done.code, done.out) == (2, "")
    assert done.err == "error: crawler sync: unrecognized arguments: --bogus\n"


@pytest.mark.parametrize(
    ("command", "codes"),
    [
        ("sync", "9 deadline passed, 129/130/143 interrupted (SIGHUP/SIGINT/SIGTERM)"),
        ("branches", "4 the list could not be written, 9 deadline passed, 129/130/143"),
        ("verify", "2 usage error (no branch folder), 8 problems found"),
    ],
)
def test_every_command_s_help_lists_its_exit_codes(here: RunHere, command: str, codes: str) -> None:
    done = here(command, "--help")
    assert done.code == 0
    assert codes in " ".join(done.out.split()), done.out


@pytest.mark.parametrize(
    ("args", "unknown"),
    [
        (("sync", "--bran", "develop"), "--bran develop"),
        (("sync", "--branch", "develop", "--out", "o"), "--out o"),
        (("branches", "--mir", "m"), "--mir m"),
        (("verify", "--no-sch", "o/develop"), "--no-sch"),
    ],
)
def test_an_abbreviated_flag_is_unknown(here: RunHere, args: tuple[str, ...], unknown: str) -> None:
    """argparse took ``--bran`` for ``--branch``: a crontab line would break, or change its
    meaning, the day another flag starting the same way is added."""
    done = here(*args)
    assert (done.code, done.out) == (2, "")
    assert done.err == f"error: crawler {args[0]}: unrecognized arguments: {unknown}\n"


def test_bad_flag_value(here: RunHere) -> None:
    done = here("sync", "--all", "--concurrency", "abc")
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        "error: crawler sync: argument --concurrency: expected a whole number, got 'abc'\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(("sync", "--all", "--branch", "develop"), "not both", id="both"),
        pytest.param(("frobnicate",), "invalid choice: 'frobnicate'", id="command"),
        pytest.param(
            (), "give a command: sync, branches, verify, audit, find, log,", id="no-command"
        ),
        pytest.param(("-q",), "give a command: sync, branches, verify,", id="only-a-flag"),
        pytest.param(
            ("--vers",), "unrecognized arguments: --vers; give a command", id="top-level-unknown"
        ),
        pytest.param(("sync", "--all", "--bogus"), "arguments: --bogus", id="sync-unknown"),
        pytest.param(
            ("sync", "--all", "--concurrency", "0"), "must be from 1 to 256, got 0", id="conc-0"
        ),
        pytest.param(
            ("sync", "--all", "--concurrency", "257"), "must be from 1 to 256", id="conc-257"
        ),
        pytest.param(
            ("sync", "--all", "--format", "xml"),
            "expected json, pages and/or html",
            id="format-xml",
        ),
        pytest.param(
            ("sync", "--all", "--format", ","),
            "expected json, pages and/or html",
            id="format-empty",
        ),
        pytest.param(("sync", "--all", "-q", "-v"), "not allowed with argument", id="q-and-v"),
        pytest.param(("branches", "--all"), "unrecognized arguments: --all", id="branches-all"),
        pytest.param(("verify", ""), "argument path: must not be empty", id="verify-empty"),
        pytest.param(("verify", " "), "argument path: must not be empty", id="verify-blank"),
        pytest.param(("verify", "nope"), "nope: no such folder (give a", id="verify-missing"),
        pytest.param(("verify", "c.yaml"), "c.yaml: not a folder (give a", id="verify-file"),
    ],
)
def test_bad_command_line(
    here: RunHere, tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    config = sample_config(tmp_path)
    (tmp_path / "c.yaml").write_text("")
    extra = ("--config", str(config)) if args and args[0] == "sync" else ()
    done = here(*args, *extra)
    assert done.code == 2
    assert done.err.startswith("error: crawler"), done.err
    assert message in done.err
    assert done.out == ""
    assert not (tmp_path / "out").exists()


#: Run a command with file permissions applying to it as to any user: as root, the capabilities
#: that override them are dropped (setpriv, from util-linux).
AS_A_USER = (
    ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]
    if os.geteuid() == 0
    else []
)


def _run_as_a_user_while(path: Path, mode: int, *args: str, cwd: Path) -> Done:
    """``run_cli(*args)`` as a user whose rights do not override file modes, while ``path``
    has ``mode`` (755 again afterwards, so that pytest can clean up)."""
    path.chmod(mode)
    try:
        return run_cli(*args, cwd=cwd, prefix=AS_A_USER)
    finally:
        path.chmod(0o755)


@pytest.mark.slow
def test_a_branch_folder_that_cannot_be_searched_fails_that_branch_alone(tmp_path: Path) -> None:
    """Its ``index.json`` could not be looked at (EACCES): the run used to end there as an
    internal error (exit 1), the branches after it never synced, the metrics saying nothing."""
    config = sample_config(tmp_path)
    assert main(["sync", "--all", "--config", str(config), "-q"]) == 0
    folder = tmp_path / "out" / "develop-2025-04-20"
    done = _run_as_a_user_while(
        folder, 0o600, "sync", "--all", "--config", str(config), "--force", cwd=tmp_path
    )
    assert done.code == 4, done.err
    assert "internal error" not in done.err and "Traceback" not in done.err
    assert (
        f"branch develop-2025-04-20 failed: cannot use {folder / 'index.json'}: "
        "Permission denied" in done.err
    )
    assert re.search(r"v0\.23\.1: (unchanged|skipped)", done.err), done.err  # synced after it


@pytest.mark.slow
def test_a_pages_folder_that_cannot_be_listed_is_named(tmp_path: Path) -> None:
    """The branch failed naming its folder, which this user could read, not its pages/."""
    mirror = tmp_path / "mirror"
    shutil.copytree(SAMPLE_MIRROR, mirror)
    config = write_config(tmp_path / "c.yaml", fast_config(str(mirror), tmp_path / "out"))
    assert main(["sync", "--branch", "develop", "--config", str(config), "-q"]) == 0
    shutil.rmtree(mirror / "develop" / "e4s")  # a change, to publish
    pages = tmp_path / "out" / "develop" / "pages"
    done = _run_as_a_user_while(
        pages, 0o200, "sync", "--branch", "develop", "--config", str(config), cwd=tmp_path
    )
    assert done.code == 4, done.err
    assert f"branch develop failed: cannot look into {pages}: Permission denied\n" in done.err


@pytest.mark.slow
def test_verify_refuses_folders_that_are_no_branch_folders(here: RunHere, tmp_path: Path) -> None:
    """``.crawler`` and a branch's ``pages`` folder are usage errors (exit 2), as the README
    says of a path that is not a branch folder; they used to be verified as branches with
    problems (exit 8). A branch folder that lost its index is a finding (exit 8)."""
    config = sample_config(tmp_path, formats=["json", "pages"])
    assert here("sync", "--branch", "develop", "--config", str(config)).code == 0
    output = tmp_path / "out"
    done = here("verify", str(output / ".crawler"))
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: crawler verify: {output / '.crawler'}: not a branch folder: '.crawler' is no "
        "branch name (give a published branch folder, such as output/develop)\n"
    )
    done = here("verify", str(output / ".crawler" / "state"))
    assert (done.code, done.err) == (
        2,
        f"error: crawler verify: {output / '.crawler' / 'state'}: a folder of "
        f"{output / '.crawler'}, the crawler's own, not a branch folder\n",
    )
    pages = output / "develop" / "pages"
    assert pages.is_dir()
    for given in (pages, pages / "zlib"):
        done = here("verify", str(given))
        assert (done.code, done.out) == (2, "")
        assert done.err == (
            f"error: crawler verify: {given}: a folder inside the branch folder "
            f"{output / 'develop'}, not a branch folder\n"
        )
    (output / "develop" / "index.json").unlink()
    assert here("verify", str(output / "develop")).code == 8


@pytest.mark.slow
def test_find_and_log_name_the_branch_folder_of_its_pages_and_site(
    here: RunHere, tmp_path: Path
) -> None:
    """Given a folder a publish wrote in a branch folder (the site's too, and one level
    down), ``find`` and ``log`` say which folder to give (exit 11), as ``verify`` does."""
    config = sample_config(tmp_path, formats=["json", "pages", "html"])
    assert here("sync", "--branch", "develop", "--config", str(config)).code == 0
    branch = tmp_path / "out" / "develop"
    for given in (branch / "pages", branch / "pages" / "zlib", branch / "site"):
        assert given.is_dir()
        for command in (["find", "zlib", "--in", str(given)], ["log", "--in", str(given)]):
            done = here(*command)
            assert (done.code, done.out) == (11, ""), command
            assert done.err.startswith(f"error: {given}: not a published branch: "), done.err
            assert f"a folder inside the branch folder {branch}, not a branch folder" in done.err
    # A branch copied into a site's folder, below an index.json of the site's own, is one.
    web = tmp_path / "web"
    (web / "site").mkdir(parents=True)
    (web / "index.json").write_text('{"hello": 1}')
    shutil.copytree(branch, web / "site" / "develop")
    for command in (["find", "zlib", "--in"], ["log", "--in"], ["verify"]):
        done = here(*command, str(web / "site" / "develop"))
        assert done.code == 0, done.err


@pytest.mark.slow
def test_verify_names_what_it_cannot_check(here: RunHere, tmp_path: Path) -> None:
    """The output folder given instead of a branch folder used to fail as a branch without an
    index (exit 8); one that cannot be searched ended in an internal error (exit 1)."""
    config = sample_config(tmp_path)
    assert here("sync", "--branch", "develop", "--config", str(config)).code == 0
    output = tmp_path / "out"
    done = here("verify", str(output))
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: crawler verify: {output}: an output folder, not a branch folder (give one of "
        "its branches: develop)\n"
    )
    done = here("verify", str(output / "devel"))  # a typo: the branches named
    assert (done.code, done.err) == (
        2,
        f"error: crawler verify: {output / 'devel'}: no such branch published in {output} "
        "(its branches: develop)\n",
    )
    done = _run_as_a_user_while(output, 0o600, "verify", str(output / "develop"), cwd=tmp_path)
    assert (done.code, done.out) == (2, "")
    assert done.err == (
        f"error: crawler verify: cannot look into {output / 'develop'}: Permission denied\n"
    )


def _exit_code(*args: str, cwd: Path, fd: int | None = 2, closed: int | None = None) -> int:
    """The exit code of ``python -m crawler ARGS`` whose ``fd`` (1 or 2) is /dev/full, where
    every write fails with ENOSPC (as on a cron log's full disk), or started with ``closed``
    closed; its other output is dropped."""
    with open("/dev/full", "w") as full:
        return subprocess.run(
            [sys.executable, "-m", "crawler", *args],
            cwd=cwd,
            env=cli_env(),
            stdout=full if fd == 1 else None if closed == 1 else subprocess.DEVNULL,
            stderr=full if fd == 2 else None if closed == 2 else subprocess.DEVNULL,
            preexec_fn=None if closed is None else lambda: os.close(closed),
            timeout=CLI_TIMEOUT,
            check=False,
        ).returncode


@pytest.mark.slow
def test_a_closed_stdout_or_stderr_changes_no_exit_code(tmp_path: Path) -> None:
    """Python gives a closed stream as None: flushing it at exit made every code 1."""
    config = sample_config(tmp_path)
    sync = ("sync", "--config", str(config), "--branch", "develop")
    assert _exit_code(*sync, cwd=tmp_path, fd=None, closed=2) == 0  # not -q: no live display
    assert _exit_code(*sync, cwd=tmp_path, fd=None, closed=1) == 6
    assert _exit_code(*sync[:3], "--branch", "nope", cwd=tmp_path, fd=None, closed=2) == 2
    assert _exit_code("branches", "--config", str(config), cwd=tmp_path, fd=None, closed=1) == 0
    verify = ("verify", str(tmp_path / "out" / "develop"))
    assert _exit_code(*verify, cwd=tmp_path, fd=None, closed=1) == 0


@pytest.mark.slow
def test_sighup_from_a_closed_terminal_stops_a_run_with_its_own_code(tmp_path: Path) -> None:
    """The live display's last write to the terminal that hung up (EIO) replaced the run's
    outcome: exit 1, "a bug", in the metrics too. The run waits for a lock held here."""
    config = sample_config(tmp_path, lock_wait=30)
    lock_file = tmp_path / "out" / ".crawler" / "lock"
    lock_file.parent.mkdir(parents=True)
    metrics = tmp_path / "m.prom"
    with open(lock_file, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        master, terminal = os.openpty()
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "crawler", "sync", "--branch", "develop"),
                *("--config", str(config), "--metrics", str(metrics)),
            ],
            cwd=tmp_path,
            env=cli_env(),
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            start_new_session=True,
            preexec_fn=as_from_a_terminal,
        )
        os.close(terminal)
        try:
            os.read(master, 1)  # the live display started
            os.close(master)  # the terminal is gone
            proc.send_signal(signal.SIGHUP)
            code = proc.wait(CLI_TIMEOUT)
        finally:
            proc.kill()
            proc.wait()
    assert code == 129
    assert "spack_cache_crawler_run_exit_code 129" in metrics.read_text()


#: ``python -c`` this, then FILE FUNCTION ARGS: the crawler's command line, which sends itself
#: SIGINT as it first calls FUNCTION of a file whose path ends with FILE (``<module>``: as it
#: imports it): a Ctrl-C at one chosen moment of the start-up.
_SIGINT_AT = """
import os, signal, sys

def interrupt(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_name == function and code.co_filename.endswith(file):
        sys.setprofile(None)
        os.kill(os.getpid(), signal.SIGINT)

file, function = sys.argv.pop(1), sys.argv.pop(1)
sys.setprofile(interrupt)
from crawler.cli.entry import run
run()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "file", "function"),
    [
        ("sync", "/datetime.py", "<module>"),  # imported by msgspec's start-up: SIGSEGV
        ("sync", "/selector_events.py", "_make_self_pipe"),  # the event loop being built
        ("sync", "/config/checks.py", "build_config"),  # the config being read
        ("find", "/datetime.py", "<module>"),  # went on: the results, then exit 0
        ("find", "/msgspec/__init__.py", "<module>"),  # a traceback
        ("verify", "/datetime.py", "<module>"),  # SIGSEGV
        ("verify", "/ops/verify.py", "verify_once"),  # went on: the verdict, then 130
        ("config", "/cli/configcmd.py", "run"),  # the same
    ],
)
def test_ctrl_c_as_a_command_starts_is_an_interrupted_run(
    tmp_path: Path, command: str, file: str, function: str
) -> None:
    """KeyboardInterrupt at a random moment of the start-up went wrong in many ways (see
    :mod:`crawler.cli.sigint`): SIGSEGV (exit -11; CI met it once in 24 interrupts at random
    moments), a lost Ctrl-C, tracebacks; and a command that runs no task (verify) took a
    Ctrl-C only once its work was done. SIGINT is held until the command can take it, and the
    command then stops at once: it says it was interrupted, exits 130, and writes nothing."""
    config = sample_config(tmp_path)
    sync = ("sync", "--config", str(config), "--branch", "develop")
    if command != "sync":  # a branch to find or verify, published in this process
        assert main([*sync, "-q"]) == 0
    published = tree_bytes(tmp_path / "out")
    args = {
        "sync": sync,
        "find": ("find", "zlib", "--output", str(tmp_path / "out")),
        "verify": ("verify", str(tmp_path / "out" / "develop")),
        "config": ("config", "--defaults"),
    }[command]
    done = subprocess.run(
        [sys.executable, "-c", _SIGINT_AT, file, function, *args],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        preexec_fn=as_from_a_terminal,
        check=False,
    )
    assert (done.returncode, done.stdout) == (130, ""), done.stderr
    if command == "sync":  # the run's own stop: its log, then its line
        assert done.stderr.endswith("interrupted by SIGINT; published output untouched\n")
        assert not re.search("Traceback|Exception|Warning", done.stderr), done.stderr
    else:
        assert done.stderr == "interrupted\n"
    assert tree_bytes(tmp_path / "out") == published


class _HangingUpTerminal(io.StringIO):
    """A stderr that is a terminal (``isatty``) which hangs up after ``writes`` writes: every
    later one fails with EIO."""

    def __init__(self, writes: int) -> None:
        super().__init__()
        self.writes = writes

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.writes <= 0:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.writes -= 1
        return super().write(text)


@pytest.mark.slow
@pytest.mark.parametrize("writes", range(5))
def test_a_terminal_that_hangs_up_during_the_display_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writes: int
) -> None:
    """The display's write (EIO) ended the run as an internal error (exit 1, "a bug") when
    it started, or failed the branch ("Input/output error") when it drew a branch's progress;
    the SIGHUP test above met the first once in a few runs, as the terminal closed that early.
    """
    config = sample_config(tmp_path)
    terminal = _HangingUpTerminal(writes)
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["sync", "--branch", "develop", "--config", str(config)]) == 0
    assert verify_branch(tmp_path / "out" / "develop") == []
    assert terminal.writes == 0  # it did hang up


@pytest.mark.slow
def test_a_signal_once_the_outcome_is_known_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handlers were removed as soon as the branches were done: a SIGTERM or SIGHUP before
    the metrics were written killed the process (no metrics, status "killed"), a SIGINT made
    the published run exit 130. Here the signal comes just before the metrics are written."""
    config = sample_config(tmp_path)
    metrics = tmp_path / "m.prom"
    write_metrics = crawler.ops.metrics.write_metrics

    def late(*args: Any) -> None:
        signal.raise_signal(signal.SIGINT)  # as SIGTERM would, but pytest survives without it
        write_metrics(*args)

    monkeypatch.setattr(crawler.ops.metrics, "write_metrics", late)
    argv = ["sync", "--branch", "develop", "--config", str(config), "--metrics", str(metrics)]
    assert main(argv) == 0
    assert "spack_cache_crawler_run_exit_code 0" in metrics.read_text()


@pytest.mark.slow
def test_a_stderr_that_cannot_be_written_changes_no_exit_code(tmp_path: Path) -> None:
    """Printing the verdict used to raise there: every code became 1 ("a bug"), and a run
    that found the output locked wrote the metrics file it must leave to the lock's holder."""
    config = sample_config(tmp_path)
    sync = ("sync", "--config", str(config))
    assert _exit_code(*sync, "--branch", "develop", cwd=tmp_path) == 0
    assert _exit_code(*sync, "--branch", "develop", cwd=tmp_path) == 6
    assert _exit_code(*sync, "--branch", "nope", cwd=tmp_path) == 2
    gone = ("--mirror", str(tmp_path / "gone"))
    assert _exit_code(*sync, "--branch", "develop", *gone, cwd=tmp_path) == 3
    metrics = tmp_path / "m.prom"
    metrics.write_text("mine\n")
    with open(tmp_path / "out" / ".crawler" / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code = _exit_code(*sync, "--branch", "develop", "--metrics", str(metrics), cwd=tmp_path)
    assert code == 7
    assert metrics.read_text() == "mine\n"
    index = tmp_path / "out" / "develop" / "index.json"
    published = index.read_bytes()
    index.write_text("{}")
    assert _exit_code("verify", str(index.parent), cwd=tmp_path) == 8
    index.write_bytes(published)


@pytest.mark.slow
@pytest.mark.parametrize("unreadable", ["pages", "pages/zlib-ng"])
def test_verify_says_which_page_folders_it_cannot_list(tmp_path: Path, unreadable: str) -> None:
    """The pages under a folder that could not be listed were reported missing, one by one;
    what else the branch holds is still reported."""
    _published(tmp_path)
    branch = tmp_path / "out" / "develop"
    (branch / "junk").write_text("not the crawler's")
    done = _run_as_a_user_while(branch / unreadable, 0o200, "verify", str(branch), cwd=tmp_path)
    assert done.code == 8, done.err
    assert done.out == (
        f"{unreadable}: cannot be listed: Permission denied (the pages in it are not checked)\n"
        "junk: not written by a publish (the next one would stop on it)\n"
    )


def _stdout_to(stdout: str, *args: str, cwd: Path) -> Done:
    """``python -m crawler ARGS`` writing its stdout into ``/dev/full`` (every write fails with
    ENOSPC, as on a full disk) or, for ``"closed pipe"``, into a pipe whose reader is gone (as
    in ``crawler branches | head -1`` once ``head`` has its line); its stderr captured."""
    if stdout == "closed pipe":
        read, write = os.pipe()
        os.close(read)
    else:
        write = os.open(stdout, os.O_WRONLY)
    try:
        return run_cli(*args, cwd=cwd, stdout=write)
    finally:
        os.close(write)


@pytest.mark.slow
def test_results_that_cannot_reach_stdout(tmp_path: Path) -> None:
    """``branches`` whose list could not be written was an internal error (exit 1, "a bug",
    a traceback); it failed (4), saying why. A reader that closes the pipe ends it quietly, as
    SIGPIPE ends other commands (141). ``verify``'s verdict is its exit code: it stands."""
    config = sample_config(tmp_path)
    branches = ("branches", "--config", str(config), "-q")
    full = _stdout_to("/dev/full", *branches, cwd=tmp_path)
    assert (full.code, full.err) == (
        4,
        "error: cannot write the list of refs to standard output: No space left on device\n",
    )
    assert _stdout_to("closed pipe", *branches, cwd=tmp_path) == Done(141, "", "")
    assert main(["sync", "--all", "--config", str(config), "-q"]) == 0
    branch = tmp_path / "out" / "develop"
    verdict = _stdout_to("/dev/full", "verify", str(branch), cwd=tmp_path)
    assert (verdict.code, verdict.err) == (
        0,
        "warning: cannot write the verdict to standard output: No space left on device\n",
    )
    assert _stdout_to("closed pipe", "verify", str(branch), cwd=tmp_path) == Done(0, "", "")
    index = branch / "index.json"
    published = index.read_bytes()
    index.write_text("{}")
    try:
        for stdout in ("/dev/full", "closed pipe"):
            found = _stdout_to(stdout, "verify", str(branch), cwd=tmp_path)
            assert found.code == 8, found.err
            assert "Traceback" not in found.err
            assert re.search(rf"\n?{re.escape(str(branch))}: \d+ problems?\n\Z", found.err)
        assert found.err.startswith(f"{branch}: ")  # the closed pipe, quietly
    finally:
        index.write_bytes(published)


@pytest.mark.slow
def test_a_bad_index_of_a_local_mirror_is_named_by_its_file(here: RunHere, tmp_path: Path) -> None:
    """Decode errors named the URL the discovery document lists (``s3://...``), where fetch
    errors name the file: a mirror's operator had to map one to the other."""
    mirror = tmp_path / "mirror"
    shutil.copytree(SAMPLE_MIRROR, mirror)
    index = mirror / "develop-2025-04-20" / "ml-linux-x86_64-cpu" / "build_cache" / "index.json"
    index.write_bytes(b'{"database": {"version": "8", "installs": {')
    index.with_name("index.json.hash").write_text(hashlib.sha256(index.read_bytes()).hexdigest())
    config = write_config(tmp_path / "c.yaml", fast_config(str(mirror), tmp_path / "out"))
    done = here("sync", "--branch", "develop-2025-04-20", "--config", str(config))
    assert done.code == 4, done.err
    assert f"ml-linux-x86_64-cpu: bad document at {index.as_uri()}: truncated JSON" in done.err
    assert "s3://" not in done.err


def test_unknown_branch_lists_the_known_ones(here: RunHere, tmp_path: Path) -> None:
    config = sample_config(tmp_path)
    done = here("sync", "--branch", "develop", "--branch", "nope", "--config", str(config))
    assert done.code == 2
    known = ", ".join(sorted(sample_labels()))
    assert done.err.endswith(
        f"error: unknown branch nope in file://{SAMPLE_MIRROR}/"
        f"cache_spack_io_index.json (known: {known})\n"
    )
    assert not (tmp_path / "out" / "develop").exists()


def test_unsafe_branch_name(here: RunHere, tmp_path: Path) -> None:
    config = sample_config(tmp_path)
    done = here("sync", "--branch=../x", "--config", str(config))
    assert (done.code, done.out) == (2, "")
    assert done.err == "error: branch name '../x' is not a safe folder name\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample.yaml"]


@pytest.mark.parametrize("name", ["..", "a/b", ".crawler", "-rf", "x\ny", "%2e%2e"])
def test_unsafe_branch_names(here: RunHere, tmp_path: Path, name: str) -> None:
    config = sample_config(tmp_path)
    done = here("sync", "--branch", "develop", f"--branch={name}", "--config", str(config))
    assert done.code == 2
    assert done.err == f"error: branch name {name!r} is not a safe folder name\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sample.yaml"]


# --- unusable mirror: exit 3 ----------------------------------------------------------------


@pytest.mark.slow
def test_unreachable_mirror(tmp_path: Path) -> None:
    mirror = f"http://127.0.0.1:{closed_port()}"
    settings = fast_config(mirror, tmp_path / "out", retry={"attempts": 1})
    config = write_config(tmp_path / "c.yaml", settings)
    started = time.monotonic()
    done = run_cli("sync", "--all", "--config", str(config), cwd=tmp_path)
    assert done.code == 3
    assert done.err.startswith(
        f"error: mirror unusable: cannot fetch {mirror}/cache_spack_io_index.json: "
    ), done.err
    assert "Traceback" not in done.err
    assert time.monotonic() - started < 10


def test_missing_mirror_folder(here: RunHere, tmp_path: Path) -> None:
    """In this process: test_unreachable_mirror checks exit 3 through a real one."""
    folder = tmp_path / "no-such-mirror"
    done = here("branches", "--mirror", str(folder))
    assert done.code == 3
    assert done.err == f"error: mirror unusable: file://{folder}: no such file or folder\n"
    assert done.out == ""


async def test_discovery_document_not_json(
    mirror_server: ServeMirror, capsys: pytest.CaptureFixture[str]
) -> None:
    server = await mirror_server(SAMPLE_MIRROR)
    server.script("cache_spack_io_index.json", Fault(body=b"<html>Service Unavailable</html>"))
    done = await run_here_async(capsys, "branches", "--mirror", server.url)
    assert done.code == 3
    assert done.err.startswith(
        f"error: mirror unusable: bad document at {server.url}/cache_spack_io_index.json: "
        "not valid JSON"
    )
    assert done.out == ""


@pytest.mark.slow
async def test_a_discovery_document_listing_no_refs_is_an_unusable_mirror(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``{}`` (a mirror being set up or torn down, a document truncated by a broken upload):
    exit 3 and a message, rather than "nothing changed" under ``--all`` and a silent, empty
    ``branches``. What was published stays."""
    config = sample_config(tmp_path)
    here_done = await run_here_async(capsys, "sync", "--all", "--config", str(config), "-q")
    assert here_done.code == 0, here_done.err
    before = tree_bytes(tmp_path / "out")
    server = await mirror_server(SAMPLE_MIRROR)
    server.script("cache_spack_io_index.json", Fault(body=b"{}"))
    server.script("cache_spack_io_index.json", Fault(body=b"{}"))
    url = f"{server.url}/cache_spack_io_index.json"

    done = await run_here_async(
        capsys, "sync", "--all", "--config", str(config), "--mirror", server.url
    )
    assert (done.code, done.out) == (3, "")
    assert (
        f"error: mirror unusable: bad document at {url}: the discovery document lists no refs"
        in done.err
    )
    done = await run_here_async(capsys, "branches", "--mirror", server.url)
    assert (done.code, done.out) == (3, "")
    assert tree_bytes(tmp_path / "out") == before


# --- successful runs ------------------------------------------------------------------------


@pytest.mark.slow
def test_sample_develop_has_binaries_but_one_tarball(here: RunHere, tmp_path: Path) -> None:
    """The README's first sync: every spec's size is known, and the one spec whose tarball the
    sample leaves out (sample/generate.py) is its only missing binary."""
    done = here("sync", "--branch", "develop", "--config", str(sample_config(tmp_path)), "-q")
    assert done.code == 0, done.err
    branch = tmp_path / "out" / "develop"
    report = json.loads((branch / "report.json").read_bytes())
    assert report["missing_binaries"] == [
        {
            "hash": "jrg56zvcg37yf37rtfbbgrcf3wnsblbx",
            "missing": "tarball",
            "name": "zlib",
            "stack": "root",
            "version": "8.2.7",
        }
    ]
    assert (report["missing_binaries_total"], report["binary_findings_total"]) == (1, 0)
    packages = json.loads((branch / "index.json").read_bytes())["packages"]
    sizes = [spec["size"] for package in packages.values() for spec in package["spec_details"]]
    assert len(sizes) == 58 and all(size.isdigit() for size in sizes)


LINE = re.compile(
    r"^\S+ \S+ INFO develop (?P<label>\S+): (?P<status>fetched|unchanged) "
    r"(?P<bytes>[\d,]+) bytes, (?P<records>[\d,]+) records"
    r"(?: \((?P<known>[\d,]+) known from the spec store\))?, (?P<seconds>\d+\.\d\d)s$"
)


@pytest.mark.slow
def test_sync_logs_one_line_per_source(here: RunHere, tmp_path: Path) -> None:
    config = sample_config(tmp_path)
    done = here("sync", "--branch", "develop", "--config", str(config))
    assert done.code == 0, done.err
    assert done.out == ""
    labels = sample_labels()["develop"]
    lines = done.err.splitlines()
    assert f" INFO develop: fetching {len(labels)} sources" in lines[0]
    per_source: dict[str, str] = {}
    for label in labels:
        mine = [line for line in lines if f" develop {label}: " in line]
        assert len(mine) == 1, (label, mine)
        per_source[label] = mine[0]
    missing = per_source.pop("ml-darwin-aarch64-mps")
    assert " INFO develop ml-darwin-aarch64-mps: missing, not an error: " in missing
    assert "the branch is built without it (cannot fetch file://" in missing
    assert missing.endswith(": no such file)")
    index = json.loads((tmp_path / "out" / "develop" / "index.json").read_bytes())
    facts = {s["label"]: s for s in index["sources"]}
    for label, line in per_source.items():
        match = LINE.match(line)
        assert match, line
        assert match["status"] == "fetched"
        assert int(match["bytes"].replace(",", "")) == facts[label]["bytes"]
        assert int(match["records"].replace(",", "")) == facts[label]["records"]
        # A root is read through the spec store (empty here); a stack never is.
        assert match["known"] == ("0" if label == "root" else None), line
    out = tmp_path / "out" / "develop"
    packages, specs = len(index["packages"]), index["stats"]["specs"]
    assert f"INFO develop: published {out}" in lines[-1]
    assert f"{specs} specs" in lines[-1]
    assert f"{packages} packages" in lines[-1]
    assert (tmp_path / "out" / "develop" / "pages").is_dir()


@pytest.mark.slow
def test_a_branch_of_one_source_is_one_source(here: RunHere, tmp_path: Path) -> None:
    build_mirror(tmp_path / "mirror", [SynthRef("a", (SynthSpec("zlib", "1.3.1"),))])
    done = here("sync", "--branch", "a", "--mirror", str(tmp_path / "mirror"), "--output", "out")
    assert done.code == 0, done.err
    assert " INFO a: fetching 1 source\n" in done.err
    assert "first publish, 1 spec in 1 package" in done.err


@pytest.mark.slow
def test_quiet_sync_prints_nothing(tmp_path: Path) -> None:
    config = sample_config(tmp_path)
    done = run_cli("sync", "--all", "-q", "--config", str(config), cwd=tmp_path)
    assert (done.code, done.out, done.err) == (0, "", "")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        ".crawler",
        *sorted(sample_labels()),
    ]


@pytest.mark.slow
async def test_verbose_sync_logs_requests_and_decisions(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-v`` (cron, a pipe) adds what was asked of the server and why a branch was rebuilt or
    not, on top of the usual lines."""
    server = await mirror_server(SAMPLE_MIRROR)
    config = write_config(tmp_path / "c.yaml", fast_config(server.url, tmp_path / "out"))
    argv = ("sync", "--branch", "develop", "--config", str(config), "-v")
    first = await run_here_async(capsys, *argv)
    second = await run_here_async(capsys, *argv)

    assert (first.code, second.code) == (0, 6)
    discovery = json.loads((SAMPLE_MIRROR / "cache_spack_io_index.json").read_bytes())
    url = next(e["url"] for e in discovery["develop"] if e["label"] == "root")
    root = url.replace("s3://spack-binaries", server.url)  # a v3 blob
    assert f" DEBUG GET {root}: HTTP 200\n" in first.err
    assert " DEBUG develop: no state of an earlier publish by this version\n" in first.err
    assert re.search(rf" DEBUG {re.escape(root)}: [0-9]+ bytes in [0-9.]+s, sha256 ", first.err)
    # this server does not allow HEAD: the blob is asked for with its ETag
    assert f" DEBUG HEAD {root}: HTTP 405\n" in second.err
    assert re.search(rf" DEBUG GET {re.escape(root)} \(If-None-Match: .+\): HTTP 304\n", second.err)
    assert " INFO develop: unchanged: output is current" in second.err


@pytest.mark.slow
def test_verbose_sync_of_a_local_mirror_logs_each_read(here: RunHere, tmp_path: Path) -> None:
    """``-v`` on a local mirror gives every index's size, time and SHA-256, as for downloads
    (README: "every download's size, time and SHA-256"): it used to say nothing of them."""
    config = sample_config(tmp_path)
    done = here("sync", "--branch", "develop", "--config", str(config), "-v")
    assert done.code == 0, done.err
    discovery = json.loads((SAMPLE_MIRROR / "cache_spack_io_index.json").read_bytes())
    url = next(e["url"] for e in discovery["develop"] if e["label"] == "root")
    path = SAMPLE_MIRROR / url.removeprefix("s3://spack-binaries/")
    body = path.read_bytes()
    line = f" DEBUG {path.as_uri()}: {len(body)} bytes in "
    assert line in done.err, done.err
    assert f"s, sha256 {hashlib.sha256(body).hexdigest()}\n" in done.err
    assert done.err.count(" bytes in ") == 5  # the root and the 4 stacks there (one is missing)


@pytest.mark.slow
def test_flags_override_the_config(here: RunHere, tmp_path: Path) -> None:
    config = sample_config(tmp_path, formats=["json"])
    done = here(
        "sync",
        "--branch",
        "v0.23.1",
        "-q",
        "--config",
        str(config),
        "--output",
        "elsewhere",
        "--format",
        "pages",
        "--concurrency",
        "1",
    )
    assert (done.code, done.err) == (0, "")
    published = tree_bytes(tmp_path / "elsewhere" / "v0.23.1")
    assert "index.json" in published
    assert any(path.startswith("pages/") for path in published)
    assert not (tmp_path / "out").exists()


def test_branches_prints_refs_and_labels(here: RunHere, tmp_path: Path) -> None:
    config = sample_config(tmp_path)
    done = here("branches", "--config", str(config))
    assert (done.code, done.err) == (0, "")
    how = f"listed in {SAMPLE_MIRROR.as_uri()}/cache_spack_io_index.json"
    expected = [f"{ref}\t{' '.join(labels)}\t{how}" for ref, labels in sample_labels().items()]
    assert done.out.splitlines() == sorted(expected)
    assert not (tmp_path / "out").exists()


async def test_branches_over_http_lists_unusable_refs(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("a", (SynthSpec("zlib", "1.3.1", stacks=("s1",)),))])
    discovery["../evil"] = discovery["a"]
    discovery["norooot"] = [e for e in discovery["a"] if e["label"] != "root"]
    root_url, s1_url = (e["url"] for e in discovery["a"])
    discovery["query"] = [{"label": "root", "url": root_url + "?versionId=1"}]
    discovery["fragment"] = [{"label": "root", "url": root_url + "#x"}]
    discovery["escape"] = [{"label": "root", "url": root_url + "\x1b[2J"}]
    discovery["bare"] = [{"label": "root", "url": root_url + "#"}]
    discovery["red\x1b[31m"] = discovery["a"]
    discovery["bidi"] = [{"label": "root", "url": root_url}, {"label": "s\u202e1", "url": s1_url}]
    (root / "cache_spack_io_index.json").write_text(json.dumps(discovery))
    server = await mirror_server(root)
    done = await run_here_async(capsys, "branches", "--mirror", server.url)
    assert (done.code, done.err) == (0, "")
    assert done.out.splitlines() == [
        f"a\troot s1\tlisted in {server.url}/cache_spack_io_index.json",
        "../evil\tUNUSABLE: ref name '../evil' is not a safe folder name",
        f"bare\tUNUSABLE: URL {root_url}#… of stack 'root' has a query or fragment",
        "bidi\tUNUSABLE: bad stack label 's\\u202e1'",
        f"escape\tUNUSABLE: URL '{root_url}\\x1b[2J' of stack 'root' holds control characters",
        f"fragment\tUNUSABLE: URL {root_url}#… of stack 'root' has a query or fragment",
        "norooot\tUNUSABLE: no 'root' index listed",
        f"query\tUNUSABLE: URL {root_url}?… of stack 'root' has a query or fragment",
        "red\\x1b[31m\tUNUSABLE: ref name 'red\\x1b[31m' is not a safe folder name",
    ]


# --- runs against a misbehaving loopback server ---------------------------------------------


def _served_config(tmp_path: Path, url: str, **extra: object) -> Path:
    """A fast config for a loopback mirror; every ref is re-synced on each run."""
    settings = fast_config(url, tmp_path / "out", mutable_refs=["*"], **extra)
    return write_config(tmp_path / "served.yaml", settings)


@pytest.mark.slow
async def test_failed_branch_exits_4_and_keeps_its_output(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The failing run in a real process; the publish before it in this one."""
    server = await mirror_server(SAMPLE_MIRROR)
    config = _served_config(tmp_path, server.url)
    first = await run_here_async(
        capsys, "sync", "--branch", "v0.23.1", "-q", "--config", str(config)
    )
    assert (first.code, first.err) == (0, "")
    before = tree_bytes(tmp_path / "out" / "v0.23.1")
    # the mirror "moves on" but its root index now fails: the sidecar no longer matches
    server.script("v0.23.1/build_cache/index.json.hash", Fault(body=b"f" * 64))
    server.script("v0.23.1/build_cache/index.json", *[Fault(502)] * 3)

    done = await run_cli_async(
        "sync",
        "--branch",
        "v0.23.1",
        "--branch",
        "develop",
        "-q",
        "--config",
        str(config),
        cwd=tmp_path,
    )

    assert done.code == 4
    location = f"{server.url}/v0.23.1/build_cache/index.json"
    assert f"cannot fetch {location}: HTTP 502 after 3 attempts" in done.err
    assert done.err.endswith("error: 1 branch(es) failed: v0.23.1\n")
    assert tree_bytes(tmp_path / "out" / "v0.23.1") == before
    assert (tmp_path / "out" / "develop" / "index.json").is_file()


@pytest.mark.slow
async def test_verbose_shows_retries(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = await mirror_server(SAMPLE_MIRROR)
    config = _served_config(tmp_path, server.url)
    server.script("v0.23.1/e4s/build_cache/index.json", Fault(503))

    done = await run_here_async(
        capsys, "sync", "--branch", "v0.23.1", "-v", "--config", str(config)
    )

    assert done.code == 0, done.err
    location = f"{server.url}/v0.23.1/e4s/build_cache/index.json"
    retry = f"retrying {location} in 0.0s (attempt 1: cannot fetch {location}: HTTP 503)"
    assert retry in done.err, done.err


@pytest.mark.slow
async def test_interrupt_exits_130_and_keeps_the_output(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The interrupted run in a real process; the publish before it in this one."""
    server = await mirror_server(SAMPLE_MIRROR)
    timeouts = {"connect": 2, "read": 20, "source": 30}
    config = _served_config(tmp_path, server.url, timeouts=timeouts)
    first = await run_here_async(
        capsys, "sync", "--branch", "v0.23.1", "-q", "--config", str(config)
    )
    assert first.code == 0, first.err
    before = tree_bytes(tmp_path / "out" / "v0.23.1")
    stalled = "v0.23.1/build_cache/index.json"
    server.script(stalled + ".hash", Fault(body=b"e" * 64))
    server.script(stalled, Fault(stall=20))
    server.requests.clear()

    proc = await start_cli(
        "sync", "--branch", "v0.23.1", "-q", "--config", str(config), cwd=tmp_path
    )
    deadline = time.monotonic() + 10
    while server.hits(stalled) == 0:
        assert time.monotonic() < deadline, "the crawler never asked for the stalled index"
        await asyncio.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    done = await finish(proc)

    assert time.monotonic() - started < 5
    assert done.code == 130
    assert "interrupted" in done.err.splitlines()[-1]
    assert "Traceback" not in done.err
    assert tree_bytes(tmp_path / "out" / "v0.23.1") == before
    staging = tmp_path / "out" / ".crawler" / "staging"
    assert not staging.exists() or list(staging.iterdir()) == []


@pytest.mark.slow
def test_a_run_report_that_cannot_be_written_stops_nothing(here: RunHere, tmp_path: Path) -> None:
    """The run report of a branch that publishes nothing (unchanged, skipped) could not be
    written (``.crawler/reports/develop.json`` is a folder; a full disk does the same): the
    error ended the whole run, exit 4, before the branches after it. After a publish it was a
    warning already; now it is one for every branch."""
    config = sample_config(tmp_path)
    assert here("sync", "--all", "--config", str(config)).code == 0
    out = tmp_path / "out"
    reports = out / ".crawler" / "reports"
    (reports / "develop.json").unlink()
    (reports / "develop.json").mkdir()
    (out / "v0.23.1" / "index.json").unlink()  # the last branch needs a repair

    done = here("sync", "--all", "--config", str(config))

    assert done.code == 0, done.err
    assert (out / "v0.23.1" / "index.json").is_file()
    assert f"WARNING develop: cannot write {reports / 'develop.json'}: " in done.err
    assert "(the run report of this branch is not saved)" in done.err
    assert "INFO develop: unchanged: output is current" in done.err


@pytest.mark.slow
def test_files_half_written_by_a_killed_run_are_removed(here: RunHere, tmp_path: Path) -> None:
    """A run killed while it wrote a branch's state or run report left ``.<name>.<hex>.tmp``
    there, for ever. The next run removes those (and only those: recorded as written, see
    :mod:`crawler.output.kept`) as it recovers."""
    config = sample_config(tmp_path)
    assert here("sync", "--branch", "develop", "--config", str(config)).code == 0
    crawler_files = tmp_path / "out" / ".crawler"
    left = [crawler_files / "state" / ".develop.json.9a2b3c4d.tmp"]
    left.append(crawler_files / "reports" / ".develop.json.00aa11bb.tmp")
    kept = [crawler_files / "reports" / "notes.tmp", crawler_files / "state" / ".a.b.tmp"]
    kept.append(crawler_files / "state" / ".develop.json.0badc0de.tmp")  # not recorded
    for path in left + kept:
        path.write_text("{")
    for path in left:  # as the killed run recorded them, before making them
        with (path.parent / WRITTEN).open("a") as written:
            written.write(f"{path.name}\n")

    done = here("sync", "--branch", "develop", "--config", str(config))

    assert done.code == 6, done.err
    assert [path.exists() for path in left + kept] == [False, False, True, True, True]
    assert f"WARNING removed {left[0]} left by an interrupted run" in done.err


@pytest.mark.slow
def test_a_state_that_cannot_be_saved_does_not_republish_every_run(
    here: RunHere, tmp_path: Path
) -> None:
    """``.crawler/state/develop.json`` is a folder: no state can be saved, so every run rebuilds
    the branch.
    It published it again each time, exit 0, "published, but cannot write ...". The rebuilt
    files are the ones published, so nothing is swapped in and the branch is unchanged."""
    config = sample_config(tmp_path)
    assert here("sync", "--branch", "develop", "--config", str(config)).code == 0
    state = tmp_path / "out" / ".crawler" / "state" / "develop.json"
    state.unlink()
    state.mkdir()
    before = tree_bytes(tmp_path / "out" / "develop")

    for _ in range(2):
        done = here("sync", "--branch", "develop", "--config", str(config))

        assert done.code == 6, done.err
        assert f"WARNING output is current, but cannot write {state}" in done.err
        assert "(the next run redoes it)" in done.err
        assert tree_bytes(tmp_path / "out" / "develop") == before


@pytest.mark.slow
def test_an_event_loop_that_cannot_close_loses_no_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Closing the event loop starts a thread to stop its default executor; under ``ulimit -v``
    that can fail after the run is done. asyncio.run() then raised, and a failed sync (exit 4)
    ended as an internal error (exit 1)."""
    config = sample_config(tmp_path)

    async def no_thread(loop: asyncio.AbstractEventLoop, *args: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(asyncio.BaseEventLoop, "shutdown_default_executor", no_thread)
    argv = ["sync", "--branch", "develop", "--config", str(config), "-q"]

    assert main(argv) == 0
    assert main([*argv, "--branch", "no-such-ref"]) == 2
    assert capsys.readouterr().err.count("warning: while exiting: can't start new thread") == 2


@pytest.mark.slow
def test_the_public_api_is_what_all_names_and_imports_nothing_until_used() -> None:
    """``import crawler`` stays cheap (each decoding process imports the package); every name
    of ``__all__`` is there when asked for."""
    code = (
        "import sys, crawler\n"
        "assert not any(m.startswith('crawler.') for m in sys.modules), sorted(sys.modules)\n"
        "for name in crawler.__all__: getattr(crawler, name)\n"
        "assert crawler.ExitCode.DEADLINE == 9 and crawler.main(['--version']) == 0\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "index",
    [
        b'{"branch":"develop","mirror":"https://a.example/m\\"x","packages":{}}',  # as written
        b'{"branch":"develop","filters":{},"mirror":"https://a.example/m\\"x"}',  # scanned
    ],
)
def test_the_published_mirror_is_read_from_the_index_head_or_else_whole(
    tmp_path: Path, index: bytes
) -> None:
    (tmp_path / "index.json").write_bytes(index)
    assert other_mirror(tmp_path, 'https://a.example/m"x') is None
    told = other_mirror(tmp_path, "https://b.example")
    assert told is not None and 'published from https://a.example/m"x, now' in told


@pytest.mark.parametrize("index", [None, b"", b'{"branch":"develop","mirror":', b"[1, 2]"])
def test_no_published_mirror_is_no_switch_and_no_error(tmp_path: Path, index: bytes | None) -> None:
    """None yet, or an index.json too damaged to name one: nothing to compare (the sync goes
    on, and repairs or refuses it as before)."""
    if index is not None:
        (tmp_path / "index.json").write_bytes(index)
    assert other_mirror(tmp_path, "https://b.example") is None


def test_a_sync_from_another_mirror_than_the_published_one_is_warned_of(
    here: RunHere, tmp_path: Path
) -> None:
    """Switching an output to another mirror went ahead silently (only the publish gate
    could stop a drop): a warning names both mirrors before the branch is read, in a dry run
    too; once published from the new one, the next sync says nothing."""
    config = sample_config(tmp_path)
    sync = ("sync", "--branch", "develop", "--config", str(config), "-q")
    assert here(*sync).code == 0
    other = tmp_path / "other-mirror"
    shutil.copytree(SAMPLE_MIRROR, other)
    warning = (
        f" WARNING develop: switching mirrors: published from {SAMPLE_MIRROR.as_uri()}, now "
        f"synced from {other.as_uri()} (its specs may all change; the publish gate checks the "
        "drop)"
    )
    dry = here(*sync, "--mirror", str(other), "--dry-run")
    assert dry.code == 0 and [line[23:] for line in dry.err.splitlines()] == [warning], dry.err
    done = here(*sync, "--mirror", str(other))
    assert done.code == 0 and [line[23:] for line in done.err.splitlines()] == [warning]
    index = json.loads((tmp_path / "out" / "develop" / "index.json").read_bytes())
    assert index["mirror"] == other.as_uri()
    # What was read of the binaries is read again from the new mirror (kept, it named the
    # old mirror's tarballs, which the new links could not hold: a traceback, exit 1).
    tarballs = [link.tarball for link in load_links(tmp_path / "out" / "develop").specs.values()]
    assert tarballs and all(t.startswith(other.as_uri()) for t in tarballs if isinstance(t, str))
    again = here(*sync, "--mirror", str(other))
    assert (again.code, again.err) == (6, "")
