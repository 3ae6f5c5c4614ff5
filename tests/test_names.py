"""The names and places of a plain build cache, alike in a folder, over loopback HTTP and in the
loopback moto S3 server (issues 39 and 40): a view named with every character a branch name may
hold (``GCC_12.3+cuda-11``) is listed and read; a name the output keeps for itself is refused,
the other refs going on; a view asked for where views cannot be listed is read where Spack
reads it, never replaced by another index; a second push into a cache is synced with the
default config; and a mirror that is no cache names every place looked at.

Each cache is built as Spack 1.x writes one (``v3/layout.json``, index manifests, views) by
:func:`bench.synth.build_plain_cache`, in ``<tmp>/site/cache``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.synth import SynthSpec, build_plain_cache, generate_specs
from crawler.config import build_config
from crawler.errors import ConfigError
from crawler.files import OUTPUT_OWN
from crawler.mirror.discovery import Mirror, parse_discovery
from crawler.output.site.listing import LISTING
from crawler.output.workdir import STATE_DIR

from .conftest import ServeMirror
from .test_mirrors import crawl, report, run
from .test_s3 import _aws_environment, make_bucket, put_tree, s3_settings  # noqa: F401

#: Where a cache is served from; a client made, a bucket filled: a second or more in S3.
TRANSPORTS = ["folder", "http", pytest.param("s3", marks=pytest.mark.slow)]
INDEX = "v3/manifests/index"


@dataclass
class Served:
    """A cache at ``<site>/cache``, served one way: the mirror to give, the config settings it
    needs, and what a second push into the site's files must do for the mirror to hold them."""

    mirror: str
    settings: dict[str, object] = field(default_factory=dict)
    again: Callable[[], Awaitable[None]] | None = None

    @property
    def base(self) -> str:
        """The mirror as the crawler names it (a folder as a ``file://`` URL)."""
        return Mirror.parse(self.mirror).base

    async def pushed(self) -> None:
        """After the site's files changed: the mirror holds them too."""
        if self.again is not None:
            await self.again()


Serve = Callable[[str, Path], Awaitable[Served]]


@pytest.fixture
def serve(request: pytest.FixtureRequest, mirror_server: ServeMirror) -> Serve:
    """``await serve(kind, site)``: ``site/cache`` in a folder, over HTTP, or in a bucket."""

    async def start(kind: str, site: Path) -> Served:
        if kind == "folder":
            return Served(str(site / "cache"))
        if kind == "http":
            server = await mirror_server(site)
            return Served(f"{server.url}/cache")
        endpoint: str = request.getfixturevalue("moto_endpoint")
        bucket = await make_bucket(endpoint, site)

        async def again() -> None:
            await put_tree(endpoint, bucket, site)

        return Served(f"s3://{bucket}/cache", {"s3": s3_settings(endpoint)}, again)

    return start


@pytest.fixture(scope="module")
def specs() -> list[SynthSpec]:
    return generate_specs(39, 12)


def args(tmp_path: Path, served: Served, mirror: str | None = None, **extra: object) -> list[str]:
    """The arguments of a command reading ``served`` (or ``mirror`` on its server)."""
    return run(tmp_path, mirror or served.mirror, **{**served.settings, **extra})


def count(tmp_path: Path, branch: str) -> int:
    specs: int = report(tmp_path, branch)["stats"]["specs"]
    return specs


