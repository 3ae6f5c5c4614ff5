"""File-level checks of the synthetic mirror builder (bench/synth.py) and the sample mirror."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.synth import (
    FLAGS,
    SynthRef,
    SynthSpec,
    build_mirror,
    generate_specs,
    index_document,
    make_hash,
    page_to_specs,
)

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample"
PAGES = sorted((SAMPLE / "reference").glob("*/*/specs.md"))
HASH_RE = re.compile(r"^[a-z2-7]{32}$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
STACKS = ("data-vis-sdk", "e4s", "ml-linux-x86_64-cpu")


def _tree(root: Path) -> dict[str, bytes]:
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _local(root: Path, url: str) -> Path:
    assert url.startswith("s3://spack-binaries/")
    return root / url.removeprefix("s3://spack-binaries/")


def _installs(data: bytes) -> dict[str, Any]:
    doc = json.loads(data)
    installs: dict[str, Any] = doc["database"]["installs"]
    return installs


def _refs() -> list[SynthRef]:
    specs = tuple(generate_specs(11, 12, stacks=STACKS, annotation_fraction=0.3))
    old = tuple(generate_specs(12, 6, stacks=STACKS[:2], allow_no_compiler=False))
    return [
        SynthRef("develop", specs, db_version=8, layout="v3", extra_stacks=("gone",)),
        SynthRef("develop-2025-01-05", specs, db_version=8, layout="v2"),
        SynthRef("v0.23.0", old, db_version=7, layout="v2", extra_stacks=("gone",)),
        SynthRef("v0.21.0", old, db_version=6, layout="v3"),
    ]


@pytest.fixture
def mirror(tmp_path: Path) -> tuple[Path, dict[str, list[dict[str, str]]]]:
    root = tmp_path / "mirror"
    return root, build_mirror(root, _refs())


def _render(params: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in params.items():
        if key in FLAGS:
            continue
        if key == "patches":
            out.append("patches=" + ",".join(p[:7] for p in value))
        elif isinstance(value, bool):
            out.append(("+" if value else "~") + key)
        elif isinstance(value, list):
            out.append(f"{key}={','.join(value)}")
        else:
            out.append(f"{key}={value}")
    return out


def test_make_hash() -> None:
    assert make_hash("x") == make_hash("x") != make_hash("y")
    assert HASH_RE.match(make_hash("x"))
    assert HASH_RE.match(SynthSpec("zlib", "1.3").dag_hash)
    assert SynthSpec("zlib", "1.3").dag_hash != SynthSpec("zlib", "1.3.1").dag_hash
    assert SynthSpec("zlib", "1.3", stacks=("e4s",)).dag_hash == SynthSpec("zlib", "1.3").dag_hash


def test_build_is_deterministic(tmp_path: Path) -> None:
    first = build_mirror(tmp_path / "a", _refs())
    second = build_mirror(tmp_path / "b", _refs())
    assert first == second
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")


def test_discovery_document(mirror: tuple[Path, dict[str, list[dict[str, str]]]]) -> None:
    root, discovery = mirror
    assert json.loads((root / "cache_spack_io_index.json").read_bytes()) == discovery
    assert list(discovery) == ["develop", "develop-2025-01-05", "v0.23.0", "v0.21.0"]
    for ref, entries in discovery.items():
        labels = [e["label"] for e in entries]
        assert labels[0] == "root" and labels[1:] == sorted(labels[1:])
        for entry in entries:
            prefix = ref if entry["label"] == "root" else f"{ref}/{entry['label']}"
            assert entry["url"].startswith(f"s3://spack-binaries/{prefix}/")
            assert _local(root, entry["url"]).is_file() == (entry["label"] != "gone")
    assert "gone" in [e["label"] for e in discovery["develop"]]


def test_v2_hash_sidecar(mirror: tuple[Path, dict[str, list[dict[str, str]]]]) -> None:
    root, discovery = mirror
    indexes = sorted(root.rglob("build_cache/index.json"))
    assert len(indexes) == 1 + 3 + 1 + 2
    for index in indexes:
        sidecar = index.with_name("index.json.hash").read_bytes()
        assert SHA_RE.match(sidecar.decode()) and not sidecar.endswith(b"\n")
        assert sidecar.decode() == hashlib.sha256(index.read_bytes()).hexdigest()
    assert discovery["v0.23.0"][0]["url"] == "s3://spack-binaries/v0.23.0/build_cache/index.json"


def test_v3_blob_and_manifest(mirror: tuple[Path, dict[str, list[dict[str, str]]]]) -> None:
    root, discovery = mirror
    for ref, version in (("develop", 8), ("v0.21.0", 6)):
        for entry in discovery[ref]:
            if entry["label"] == "gone":
                continue
            blob = _local(root, entry["url"])
            data = blob.read_bytes()
            checksum = hashlib.sha256(data).hexdigest()
            assert blob.name == checksum and blob.parent.name == checksum[:2]
            assert blob.parent.parent.as_posix().endswith("blobs/sha256")
            base = blob.parents[3]
            manifest = json.loads((base / "v3/manifests/index/index.manifest.json").read_bytes())
            assert manifest == {
                "version": 3,
                "data": [
                    {
                        "contentLength": len(data),
                        "mediaType": f"application/vnd.spack.db.v{version}+json",
                        "compression": "none",
                        "checksumAlgorithm": "sha256",
                        "checksum": checksum,
                    }
                ],
            }
            assert json.loads(data)["database"]["version"] == str(version)
    assert not list(root.glob("develop-2025-01-05/**/blobs"))


def test_ref_binaries_in_top_level_cache(tmp_path: Path) -> None:
    specs = tuple(generate_specs(5, 3, stacks=STACKS[:2]))
    dropped = specs[1].dag_hash
    ref = SynthRef("develop", specs, layout="v3", binaries=True, without_tarball=(dropped,))
    build_mirror(tmp_path, [ref])
    manifests = sorted((tmp_path / "develop/v3/manifests/spec").glob("*/*.spec.manifest.json"))
    assert len(manifests) == len(specs)
    assert not list(tmp_path.glob("develop/*/v3/manifests/spec"))  # none in a stack's cache
    lost = []
    for manifest in manifests:
        tarball, spec_file = json.loads(manifest.read_bytes())["data"]
        assert tarball["mediaType"] == "application/vnd.spack.install.v2.tar+gzip"
        sha = tarball["checksum"]
        if not (tmp_path / "develop/blobs/sha256" / sha[:2] / sha).is_file():
            lost.append(manifest.name)
        sha = spec_file["checksum"]
        assert (tmp_path / "develop/blobs/sha256" / sha[:2] / sha).is_file()
    assert lost == [f"{specs[1].name}-{specs[1].version}-{dropped}.spec.manifest.json"]
    with pytest.raises(ValueError, match="v3 feature"):
        build_mirror(tmp_path / "v2", [SynthRef("old", specs, binaries=True)])
    with pytest.raises(ValueError, match="names no spec"):
        build_mirror(
            tmp_path / "x",
            [SynthRef("x", specs, layout="v3", binaries=True, without_tarball=("a" * 32,))],
        )


def test_index_document_shape() -> None:
    specs = generate_specs(3, 10, stacks=STACKS, annotation_fraction=0.3)
    for db in (6, 7, 8):
        data = index_document(specs, db)
        assert data == index_document(specs, db)
        doc = json.loads(data)
        assert list(doc) == ["database"] and doc["database"]["version"] == str(db)
        installs = doc["database"]["installs"]
        assert list(installs) == sorted(installs)
        in_cache = {h for h, r in installs.items() if r["in_buildcache"]}
        assert in_cache == {s.dag_hash for s in specs}
        referenced = [
            d["hash"] for r in installs.values() for d in r["spec"].get("dependencies", [])
        ]
        for key, record in installs.items():
            node = record["spec"]
            assert HASH_RE.match(key) and node["hash"] == key
            assert record["ref_count"] == referenced.count(key)
            assert node["namespace"] == "builtin" and HASH_RE.match(node["package_hash"])
            assert set(node["arch"]) == {"platform", "platform_os", "target"}
            params = node["parameters"]
            assert list(params) == sorted(params)
            assert all(params[flag] == [] for flag in FLAGS)
            assert ("compiler" in node) == (db < 8)
        assert set(referenced) <= set(installs)
    with pytest.raises(ValueError, match="version 5"):
        index_document(specs, 5)


def test_parameters_render_variants() -> None:
    patch = "ab" * 32
    spec = SynthSpec(
        "hdf5",
        "1.14.5",
        variants=(("shared", True), ("debug", False), ("api", "v114"), ("libs", ("shared", "a"))),
        patches=(patch,),
    )
    node = json.loads(index_document([spec], 8))["database"]["installs"][spec.dag_hash]["spec"]
    assert node["parameters"]["libs"] == ["shared", "a"]
    assert node["parameters"]["patches"] == [patch]
    assert _render(node["parameters"]) == [
        "api=v114",
        "~debug",
        "libs=shared,a",
        "patches=abababa",
        "+shared",
    ]
    with pytest.raises(ValueError, match="reserved"):
        index_document([SynthSpec("x", "1", variants=(("cflags", "-O2"),))], 8)


def test_db8_compiler_edges() -> None:
    target = {"name": "zen3", "vendor": "AuthenticAMD", "features": [], "generation": 0}
    specs = [
        SynthSpec("zlib", "1.3", target=target),
        SynthSpec(
            "py-six", "1.16.0", os="sequoia", platform="darwin", compiler="apple-clang@16.0.0"
        ),
        SynthSpec("py-pip", "24.0", compiler=None),
        SynthSpec("hdf5", "1.14.5", compiler="gcc@11.4.0", compiler_via_annotation=True),
    ]
    installs = _installs(index_document(specs, 8))
    nodes = {r["spec"]["name"]: r["spec"] for r in installs.values() if r["in_buildcache"]}
    for spec in specs:
        node = nodes[spec.name]
        assert "compiler" not in node
        edges = {d["name"]: d for d in node.get("dependencies", [])}
        c_edges = [d for d in edges.values() if "c" in d["parameters"]["virtuals"]]
        if spec.compiler is None or spec.compiler_via_annotation:
            assert c_edges == []
        else:
            (edge,) = c_edges
            compiler = installs[edge["hash"]]
            assert not compiler["in_buildcache"] and compiler["spec"]["external"]["path"] == "/usr"
            assert f"{compiler['spec']['name']}@{compiler['spec']['version']}" == spec.compiler
            assert compiler["spec"]["arch"] == node["arch"]
            assert edge["parameters"] == {"deptypes": ["build"], "virtuals": ["c", "cxx"]}
            assert edges["compiler-wrapper"]["parameters"]["deptypes"] == ["build"]
        assert ("gcc-runtime" in edges) == (spec.compiler or "").startswith("gcc@")
        assert ("python" in edges) == spec.name.startswith("py-")
        if spec.compiler_via_annotation:
            expected = {"original_specfile_version": 4, "compiler": "gcc@=11.4.0"}
            assert node["annotations"] == expected
        else:
            assert "annotations" not in node
    assert nodes["zlib"]["arch"]["target"] == target
    # one shared compiler record per (compiler, arch)
    twin = [SynthSpec("zlib", "1.3"), SynthSpec("bzip2", "1.0.8")]
    names = [r["spec"]["name"] for r in _installs(index_document(twin, 8)).values()]
    assert sorted(names) == ["bzip2", "compiler-wrapper", "gcc", "gcc-runtime", "zlib"]


def test_db6_and_db7_dependencies() -> None:
    specs = [SynthSpec("py-six", "1.16.0"), SynthSpec("py-pip", "24.0", compiler=None)]
    for db in (6, 7):
        installs = _installs(index_document(specs, db))
        roots = {r["spec"]["name"]: r["spec"] for r in installs.values() if r["in_buildcache"]}
        assert roots["py-six"]["compiler"] == {"name": "gcc", "version": "13.2.0"}
        assert roots["py-pip"]["compiler"] == {"name": "gcc", "version": "13.2.0"}  # fallback
        deps = {d["name"]: d for d in roots["py-six"]["dependencies"]}
        assert set(deps) == {"gcc-runtime", "python"}
        assert [d["name"] for d in roots["py-pip"]["dependencies"]] == ["python"]
        for dep in deps.values():
            assert dep["hash"] in installs and not installs[dep["hash"]]["in_buildcache"]
            if db == 6:
                assert set(dep) == {"name", "hash", "type"} and "parameters" not in dep
            else:
                assert set(dep) == {"name", "hash", "parameters"}
                assert set(dep["parameters"]) == {"deptypes", "virtuals"}
        deptypes = deps["python"]["type"] if db == 6 else deps["python"]["parameters"]["deptypes"]
        assert deptypes == ["build", "run"]


def test_stack_index_holds_its_specs_and_their_deps(
    mirror: tuple[Path, dict[str, list[dict[str, str]]]],
) -> None:
    root, discovery = mirror
    for ref in _refs():
        indexes = {
            e["label"]: _installs(_local(root, e["url"]).read_bytes())
            for e in discovery[ref.name]
            if e["label"] != "gone"
        }
        full = indexes.pop("root")
        assert {h for h, r in full.items() if r["in_buildcache"]} == {s.dag_hash for s in ref.specs}
        assert set(indexes) == {label for s in ref.specs for label in s.stacks}
        for label, installs in indexes.items():
            members = {s.dag_hash for s in ref.specs if label in s.stacks}
            assert {h for h, r in installs.items() if r["in_buildcache"]} == members
            deps = {d["hash"] for h in members for d in full[h]["spec"].get("dependencies", [])}
            assert set(installs) == members | deps
            for key, record in installs.items():
                if key in members:
                    assert record == full[key]
                else:
                    assert record["spec"] == full[key]["spec"] and not record["in_buildcache"]


def test_duplicate_hash_and_bad_names_rejected(tmp_path: Path) -> None:
    spec = SynthSpec("zlib", "1.3")
    with pytest.raises(ValueError, match="duplicate"):
        build_mirror(tmp_path, [SynthRef("develop", (spec, spec))])
    with pytest.raises(ValueError, match="stack"):
        build_mirror(tmp_path, [SynthRef("develop", (SynthSpec("a", "1", stacks=("root",)),))])
    with pytest.raises(ValueError, match="layout"):
        build_mirror(tmp_path, [SynthRef("develop", (spec,), layout="v9")])


def test_generate_specs() -> None:
    specs = generate_specs(5, 80, stacks=STACKS, exclude={"zlib"}, annotation_fraction=0.5)
    assert specs == generate_specs(5, 80, stacks=STACKS, exclude={"zlib"}, annotation_fraction=0.5)
    assert specs != generate_specs(6, 80, stacks=STACKS, exclude={"zlib"})
    names = {s.name for s in specs}
    assert len(names) == 80 and "zlib" not in names
    assert len({s.dag_hash for s in specs}) == len(specs)
    assert all(set(s.stacks) <= set(STACKS) and list(s.stacks) == sorted(s.stacks) for s in specs)
    assert all(s.compiler is not None or s.name.startswith("py-") for s in specs)
    assert any(s.version.startswith("git.") for s in specs)
    assert any(isinstance(s.target, dict) for s in specs)
    assert any(s.patches for s in specs) and any(s.compiler_via_annotation for s in specs)
    assert {s.platform for s in specs} == {"linux", "darwin"}
    assert all(SHA_RE.match(p) for s in specs for p in s.patches)
    strict = generate_specs(5, 80, allow_no_compiler=False)
    assert all(s.compiler is not None and not s.compiler_via_annotation for s in strict)


def test_page_variant_parsing() -> None:
    page = (
        '---\ntitle: "x"\nlayout: cache\ncategories: [package, develop]\nmeta: {}\n'
        'spec_details: [{"compiler": "gcc@13.2.0", "hash": "' + "a" * 32 + '", "os": "o", '
        '"platform": "linux", "size": "-", "stacks": ["e4s", "root"], "target": "aarch64", '
        '"variants": ["+a", "~b", "k=v", "l=1,2", "m:=3", "patches=abc1234,def5678"], '
        '"versions": ["git.main=1.0"]}]\n---'
    )
    package, ref, (spec,) = page_to_specs(page)
    assert (package, ref, spec.version, spec.stacks) == ("x", "develop", "git.main=1.0", ("e4s",))
    assert spec.variants == (
        ("a", True),
        ("b", False),
        ("k", "v"),
        ("l", ("1", "2")),
        ("m", ("3",)),
    )
    assert [p[:7] for p in spec.patches] == ["abc1234", "def5678"]
    assert all(SHA_RE.match(p) for p in spec.patches)


@pytest.mark.parametrize("page", PAGES, ids=[p.parent.name for p in PAGES])
@pytest.mark.parametrize("db", [7, 8])
def test_reference_pages_round_trip(page: Path, db: int, tmp_path: Path) -> None:
    text = page.read_text(encoding="utf-8")
    package, ref, specs = page_to_specs(text)
    details = json.loads(text.split("spec_details: ", 1)[1].split("\n", 1)[0])
    assert package == page.parent.name and ref == page.parent.parent.name
    assert [s.dag_hash for s in specs] == [d["hash"] for d in details]
    discovery = build_mirror(tmp_path, [SynthRef(ref, tuple(specs), db_version=db)])
    indexes = {
        e["label"]: _installs(_local(tmp_path, e["url"]).read_bytes()) for e in discovery[ref]
    }
    full = indexes["root"]
    for detail in details:
        node = full[detail["hash"]]["spec"]
        assert full[detail["hash"]]["in_buildcache"]
        assert (
            sorted(label for label, inst in indexes.items() if detail["hash"] in inst)
            == (detail["stacks"])
        )
        assert _render(node["parameters"]) == detail["variants"]
        assert [node["version"]] == detail["versions"]
        arch = node["arch"]
        assert (arch["platform"], arch["platform_os"], arch["target"]) == (
            detail["platform"],
            detail["os"],
            detail["target"],
        )
        if db == 7:
            compiler = node["compiler"]
        else:
            edge = next(d for d in node["dependencies"] if "c" in d["parameters"]["virtuals"])
            compiler = full[edge["hash"]]["spec"]
        assert f"{compiler['name']}@{compiler['version']}" == detail["compiler"]


def test_committed_sample_matches_regeneration(tmp_path: Path) -> None:
    out, plain = tmp_path / "mirror", tmp_path / "site-cache"
    subprocess.run(
        [sys.executable, SAMPLE / "generate.py", "--out", out, "--plain-out", plain],
        check=True,
        capture_output=True,
    )
    assert _tree(plain) == _tree(SAMPLE / "site-cache")
    fresh = _tree(out)
    assert sorted(fresh) == sorted(_tree(SAMPLE / "mirror"))
    assert fresh == _tree(SAMPLE / "mirror")
    assert sum(len(data) for data in fresh.values()) < 1_000_000
    discovery = json.loads(fresh["cache_spack_io_index.json"])
    assert list(discovery) == ["develop", "develop-2025-04-20", "v0.23.1"]
