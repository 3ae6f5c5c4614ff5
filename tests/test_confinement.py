"""What a mirror's discovery document may make the crawler do, and leftovers of earlier runs.

A discovery document is the mirror's word, not the user's: its URLs may point at the mirror
itself (``s3://`` mapped onto it, or the same host, or under the local folder), and elsewhere
only through a rewrite the user configured. Its sidecars are used only when they are checksums.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async
from crawler.config import build_config
from crawler.mirror.discovery import Mirror, map_url

from .conftest import Fault, ServeMirror, fast_config, tree_bytes

SPECS = (SynthSpec("zlib", "1.3.1", stacks=("s1",)), SynthSpec("cmake", "3.30.5"))
BUCKET = "s3://spack-binaries/"


def _mirror(root: Path, **ref: Any) -> dict[str, list[dict[str, str]]]:
    return build_mirror(root, [SynthRef("develop", SPECS, **ref)])


def _point(root: Path, label: str, url: str) -> None:
    """Make the discovery document list ``url`` for ``label``."""
    path = root / "cache_spack_io_index.json"
    document = json.loads(path.read_text())
    for entry in document["develop"]:
        if entry["label"] == label:
            entry["url"] = url
    path.write_text(json.dumps(document))


def _copy_of_s1(root: Path, path: Path) -> Path:
    """A copy of the mirror's ``s1`` index at ``path`` (outside the mirror, say)."""
    path.parent.mkdir(parents=True)
    path.write_bytes((root / "develop" / "s1" / "build_cache" / "index.json").read_bytes())
    return path


def _config(tmp_path: Path, mirror: str, **extra: object) -> str:
    path = tmp_path / "crawler.yaml"
    path.write_text(yaml.safe_dump(fast_config(mirror, tmp_path / "out", **extra)))
    return str(path)


def _report(tmp_path: Path) -> dict[str, Any]:
    path = tmp_path / "out" / ".crawler" / "reports" / "develop.json"
    report: dict[str, Any] = json.loads(path.read_text())
    return report


