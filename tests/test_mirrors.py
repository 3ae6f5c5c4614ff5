"""Mirrors without a discovery document: plain build caches (v2, v3, views, manifests listing
several index blobs) found at ``--mirror``, and refs declared in the config (issue 23)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.synth import (
    SynthSpec,
    build_plain_cache,
    generate_specs,
    index_document,
    write_index_blobs,
)
from crawler.cli.command import main_async
from crawler.config import build_config
from crawler.decode.records import SUPPORTED_VERSIONS
from crawler.errors import ConfigError, IndexFormatError
from crawler.mirror.manifest import choose_index, unsigned

from .conftest import SAMPLE_MIRROR, ServeMirror, fast_config, tree_bytes

URL = "file:///m/v3/manifests/index/index.manifest.json"


@pytest.fixture(scope="module")
def specs() -> list[SynthSpec]:
    return generate_specs(23, 12, stacks=("e4s",))


def entry(db: int | str, checksum: str = "ab" * 32, **extra: object) -> dict[str, object]:
    media = db if isinstance(db, str) else f"application/vnd.spack.db.v{db}+json"
    return {
        "contentLength": 10,
        "mediaType": media,
        "compression": "none",
        "checksumAlgorithm": "sha256",
        "checksum": checksum,
        **extra,
    }


def manifest(*entries: dict[str, object]) -> bytes:
    return json.dumps({"version": 3, "data": list(entries)}).encode()


def newest(*versions: int) -> int:
    """The version the crawler should take of ``versions``: the newest it reads."""
    return max(v for v in versions if str(v) in SUPPORTED_VERSIONS)


def v9(data: bytes) -> bytes:
    """A v8 index as a v9 one (v9 nodes are v8's, ``provided_virtuals`` being optional)."""
    return data.replace(b'{"database":{"version":"8"', b'{"database":{"version":"9"', 1)


def run(tmp_path: Path, mirror: str, *args: str, **extra: object) -> list[str]:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror, tmp_path / "out", **extra)))
    return ["--config", str(config), *args]


