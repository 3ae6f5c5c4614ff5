"""What a user notices after a sync: index.json, report.json and pages, scenario by scenario.

Each test builds a small mirror with :mod:`bench.synth` in ``tmp_path`` (and, where the scenario
needs a record synth does not make, edits the built v2 index and its ``.hash`` sidecar), syncs it
over loopback HTTP or ``file://`` through the command line, and checks the published files. Every
``index.json`` is validated against ``crawler/schema/index.schema.json``.
"""

from __future__ import annotations

import copy
import gc
import gzip
import hashlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror, index_document, make_hash
from crawler.cli.command import main_async
from crawler.config import load_config
from crawler.documents import PAGE_FIELDS
from crawler.sync.reporting import LogReporter
from crawler.sync.run import Syncer

from .conftest import REFERENCE_PAGES, SAMPLE_MIRROR, ServeMirror, fast_config, tree_bytes
from .schema import assert_valid_index

BUCKET = "s3://spack-binaries/"
Discovery = dict[str, list[dict[str, str]]]
Installs = dict[str, Any]

NEOVERSE_V1: dict[str, object] = {
    "name": "neoverse_v1",
    "vendor": "ARM",
    "features": ["aes", "asimd", "bf16", "sve"],
    "generation": 0,
    "parents": ["neoverse_n1", "armv8.4a"],
    "cpupart": "0xd40",
}


# --- helpers -----------------------------------------------------------------------------------


def _config(tmp_path: Path, mirror: str, out: Path, **extra: object) -> Path:
    path = tmp_path / f"crawler-{out.name}.yaml"
    path.write_text(yaml.safe_dump(fast_config(mirror, out, **extra)), encoding="utf-8")
    return path


async def _sync(config: Path, *flags: str) -> int:
    """``crawler sync ... --config FILE -q``; ``flags`` name the branches (or ``--all``)."""
    return await main_async(["sync", *flags, "--config", str(config), "-q"])


def _index(out: Path, branch: str) -> dict[str, Any]:
    """The published, schema-valid ``index.json`` of a branch."""
    return assert_valid_index(out / branch / "index.json")


def _paged_index(out: Path, branch: str) -> dict[str, Any]:
    """:func:`_index` with each spec's fields cut to those of the site's pages (the fields of
    schema 2 are checked apart, in tests/test_records.py)."""
    index = _index(out, branch)
    for package in index["packages"].values():
        package["spec_details"] = [
            {k: v for k, v in spec.items() if k in PAGE_FIELDS} for spec in package["spec_details"]
        ]
    return index


def _report(out: Path, branch: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((out / branch / "report.json").read_bytes())
    return report


def _last_report(out: Path, branch: str) -> dict[str, Any]:
    """The report of the latest attempt at a branch, failed or not."""
    report: dict[str, Any] = json.loads(
        (out / ".crawler" / "reports" / f"{branch}.json").read_bytes()
    )
    return report


def _file(root: Path, url: str) -> Path:
    """The mirror file behind a discovery URL."""
    assert url.startswith(BUCKET), url
    return root / url.removeprefix(BUCKET)


def _url(discovery: Discovery, ref: str, label: str) -> str:
    return next(e["url"] for e in discovery[ref] if e["label"] == label)


def _edit_v2(root: Path, url: str, edit: Callable[[Installs], None]) -> None:
    """Change the records of a v2 index in place and rewrite its ``.hash`` sidecar to match."""
    path = _file(root, url)
    assert path.name == "index.json", "only v2 indexes can be edited in place"
    document = json.loads(path.read_bytes())
    edit(document["database"]["installs"])
    data = json.dumps(document).encode()
    path.write_bytes(data)
    path.with_name("index.json.hash").write_text(hashlib.sha256(data).hexdigest())


def _by_name(installs: Installs, name: str) -> str:
    """The hash of the only record of ``name`` in an index."""
    (key,) = [k for k, r in installs.items() if r["spec"].get("name") == name]
    return key


def _detail(spec: SynthSpec, stacks: list[str], compiler: str, variants: list[str]) -> Any:
    target = spec.target if isinstance(spec.target, str) else str(spec.target["name"])
    return {
        "compiler": compiler,
        "hash": spec.dag_hash,
        "os": spec.os,
        "platform": spec.platform,
        "size": "-",
        "stacks": stacks,
        "target": target,
        "variants": variants,
        "versions": [spec.version],
    }


def _outside(top: Path, out: Path) -> dict[str, bytes]:
    """Every file under ``top`` but outside ``out``, with its bytes."""
    return {k: v for k, v in tree_bytes(top).items() if not (top / k).is_relative_to(out)}


def _patch(prefix: str) -> str:
    return prefix + hashlib.sha256(prefix.encode()).hexdigest()[len(prefix) :]


# --- deduplication across stacks ---------------------------------------------------------------


async def test_specs_are_deduplicated_across_stacks(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    alpha = SynthSpec("alpha", "1.0", stacks=("s1", "s2"))
    alpha2 = SynthSpec("alpha", "2.0", target="aarch64", stacks=("s1",))
    beta = SynthSpec("beta", "1.0")
    only_in_stack = SynthSpec("gamma", "1.0", stacks=("s2",))
    dep_in_s3 = SynthSpec("delta", "1.0", stacks=("s1", "s3"))
    not_pushed = SynthSpec("epsilon", "1.0", stacks=("s1",))
    specs = (alpha, alpha2, beta, only_in_stack, dep_in_s3, not_pushed)
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", specs)])

    def edit_root(installs: Installs) -> None:
        del installs[only_in_stack.dag_hash]  # now only s2 holds it
        installs[not_pushed.dag_hash]["in_buildcache"] = False  # root has it, not as a binary

    def edit_s3(installs: Installs) -> None:
        installs[dep_in_s3.dag_hash]["in_buildcache"] = False  # s3 holds it as a dependency

    _edit_v2(root, _url(discovery, "develop", "root"), edit_root)
    _edit_v2(root, _url(discovery, "develop", "s3"), edit_s3)
    server = await mirror_server(root)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, server.url, out), "--branch", "develop") == 0

    index = _paged_index(out, "develop")
    # Dependencies (compiler, gcc-runtime, compiler-wrapper), a root record not in the build
    # cache and a hash only a stack holds are not specs.
    assert list(index["packages"]) == ["alpha", "beta", "delta"]
    gcc = "gcc@13.2.0"
    assert index["packages"]["alpha"] == {
        "meta": {
            "compilers": [gcc],
            "num_specs": 2,
            "num_specs_by_stack": {"root": 2, "s1": 2, "s2": 1},
            "oss": ["ubuntu24.04"],
            "platforms": ["linux"],
            "stacks": ["root", "s1", "s2"],
            "targets": ["aarch64", "x86_64_v3"],
            "versions": ["1.0", "2.0"],
        },
        "spec_details": sorted(
            [
                _detail(alpha, ["root", "s1", "s2"], gcc, []),
                _detail(alpha2, ["root", "s1"], gcc, []),
            ],
            key=lambda d: str(d["hash"]),
        ),
    }
    assert index["packages"]["beta"]["spec_details"] == [_detail(beta, ["root"], gcc, [])]
    assert index["packages"]["beta"]["meta"]["num_specs_by_stack"] == {"root": 1}
    delta = index["packages"]["delta"]
    assert delta["spec_details"] == [_detail(dep_in_s3, ["root", "s1", "s3"], gcc, [])]
    assert delta["meta"]["num_specs_by_stack"] == {"root": 1, "s1": 1, "s3": 1}
    assert index["stats"]["specs"] == 4
    assert index["stats"]["packages"] == 3
    assert [(s["label"], s["in_buildcache"]) for s in index["sources"]] == [
        ("root", 4),
        ("s1", 0),
        ("s2", 0),
        ("s3", 0),
    ]
    assert _report(out, "develop")["conflicts"] == []


