"""The ``html`` format: the site a publish writes, opened in a real headless Chromium
(playwright driving Debian's ``/usr/bin/chromium``) from ``file://``, with every request that
is not a local file refused and reported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import yaml
from playwright.sync_api import Browser, Page, Route, sync_playwright

from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.output.site import listing
from crawler.output.site.layout import script_json, search_keys
from tests.conftest import SAMPLE_MIRROR, cli_env, fast_config

CHROMIUM = Path("/usr/bin/chromium")
#: A variant and a version a hostile mirror could hold: shown as text, never run.
HOSTILE_VARIANT = "<script>window.pwned=1</script>"
HOSTILE_VERSION = '1.0"><img src=x onerror="window.pwned=2">'


def _sync(mirror: Path, output: Path, *args: str) -> None:
    config = output.parent / f"{output.name}.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(mirror), output)))
    command = [sys.executable, "-m", "crawler", "sync", "--config", str(config), *args]
    done = subprocess.run(command, env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def sample_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample mirror's output folder, every ref published with its site."""
    output = tmp_path_factory.mktemp("site") / "out"
    _sync(SAMPLE_MIRROR, output, "--all", "--format", "json,html")
    return output


@pytest.fixture(scope="module")
def hostile_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A mirror whose package has a variant and a version that are HTML; the others depend
    on gcc-runtime, which has a page of its own too."""
    root = tmp_path_factory.mktemp("hostile")
    specs = (
        SynthSpec("zlib", HOSTILE_VERSION, variants=((HOSTILE_VARIANT, True),), stacks=("e4s",)),
        SynthSpec("c++-tools", "2.0", stacks=("e4s",)),
        SynthSpec("gcc-runtime", "13.2.0", stacks=("e4s",)),
    )
    build_mirror(root / "mirror", [SynthRef("develop", specs)])
    _sync(root / "mirror", root / "out", "--branch", "develop", "--format", "html")
    return root / "out"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip("no /usr/bin/chromium (.ci/run installs it: apt-get install chromium)")
    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
    ]
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=args)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page whose every request must be a local file (or loopback): others are refused, and
    the test fails naming them."""
    context = browser.new_context()
    left: list[str] = []

    def route(route: Route) -> None:
        url = route.request.url
        local = url.startswith(("file://", "http://127.0.0.1", "http://localhost", "data:"))
        if local:
            route.continue_()
        else:
            left.append(url)
            route.abort()

    context.route("**/*", route)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda err: errors.append(str(err)))
    yield opened
    context.close()
    assert left == [], f"requests that would leave the machine: {left}"
    assert errors == [], f"JavaScript errors: {errors}"


def _url(path: Path) -> str:
    return path.resolve().as_uri()


@pytest.mark.slow
def test_search_finds_a_package_by_a_word_of_its_name(sample_site: Path, page: Page) -> None:
    p = page
    p.goto(_url(sample_site / "develop" / "site" / "index.html"))
    p.fill("#search", "numpy")
    result = p.locator("#results a")
    result.first.wait_for()
    assert result.all_text_contents() == ["py-numpy"]
    result.first.click()
    p.wait_for_url("**/packages/py-numpy.html")
    assert p.locator("h1").text_content() == "py-numpy"


@pytest.mark.slow
def test_a_filter_narrows_the_table_and_a_header_sorts_it(sample_site: Path, page: Page) -> None:
    p = page
    p.goto(_url(sample_site / "develop" / "site" / "packages" / "mpich.html"))
    rows = p.locator("#specs tbody tr:visible")
    assert rows.count() == 3
    p.select_option('select[data-filter="os"]', "sequoia")
    assert rows.count() == 1
    assert p.locator("#shown").text_content() == "1 of 3 specs"
    p.select_option('select[data-filter="os"]', "")
    index = json.loads((sample_site / "develop" / "index.json").read_bytes())
    specs = index["packages"]["mpich"]["spec_details"]
    in_e4s = sum("e4s" in spec["stacks"] for spec in specs)
    p.select_option('select[data-filter="stacks"]', "e4s")
    assert 0 < rows.count() == in_e4s < 3
    p.select_option('select[data-filter="stacks"]', "")
    on_x86 = sum(spec["family"] == "x86_64" for spec in specs)
    p.select_option('select[data-filter="family"]', "x86_64")
    assert 0 < rows.count() == on_x86 < 3
    p.select_option('select[data-filter="family"]', "")
    p.click('th[data-sort="4"]')  # OS, ascending
    oss = p.locator("#specs tbody tr td:nth-child(5)").all_text_contents()
    assert oss == sorted(oss)
    p.click('th[data-sort="4"]')
    assert p.locator("#specs tbody tr td:nth-child(5)").all_text_contents() == sorted(oss)[::-1]


