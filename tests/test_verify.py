"""Verifying a published branch: a real sync verifies clean, each corruption is named."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import crawler.ops.verify
from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async
from crawler.errors import ExitCode
from crawler.ops.indexcheck import MAX_SCHEMA_ERRORS
from crawler.ops.verify import verify_branch
from crawler.output.lock import RunLock
from crawler.output.render import encode_json

from .conftest import CLI_TIMEOUT, cli_env, drained, fast_config

Index = dict[str, Any]

# Every test here corrupts a copy of a published branch on purpose.
pytestmark = pytest.mark.damages_output


@pytest.fixture
def published(sample_develop: Path) -> Path:
    """``develop`` of the sample mirror, synced once for the session (conftest's)."""
    return sample_develop


@pytest.fixture
def branch(published: Path, tmp_path: Path) -> Path:
    """A private copy of the published branch, to corrupt."""
    copy = tmp_path / "develop"
    shutil.copytree(published, copy)
    return copy


def edit(branch: Path, change: Callable[[Index], object]) -> Index:
    """Rewrite index.json after ``change`` (as the crawler would encode it)."""
    path = branch / "index.json"
    index: Index = json.loads(path.read_bytes())
    change(index)
    path.write_bytes(encode_json(index))
    return index


def edit_links(branch: Path, change: Callable[[dict[str, Any]], object]) -> None:
    """Rewrite links.json after ``change``."""
    path = branch / "links.json"
    links: dict[str, Any] = json.loads(path.read_bytes())
    change(links)
    path.write_bytes(encode_json(links))


def drop_pages(branch: Path) -> None:
    shutil.rmtree(branch / "pages")


def test_published_branch_is_clean(published: Path) -> None:
    assert (published / "pages").is_dir()
    assert (published / "report.json").is_file()
    assert (published / "changes.json").is_file()
    assert verify_branch(published) == []


def test_the_sync_released_its_lock(published: Path) -> None:
    """The run's lock is free afterwards, though its decode workers' forkserver still lives."""
    output = published.parent
    assert (output / ".crawler" / "lock").read_bytes() == b""
    with RunLock(output, wait=0) as lock:
        assert lock.broken is None


def test_clean_without_pages_and_report(branch: Path) -> None:
    drop_pages(branch)
    (branch / "report.json").unlink()
    (branch / "changes.json").unlink()
    assert verify_branch(branch) == []


def test_missing_index(branch: Path) -> None:
    (branch / "index.json").unlink()
    assert verify_branch(branch) == [f"index.json: missing in {branch}"]


def test_truncated_index(branch: Path) -> None:
    path = branch / "index.json"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    problems = verify_branch(branch)
    assert len(problems) == 1
    assert problems[0].startswith("index.json: not readable JSON: ")


@pytest.mark.parametrize("damage", ["a byte order mark", "NaN"])
def test_an_index_the_readers_refuse_is_not_readable_json(branch: Path, damage: str) -> None:
    """json.loads takes a byte order mark and NaN, which find, log and diff (msgspec) refuse:
    verify passed an index.json starting with a BOM that find called malformed."""
    path = branch / "index.json"
    data = path.read_bytes()
    if damage == "NaN":
        data = data.replace(b'"schema_version":2', b'"schema_version":NaN', 1)
        assert b"NaN" in data
    else:
        data = b"\xef\xbb\xbf" + data
    path.write_bytes(data)
    problems = verify_branch(branch)
    assert problems == [problems[0]] and problems[0].startswith("index.json: not readable JSON: ")


def test_wrong_num_specs(branch: Path) -> None:
    def change(index: Index) -> None:
        index["packages"]["adios2"]["meta"]["num_specs"] = 3

    edit(branch, change)
    problems = verify_branch(branch)
    assert (
        problems[0]
        == "index.json: package adios2: meta.num_specs is 3 but spec_details has 2 entries"
    )
    assert len(problems) == 2
    assert problems[1].startswith(
        "pages/adios2/specs.md: differs from package adios2 in index.json (first difference at byte"
    )


def test_duplicate_hash_across_packages(branch: Path) -> None:
    def change(index: Index) -> None:
        ascent = index["packages"]["ascent"]["spec_details"][0]
        edit_links(branch, lambda links: links["specs"].pop(ascent["hash"]))  # none left over
        ascent["hash"] = index["packages"]["adios2"]["spec_details"][0]["hash"]

    index = edit(branch, change)
    drop_pages(branch)
    dup = index["packages"]["adios2"]["spec_details"][0]["hash"]
    assert verify_branch(branch) == [
        f"index.json: hash {dup} is the spec of 2 entries (packages adios2, ascent)"
    ]


def test_duplicate_hash_within_a_package(branch: Path) -> None:
    def change(index: Index) -> None:
        specs = index["packages"]["adios2"]["spec_details"]
        specs[1] = dict(specs[1], hash=specs[0]["hash"])

    index = edit(branch, change)
    drop_pages(branch)
    dup = index["packages"]["adios2"]["spec_details"][0]["hash"]
    assert f"index.json: hash {dup} is the spec of 2 entries (packages adios2, adios2)" in (
        verify_branch(branch)
    )


@pytest.mark.parametrize(
    ("label", "why"),
    [("nonexistent", "unknown label"), ("ml-darwin-aarch64-mps", "a missing source")],
)
def test_stack_that_is_not_a_read_source(branch: Path, label: str, why: str) -> None:
    def change(index: Index) -> None:
        package = index["packages"]["zlib-ng"]
        spec = package["spec_details"][0]
        spec["stacks"] = sorted([*spec["stacks"], label])
        meta = package["meta"]
        meta["stacks"] = sorted([*meta["stacks"], label])
        meta["num_specs_by_stack"] = dict(sorted({**meta["num_specs_by_stack"], label: 1}.items()))

    edit(branch, change)
    drop_pages(branch)
    assert verify_branch(branch) == [
        f"index.json: package zlib-ng: stack {label!r} (1 spec(s)) is not a source read for "
        "this branch"
    ], why


def test_wrong_branch(branch: Path) -> None:
    def change(index: Index) -> None:
        index["branch"] = "main"

    edit(branch, change)
    drop_pages(branch)
    assert verify_branch(branch) == ["index.json: branch is 'main' but the folder is 'develop'"]


def test_wrong_branch_also_breaks_pages(branch: Path) -> None:
    def change(index: Index) -> None:
        index["branch"] = "main"

    index = edit(branch, change)
    problems = verify_branch(branch)
    assert problems[0] == "index.json: branch is 'main' but the folder is 'develop'"
    assert len(problems) == 1 + len(index["packages"])  # pages say develop, not main
    assert all(p.startswith("pages/") and " differs from package " in p for p in problems[1:])


def test_schema_extra_key(branch: Path) -> None:
    edit(branch, lambda index: index.update(extra=1))
    assert verify_branch(branch) == [
        "index.json: schema: $: Additional properties are not allowed ('extra' was unexpected)"
    ]


def test_schema_can_be_skipped(branch: Path) -> None:
    def change(index: Index) -> None:
        index["extra"] = 1
        index["packages"]["adios2"]["meta"]["num_specs"] = 3

    edit(branch, change)
    drop_pages(branch)
    assert verify_branch(branch, schema=False) == [
        "index.json: package adios2: meta.num_specs is 3 but spec_details has 2 entries"
    ]
    assert len(verify_branch(branch)) == 2


def test_schema_bad_value_deep(branch: Path) -> None:
    def change(index: Index) -> None:
        index["packages"]["adios2"]["spec_details"][0]["size"] = "12 MB"

    edit(branch, change)
    drop_pages(branch)
    assert verify_branch(branch) == [
        'index.json: schema: $.packages.adios2.spec_details[0].size: "12 MB" does not match '
        '"^(-|0|[1-9][0-9]{0,15})$"'
    ]


def test_a_schema_problem_names_keys_made_of_digits_as_they_are(branch: Path) -> None:
    """jsonschema-rs gives a key of digits as a number ("0123" as 123): verify names the key
    as the document has it."""

    def change(index: Index) -> None:
        package = index["packages"].pop("adios2")
        package["spec_details"][0]["size"] = "12 MB"
        index["packages"]["0123"] = package
        index["packages"]["2048"] = {**package, "meta": "none"}

    edit(branch, change)
    problems = verify_branch(branch)
    assert (
        "index.json: schema: $.packages['0123'].spec_details[0].size: \"12 MB\" does not "
        'match "^(-|0|[1-9][0-9]{0,15})$"' in problems
    ), problems
    assert 'index.json: schema: $.packages[\'2048\'].meta: "none" is not of type "object"' in (
        problems
    ), problems


def test_shape_too_broken_for_consistency_checks(branch: Path) -> None:
    def change(index: Index) -> None:
        index["packages"] = ["adios2"]

    edit(branch, change)
    problems = verify_branch(branch)
    assert problems[0] == 'index.json: schema: $.packages: ["adios2"] is not of type "object"'
    assert problems[1] == (
        "index.json: consistency checks skipped: Expected `object`, got `array` - at `$.packages`"
    )
    # No package is listed any more, so every page is one too many.
    assert problems[2:] and all(
        p.endswith(": not a page of any package in index.json") for p in problems[2:]
    )


def test_a_package_too_broken_to_check_is_named_and_the_others_are_checked(
    branch: Path,
) -> None:
    """The index is checked a package at a time: the last one, of the wrong shape, is named
    alone, and an inconsistency of the first is still found."""
    last = ""

    def change(index: Index) -> None:
        nonlocal last
        first, *_, last = index["packages"]
        index["packages"][first]["meta"]["num_specs"] = 9
        index["packages"][last]["spec_details"][0]["hash"] = 7

    edit(branch, change)
    drop_pages(branch)
    problems = verify_branch(branch, schema=False)
    assert problems == [
        "index.json: package adios2: meta.num_specs is 9 but spec_details has 2 entries",
        f"index.json: package {last}: not as a publish writes it: Expected `str`, got `int`"
        " - at `$.spec_details[0].hash`",
    ]


def test_schema_errors_are_capped(branch: Path) -> None:
    def change(index: Index) -> None:
        for package in index["packages"].values():
            package["junk"] = True

    edit(branch, change)
    drop_pages(branch)
    problems = verify_branch(branch)
    assert len(problems) == MAX_SCHEMA_ERRORS + 1
    assert problems[-1] == "index.json: schema: ... and 10 more"


def test_num_specs_by_stack_and_meta_lists(branch: Path) -> None:
    def change(index: Index) -> None:
        meta = index["packages"]["adios2"]["meta"]
        meta["num_specs_by_stack"]["e4s"] = 2
        meta["targets"] = ["m1"]  # lacks neoverse_v1
        meta["oss"] = ["sequoia", "ubuntu24.04", "windows"]  # one no spec has
        meta["versions"] = ["7.19.4", "1.10.2"]  # not sorted

    edit(branch, change)
    drop_pages(branch)
    where = "index.json: package adios2"
    assert verify_branch(branch) == [
        f"{where}: meta.num_specs_by_stack['e4s'] is 2 but 1 spec(s) list that stack",
        f"{where}: meta.oss has windows that no spec has",
        f"{where}: meta.targets lacks neoverse_v1",
        f"{where}: meta.versions is not sorted or has duplicates",
    ]


def test_unsorted_specs_and_stats(branch: Path) -> None:
    def change(index: Index) -> None:
        index["packages"]["adios2"]["spec_details"].reverse()
        index["stats"]["specs"] += 1
        index["stats"]["packages"] = 7

    index = edit(branch, change)
    drop_pages(branch)
    specs = sum(len(p["spec_details"]) for p in index["packages"].values())
    assert verify_branch(branch) == [
        f"index.json: stats.packages is 7 but the index has {len(index['packages'])}",
        f"index.json: stats.specs is {specs + 1} but the index has {specs}",
        "index.json: package adios2: spec_details are not sorted by hash",
    ]


def test_spec_without_root(branch: Path) -> None:
    def change(index: Index) -> None:
        package = index["packages"]["zlib-ng"]
        package["spec_details"][0]["stacks"].remove("root")
        del package["meta"]["num_specs_by_stack"]["root"]
        package["meta"]["stacks"].remove("root")

    index = edit(branch, change)
    drop_pages(branch)
    spec = index["packages"]["zlib-ng"]["spec_details"][0]
    stacks = spec["stacks"]
    listed = json.dumps(stacks, separators=(",", ":"))
    at = "index.json: schema: $.packages['zlib-ng']"
    assert verify_branch(branch) == [
        f'{at}.meta.num_specs_by_stack: "root" is a required property',
        f"{at}.meta.stacks: None of {listed} are valid under the given schema",
        f"{at}.spec_details[0].stacks: None of {listed} are valid under the given schema",
        f"index.json: package zlib-ng: spec {spec['hash']}: stacks lack root",
        f"links.json: spec {spec['hash']}: locations in no stack of it: ['root']",
    ]


def test_links_hold_one_entry_per_spec_with_hashes_for_dependencies(branch: Path) -> None:
    gone, first = "a" * 32, json.loads((branch / "index.json").read_bytes())
    first = first["packages"]["zlib-ng"]["spec_details"][0]["hash"]

    def change(links: dict[str, Any]) -> None:
        links["specs"][gone] = links["specs"].pop(first)
        entry = next(iter(links["specs"].values()))
        links["edges"].append({"hash": "NOT-A-HASH", "name": "zlib", "type": ["link"]})
        entry["dependencies"] = [len(links["edges"]) - 1]

    edit_links(branch, change)
    key = next(iter(json.loads((branch / "links.json").read_bytes())["specs"]))
    assert verify_branch(branch) == sorted(
        [
            f"links.json: spec {first} has no entry",
            f"links.json: spec {key}: dependency hashes ['NOT-A-HASH'] are no DAG hash",
            f"links.json: {gone} is no spec of the index",
        ]
    )


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (None, "links.json: missing (an index.json of schema_version 2 has one beside it)"),
        (b"[]", "links.json: not a links.json as a publish writes it: Expected `object`"),
        (b'{"branch": "other", "specs": {}}', "links.json: branch is 'other' but the folder"),
    ],
)
def test_a_missing_or_foreign_links_file(branch: Path, damage: bytes | None, problem: str) -> None:
    if damage is None:
        (branch / "links.json").unlink()
    else:
        (branch / "links.json").write_bytes(damage)
    problems = verify_branch(branch)
    assert any(p.startswith(problem) for p in problems), problems