# --- missing stacks ----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["v2", "v3"])
async def test_a_stack_without_index_is_reported_missing_and_the_branch_publishes(
    mirror_server: ServeMirror, tmp_path: Path, layout: str
) -> None:
    spec = SynthSpec("zlib", "1.3.1", stacks=("e4s",))
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", (spec,), layout=layout, extra_stacks=("gone",))])
    server = await mirror_server(root)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, server.url, out), "--branch", "develop") == 0

    index = _index(out, "develop")
    gone = index["sources"][2]
    assert gone["label"] == "gone"
    assert gone["status"] == "missing"
    assert [gone[k] for k in ("sha256", "bytes", "db_version", "records")] == [None] * 4
    assert [s["status"] for s in index["sources"]] == ["ok", "ok", "missing"]
    assert index["stats"]["sources"] == 3
    assert index["stats"]["sources_missing"] == 1
    assert index["packages"]["zlib"]["meta"]["stacks"] == ["e4s", "root"]
    report = _report(out, "develop")
    assert report["status"] == "published"
    assert report["missing_stacks"] == ["gone"]
    assert report["sources"][2]["status"] == "missing"
    assert server.hits(gone["url"].removeprefix(BUCKET)) >= 1


# --- node shapes and compilers -----------------------------------------------------------------


@pytest.mark.parametrize("db_version", [6, 7, 8])
async def test_every_supported_database_version_gives_the_same_summary(
    mirror_server: ServeMirror, tmp_path: Path, db_version: int
) -> None:
    specs = (
        SynthSpec("hdf5", "1.14.5", compiler="gcc@12.3.0", stacks=("e4s",)),
        SynthSpec("py-numpy", "2.1.0", compiler="apple-clang@16.0.0", os="sequoia"),
    )
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("v1", specs, db_version=db_version)])
    installs = json.loads(_file(root, _url(discovery, "v1", "root")).read_bytes())
    edges = installs["database"]["installs"][specs[0].dag_hash]["spec"]["dependencies"]
    assert all(("type" in e) == (db_version == 6) for e in edges)  # DB 6 edges: "type" lists
    server = await mirror_server(root)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, server.url, out), "--branch", "v1") == 0

    index = _paged_index(out, "v1")
    assert index["sources"][0]["db_version"] == str(db_version)
    assert index["stats"]["invalid_records"] == 0
    assert index["packages"]["hdf5"]["spec_details"] == [
        _detail(specs[0], ["e4s", "root"], "gcc@12.3.0", [])
    ]
    assert index["packages"]["py-numpy"]["spec_details"] == [
        _detail(specs[1], ["root"], "apple-clang@16.0.0", [])
    ]


async def test_db8_compiler_from_dependency_annotation_or_none(tmp_path: Path) -> None:
    via_edge = SynthSpec("openmpi", "5.0.5", compiler="clang@17.0.0")
    via_annotation = SynthSpec(
        "fftw", "3.3.10", compiler="gcc@11.4.0", compiler_via_annotation=True
    )
    without = SynthSpec("py-six", "1.16.0", compiler=None)
    root = tmp_path / "mirror"
    specs = (via_edge, via_annotation, without)
    discovery = build_mirror(root, [SynthRef("develop", specs, db_version=8, layout="v3")])
    text = _file(root, _url(discovery, "develop", "root")).read_text()
    assert '"compiler":"gcc@=11.4.0"' in text
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, root.as_uri(), out), "--branch", "develop") == 0

    packages = _index(out, "develop")["packages"]
    assert packages["openmpi"]["spec_details"][0]["compiler"] == "clang@17.0.0"
    assert packages["fftw"]["spec_details"][0]["compiler"] == "gcc@11.4.0"
    assert packages["py-six"]["spec_details"][0]["compiler"] == "none"
    assert packages["py-six"]["meta"]["compilers"] == ["none"]
    # The compiler's own record (an external, not in the build cache) is not a spec.
    assert sorted(packages) == ["fftw", "openmpi", "py-six"]