async def test_a_remote_mirror_cannot_send_the_crawler_to_local_files(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    root = tmp_path / "mirror"
    _mirror(root)
    secret = _copy_of_s1(root, tmp_path / "secret" / "build_cache" / "index.json")
    _point(root, "s1", secret.as_uri())
    server = await mirror_server(root)

    code = await main_async(
        ["sync", "--branch", "develop", "--config", _config(tmp_path, server.url)]
    )

    assert code == 4
    error = _report(tmp_path)["error"]
    assert f"URL {secret.as_uri()} is not on the mirror {server.url}" in error
    assert not (tmp_path / "out" / "develop").exists()


async def test_a_remote_mirror_cannot_send_the_crawler_to_another_host(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    root = tmp_path / "mirror"
    _mirror(root)
    server = await mirror_server(root)
    elsewhere = server.url.replace("127.0.0.1", "localhost") + "/develop/s1/build_cache/index.json"
    _point(root, "s1", elsewhere)

    code = await main_async(
        ["sync", "--branch", "develop", "--config", _config(tmp_path, server.url)]
    )

    assert code == 4
    assert f"URL {elsewhere} is not on the mirror" in _report(tmp_path)["error"]
    assert server.hits("/develop/build_cache/index.json") == 0  # the branch was refused whole


async def test_a_configured_rewrite_may_point_elsewhere(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """The user, not the mirror, decides: a rewrite sends the stack to another address."""
    root = tmp_path / "mirror"
    _mirror(root)
    server = await mirror_server(root)
    other = server.url.replace("127.0.0.1", "localhost")
    _point(root, "s1", "s3://other-bucket/develop/s1/build_cache/index.json")
    rewrites = [{"prefix": "s3://other-bucket/", "replacement": other + "/"}]

    config = _config(tmp_path, server.url, rewrites=rewrites)
    code = await main_async(["sync", "--branch", "develop", "--config", config, "-q"])

    assert code == 0
    s1 = next(s for s in _report(tmp_path)["sources"] if s["label"] == "s1")
    assert (s1["status"], s1["location"]) == (
        "fetched",
        f"{other}/develop/s1/build_cache/index.json",
    )


async def test_a_local_mirror_only_reads_under_its_folder(tmp_path: Path) -> None:
    root = tmp_path / "mirror"
    _mirror(root)
    outside = _copy_of_s1(root, tmp_path / "outside" / "build_cache" / "index.json")
    inside = (root / "develop" / "s1" / "build_cache" / "index.json").as_uri()

    _point(root, "s1", inside)
    config = _config(tmp_path, str(root))
    assert await main_async(["sync", "--branch", "develop", "--config", config, "-q"]) == 0

    _point(root, "s1", outside.as_uri())
    assert await main_async(["sync", "--branch", "develop", "--config", config, "-q"]) == 4
    assert f"URL {outside.as_uri()} is not on the mirror" in _report(tmp_path)["error"]


async def test_a_sidecar_that_is_not_a_checksum_is_never_used(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """A 64-character sidecar that is not hex (here a path) is reported, not used as a key."""
    root = tmp_path / "mirror"
    _mirror(root)
    sidecar = root / "develop" / "s1" / "build_cache" / "index.json.hash"
    sidecar.write_text(("../" * 22)[:64])
    server = await mirror_server(root)
    server.etags = False  # the case where a sidecar would be trusted
    config = _config(tmp_path, server.url)
    argv = ["sync", "--branch", "develop", "--config", config, "-q"]

    assert await main_async(argv) == 0
    assert await main_async(argv) == 6

    s1 = next(s for s in _report(tmp_path)["sources"] if s["label"] == "s1")
    assert s1["sidecar_sha256"].startswith("invalid: ")
    assert s1["status"] == "fetched"  # downloaded again: the sidecar vouches for nothing


async def test_a_leftover_named_after_our_own_pid_does_not_block_a_publish(
    tmp_path: Path,
) -> None:
    """Pids are reused (pid 1 in every container): a folder a dead run left aside under the
    staging area, whatever pid it names, must not make a publish fail."""
    root = tmp_path / "mirror"
    _mirror(root)
    config = _config(tmp_path, str(root))
    argv = ["sync", "--branch", "develop", "--config", config, "-q"]
    assert await main_async(argv) == 0
    published = tree_bytes(tmp_path / "out" / "develop")
    leftover = tmp_path / "out" / ".crawler" / "staging" / f"old-develop.{os.getpid()}"
    (leftover / "pages").mkdir(parents=True)
    (leftover / "index.json").write_text("{}")

    build_mirror(root, [SynthRef("develop", (*SPECS, SynthSpec("curl", "8.10.1")))])
    assert await main_async(argv) == 0

    assert not leftover.exists()
    assert tree_bytes(tmp_path / "out" / "develop") != published
    assert b'"curl"' in (tmp_path / "out" / "develop" / "index.json").read_bytes()


async def test_a_symlinked_folder_inside_a_local_mirror_is_part_of_it(tmp_path: Path) -> None:
    """A stack folder that is a symlink to another disk is still the mirror's; ``..`` is not."""
    root = tmp_path / "mirror"
    _mirror(root)
    elsewhere = tmp_path / "other-disk" / "s1"
    elsewhere.parent.mkdir()
    (root / "develop" / "s1").rename(elsewhere)
    (root / "develop" / "s1").symlink_to(elsewhere)
    _point(root, "s1", (root / "develop" / "s1" / "build_cache" / "index.json").as_uri())
    config = _config(tmp_path, str(root))
    argv = ["sync", "--branch", "develop", "--config", config, "-q"]

    assert await main_async(argv) == 0

    escape = f"{root.as_uri()}/develop/../../other-disk/s1/build_cache/index.json"
    _point(root, "s1", escape)
    assert await main_async(argv) == 4
    assert "is not on the mirror" in _report(tmp_path)["error"]


async def test_a_redirect_is_not_followed_and_names_where_it_sent(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """A server's redirect could send the crawler anywhere, as a listed URL could not. The
    message names where, without the query (a presigned URL's signature, printed whole and
    published in report.json before)."""
    root = tmp_path / "mirror"
    _mirror(root)
    server = await mirror_server(root)
    argv = ["sync", "--branch", "develop", "--config", _config(tmp_path, server.url), "-q"]
    assert await main_async(argv) == 0
    published = tree_bytes(tmp_path / "out" / "develop")
    asked = server.hits("/develop/s1/build_cache/index.json")
    elsewhere = server.url.replace("127.0.0.1", "localhost") + "/elsewhere/index.json"
    signed = f"{elsewhere}?X-Amz-Credential=AKIA&X-Amz-Signature=s3cr3t"
    redirect = Fault(status=302, headers={"Location": signed})
    server.script("develop/s1/build_cache/index.json", redirect)

    code = await main_async(argv)

    assert code == 4
    s1 = next(s for s in _report(tmp_path)["sources"] if s["label"] == "s1")
    assert s1["status"] == "failed"
    assert f"HTTP 302 redirect to {elsewhere}?… not followed" in s1["error"]
    assert all(b"s3cr3t" not in data for data in tree_bytes(tmp_path / "out").values())
    assert server.hits("/elsewhere/index.json") == 0
    # Not retried either.
    assert server.hits("/develop/s1/build_cache/index.json") == asked + 1
    assert tree_bytes(tmp_path / "out" / "develop") == published


async def test_an_s3_url_cannot_climb_out_of_a_local_mirror(tmp_path: Path) -> None:
    root = tmp_path / "mirror"
    _mirror(root)
    # A readable index where the URL leads, so that only the check can stop it.
    _copy_of_s1(root, tmp_path / "outside" / "build_cache" / "index.json")
    url = "s3://spack-binaries/../outside/build_cache/index.json"
    _point(root, "s1", url)

    code = await main_async(
        ["sync", "--branch", "develop", "--config", _config(tmp_path, str(root))]
    )

    assert code == 4
    assert f"URL {url} leads out of the mirror" in _report(tmp_path)["error"]
    assert not (tmp_path / "out" / "develop").exists()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"develop\xff": []}', "a string is not valid UTF-8"),
        (
            b'{"develop": [{"label": "root", "url": "x", "x": '
            + b"[" * 100_000
            + b"]" * 100_000
            + b"}]}",
            "nested too deeply",
        ),
    ],
)
async def test_a_malformed_discovery_document_makes_the_mirror_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: bytes, reason: str
) -> None:
    root = tmp_path / "mirror"
    _mirror(root)
    argv = ["sync", "--branch", "develop", "--config", _config(tmp_path, str(root)), "-q"]
    assert await main_async(argv) == 0
    published = tree_bytes(tmp_path / "out" / "develop")
    capsys.readouterr()
    (root / "cache_spack_io_index.json").write_bytes(body)

    code = await main_async(argv)

    assert code == 3
    error = capsys.readouterr().err
    assert "error: mirror unusable" in error and reason in error
    assert "internal error" not in error
    assert tree_bytes(tmp_path / "out" / "develop") == published


async def test_an_index_nested_too_deeply_fails_with_its_reason(tmp_path: Path) -> None:
    root = tmp_path / "mirror"
    _mirror(root)
    argv = ["sync", "--branch", "develop", "--config", _config(tmp_path, str(root)), "-q"]
    assert await main_async(argv) == 0
    published = tree_bytes(tmp_path / "out" / "develop")
    index = root / "develop" / "build_cache" / "index.json"
    document = json.loads(index.read_text())
    record = next(iter(document["database"]["installs"].values()))
    record["spec"]["parameters"]["deep"] = "DEEP"
    deep = "[" * 100_000 + "]" * 100_000
    data = json.dumps(document).replace('"DEEP"', deep).encode()
    index.write_bytes(data)
    index.with_name("index.json.hash").write_text(hashlib.sha256(data).hexdigest())

    code = await main_async(argv)

    assert code == 4
    error = _report(tmp_path)["error"]
    assert "nested too deeply" in error and "internal error" not in error
    assert tree_bytes(tmp_path / "out" / "develop") == published


async def test_recovery_removes_only_what_runs_leave(tmp_path: Path) -> None:
    """Leftovers of a run that died are removed before the next one; anything else under
    ``.crawler/tmp`` and ``.crawler/staging`` (an output folder shared with other tools, a
    symbolic link to somewhere else) is not the crawler's to delete."""
    root = tmp_path / "mirror"
    _mirror(root)
    state = tmp_path / "out" / ".crawler"
    theirs = tmp_path / "theirs"
    (theirs / "keep").mkdir(parents=True)
    (theirs / "keep" / "data").write_text("precious")
    leftovers = [state / "tmp" / "4242", state / "staging" / "new-develop.0a1b2c3d"]
    foreign = [state / "tmp" / "session1", state / "staging" / "notes"]
    for folder in leftovers + foreign:
        folder.mkdir(parents=True)
        (folder / "file").write_text("x")
    (state / "tmp" / "4343").symlink_to(theirs / "keep")
    argv = ["sync", "--branch", "develop", "--config", _config(tmp_path, str(root)), "-q"]

    assert await main_async(argv) == 0

    assert [f.exists() for f in leftovers] == [False, False]
    assert [(f / "file").read_text() for f in foreign] == ["x", "x"]
    assert (theirs / "keep" / "data").read_text() == "precious"
    assert (state / "tmp" / "4343").is_symlink()


@pytest.mark.parametrize(
    ("url", "location"),
    [
        pytest.param("FILE:///m/a", "file:///m/a", id="scheme-in-capitals"),
        pytest.param("file:///m/A://b", "file:///m/A://b", id="a-later-colon-slashes"),
        pytest.param("s3:/Develop/i?v=a://b", "file:///m/Develop/i", id="no-scheme-before-it"),
    ],
)
def test_only_a_locations_scheme_is_lowercased(url: str, location: str) -> None:
    """Schemes are case-insensitive, paths are not: ``FILE://`` becomes ``file://``, and
    nothing after the scheme changes case."""
    config = build_config({"mirror": "file:///m"})
    assert map_url(url, Mirror.parse("file:///m"), config) == location


@pytest.mark.parametrize("url", [BUCKET + "develop/s1%00/build_cache/index.json", "file-form"])
async def test_a_nul_in_a_local_source_url_makes_its_ref_unusable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """``%00`` decodes to a NUL, which no path can hold: it ended in an internal error."""
    root = tmp_path / "mirror"
    _mirror(root)
    if url == "file-form":
        url = (root / "develop" / "s1").as_uri() + "%00/build_cache/index.json"
    _point(root, "s1", url)
    config = _config(tmp_path, str(root))

    assert await main_async(["sync", "--config", config, "--branch", "develop", "-q"]) == 4

    err = capsys.readouterr().err
    assert f"branch develop failed: URL {url} of stack 's1' names a path with a NUL (%00)" in err
    assert "internal error" not in err
    assert not (tmp_path / "out" / "develop").exists()


@pytest.mark.parametrize("given", ["absolute", "relative", "up-and-down"])
async def test_a_mirror_given_through_a_link_may_name_its_files_under_it(
    tmp_path: Path, given: str
) -> None:
    """``/srv/mirror -> /data/mirror-2025``, given as ``/srv/mirror`` (or ``mirror`` in a config
    in ``/srv``), whose discovery document names its files under ``/srv/mirror``: they are the
    mirror's (it named them under the resolved folder only). Files outside both stay refused."""
    root = tmp_path / "data" / "mirror-2025"
    _mirror(root)
    link = tmp_path / "current"
    link.symlink_to(root)
    _point(root, "s1", (link / "develop" / "s1" / "build_cache" / "index.json").as_uri())
    mirror = {"absolute": str(link), "relative": "current", "up-and-down": "w/../current"}
    (tmp_path / "w").mkdir()
    config = _config(tmp_path, mirror[given])
    assert await main_async(["sync", "--branch", "develop", "--config", config, "-q"]) == 0

    outside = _copy_of_s1(root, tmp_path / "outside" / "build_cache" / "index.json")
    _point(root, "s1", outside.as_uri())
    assert await main_async(["sync", "--branch", "develop", "--config", config, "-q"]) == 4
    assert f"URL {outside.as_uri()} is not on the mirror" in _report(tmp_path)["error"]