def test_deleted_page(branch: Path) -> None:
    (branch / "pages" / "zlib-ng" / "specs.md").unlink()
    assert verify_branch(branch) == ["pages/zlib-ng/specs.md: missing"]


def test_altered_page(branch: Path) -> None:
    page = branch / "pages" / "zlib-ng" / "specs.md"
    data = page.read_bytes()
    page.write_bytes(data + b"\n")  # the site's pages end without a newline
    assert verify_branch(branch) == [
        "pages/zlib-ng/specs.md: differs from package zlib-ng in index.json "
        f"(first difference at byte {len(data)})"
    ]
    page.write_bytes(
        data.replace(b"categories: [package, develop]", b"categories: [package, main]")
    )
    problems = verify_branch(branch)
    assert len(problems) == 1 and problems[0].startswith("pages/zlib-ng/specs.md: differs")


def test_unreadable_page(branch: Path) -> None:
    page = branch / "pages" / "zlib-ng" / "specs.md"
    page.unlink()
    page.symlink_to(branch / "nowhere")
    assert verify_branch(branch) == [
        "pages/zlib-ng/specs.md: unreadable: No such file or directory"
    ]


def test_extra_pages(branch: Path) -> None:
    extra = branch / "pages" / "not-a-package" / "specs.md"
    extra.parent.mkdir()
    extra.write_text("---\n---")
    (branch / "pages" / "zlib-ng" / "notes.txt").write_text("hello")
    assert verify_branch(branch) == [
        "pages/not-a-package/specs.md: not a page of any package in index.json",
        "pages/zlib-ng/notes.txt: not a page of any package in index.json",
    ]


