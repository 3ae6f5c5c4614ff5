"""``crawler find`` as a user runs it: the table and JSON Lines, each exit code, that it writes
nothing, and that it starts without the sync's imports."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shutil
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

import crawler
from crawler.cli import find
from crawler.cli import log as history_log
from crawler.cli.command import main

from .conftest import CLI_TIMEOUT, Done, cli_env, drained
from .linkjson import resolved_specs
from .test_query import sync_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample mirror's output folder, published once for the module."""
    output = tmp_path_factory.mktemp("sample") / "output"
    sync_sample(output)
    return output


HEADER = ["NAME", "VERSION", "HASH", "TARGET", "OS", "COMPILER", "SIZE", "STACKS"]


def run_find(*args: str, cwd: Path) -> Done:
    """``python -m crawler find ARGS`` in a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "crawler", "find", *args],
        cwd=cwd,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    return Done(done.returncode, done.stdout, done.stderr)


def here(capsys: pytest.CaptureFixture[str], *args: str) -> Done:
    """``crawler find ARGS`` in this process, as the ``crawler`` command's entry runs it."""
    code = find.main(list(args))
    captured = capsys.readouterr()
    return Done(code, captured.out, captured.err)


@pytest.mark.slow
def test_json_lines_and_the_table_in_a_process(sample: Path) -> None:
    done = run_find("py-numpy", "--json", "--output", str(sample), cwd=sample.parent.parent)
    assert done.code == 0, done.err
    lines = [json.loads(line) for line in done.out.splitlines()]
    assert lines and all(line["name"] == "py-numpy" for line in lines)
    index = json.loads((sample / "develop" / "index.json").read_bytes())
    expected = index["packages"]["py-numpy"]["spec_details"]
    assert [{k: v for k, v in line.items() if k != "name"} for line in lines] == expected
    linked = run_find("py-numpy", "--json", "--links", "--output", str(sample), cwd=sample)
    links = resolved_specs(sample / "develop")  # as a consumer of plain JSON resolves them
    assert [json.loads(line) for line in linked.out.splitlines()] == [
        {**line, **links[line["hash"]]} for line in lines
    ]
    alone = run_find("py-numpy", "--links", "--output", str(sample), cwd=sample)
    assert alone.code == 2 and "give --json too" in alone.err
    table = run_find("py-numpy", "--in", str(sample / "develop"), cwd=sample)
    assert table.code == 0
    header, *rows = table.out.splitlines()
    assert header.split() == [
        "NAME",
        "VERSION",
        "HASH",
        "TARGET",
        "OS",
        "COMPILER",
        "SIZE",
        "STACKS",
    ]
    assert [row.split()[2] for row in rows] == [line["hash"] for line in lines]


@pytest.mark.slow
def test_the_default_folder_is_output_develop(sample: Path) -> None:
    done = run_find("zlib", "--runs-on", "zen3", cwd=sample.parent)
    assert done.code == 0, done.err
    assert all(row.split()[0] == "zlib" for row in done.out.splitlines()[1:])


@pytest.mark.slow
def test_a_table_on_a_terminal(sample: Path) -> None:
    """On a terminal, rich draws it: short hashes, and a caption with the counts."""
    text = on_a_terminal("find", "zlib", "--in", str(sample / "develop"))
    index = json.loads((sample / "develop" / "index.json").read_bytes())
    hashes = [s["hash"] for s in index["packages"]["zlib"]["spec_details"]]
    assert all(h[:7] in text for h in hashes) and hashes[0] not in text
    assert f"{len(hashes)} specs of 1 package in " in text  # it said "spec(s) of 1 package(s)"
    header = re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()[0].split()
    assert header == [
        "NAME",
        "VERSION",
        "HASH",
        "TARGET",
        "OS",
        "COMPILER",
        "SIZE",
        "STACKS",
    ]  # a pipe's