@pytest.mark.parametrize(
    ("wrapper_virtuals", "gcc_virtuals", "expected"),
    [
        (["fortran"], ["cxx"], "gcc@13.2.0"),  # cxx beats fortran, whatever the edge order
        (["fortran"], [], "compiler-wrapper@1"),
        (["cxx"], ["c"], "gcc@13.2.0"),
    ],
)
async def test_db8_compiler_edge_is_chosen_by_c_then_cxx_then_fortran(
    tmp_path: Path, wrapper_virtuals: list[str], gcc_virtuals: list[str], expected: str
) -> None:
    spec = SynthSpec("lapack", "3.12.0")
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", (spec,), db_version=8)])

    def edit(installs: Installs) -> None:
        edges = installs[spec.dag_hash]["spec"]["dependencies"]
        assert [e["name"] for e in edges] == ["compiler-wrapper", "gcc", "gcc-runtime"]
        edges[0]["parameters"]["virtuals"] = wrapper_virtuals
        edges[1]["parameters"]["virtuals"] = gcc_virtuals

    _edit_v2(root, _url(discovery, "develop", "root"), edit)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, root.as_uri(), out), "--branch", "develop") == 0

    detail = _index(out, "develop")["packages"]["lapack"]["spec_details"][0]
    assert detail["compiler"] == expected


@pytest.mark.parametrize("db_version", [6, 8])
async def test_object_targets_are_shown_by_name(tmp_path: Path, db_version: int) -> None:
    specs = (
        SynthSpec("zlib", "1.3.1", target=NEOVERSE_V1),
        SynthSpec("zlib", "1.3.1", target="aarch64"),
    )
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", specs, db_version=db_version)])
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, str(root), out), "--branch", "develop") == 0

    zlib = _index(out, "develop")["packages"]["zlib"]
    assert zlib["meta"]["targets"] == ["aarch64", "neoverse_v1"]
    by_hash = {d["hash"]: d["target"] for d in zlib["spec_details"]}
    assert by_hash == {specs[0].dag_hash: "neoverse_v1", specs[1].dag_hash: "aarch64"}
    page = (out / "develop" / "pages" / "zlib" / "specs.md").read_text()
    assert "vendor" not in page and "features" not in page


# --- variants ----------------------------------------------------------------------------------


async def test_variants_render_like_the_reference_site_in_parameters_order(
    tmp_path: Path,
) -> None:
    spec = SynthSpec(
        "kokkos",
        "4.4.01",
        variants=(
            ("alpha", False),
            ("build_type", "Release"),
            ("cuda_arch", ("80",)),
            ("libs", ("shared", "static")),
            ("zeta", True),
        ),
        patches=(_patch("abcdef1"), _patch("1234567")),
    )
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", (spec,), db_version=8)])

    def edit(installs: Installs) -> None:
        params = installs[spec.dag_hash]["spec"]["parameters"]
        # Flags with values, and an order that is neither alphabetical nor synth's.
        installs[spec.dag_hash]["spec"]["parameters"] = {
            "zeta": params["zeta"],
            "cflags": ["-O2"],
            "alpha": params["alpha"],
            "libs": params["libs"],
            "cppflags": [],
            "build_type": params["build_type"],
            "ldflags": ["-lm"],
            "cuda_arch": params["cuda_arch"],
            "patches": params["patches"],
            "cxxflags": [],
            "fflags": [],
            "ldlibs": ["-ldl"],
        }

    _edit_v2(root, _url(discovery, "develop", "root"), edit)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, root.as_uri(), out), "--branch", "develop") == 0

    expected = [
        "+zeta",
        "~alpha",
        "libs=shared,static",
        "build_type=Release",
        "cuda_arch=80",
        "patches=abcdef1,1234567",
    ]
    kokkos = _index(out, "develop")["packages"]["kokkos"]
    assert kokkos["spec_details"][0]["variants"] == expected
    page = (out / "develop" / "pages" / "kokkos" / "specs.md").read_text()
    assert '"variants": ' + json.dumps(expected) in page


@pytest.mark.parametrize("gzipped", [False, True], ids=["in-pieces", "whole"])
async def test_a_lone_surrogate_escape_reads_as_a_replacement_character(
    tmp_path: Path, gzipped: bool
) -> None:
    """Python's json writes a string that is not valid Unicode (a path that is not UTF-8, read
    with surrogateescape) as a lone surrogate escape, and reads it back; it is no reason to
    refuse an index. It reads as U+FFFD, wherever it is, in a file read in pieces or whole."""
    spec = SynthSpec("cmake", "3.30.5", variants=(("build_system", "generic"),), stacks=("s1",))
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", (spec,), db_version=8)])

    def edit(installs: Installs) -> None:
        node = installs[spec.dag_hash]["spec"]
        node["parameters"]["build_system"] = "generic-\udcff"
        for record in installs.values():  # a field the crawler does not read, too
            record["spec"]["external"] = {"path": "/opt/\udcff\ud800", "module": None}

    for label in ("root", "s1"):
        _edit_v2(root, _url(discovery, "develop", label), edit)
    index = _file(root, _url(discovery, "develop", "root"))
    assert b"\\udcff" in index.read_bytes()
    if gzipped:
        index.write_bytes(gzip.compress(index.read_bytes(), mtime=0))
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, root.as_uri(), out), "--branch", "develop") == 0

    published = _index(out, "develop")
    assert published["stats"]["invalid_records"] == 0
    (detail,) = published["packages"]["cmake"]["spec_details"]
    assert detail["variants"] == ["build_system=generic-\ufffd"]
    assert detail["stacks"] == ["root", "s1"]


# --- v3 blobs and checksums --------------------------------------------------------------------


