"""Memory bounded whatever a mirror sends (docs/notes/memory-bounds.md).

* a record with a field over its limit (``crawler.decode.validate``'s table) is refused with a
reason
  naming the field, its size and the limit, and the rest is published as if it were not there;
* a report lists at most ``INVALID_SHOWN`` invalid records per source and
  ``report.INVALID_SHOWN`` per branch, with the totals;
* an index with more than ``MAX_INVALID`` invalid records fails its source at once;
* a record longer than ``chunks.MAX_RECORD_BYTES`` is refused without being decoded;
* records that the fast cut cannot split (tiny ones, not objects) are read in pieces all the
  same, whole or not, with the same summary; a key repeated in a document read whole counts
  once, with its last value, as in a dict.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror, make_hash
from crawler.build import report
from crawler.cli.command import main_async
from crawler.decode import chunks
from crawler.decode.root import load_root_shard, merge_root, summarize_root_shard
from crawler.decode.stack import load_summary, summarize_stack
from crawler.decode.validate import INVALID_SHOWN, MAX_INVALID, SourceSummary

from .conftest import ServeMirror, fast_config, mirror_neutral, tree_bytes

Installs = dict[str, Any]
GOOD = SynthSpec("zlib", "1.3.1", stacks=("s1",))
SPECS = (GOOD, SynthSpec("cmake", "3.30.5"))
ROOT = "develop/build_cache/index.json"
S1 = "develop/s1/build_cache/index.json"


def _argv(tmp_path: Path, mirror: str, out: Path, **extra: object) -> list[str]:
    path = tmp_path / f"crawler-{out.name}.yaml"
    path.write_text(yaml.safe_dump(fast_config(mirror, out, **extra)))
    return ["sync", "--branch", "develop", "--config", str(path), "-q"]


def _edit(path: Path, edit: Callable[[Installs], None]) -> None:
    """Change the records of a v2 index and its sidecar."""
    document = json.loads(path.read_bytes())
    edit(document["database"]["installs"])
    _replace(path, json.dumps(document).encode())


def _replace(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.with_name("index.json.hash").write_text(hashlib.sha256(data).hexdigest())


def _copy(installs: Installs, label: str) -> tuple[str, dict[str, Any]]:
    """A copy of the good record under a new hash."""
    key = make_hash(label)
    record = copy.deepcopy(installs[GOOD.dag_hash])
    record["spec"]["hash"] = key
    installs[key] = record
    spec: dict[str, Any] = record["spec"]
    return key, spec


def _json(path: Path) -> Any:
    return json.loads(path.read_bytes())


def _oversized(installs: Installs) -> dict[str, str]:
    """One record per limit, each over it by one; returns key -> the reason expected."""
    expected: dict[str, str] = {}

    def over(label: str, reason: str) -> dict[str, Any]:
        key, spec = _copy(installs, label)
        expected[key] = reason
        return spec

    over("name", "name is 201 characters, more than the limit of 200")["name"] = "n" * 201
    over("version", "version is 257 characters, more than the limit of 256")["version"] = "1" * 257
    spec = over("platform", "platform is 65 characters, more than the limit of 64")
    spec["arch"]["platform"] = "p" * 65
    over("os", "os is 65 characters, more than the limit of 64")["arch"]["platform_os"] = "o" * 65
    spec = over("target", "target is 129 characters, more than the limit of 128")
    spec["arch"]["target"] = {"name": "t" * 129, "vendor": "v", "features": []}
    spec = over("compiler", "compiler is 513 characters, more than the limit of 512")
    spec["compiler"] = {"name": "g" * 509, "version": "1.0"}
    spec = over("variant", "variant 'v' is 4,097 characters, more than the limit of 4,096")
    spec["parameters"] = {"v": "x" * 4095}  # "v=" and 4,095 characters
    spec = over("variants", "parameters is 1,025 entries, more than the limit of 1,024")
    spec["parameters"] = {f"v{i:04}": True for i in range(1025)}
    spec = over("dependencies", "dependencies is 4,097 edges, more than the limit of 4,096")
    spec["dependencies"] = spec["dependencies"][:1] * 4097
    spec = over("edge", "dependency 'x' has a hash that is not a 32-character base32 DAG hash")
    spec["dependencies"] = [{"name": "x", "hash": "h" * 1000, "parameters": {"virtuals": []}}]
    return expected


async def test_a_field_over_its_limit_refuses_its_record_and_the_rest_is_published(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """Each limit, one over: the record is refused with its field, size and limit; a stack's
    record too. What is published is what an untouched mirror publishes."""
    clean = tmp_path / "clean"
    build_mirror(clean, [SynthRef("develop", SPECS)])
    server = await mirror_server(clean)
    assert await main_async(_argv(tmp_path, server.url, tmp_path / "expected")) == 0
    expected_index = mirror_neutral(tmp_path / "expected" / "develop" / "index.json", server.url)

    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", SPECS)])
    reasons: dict[str, str] = {}
    _edit(root / ROOT, lambda installs: reasons.update(_oversized(installs)))
    stack_key: list[str] = []

    def long_version(installs: Installs) -> None:
        key, spec = _copy(installs, "stack version")
        spec["version"] = "2" * 300
        stack_key.append(key)

    _edit(root / S1, long_version)
    server = await mirror_server(root)
    out = tmp_path / "out"

    assert await main_async(_argv(tmp_path, server.url, out)) == 0

    listed = _json(out / "develop" / "report.json")["invalid_records"]
    assert {r["hash"]: r["reason"] for r in listed if r["source"] == "root"} == reasons
    assert [(r["hash"], r["reason"]) for r in listed if r["source"] == "s1"] == [
        (stack_key[0], "version is 300 characters, more than the limit of 256")
    ]
    index = mirror_neutral(out / "develop" / "index.json", server.url)
    assert index["packages"] == expected_index["packages"]
    assert index["stats"]["invalid_records"] == len(reasons) + 1
    assert [s["invalid_records"] for s in index["sources"]] == [len(reasons), 1]


def _tiny_invalid(count: int, key: Callable[[int], str] = lambda i: f"bad{i:07}") -> Installs:
    return {key(i): i for i in range(count)}


async def test_a_report_lists_the_first_invalid_records_and_counts_them_all(
    mirror_server: ServeMirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per source the first ``INVALID_SHOWN`` by hash; per branch (here made 150) the first of
    those in source order; the totals are all of them, in the report, stats and sources."""
    monkeypatch.setattr(report, "INVALID_SHOWN", 150)
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", SPECS)])
    _edit(root / ROOT, lambda installs: installs.update(_tiny_invalid(250)))
    _edit(root / S1, lambda installs: installs.update(_tiny_invalid(130, lambda i: f"s{i:04}")))
    server = await mirror_server(root)
    out = tmp_path / "out"

    assert await main_async(_argv(tmp_path, server.url, out)) == 0

    published = _json(out / "develop" / "report.json")
    listed = [(r["source"], r["hash"]) for r in published["invalid_records"]]
    assert listed == [("root", f"bad{i:07}") for i in range(INVALID_SHOWN)] + [
        ("s1", f"s{i:04}") for i in range(150 - INVALID_SHOWN)
    ]
    assert {r["reason"] for r in published["invalid_records"]} == {
        "bad record: Expected `object`, got `int`"
    }
    assert published["invalid_records_total"] == 380
    assert published["stats"]["invalid_records"] == 380
    assert [s["invalid_records"] for s in published["sources"]] == [250, 130]
    assert published["conflicts_total"] == 0