def test_entries_a_publish_does_not_write(branch: Path) -> None:
    (branch / "extra.txt").write_text("mine")
    (branch / "notes").mkdir()
    (branch / "report.json").unlink()
    (branch / "report.json").mkdir()
    (branch / ".DS_Store").write_bytes(b"")  # Finder's litter is fine
    (branch / "pages" / ".DS_Store").write_bytes(b"")
    (branch / "pages" / "zlib-ng" / ".DS_Store").write_bytes(b"")
    page = branch / "pages" / "zlib-ng" / "specs.md"  # the same bytes, through a link
    (branch / "zlib-ng.md").write_bytes(page.read_bytes())
    page.unlink()
    page.symlink_to(branch / "zlib-ng.md")
    assert verify_branch(branch, schema=False) == [
        f"report.json: not readable JSON: [Errno 21] Is a directory: '{branch / 'report.json'}'",
        "extra.txt: not written by a publish (the next one would stop on it)",
        "notes: not written by a publish (the next one would stop on it)",
        "pages/zlib-ng/specs.md: not written by a publish (the next one would stop on it)",
        "report.json: not written by a publish (the next one would stop on it)",
        "zlib-ng.md: not written by a publish (the next one would stop on it)",
    ]


def test_bad_report(branch: Path) -> None:
    report = branch / "report.json"
    report.write_text('{"branch": "develop", "status": ')
    problems = verify_branch(branch)
    assert len(problems) == 1 and problems[0].startswith("report.json: not readable JSON: ")
    report.write_text("[]")
    assert verify_branch(branch) == ["report.json: not a JSON object"]
    report.write_text('{"branch": "main"}')
    problems = verify_branch(branch)
    assert problems[0] == "report.json: branch is 'main' but the folder is 'develop'"
    assert any(p.startswith("report.json: schema: ") for p in problems), problems
    # A report of {} said one thing, with a Python None in it: now all that is wrong.
    report.write_text("{}")
    problems = verify_branch(branch)
    assert problems[0] == "report.json: names no branch (the folder is 'develop')"
    assert any(p.startswith("report.json: schema: ") for p in problems), problems
    assert problems[-1].startswith("report.json: not a report.json as a publish writes it: ")
    assert not any("None" in p for p in problems), problems


