"""The records of ``index.json`` schema 2 (issue 24): each spec's target family, and in
``links.json`` its dependencies and locations, from a real sync over loopback, checked against the
index records themselves, archspec and Spack's naming of spec files; ``crawler find --json``
gives them too; and schema 1 indexes still read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import archspec
import archspec.cpu
import pytest
import yaml

import crawler
from bench.synth import SynthRef, SynthSpec, build_mirror, generate_specs
from crawler.cli.command import main, main_async
from crawler.documents import PAGE_FIELDS

from .conftest import ServeMirror, fast_config
from .linkjson import resolved_specs
from .schema import assert_valid, assert_valid_index

STACKS = ("e4s", "ml")


def _specs() -> list[SynthSpec]:
    specs = generate_specs(24, 25, stacks=STACKS, annotation_fraction=0.2)
    return [
        *specs,
        SynthSpec("zen-app", "1.0", target="zen3", stacks=("e4s",)),
        SynthSpec("arm-app", "git.feature/x=2.0", target="neoverse_v2", stacks=("ml",)),
        SynthSpec("future-app", "1.0", target="zen99"),
    ]


async def _sync(tmp_path: Path, mirror: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The index.json and links.json of develop, synced from ``mirror``, schema-valid, the
    entries of links.json resolved."""
    out = tmp_path / "out"
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror, out)))
    assert await main_async(["sync", "--all", "--config", str(config), "-q"]) == 0
    assert_valid(out / "develop" / "links.json")
    # Its entries as a consumer of plain JSON resolves them (URLs and names in full).
    return assert_valid_index(out / "develop" / "index.json"), {
        "specs": resolved_specs(out / "develop")
    }


def _edges(root: Path, url: str, key: str) -> list[dict[str, Any]]:
    """A record's edges as its index states them: hash, name, types and the virtuals they
    provide (written only when there are some)."""
    index = root / url.removeprefix("s3://spack-binaries/")
    node = json.loads(index.read_bytes())["database"]["installs"][key]["spec"]
    edges = []
    for edge in node.get("dependencies", []):
        types = edge["parameters"]["deptypes"] if "parameters" in edge else edge["type"]
        virtuals = edge.get("parameters", {}).get("virtuals")
        edges.append({"hash": edge["hash"], "name": edge["name"], "type": sorted(types)})
        if virtuals:
            edges[-1]["virtuals"] = sorted(set(virtuals))
    return edges


def _spec_file(spec: dict[str, Any], name: str) -> str:
    """Spack's name of a v2 spec file (binary_distribution.tarball_name), written out here."""
    parts = [spec["platform"], spec["os"], spec["target"], spec["compiler"].replace("@", "-")]
    version = spec["versions"][0].replace("/", "_")
    return f"{'-'.join(parts)}-{name}-{version}-{spec['hash']}.spec.json.sig"