@pytest.mark.slow
async def test_an_index_with_too_many_invalid_records_fails_at_once(tmp_path: Path) -> None:
    """No Spack index holds 100,000 invalid records: the root fails, nothing published changes."""
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", SPECS)])
    argv = _argv(tmp_path, str(root), tmp_path / "out")
    assert await main_async(argv) == 0
    before = tree_bytes(tmp_path / "out" / "develop")
    _edit(root / ROOT, lambda installs: installs.update(_tiny_invalid(MAX_INVALID + 1)))

    assert await main_async(argv) == 4

    error = _json(tmp_path / "out" / ".crawler" / "reports" / "develop.json")["error"]
    assert f"more than {MAX_INVALID:,} invalid records (one: bad record: Expected" in error
    assert tree_bytes(tmp_path / "out" / "develop") == before


def _write(path: Path, head: bytes, installs: list[tuple[str, Any]], tail: bytes) -> str:
    """An index whose records are written one by one (a key may repeat)."""
    body = b",".join(json.dumps(k).encode() + b":" + json.dumps(v).encode() for k, v in installs)
    path.write_bytes(head + body + tail)
    return str(path)


STANDARD = (b'{"database": {"version": "8", "installs": {', b"}}}")
#: ``installs`` first: no layout, so the file is read whole.
OTHER = (b'{"database": {"installs": {', b'}, "version": "8"}}')


