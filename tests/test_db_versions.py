"""Every Database version Spack v1.3 reads (6 to 9), in the spellings each writer used.

Indexes are written by :mod:`bench.synth` as each Spack version writes them (DB 6 also in the
older writers' spellings of :mod:`bench.spellings`); the same specs must give the same summary
whatever the version or the spelling, and a whole sync of DB 8 and of DB 9 the same index.json.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.spellings import SPELLINGS
from bench.synth import SynthRef, SynthSpec, build_mirror, generate_specs, index_document
from bench.synth import make_hash as _hash
from crawler.cli.command import main_async
from crawler.decode.records import SUPPORTED_VERSIONS
from crawler.decode.root import load_root_shard, merge_root, root_gaps, summarize_root_shard
from crawler.decode.stack import load_summary, summarize_stack
from crawler.decode.validate import SourceSummary
from crawler.errors import UnsupportedVersionError
from tests.conftest import fast_config

URL = "https://mirror.example/develop/build_cache/index.json"
STACKS = ("e4s", "hep", "ml")


def _specs() -> list[SynthSpec]:
    # A fifth of the compiled specs carry their compiler as an annotation (DB 8 and 9 only).
    return generate_specs(23, 60, stacks=STACKS, annotation_fraction=0.2)


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _root(path: str, whole: bool = False) -> SourceSummary:
    """A root read as the sync reads it: its dependency gaps found, then left out."""
    shard = load_root_shard(summarize_root_shard(path, URL, whole=whole))
    missing = root_gaps([shard])
    if missing:
        shard = load_root_shard(
            summarize_root_shard(path, URL, missing=tuple(missing), whole=whole)
        )
    return merge_root([shard])


def _facts(summary: SourceSummary) -> tuple[object, ...]:
    """What a summary tells whatever the version (its ``db_version`` apart)."""
    return summary.records, summary.in_buildcache, summary.hashes, summary.specs, summary.invalid


@pytest.mark.parametrize("whole", [False, True])
def test_each_version_and_spelling_reads_as_the_default_one(tmp_path: Path, whole: bool) -> None:
    """DB 6 in every spelling reads as DB 6 does, DB 7 as DB 6 (both name the compiler on the
    node), and DB 9 as DB 8 (compilers as edges or annotations)."""
    specs = _specs()
    read: dict[tuple[int, str], SourceSummary] = {}
    kinds = [(6, spelling) for spelling in SPELLINGS] + [(7, ""), (8, ""), (9, "")]
    for db, spelling in kinds:
        data = index_document(specs, db, spelling=spelling)
        read[db, spelling] = _root(_write(tmp_path / f"{db}{spelling}.json", data), whole)
    assert read[6, ""].invalid == [] and read[8, ""].invalid == []
    assert len(read[6, ""].specs) == len(specs)
    for (db, spelling), summary in read.items():
        assert summary.db_version == str(db)
        assert _facts(summary) == _facts(read[6 if db < 8 else 8, ""]), (db, spelling)
    assert _facts(read[6, ""]) != _facts(read[8, ""])  # the compilers of specs without one


@pytest.mark.parametrize("whole", [False, True])
def test_a_node_spelling_variants_alone_keeps_them(tmp_path: Path, whole: bool) -> None:
    """``variants`` for ``parameters`` in one node among nodes of today's spellings (its edges a
    list): the first kinds tried ignored the unknown key and the node lost its variants, unless
    another record of its piece needed the older reader (so a warm and a cold sync differed)."""
    specs = _specs()
    document = json.loads(index_document(specs, 6))
    nodes = [record["spec"] for record in document["database"]["installs"].values()]
    respelled = [n for n in nodes if n.get("parameters", {}).get("build_system")][:3]
    for node in respelled:
        node["variants"] = node.pop("parameters")
    data = json.dumps(document).encode()
    summary = _root(_write(tmp_path / "variants.json", data), whole)
    expected = _root(_write(tmp_path / "default.json", index_document(specs, 6)), whole)
    assert respelled and summary.invalid == []
    assert _facts(summary) == _facts(expected)


def test_a_compiler_without_a_name_or_with_control_characters_refuses_its_record(
    tmp_path: Path,
) -> None:
    """An annotation's compiler ``@`` was published as ``""`` (which verify then refused),
    and one holding an escape sequence as it was (``crawler find`` printed it to the
    terminal): each such record is refused, with why, as a bad name or version is."""
    document = json.loads(index_document(_specs(), 8))
    installs = document["database"]["installs"]
    annotated = [
        key
        for key, record in installs.items()
        if record["in_buildcache"]
        and record["spec"].get("annotations", {}).get("compiler")
        and not any("virtuals" in str(e) for e in record["spec"].get("dependencies", []))
    ]
    compilers = ["@", "@=13.2", "gcc\x1b]0;title\x07@13"]
    for key, compiler in zip(annotated, compilers, strict=False):
        installs[key]["spec"]["annotations"]["compiler"] = compiler
    summary = _root(_write(tmp_path / "index.json", json.dumps(document).encode()))
    assert len(annotated) >= len(compilers)
    assert sorted((i.hash, i.reason) for i in summary.invalid) == sorted(
        [
            (annotated[0], "compiler '' has no name"),
            (annotated[1], "compiler '@13.2' has no name"),
            (annotated[2], "control characters in compiler 'gcc\\x1b]0;title\\x07@13'"),
        ]
    )


@pytest.mark.parametrize("db", [7, 8])
@pytest.mark.parametrize("whole", [False, True])
def test_bidi_and_c1_characters_refuse_a_record_in_any_text_it_publishes(
    tmp_path: Path, db: int, whole: bool
) -> None:
    """A variant's value or name holding ``U+202E`` (which reorders a page or a terminal) or
    ``U+009B`` (a terminal's control sequence introducer) was published as it was, in
    ``index.json`` and ``crawler find --json``, and so was a dependency's name and type (and
    the virtuals of its edge, in ``links.json``), while
    the same characters refuse a record in its version or arch: one rule now refuses all."""
    document = json.loads(index_document(_specs(), db))
    installs = document["database"]["installs"]
    built = [
        key
        for key, record in installs.items()
        if record["in_buildcache"] and record["spec"].get("dependencies")
    ]
    spoiled: dict[str, str] = {}

    def spoil(key: str, reason: str) -> None:
        assert key not in spoiled
        spoiled[key] = reason

    params = installs[built[0]]["spec"].setdefault("parameters", {})
    params["evil"] = "a\u202eb"
    spoil(built[0], "control characters in variant 'evil=a\\u202eb'")
    installs[built[1]]["spec"].setdefault("parameters", {})["csi\u009b"] = True
    spoil(built[1], "control characters in variant '+csi\\x9b'")
    params = installs[built[2]]["spec"].setdefault("parameters", {})
    params.update({"jobs": 4, "list": ["ok", "x\u009b[2J"]})  # a number: the general path
    spoil(built[2], "control characters in variant 'list=ok,x\\x9b[2J'")
    edge = installs[built[3]]["spec"]["dependencies"][-1]
    edge["name"] = "zlib\u202e"
    spoil(built[3], "control characters in dependency 'zlib\\u202e'")
    edge = installs[built[4]]["spec"]["dependencies"][-1]
    edge["parameters"]["deptypes"] = ["link\u009b"]  # none but Spack's four
    spoil(built[4], "bad record: Invalid enum value 'link\\x9b' - at `$.spec.dependencies[")
    # The virtuals an edge provides are published in links.json: the same rule, and limits.
    given = [["mpi\u202e"], ["\x1b[2J"], ["v" * 201], ["x"] * 1025]
    for key, virtuals in zip(built[5:9], given, strict=True):
        installs[key]["spec"]["dependencies"][-1]["parameters"]["virtuals"] = virtuals
    spoil(built[5], "control characters in virtual 'mpi\\u202e'")
    spoil(built[6], "control characters in virtual '\\x1b[2J'")
    spoil(built[7], "virtual 'vvvvvvvv")
    spoil(built[8], "virtuals is 1,025 entries, more than the limit of 1,024")

    summary = _root(_write(tmp_path / "index.json", json.dumps(document).encode()), whole)

    found = {i.hash: i.reason for i in summary.invalid if i.hash in spoiled}
    assert found.keys() == spoiled.keys()
    for key, reason in spoiled.items():
        assert found[key].startswith(reason), found[key]
    assert not set(spoiled) & {row.hash for row in summary.specs}


async def test_a_variant_with_a_bidi_character_is_not_published(tmp_path: Path) -> None:
    """End to end: the record is left out of ``index.json`` (so ``crawler find`` never sees
    it) and listed in ``report.json`` with why; its neighbours are published."""
    mirror = tmp_path / "mirror"
    evil = SynthSpec("zlib", "1.3.1", variants=(("shared", "tr\u202eue"),))
    build_mirror(mirror, [SynthRef("develop", (evil, SynthSpec("cmake", "3.30.0")))])
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(mirror), tmp_path / "out")))

    assert await main_async(["sync", "--branch", "develop", "--config", str(config), "-q"]) == 0

    published = (tmp_path / "out" / "develop" / "index.json").read_text("utf-8")
    assert "\u202e" not in published and "\\u202e" not in published and '"cmake"' in published
    report = json.loads((tmp_path / "out" / "develop" / "report.json").read_text())
    assert [(i["hash"], i["reason"]) for i in report["invalid_records"]] == [
        (evil.dag_hash, "control characters in variant 'shared=tr\\u202eue'")
    ]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_stack_reads_in_every_spelling(tmp_path: Path, spelling: str) -> None:
    specs = _specs()
    data = index_document(specs, 6, stack="e4s", spelling=spelling)
    summary = load_summary(summarize_stack(_write(tmp_path / "e4s.json", data), URL))
    default = index_document(specs, 6, stack="e4s")
    expected = load_summary(summarize_stack(_write(tmp_path / "default.json", default), URL))
    assert summary.invalid == [] and summary.hashes
    assert (summary.hashes, summary.identities) == (expected.hashes, expected.identities)


def test_v9_nodes_are_written_as_spack_1_3_writes_them(tmp_path: Path) -> None:
    """What the v9 tests read is spec-file v6: provided_virtuals on the compiler's record,
    annotations everywhere, no node compiler; and synth's DB 8 stays as it was."""
    specs = _specs()
    installs = json.loads(index_document(specs, 9))["database"]["installs"]
    nodes = [record["spec"] for record in installs.values()]
    assert all("compiler" not in node and "annotations" in node for node in nodes)
    provided = {n["name"]: n["provided_virtuals"] for n in nodes if "provided_virtuals" in n}
    assert provided == {"apple-clang": ["c", "cxx"], "gcc": ["c", "cxx"]}
    v8 = json.loads(index_document(specs, 8))["database"]["installs"]
    assert all("provided_virtuals" not in r["spec"] for r in v8.values())