async def test_v3_blobs_are_read_and_their_checksum_recorded(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    specs = (SynthSpec("zlib", "1.3.1", stacks=("e4s",)), SynthSpec("cmake", "3.30.5"))
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", specs, layout="v3")])
    server = await mirror_server(root)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, server.url, out), "--branch", "develop") == 0

    index = _index(out, "develop")
    assert sorted(index["packages"]) == ["cmake", "zlib"]
    for source in index["sources"]:
        blob = _file(root, source["url"])
        assert source["layout"] == "v3"
        assert source["sha256"] == blob.name
        assert source["bytes"] == blob.stat().st_size
    assert [s["url"] for s in index["sources"]] == [e["url"] for e in discovery["develop"]]
    assert server.hits(".hash") == 0  # v3 has no sidecar


@pytest.mark.parametrize(("label", "transport"), [("root", "http"), ("e4s", "file")])
async def test_a_v3_blob_that_does_not_match_its_name_fails_the_branch_only(
    mirror_server: ServeMirror,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    label: str,
    transport: str,
) -> None:
    """The mirror publishes a new blob whose bytes are not what its name promises."""
    root = tmp_path / "mirror"
    zlib = SynthSpec("zlib", "1.3.1", stacks=("e4s",))
    build_mirror(root, [SynthRef("develop", (zlib,), layout="v3")])
    mirror = (await mirror_server(root)).url if transport == "http" else root.as_uri()
    out = tmp_path / "out"
    config = _config(tmp_path, mirror, out)
    assert await _sync(config, "--all") == 0
    before = tree_bytes(out / "develop")

    # The next mirror update: new blobs (new names) for develop, and a new ref ...
    shutil.rmtree(root)
    curl = SynthSpec("curl", "8.10.1", stacks=("e4s",))
    cmake = SynthSpec("cmake", "3.30.5")
    refs = [SynthRef("develop", (zlib, curl), layout="v3"), SynthRef("v1.0", (cmake, curl))]
    discovery = build_mirror(root, refs)
    # ... but one of develop's blobs holds well-formed Database JSON that is not what its name
    # promises.
    url = _url(discovery, "develop", label)
    blob = _file(root, url)
    blob.write_bytes(index_document((cmake,), 8))
    capsys.readouterr()

    assert await _sync(config, "--all") == 4

    err = capsys.readouterr().err
    location = f"{mirror}/{url.removeprefix(BUCKET)}"
    assert location in err
    assert "sha256" in err
    last = err.splitlines()[-1]
    assert last.startswith("error: ") and "develop" in last and "v1.0" not in last
    assert tree_bytes(out / "develop") == before
    failed = _last_report(out, "develop")
    assert failed["status"] == "failed"
    assert location in failed["error"] and "sha256" in failed["error"]
    # The other branch was published all the same.
    assert _last_report(out, "v1.0")["status"] == "published"
    assert list(_index(out, "v1.0")["packages"]) == ["cmake", "curl"]


async def test_a_gzip_compressed_v3_blob_is_read(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """FORMAT.md: a v3 index blob is gunzipped when it starts with 1f 8b (its name is the
    checksum of the compressed bytes)."""
    root = tmp_path / "mirror"
    specs = (SynthSpec("zlib", "1.3.1", stacks=("e4s",)), SynthSpec("cmake", "3.30.5"))
    discovery = build_mirror(root, [SynthRef("develop", specs, layout="v3")])
    plain = _file(root, _url(discovery, "develop", "root"))
    packed = gzip.compress(plain.read_bytes(), mtime=0)
    checksum = hashlib.sha256(packed).hexdigest()
    url = f"{BUCKET}develop/blobs/sha256/{checksum[:2]}/{checksum}"
    _file(root, url).parent.mkdir(parents=True, exist_ok=True)
    _file(root, url).write_bytes(packed)
    plain.unlink()
    manifest_path = root / "develop" / "v3" / "manifests" / "index" / "index.manifest.json"
    manifest = json.loads(manifest_path.read_bytes())
    manifest["data"][0].update(compression="gzip", checksum=checksum, contentLength=len(packed))
    manifest_path.write_text(json.dumps(manifest))
    discovery["develop"][0]["url"] = url
    (root / "cache_spack_io_index.json").write_text(json.dumps(discovery))
    server = await mirror_server(root)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, server.url, out), "--branch", "develop") == 0

    index = _index(out, "develop")
    assert sorted(index["packages"]) == ["cmake", "zlib"]
    assert index["sources"][0]["sha256"] == checksum
    assert index["sources"][0]["bytes"] == len(packed)


