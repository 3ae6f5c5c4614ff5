"""``crawler diff`` and ``crawler.diff_indexes``: what changed between two published branches of
the sample mirror (checked against the documents themselves), a record changed under its hash,
each exit code, and that it writes nothing and starts without the sync."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

import crawler
from crawler.cli import diff as diff_cli
from crawler.cli.command import main
from crawler.output.render import encode_json

from .conftest import Done, tree_bytes
from .test_find import HEAVY, imported_by, on_a_terminal
from .test_messages import crawler as in_a_process
from .test_query import sync_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample mirror's output folder, published once for the module."""
    output = tmp_path_factory.mktemp("sample") / "output"
    sync_sample(output)
    return output


def run_diff(*args: str, cwd: Path) -> Done:
    """``python -m crawler diff ARGS`` in a process of its own."""
    return in_a_process("diff", *args, cwd=cwd)


def here(capsys: pytest.CaptureFixture[str], *args: str) -> Done:
    """``crawler diff ARGS`` in this process, as the ``crawler`` command's entry runs it."""
    code = diff_cli.main(list(args))
    captured = capsys.readouterr()
    return Done(code, captured.out, captured.err)


def specs_of(folder: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """package -> hash -> its spec_details entry, read with json."""
    index = json.loads((folder / "index.json").read_bytes())
    return {
        name: {s["hash"]: s for s in package["spec_details"]}
        for name, package in index["packages"].items()
    }


def expected_changes(before: Path, after: Path) -> set[tuple[str, str, str]]:
    """(change, package, hash or version) of every change, computed from the two files."""
    old, new = specs_of(before), specs_of(after)
    changes = set()
    for name in old.keys() | new.keys():
        a, b = old.get(name, {}), new.get(name, {})
        if name not in new or name not in old:
            changes.add((f"package_{'removed' if name not in new else 'added'}", name, ""))
        changes |= {("spec_removed", name, h) for h in a.keys() - b.keys()}
        changes |= {("spec_added", name, h) for h in b.keys() - a.keys()}
        changes |= {("spec_changed", name, h) for h in a.keys() & b.keys() if a[h] != b[h]}
        versions_a = {s["versions"][0] for s in a.values()}
        versions_b = {s["versions"][0] for s in b.values()}
        changes |= {("version_removed", name, v) for v in versions_a - versions_b}
        changes |= {("version_added", name, v) for v in versions_b - versions_a}
    return changes


def as_json(record: msgspec.Struct) -> Any:
    """A record as JSON gives it back (lists, not tuples)."""
    return json.loads(msgspec.json.encode(record))


def summary(record: dict[str, Any]) -> tuple[str, str, str]:
    key = record.get("hash") or record.get("version") or ""
    if record["change"].startswith("version_"):
        key = record["version"]
    return record["change"], record["name"], key


def edited_copy(source: Path, target: Path, pretty: bool = False) -> Path:
    """A copy of the branch ``source`` in ``target`` (a folder of the same name) in which a
    spec of zlib moved between stacks and lost a variant, one of hdf5 has another compiler,
    and nothing else changed; ``pretty``: written indented, every package's bytes changed."""
    index = json.loads((source / "index.json").read_bytes())
    zlib = index["packages"]["zlib"]["spec_details"][0]
    zlib["stacks"] = sorted({*zlib["stacks"], "e4s"} - {"data-vis-sdk"} ^ {"ml-linux-x86_64-cpu"})
    zlib["variants"] = zlib["variants"][:-1]
    index["packages"]["hdf5"]["spec_details"][0]["compiler"] = "gcc@99.1"
    target.mkdir(parents=True)
    data = json.dumps(index, indent=2).encode() if pretty else encode_json(index)
    (target / "index.json").write_bytes(data)
    return target


def test_two_branches_compared_as_the_documents_say(sample: Path) -> None:
    develop, snapshot = sample / "develop", sample / "develop-2025-04-20"
    diff = crawler.diff_indexes(develop, snapshot)
    assert (diff.before, diff.after) == ("develop", "develop-2025-04-20") and diff
    records = [as_json(r) for r in diff.records()]
    assert {summary(r) for r in records} == expected_changes(develop, snapshot)
    assert len(records) == len({summary(r) for r in records})  # each change once
    old, new = specs_of(develop), specs_of(snapshot)
    for record in records:  # a spec's entry is the newer one, or the removed one
        if record["change"] == "spec_added":
            assert record["spec"] == new[record["name"]][record["hash"]]
        if record["change"] == "spec_removed":
            assert record["spec"] == old[record["name"]][record["hash"]]
    totals = diff.totals
    assert totals.specs_added == sum(r["change"] == "spec_added" for r in records) > 0
    assert totals.packages_removed == sum(r["change"] == "package_removed" for r in records) > 0


@pytest.mark.parametrize("pretty", [False, True], ids=["as published", "pretty-printed"])
def test_a_record_changed_under_its_hash(sample: Path, tmp_path: Path, pretty: bool) -> None:
    develop = sample / "develop"
    copy = edited_copy(develop, tmp_path / "develop", pretty=pretty)
    diff = crawler.diff_indexes(develop, copy)
    assert [(p.name, p.change) for p in diff.packages] == [("hdf5", "changed"), ("zlib", "changed")]
    hdf5, zlib = (as_json(r) for r in diff.records())
    before = specs_of(develop)["zlib"][zlib["hash"]]
    assert zlib["change"] == "spec_changed" and zlib["fields"] == ["stacks", "variants"]
    assert zlib["before"] == {"stacks": before["stacks"], "variants": before["variants"]}
    assert zlib["spec"] == specs_of(copy)["zlib"][zlib["hash"]]
    gained = sorted(set(zlib["spec"]["stacks"]) - set(before["stacks"]))
    lost = sorted(set(before["stacks"]) - set(zlib["spec"]["stacks"]))
    assert (zlib.get("stacks_added", []), zlib.get("stacks_removed", [])) == (gained, lost)
    assert gained or lost
    assert hdf5["fields"] == ["compiler"] and hdf5["spec"]["compiler"] == "gcc@99.1"
    assert "stacks_added" not in hdf5 and "stacks_removed" not in hdf5
    # the same, from indexes already read
    assert crawler.diff_indexes(crawler.load_index(develop), crawler.load_index(copy)) == diff


@pytest.mark.slow
def test_json_lines_and_the_table_in_a_process(sample: Path, tmp_path: Path) -> None:
    develop = sample / "develop"
    edited_copy(develop, tmp_path / "copy" / "develop")
    done = run_diff(
        "develop", "develop-2025-04-20", "--output", str(sample), "--json", cwd=tmp_path
    )
    assert done.code == 0, done.err
    lines = [json.loads(line) for line in done.out.splitlines()]
    expected = crawler.diff_indexes(develop, sample / "develop-2025-04-20")
    assert lines == [as_json(r) for r in expected.records()]
    assert "packages +2 -15" in done.err  # the summary, on stderr
    table = run_diff(str(develop), str(tmp_path / "copy" / "develop"), cwd=tmp_path)
    assert table.code == 0, table.err
    header, *rows = table.out.splitlines()
    assert header.split() == [
        "CHANGE", "NAME", "VERSION", "HASH", "TARGET", "OS", "COMPILER", "DETAIL"
    ]  # fmt: skip
    assert [row.split()[:2] for row in rows] == [["~spec", "hdf5"], ["~spec", "zlib"]]
    assert "compiler gcc@" in rows[0] and "-> gcc@99.1" in rows[0]
    assert "; variants changed" in rows[1] and "stacks +" in rows[1]


@pytest.mark.slow
def test_a_table_on_a_terminal(sample: Path, tmp_path: Path) -> None:
    """On a terminal, rich draws it: short hashes, the two branches in the caption."""
    copy = edited_copy(sample / "develop", tmp_path / "develop")
    text = on_a_terminal("diff", str(sample / "develop"), str(copy))
    zlib = json.loads((copy / "index.json").read_bytes())["packages"]["zlib"]["spec_details"][0]
    assert zlib["hash"][:7] in text and zlib["hash"] not in text
    assert "~spec" in text and "develop -> develop" in text


def test_every_exit_code(sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    develop, snapshot = str(sample / "develop"), str(sample / "develop-2025-04-20")
    assert here(capsys, develop, snapshot).code == 0
    assert here(capsys, develop, snapshot, "--exit-code").code == 14
    same = here(capsys, develop, develop + "/index.json", "--exit-code")
    assert (same.code, same.out) == (0, "") and "no differences between" in same.err
    output = here(capsys, str(sample), develop)
    assert output.code == 11 and "an output folder, not a branch folder" in output.err
    missing = here(capsys, "--output", str(sample), "develop", "v9")
    assert missing.code == 11 and "no such branch published" in missing.err and missing.out == ""
    newer = json.loads((sample / "develop" / "index.json").read_bytes())
    newer["schema_version"] = 3
    (tmp_path / "develop").mkdir()
    (tmp_path / "develop" / "index.json").write_text(json.dumps(newer))
    future = here(capsys, develop, str(tmp_path / "develop"))
    assert future.code == 12 and "schema_version 3 is newer" in future.err
    for bad in (
        ["--output", str(sample), "develop", "../x"],
        [develop],
        ["--bogus", develop, develop],
    ):
        done = here(capsys, *bad)
        assert done.code == 2 and done.err.startswith("error: "), bad


def test_two_mirrors_do_not_compare_unless_asked(
    sample: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "develop"
    shutil.copytree(sample / "develop", other)
    index = json.loads((other / "index.json").read_bytes())
    index["mirror"] = "https://mirror.example.org/spack"
    (other / "index.json").write_bytes(encode_json(index))
    done = here(capsys, str(sample / "develop"), str(other))
    assert done.code == 15 and done.out == ""
    assert (
        "published from two mirrors" in done.err and "https://mirror.example.org/spack" in done.err
    )
    assert "--any-mirror" in done.err
    with pytest.raises(crawler.MirrorsDifferError):
        crawler.diff_indexes(sample / "develop", other)
    anyway = here(capsys, str(sample / "develop"), str(other), "--any-mirror", "--exit-code")
    assert anyway.code == 0 and "no differences" in anyway.err


def test_diff_writes_nothing(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree_bytes(sample)
    for args in (["develop", "v0.23.1"], ["develop", "v0.23.1", "--json"], ["develop", "v9"]):
        here(capsys, "--output", str(sample), *args)
    assert main(["diff", "--output", str(sample), "develop", "v0.23.1", "--exit-code"]) == 14
    assert tree_bytes(sample) == before


@pytest.mark.slow
def test_diff_starts_without_the_sync(sample: Path) -> None:
    """As find (see tests/test_find.py): nothing of the sync is imported, nor rich for a pipe."""
    imported = imported_by("diff", "--output", str(sample), "develop", "v0.23.1")
    assert "crawler.consume.diff" in imported
    assert [m for m in HEAVY if m in imported] == []


@pytest.mark.slow
def test_on_a_120_column_terminal_nothing_is_cut(sample: Path) -> None:
    """The DETAIL column was cut (``e4s,ml-…``), and a spec in the root alone said
    ``stacks -``."""
    drawn = on_a_terminal(
        *("diff", str(sample / "develop"), str(sample / "develop-2025-04-20")),
        COLUMNS="120",
        TERM="xterm",
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", drawn)  # the header's bold
    rows = text.splitlines()
    assert max(len(row.rstrip()) for row in rows) <= 120 and "…" not in text
    assert "root only" in text and "stacks -" not in text
    header = rows[0].split()
    assert header == ["CHANGE", "NAME", "VERSION", "HASH", "TARGET", "OS", "COMPILER", "DETAIL"]


def test_branch_names_are_read_in_the_output_folder_of_the_config(
    sample: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``crawler diff develop develop-2025-04-20`` needed ``--output`` wherever the config
    said the output is: a name that is no path here is a branch of the config's output
    folder; ``--config`` makes both names; a path that is there stays a path."""
    config = tmp_path / "crawler.yaml"
    config.write_text(f"output: {sample}\n")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    snapshot = "develop-2025-04-20"
    wanted = here(capsys, "--output", str(sample), "develop", snapshot)
    assert wanted.code == 0 and wanted.out, wanted.err
    assert here(capsys, "--config", str(config), "develop", snapshot) == wanted
    monkeypatch.setenv("CRAWLER_CONFIG", str(config))
    assert here(capsys, "develop", snapshot) == wanted
    shutil.copytree(sample / snapshot, work / snapshot)
    local = here(capsys, "develop", snapshot)  # ./develop-2025-04-20, the copy
    assert local.code == 0 and local.out == wanted.out
    assert local.err.startswith(f"{sample / 'develop'} -> {snapshot}: "), local.err
    shutil.rmtree(work / snapshot)
    missing = here(capsys, "develop", "v9")
    assert (missing.code, missing.out) == (11, "")
    assert missing.err == (
        f"error: {sample / 'v9'}: not a published branch: no such branch published in {sample} "
        f"(its branches: develop, develop-2025-04-20, v0.23.1); {sample} is the output folder "
        f"of the config {config} (named by CRAWLER_CONFIG); give A and B as branch folders, or "
        "as branch names with --output DIR, or with a config whose output holds them: "
        "--config FILE or CRAWLER_CONFIG=FILE\n"
    )
    monkeypatch.delenv("CRAWLER_CONFIG")
    nowhere = here(capsys, "develop", str(sample / snapshot))
    assert nowhere.code == 11
    assert nowhere.err.startswith("error: output/develop: not a published branch: no such ")
    assert (
        "; no config was read (no --config, CRAWLER_CONFIG unset, no ./config/crawler.yaml), so "
        "the output folder is ./output; give A and B as branch folders"
    ) in nowhere.err