def _sync_config(tmp_path: Path, name: str, mirror: Path) -> tuple[Path, Path]:
    out = tmp_path / f"out-{name}"
    config = tmp_path / f"{name}.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror.as_uri(), out)), encoding="utf-8")
    return config, out


def _without_versions(index: dict[str, Any]) -> dict[str, Any]:
    """index.json with what differs between two encodings of the same specs left out: each
    source's version, and the bytes (so size, checksum and, for v3, blob URL)."""
    sources = [
        {k: v for k, v in s.items() if k not in ("db_version", "sha256", "bytes", "url")}
        for s in index["sources"]
    ]
    return {**index, "mirror": "", "sources": sources}


@pytest.mark.parametrize("layout", ["v2", "v3"])
async def test_v8_and_v9_publish_the_same_index(tmp_path: Path, layout: str) -> None:
    specs = tuple(_specs())
    published = {}
    for db in (8, 9):
        mirror = tmp_path / f"mirror{db}"
        build_mirror(mirror, [SynthRef("develop", specs, db_version=db, layout=layout)])
        config, out = _sync_config(tmp_path, f"db{db}", mirror)
        argv = ["sync", "--branch", "develop", "--config", str(config), "-q"]
        assert await main_async(argv) == 0
        data = (out / "develop" / "index.json").read_text()
        published[db] = json.loads(data.replace(mirror.as_uri(), "<mirror>"))  # in locations
    assert {s["db_version"] for s in published[9]["sources"]} == {"9"}
    assert published[9]["stats"]["specs"] == len(specs)
    assert _without_versions(published[8]) == _without_versions(published[9])