async def test_a_v2_sidecar_that_disagrees_is_reported_not_fatal(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", (SynthSpec("zlib", "1.3.1"),))])
    index_path = _file(root, _url(discovery, "develop", "root"))
    stale = hashlib.sha256(b"the previous index").hexdigest()
    index_path.with_name("index.json.hash").write_text(stale)
    server = await mirror_server(root)
    out = tmp_path / "out"

    config = _config(tmp_path, server.url, out)
    assert await main_async(["sync", "--branch", "develop", "--config", str(config)]) == 0

    line = re.search(r"INFO develop root: fetched .*", capsys.readouterr().err)
    assert line and line[0].endswith(f"s; its index.json.hash disagrees ({stale})"), line
    source = _report(out, "develop")["sources"][0]
    assert source["sidecar_sha256"] == stale
    assert source["sidecar_matches"] is False
    assert source["sha256"] == hashlib.sha256(index_path.read_bytes()).hexdigest()
    assert list(_index(out, "develop")["packages"]) == ["zlib"]


async def test_a_changed_v2_index_is_read_even_while_its_sidecar_is_stale(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """Spack uploads index.json, then index.json.hash: between the two, the sidecar still names
    the previous index. A sync in that window must publish the new index, not the old one."""
    root = tmp_path / "mirror"
    zlib = SynthSpec("zlib", "1.3.1")
    discovery = build_mirror(root, [SynthRef("develop", (zlib,))])
    server = await mirror_server(root)
    out = tmp_path / "out"
    config = _config(tmp_path, server.url, out)
    assert await _sync(config, "--branch", "develop") == 0
    index_path = _file(root, _url(discovery, "develop", "root"))
    old_sidecar = index_path.with_name("index.json.hash").read_text()

    index_path.write_bytes(index_document((zlib, SynthSpec("cmake", "3.30.5")), 8))

    assert await _sync(config, "--branch", "develop") == 0

    assert list(_index(out, "develop")["packages"]) == ["cmake", "zlib"]
    source = _last_report(out, "develop")["sources"][0]
    assert source["sidecar_sha256"] == old_sidecar
    assert source["sidecar_matches"] is False
    assert source["sha256"] == hashlib.sha256(index_path.read_bytes()).hexdigest()


# --- URL mapping -------------------------------------------------------------------------------


async def test_s3_urls_of_any_bucket_map_onto_the_mirror(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    root = tmp_path / "mirror"
    spec = SynthSpec("zlib", "1.3.1", stacks=("e4s",))
    build_mirror(root, [SynthRef("develop", (spec,))], bucket="another-bucket")
    server = await mirror_server(root)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, server.url, out), "--branch", "develop") == 0

    index = _index(out, "develop")
    assert index["mirror"] == server.url
    assert [s["url"] for s in index["sources"]] == [
        "s3://another-bucket/develop/build_cache/index.json",
        "s3://another-bucket/develop/e4s/build_cache/index.json",
    ]
    locations = [s["location"] for s in _report(out, "develop")["sources"]]
    assert locations == [
        f"{server.url}/develop/build_cache/index.json",
        f"{server.url}/develop/e4s/build_cache/index.json",
    ]
    assert index["packages"]["zlib"]["meta"]["stacks"] == ["e4s", "root"]


async def test_rewrites_send_index_urls_elsewhere_than_the_mirror(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """The discovery document comes from folder A; the rewrite sends every index to HTTP."""
    served = tmp_path / "served"
    spec = SynthSpec("zlib", "1.3.1", stacks=("e4s",))
    build_mirror(served, [SynthRef("develop", (spec,))])
    discovery_only = tmp_path / "discovery-only"
    discovery_only.mkdir()
    name = "cache_spack_io_index.json"
    (discovery_only / name).write_bytes((served / name).read_bytes())
    server = await mirror_server(served)
    out = tmp_path / "out"
    rewrites = [{"prefix": BUCKET, "replacement": server.url + "/"}]
    config = _config(tmp_path, discovery_only.as_uri(), out, rewrites=rewrites)

    assert await _sync(config, "--branch", "develop") == 0

    index = _index(out, "develop")
    assert index["mirror"] == discovery_only.as_uri()
    assert index["sources"][1]["url"] == "s3://spack-binaries/develop/e4s/build_cache/index.json"
    assert index["packages"]["zlib"]["meta"]["stacks"] == ["e4s", "root"]
    asked = sorted({path for path, _ in server.requests})
    assert asked == [
        "/develop/build_cache/index.json",
        "/develop/build_cache/index.json.hash",
        "/develop/e4s/build_cache/index.json",
        "/develop/e4s/build_cache/index.json.hash",
    ]
    locations = [s["location"] for s in _report(out, "develop")["sources"]]
    assert all(loc.startswith(server.url + "/develop/") for loc in locations)


async def test_a_rewrite_to_a_folder_may_spell_its_scheme_in_capitals(tmp_path: Path) -> None:
    """URL schemes are case-insensitive: ``FILE://`` names a folder as ``file://`` does."""
    served = tmp_path / "served"
    build_mirror(served, [SynthRef("develop", (SynthSpec("zlib", "1.3.1", stacks=("e4s",)),))])
    out = tmp_path / "out"
    rewrites = [{"prefix": BUCKET, "replacement": "FILE://" + served.as_uri()[7:] + "/"}]
    config = _config(tmp_path, str(served), out, rewrites=rewrites)

    assert await _sync(config, "--branch", "develop") == 0

    locations = [s["location"] for s in _report(out, "develop")["sources"]]
    assert locations == [
        f"{served.as_uri()}/develop/{p}build_cache/index.json" for p in ("", "e4s/")
    ]


# --- conflicts and invalid records -------------------------------------------------------------


async def test_stacks_that_disagree_with_root_are_reported_and_root_wins(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    spec = SynthSpec("zlib", "1.3.1", stacks=("s1", "s2"))
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", (spec,), db_version=7)])

    def newer_version(installs: Installs) -> None:
        installs[spec.dag_hash]["spec"]["version"] = "9.9.9"

    def other_os(installs: Installs) -> None:
        installs[spec.dag_hash]["spec"]["arch"]["platform_os"] = "centos7"

    _edit_v2(root, _url(discovery, "develop", "s1"), newer_version)
    _edit_v2(root, _url(discovery, "develop", "s2"), other_os)
    server = await mirror_server(root)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, server.url, out), "--branch", "develop") == 0

    assert _report(out, "develop")["conflicts"] == [
        {
            "hash": spec.dag_hash,
            "source": "s1",
            "field": "version",
            "root": "1.3.1",
            "stack": "9.9.9",
        },
        {
            "hash": spec.dag_hash,
            "source": "s2",
            "field": "os",
            "root": "ubuntu24.04",
            "stack": "centos7",
        },
    ]
    index = _paged_index(out, "develop")
    assert index["stats"]["conflicts"] == 2
    zlib = index["packages"]["zlib"]
    assert zlib["spec_details"] == [_detail(spec, ["root", "s1", "s2"], "gcc@13.2.0", [])]
    assert zlib["meta"]["versions"] == ["1.3.1"]
    assert zlib["meta"]["oss"] == ["ubuntu24.04"]


async def test_invalid_records_are_left_out_and_listed(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    good = SynthSpec("zlib", "1.3.1", stacks=("s1",))
    also_good = SynthSpec("cmake", "3.30.5")
    bad = {
        name: SynthSpec(name, "1.0")
        for name in ("mismatch", "noname", "badversion", "dangling", "nocompiler", "evil")
    }
    broken_compiler = SynthSpec("badcompiler", "1.0", compiler="clang@17.0.0")
    specs = (good, also_good, *bad.values(), broken_compiler)
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", specs, db_version=8)])
    bad_key = "Z" * 32
    stack_bad_key = "not-a-hash"
    ghost = make_hash("ghost")
    clang: list[str] = []

    def edit_root(installs: Installs) -> None:
        installs[bad_key] = copy.deepcopy(installs[good.dag_hash])
        installs[bad_key]["spec"]["hash"] = bad_key
        installs[bad["mismatch"].dag_hash]["spec"]["hash"] = make_hash("another")
        del installs[bad["noname"].dag_hash]["spec"]["name"]
        installs[bad["badversion"].dag_hash]["spec"]["version"] = 3
        edge = {
            "name": "ghost",
            "hash": ghost,
            "parameters": {"deptypes": ["link"], "virtuals": []},
        }
        installs[bad["dangling"].dag_hash]["spec"]["dependencies"].append(edge)
        for edge in installs[bad["nocompiler"].dag_hash]["spec"]["dependencies"]:
            if edge["name"] == "gcc":
                edge["hash"] = make_hash("no such compiler record")
        installs[bad["evil"].dag_hash]["spec"]["name"] = "../evil"
        clang.append(_by_name(installs, "clang"))
        installs[clang[0]]["spec"]["version"] = ["17.0.0"]  # the compiler's record is invalid

    def edit_s1(installs: Installs) -> None:
        installs[stack_bad_key] = copy.deepcopy(installs[good.dag_hash])

    _edit_v2(root, _url(discovery, "develop", "root"), edit_root)
    _edit_v2(root, _url(discovery, "develop", "s1"), edit_s1)
    server = await mirror_server(root)
    out = tmp_path / "out"
    config = _config(tmp_path, server.url, out)
    outside_before = _outside(tmp_path, out)

    assert await _sync(config, "--branch", "develop") == 0

    reasons = {
        (r["source"], r["hash"]): r["reason"] for r in _report(out, "develop")["invalid_records"]
    }
    expected = {
        ("root", bad_key): "base32",
        ("root", bad["mismatch"].dag_hash): "differs from its key",
        ("root", bad["noname"].dag_hash): "name",
        ("root", bad["badversion"].dag_hash): "version",
        ("root", bad["dangling"].dag_hash): ghost,
        ("root", bad["nocompiler"].dag_hash): make_hash("no such compiler record"),
        ("root", bad["evil"].dag_hash): "'../evil' is not a safe folder name",
        ("root", clang[0]): "version",
        ("root", broken_compiler.dag_hash): "compiler",
        ("s1", stack_bad_key): "base32",
    }
    assert sorted(reasons) == sorted(expected)
    for key, fragment in expected.items():
        assert fragment in reasons[key], (key, reasons[key])

    index = _paged_index(out, "develop")
    assert list(index["packages"]) == ["cmake", "zlib"]
    assert index["packages"]["zlib"]["spec_details"] == [
        _detail(good, ["root", "s1"], "gcc@13.2.0", [])
    ]
    assert index["stats"]["invalid_records"] == 10
    assert index["stats"]["specs"] == 2
    assert [(s["invalid_records"], s["in_buildcache"]) for s in index["sources"]] == [
        (9, 2),
        (1, 0),
    ]
    root_installs = json.loads(_file(root, _url(discovery, "develop", "root")).read_bytes())
    assert index["sources"][0]["records"] == len(root_installs["database"]["installs"])
    assert index["stats"]["root_records"] == index["sources"][0]["records"]
    # Nothing written outside the output folder, nothing named after the unsafe package.
    assert _outside(tmp_path, out) == outside_before
    assert not [p for p in out.rglob("*") if "evil" in p.name]
    assert sorted(p.name for p in (out / "develop" / "pages").iterdir()) == ["cmake", "zlib"]


@pytest.mark.parametrize(
    "breakage",
    ["spec.hash differs", "dependency not in index", "variant of a wrong type"],
)
async def test_a_spec_whose_compiler_record_is_invalid_is_left_out(
    tmp_path: Path, breakage: str
) -> None:
    """A compiler edge must point at a valid record: the spec is not published with a compiler
    taken from a record that is itself listed as invalid."""
    good = SynthSpec("zlib", "1.3.1")
    built_by_clang = SynthSpec("openmpi", "5.0.5", compiler="clang@17.0.0")
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", (good, built_by_clang), db_version=8)])
    clang: list[str] = []

    def edit(installs: Installs) -> None:
        key = _by_name(installs, "clang")
        clang.append(key)
        node = installs[key]["spec"]
        if breakage == "spec.hash differs":
            node["hash"] = make_hash("not clang")
        elif breakage == "dependency not in index":
            edge = {"name": "zstd", "hash": make_hash("zstd"), "parameters": {}}
            node["dependencies"] = [edge]
        else:
            node["parameters"]["languages"] = {"c": True}

    _edit_v2(root, _url(discovery, "develop", "root"), edit)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, root.as_uri(), out), "--branch", "develop") == 0

    invalid = {r["hash"]: r["reason"] for r in _report(out, "develop")["invalid_records"]}
    assert sorted(invalid) == sorted([clang[0], built_by_clang.dag_hash])
    assert "compiler" in invalid[built_by_clang.dag_hash]
    assert list(_index(out, "develop")["packages"]) == ["zlib"]