def test_bad_changes(branch: Path) -> None:
    changes = branch / "changes.json"
    changes.write_bytes(b"\x00")
    problems = verify_branch(branch)
    assert len(problems) == 1 and problems[0].startswith("changes.json: not readable JSON: ")
    changes.write_text("[]")
    assert verify_branch(branch) == ["changes.json: not a JSON object"]
    changes.write_text('{"branch": "main"}')
    problems = verify_branch(branch)
    assert problems[0] == "changes.json: branch is 'main' but the folder is 'develop'"
    assert problems[-1].startswith("changes.json: not a changes.json as a publish writes it: ")


def test_source_and_stats_counts(branch: Path) -> None:
    def change(index: Index) -> None:
        index["sources"].append(dict(index["sources"][1]))
        index["sources"][0]["in_buildcache"] += 1
        index["stats"]["sources_missing"] += 1

    index = edit(branch, change)
    label = index["sources"][1]["label"]
    n = len(index["sources"])
    missing = sum(s["status"] == "missing" for s in index["sources"])
    drop_pages(branch)
    assert verify_branch(branch) == [
        f"index.json: source {label!r} is listed 2 times",
        f"index.json: stats.sources is {n - 1} but the index has {n}",
        f"index.json: stats.sources_missing is {missing + 1} but the index has {missing}",
        f"index.json: source root: in_buildcache is {index['stats']['specs'] + 1} but the "
        f"index has {index['stats']['specs']} specs",
    ]


