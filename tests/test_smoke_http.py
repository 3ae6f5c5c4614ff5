"""The sample mirror synced over loopback HTTP gives the same output as from its folder."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from crawler.cli.command import main_async

from .conftest import SAMPLE_MIRROR, ServeMirror, fast_config, tree_bytes


@pytest.mark.slow
async def test_http_and_folder_give_identical_indexes(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    server = await mirror_server(SAMPLE_MIRROR)
    outputs = {}
    for name, mirror in (("http", server.url), ("folder", str(SAMPLE_MIRROR))):
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(fast_config(mirror, tmp_path / name)))
        code = await main_async(["sync", "--all", "--config", str(config), "-q"])
        assert code == 0
        outputs[name] = tree_bytes(tmp_path / name)
    assert set(outputs["http"]) == set(outputs["folder"])
    for path, data in outputs["http"].items():
        if path.endswith("specs.md"):
            assert data == outputs["folder"][path], path
    assert any(p.endswith("develop-2025-04-20/pages/py-optree/specs.md") for p in outputs["http"])


async def test_infinite_time_limits_mean_none(mirror_server: ServeMirror, tmp_path: Path) -> None:
    """``.inf`` (YAML's infinity) passes the config's checks, so it must work: no limit."""
    server = await mirror_server(SAMPLE_MIRROR)
    config = tmp_path / "c.yaml"
    limits = {"connect": float("inf"), "read": float("inf"), "source": float("inf")}
    config.write_text(yaml.safe_dump(fast_config(server.url, tmp_path / "out", timeouts=limits)))
    assert ".inf" in config.read_text()

    assert await main_async(["sync", "--branch=develop", "--config", str(config), "-q"]) == 0


def _sync_config(tmp_path: Path, mirror: str) -> list[str]:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror, tmp_path / "out", formats=["json"])))
    return ["sync", "--branch=develop", "--config", str(config), "-q"]


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The tests' own environment's proxies left out (either case)."""
    for name in ("http_proxy", "https_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


async def test_requests_go_through_the_proxy_the_environment_names(
    mirror_server: ServeMirror, tmp_path: Path, no_proxies: pytest.MonkeyPatch
) -> None:
    """``http_proxy`` used to be ignored: behind a proxy, every run failed (exit 3). Here the
    mirror's host does not resolve: only the proxy (the test server) can answer for it."""
    server = await mirror_server(SAMPLE_MIRROR)
    no_proxies.setenv("http_proxy", server.url)
    assert await main_async(_sync_config(tmp_path, "http://mirror.invalid:8/")) == 0
    assert server.hits("cache_spack_io_index.json") == 1
    assert len(server.requests) > 2  # and the indexes
    index = (tmp_path / "out" / "develop" / "index.json").read_text()
    assert '"mirror":"http://mirror.invalid:8"' in index


async def test_no_proxy_names_the_hosts_reached_directly(
    mirror_server: ServeMirror,
    tmp_path: Path,
    no_proxies: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = await mirror_server(SAMPLE_MIRROR)
    no_proxies.setenv("HTTP_PROXY", "127.0.0.1:9")  # nothing listens there
    assert await main_async(_sync_config(tmp_path, server.url)) == 3
    assert "127.0.0.1:9" in capsys.readouterr().err
    no_proxies.setenv("no_proxy", "localhost,127.0.0.1")
    assert await main_async(_sync_config(tmp_path, server.url)) == 0


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("ftp://proxy:21", "'ftp://proxy:21' is not an http(s) proxy URL (http://host:port)"),
        ("socks5h://u:pw@p:1080", "'socks5h://…@p:1080' is not an http(s) proxy URL"),
        ("http://", "'http://' names no host"),
        ("http://[bad", "'http://[bad' is not a valid URL"),
        ("http://pro xy:3128", "'http://pro xy:3128' holds a space in its host"),
        ("http://proxy:0", "'http://proxy:0' names port 0"),
    ],
)
async def test_a_proxy_that_is_no_url_is_a_usage_error(
    tmp_path: Path,
    no_proxies: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    value: str,
    reason: str,
) -> None:
    no_proxies.setenv("https_proxy", value)
    assert await main_async(_sync_config(tmp_path, "https://mirror.invalid/")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: config error in environment: key 'https_proxy': {reason}"), err
    assert "pw" not in err
    assert not (tmp_path / "out").exists()


async def test_only_the_proxies_the_mirror_needs_are_looked_at(
    tmp_path: Path, no_proxies: pytest.MonkeyPatch
) -> None:
    """A local mirror needs none: a proxy setting meant for other programs (socks) is no
    reason to refuse the run."""
    no_proxies.setenv("http_proxy", "socks5h://127.0.0.1:1080")
    no_proxies.setenv("all_proxy", "socks5h://127.0.0.1:1080")
    assert await main_async(_sync_config(tmp_path, str(SAMPLE_MIRROR))) == 0


async def test_all_proxy_serves_where_no_scheme_s_proxy_is_named(
    mirror_server: ServeMirror, tmp_path: Path, no_proxies: pytest.MonkeyPatch
) -> None:
    server = await mirror_server(SAMPLE_MIRROR)
    no_proxies.setenv("ALL_PROXY", server.url)
    assert await main_async(_sync_config(tmp_path, "http://mirror.invalid:8/")) == 0
    assert server.hits("cache_spack_io_index.json") == 1


async def test_no_proxy_names_ip_ranges(
    mirror_server: ServeMirror, tmp_path: Path, no_proxies: pytest.MonkeyPatch
) -> None:
    server = await mirror_server(SAMPLE_MIRROR)
    no_proxies.setenv("http_proxy", "127.0.0.1:9")  # nothing listens there
    no_proxies.setenv("no_proxy", "example.org, 127.0.0.0/8")
    assert await main_async(_sync_config(tmp_path, server.url)) == 0


class _Proxy:
    """A proxy answering every request (a CONNECT, for an https URL) with ``status``."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(f"HTTP/1.1 {self.status}\r\nContent-Length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()


@pytest.mark.parametrize(
    ("status", "tries", "reason"),
    [
        ("503 Service Unavailable", 3, "the proxy answered HTTP 503 Service Unavailable"),
        ("407 Proxy Authentication Required", 1, "the proxy answered HTTP 407"),
    ],
)
async def test_a_proxy_s_answer_to_connect_is_retried_as_a_server_s_and_keeps_its_secret(
    tmp_path: Path,
    no_proxies: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    status: str,
    tries: int,
    reason: str,
) -> None:
    """An https mirror is reached through a CONNECT tunnel: a 503 from the proxy failed at
    once (no retry), and the error quoted the proxy's URL, password and all."""
    proxy = _Proxy(status)
    address = await proxy.start()
    no_proxies.setenv("https_proxy", f"http://user:s3cret@{address}")
    try:
        code = await main_async(_sync_config(tmp_path, "https://mirror.invalid/"))
    finally:
        assert proxy.server is not None
        proxy.server.close()
    err = capsys.readouterr().err
    assert code == 3, err
    assert len(proxy.requests) == tries
    assert all(r.startswith(b"CONNECT mirror.invalid:443 ") for r in proxy.requests)
    assert reason in err
    assert "s3cret" not in err
