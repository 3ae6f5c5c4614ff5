"""The sync reads each new spec's manifest once (issue 41): sizes in index.json, tarballs in
links.json, missing binaries in report.json and the metrics; a second push reads only the new
specs' manifests; ``--no-binaries`` reads none. Over a folder and HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.synth import build_plain_cache, generate_specs, write_binaries
from crawler.cli.command import main_async
from crawler.sync.binaries import store_folder

from .conftest import ServeMirror, fast_config
from .linkjson import resolved_entry
from .test_audit import prune_one
from .test_s3 import write_config

SPECS = generate_specs(41, 6)  # as test_audit's: prune_one removes the third spec's files


def published(output: Path, name: str) -> Any:
    return json.loads((output / "spack-cache" / name).read_bytes())


def sizes(output: Path) -> dict[str, str]:
    index = published(output, "index.json")
    return {d["hash"]: d["size"] for p in index["packages"].values() for d in p["spec_details"]}


async def sync(tmp_path: Path, mirror: str, *flags: str) -> int:
    config = write_config(
        tmp_path / "crawler.yaml",
        fast_config(
            mirror, tmp_path / "out", metrics=str(tmp_path / "metrics.prom"), mutable_refs=["*"]
        ),
    )
    return await main_async(
        ["sync", "--config", str(config), "--branch", "spack-cache", "-q", *flags]
    )


def tarball_size(folder: Path, spec_hash: str) -> int:
    [manifest] = folder.glob(f"v3/manifests/spec/*/*-{spec_hash}.spec.manifest.json")
    data = json.loads(manifest.read_bytes())["data"]
    return int(next(b["contentLength"] for b in data if "install" in b["mediaType"]))


async def test_a_sync_publishes_sizes_tarballs_and_missing_binaries(tmp_path: Path) -> None:
    folder = tmp_path / "site" / "spack-cache"
    build_plain_cache(folder, SPECS, binaries=True)
    gone = prune_one(folder, "tarball")
    assert await sync(tmp_path, str(folder)) == 0  # a finding, not a failure
    output = tmp_path / "out"
    found = sizes(output)
    assert found == {s.dag_hash: str(tarball_size(folder, s.dag_hash)) for s in SPECS}
    links = published(output, "links.json")
    assert links["caches"] == {"root": folder.as_uri()}  # stated once, not in every URL
    assert links["specs"][SPECS[0].dag_hash]["tarball"]["stack"] == "root"
    link = resolved_entry(links, SPECS[0].dag_hash)
    assert link["tarball"].startswith(f"{folder.as_uri()}/blobs/sha256/")
    assert link["locations"]["root"].endswith(".spec.manifest.json")
    assert "tarball" not in resolved_entry(links, gone)  # no link to what is not there
    report = published(output, "report.json")
    spec = SPECS[2]
    assert report["missing_binaries"] == [
        {
            "hash": gone,
            "name": spec.name,
            "version": spec.version,
            "stack": "root",
            "missing": "tarball",
        }
    ]
    assert (report["missing_binaries_total"], report["binary_findings_total"]) == (1, 0)
    assert (
        'crawler_missing_binaries{branch="spack-cache"} 1'
        in (tmp_path / "metrics.prom").read_text()
    )
    # The clean facts are kept; the missing one is not (looked at again next time).
    kept = json.loads((store_folder(output).path / "spack-cache.json").read_bytes())["specs"]
    assert set(kept) == {s.dag_hash for s in SPECS} - {gone}


async def test_a_second_push_reads_only_the_new_manifests(
    tmp_path: Path, mirror_server: ServeMirror
) -> None:
    folder = tmp_path / "site" / "spack-cache"
    first, second = SPECS[:10], SPECS[10:]
    build_plain_cache(folder, first, binaries=True)
    server = await mirror_server(tmp_path / "site", head=True)
    mirror = f"{server.url}/spack-cache"
    assert await sync(tmp_path, mirror) == 0

    def manifests_read() -> int:
        return sum(path.endswith(".spec.manifest.json") for path, _ in server.requests)

    assert manifests_read() == len(first)
    build_plain_cache(folder, SPECS, binaries=False)  # the second push: a new index...
    write_binaries(folder, second)  # ...and the new specs' binaries
    assert await sync(tmp_path, mirror) == 0
    assert manifests_read() == len(SPECS)  # each manifest read once, over both syncs
    assert all(size != "-" for size in sizes(tmp_path / "out").values())
    # Deleting what was kept only makes the next sync read them all again.
    (store_folder(tmp_path / "out").path / "spack-cache.json").unlink()
    build_plain_cache(folder, SPECS[1:], binaries=False)
    assert await sync(tmp_path, mirror) == 0
    assert manifests_read() == len(SPECS) + len(SPECS) - 1


async def test_no_binaries_reads_no_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "site" / "spack-cache"
    build_plain_cache(folder, SPECS, binaries=True)
    assert await sync(tmp_path, str(folder), "--no-binaries") == 0
    assert set(sizes(tmp_path / "out").values()) == {"-"}
    assert "tarball" not in published(tmp_path / "out", "links.json")["specs"][SPECS[0].dag_hash]
    assert not (store_folder(tmp_path / "out").path / "spack-cache.json").exists()


async def test_a_damaged_store_is_read_as_none(tmp_path: Path) -> None:
    folder = tmp_path / "site" / "spack-cache"
    build_plain_cache(folder, SPECS[:5], binaries=True)
    store = store_folder(tmp_path / "out").path / "spack-cache.json"
    store.parent.mkdir(parents=True)
    store.write_bytes(b'{"specs": {"abc": [1, 2]}} and more')
    assert await sync(tmp_path, str(folder)) == 0
    assert all(size != "-" for size in sizes(tmp_path / "out").values())
    assert len(json.loads(store.read_bytes())["specs"]) == 5  # written anew, whole


async def test_a_server_that_allows_no_head_is_asked_with_a_get(
    tmp_path: Path, mirror_server: ServeMirror
) -> None:
    folder = tmp_path / "site" / "spack-cache"
    build_plain_cache(folder, SPECS[:4], binaries=True)
    server = await mirror_server(tmp_path / "site")  # HEAD: 405
    assert await sync(tmp_path, f"{server.url}/spack-cache") == 0
    report = published(tmp_path / "out", "report.json")
    assert (report["missing_binaries"], report["binary_findings"]) == ([], [])
    assert all(size != "-" for size in sizes(tmp_path / "out").values())
