"""How large a body the crawler takes from a mirror (README, "Mirrors and sources").

An index may be at most ``max_index_mb`` as served, once its ``Content-Encoding`` is undone and
once gunzipped; the discovery document at most ``fetch.DOCUMENT_LIMIT``, and a sidecar
``fetch.SIDECAR_LIMIT`` (it is then ignored, as unreadable). Beyond that the source fails, at once
and without a retry, and what was published stays as it was: a runaway or hostile server cannot
fill the disk or the memory of an unattended run.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async
from crawler.decode.validate import LIMITS
from crawler.mirror.fetch import DOCUMENT_LIMIT, SIDECAR_LIMIT

from .conftest import REPO, Fault, MirrorServer, ServeMirror, fast_config, tree_bytes

SPECS = (SynthSpec("zlib", "1.3.1", stacks=("s1",)), SynthSpec("cmake", "3.30.5"))
S1 = "develop/s1/build_cache/index.json"
MIB = 1 << 20


def _argv(tmp_path: Path, mirror: str) -> list[str]:
    path = tmp_path / "crawler.yaml"
    settings = fast_config(mirror, tmp_path / "out", max_index_mb=1)
    path.write_text(yaml.safe_dump(settings))
    return ["sync", "--branch", "develop", "--config", str(path), "-q"]


def _s1(tmp_path: Path) -> dict[str, Any]:
    report = json.loads((tmp_path / "out" / ".crawler" / "reports" / "develop.json").read_text())
    source: dict[str, Any] = next(s for s in report["sources"] if s["label"] == "s1")
    return source


def _packages(tmp_path: Path) -> object:
    return json.loads((tmp_path / "out" / "develop" / "index.json").read_text())["packages"]


def _padded(index: Path, size: int) -> bytes:
    """The index at ``index`` with trailing blanks up to ``size`` bytes: still a valid index."""
    data = index.read_bytes()
    return data + b" " * (size - len(data))


@pytest.fixture
async def published(
    mirror_server: ServeMirror, tmp_path: Path
) -> tuple[MirrorServer, list[str], dict[str, bytes]]:
    """A mirror served over loopback and synced once: its server, the argv, what was published."""
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", SPECS)])
    server = await mirror_server(root)
    argv = _argv(tmp_path, server.url)
    assert await main_async(argv) == 0
    return server, argv, tree_bytes(tmp_path / "out" / "develop")


async def test_an_index_served_gzip_encoded_is_measured_once_decoded(
    published: tuple[MirrorServer, list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    """A few KB on the wire can stand for GB on disk: the decoded bytes are what count."""
    server, argv, before = published
    index = server.root / S1
    bomb = gzip.compress(_padded(index, 3 * MIB), mtime=0)
    assert len(bomb) < MIB // 100
    server.script(S1, Fault(body=bomb, headers={"Content-Encoding": "gzip"}))
    asked = server.hits(S1)

    assert await main_async(argv) == 4

    s1 = _s1(tmp_path)
    assert s1["status"] == "failed"
    assert (
        f"cannot fetch {server.url}/{S1}: larger than max_index_mb (1 MiB): at least"
        in (s1["error"])
    )
    assert server.hits(S1) == asked + 1  # not retried
    assert tree_bytes(tmp_path / "out" / "develop") == before


async def test_an_index_announced_too_large_is_not_read(
    published: tuple[MirrorServer, list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    server, argv, before = published
    server.script(S1, Fault(body=_padded(server.root / S1, MIB + 1)))

    assert await main_async(argv) == 4

    error = _s1(tmp_path)["error"]
    assert f"larger than max_index_mb (1 MiB): {MIB + 1:,} bytes announced" in error
    assert tree_bytes(tmp_path / "out" / "develop") == before


async def test_an_index_within_the_limit_is_read(
    published: tuple[MirrorServer, list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    """The limit is inclusive, and padding makes no other difference."""
    server, argv, _ = published
    packages = _packages(tmp_path)
    server.script(S1, Fault(body=_padded(server.root / S1, MIB)))

    assert await main_async(argv) == 0

    assert _s1(tmp_path)["bytes"] == MIB
    assert _packages(tmp_path) == packages


@pytest.mark.parametrize("close", [False, True], ids=["keep-alive", "close"])
@pytest.mark.parametrize("kind", ["index", "discovery document"])
async def test_a_body_that_does_not_decode_as_labelled_is_named_and_not_retried(
    published: tuple[MirrorServer, list[str], dict[str, bytes]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    close: bool,
) -> None:
    """aiohttp reports it two ways, depending on whether the server closed the connection
    before the body was read; either way it is named, and not taken for a body cut short."""
    server, argv, before = published
    path = S1 if kind == "index" else "cache_spack_io_index.json"
    fault = Fault(body=b"not gzip at all", headers={"Content-Encoding": "gzip"}, close=close)
    server.script(path, fault)
    asked = server.hits(path)
    capsys.readouterr()

    assert await main_async(argv) == (4 if kind == "index" else 3)

    error = _s1(tmp_path)["error"] if kind == "index" else capsys.readouterr().err
    assert f"{server.url}/{path}: body does not decode as its Content-Encoding (gzip) says" in error
    assert "cut short" not in error and "attempts" not in error
    assert server.hits(path) == asked + 1
    assert tree_bytes(tmp_path / "out" / "develop") == before


async def test_a_body_cut_short_is_still_retried(
    published: tuple[MirrorServer, list[str], dict[str, bytes]], tmp_path: Path
) -> None:
    """A gzip-encoded body cut short is a transient failure, not one that does not decode."""
    server, argv, _ = published
    packages = _packages(tmp_path)
    packed = gzip.compress((server.root / S1).read_bytes())
    cut = Fault(body=packed, headers={"Content-Encoding": "gzip"}, truncate=len(packed) // 2)
    server.script(S1, cut)
    asked = server.hits(S1)

    assert await main_async(argv) == 6  # the second attempt brought the same bytes

    assert server.hits(S1) == asked + 2
    assert _s1(tmp_path)["attempts"] == 2
    assert _packages(tmp_path) == packages


async def test_a_discovery_document_too_large_is_not_read(
    published: tuple[MirrorServer, list[str], dict[str, bytes]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server, argv, before = published
    document = server.root / "cache_spack_io_index.json"
    server.script("cache_spack_io_index.json", Fault(body=_padded(document, DOCUMENT_LIMIT + 1)))
    capsys.readouterr()

    assert await main_async(argv) == 3

    error = capsys.readouterr().err
    assert "larger than the limit for a discovery document (64 MiB)" in error
    assert tree_bytes(tmp_path / "out" / "develop") == before


async def test_a_sidecar_larger_than_a_sidecar_is_ignored(
    published: tuple[MirrorServer, list[str], dict[str, bytes]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A sidecar holds 64 hex digits: one over 4 KiB is not read (a server compressing a huge
    one made each of a run's concurrent sidecar reads hold up to 64 MiB), and is only a
    validator: the index decides, and the branch is as it was."""
    server, argv, before = published
    server.script(S1 + ".hash", Fault(body=b"0" * (SIDECAR_LIMIT + 1)))
    capsys.readouterr()

    assert await main_async(argv) == 6

    error = capsys.readouterr().err
    assert "WARNING ignoring unreadable sidecar: cannot fetch " in error
    assert f"larger than the limit for a sidecar (4 KiB): {SIDECAR_LIMIT + 1:,} bytes" in error
    assert _s1(tmp_path)["sidecar_sha256"] is None
    assert tree_bytes(tmp_path / "out" / "develop") == before


