"""Credentials in a mirror URL (README "Mirrors and sources"): sent as basic auth to their origin
alone, and never shown, logged or written, so that publishing ``output/`` never publishes them.

Each test serves the sample mirror on loopback behind basic auth and runs the CLI as a user
does; the secret is then looked for in every file under the output folder (state included)
and in what the run printed.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from crawler.cli.command import main_async
from crawler.urls import credentials, credentials_for, redacted, without_credentials

from .conftest import SAMPLE_MIRROR, MirrorServer, fast_config, tree_bytes

USER, PASSWORD = "bu:ild@er", "p@ss:w%rd é"  # every character that needs encoding in a URL
URL_USER, URL_PASSWORD = "build%40er", "p%40ss%3Aw%25rd%20%C3%A9"
SECRETS = ("p@ss:w%rd", URL_PASSWORD, "w%25rd")


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class LockedMirror(MirrorServer):
    """The sample mirror behind basic auth: 401 without the expected ``Authorization``."""

    expected: str = ""
    authorizations: list[str | None]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        given = request.headers.get("Authorization")
        self.authorizations.append(given)
        if given != self.expected:
            return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="m"'})
        return await super().handle(request)


Serve = Callable[[str], Awaitable[LockedMirror]]


@pytest.fixture
def locked(aiohttp_server: Callable[[web.Application], Awaitable[TestServer]]) -> Iterator[Serve]:
    async def start(expected: str) -> LockedMirror:
        mirror = LockedMirror(SAMPLE_MIRROR.resolve())
        mirror.expected, mirror.authorizations = expected, []
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", mirror.handle)
        mirror.server = await aiohttp_server(app)
        return mirror

    yield start


def with_credentials(url: str, userinfo: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{userinfo}@{rest}"


def everything(out: Path) -> bytes:
    """Every file under the output folder, state and cache included."""
    return b"".join(p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file())


def assert_secret_kept(out: Path, printed: str) -> None:
    written = everything(out)
    for secret in SECRETS:
        assert secret.encode() not in written
        assert secret not in printed
    assert basic("build@er", "p@ss:w%rd é").encode() not in written


async def test_a_mirror_url_with_credentials_is_synced_and_they_are_not_published(
    locked: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = await locked(basic("build@er", "p@ss:w%rd é"))
    mirror = with_credentials(server.url, f"{URL_USER}:{URL_PASSWORD}")
    out = tmp_path / "out"
    sync = ["sync", "--mirror", mirror, "--output", str(out), "--branch", "develop"]

    assert await main_async([*sync, "-v"]) == 0
    assert await main_async([*sync, "-v"]) == 6  # the state matches: no credentials in it

    assert server.authorizations and all(a == server.expected for a in server.authorizations)
    published = (out / "develop" / "index.json").read_text()
    assert f'"mirror":"{server.url}"' in published
    assert_secret_kept(out, "".join(capsys.readouterr()))


async def test_without_credentials_the_locked_mirror_is_unusable(
    locked: Serve, tmp_path: Path
) -> None:
    """The test server does check them."""
    server = await locked(basic("build@er", "p@ss:w%rd é"))
    sync = ["sync", "--mirror", server.url, "--output", str(tmp_path / "o"), "--branch=develop"]

    assert await main_async(sync) == 3


async def test_credentials_go_to_their_own_origin_only(
    locked: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rewrite's replacement may carry other credentials, for another server: each server
    gets its own, and never the other's."""
    mirror = await locked(basic("build@er", "p@ss:w%rd é"))
    other = await locked(basic("reader", "other-secret"))
    config = tmp_path / "c.yaml"
    rewrite = {
        "prefix": "s3://spack-binaries/develop/e4s/",
        "replacement": with_credentials(other.url, "reader:other-secret") + "/develop/e4s/",
    }
    mirror_url = with_credentials(mirror.url, f"{URL_USER}:{URL_PASSWORD}")
    settings = fast_config(mirror_url, tmp_path / "out", rewrites=[rewrite])
    config.write_text(yaml.safe_dump(settings))

    assert await main_async(["sync", "--config", str(config), "--branch=develop", "-v"]) == 0

    assert other.authorizations and set(other.authorizations) == {other.expected}
    assert set(mirror.authorizations) == {mirror.expected}
    printed = "".join(capsys.readouterr())
    assert_secret_kept(tmp_path / "out", printed)
    assert b"other-secret" not in everything(tmp_path / "out")
    assert "other-secret" not in printed
    report = (tmp_path / "out" / "develop" / "report.json").read_text()
    assert f"{other.url}/develop/e4s/" in report


class PathLockedMirror(LockedMirror):
    """Basic auth by path: another user for one stack's files than for the rest."""

    stack_expected: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path.startswith("/develop/e4s/"):
            self.authorizations.append(request.headers.get("Authorization"))
            if request.headers.get("Authorization") != self.stack_expected:
                return web.Response(status=401)
            return await MirrorServer.handle(self, request)
        return await super().handle(request)