async def crawl(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``crawler ARGV``: its exit code, stdout and stderr. The refs ``branches`` lists are
    compared without how each was found (the last column), which one test checks whole."""
    code = await main_async(list(argv))
    out, err = capsys.readouterr()
    if argv[0] == "branches":
        lines = [line.split("\t") for line in out.splitlines()]
        out = "".join("\t".join(cols[:2]) + "\n" for cols in lines)
    return code, out, err


def report(tmp_path: Path, branch: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "out" / branch / "report.json").read_bytes())
    return data


# --- manifests --------------------------------------------------------------------------------


def test_the_newest_readable_index_blob_is_taken_and_the_others_left() -> None:
    body = manifest(entry(8, "88" * 32), entry(9, "99" * 32), entry(7, "77" * 32), entry(99))
    chosen = choose_index(body, URL)
    take = newest(7, 8, 9)
    assert chosen.db_version == take
    assert chosen.checksum == f"{take}{take}" * 32
    assert chosen.path == f"blobs/sha256/{take}{take}/{chosen.checksum}"
    assert len(chosen.left) == 3 and chosen.media_type not in chosen.left
    assert "application/vnd.spack.db.v99+json" in chosen.left


def test_a_clear_signed_manifest_is_read_without_its_armour() -> None:
    text = manifest(entry(8, "12" * 32)).decode()
    signed = (
        "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\n"
        f"{text}\n- -----a dash-escaped line\n"
        "-----BEGIN PGP SIGNATURE-----\n\niQEzBAEBCgAdFiEE\n-----END PGP SIGNATURE-----\n"
    ).encode()
    assert unsigned(signed, URL).endswith(b"\n-----a dash-escaped line")
    signed = signed.replace(b"- -----a dash-escaped line\n", b"")
    assert choose_index(signed, URL).checksum == "12" * 32


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"<html>503</html>", "not valid JSON"),
        (b"-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA1\n\n{}", "clear-signed manifest without"),
        (b'{"version": 3, "data": {}}', "not a manifest: Expected `array`"),
        (manifest(), "lists no index blob (application/vnd.spack.db.vN+json): nothing"),
        (
            manifest(entry("application/vnd.spack.spec.v5+json")),
            "lists no index blob (application/vnd.spack.db.vN+json): "
            "application/vnd.spack.spec.v5+json",
        ),
        (manifest(entry(99), entry(5)), "only index blobs of Database versions 5, 99 ("),
        (manifest(entry(8, "AB" * 32)), "checksum 'ABAB"),
        (manifest(entry(8, checksumAlgorithm="md5")), "checksum algorithm 'md5' (not sha256)"),
        (manifest(entry(8, compression="zstd")), "compression 'zstd' (read: none, gzip)"),
        (b'{"version": 2, "data": []}', "manifest layout version 2 (this crawler reads 3)"),
    ],
)
def test_a_manifest_that_cannot_be_used_is_named_with_what_is_wrong(
    body: bytes, reason: str
) -> None:
    with pytest.raises(IndexFormatError) as caught:
        choose_index(body, URL)
    assert str(caught.value).startswith(f"bad document at {URL}: ")
    assert reason in str(caught.value)


# --- a plain cache at --mirror ----------------------------------------------------------------


async def test_a_local_v3_cache_gives_its_index_and_its_listed_views(
    tmp_path: Path, specs: list[SynthSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "spack-cache"
    build_plain_cache(cache, specs, views={"snapshot-1": specs[:4], "e4s-view": specs[4:9]})
    (cache / "v3" / "manifests" / "index" / "not-a-view").mkdir()  # no manifest: ignored
    argv = run(tmp_path, str(cache))

    assert await main_async(["branches", *argv]) == 0
    cache_url = cache.as_uri()
    assert capsys.readouterr().out.splitlines() == [
        f"e4s-view\troot\tv3 view 'e4s-view' of {cache_url}",
        f"snapshot-1\troot\tv3 view 'snapshot-1' of {cache_url}",
        f"spack-cache\troot\tindex of {cache_url}",
    ]

    code, _, err = await crawl(capsys, "sync", "--all", *argv)
    assert code == 0, err
    for branch, chosen in (("spack-cache", specs), ("snapshot-1", specs[:4])):
        index = json.loads((tmp_path / "out" / branch / "index.json").read_bytes())
        assert index["stats"]["specs"] == len(chosen)
        [source] = report(tmp_path, branch)["sources"]
        assert source["media_type"] == "application/vnd.spack.db.v8+json"
        assert source["media_types_left"] == []
        assert source["manifest"].endswith(
            "/index/index.manifest.json"
            if branch == "spack-cache"
            else f"/index/{branch}/index.manifest.json"
        )
        assert source["layout"] == "v3" and source["status"] == "fetched"


async def test_a_manifest_with_v8_and_v9_blobs_is_read_in_the_newest_version_read(
    tmp_path: Path, specs: list[SynthSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    data = index_document(specs, 8)
    write_index_blobs(cache, [(8, data), (9, v9(data))])
    code, _, err = await crawl(capsys, "sync", "--branch", "cache", *run(tmp_path, str(cache)))
    assert code == 0, err
    [source] = report(tmp_path, "cache")["sources"]
    take = newest(8, 9)
    assert source["db_version"] == str(take)
    assert source["media_type"] == f"application/vnd.spack.db.v{take}+json"
    assert source["media_types_left"] == [f"application/vnd.spack.db.v{17 - take}+json"]
    assert source["sha256"] == hashlib.sha256(data if take == 8 else v9(data)).hexdigest()


async def test_the_sample_site_cache_gives_its_v9_index_and_its_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The worked example of docs/mirrors.md: the committed plain cache, synced with --all."""
    cache = SAMPLE_MIRROR.parent / "site-cache"
    code, _, err = await crawl(capsys, "sync", "--all", *run(tmp_path, str(cache)))
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name[0] != ".") == [
        "site-cache",
        "stable",
    ]
    for ref, specs in (("site-cache", 19), ("stable", 10)):
        [source] = report(tmp_path, ref)["sources"]
        assert source["db_version"] == "9"
        assert source["media_types_left"] == ["application/vnd.spack.db.v8+json"]
        index = json.loads((tmp_path / "out" / ref / "index.json").read_bytes())
        assert index["stats"]["specs"] == specs