async def _local(tmp_path: Path) -> tuple[Path, list[str], dict[str, bytes]]:
    """A local mirror synced once: its folder, the argv, what was published."""
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", SPECS)])
    argv = _argv(tmp_path, str(root))
    assert await main_async(argv) == 0
    return root, argv, tree_bytes(tmp_path / "out" / "develop")


def _replace(index: Path, data: bytes) -> None:
    """Put ``data`` at ``index``, with a sidecar that agrees."""
    index.write_bytes(data)
    index.with_name("index.json.hash").write_text(hashlib.sha256(data).hexdigest())


async def test_a_local_index_too_large_fails(tmp_path: Path) -> None:
    root, argv, before = await _local(tmp_path)
    _replace(root / S1, _padded(root / S1, MIB + 1))

    assert await main_async(argv) == 4

    error = _s1(tmp_path)["error"]
    assert f"larger than max_index_mb (1 MiB): {MIB + 1:,} bytes on disk" in error
    assert tree_bytes(tmp_path / "out" / "develop") == before


@pytest.mark.parametrize("kind", ["device", "named pipe"])
async def test_a_local_index_that_is_no_regular_file_is_not_read(tmp_path: Path, kind: str) -> None:
    """A device may never end, and opening a named pipe waits for ever for a writer (the run,
    and its lock, would hang): neither is read, the source fails."""
    root, argv, before = await _local(tmp_path)
    (root / S1).unlink()
    if kind == "device":
        (root / S1).symlink_to("/dev/zero")
    else:
        os.mkfifo(root / S1)

    assert await main_async(argv) == 4

    error = _s1(tmp_path)["error"]
    assert error.endswith(": not a regular file (a named pipe, a device or a socket)")
    assert tree_bytes(tmp_path / "out" / "develop") == before


async def test_a_local_discovery_document_that_is_a_named_pipe_is_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, argv, before = await _local(tmp_path)
    (root / "cache_spack_io_index.json").unlink()
    os.mkfifo(root / "cache_spack_io_index.json")

    assert await main_async(argv) == 3

    assert capsys.readouterr().err.endswith(
        "cache_spack_io_index.json: not a regular file (a named pipe, a device or a socket)\n"
    )
    assert tree_bytes(tmp_path / "out" / "develop") == before


