"""``--json`` on ``crawler branches``, ``verify`` and ``sync``: JSON Lines on stdout, each
record's fields as docs/operations.md lists them, logs on stderr, and the exit codes of the
commands without it. The commands run in this process (``main``), but where the locale and the
bytes of a path are the point: a real process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import CLI_TIMEOUT, SAMPLE_MIRROR, InProcess, cli_env
from .test_find import on_a_terminal

SYNCED = {
    "branch",
    "status",
    "message",
    "error",
    "folder",
    "report",
    "stats",
    "changes",
    "started_at",
    "finished_at",
    "duration_seconds",
}


def lines(text: str) -> list[dict[str, Any]]:
    """Each line of ``text`` as JSON (every line must be one)."""
    return [json.loads(line) for line in text.splitlines()]


Crawl = InProcess


@pytest.fixture
def crawler(in_process: InProcess) -> Crawl:
    """``crawler(*args, cwd=...)``: ``crawler ARGS`` in this process (conftest's ``in_process``)."""
    return in_process


def test_branches(crawler: Crawl, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    shutil.copytree(SAMPLE_MIRROR, mirror)
    listed = json.loads((mirror / "cache_spack_io_index.json").read_bytes())
    document = {**listed, "broken": [{"label": "e4s", "url": listed["develop"][2]["url"]}]}
    (mirror / "cache_spack_io_index.json").write_text(json.dumps(document))
    done = crawler("branches", "--mirror", str(mirror), "--json", cwd=tmp_path)
    assert done.code == 0, done.err
    *usable, broken = lines(done.out)
    assert [r["branch"] for r in usable] == sorted(listed)
    for record in usable:
        labels = [entry["label"] for entry in listed[record["branch"]]]
        assert record["usable"] and record["problem"] is None
        assert record["stacks"][0] == "root" and sorted(record["stacks"]) == sorted(labels)
        assert set(record) == {"branch", "usable", "stacks", "how", "problem"}
    assert broken["branch"] == "broken" and not broken["usable"] and broken["stacks"] == []
    assert "no 'root' index listed" in broken["problem"]
    gone = crawler("branches", "--mirror", str(tmp_path / "nowhere"), "--json", cwd=tmp_path)
    assert gone.code == 3 and gone.out == ""


def test_sync_then_verify(crawler: Crawl, tmp_path: Path) -> None:
    output = tmp_path / "output"
    argv = ["sync", "--all", "--mirror", str(SAMPLE_MIRROR), "--output", str(output), "--json"]
    first = crawler(*argv, cwd=tmp_path)
    assert first.code == 0, first.err
    assert "published" in first.err  # the log, on stderr
    records = lines(first.out)
    assert [r["branch"] for r in records] == ["develop", "develop-2025-04-20", "v0.23.1"]
    for record in records:
        assert set(record) == SYNCED and record["status"] == "published" and not record["error"]
        folder = Path(record["folder"])
        assert folder == output.resolve() / record["branch"]
        report = json.loads((folder / "report.json").read_bytes())
        assert record["changes"] == report["changes"] and record["stats"] == report["stats"]
        assert json.loads(Path(record["report"]).read_bytes()) == report
        assert record["finished_at"] == report["finished_at"]
    again = crawler(*argv, cwd=tmp_path)
    assert again.code == 6, again.err
    statuses = [(r["status"], r["changes"]) for r in lines(again.out)]
    assert statuses == [("unchanged", None), ("skipped", None), ("skipped", None)]  # immutable

    develop = output / "develop"
    verified = crawler("verify", str(develop), "--json", cwd=tmp_path)
    assert verified.code == 0, verified.err
    assert lines(verified.out) == [
        {"path": str(develop), "ok": True, "schema": True, "problems": [], "note": None}
    ]
    quick = crawler("verify", str(develop), "--json", "-q", "--no-schema", cwd=tmp_path)
    assert lines(quick.out) == [
        {"path": str(develop), "ok": True, "schema": False, "problems": [], "note": None}
    ]
    (develop / "extra.txt").write_text("mine")
    damaged = crawler("verify", str(develop), "--json", cwd=tmp_path)
    assert damaged.code == 8
    [verdict] = lines(damaged.out)
    assert not verdict["ok"] and verdict["problems"] == [
        "extra.txt: not written by a publish (the next one would stop on it)"
    ]
    assert "1 problem" in damaged.err
    (develop / "extra.txt").unlink()
    none = crawler("verify", str(output), "--json", cwd=tmp_path)
    assert none.code == 2 and none.out == "" and "not a branch folder" in none.err


def test_sync_of_a_branch_that_fails(crawler: Crawl, tmp_path: Path) -> None:
    """A failed branch is a line too (status, error, no folder); an unusable mirror, none."""
    mirror = tmp_path / "mirror"
    shutil.copytree(SAMPLE_MIRROR, mirror)
    root = json.loads((mirror / "cache_spack_io_index.json").read_bytes())["v0.23.1"][0]["url"]
    (mirror / root.removeprefix("s3://spack-binaries/")).write_text("not an index")
    output = tmp_path / "output"
    argv = ["sync", "--mirror", str(mirror), "--output", str(output), "--json"]
    done = crawler(*argv, "--branch", "v0.23.1", cwd=tmp_path)
    assert done.code == 4
    [record] = lines(done.out)
    assert record["status"] == "failed" and record["folder"] is None and record["error"]
    assert record["stats"] is None and record["changes"] is None
    assert Path(record["report"]).is_file()
    gone = crawler(
        *argv, "--branch", "develop", "--mirror", str(tmp_path / "nowhere"), cwd=tmp_path
    )
    assert gone.code == 3 and gone.out == ""


def _run(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "crawler", *args],
        cwd=cwd,
        env={**cli_env(), **env},
        capture_output=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


@pytest.mark.slow
def test_paths_and_texts_that_are_not_utf8_or_not_in_the_locale(tmp_path: Path) -> None:
    """A path with a byte that is not UTF-8 is written in JSON as ``\\xNN`` (JSON holds text
    only), and printed as it is in text; JSON is UTF-8 whatever the locale; a text line on an
    ASCII-only stdout escapes what ASCII lacks. Never a traceback."""
    output = Path(os.fsdecode(os.fsencode(tmp_path) + b"/out\xff"))
    argv = ["sync", "--branch", "develop", "--mirror", str(SAMPLE_MIRROR), "--output", str(output)]
    synced = _run(*argv, "--json", cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    [record] = lines(synced.stdout.decode("utf-8"))  # strict: the bytes are UTF-8
    assert record["folder"] == f"{tmp_path.resolve()}/out\\xff/develop"
    assert b"/out\\xff/develop" in synced.stderr and b"udc" not in synced.stderr  # logs too
    json_logs = _run(*argv[:-1], f"{output}2", "--log-format", "json", cwd=tmp_path)
    assert json_logs.returncode == 0, json_logs.stderr
    messages = [line["message"] for line in lines(json_logs.stderr.decode())]
    assert any("/out\\xff2/develop" in message for message in messages)
    ascii_logs = _run(
        *argv[:-1], str(tmp_path / "d\xe9j\xe0-logs"), "--log-format", "json", cwd=tmp_path,
        PYTHONIOENCODING="ascii",
    )  # fmt: skip
    assert ascii_logs.returncode == 0, ascii_logs.stderr
    messages = [line["message"] for line in lines(ascii_logs.stderr.decode("ascii"))]
    assert any("/d\xe9j\xe0-logs/develop" in message for message in messages)

    develop = output / "develop"
    verified = _run("verify", str(develop), "--json", cwd=tmp_path)
    assert verified.returncode == 0, verified.stderr
    assert lines(verified.stdout.decode("utf-8"))[0]["path"] == f"{tmp_path}/out\\xff/develop"
    text = _run("verify", str(develop), cwd=tmp_path, PYTHONIOENCODING="ascii")
    assert text.returncode == 0, text.stderr
    assert text.stdout == os.fsencode(develop) + b": all checks hold\n"

    accented = tmp_path / "d\xe9j\xe0" / "develop"
    shutil.copytree(develop, accented)
    ascii_only = _run("verify", str(accented), cwd=tmp_path, PYTHONIOENCODING="ascii")
    assert ascii_only.returncode == 0, ascii_only.stderr
    assert ascii_only.stdout == f"{tmp_path}/d\\xe9j\\xe0/develop: all checks hold\n".encode()
    as_json = _run("verify", str(accented), "--json", cwd=tmp_path, PYTHONIOENCODING="ascii")
    assert as_json.returncode == 0, as_json.stderr
    assert lines(as_json.stdout.decode("utf-8"))[0]["path"] == str(accented)

    # Text from the mirror too (an index's os, say): the table escapes it, JSON is UTF-8.
    index = accented / "index.json"
    index.write_bytes(index.read_bytes().replace(b"ubuntu24.04", "ubunt\u00fc24.04".encode()))
    table = _run("find", "zlib", "--in", str(accented), cwd=tmp_path, PYTHONIOENCODING="ascii")
    assert table.returncode == 0, table.stderr
    assert b" ubunt\\xfc24.04 " in table.stdout
    found = _run(
        "find", "zlib", "--in", str(accented), "--json", cwd=tmp_path, PYTHONIOENCODING="ascii"
    )
    assert "ubunt\u00fc24.04" in {line["os"] for line in lines(found.stdout.decode("utf-8"))}
    drawn = on_a_terminal("find", "zlib", "--in", str(accented), PYTHONIOENCODING="ascii")
    # The caption (the folder) is folded to the table's width: as long as tmp_path makes it.
    assert " ubunt\\xfc24.04 " in drawn and "/d\\xe9j\\xe0/develop" in "".join(drawn.split())