@pytest.mark.slow
def test_links_reach_package_pages_and_branches(sample_site: Path, page: Page) -> None:
    p = page
    p.goto(_url(sample_site / "index.html"))
    kinds = p.locator("tbody tr td:nth-child(2)").all_text_contents()
    assert kinds == ["ref", "snapshot", "release"]
    p.click("text=develop")
    p.wait_for_url("**/develop/site/index.html")
    p.click('ul.letters a:text-is("z")')
    p.click('a:text-is("zlib-ng")')
    p.wait_for_url("**/packages/zlib-ng.html")
    # Each spec's download locations are links; its dependencies are listed, folded.
    p.goto(_url(sample_site / "develop" / "site" / "packages" / "petsc.html"))
    row = p.locator("#specs tbody tr").first
    assert (row.locator('a:text-is("root")').get_attribute("href") or "").startswith("file:")
    row.locator("details.deps summary").click()
    assert "gcc-runtime/" in (row.locator("details.deps").text_content() or "")


@pytest.mark.slow
def test_hostile_text_shows_as_text(hostile_site: Path, page: Page) -> None:
    p = page
    p.goto(_url(hostile_site / "develop" / "site" / "packages" / "zlib.html"))
    assert p.evaluate("window.pwned") is None
    row = p.locator("#specs tbody tr").first.text_content() or ""
    assert HOSTILE_VARIANT in row and HOSTILE_VERSION in row
    p.goto(_url(hostile_site / "develop" / "site" / "index.html"))
    p.fill("#search", "c++")
    p.locator("#results a").first.click()
    assert p.locator("h1").text_content() == "c++-tools"


@pytest.mark.slow
def test_dependencies_link_to_their_rows_once_unfolded(
    hostile_site: Path, page: Page, browser: Browser
) -> None:
    zlib = _url(hostile_site / "develop" / "site" / "packages" / "zlib.html")
    p = page
    p.goto(zlib)
    deps = p.locator("#specs tbody tr details.deps").first
    assert deps.locator("a").count() == 0  # lines of text until unfolded
    deps.locator("summary").click()
    link = deps.locator("a", has_text="gcc-runtime/")
    link.wait_for()
    assert (link.get_attribute("href") or "").startswith("gcc-runtime.html#")
    assert "compiler-wrapper/" in (deps.text_content() or "")  # no page: text
    link.click()
    p.wait_for_url("**/packages/gcc-runtime.html#*")
    # Without JavaScript: the lines as text, and the packages they belong to linked under.
    context = browser.new_context(java_script_enabled=False)
    plain = context.new_page()
    plain.goto(zlib)
    assert "gcc-runtime/" in (plain.locator("#specs details.deps").first.text_content() or "")
    plain.click('#depends a:text-is("gcc-runtime")')
    plain.wait_for_url("**/packages/gcc-runtime.html")
    context.close()


@pytest.mark.slow
def test_pages_work_without_javascript(sample_site: Path, browser: Browser) -> None:
    context = browser.new_context(java_script_enabled=False)
    p = context.new_page()
    p.goto(_url(sample_site / "develop" / "site" / "packages" / "mpich.html"))
    assert p.locator("#specs tbody tr:visible").count() == 3
    assert not p.locator("#filters").is_visible()  # no filters that would not work
    p.goto(_url(sample_site / "develop" / "site" / "index.html"))
    assert not p.locator("#search").is_visible()
    assert p.locator("ul.letters a").count() == 17
    context.close()