# --- 39.3: every name a view may have, over every transport -----------------------------------


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_view_named_with_a_plus_is_listed_and_read_alike(
    kind: str,
    serve: Serve,
    tmp_path: Path,
    specs: list[SynthSpec],
    capsys: pytest.CaptureFixture[str],
) -> None:
    build_plain_cache(tmp_path / "site" / "cache", specs[:6], views={"GCC_12.3+cuda-11": specs[:3]})
    served = await serve(kind, tmp_path / "site")
    named = ["GCC_12.3+cuda-11"] if kind == "http" else []  # HTTP cannot be listed
    argv = args(tmp_path, served, views=named)
    code, out, err = await crawl(capsys, "branches", *argv)
    assert (code, out) == (0, "GCC_12.3+cuda-11\troot\ncache\troot\n"), err

    code, _, err = await crawl(capsys, "sync", "--branch", "GCC_12.3+cuda-11", *argv)
    assert code == 0, err
    assert count(tmp_path, "GCC_12.3+cuda-11") == 3
    [source] = report(tmp_path, "GCC_12.3+cuda-11")["sources"]
    assert source["manifest"] == f"{served.base}/{INDEX}/GCC_12.3+cuda-11/index.manifest.json"

    # The view's manifest given as the mirror is that view, named as Spack names it.
    manifest = f"{served.mirror}/{INDEX}/GCC_12.3+cuda-11/index.manifest.json"
    code, out, err = await crawl(capsys, "branches", *args(tmp_path, served, mirror=manifest))
    assert (code, out) == (0, "GCC_12.3+cuda-11\troot\n"), err


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_declared_places_with_a_plus_are_read_alike(
    kind: str,
    serve: Serve,
    tmp_path: Path,
    specs: list[SynthSpec],
    capsys: pytest.CaptureFixture[str],
) -> None:
    build_plain_cache(tmp_path / "site" / "cache", specs[:6], views={"GCC_12.3+cuda-11": specs[:3]})
    build_plain_cache(tmp_path / "site" / "other+cache", specs[:2])
    served = await serve(kind, tmp_path / "site")
    refs = {
        "gpu": {"root": {"url": ".", "view": "GCC_12.3+cuda-11"}},
        "other": {"root": "../other+cache"},
    }
    code, _, err = await crawl(capsys, "sync", "--all", *args(tmp_path, served, refs=refs))
    assert code == 0, err
    assert (count(tmp_path, "gpu"), count(tmp_path, "other")) == (3, 2)


# --- 39.4: names the output keeps for itself --------------------------------------------------


def test_what_the_output_keeps_at_its_top_is_no_branch_name() -> None:
    assert {LISTING, STATE_DIR} <= set(OUTPUT_OWN)
    with pytest.raises(ConfigError, match="keeps it for its list of branches"):
        build_config({"views": ["Index.html"]}, "c.yaml")
    with pytest.raises(ConfigError, match="keeps it for its list of branches"):
        build_config({"refs": {"index.html": {"root": "x"}}}, "c.yaml")
    mirror = Mirror.parse("https://mirror.example")
    url = "https://mirror.example/x/build_cache/index.json"
    document = f'{{"index.html": [{{"label": "root", "url": "{url}"}}], "v1": []}}'.encode()
    found = parse_discovery(document, mirror.discovery_url, mirror, build_config({}))
    assert found.problems["index.html"] == (
        "ref name 'index.html' is refused: the output folder keeps it for its list of branches"
    )


@pytest.mark.parametrize("kind", [k for k in TRANSPORTS if k != "http"])  # those a listing reads
async def test_a_view_named_as_what_the_output_keeps_is_refused_and_the_others_go_on(
    kind: str,
    serve: Serve,
    tmp_path: Path,
    specs: list[SynthSpec],
    capsys: pytest.CaptureFixture[str],
) -> None:
    views: dict[str, Sequence[SynthSpec]] = {
        "index.html": specs[:2],
        "INDEX.HTML": specs[:2],
        "stable": specs[:3],
    }
    build_plain_cache(tmp_path / "site" / "cache", specs[:6], views=views)
    served = await serve(kind, tmp_path / "site")
    argv = args(tmp_path, served, formats=["json", "html"])
    for _ in range(2):  # and the next html run too
        code, _, err = await crawl(capsys, "sync", "--all", *argv)
        assert code in (0, 6), err
        for name in ("INDEX.HTML", "index.html"):
            assert (
                f"{name}: unusable ref of {served.base}: view name '{name}' is refused: the "
                "output folder keeps it for its list of branches"
            ) in err
        listing = tmp_path / "out" / LISTING
        assert listing.is_file() and "stable/site/index.html" in listing.read_text()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        STATE_DIR,
        "cache",
        LISTING,
        "stable",
    ]
    code, _, err = await crawl(capsys, "sync", "--branch", "index.html", *argv)
    assert code == 2
    assert "branch name 'index.html' is refused: the output folder keeps it" in err


async def test_a_branch_folder_an_older_run_named_index_html_is_named_with_the_remedy(
    tmp_path: Path, specs: list[SynthSpec], capsys: pytest.CaptureFixture[str]
) -> None:
    build_plain_cache(tmp_path / "site" / "cache", specs[:3])
    (tmp_path / "out" / LISTING).mkdir(parents=True)
    (tmp_path / "out" / LISTING / "index.json").write_bytes(b"{}")
    argv = run(tmp_path, str(tmp_path / "site" / "cache"), formats=["json", "html"])
    code, _, err = await crawl(capsys, "sync", "--all", *argv)
    assert code == 0, err
    assert (
        f"{tmp_path / 'out' / LISTING}: not replaced by the list of branches: it is not the "
        "crawler's (a branch so named, which is refused now); remove it for the list to be "
        "written"
    ) in err
    assert (tmp_path / "out" / LISTING / "index.json").read_bytes() == b"{}"  # left as it was