async def test_a_branch_published_while_it_is_verified_is_verified_again(tmp_path: Path) -> None:
    """``crawler verify`` during a sync's publish read index.json from one publish and the
    pages from the next (the folder swapped in between), and reported pages that differ from
    their packages, exit 8, on a sound branch. A folder replaced meanwhile is verified again;
    one replaced every time is said to be."""
    outputs = []
    for i, specs in enumerate(
        [
            (SynthSpec("zlib", "1.3.1", stacks=("s1",)),),
            (SynthSpec("zlib", "1.3.2", stacks=("s1",)), SynthSpec("cmake", "3.30.0")),
        ]
    ):
        mirror, out = tmp_path / f"mirror{i}", tmp_path / f"out{i}"
        build_mirror(mirror, (SynthRef("develop", specs),))
        config = tmp_path / f"c{i}.yaml"
        config.write_text(yaml.safe_dump({**fast_config(str(mirror), out), "formats": ["pages"]}))
        argv = ["sync", "--branch", "develop", "--config", str(config), "-q"]
        assert await main_async(argv) == 0
        outputs.append(out / "develop")
    folder, newer = outputs
    swaps = {"done": 0, "wanted": 1}

    def publish_meanwhile(checked: Path, schema: bool) -> list[str]:
        """While the branch is checked, a publish swaps the newer branch in (as often as
        wanted): that pass read the files of two publishes, and found what such a pass finds."""
        if swaps["done"] < swaps["wanted"]:
            swaps["done"] += 1
            old = folder.rename(tmp_path / f"old-{swaps['done']}")
            shutil.copytree(newer, folder)
            shutil.rmtree(old)
            return ["pages/zlib/specs.md: does not match index.json"]
        return crawler.ops.verify.verify_once(checked, schema)

    assert verify_branch(folder, schema=False, check=publish_meanwhile) == []
    assert swaps["done"] == 1

    swaps.update(done=0, wanted=99)
    problems = verify_branch(folder, schema=False, check=publish_meanwhile)
    assert problems[-1] == f"{folder}: replaced while it was verified, 3 times over"