async def test_a_gzip_index_needs_no_memory_for_a_limit_it_does_not_reach(tmp_path: Path) -> None:
    """The gunzipped bytes are read a block at a time: a limit of 1 TiB allocates nothing."""
    root, argv, _ = await _local(tmp_path)
    packages = _packages(tmp_path)
    index = root / S1
    _replace(index, gzip.compress(index.read_bytes(), mtime=0))
    config = Path(argv[argv.index("--config") + 1])
    config.write_text(config.read_text().replace("max_index_mb: 1\n", "max_index_mb: 1048576\n"))

    assert await main_async(argv) == 0

    assert _packages(tmp_path) == packages


@pytest.mark.parametrize("label", ["root", "s1"])
async def test_a_gzip_index_is_gunzipped_up_to_the_limit(tmp_path: Path, label: str) -> None:
    """An index stored as gzip data is gunzipped in memory, so the limit bounds that too."""
    root, argv, before = await _local(tmp_path)
    index = root / (S1 if label == "s1" else "develop/build_cache/index.json")
    within = gzip.compress(_padded(index, MIB), mtime=0)  # the limit is inclusive
    _replace(index, gzip.compress(_padded(index, 3 * MIB), mtime=0))

    assert await main_async(argv) == 4

    report = json.loads((tmp_path / "out" / ".crawler" / "reports" / "develop.json").read_text())
    assert f"{index.as_uri()}: larger than max_index_mb (1 MiB) once gunzipped" in report["error"]
    assert tree_bytes(tmp_path / "out" / "develop") == before

    packages = _packages(tmp_path)
    _replace(index, within)
    assert await main_async(argv) == 0
    assert _packages(tmp_path) == packages


async def test_a_local_discovery_document_too_large_is_not_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root, argv, before = await _local(tmp_path)
    document = root / "cache_spack_io_index.json"
    document.write_bytes(_padded(document, DOCUMENT_LIMIT + 1))
    capsys.readouterr()

    assert await main_async(argv) == 3

    error = capsys.readouterr().err
    assert "larger than the limit for a discovery document (64 MiB)" in error
    assert tree_bytes(tmp_path / "out" / "develop") == before


async def test_an_index_read_before_the_limit_was_lowered_fails_as_in_a_cold_sync(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    """Bytes proven unchanged (here by a 304) are not taken from the cache once they exceed
    the limit: they are asked for again and fail, and the output stays as it was."""
    root = tmp_path / "mirror"
    build_mirror(root, [SynthRef("develop", SPECS)])
    (root / S1).write_bytes(_padded(root / S1, MIB + MIB // 2))
    server = await mirror_server(root)
    argv = _argv(tmp_path, server.url)
    config = Path(argv[argv.index("--config") + 1])
    config.write_text(config.read_text().replace("max_index_mb: 1\n", "max_index_mb: 2\n"))
    assert await main_async(argv) == 0
    before = tree_bytes(tmp_path / "out" / "develop")
    config.write_text(config.read_text().replace("max_index_mb: 2\n", "max_index_mb: 1\n"))

    assert await main_async(argv) == 4

    assert "larger than max_index_mb (1 MiB)" in _s1(tmp_path)["error"]
    assert tree_bytes(tmp_path / "out" / "develop") == before


#: Where docs/security.md states each limit of a record (its text, whitespace folded).
DOCUMENTED = [
    "| `name` | {name_chars:,} characters |",
    "| `version` | {version_chars:,} characters |",
    "| `arch.platform`, `arch.platform_os` | {platform_chars:,} characters each |",
    "| `arch.target` | {target_chars:,} characters (its `name` when an object) |",
    "| compiler (`name@version`) | {compiler_chars:,} characters |",
    "| one rendered variant | {variant_chars:,} characters |",
    "| variants (`parameters` entries, compiler flags included) | {variants:,} |",
    "| dependencies | {dependencies:,} edges, each a DAG hash |",
    "| virtuals the edges provide (`parameters.virtuals`) | {virtuals:,} in all, "
    "{virtual_chars:,} characters each |",
    "An index holding more than {invalid_per_index:,} invalid records is no Spack index",
    "A source lists at most {invalid_shown_per_source:,} invalid records",
    "A key is shown as at most {shown_key_chars:,} characters, a reason as at most "
    "{shown_reason_chars:,}.",
]


def test_the_security_docs_state_the_limits_the_checks_apply() -> None:
    text = " ".join((REPO / "docs" / "security.md").read_text().split())
    assert LIMITS["os_chars"] == LIMITS["platform_chars"]  # one row says both
    missing = [line for line in (d.format(**LIMITS) for d in DOCUMENTED) if line not in text]
    assert not missing, missing