# --- 40.1: a view asked for is read where Spack reads it ---------------------------------------


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_view_asked_for_is_read_where_spack_reads_it(
    kind: str,
    serve: Serve,
    tmp_path: Path,
    specs: list[SynthSpec],
    capsys: pytest.CaptureFixture[str],
) -> None:
    build_plain_cache(tmp_path / "site" / "cache", specs[:10], views={"stable": specs[:6]})
    served = await serve(kind, tmp_path / "site")
    argv = args(tmp_path, served)  # no views in the config
    code, _, err = await crawl(capsys, "sync", "--branch", "stable", *argv)
    assert code == 0, err
    assert count(tmp_path, "stable") == 6
    [source] = report(tmp_path, "stable")["sources"]
    assert source["manifest"] == f"{served.base}/{INDEX}/stable/index.manifest.json"

    code, _, err = await crawl(capsys, "sync", "--branch", "stable", "--branch", "cache", *argv)
    assert code == 0, err
    assert (count(tmp_path, "cache"), count(tmp_path, "stable")) == (10, 6)
    if kind != "http":
        return
    code, out, err = await crawl(capsys, "branches", *argv)
    assert (code, out) == (0, "cache\troot\n")
    assert (
        f"{served.base}: views cannot be listed over http: only those named are read; name "
        "them in the config (views: [<view>, ...]) or ask for one (--branch <view>)"
    ) in err
    code, _, err = await crawl(capsys, "sync", "--branch", "nightly", *argv)
    assert code == 4
    assert (
        f"view 'nightly' not found: no {served.base}/{INDEX}/nightly/index.manifest.json "
        "(views cannot be listed over http: a branch asked for is a view, looked up there, "
        "unless it is 'cache', the top-level index's name"
    ) in err
    assert not (tmp_path / "out" / "nightly").exists()


# --- 40.2: a site's own cache, pushed to again ------------------------------------------------


@pytest.mark.slow  # three syncs, a dry run
@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_second_push_into_a_plain_cache_is_synced_with_the_default_config(
    kind: str,
    serve: Serve,
    tmp_path: Path,
    specs: list[SynthSpec],
    capsys: pytest.CaptureFixture[str],
) -> None:
    cache = tmp_path / "site" / "cache"
    build_plain_cache(cache, specs[:5], views={"stable": specs[:2]})
    served = await serve(kind, tmp_path / "site")
    argv = args(tmp_path, served, views=["stable"] if kind == "http" else [])
    code, _, err = await crawl(capsys, "sync", "--all", *argv)
    assert code == 0, err

    # A second `spack buildcache push` and `update-index` (and `update-index --name stable`).
    build_plain_cache(cache, specs[:8], views={"stable": specs[:3]})
    await served.pushed()
    code, out, err = await crawl(capsys, "sync", "--all", "--dry-run", *argv)
    assert code == 0, err
    assert "immutable" not in out + err
    code, _, err = await crawl(capsys, "sync", "--all", *argv)
    assert code == 0, err
    assert (count(tmp_path, "cache"), count(tmp_path, "stable")) == (8, 3)


# --- 40, a new user: a mirror that is no cache --------------------------------------------------


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_a_mirror_that_is_no_cache_names_every_place_looked_at(
    kind: str, serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "site" / "cache").mkdir(parents=True)
    (tmp_path / "site" / "cache" / "README").write_text("no cache here\n")
    served = await serve(kind, tmp_path / "site")
    code, out, err = await crawl(capsys, "branches", *args(tmp_path, served))
    base = served.base
    assert (code, out) == (3, "")
    assert err.startswith(
        f"error: mirror unusable: {base} is no build cache: nothing is at any place one is "
        f"looked for:\n  {base}/cache_spack_io_index.json (a discovery document)\n"
        f"  {base}/{INDEX}/index.manifest.json (a build cache's index, Spack 1.0+)\n"
        f"  {base}/build_cache/index.json (a build cache's index, Spack 0.18-0.23)\n"
        "a build cache is what `spack buildcache push` and `spack buildcache update-index` write"
    ), err