async def test_a_stack_record_with_control_characters_is_not_a_crash(tmp_path: Path) -> None:
    """Mirror content is untrusted: odd characters in a stack's fields give a conflict or an
    invalid record, never an internal error that stops every branch."""
    spec = SynthSpec("zlib", "1.3.1", stacks=("s1",))
    root = tmp_path / "mirror"
    discovery = build_mirror(root, [SynthRef("develop", (spec,), db_version=7)])

    def odd_version(installs: Installs) -> None:
        installs[spec.dag_hash]["spec"]["version"] = "1.3.1\x1fpatched"

    _edit_v2(root, _url(discovery, "develop", "s1"), odd_version)
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, root.as_uri(), out), "--branch", "develop") == 0

    report = _report(out, "develop")
    noticed = [c["hash"] for c in report["conflicts"] if c["source"] == "s1"]
    noticed += [r["hash"] for r in report["invalid_records"] if r["source"] == "s1"]
    assert noticed == [spec.dag_hash]
    zlib = _index(out, "develop")["packages"]["zlib"]
    assert zlib["spec_details"][0]["versions"] == ["1.3.1"]


# --- output formats and commands ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("formats", "pages"), [("json", False), ("json,pages", True), ("pages", True)]
)
async def test_format_flag_chooses_pages_and_json_is_always_written(
    tmp_path: Path, formats: str, pages: bool
) -> None:
    specs = (SynthSpec("zlib", "1.3.1"), SynthSpec("py-six", "1.16.0", compiler=None))
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", specs)])
    out = tmp_path / "out"
    config = _config(tmp_path, root.as_uri(), out)

    assert await _sync(config, "--branch", "develop", "--format", formats) == 0

    files = sorted(tree_bytes(out / "develop"))
    assert {"index.json", "report.json"} <= set(files)
    expected = ["pages/py-six/specs.md", "pages/zlib/specs.md"] if pages else []
    assert [f for f in files if f.startswith("pages/")] == expected
    assert (out / "develop" / "pages").exists() == pages
    assert sorted(_index(out, "develop")["packages"]) == ["py-six", "zlib"]