async def test_a_rewrite_on_the_mirrors_own_host_sends_its_own_credentials(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]], tmp_path: Path
) -> None:
    """Its files get the rewrite's credentials, the rest the mirror's: the first credentials
    given for a host used to go everywhere on it, and the stack failed with 401."""
    mirror = PathLockedMirror(SAMPLE_MIRROR.resolve())
    mirror.expected, mirror.authorizations = basic("alice", "pw-a"), []
    mirror.stack_expected = basic("bob", "pw-b")
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", mirror.handle)
    mirror.server = await aiohttp_server(app)
    rewrite = {
        "prefix": "s3://spack-binaries/develop/e4s/",
        "replacement": with_credentials(mirror.url, "bob:pw-b") + "/develop/e4s/",
    }
    settings = fast_config(
        with_credentials(mirror.url, "alice:pw-a"), tmp_path / "out", rewrites=[rewrite]
    )
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(settings))

    assert await main_async(["sync", "--config", str(config), "--branch=develop", "-q"]) == 0

    assert set(mirror.authorizations) == {mirror.expected, mirror.stack_expected}


async def test_a_discovery_document_listing_credentials_makes_its_ref_unusable(
    mirror_server: Callable[[Path], Awaitable[MirrorServer]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The mirror's own document holding a password: the ref is not synced, which would publish
    the URL, and the message does not repeat the password."""
    root = tmp_path / "mirror"
    root.mkdir()
    server = await mirror_server(root)
    host = server.url.split("://", 1)[1]
    (root / "cache_spack_io_index.json").write_text(
        '{"develop": [{"label": "root", "url": "http://u:leaked@'
        + host
        + '/develop/build_cache/index.json"}]}'
    )
    out = tmp_path / "out"

    assert (
        await main_async(["sync", "--mirror", server.url, "--output", str(out), "--branch=develop"])
        == 4
    )

    printed = "".join(capsys.readouterr())
    assert "holds credentials" in printed
    assert "leaked" not in printed
    assert not (out / "develop").exists()


@pytest.mark.parametrize(
    ("mirror", "reason"),
    [
        ("http://user:hidden@127.0.0.1:99999/", "is not a valid URL"),
        ("http://user:hidden@/path", "names no host"),
        ("http://a%3Ab:hidden@127.0.0.1/", "the user name of its credentials holds a ':'"),
        # Characters a password must have percent-encoded: not found as credentials, not shown.
        ("http://user:hid?den@127.0.0.1/", "percent-encode @ : / ? # %"),
        ("http://user:hid#den@127.0.0.1/", "percent-encode @ : / ? # %"),
        ("http://user:hid/den@127.0.0.1/", "percent-encode @ : / ? # %"),
        # Digits first: a valid URL to host "user", port 2024, whose path holds the rest.
        ("http://user:2024/hidden@127.0.0.1/", "holds an '@' that does not end credentials"),
    ],
)
async def test_config_errors_do_not_show_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mirror: str, reason: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept").write_text("earlier output")
    before = tree_bytes(out)

    assert await main_async(["sync", "--mirror", mirror, "--output", str(out), "--all"]) == 2

    printed = capsys.readouterr().err
    assert reason in printed
    assert "hidden" not in printed and "hid" not in printed
    assert tree_bytes(out) == before


@pytest.mark.parametrize(
    ("config", "key", "shown"),
    [
        (
            {
                "mirror": "s3://bucket/x",
                "s3": {"endpoint_url": "http://127.0.0.1:9/?X-Amz-Credential=hidden&sig=hidden"},
            },
            "s3.endpoint_url",
            "'http://127.0.0.1:9/?…' has a query or fragment",
        ),
        (
            {
                "mirror": "http://127.0.0.1:9/",
                "refs": {"develop": {"root": "http://127.0.0.1:9/develop?token=hidden"}},
            },
            "refs.develop.root",
            "'http://127.0.0.1:9/develop?…' has a query or fragment",
        ),
        (
            {"mirror": "file:///srv/mirror#token=hidden"},
            "mirror",
            "'file:///srv/mirror#…' has a query or fragment",
        ),
        (
            {"mirror": "s3://bucket/x?versionId=hidden"},
            "mirror",
            "'s3://bucket/x?…' has a query or fragment",
        ),
    ],
)
async def test_a_query_or_fragment_is_refused_without_being_shown(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    config: dict[str, object],
    key: str,
    shown: str,
) -> None:
    """A query in an endpoint or a declared ref (a presigned URL's credential and signature, a
    ``?token=``) was refused with a message that printed it whole, into logs and cron mail."""
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**config, "output": str(tmp_path / "out")}))

    assert await main_async(["sync", "--all", "--config", str(path)]) == 2

    printed = "".join(capsys.readouterr())
    assert printed.startswith(f"error: config error in {path}: key '{key}': {shown}"), printed
    assert "hidden" not in printed
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h/x?X-Amz-Signature=s", "https://h/x?…"),
        ("https://h/x#t", "https://h/x#…"),
        ("https://h/x#t?u", "https://h/x#…"),
        ("https://u:p@h/x?q", "https://…@h/x?…"),
        ("https://u:p?q@h/x", "https://…@h/x"),  # a "?" in a password: credentials first
        ("file:///srv/m@1/x?q", "file:///srv/m@1/x?…"),  # a folder's "@" is no credentials
        ("https://h/x", "https://h/x"),
    ],
)
def test_urls_are_shown_without_credentials_query_or_fragment(url: str, shown: str) -> None:
    assert redacted(url) == shown


@pytest.mark.parametrize(
    ("url", "plain", "secret"),
    [
        ("https://host/a@b/index.json", "https://host/a@b/index.json", None),
        ("https://u@host", "https://host", ("u", "")),
        ("HTTPS://u:p%2Fq@Host:8443/x?y@z", "HTTPS://Host:8443/x?y@z", ("u", "p/q")),
        ("http://u:p@[::1]:8080/m", "http://[::1]:8080/m", ("u", "p")),
        ("http://a:b@c@host/", "http://host/", ("a", "b@c")),  # the last "@" ends them
        ("file://u:p@/srv/m", "file://u:p@/srv/m", None),  # no credentials for files
    ],
)
def test_credentials_are_taken_out_of_urls(
    url: str, plain: str, secret: tuple[str, str] | None
) -> None:
    assert without_credentials(url) == (plain, secret)


def test_credentials_are_chosen_whatever_the_case_of_scheme_and_host() -> None:
    """Locations are compared in lowercase scheme and host, as the mirror's are built."""
    given = credentials(["HTTPS://alice:pw1@Host.example/m", "https://bob:pw2@host.example/"])
    assert credentials_for("https://host.example/m/develop/index.json", given) == ("alice", "pw1")
    assert credentials_for("https://HOST.example/other/index.json", given) == ("bob", "pw2")
    assert credentials_for("https://host.example:8443/m/x", given) is None  # another origin


@pytest.mark.parametrize(
    ("location", "sent"),
    [
        ("http://h/develop/e4s/index.json", ("ru", "rp")),  # the rewrite's own
        ("http://h/develop/root/index.json", None),  # the mirror's: given without
        ("http://h/cache_spack_io_index.json", None),
        ("http://h/develop/dvs/index.json", None),  # another rewrite, given without
        ("http://h:81/develop/e4s/index.json", None),  # another origin
    ],
)
def test_a_url_given_without_credentials_gets_none(
    location: str, sent: tuple[str, str] | None
) -> None:
    """A rewrite's credentials are for its files: not for the mirror's, nor another rewrite's,
    on the same server, when those were given without."""
    given = credentials(["http://h", "http://ru:rp@h/develop/e4s/", "http://h/develop/dvs/"])
    assert credentials_for(location, given) == sent


def test_a_local_mirror_lends_no_credentials() -> None:
    """The mirror's are the fallback on its origin; a folder has none to lend, and a rewrite's
    stay with its files."""
    given = credentials(["/srv/mirror", "http://ru:rp@h/e4s/"])
    assert credentials_for("http://h/e4s/index.json", given) == ("ru", "rp")
    assert credentials_for("http://h/other/index.json", given) is None


@pytest.mark.parametrize(
    "url",
    [
        "s3://AKIA:s3cr3t@bucket/develop/build_cache/index.json",
        "s3://s3cr3t@bucket/develop/build_cache/index.json",
        "ftp://u:s3cr3t@h/develop/build_cache/index.json",  # refused before its scheme is
        "FILE://u:s3cr3t@h/develop/build_cache/index.json",
    ],
)
def test_a_discovery_entry_with_credentials_in_any_scheme_is_refused_unshown(url: str) -> None:
    """Only http(s) credentials were looked for: an ``s3://KEY:SECRET@`` entry was accepted,
    and its URL, secret and all, written to index.json and report.json."""
    from crawler.config import build_config
    from crawler.mirror.discovery import Mirror, parse_discovery

    mirror = Mirror.parse("file:///m")
    document = f'{{"develop": [{{"label": "root", "url": "{url}"}}]}}'.encode()
    found = parse_discovery(document, mirror.discovery_url, mirror, build_config({}))

    assert found.refs == {}
    assert "holds credentials" in found.problems["develop"]
    assert "s3cr3t" not in found.problems["develop"]


def test_a_discovery_url_refused_for_its_place_is_shown_without_credentials() -> None:
    from crawler.config import build_config
    from crawler.mirror.discovery import Mirror, map_url

    config = build_config({"mirror": "https://m.example"})
    for url in ("ftp://u:s3cr3t@h/x/build_cache/index.json", "http://u:s3cr3t@h/x"):
        with pytest.raises(ValueError) as refused:
            map_url(url, Mirror.parse("https://m.example"), config)
        assert "s3cr3t" not in str(refused.value)
        assert "h/x" in str(refused.value)