@pytest.mark.damages_output
def test_what_a_folder_quotes_is_escaped_and_a_linked_pages_folder_is_not_walked(
    branch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A published folder is anyone's to write: an escape sequence in a compiler reached the
    terminal in verify's problems (and in find's warnings, on stderr), and a ``pages`` link to
    ``/`` made verify walk the whole filesystem. Both are problems, quoted escaped; the link
    is not followed."""

    def damage(index: Index) -> None:
        index["packages"]["zlib"]["spec_details"][0]["compiler"] = "gcc\x1b]0;PWNED\x07"
        index["packages"]["zlib"]["spec_details"][1]["target"] = "zen9\x1b[31mRED"

    edit(branch, damage)
    shutil.rmtree(branch / "pages")
    (branch / "pages").symlink_to("/")
    assert asyncio.run(main_async(["verify", str(branch)])) == 8
    out = capsys.readouterr().out
    assert "\x1b" not in out and "lacks gcc\\x1b]0;PWNED\\x07" in out
    assert "pages: not written by a publish" in out and "cannot be listed" not in out
    assert asyncio.run(main_async(["find", "--in", str(branch), "--family", "x86_64"])) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err and "does not know: zen9\\x1b[31mRED" in err


def test_a_companion_its_reader_refuses_is_a_problem_though_its_schema_allows_it(
    branch: Path,
) -> None:
    """``"added": 58.0`` in history.json: an integer for JSON Schema, not for the readers
    (``crawler log`` refused it, exit 11) while verify said all checks hold."""
    path = branch / "history.json"
    path.write_bytes(path.read_bytes().replace(b'"added":58', b'"added":58.0', 1))
    assert b'"added":58.0' in path.read_bytes()
    problems = verify_branch(branch)
    assert [p for p in problems if p.startswith("history.json: ")] == [
        "history.json: not a history.json as a publish writes it: "
        "Expected `int`, got `float` - at `$.publishes[0].changes.by_stack[...].added`"
    ]


def _limited() -> None:
    """In the child: at most 2 GiB of address space, as ``ulimit -v`` sets it."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.mark.slow