async def test_a_branch_rebuilt_to_the_files_published_reports_no_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a publish has ``changes``: a branch rebuilt (its state deleted) to the very files
    published is ``unchanged``, and neither its report nor ``--json`` gives it changes."""
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", (SynthSpec("zlib", "1.3.1"),))])
    out = tmp_path / "out"
    argv = ["sync", "--branch", "develop", "--config", str(_config(tmp_path, root.as_uri(), out))]
    assert await main_async(argv) == 0
    shutil.rmtree(out / ".crawler")
    capsys.readouterr()
    assert await main_async([*argv, "--json"]) == 6
    [line] = capsys.readouterr().out.splitlines()
    assert json.loads(line)["status"] == "unchanged" and json.loads(line)["changes"] is None
    report = json.loads((out / ".crawler" / "reports" / "develop.json").read_bytes())
    assert report["status"] == "unchanged" and "changes" not in report
    assert json.loads((out / "develop" / "report.json").read_bytes())["changes"]["added"] == 1


async def test_a_branch_keeps_the_formats_it_was_published_in_unless_pruned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A manual ``--format json`` after a cron job that publishes pages dropped the site's
    pages (a warning, exit 0). A branch now keeps the formats it was published in, whatever
    the state says (deleting .crawler/ is allowed); ``--prune-formats`` alone removes them."""
    specs = (SynthSpec("zlib", "1.3.1"),)
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", specs)])
    out = tmp_path / "out"
    config = _config(tmp_path, root.as_uri(), out)
    pages = out / "develop" / "pages" / "zlib" / "specs.md"

    async def sync(formats: str, *flags: str) -> tuple[int, list[str]]:
        argv = ["sync", "--branch", "develop", "--config", str(config), "--format", formats]
        code = await main_async([*argv, *flags])
        lines = capsys.readouterr().err.splitlines()
        return code, [line.split(" INFO ", 1)[-1] for line in lines if "formats" in line]

    assert await sync("json,pages") == (0, [])
    published = tree_bytes(out / "develop")
    kept = ["develop: writing pages too, as published before (prune_formats drops them)"]
    assert await sync("json") == (6, kept)
    assert tree_bytes(out / "develop") == published

    shutil.rmtree(out / ".crawler")  # the state is gone, the pages are there
    assert await sync("json") == (6, kept)  # rebuilt to the very files published
    assert tree_bytes(out / "develop") == published

    removed = ["develop: removing pages, as prune_formats asks"]
    assert await sync("json", "--prune-formats") == (0, removed)
    assert not pages.exists() and not (out / "develop" / "pages").exists()
    assert await sync("json") == (6, [])
    assert await sync("json,pages", "--prune-formats") == (0, [])
    assert pages.is_file()


async def test_an_immutable_ref_gets_a_stack_missing_when_it_was_published(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stack that was missing (404) when an immutable ref was published is looked for each
    time the ref would be skipped: once the mirror has it, the ref is synced with it. It used
    to be skipped for good, the stack never in, while a fresh crawl had it."""
    root = tmp_path / "mirror"
    specs = (
        SynthSpec("zlib", "1.3.1", stacks=("s1",)),
        SynthSpec("cmake", "3.30.5", stacks=("s2",)),
    )
    build_mirror(root, [SynthRef("v1.0", specs, layout="v2")])
    aside = tmp_path / "s2"
    (root / "v1.0" / "s2").rename(aside)
    out = tmp_path / "out"
    config = _config(tmp_path, root.as_uri(), out)
    assert await _sync(config, "--branch", "v1.0") == 0
    statuses = {s["label"]: s["status"] for s in _index(out, "v1.0")["sources"]}
    assert statuses == {"root": "ok", "s1": "ok", "s2": "missing"}
    assert await _sync(config, "--branch", "v1.0") == 6  # still missing: skipped

    aside.rename(root / "v1.0" / "s2")
    capsys.readouterr()
    assert await main_async(["sync", "--branch", "v1.0", "--config", str(config)]) == 0

    err = capsys.readouterr().err
    assert (
        "v1.0: immutable, but the mirror now has s2, missing when it was published: syncing it"
        in err
    )
    index = _index(out, "v1.0")
    assert {s["label"]: s["status"] for s in index["sources"]} == {
        "root": "ok",
        "s1": "ok",
        "s2": "ok",
    }
    assert index["packages"]["cmake"]["meta"]["stacks"] == ["root", "s2"]
    assert await _sync(config, "--branch", "v1.0") == 6
    assert _last_report(out, "v1.0")["status"] == "skipped"


async def test_an_immutable_ref_keeps_its_pages_without_its_state(tmp_path: Path) -> None:
    """An old ref stays put in the formats it was published in, also once .crawler/ is
    deleted, the README's way to read everything again: its pages tell."""
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("v1.0", (SynthSpec("zlib", "1.3.1"),))])
    out = tmp_path / "out"
    config = _config(tmp_path, root.as_uri(), out)
    assert await _sync(config, "--branch", "v1.0", "--format", "json,pages") == 0
    page = out / "v1.0" / "pages" / "zlib" / "specs.md"
    before = page.read_bytes()
    shutil.rmtree(out / ".crawler")

    # Rebuilt with its pages, it is the very files published: nothing is swapped (exit 6).
    assert await _sync(config, "--branch", "v1.0", "--format", "json", "--force") == 6

    assert page.read_bytes() == before