def _record(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    node = {
        "name": name,
        "version": "1.0",
        "arch": {"platform": "linux", "platform_os": "debian6", "target": {"name": "core2"}},
        "compiler": {"name": "gcc", "version": "4.5.0"},
        **spec,
    }
    return {"spec": node, "ref_count": 0, "in_buildcache": True}


def test_edges_named_as_spack_s_reader_names_them(tmp_path: Path) -> None:
    """An edge's hash is the first of hash, package_hash, full_hash, build_hash given; only a
    record key resolves it (Spack: "Missing dependency not in database")."""
    zlib, other = _hash("zlib"), _hash("not a key")
    cases = {
        "by-hash": [{"name": "zlib", "hash": zlib, "full_hash": other, "type": ["link"]}],
        "by-build-hash": [{"name": "zlib", "build_hash": zlib, "type": ["link"]}],
        "by-name": {"zlib": {"full_hash": zlib, "type": ["link"]}},
        "foreign": [{"name": "zlib", "full_hash": other, "type": ["link"]}],
        "no-hash": [{"name": "zlib", "type": ["link"]}],
    }
    installs = {zlib: _record("zlib", {"_hash": zlib})}
    keys = {case: _hash(case) for case in cases}
    for case, edges in cases.items():
        installs[keys[case]] = _record(f"app-{case}", {"dependencies": edges})
    document = {"database": {"version": "6", "installs": installs}}
    path = _write(tmp_path / "index.json", json.dumps(document).encode())
    for whole in (False, True):
        summary = _root(path, whole)
        assert {row.name for row in summary.specs} == {
            "zlib",
            "app-by-hash",
            "app-by-build-hash",
            "app-by-name",
        }
        reasons = {invalid.hash: invalid.reason for invalid in summary.invalid}
        assert reasons == {
            keys["foreign"]: f"dependency zlib/{other} is not in this index",
            keys["no-hash"]: "dependency 'zlib' has a hash that is not a 32-character base32 "
            "DAG hash",
        }


def test_a_hash_that_differs_from_its_key_is_still_refused(tmp_path: Path) -> None:
    key = _hash("key")
    installs = {key: _record("zlib", {"hash": _hash("another")})}
    path = _write(
        tmp_path / "i.json",
        json.dumps({"database": {"version": "9", "installs": installs}}).encode(),
    )
    summary = _root(path)
    assert summary.specs == [] and "differs from its key" in summary.invalid[0].reason


@pytest.mark.parametrize("version", ["5", "0.9.3", "10", "9.0", 9])
def test_versions_spack_refuses_are_refused(tmp_path: Path, version: object) -> None:
    """Spack v1.3 reads 6 to 9: 5 and older are an error, a newer one is not used."""
    assert SUPPORTED_VERSIONS == ("6", "7", "8", "9")
    spelled = b'"version":' + json.dumps(version).encode()
    data = index_document(_specs(), 9).replace(b'"version":"9"', spelled, 1)
    path = _write(tmp_path / "index.json", data)
    readers: list[Callable[[str, str], bytes]] = [summarize_root_shard, summarize_stack]
    for read in readers:
        with pytest.raises(UnsupportedVersionError) as caught:
            read(path, URL)
        assert caught.value.url == URL and caught.value.version == version
        assert f"unsupported database version {version!r}" in str(caught.value)
        assert "'6', '7', '8', '9'" in str(caught.value)


@pytest.mark.parametrize("version", ["6", "7", "8", "9"])
def test_edges_keep_the_virtuals_they_provide(tmp_path: Path, version: str) -> None:
    """An edge keeps what its dependency provides (a compiler ``c`` and ``cxx``, glibc
    ``libc``, an MPI ``mpi``), sorted, as Spack records it from DB 7 on; DB 6 edges have none."""
    deps = {"gcc": ["cxx", "c", "c"], "glibc": ["libc"], "openmpi": ["mpi"], "zlib": []}
    installs = {
        _hash(name): {**_record(name, {"hash": _hash(name)}), "in_buildcache": False}
        for name in deps
    }
    edges: list[dict[str, Any]]
    if version == "6":
        edges = [{"name": n, "hash": _hash(n), "type": ["link"]} for n in deps]
    else:
        edges = [
            {"name": n, "hash": _hash(n), "parameters": {"deptypes": ["link"], "virtuals": v}}
            for n, v in deps.items()
        ]
    app = _hash("app")
    installs[app] = _record("app", {"hash": app, "dependencies": edges})
    document = {"database": {"version": version, "installs": installs}}
    path = _write(tmp_path / "index.json", json.dumps(document).encode())
    for whole in (False, True):
        summary = _root(path, whole)
        (row,) = summary.specs
        got = {
            summary.dependencies[i].name: summary.dependencies[i].virtuals for i in row.dependencies
        }
        if version == "6":
            assert got == dict.fromkeys(deps, ())
        else:
            assert got == {"gcc": ("c", "cxx"), "glibc": ("libc",), "openmpi": ("mpi",), "zlib": ()}