async def test_a_cache_served_over_http_with_views_named_in_the_config(
    mirror_server: ServeMirror,
    tmp_path: Path,
    specs: list[SynthSpec],
    capsys: pytest.CaptureFixture[str],
) -> None:
    build_plain_cache(tmp_path / "site" / "spack-cache", specs, views={"nightly": specs[:3]})
    server = await mirror_server(tmp_path / "site")
    mirror = f"{server.url}/spack-cache"
    argv = run(tmp_path, mirror)
    code, out, _ = await crawl(capsys, "branches", *argv)
    assert (code, out) == (0, "spack-cache\troot\n")  # HTTP cannot be listed: no view found

    argv = run(tmp_path, mirror, views=["nightly", "gone"])
    code, out, _ = await crawl(capsys, "branches", *argv)
    assert code == 0
    assert out.splitlines() == [
        "nightly\troot",
        "spack-cache\troot",
        f"gone\tUNUSABLE: view 'gone' not found: no {mirror}/v3/manifests/index/gone/"
        "index.manifest.json",
    ]
    code, _, err = await crawl(capsys, "sync", "--branch", "nightly", *argv)
    assert code == 0, err
    [source] = report(tmp_path, "nightly")["sources"]
    assert source["url"].startswith(f"{mirror}/blobs/sha256/")
    assert source["manifest"] == f"{mirror}/v3/manifests/index/nightly/index.manifest.json"


async def test_a_v2_cache_over_http_and_from_a_folder(
    mirror_server: ServeMirror,
    tmp_path: Path,
    specs: list[SynthSpec],
    capsys: pytest.CaptureFixture[str],
) -> None:
    build_plain_cache(tmp_path / "site" / "old", specs, layout="v2", db_versions=(7,))
    server = await mirror_server(tmp_path / "site")
    for mirror in (f"{server.url}/old", str(tmp_path / "site" / "old")):
        code, _, err = await crawl(capsys, "sync", "--all", *run(tmp_path, mirror))
        assert code in (0, 6), err
        [source] = report(tmp_path, "old")["sources"]
        assert source["layout"] == "v2" and source["db_version"] == "7"
        assert source["sidecar_matches"] is True
        assert "media_type" not in source and "manifest" not in source


