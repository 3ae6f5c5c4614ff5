"""Reaching more HTTP mirrors (issue 42): a bearer token named by ``http.access_token_variable``,
sent to the mirror's origin alone and never shown; HTTPS against CA certificates of one's own
(``http.ssl_certs``) or unchecked (``http.verify_ssl: false``). Real servers on loopback, TLS
with a CA made here by trustme.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trustme
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from crawler.cli.command import main_async

from .conftest import SAMPLE_MIRROR, MirrorServer, fast_config

TOKEN = "tok3n-s3cret"
Server = Callable[..., Awaitable[TestServer]]


class Recording(MirrorServer):
    """The sample mirror, noting each request's ``Authorization``; 401 unless it is
    ``expected`` (None: none is needed)."""

    expected: str | None = None
    authorizations: list[str | None]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        given = request.headers.get("Authorization")
        self.authorizations.append(given)
        if self.expected is not None and given != self.expected:
            return web.Response(status=401)
        return await super().handle(request)


async def _serve(aiohttp_server: Server, expected: str | None = None, **kw: object) -> Recording:
    mirror = Recording(SAMPLE_MIRROR.resolve())
    mirror.expected, mirror.authorizations = expected, []
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", mirror.handle)
    mirror.server = await aiohttp_server(app, **kw)
    return mirror


def _config(tmp_path: Path, mirror: str, **extra: object) -> list[str]:
    config = tmp_path / "crawler.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror, tmp_path / "out", **extra)))
    return ["sync", "--config", str(config), "--branch=develop", "-v"]


async def test_a_token_goes_to_the_mirrors_origin_alone_and_is_never_shown(
    aiohttp_server: Server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    mirror = await _serve(aiohttp_server, f"Bearer {TOKEN}")
    other = await _serve(aiohttp_server)  # a rewrite's: another origin
    rewrite = {
        "prefix": "s3://spack-binaries/develop/e4s/",
        "replacement": f"{other.url}/develop/e4s/",
    }
    sync = _config(
        tmp_path, mirror.url, http={"access_token_variable": "CACHE_TOKEN"}, rewrites=[rewrite]
    )
    monkeypatch.delenv("CACHE_TOKEN", raising=False)
    assert await main_async(sync) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: config error in {tmp_path / 'crawler.yaml'}: key 'http.access_token_variable': "
        "the environment variable CACHE_TOKEN is not set"
    )
    assert mirror.authorizations == []
    monkeypatch.setenv("CACHE_TOKEN", "line\r\nX-Injected: 1")
    assert await main_async(sync) == 2
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            "the environment variable CACHE_TOKEN holds a character a token cannot (a space, a "
            "control or non-ASCII character)"
        )
    )
    assert mirror.authorizations == []

    monkeypatch.setenv("CACHE_TOKEN", TOKEN)
    assert await main_async(sync) == 0
    assert mirror.authorizations and set(mirror.authorizations) == {f"Bearer {TOKEN}"}
    assert other.authorizations and set(other.authorizations) == {None}
    assert TOKEN not in "".join(capsys.readouterr())
    files = [p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert files and not any(TOKEN.encode() in data for data in files)


@pytest.mark.parametrize(
    ("http", "code"),
    [({}, 3), ({"ssl_certs": "ca.pem"}, 0), ({"verify_ssl": False}, 0)],
    ids=["system-cas", "own-ca", "unchecked"],
)
async def test_https_with_a_ca_of_ones_own(
    aiohttp_server: Server,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    http: dict[str, object],
    code: int,
) -> None:
    """The system's CAs refuse the server's certificate; the CA given (relative to the
    config's folder) or no check at all reach it."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    mirror = await _serve(aiohttp_server, ssl=context)
    assert mirror.url.startswith("https://127.0.0.1:")

    assert await main_async(_config(tmp_path, mirror.url, http=http)) == code
    if code:
        assert "certificate verify failed" in capsys.readouterr().err
    else:
        assert (tmp_path / "out" / "develop" / "index.json").is_file()


@pytest.mark.parametrize(
    ("http", "mirror", "reason"),
    [
        (
            {"access_token_variable": "T"},
            "./mirror",
            "key 'http.access_token_variable': a token is sent to an http(s) mirror only",
        ),
        (
            {"access_token_variable": "T"},
            "https://u:p@cache.example/",
            "key 'http.access_token_variable': give the mirror's URL credentials or a token, "
            "not both",
        ),
        (
            {"ssl_certs": "ca.pem", "verify_ssl": False},
            "https://cache.example/",
            "key 'http.ssl_certs': CA certificates are for checking certificates: verify_ssl "
            "is false",
        ),
        (
            {"ssl_certs": "nowhere.pem"},
            "https://cache.example/",
            "key 'http.ssl_certs': cannot read CA certificates from '{tmp}/nowhere.pem': "
            "No such file or directory",
        ),
    ],
)
async def test_http_settings_no_run_could_use_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    http: dict[str, object],
    mirror: str,
    reason: str,
) -> None:
    assert await main_async(_config(tmp_path, mirror, http=http)) == 2
    shown = reason.replace("{tmp}", str(tmp_path))
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: config error in {tmp_path / 'crawler.yaml'}: {shown}"
    )