@pytest.mark.slow
def test_control_characters_and_markup_in_an_index_are_shown_as_text(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A published index is anyone's to write: an escape sequence in a compiler reached the
    terminal as it was (it could retitle the window, clear the screen), and rich took ``[/x]``
    in a cell for its markup and failed. Both are printed as text, escaped, table or terminal."""
    branch = tmp_path / "develop"
    shutil.copytree(sample / "develop", branch)
    index = json.loads((branch / "index.json").read_bytes())
    first, second = index["packages"]["zlib"]["spec_details"]
    first["os"], second["compiler"] = "[/oops]", "gcc\x1b]0;PWNED\x07\x1b[2J@1"
    (branch / "index.json").write_text(json.dumps(index))
    table = here(capsys, "zlib", "--in", str(branch))
    assert table.code == 0, table.err
    assert " [/oops] " in table.out and " gcc\\x1b]0;PWNED\\x07\\x1b[2J@1 " in table.out
    # rich takes a dumb terminal for 80 columns, whatever its size: a real one is 200 wide.
    drawn = on_a_terminal("find", "zlib", "--in", str(branch), COLUMNS="200", TERM="xterm")
    assert "[/oops]" in drawn and "\\x1b]0;PWNED" in drawn and "\x1b]0" not in drawn


def on_a_terminal(*args: str, **env: str) -> str:
    """What ``crawler ARGS`` prints on its standard output when that is a terminal (160
    columns wide, or ``COLUMNS`` of ``env``: the terminal's size too, which rich reads),
    with ``env`` added to its environment; it must exit 0."""
    leader, follower = pty.openpty()
    columns = int(env.get("COLUMNS", "160"))
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "crawler", *args],
            stdout=follower,
            stderr=subprocess.DEVNULL,
            env={**cli_env(), "COLUMNS": "160", "TERM": "dumb", **env},
        )
        os.close(follower)
        drawn = drained(leader)
        assert process.wait(timeout=CLI_TIMEOUT) == 0
    finally:
        os.close(leader)
    return drawn.decode()


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "table"])
def test_a_reader_gone_in_the_middle_of_the_results_is_141(sample: Path, as_json: bool) -> None:
    """``crawler find | head -1`` with ``PYTHONUNBUFFERED`` set (as :func:`cli_env` does, and
    many containers): the results are more than the pipe holds, so the write in progress when
    ``head`` goes took only part of them. That part was all the command wrote, and it exited 0
    with its results cut short; it now says 141, as SIGPIPE would, and nothing on stderr."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)  # the smallest pipe: the results do not fit
    args = ["find", "--in", str(sample / "develop"), *(["--json"] if as_json else [])]
    assert cli_env()["PYTHONUNBUFFERED"] == "1"
    with subprocess.Popen(
        [sys.executable, "-m", "crawler", *args],
        stdout=write,
        stderr=subprocess.PIPE,
        env=cli_env(),
    ) as process:
        os.close(write)
        with os.fdopen(read, "rb") as reader:
            first = reader.readline()  # then gone, as head
        _, err = process.communicate(timeout=CLI_TIMEOUT)
    assert (process.returncode, err) == (141, b"")
    assert json.loads(first)["name"] if as_json else first.startswith(b"NAME")


@pytest.mark.parametrize("unbuffered", [True, False], ids=["unbuffered", "buffered"])
def test_a_non_blocking_stdout_gets_the_results_whole(sample: Path, unbuffered: bool) -> None:
    """A stdout left non-blocking by whoever started the command (some process managers do)
    refuses what its pipe cannot take yet: that is waited for, not an error (exit 4, as it was
    buffered) nor a loss (unbuffered)."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    os.set_blocking(write, False)
    env = cli_env()
    if not unbuffered:
        del env["PYTHONUNBUFFERED"]
    args = [sys.executable, "-m", "crawler", "find", "--in", str(sample / "develop"), "--json"]
    with subprocess.Popen(args, stdout=write, stderr=subprocess.PIPE, env=env) as process:
        os.close(write)
        chunks = []
        with os.fdopen(read, "rb", buffering=0) as reader:
            while chunk := reader.read(1024):  # slowly: the pipe fills up
                chunks.append(chunk)
                time.sleep(0.002)
        _, err = process.communicate(timeout=CLI_TIMEOUT)
    assert (process.returncode, err) == (0, b"")
    lines = b"".join(chunks).splitlines()
    assert len(lines) > 40 and all(json.loads(line)["name"] for line in lines)


def test_every_exit_code(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    develop = str(sample / "develop")
    assert here(capsys, "--in", develop, "--family", "aarch64").code == 0
    nothing = here(capsys, "py-numpy", "--in", develop, "--target", "m1", "--os", "ubuntu24.04")
    assert (nothing.code, nothing.out) == (10, "")
    assert "no spec of" in nothing.err and "meets the criteria (it has 58): " in nothing.err
    assert nothing.err.endswith(": named py-numpy: 3, and with target m1: 0\n")
    narrowed = here(capsys, "--in", develop, "--runs-on", "neoverse_v2", "--compiler", "gcc@99")
    assert narrowed.code == 10, narrowed.err
    assert narrowed.err.endswith(": running on neoverse_v2: 12, and with compiler gcc@99: 0\n")
    typo = here(capsys, "py-nump", "--in", develop)
    assert typo.code == 10 and "no package 'py-nump'" in typo.err and "py-numpy" in typo.err
    output = here(capsys, "--in", str(sample))
    assert output.code == 11 and "an output folder, not a branch folder" in output.err
    missing = here(capsys, "--output", str(sample), "--branch", "v9")
    assert missing.code == 11 and "no such branch published" in missing.err
    host = here(capsys, "--in", develop, "--runs-on", "zen99")
    assert host.code == 13 and "error: unknown host 'zen99'" in host.err
    for bad in (["--version", "1:2:3"], ["--variant", "mpi"], ["--branch", "../x"], ["--bogus"]):
        done = here(capsys, *bad)
        assert done.code == 2 and done.err.startswith("error: "), bad
    for empty in ("--branch", "--output"):  # "$UNSET" is no default: it read output/develop
        done = here(capsys, "--output", str(sample), empty, "")
        assert done.code == 2 and done.err.startswith("error: "), empty
    both = here(capsys, "--in", develop, "--branch", "develop")
    assert both.code == 2 and "not both" in both.err


def test_a_newer_index_is_exit_12(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads((sample / "develop" / "index.json").read_bytes())
    document["schema_version"] = 3
    (tmp_path / "develop").mkdir()
    (tmp_path / "develop" / "index.json").write_text(json.dumps(document))
    done = here(capsys, "--output", str(tmp_path))
    assert done.code == 12 and "schema_version 3 is newer" in done.err and done.out == ""


def test_unknown_targets_in_the_index_are_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import msgspec

    from .test_query import generated_index

    (tmp_path / "develop").mkdir()
    (tmp_path / "develop" / "index.json").write_bytes(msgspec.json.encode(generated_index(20, 5)))
    done = here(capsys, "--output", str(tmp_path), "--family", "x86_64", "--json")
    assert (done.code == 0 and len(done.out.splitlines()) == 20 * 4 * 3 // 7) or done.out
    assert done.err.count("warning:") == 1 and "zen99_future" in done.err


@pytest.mark.parametrize("schema", [1, 2])
def test_links_asked_of_a_branch_without_links_json_are_a_warning(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], schema: int
) -> None:
    """An index copied without its links.json (schema 2), or one of schema 1, before there
    were links (whose links.json, copied beside it, is not read), gave JSON lines without
    links, and said nothing."""
    document = json.loads((sample / "develop" / "index.json").read_bytes())
    document["schema_version"] = schema
    (tmp_path / "develop").mkdir()
    (tmp_path / "develop" / "index.json").write_text(json.dumps(document))
    if schema == 1:
        shutil.copy(sample / "develop" / "links.json", tmp_path / "develop")
    done = here(capsys, "zlib", "--json", "--links", "--in", str(tmp_path / "develop"))
    lines = [json.loads(line) for line in done.out.splitlines()]
    assert done.code == 0 and lines and not any("locations" in line for line in lines)
    assert done.err == (
        f"warning: {tmp_path / 'develop'} has no links (no links.json beside its index, or an "
        "index of schema 1, before them): the lines have no dependencies or locations\n"
    )
    linked = here(capsys, "zlib", "--json", "--links", "--in", str(sample / "develop"))
    assert linked.err == "" and all("locations" in json.loads(x) for x in linked.out.splitlines())


def test_links_keep_the_virtuals_each_dependency_provides(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each JSON line's dependencies say what they provide (the compiler ``c``, ``cxx``...),
    as the records' edges do; an edge that provides nothing has no ``virtuals``."""
    done = here(capsys, "--json", "--links", "--branch", "develop", "--output", str(sample))
    edges = [e for line in done.out.splitlines() for e in json.loads(line)["dependencies"]]
    provided = {e["name"]: tuple(e["virtuals"]) for e in edges if "virtuals" in e}
    assert done.code == 0 and provided.get("gcc") == ("c", "cxx"), provided
    assert all(e["virtuals"] == sorted(set(e["virtuals"])) for e in edges if "virtuals" in e)
    assert any("virtuals" not in e for e in edges)
    links = crawler.load_links(sample / "develop")
    assert any(d.virtuals == ("c", "cxx") for s in links.specs.values() for d in s.dependencies)


def test_the_command_line_runs_find_in_process(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["find", "zlib", "--in", str(sample / "develop"), "--json"])
    out = capsys.readouterr().out
    assert code == 0 and all(json.loads(line)["name"] == "zlib" for line in out.splitlines())
    assert main(["find", "nope", "--in", str(sample / "develop")]) == 10
    assert main(["find", "--in", str(sample)]) == 11


def test_find_writes_nothing(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def tree() -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(sample)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in sorted(sample.rglob("*"))
        }

    before = tree()
    for args in (["zlib"], ["--runs-on", "zen3", "--json"], ["nope"], ["--branch", "v0.23.1"]):
        here(capsys, "--output", str(sample), *args)
    assert tree() == before


@pytest.mark.slow
def test_find_starts_without_the_sync(sample: Path) -> None:
    """Only what find uses is imported: no aiohttp, no decoding pool, no config, no rich for a
    pipe, no archspec unless a target family or host is asked about. (``-X importtime``
    names every module imported, also of a process that ends without Python's teardown.)"""
    imported = imported_by("find", "zlib", "--in", str(sample / "develop"))
    assert "crawler.consume.load" in imported  # the lines were read
    assert [m for m in HEAVY if m in imported] == []


#: What a consumer's command imports only when it needs it: none of it for a query by name
#: into a pipe.
HEAVY = ["aiohttp", "asyncio", "crawler.sync", "crawler.decode.pool", "crawler.config", "yaml"]
HEAVY += ["jsonschema_rs", "rich", "archspec"]


def imported_by(*args: str) -> set[str]:
    """The modules ``crawler ARGS`` imports, as ``-X importtime`` names them (also those of a
    process that ends without Python's teardown); it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "crawler", *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return {
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }


def test_a_spec_built_with_no_compiler_shows_none_in_the_table(
    sample: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table said ``none``, a compiler's name to a reader; Spack writes no ``%`` for such
    a spec. index.json (and --json) keep the ``none`` the pages have."""
    done = here(capsys, "py-numpy", "--in", str(sample / "develop"))
    assert done.code == 0, done.err
    rows = {row.split()[2]: row.split() for row in done.out.splitlines()[1:]}
    compilers = {digest[:7]: row[5] for digest, row in rows.items()}
    assert compilers["ad5bjyz"] == "-" and "none" not in done.out
    zlib = here(capsys, "zlib", "--in", str(sample / "develop"))
    assert {row.split()[5] for row in zlib.out.splitlines()[1:]} == {
        "apple-clang@16.0.0",
        "gcc@13.2.0",
    }
    as_json = here(capsys, "py-numpy", "--json", "--in", str(sample / "develop"))
    assert '"compiler":"none"' in as_json.out


def test_find_and_log_read_the_output_folder_of_the_config(
    sample: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With the config elsewhere than the output (in /etc, say), ``find`` and ``log`` needed
    ``--output`` every time: they read the config's output folder, from ``--config``,
    ``$CRAWLER_CONFIG`` or ``./config/crawler.yaml`` as sync does; ``--output`` still wins."""
    config = tmp_path / "etc" / "crawler.yaml"
    config.parent.mkdir()
    config.write_text(f"output: {sample}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    given = here(capsys, "zlib", "--config", str(config))
    assert given.code == 0 and given.out.splitlines()[1].startswith("zlib "), given.err
    monkeypatch.setenv("CRAWLER_CONFIG", str(config))
    assert here(capsys, "zlib").out == given.out
    logged = log_here(capsys)
    assert logged.code == 0 and logged.out.startswith("PUBLISHED "), logged.err
    gone = here(capsys, "zlib", "--output", str(tmp_path / "gone"))
    assert gone.code == 11 and "--output named the output folder, no config was read" in gone.err
    both = here(capsys, "zlib", "--in", str(sample / "develop"), "--config", str(config))
    assert (both.code, both.err) == (
        2,
        "error: give --in FOLDER, or --output (or --config) and --branch, not both\n",
    )
    monkeypatch.delenv("CRAWLER_CONFIG")
    (elsewhere / "config").mkdir()
    (elsewhere / "config" / "crawler.yaml").write_text(f"output: {sample}\n")
    assert here(capsys, "zlib").out == given.out
    monkeypatch.setenv("CRAWLER_CONFIG", str(tmp_path / "nope.yaml"))  # before ./config
    missing = here(capsys, "zlib")
    assert (missing.code, missing.err) == (
        2,
        f"error: config error in {tmp_path / 'nope.yaml'}: file not found "
        "(named by CRAWLER_CONFIG)\n",
    )


def log_here(capsys: pytest.CaptureFixture[str], *args: str) -> Done:
    """``crawler log ARGS`` in this process, as the ``crawler`` command's entry runs it."""
    code = history_log.main(list(args))
    captured = capsys.readouterr()
    return Done(code, captured.out, captured.err)


#: How find's and log's errors end when no published branch is where they looked.
WAYS = (
    "point at a branch with --in FOLDER, or --output DIR (and --branch NAME), or a config "
    "whose output holds it with --config FILE or CRAWLER_CONFIG=FILE\n"
)


def test_no_branch_found_says_which_config_was_read_and_every_way_to_point_at_one(
    sample: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """From another folder, ``crawler find zlib`` said only ``output/develop: not a published
    branch``, mentioning neither ``--output``, ``--in`` nor a config (exit 11 stays)."""
    monkeypatch.chdir(tmp_path)
    for done in (here(capsys, "zlib"), log_here(capsys)):
        assert (done.code, done.out) == (11, "")
        assert done.err == (
            "error: output/develop: not a published branch: no such folder (give a published "
            "branch folder, such as output/develop); no config was read (no --config, "
            "CRAWLER_CONFIG unset, no ./config/crawler.yaml), so the output folder is "
            f"./output; {WAYS}"
        )
    config = tmp_path / "crawler.yaml"
    config.write_text(f"output: {sample}\n")
    monkeypatch.setenv("CRAWLER_CONFIG", str(config))
    done = here(capsys, "zlib", "--branch", "v9")
    assert (done.code, done.err) == (
        11,
        f"error: {sample / 'v9'}: not a published branch: no such branch published in "
        f"{sample} (its branches: develop, develop-2025-04-20, v0.23.1); {sample} is the "
        f"output folder of the config {config} (named by CRAWLER_CONFIG); {WAYS}",
    )
    done = here(capsys, "zlib", "--in", str(tmp_path / "v9"))
    assert done.code == 11 and done.err.endswith(f"--in named it, no config was read; {WAYS}")
    # A branch that is there but broken is no matter of where to look: no ways.
    broken = tmp_path / "broken"
    shutil.copytree(sample / "develop", broken)
    (broken / "index.json").write_text("[")
    done = here(capsys, "zlib", "--in", str(broken))
    assert done.code == 11 and "--in FOLDER" not in done.err, done.err
    shutil.rmtree(broken)  # not left for the schema check of every index a test leaves
