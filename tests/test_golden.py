"""Golden: the crawl reproduces the reference site's pages byte for byte (FORMAT.md section 3).

A mirror is built from the pages in ``sample/reference/develop-2025-04-20/`` (copies of real
cache.spack.io pages), once with DB 7 nodes (a ``compiler`` field) and once with DB 8 nodes (the
compiler as a dependency with virtuals ``[c, cxx]``, next to a ``compiler-wrapper`` build
dependency and records not in the build cache), in the v2 and the v3 layout. The sync reproduces
both pages byte for byte, over HTTP and ``file://``, and ``index.json``'s entries equal the pages'
``meta`` and ``spec_details``. Two syncs of one mirror give byte-identical ``index.json`` files.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror, page_to_specs
from crawler.cli.command import main, main_async

from .conftest import REFERENCE_PAGES, ServeMirror, fast_config, undated_bytes
from .schema import assert_valid_index, schema_errors

REF = "develop-2025-04-20"
PAGES = sorted((REFERENCE_PAGES / REF).glob("*/specs.md"))
BUCKET = "s3://spack-binaries/"


def _page_fields(data: bytes) -> tuple[Any, Any]:
    """The ``meta`` and ``spec_details`` JSON of a page."""
    fields: dict[str, Any] = {}
    for line in data.decode("utf-8").splitlines():
        key, sep, value = line.partition(": ")
        if sep and key in ("meta", "spec_details"):
            fields[key] = json.loads(value)
    return fields["meta"], fields["spec_details"]


def _reference() -> tuple[dict[str, bytes], list[SynthSpec]]:
    """The reference pages (package -> bytes) and the specs they describe."""
    pages: dict[str, bytes] = {}
    specs: list[SynthSpec] = []
    for path in PAGES:
        data = path.read_bytes()
        package, ref, page_specs = page_to_specs(data.decode("utf-8"))
        assert ref == REF
        assert package == path.parent.name
        pages[package] = data
        specs += page_specs
    assert set(pages) == {"py-ml-dtypes", "py-optree"}
    return pages, specs


def _installs(root: Path, url: str) -> dict[str, Any]:
    assert url.startswith(BUCKET)
    document = json.loads((root / url.removeprefix(BUCKET)).read_bytes())
    installs: dict[str, Any] = document["database"]["installs"]
    return installs


def _check_mirror_shape(
    root: Path, discovery: dict[str, list[dict[str, str]]], db_version: int, layout: str
) -> None:
    """The built mirror has the shape the golden test claims (so the test proves something)."""
    entries = discovery[REF]
    assert entries[0]["label"] == "root"
    for entry in entries:
        assert ("/blobs/sha256/" in entry["url"]) == (layout == "v3")
    installs = _installs(root, entries[0]["url"])
    specs = [r["spec"] for r in installs.values() if r["in_buildcache"]]
    deps = [r["spec"] for r in installs.values() if not r["in_buildcache"]]
    assert len(specs) == 18
    assert {"gcc-runtime", "python"} <= {d["name"] for d in deps}
    for spec in specs:
        assert all(installs[e["hash"]]["in_buildcache"] is False for e in spec["dependencies"])
    if db_version == 7:
        assert all("compiler" in s for s in specs)
        return
    assert all("compiler" not in s for s in specs)
    assert "compiler-wrapper" in {d["name"] for d in deps}
    for spec in specs:
        edges = {e["name"]: e["parameters"] for e in spec["dependencies"]}
        compilers = [name for name, p in edges.items() if p["virtuals"] == ["c", "cxx"]]
        assert len(compilers) == 1
        assert edges["compiler-wrapper"] == {"deptypes": ["build"], "virtuals": []}


def _write_config(path: Path, mirror: str, output: Path, **extra: object) -> Path:
    path.write_text(yaml.safe_dump(fast_config(mirror, output, **extra)), encoding="utf-8")
    return path


async def _sync(config: Path, *flags: str) -> int:
    return await main_async(["sync", "--branch", REF, "--config", str(config), "-q", *flags])


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http", "file"])
@pytest.mark.parametrize(("db_version", "layout"), [(7, "v2"), (7, "v3"), (8, "v2"), (8, "v3")])
async def test_reference_pages_reproduced_byte_for_byte(
    mirror_server: ServeMirror, tmp_path: Path, db_version: int, layout: str, transport: str
) -> None:
    pages, specs = _reference()
    root = tmp_path / "mirror"
    discovery = build_mirror(
        root, [SynthRef(REF, tuple(specs), db_version=db_version, layout=layout)]
    )
    _check_mirror_shape(root, discovery, db_version, layout)
    mirror = (await mirror_server(root)).url if transport == "http" else root.as_uri()
    out = tmp_path / "out"
    config = _write_config(tmp_path / "crawler.yaml", mirror, out)

    assert await _sync(config) == 0

    branch = out / REF
    written = sorted(p.relative_to(branch / "pages").as_posix() for p in branch.rglob("*.md"))
    assert written == [f"{package}/specs.md" for package in sorted(pages)]
    for package, expected in pages.items():
        assert (branch / "pages" / package / "specs.md").read_bytes() == expected, package

    index = assert_valid_index(branch / "index.json")
    assert sorted(index["packages"]) == sorted(pages)
    for package, page in pages.items():
        meta, spec_details = _page_fields(page)
        published = index["packages"][package]
        families = {spec.pop("family") for spec in published["spec_details"]}  # not on pages
        assert published == {"meta": meta, "spec_details": spec_details}
        assert families <= {"x86_64", "aarch64"}
    assert index["branch"] == REF
    labels = [s["label"] for s in index["sources"]]
    assert labels == ["root", *sorted({label for s in specs for label in s.stacks})]
    for source in index["sources"]:
        assert source["status"] == "ok"
        assert source["layout"] == layout
        assert source["db_version"] == str(db_version)
        assert source["invalid_records"] == 0
    assert index["sources"][0]["in_buildcache"] == len(specs)
    assert index["stats"] == {
        "packages": 2,
        "specs": len(specs),
        "root_records": len(_installs(root, discovery[REF][0]["url"])),
        "sources": len(labels),
        "sources_missing": 0,
        "sources_failed": 0,
        "invalid_records": 0,
        "conflicts": 0,
    }


async def test_two_syncs_of_one_mirror_give_identical_bytes(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """Same mirror content, same bytes: whatever the download order or the output folder."""
    _, specs = _reference()
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef(REF, tuple(specs), db_version=8, layout="v3")])
    server = await mirror_server(root)
    first, second = tmp_path / "first", tmp_path / "second"
    one_at_a_time = _write_config(tmp_path / "a.yaml", server.url, first)
    assert await _sync(one_at_a_time, "--concurrency", "1") == 0
    assert await _sync(_write_config(tmp_path / "b.yaml", server.url, second)) == 0
    folder = tmp_path / "folder"
    assert await _sync(_write_config(tmp_path / "d.yaml", root.as_uri(), folder)) == 0

    data = (first / REF / "index.json").read_bytes()
    assert data == (second / REF / "index.json").read_bytes()
    assert_valid_index(first / REF / "index.json")
    # Keys sorted, compact, one final newline, and nothing that changes from run to run.
    assert (
        data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode() + b"\n"
    )
    for stamp in (b"_at", b"seconds", b"duration"):
        assert stamp not in data
    # The same content read from the folder differs only in the mirror it names (and where
    # it says each spec is).
    from_folder = (folder / REF / "index.json").read_text()
    assert json.loads(from_folder)["mirror"] == root.as_uri()
    assert json.loads(from_folder.replace(root.as_uri(), server.url)) == json.loads(data)

    assert undated_bytes(first / REF) == undated_bytes(second / REF)


@pytest.fixture(scope="module")
def produced_index(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One index.json as the sync writes it (synced once for the schema tests)."""
    tmp_path = tmp_path_factory.mktemp("schema")
    _, specs = _reference()
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef(REF, tuple(specs), db_version=7)])
    out = tmp_path / "out"
    config = _write_config(tmp_path / "crawler.yaml", str(root), out)
    assert main(["sync", "--branch", REF, "--config", str(config), "-q"]) == 0
    return assert_valid_index(out / REF / "index.json")