@pytest.mark.parametrize("command", [["verify"], ["find", "zlib", "--in"]])
def test_out_of_memory_is_an_error_not_a_traceback(branch: Path, command: list[str]) -> None:
    """An index larger than the memory the process may have (8 GiB, sparse, under a limit of
    2 GiB): one line and exit 16, whether verify or find reads it."""
    os.truncate(branch / "index.json", 8 << 30)
    done = subprocess.run(
        [sys.executable, "-m", "crawler", *command, str(branch)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        preexec_fn=_limited,
        check=False,
    )
    assert done.returncode == ExitCode.OUT_OF_MEMORY, done.stderr
    assert done.stderr.startswith(f"error: out of memory: crawler {command[0]} (docs/consumers.md")
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def _verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``crawler verify ARGS`` in this process: its exit code, stdout and stderr."""
    code = asyncio.run(main_async(["verify", *args]))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_copy_under_another_name_holds_with_a_note(
    published: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cp -r output/develop /tmp/vcopy`` (a snapshot, as docs/consumers.md suggests) failed
    with five problems, "branch is 'develop' but the folder is 'vcopy'"; ``--branch`` says
    which branch its documents must name."""
    copy = tmp_path / "vcopy"
    shutil.copytree(published, copy)
    assert verify_branch(copy) == []
    note = "a copy of branch 'develop' under another name ('vcopy')"
    assert crawler.ops.verify.expected_branch(copy).note == note
    assert _verify(capsys, str(copy)) == (
        0,
        f"{copy}: all checks hold\n",
        f"note: {copy}: {note}\n",
    )
    assert _verify(capsys, str(copy), "--branch", "develop")[:2] == (
        0,
        f"{copy}: all checks hold\n",
    )
    assert _verify(capsys, str(copy), "-q") == (0, "", "")
    code, out, _ = _verify(capsys, str(copy), "--json")
    assert (code, json.loads(out)) == (
        0,
        {"path": str(copy), "ok": True, "schema": True, "problems": [], "note": note},
    )
    code, out, err = _verify(capsys, str(copy), "--branch", "main", "--no-schema")
    assert (code, err) == (8, f"{copy}: 5 problems\n")
    names = ("index.json", "links.json", "changes.json", "report.json", "history.json")
    assert out == "".join(
        f"{n}: branch is 'develop' but the branch expected is 'main'\n" for n in names
    )
    code, out, _ = _verify(capsys, str(published), "--branch", "develop", "--json")
    assert (code, json.loads(out)["note"]) == (0, None)


def test_documents_of_a_copy_that_disagree_are_problems(published: Path, tmp_path: Path) -> None:
    """Only a folder whose documents all name one branch is a copy of it: one that names
    another, or none, is a problem, as in the branch's own folder."""
    copy = tmp_path / "vcopy"
    shutil.copytree(published, copy)
    report = json.loads((copy / "report.json").read_bytes())
    (copy / "report.json").write_bytes(encode_json({**report, "branch": "other"}))
    assert crawler.ops.verify.expected_branch(copy).note is None
    assert verify_branch(copy, schema=False) == [
        "index.json: branch is 'develop' but the folder is 'vcopy'",
        "links.json: branch is 'develop' but the folder is 'vcopy'",
        "changes.json: branch is 'develop' but the folder is 'vcopy'",
        "report.json: branch is 'other' but the folder is 'vcopy'",
        "history.json: branch is 'develop' but the folder is 'vcopy'",
    ]
    del report["branch"]
    (copy / "report.json").write_bytes(encode_json(report))
    problems = verify_branch(copy, schema=False)
    assert problems[0] == "report.json: names no branch (the other documents name 'develop')"
    assert len(problems) == 2 and problems[1].startswith("report.json: not a report.json as a")


def _stderr_on_a_terminal(*args: str) -> tuple[int, str, bytes]:
    """``crawler ARGS`` whose stderr is a terminal (stdout a pipe): its exit code, stdout and
    what it wrote on the terminal."""
    leader, follower = pty.openpty()
    try:
        with subprocess.Popen(
            [sys.executable, "-m", "crawler", *args],
            stdout=subprocess.PIPE,
            stderr=follower,
            env={**cli_env(), "TERM": "xterm"},
        ) as process:
            os.close(follower)
            drawn = drained(leader)
            assert process.stdout is not None
            out = process.stdout.read().decode()
            code = process.wait(timeout=CLI_TIMEOUT)
    finally:
        os.close(leader)
    return code, out, drawn


@pytest.mark.slow
def test_verify_shows_its_progress_on_a_terminal_only(branch: Path) -> None:
    """It printed nothing while it ran (8 s for a 20,000-spec branch): on a terminal, a line
    redrawn in place says what it checks and how far it is, cleared at the end; nothing with
    --quiet or --json, nor into a pipe."""
    packages = len(json.loads((branch / "index.json").read_bytes())["packages"])
    pages = len(list((branch / "pages").glob("*/specs.md")))
    specs = len(json.loads((branch / "links.json").read_bytes())["specs"])
    code, out, shown = _stderr_on_a_terminal("verify", str(branch))
    assert (code, out) == (0, f"{branch}: all checks hold\n"), shown
    lines = shown.split(b"\r")
    for what in (
        f"index.json: package {packages}",
        f"pages: page {pages}",
        f"links.json: spec {specs}",
    ):
        total = int(what.rsplit(" ", 1)[1])
        assert f"checking {what} of {total}\x1b[K".encode() in lines, shown
    assert shown.endswith(b"\r\x1b[K"), shown  # the last line cleared
    for quiet in (["-q"], ["--json"]):
        code, _, shown = _stderr_on_a_terminal("verify", str(branch), *quiet)
        assert code == 0 and b"checking" not in shown, shown
    piped = subprocess.run(
        [sys.executable, "-m", "crawler", "verify", str(branch)],
        env=cli_env(),
        capture_output=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert (piped.returncode, piped.stderr) == (0, b"")
