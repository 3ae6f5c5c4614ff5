"""``crawler audit`` (issue 41): a published branch's binaries looked for on its mirror, in a
folder, over HTTP and in S3 (moto's server on loopback), as the command line runs it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from bench.synth import build_plain_cache, generate_specs, write_binaries, write_keys
from crawler.cli.command import main_async

from .conftest import ServeMirror, fast_config
from .signing import SigningKey, needs_gpg
from .test_s3 import KEY_ID, SECRET, make_bucket, s3_settings, write_config

SPECS = generate_specs(41, 6)


def cache(tmp_path: Path) -> Path:
    """A v3 cache with a binary for each spec; the sync names its branch ``spack-cache``."""
    folder = tmp_path / "site" / "spack-cache"
    build_plain_cache(folder, SPECS, binaries=True)
    return folder


def prune_one(folder: Path, kind: str) -> str:
    """Remove one spec's tarball (``tarball``) or manifest (``manifest``); its hash."""
    spec = SPECS[2]
    stem = f"{spec.name}-{spec.version.replace('/', '_')}-{spec.dag_hash}"
    manifest = folder / "v3/manifests/spec" / spec.name / f"{stem}.spec.manifest.json"
    if kind == "manifest":
        manifest.unlink()
    else:
        [tarball] = [
            b for b in json.loads(manifest.read_bytes())["data"] if "install" in b["mediaType"]
        ]
        (folder / "blobs/sha256" / tarball["checksum"][:2] / tarball["checksum"]).unlink()
    return spec.dag_hash


async def sync_then_audit(
    tmp_path: Path, mirror: str, *extra: str, prune: Callable[[], object] | None = None
) -> int:
    """Sync ``mirror`` (its branch ``spack-cache``), prune as asked, audit: its exit code."""
    output = tmp_path / "out"
    config = write_config(tmp_path / "crawler.yaml", fast_config(mirror, output, **_s3(extra)))
    sync = ["sync", "--config", str(config), "--branch", "spack-cache", "-q"]
    assert await main_async(sync) == 0
    if prune:
        prune()
    audit = ["audit", str(output / "spack-cache"), "--config", str(config), *_flags(extra)]
    return await main_async(audit)


def _s3(extra: tuple[str, ...]) -> dict[str, object]:
    return {"s3": s3_settings(extra[extra.index("--s3") + 1])} if "--s3" in extra else {}


def _flags(extra: tuple[str, ...]) -> list[str]:
    if "--s3" in extra:
        at = extra.index("--s3")
        return [*extra[:at], *extra[at + 2 :]]
    return list(extra)


async def test_an_audit_of_a_folder_names_a_missing_tarball(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = cache(tmp_path)
    code = await sync_then_audit(tmp_path, str(folder))
    assert code == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert f"{len(SPECS)} binaries checked: every binary is there" in err
    gone = prune_one(folder, "tarball")
    output = tmp_path / "out" / "spack-cache"
    assert (
        await main_async(["audit", str(output), "--config", str(tmp_path / "crawler.yaml")]) == 17
    )
    out, err = capsys.readouterr()
    [line] = out.splitlines()
    assert f"/{gone}\troot\ttarball missing\t{folder.as_uri()}/v3/manifests/spec/" in line
    assert "1 finding" in err
    assert await main_async(["audit", str(output), "--json", "-q", "--mirror", str(folder)]) == 17
    verdict = json.loads(capsys.readouterr().out)
    assert (verdict["ok"], verdict["checked"], verdict["not_checked"]) == (False, len(SPECS), 0)
    [finding] = verdict["findings"]
    assert (finding["hash"], finding["stack"], finding["finding"]) == (
        gone,
        "root",
        "tarball missing",
    )
    assert finding["tarball"].startswith(folder.as_uri() + "/blobs/sha256/")
    # --stack narrows: no stack is so named, nothing is checked.
    assert await main_async(["audit", str(output), "--stack", "e4s*", "-q"]) == 0


async def test_an_audit_over_http_names_a_missing_manifest(
    tmp_path: Path, mirror_server: ServeMirror, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = cache(tmp_path)
    server = await mirror_server(tmp_path / "site", head=True)

    def prune() -> None:  # after the sync, which read each manifest once too
        prune_one(folder, "manifest")
        server.requests.clear()

    code = await sync_then_audit(tmp_path, f"{server.url}/spack-cache", prune=prune)
    assert code == 17
    [line] = capsys.readouterr().out.splitlines()
    assert f"\troot\tmanifest missing\t{server.url}/spack-cache/v3/manifests/spec/" in line
    heads = [path for path, _ in server.requests if "/blobs/" in path]
    # Each tarball but the one whose manifest is gone looked for once (HEAD), not downloaded.
    assert len(heads) == len(SPECS) - 1


@pytest.mark.slow  # about 1.2 s: a cache uploaded to moto, synced and audited
async def test_an_audit_in_s3_names_a_missing_tarball(
    tmp_path: Path,
    moto_endpoint: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("MIRROR_KEY_ID", KEY_ID)  # the variables the config names
    monkeypatch.setenv("MIRROR_SECRET", SECRET)
    folder = cache(tmp_path)
    gone = prune_one(folder, "tarball")
    bucket = await make_bucket(moto_endpoint, tmp_path / "site")
    code = await sync_then_audit(tmp_path, f"s3://{bucket}/spack-cache", "--s3", moto_endpoint)
    assert code == 17
    [line] = capsys.readouterr().out.splitlines()
    assert f"/{gone}\troot\ttarball missing\ts3://{bucket}/spack-cache/v3/manifests/spec/" in line


async def test_an_audit_of_no_branch_folder_is_exit_11(tmp_path: Path) -> None:
    assert await main_async(["audit", str(tmp_path), "--mirror", str(tmp_path)]) == 11


@needs_gpg
async def test_an_audit_of_a_signed_cache_names_a_bad_signature(
    tmp_path: Path,
    mirror_server: ServeMirror,
    signing_keys: tuple[SigningKey, SigningKey],
    capsys: pytest.CaptureFixture[str],
) -> None:
    own, _ = signing_keys
    folder = tmp_path / "site" / "spack-cache"
    build_plain_cache(folder, SPECS[:4], binaries=False)
    write_binaries(folder, SPECS[:4], sign=own.clearsign)
    write_keys(folder, {own.fingerprint: own.public})
    server = await mirror_server(tmp_path / "site", head=True)
    spec = SPECS[1]

    def tamper() -> None:
        [file] = folder.glob(f"v3/manifests/spec/*/*-{spec.dag_hash}.spec.manifest.json")
        file.write_bytes(file.read_bytes().replace(b'"version": 3', b'"version":  3'))

    code = await sync_then_audit(tmp_path, f"{server.url}/spack-cache", prune=tamper)
    assert code == 17
    [line] = capsys.readouterr().out.splitlines()
    assert f"/{spec.dag_hash}\troot\tbad signature\t" in line
    report = json.loads((tmp_path / "out" / "spack-cache" / "report.json").read_bytes())
    assert report["binary_findings"] == []  # the sync read them before: all signed then
    links = json.loads((tmp_path / "out" / "spack-cache" / "links.json").read_bytes())
    assert {link["signer"] for link in links["specs"].values()} == {own.fingerprint}
