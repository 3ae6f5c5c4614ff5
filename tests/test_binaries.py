"""Spec manifests and their signatures (issue 41): each bad input named with its reason, each
verdict of a signed cache, in-process over caches in folders written as Spack's v3 layout."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from bench.synth import SynthSpec, write_binaries, write_keys
from crawler.config.checks import build_config
from crawler.errors import IndexFormatError
from crawler.mirror.binaries import BinaryFacts, Keyrings, look_up
from crawler.mirror.fetch import Fetcher
from crawler.mirror.signing import gpg_program
from crawler.mirror.specmanifest import read_spec_manifest

from .conftest import fast_config
from .signing import SigningKey, needs_gpg

URL = "file:///cache/v3/manifests/spec/zlib/zlib-1.3-abc.spec.manifest.json"
SHA = "0f" * 32
SPEC = SynthSpec("zlib", "1.3.1", hash="a" * 32)


def entry(**values: object) -> dict[str, object]:
    blob: dict[str, object] = {
        "contentLength": 1234,
        "mediaType": "application/vnd.spack.install.v2.tar+gzip",
        "compression": "gzip",
        "checksumAlgorithm": "sha256",
        "checksum": SHA,
    }
    blob.update(values)
    return blob


def manifest(*entries: dict[str, object]) -> bytes:
    return json.dumps({"version": 3, "data": list(entries)}).encode()


def test_a_spec_manifest_gives_its_tarball_and_size() -> None:
    spec = entry(mediaType="application/vnd.spack.spec.v5+json", checksum="1a" * 32)
    binary = read_spec_manifest(manifest(entry(), spec), URL)
    assert (binary.size, binary.tarball, binary.spec_blob) == (1234, SHA, "1a" * 32)
    assert binary.tarball_path == f"blobs/sha256/0f/{SHA}"
    assert not binary.signed


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>not found</html>", "not valid JSON"),
        (b'{"version": 3, "data": {}}', "not a manifest: Expected `array`"),
        (manifest(entry(mediaType="application/x-other")), "lists no tarball"),
        (manifest(entry(contentLength=-1)), "contentLength -1 is no binary's size"),
        (manifest(entry(contentLength=10**15)), "is no binary's size"),
        (manifest(entry(contentLength=None)), "tarball: no contentLength"),
        (manifest(entry(checksum="zz" * 32)), "is no sha256 in hex"),
        (manifest(entry(checksumAlgorithm="md5")), "checksum algorithm 'md5'"),
        (b"-----BEGIN PGP SIGNED MESSAGE-----\n\ngarbage", "without its parts"),
        (
            b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\nnot json\n"
            b"-----BEGIN PGP SIGNATURE-----\nxx\n-----END PGP SIGNATURE-----\n",
            "not valid JSON",
        ),
    ],
)
def test_a_bad_spec_manifest_is_named_with_its_reason(body: bytes, reason: str) -> None:
    with pytest.raises(IndexFormatError) as caught:
        read_spec_manifest(body, URL)
    assert caught.value.url == URL
    assert reason in caught.value.reason


def cache_with(tmp_path: Path, sign: SigningKey | None = None, keys: list[SigningKey] = ()) -> Path:  # type: ignore[assignment]
    cache = tmp_path / "cache"
    write_binaries(cache, [SPEC], sign=sign.clearsign if sign else None)
    if keys:
        write_keys(cache, {k.fingerprint: k.public for k in keys})
    return cache


def manifest_url(cache: Path) -> str:
    return f"{cache.as_uri()}/v3/manifests/spec/zlib/zlib-1.3.1-{SPEC.dag_hash}.spec.manifest.json"


async def facts_of(cache: Path, gpg: str | None) -> BinaryFacts:
    config = build_config(fast_config(str(cache), cache.parent / "out"))
    async with Fetcher(config) as fetcher, Keyrings(fetcher, gpg) as keyrings:
        return await look_up(fetcher, manifest_url(cache), keyrings)


async def test_an_unsigned_cache_gives_sizes_and_no_signature(tmp_path: Path) -> None:
    facts = await facts_of(cache_with(tmp_path), gpg_program())
    assert facts.size is not None and facts.size > 0
    assert facts.tarball and facts.tarball.startswith((tmp_path / "cache").as_uri() + "/blobs/")
    assert (facts.signature, facts.finding) == (None, None)


async def test_a_missing_tarball_and_a_missing_manifest_are_facts(tmp_path: Path) -> None:
    cache = cache_with(tmp_path)
    facts = await facts_of(cache, None)
    assert facts.tarball is not None
    Path(facts.tarball.removeprefix("file://")).unlink()
    assert (await facts_of(cache, None)).finding == "tarball missing"
    Path(manifest_url(cache).removeprefix("file://")).unlink()
    assert (await facts_of(cache, None)).finding == "manifest missing"


@needs_gpg
async def test_a_signed_manifest_names_its_signer(
    tmp_path: Path, signing_keys: tuple[SigningKey, SigningKey]
) -> None:
    own, _ = signing_keys
    facts = await facts_of(cache_with(tmp_path, own, [own]), gpg_program())
    assert (facts.signature, facts.signer, facts.finding) == ("signed", own.fingerprint, None)


@needs_gpg
async def test_a_key_the_cache_does_not_publish_is_an_unknown_key(
    tmp_path: Path, signing_keys: tuple[SigningKey, SigningKey]
) -> None:
    own, stranger = signing_keys
    facts = await facts_of(cache_with(tmp_path, stranger, [own]), gpg_program())
    assert (facts.signature, facts.signer, facts.finding) == ("unknown key", None, "unknown key")


@needs_gpg
async def test_a_changed_text_is_a_bad_signature(
    tmp_path: Path, signing_keys: tuple[SigningKey, SigningKey]
) -> None:
    own, _ = signing_keys
    cache = cache_with(tmp_path, own, [own])
    file = Path(manifest_url(cache).removeprefix("file://"))
    file.write_bytes(file.read_bytes().replace(b'"contentLength": ', b'"contentLength": 9'))
    facts = await facts_of(cache, gpg_program())
    assert facts.finding == "bad signature"
    assert facts.size is not None and str(facts.size).startswith("9")  # still read, as Spack does


@needs_gpg
async def test_an_unsigned_manifest_of_a_signed_cache_is_a_finding(
    tmp_path: Path, signing_keys: tuple[SigningKey, SigningKey]
) -> None:
    own, _ = signing_keys
    facts = await facts_of(cache_with(tmp_path, None, [own]), gpg_program())
    assert facts.finding == "unsigned"


@needs_gpg
async def test_a_huge_key_manifest_is_refused_and_its_signatures_unknown(
    tmp_path: Path, signing_keys: tuple[SigningKey, SigningKey], caplog: pytest.LogCaptureFixture
) -> None:
    own, _ = signing_keys
    cache = cache_with(tmp_path, own, [own])
    (cache / "v3/manifests/key/keys.manifest.json").write_bytes(b" " * (1 << 20))
    facts = await facts_of(cache, gpg_program())
    assert facts.finding == "unknown key"
    assert "larger than the limit for a key manifest" in caplog.text


async def test_without_gpg_signatures_are_unchecked_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CRAWLER_GPG", str(tmp_path / "no-such-gpg"))
    assert gpg_program() is None
    cache = tmp_path / "cache"
    fake = (
        b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n%s\n-----BEGIN PGP SIGNATURE-----\n"
    )
    write_binaries(
        cache, [SPEC], sign=lambda text: fake % text + b"xx\n-----END PGP SIGNATURE-----\n"
    )
    with caplog.at_level(logging.WARNING):
        facts = await facts_of(cache, gpg_program())
    assert (facts.signature, facts.finding) == ("unchecked", None)
    assert facts.size is not None
    assert "no gpg program found" in caplog.text