def _records(tmp_path: Path) -> list[tuple[str, Any]]:
    """The records of a synthetic root, then 3,000 tiny invalid ones, then the root's again in
    the middle of them (a cut the fast pattern cannot find)."""
    build_mirror(tmp_path / "m", [SynthRef("develop", SPECS)])
    installs = _json(tmp_path / "m" / ROOT)["database"]["installs"]
    records = list(installs.items())
    tiny = list(_tiny_invalid(3000).items())
    return tiny[:1500] + records + tiny[1500:]


def _root(path: str, shards: int = 1, whole: bool = False) -> SourceSummary:
    parts = [summarize_root_shard(path, "u", i, shards, (), whole) for i in range(shards)]
    return merge_root([load_root_shard(p) for p in parts])


def test_records_the_fast_cut_cannot_split_are_read_in_pieces_with_the_same_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chunks, "LARGE_RANGE", 4096)
    monkeypatch.setattr(chunks, "PIECE_BYTES", 2048)
    records = _records(tmp_path)
    standard = _write(tmp_path / "a.json", *STANDARD[:1], records, STANDARD[1])
    other = _write(tmp_path / "b.json", *OTHER[:1], records, OTHER[1])
    with open(standard, "rb") as file:
        span = chunks.layout(file.fileno())
        assert span is not None
        assert len(list(chunks.subdivide(file.fileno(), [(span.start, span.end)]))) > 10

    expected = _root(standard, whole=True)
    assert expected.invalid_total == 3000 and len(expected.invalid) == INVALID_SHOWN
    assert expected.in_buildcache == len(SPECS)
    for summary in (_root(standard, 2), _root(standard, 3), _root(other, 2)):
        assert summary == expected
    stack = load_summary(summarize_stack(standard, "u"))
    assert stack.invalid == expected.invalid and stack.invalid_total == 3000
    assert load_summary(summarize_stack(other, "u")) == stack


def test_a_record_longer_than_the_limit_is_refused_without_being_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read in pieces or whole, the same reason; the other records are kept."""
    monkeypatch.setattr(chunks, "LARGE_RANGE", 4096)
    monkeypatch.setattr(chunks, "MAX_RECORD_BYTES", 4096)
    records = _records(tmp_path)[1400:1600]
    at = next(i for i, (_, value) in enumerate(records) if not isinstance(value, int))
    key, huge = records[at][0], copy.deepcopy(records[at][1])
    huge["spec"]["dependencies"] = huge["spec"]["dependencies"] * 100
    size = len(json.dumps(huge))
    assert size > 4096
    records[at] = (key, huge)
    tiny = sum(isinstance(value, int) for _, value in records)
    for head, tail in (STANDARD, OTHER):
        path = _write(tmp_path / "i.json", head, records, tail)
        for summary in (_root(path, 2), _root(path, whole=True)):
            refused = [r for r in summary.invalid if r.hash == key]
            assert [r.reason for r in refused] == [
                f"record is {size:,} bytes of JSON, more than the limit of 4,096"
            ]
            assert summary.invalid_total == tiny + 1
            assert summary.records == len(records)


def test_a_key_repeated_in_a_document_read_whole_counts_once_with_its_last_value(
    tmp_path: Path,
) -> None:
    records = _records(tmp_path)
    key, value = next((k, v) for k, v in records if not isinstance(v, int))
    for last in (value, 0):  # valid then invalid, and the other way round
        first = 0 if last is value else value
        installs = [(key, first), *[(k, v) for k, v in records if k != key], (key, last)]
        path = _write(tmp_path / "d.json", *OTHER[:1], installs, OTHER[1])
        summary = _root(path, 2)
        assert summary.records == len(records)
        assert (key in summary.hashes) == (last is value)
        assert summary == _root(path, whole=True)
        stack = load_summary(summarize_stack(path, "u"))
        assert stack.records == len(records) and (key in stack.hashes) == (last is value)


def test_a_huge_key_is_refused_without_being_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It stands as its first characters and a digest of it all, whole read or not."""
    monkeypatch.setattr(chunks, "LARGE_RANGE", 4096)
    records = _records(tmp_path)[1400:1600]
    records.insert(20, ("a" * 8000, 0))  # listed first
    for head, tail in (STANDARD, OTHER):
        path = _write(tmp_path / "k.json", head, records, tail)
        for summary in (_root(path, 2), _root(path, whole=True)):
            (refused,) = [r for r in summary.invalid if r.hash.startswith("aaa")]
            assert refused.reason == "key is 8,002 bytes of JSON, more than 4,096"
            assert len(refused.hash) == 64 and refused.hash.endswith("...")
            assert summary.records == len(records)