async def test_a_linked_pages_folder_is_not_an_immutable_refs_pages(tmp_path: Path) -> None:
    """A ``pages`` link in a branch folder is not the crawler's (it refuses to replace one):
    it must not add pages to what the ref is rebuilt in, which would fail every run."""
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("v1.0", (SynthSpec("zlib", "1.3.1"),))])
    out = tmp_path / "out"
    config = _config(tmp_path, root.as_uri(), out)
    assert await _sync(config, "--branch", "v1.0", "--format", "json") == 0
    elsewhere = tmp_path / "elsewhere" / "zlib"
    elsewhere.mkdir(parents=True)
    (elsewhere / "specs.md").write_text("by hand")
    (out / "v1.0" / "pages").symlink_to(elsewhere.parent)

    assert await _sync(config, "--branch", "v1.0", "--format", "json", "--force") == 6


async def test_branches_lists_refs_with_their_labels(
    mirror_server: ServeMirror, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = (SynthSpec("zlib", "1.3.1", stacks=("e4s", "ml-cpu")),)
    root = tmp_path / "mirror"
    discovery = build_mirror(
        root,
        [
            SynthRef("develop", specs, extra_stacks=("data-vis-sdk",)),
            SynthRef("v0.23.1", (SynthSpec("cmake", "3.30.5"),), db_version=6),
        ],
    )
    document: dict[str, Any] = dict(discovery)
    document["no-root"] = [e for e in discovery["develop"] if e["label"] != "root"]
    document["../escape"] = discovery["v0.23.1"]
    (root / "cache_spack_io_index.json").write_text(json.dumps(document))
    server = await mirror_server(root)
    config = _config(tmp_path, server.url, tmp_path / "out")

    code = await main_async(["branches", "--config", str(config), "-q"])

    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    listed = f"\tlisted in {server.url}/cache_spack_io_index.json"
    assert lines[:2] == [f"develop\troot data-vis-sdk e4s ml-cpu{listed}", f"v0.23.1\troot{listed}"]
    unusable = dict(line.split("\t", 1) for line in lines[2:])
    assert sorted(unusable) == ["../escape", "no-root"]
    assert unusable["no-root"].startswith("UNUSABLE: ") and "root" in unusable["no-root"]
    assert unusable["../escape"].startswith("UNUSABLE: ") and "safe" in unusable["../escape"]
    assert not (tmp_path / "out").exists()


async def test_the_sample_mirror_syncs_and_reproduces_the_reference_pages(tmp_path: Path) -> None:
    out = tmp_path / "out"

    assert await _sync(_config(tmp_path, SAMPLE_MIRROR.as_uri(), out), "--all") == 0

    discovery = json.loads((SAMPLE_MIRROR / "cache_spack_io_index.json").read_bytes())
    assert sorted(p.name for p in out.iterdir() if p.name != ".crawler") == sorted(discovery)
    versions = {"develop": "8", "develop-2025-04-20": "7", "v0.23.1": "6"}
    for branch in discovery:
        index = _index(out, branch)
        assert index["stats"]["invalid_records"] == 0
        assert {s["db_version"] for s in index["sources"] if s["status"] == "ok"} == {
            versions[branch]
        }
        for name in index["packages"]:
            assert (out / branch / "pages" / name / "specs.md").is_file()
    assert _report(out, "develop")["missing_stacks"] == ["ml-darwin-aarch64-mps"]
    pages = sorted(REFERENCE_PAGES.glob("*/*/specs.md"))
    assert len(pages) == 2
    for page in pages:
        relative = page.relative_to(REFERENCE_PAGES)
        ref, package = relative.parts[0], relative.parts[1]
        assert (out / ref / "pages" / package / "specs.md").read_bytes() == page.read_bytes()


# --- the garbage collector --------------------------------------------------------------------


class _FreezeCounts(LogReporter):
    """Notes how many objects are frozen as each branch starts."""

    def __init__(self) -> None:
        self.frozen: list[int] = []

    def branch_started(self, branch: str, sources: int) -> None:
        self.frozen.append(gc.get_freeze_count())


async def test_a_sync_leaves_nothing_frozen_out_of_the_collector(tmp_path: Path) -> None:
    """The build freezes what the process holds (see paused_gc): each branch gives it back to
    the cyclic collector once done, so that neither the next branch nor a program running
    syncs in-process keeps a frozen cycle."""
    out = tmp_path / "out"
    config = load_config(_config(tmp_path, str(SAMPLE_MIRROR), out))
    reporter = _FreezeCounts()
    result = await Syncer(config, reporter).run(["develop", "v0.23.1"])
    assert [b.status for b in result.branches] == ["published", "published"]
    assert reporter.frozen == [0, 0]
    assert gc.get_freeze_count() == 0