async def test_a_mirror_naming_an_index_itself_is_that_cache(
    tmp_path: Path, specs: list[SynthSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    build_plain_cache(cache, specs[:5], views={"nightly": specs[:2]})
    build_plain_cache(tmp_path / "two", specs[:3], layout="v2")
    for mirror, expected in (
        (cache / "v3/manifests/index/nightly/index.manifest.json", "nightly\troot\n"),
        (cache / "v3/manifests/index/index.manifest.json", "cache\troot\n"),
        (tmp_path / "two" / "build_cache" / "index.json", "two\troot\n"),
    ):
        code, out, err = await crawl(capsys, "branches", *run(tmp_path, str(mirror)))
        assert (code, out) == (0, expected), err


async def test_a_discovery_document_wins_over_a_plain_cache(
    tmp_path: Path, specs: list[SynthSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    build_plain_cache(cache, specs)
    (cache / "cache_spack_io_index.json").write_text(
        json.dumps({"develop": [{"label": "root", "url": "s3://b/v3/manifests/x"}]})
    )
    code, out, _ = await crawl(capsys, "branches", *run(tmp_path, str(cache)))
    assert code == 0
    assert out.startswith("develop\tUNUSABLE: URL s3://b/v3/manifests/x of stack 'root' is")


# --- what cannot be used ----------------------------------------------------------------------


async def test_a_bad_top_level_manifest_fails_its_ref_and_leaves_its_output(
    tmp_path: Path, specs: list[SynthSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    build_plain_cache(cache, specs, views={"nightly": specs[:2]})
    argv = run(tmp_path, str(cache))
    assert (await crawl(capsys, "sync", "--all", *argv))[0] == 0
    published = tree_bytes(tmp_path / "out")
    top = cache / "v3" / "manifests" / "index" / "index.manifest.json"
    top.write_bytes(b"<html>not json</html>")
    url = f"file://{top}"

    code, out, _ = await crawl(capsys, "branches", *argv)
    assert code == 0
    assert out.splitlines() == [
        "nightly\troot",
        f"cache\tUNUSABLE: bad document at {url}: not valid JSON: JSON is malformed: "
        "invalid character (byte 0)",
    ]
    code, _, err = await crawl(capsys, "sync", "--branch", "cache", *argv)
    assert code == 4
    assert f"branch cache failed: bad document at {url}: not valid JSON" in err
    assert tree_bytes(tmp_path / "out") == published


async def test_a_view_listing_only_unreadable_versions_fails_that_view_alone(
    tmp_path: Path, specs: list[SynthSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    build_plain_cache(cache, specs)
    data = index_document(specs[:2], 8).replace(b'"version":"8"', b'"version":"99"')
    write_index_blobs(cache, [(99, data)], view="future")
    argv = run(tmp_path, str(cache))
    code, out, _ = await crawl(capsys, "branches", *argv)
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "cache\troot"
    assert lines[1].startswith("future\tUNUSABLE: bad document at file://")
    assert lines[1].endswith(
        "/future/index.manifest.json: the manifest lists only index blobs of Database versions "
        f"99 (this crawler reads {', '.join(sorted(SUPPORTED_VERSIONS, key=int))})"
    )
    code, _, err = await crawl(capsys, "sync", "--all", *argv)
    assert code == 0, err  # --all leaves an unusable ref out, with a warning
    assert "future: unusable" in err


async def test_a_listed_view_whose_name_is_no_safe_folder_name_is_refused(
    tmp_path: Path, specs: list[SynthSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    build_plain_cache(cache, specs, views={"-x": specs[:1]})
    code, out, _ = await crawl(capsys, "branches", *run(tmp_path, str(cache)))
    assert code == 0
    assert out.splitlines() == [
        "cache\troot",
        "-x\tUNUSABLE: view name '-x' is not a safe folder name",
    ]


async def test_a_cache_with_no_index_at_all_is_an_unusable_mirror(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty" / "v3" / "manifests" / "index" / "not-a-view").mkdir(parents=True)
    argv = run(tmp_path, str(tmp_path / "empty"), views=["gone"])
    code, _, err = await crawl(capsys, "branches", *argv)
    assert code == 3
    views = f"{(tmp_path / 'empty').as_uri()}/v3/manifests/index"
    assert (  # every place looked at, a view asked for among them
        f"\n  {views}/gone/index.manifest.json (view 'gone')"
        f"\n  {views}/not-a-view/index.manifest.json (view 'not-a-view')\n"
    ) in err


async def test_a_cache_whose_only_index_is_unusable_is_an_unusable_mirror_for_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_index_blobs(tmp_path / "cache", [(5, b"{}")])
    code, _, err = await crawl(capsys, "sync", "--all", *run(tmp_path, str(tmp_path / "cache")))
    assert code == 3
    assert f"bad document at {(tmp_path / 'cache').as_uri()}: no usable ref" in err


# --- refs declared in the config --------------------------------------------------------------


async def test_declared_refs_with_every_form_of_place(
    mirror_server: ServeMirror,
    tmp_path: Path,
    specs: list[SynthSpec],
    capsys: pytest.CaptureFixture[str],
) -> None:
    site = tmp_path / "site"
    e4s = [s for s in specs if "e4s" in s.stacks]
    build_plain_cache(site / "develop", specs, views={"nightly": specs[:3]})
    build_plain_cache(site / "develop" / "e4s", e4s, layout="v2")
    build_plain_cache(site / "release", specs[:6])
    server = await mirror_server(site)
    [checksum] = [p.name for p in (site / "release" / "blobs").rglob("*") if p.is_file()]
    refs = {
        "develop": {
            "root": "develop",  # relative: under the mirror (a folder here)
            "stacks": {
                "e4s": f"{server.url}/develop/e4s",  # a v2 cache root over HTTP
                "nightly": {"url": str(site / "develop"), "view": "nightly"},
                "gone": "develop/gone",  # nothing there: missing, as a pruned stack
            },
        },
        "release": {"root": f"{server.url}/release/blobs/sha256/{checksum[:2]}/{checksum}"},
        "manifest": {"root": f"{server.url}/release/v3/manifests/index/index.manifest.json"},
    }
    argv = run(tmp_path, str(site), refs=refs)
    code, out, _ = await crawl(capsys, "branches", *argv)
    assert code == 0
    assert out.splitlines() == [
        "develop\troot e4s gone nightly",
        "manifest\troot",
        "release\troot",
    ]
    code, _, err = await crawl(capsys, "sync", "--all", *argv)
    assert code == 0, err
    index = json.loads((tmp_path / "out" / "develop" / "index.json").read_bytes())
    status = {s["label"]: (s["layout"], s["status"]) for s in index["sources"]}
    assert status == {
        "root": ("v3", "ok"),
        "e4s": ("v2", "ok"),
        "nightly": ("v3", "ok"),
        "gone": ("v3", "missing"),
    }
    assert index["stats"]["specs"] == len(specs)
    for ref in ("release", "manifest"):
        index = json.loads((tmp_path / "out" / ref / "index.json").read_bytes())
        assert index["stats"]["specs"] == 6
    gone = next(s for s in report(tmp_path, "develop")["sources"] if s["label"] == "gone")
    assert gone["error"].endswith("/gone/v3/manifests/index/index.manifest.json: no such file")


async def test_a_declared_ref_whose_manifest_is_unusable_fails_that_ref(
    tmp_path: Path, specs: list[SynthSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    build_plain_cache(tmp_path / "m" / "a", specs)
    write_index_blobs(tmp_path / "m" / "b", [])
    refs = {"a": {"root": "a"}, "b": {"root": "a", "stacks": {"s": "b"}}}
    argv = run(tmp_path, str(tmp_path / "m"), refs=refs)
    code, out, _ = await crawl(capsys, "branches", *argv)
    assert code == 0
    assert out.splitlines()[0] == "a\troot"
    assert out.splitlines()[1].startswith("b\tUNUSABLE: refs.b.stacks.s: bad document at file://")
    assert out.endswith(
        "/b/v3/manifests/index/index.manifest.json: the manifest lists no "
        "index blob (application/vnd.spack.db.vN+json): nothing\n"
    )
    code, _, err = await crawl(capsys, "sync", "--branch", "b", *argv)
    assert code == 4 and "branch b failed: refs.b.stacks.s: bad document" in err


@pytest.mark.parametrize(
    ("settings", "key", "message"),
    [
        ({"refs": {"develop": {"stacks": {"e4s": "x"}}}}, "refs.develop.root", "missing required"),
        ({"refs": {"develop": {"root": ""}}}, "refs.develop.root", "must not be empty"),
        ({"refs": {"../up": {"root": "x"}}}, "refs.../up", "is not a safe folder name"),
        ({"refs": {"d": {"root": "x", "stacks": {"root": "y"}}}}, "refs.d.stacks.root", "'root'"),
        ({"refs": {"d": {"root": "ftp://h/x"}}}, "refs.d.root", "unsupported URL scheme 'ftp'"),
        ({"refs": {"d": {"root": {"url": "x", "view": "a/b"}}}}, "refs.d.root.view", "safe"),
        ({"refs": {"d": {"root": {"url": "x", "vue": "a"}}}}, "refs.d.root.vue", "unknown key"),
        ({"refs": {"d": {"root": "x\0y"}}}, "refs.d.root", "no NUL"),
        # a traceback (RuntimeError) when the run located it, as the mirror's is an error
        ({"refs": {"d": {"root": "~nobody-here/x"}}}, "refs.d.root", "cannot resolve"),
        ({"refs": {"d": {"root": "x", "stacks": {"s": "~nobody-here"}}}}, "refs.d.stacks.s", "~"),
        ({"refs": {"d": {"root": {"url": "~nobody-here/x"}}}}, "refs.d.root.url", "resolve"),
        ({"views": ["a\0b"]}, "views[0]", "is not a safe folder name"),
        ({"views": [".."]}, "views[0]", "is not a safe folder name"),
        ({"views": ["v"], "refs": {"d": {"root": "x"}}}, "views", "declare each view as a ref"),
    ],
)
def test_bad_declared_refs_and_views_are_config_errors(
    settings: dict[str, object], key: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        build_config(settings, "c.yaml")
    assert caught.value.key == key
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_a_declared_folder_behind_a_link_loop_is_a_config_error(
    tmp_path: Path, scheme: str
) -> None:
    """A path (not a file URL) behind a symbolic link loop was a traceback (RuntimeError)
    when the run located it."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    place = f"{scheme}{tmp_path / 'a' / 'x'}"
    with pytest.raises(ConfigError) as caught:
        build_config({"refs": {"d": {"root": place}}}, "c.yaml")
    assert caught.value.key == "refs.d.root"
    loop = str(tmp_path / "a" / "x")
    assert str(caught.value).endswith(f"cannot resolve {place!r}: Symlink loop from {loop!r}")