@pytest.mark.parametrize("layout", ["v2", "v3"])
@pytest.mark.parametrize("db", [6, 8])
async def test_each_spec_has_its_edges_family_and_locations(
    mirror_server: ServeMirror,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    layout: str,
    db: int,
) -> None:
    root = tmp_path / "mirror"
    specs = _specs()
    discovery = build_mirror(
        root, [SynthRef("develop", tuple(specs), db_version=db, layout=layout)]
    )
    server = await mirror_server(root)
    index, links_json = await _sync(tmp_path, server.url)
    specs_links = links_json["specs"]

    assert index["schema_version"] == 2
    urls = {entry["label"]: entry["url"] for entry in discovery["develop"]}
    caches = {
        label: server.url + "/" + url.removeprefix("s3://spack-binaries/").split("/build_cache/")[0]
        if layout == "v2"
        else server.url + "/" + url.removeprefix("s3://spack-binaries/").split("/blobs/")[0]
        for label, url in urls.items()
    }
    targets = archspec.cpu.TARGETS
    seen = []
    for name, package in index["packages"].items():
        for spec in package["spec_details"]:
            seen.append(spec["hash"])
            links = specs_links[spec["hash"]]
            assert links["dependencies"] == _edges(root, urls["root"], spec["hash"])
            known = targets.get(spec["target"])
            assert spec["family"] == (known.family.name if known else None)
            assert sorted(links["locations"]) == spec["stacks"]
            for label, url in links["locations"].items():
                version = spec["versions"][0].replace("/", "_")
                stem = f"{name}-{version}-{spec['hash']}"
                if layout == "v3":
                    path = f"v3/manifests/spec/{name}/{stem}.spec.manifest.json"
                else:
                    path = f"build_cache/{_spec_file(spec, name)}"
                assert url == f"{caches[label]}/{path}"
    assert sorted(seen) == list(specs_links) and len(seen) == len(specs)

    details = {p: package["spec_details"] for p, package in index["packages"].items()}
    assert [d["family"] for d in details["zen-app"]] == ["x86_64"]
    assert [d["family"] for d in details["arm-app"]] == ["aarch64"]
    [arm] = details["arm-app"]
    assert "git.feature_x=2.0" in specs_links[arm["hash"]]["locations"]["ml"]
    [zen] = details["zen-app"]
    assert any(edge["type"] for edge in specs_links[zen["hash"]]["dependencies"])
    # A target archspec does not know: no family, a warning, never a failure.
    assert [d["family"] for d in details["future-app"]] == [None]
    warned = [line for line in capsys.readouterr().err.splitlines() if "archspec" in line]
    assert len(warned) == 1, warned
    version = archspec.__version__
    assert warned[0].endswith(
        f"WARNING develop: targets unknown to archspec {version} have no family: zen99"
    )


async def test_the_pages_keep_the_reference_fields_only(tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = tmp_path / "c.yaml"
    mirror = Path(__file__).resolve().parent.parent / "sample" / "mirror"
    config.write_text(yaml.safe_dump(fast_config(str(mirror), out, formats=["json", "pages"])))
    assert await main_async(["sync", "--branch", "develop", "--config", str(config), "-q"]) == 0
    page = (out / "develop" / "pages" / "adios2" / "specs.md").read_text()
    details = json.loads(page.split("spec_details: ", 1)[1].rsplit("\n---", 1)[0])
    assert details and all(sorted(d) == sorted(PAGE_FIELDS) for d in details)


def test_an_index_of_schema_1_is_read_with_the_defaults_of_schema_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "develop"
    folder.mkdir()
    sample = Path(__file__).resolve().parent / "data" / "schema1-index.json"
    (folder / "index.json").write_bytes(sample.read_bytes())
    index = crawler.load_index(folder)
    assert index.schema_version == 1
    specs = [s for p in index.packages.values() for s in p.spec_details]
    assert specs and all(s.family is None for s in specs)
    assert not (folder / "links.json").exists()  # find --json reads it only for schema 2
    assert main(["find", "--in", str(folder), "--json", "--links"]) == 0
    assert "dependencies" not in capsys.readouterr().out
    found = crawler.find_specs(index, family="x86_64")  # from the targets, as before
    assert [m.spec.target for m in found] and all(
        archspec.cpu.TARGETS[m.spec.target].family.name == "x86_64" for m in found
    )


async def test_find_json_links_gives_each_match_its_links(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    site_cache = Path(__file__).resolve().parent.parent / "sample" / "site-cache"
    argv = ["sync", "--all", "--mirror", str(site_cache), "--output", str(out), "-q"]
    assert await main_async(argv) == 0
    index = json.loads((out / "site-cache" / "index.json").read_bytes())
    specs_links = resolved_specs(out / "site-cache")
    capsys.readouterr()
    assert await main_async(["find", "--in", str(out / "site-cache"), "--json", "--links"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(lines) == index["stats"]["specs"]
    for line in lines:
        links = specs_links[line["hash"]]
        assert (line["dependencies"], line["locations"]) == (
            links["dependencies"],
            links["locations"],
        )