@pytest.mark.parametrize(
    ("name", "manifest", "expected"),
    [
        ("develop", "", "ref"),
        ("v0.23.1", "", "release"),
        ("develop-2025-04-20", "", "snapshot"),
        ("nightly", "s3://b/c/v3/manifests/index/nightly/index.manifest.json", "view"),
        ("site", "s3://b/c/v3/manifests/index/index.manifest.json", "ref"),
    ],
)
def test_the_list_of_branches_tells_their_kind(name: str, manifest: str, expected: str) -> None:
    summary = msgspec.convert({"sources": [{"manifest": manifest}]}, listing.Summary)
    assert listing.kind(name, summary) == expected


def test_search_keys_and_script_data() -> None:
    assert search_keys("py-numpy") == {"p", "n"}
    assert search_keys("C++_x.y") == {"c", "x", "y"}
    assert "</script>" not in script_json(["</script>"])


@pytest.mark.slow
def test_verify_accepts_the_site_and_reports_a_stray_in_it(sample_site: Path) -> None:
    folder = sample_site / "v0.23.1"
    verify = [sys.executable, "-m", "crawler", "verify", str(folder)]
    done = subprocess.run(verify, env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    (folder / "site" / "packages" / "notes.txt").write_text("mine")
    try:
        done = subprocess.run(verify, env=cli_env(), capture_output=True, text=True, timeout=60)
    finally:
        (folder / "site" / "packages" / "notes.txt").unlink()
    assert done.returncode != 0
    assert "site/packages/notes.txt" in done.stdout
    inside = [sys.executable, "-m", "crawler", "verify", str(folder / "site")]
    done = subprocess.run(inside, env=cli_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr  # a usage error, naming the branch folder
    assert "a folder inside the branch folder" in done.stderr


@pytest.mark.slow
def test_a_branch_keeps_its_site_unless_formats_are_pruned(tmp_path: Path) -> None:
    output = tmp_path / "out"
    _sync(SAMPLE_MIRROR, output, "--branch", "develop", "--format", "html")
    site = output / "develop" / "site"
    assert (site / "index.html").is_file() and (output / "index.html").is_file()
    (site / "index.html").unlink()  # damaged: published again, with its site, though not asked
    _sync(SAMPLE_MIRROR, output, "--branch", "develop", "--format", "json")
    assert (site / "index.html").is_file()
    _sync(SAMPLE_MIRROR, output, "--branch", "develop", "--format", "json", "--prune-formats")
    assert not site.exists()


@pytest.mark.slow
def test_the_front_page_plots_specs_over_the_publishes(tmp_path: Path, page: Page) -> None:
    mirror, output = tmp_path / "mirror", tmp_path / "out"
    specs = [SynthSpec("zlib", "1.3", stacks=("e4s",)), SynthSpec("cmake", "3.30", stacks=("e4s",))]
    front = _url(output / "develop" / "site" / "index.html")
    over_time = 'figure:has(figcaption:text-is("Specs over the last publishes"))'
    points = []
    for grown in (specs, [*specs, SynthSpec("curl", "8.10", stacks=("hep",))]):
        shutil.rmtree(mirror, ignore_errors=True)
        build_mirror(mirror, [SynthRef("develop", tuple(grown))])
        _sync(mirror, output, "--branch", "develop", "--format", "html")
        page.goto(front)
        points.append(page.locator(f"{over_time} circle").count())
    assert points == [0, 2]  # one publish is no line
    titles = page.locator(f"{over_time} circle title").all_text_contents()
    assert [t.rsplit(": ", 1)[1] for t in titles] == ["2 specs", "3 specs"]
    bars = page.locator('figure:has(figcaption:text-is("Specs per stack")) rect title')
    assert sorted(bars.all_text_contents()) == ["e4s: 2", "hep: 1", "root: 3"]