def _break(index: dict[str, Any], where: str) -> None:
    """Make one change that the sync never writes."""
    detail = index["packages"]["py-optree"]["spec_details"][0]
    source = index["sources"][1]
    if where == "extra top-level key":
        index["generated_at"] = "2025-04-20T00:00:00Z"
    elif where == "schema_version":
        index["schema_version"] = 3
    elif where == "family":
        detail["family"] = 64
    elif where == "uppercase hash":
        detail["hash"] = detail["hash"].upper()
    elif where == "size":
        detail["size"] = "12 MB"
    elif where == "two versions":
        detail["versions"] = ["0.10.0", "0.11.0"]
    elif where == "missing variants":
        del detail["variants"]
    elif where == "extra meta key":
        index["packages"]["py-optree"]["meta"]["size"] = 1
    elif where == "unsafe package name":
        index["packages"]["../py-optree"] = index["packages"].pop("py-optree")
    elif where == "failed source with facts":
        source["status"] = "failed"
    elif where == "missing source with facts":
        source["status"] = "missing"
    elif where == "ok source without facts":
        source["sha256"] = None
    elif where == "root not first":
        index["sources"].reverse()
    elif where == "db version 5":
        source["db_version"] = "5"
    elif where == "missing stat":
        del index["stats"]["conflicts"]
    else:
        raise AssertionError(where)


@pytest.mark.parametrize(
    "where",
    [
        "extra top-level key",
        "schema_version",
        "family",
        "uppercase hash",
        "size",
        "two versions",
        "missing variants",
        "extra meta key",
        "unsafe package name",
        "failed source with facts",
        "missing source with facts",
        "ok source without facts",
        "root not first",
        "db version 5",
        "missing stat",
    ],
)
def test_the_schema_rejects_what_sync_never_writes(
    produced_index: dict[str, Any], where: str
) -> None:
    index = copy.deepcopy(produced_index)
    assert not schema_errors(index)

    _break(index, where)

    assert schema_errors(index), where
