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
from crawler.documents import Changes, History, Index, PackageSummary, Report
from crawler.output.site import listing
from crawler.output.site.front import front_page, mirror_name, mirror_url
from crawler.output.site.layout import Frame, natural_key, script_json, search_keys, size_cell
from crawler.output.site.package import download_link
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


#: paraview's specs, in the order its page lists them: newest version first, then by target.
PARAVIEW = (("develop", "x86_64_v3"), ("5.10", "x86_64_v3"), ("5.10", "zen3"), ("5.9", "zen3"))


@pytest.fixture(scope="module")
def many_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A v3 mirror of 131 packages (``pkg-1`` to ``pkg-130`` of 8 specs each, and paraview's
    specs, given out of order), 1,044 specs in the stack ``data-vis-sdk``."""
    root = tmp_path_factory.mktemp("many")
    stacks = ("data-vis-sdk",)
    specs = [SynthSpec("paraview", v, target=t, stacks=stacks) for v, t in sorted(PARAVIEW)]
    specs += [
        SynthSpec(f"pkg-{i}", f"1.{v}", stacks=stacks) for i in range(1, 131) for v in range(8)
    ]
    build_mirror(root / "mirror", [SynthRef("develop", tuple(specs), layout="v3")])
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
    # Each spec links its tarball (as its spec manifest in the root's cache names it), shows
    # its size (its tarball's bytes, as index.json has them: exact in the title), and lists its
    # dependencies, folded.
    p.goto(_url(sample_site / "develop" / "site" / "packages" / "petsc.html"))
    rows = p.locator("#specs tbody tr")
    row = rows.first
    download = row.locator('a:text-is("tarball")')
    assert download.get_attribute("title") == "root"
    href = download.get_attribute("href") or ""
    assert href.startswith("file:") and "/blobs/sha256/" in href
    index = json.loads((sample_site / "develop" / "index.json").read_bytes())
    sizes = sorted(spec["size"] for spec in index["packages"]["petsc"]["spec_details"])
    cells = [rows.nth(i).locator("td").nth(8) for i in range(rows.count())]
    assert sorted(cell.get_attribute("data-value") or "" for cell in cells) == sizes
    assert all(size.isdigit() for size in sizes)
    assert sorted(cell.text_content() or "" for cell in cells) == [f"{s} B" for s in sizes]
    row.locator("details.deps summary").click()
    assert "gcc-runtime/" in (row.locator("details.deps").text_content() or "")


@pytest.mark.slow
def test_hostile_text_shows_as_text(hostile_site: Path, page: Page) -> None:
    p = page
    p.goto(_url(hostile_site / "develop" / "site" / "packages" / "zlib.html"))
    assert p.evaluate("window.pwned") is None
    row = p.locator("#specs tbody tr").first.text_content() or ""
    assert HOSTILE_VARIANT in row and HOSTILE_VERSION in row
    spec_file = p.locator('#specs a:text-is("spec file")')  # a v2 cache's
    assert (spec_file.get_attribute("href") or "").endswith(".spec.json.sig")
    p.goto(_url(hostile_site / "develop" / "site" / "packages" / "gcc-runtime.html"))
    assert p.locator("main > p").first.text_content() == "1 spec of 1 version (13.2.0) in 1 stack."
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


@pytest.mark.slow
def test_get_started_adds_this_branch_as_a_mirror_and_copies(sample_site: Path, page: Page) -> None:
    p = page
    p.context.grant_permissions(["clipboard-read", "clipboard-write"])
    p.goto(_url(sample_site / "develop" / "site" / "index.html"))
    commands = p.locator("#commands").text_content()
    cache = (SAMPLE_MIRROR / "develop").resolve().as_uri()
    assert commands == (
        f"spack mirror add local-develop {cache}\nspack buildcache keys --install --trust"
    )
    p.click("button.copy")
    p.locator('button.copy:text-is("Copied")').wait_for()
    assert p.evaluate("navigator.clipboard.readText()") == commands


def _documents(folder: Path) -> tuple[Index[PackageSummary], Changes, Report, History]:
    def read(name: str) -> bytes:
        return (folder / name).read_bytes()

    return (
        msgspec.json.decode(read("index.json"), type=Index[PackageSummary]),
        msgspec.json.decode(read("changes.json"), type=Changes),
        msgspec.json.decode(read("report.json"), type=Report),
        msgspec.json.decode(read("history.json"), type=History),
    )


@pytest.mark.slow
def test_get_started_never_shows_credentials_or_a_query(sample_site: Path) -> None:
    index, changes, report, history = _documents(sample_site / "develop")
    secret = (
        "https://user:secret@binaries.example.org/develop/v3/manifests/index/"
        "index.manifest.json?X-Amz-Signature=abc#top"
    )
    sources = [msgspec.structs.replace(s, location=secret) for s in report.sources or []]
    report = msgspec.structs.replace(report, sources=sources)
    assert mirror_url(report) == "https://binaries.example.org/develop"
    assert mirror_name("https://binaries.example.org/x", "rel/v1.0") == "binaries-rel-v1.0"
    front = front_page(index, changes, report, history, Frame("develop", "now"))
    assert "spack mirror add binaries-develop https://binaries.example.org/develop\n" in front
    assert "secret" not in front and "Signature" not in front and "#top" not in front


def test_a_download_link_says_what_it_links() -> None:
    manifest = "https://h/c/v3/manifests/spec/zlib/zlib-1.3-abc.spec.manifest.json"
    assert download_link(manifest, "root") == f'<a href="{manifest}" title="root">spec manifest</a>'
    blob = "https://h/c/blobs/sha256/ab/ab12?x=<1>"  # a tarball's URL names no kind
    assert download_link(blob, "e4s", "tarball") == (
        '<a href="https://h/c/blobs/sha256/ab/ab12?x=&lt;1&gt;" title="e4s">tarball</a>'
    )


def test_a_size_is_shown_in_decimal_units_and_sorted_by_its_bytes() -> None:
    assert size_cell("-") == "<td>-</td>"
    assert size_cell("٣") == "<td>-</td>"  # a digit, but not one index.json writes
    assert size_cell("88") == '<td data-value="88" title="88 bytes">88 B</td>'
    assert size_cell("12345678") == (
        '<td data-value="12345678" title="12,345,678 bytes">12.3 MB</td>'
    )
    assert size_cell("999999") == '<td data-value="999999" title="999,999 bytes">1.0 MB</td>'


def test_names_sort_naturally() -> None:
    names = ["paraview-10", "Paraview-3", "paraview-2", "paraview", "paraview-02", "py-a1b", "x1"]
    assert sorted([*names, "x"], key=natural_key) == [
        "paraview",
        "paraview-02",
        "paraview-2",
        "Paraview-3",
        "paraview-10",
        "py-a1b",
        "x",
        "x1",
    ]
    assert natural_key("x" + "9" * 5000) > natural_key("x" + "9" * 4999)  # no int() limit


@pytest.mark.slow
def test_the_table_of_all_packages_pages_filters_and_sorts(many_site: Path, page: Page) -> None:
    p = page
    p.goto(_url(many_site / "develop" / "site" / "index.html"))
    p.click('main a:text-is("All packages")')
    p.wait_for_url("**/site/all.html")
    rows = p.locator("#catalog tbody tr:visible")
    shown = p.locator("#catalog-shown")
    assert rows.count() == 100 and shown.text_content() == "1 to 100 of 131 packages"
    names = p.locator("#catalog tbody tr:visible td:first-child").all_text_contents()
    assert names[:4] == ["paraview", "pkg-1", "pkg-2", "pkg-3"] and names[-1] == "pkg-99"
    assert p.locator("#catalog tbody tr").first.locator("td").all_text_contents() == [
        "paraview",
        "3",
        "4",
        "1",
    ]
    p.click("#next")
    assert rows.count() == 31 and shown.text_content() == "101 to 131 of 131 packages"
    assert p.locator("#next").is_disabled()
    p.fill("#catalog-filter", "12")  # a word of the name: pkg-12, pkg-120 to pkg-129
    assert rows.count() == 11 and shown.text_content() == "1 to 11 of 11 packages"
    p.fill("#catalog-filter", "")
    p.click('th[data-sort="2"]')  # specs, ascending: paraview's 4 before the others' 8
    assert rows.first.locator("td").first.text_content() == "paraview"
    rows.first.locator("a").click()
    p.wait_for_url("**/packages/paraview.html")


@pytest.mark.slow
def test_pages_count_sort_and_frame_as_a_reader_expects(many_site: Path, page: Page) -> None:
    p = page
    p.goto(_url(many_site / "develop" / "site" / "index.html"))
    totals = dict(zip(*[iter(p.locator("table.totals td").all_text_contents())] * 2, strict=True))
    assert totals["Specs"] == "1,044" and totals["Packages"] == "131"
    assert totals["Stacks read"] == "1"  # the root's cache is not a stack
    more = p.locator('a:text-is("31 more")')
    assert more.get_attribute("href") == "../changes.json"
    report = json.loads((many_site / "develop" / "report.json").read_bytes())
    p.goto(_url(many_site / "develop" / "site" / "packages" / "paraview.html"))
    cells = p.locator("#specs tbody tr td:nth-child(2), #specs tbody tr td:nth-child(6)")
    shown = cells.all_text_contents()
    assert list(zip(shown[::2], shown[1::2], strict=True)) == list(PARAVIEW)
    intro = "4 specs of 3 versions (develop, 5.10, 5.9) in 1 stack."
    assert p.locator("main > p").first.text_content() == intro
    assert f"crawled {report['finished_at']}" in (p.locator("header").text_content() or "")
    footer = p.locator("footer")
    assert f"Branch develop, crawled {report['finished_at']}" in (footer.text_content() or "")
    elsewhere = footer.locator('a:text-is("paraview on packages.spack.io")')
    assert elsewhere.get_attribute("href") == "https://packages.spack.io/package.html?name=paraview"
    # A narrow window wraps the stacks and compilers between names, never inside one.
    p.set_viewport_size({"width": 360, "height": 800})
    p.goto(_url(many_site / "develop" / "site" / "packages" / "paraview.html"))
    lines = p.evaluate(
        """() => [...document.querySelectorAll("td.names span, td.name")].map((el) => {
            const range = document.createRange();
            range.selectNodeContents(el);
            return range.getClientRects().length;
        })"""
    )
    assert lines and set(lines) == {1}
