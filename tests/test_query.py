"""The consumer's API: load_index / load_report / load_changes on a real publish of the sample
mirror, and the queries (by name, version, target, family, host, os, platform, compiler,
variant, stack) on it and on a generated index of a few thousand specs."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

import crawler
from crawler.cli.command import main
from crawler.consume.load import load_packages
from crawler.consume.versions import parse_versions, version_key
from crawler.consumer_errors import (
    NotABranchError,
    QueryError,
    SchemaVersionError,
    UnknownTargetError,
)
from crawler.documents import Index, IndexStats, PackageMeta, PackageSummary, SpecDetail
from crawler.errors import ExitCode
from crawler.targets import Targets

from .conftest import SAMPLE_MIRROR


def sync_sample(output: Path) -> None:
    """Publish every ref of the sample mirror into ``output`` (in this process: a module's
    fixture, whose readers run find, diff and the API; a real process adds nothing to them)."""
    argv = ["sync", "--all", "--mirror", str(SAMPLE_MIRROR), "--output", str(output)]
    assert main([*argv, "--format", "json", "-q"]) == 0


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample mirror's output folder, published once for the module."""
    output = tmp_path_factory.mktemp("sample") / "output"
    sync_sample(output)
    return output


def _spec(
    n: int, target: str, compiler: str, variants: tuple[str, ...], stacks: list[str]
) -> SpecDetail:
    return SpecDetail(
        compiler=compiler,
        hash=f"{n:032d}",
        os="ubuntu24.04" if n % 3 else "sequoia",
        platform="linux" if n % 3 else "darwin",
        size="-",
        stacks=tuple(sorted({"root", *stacks})),
        target=target,
        variants=variants,
        versions=(f"1.{n % 12}.{n % 5}",),
    )


TARGETS = ("x86_64_v3", "zen3", "zen4", "skylake_avx512", "neoverse_v1", "neoverse_v2", "m1")
UNKNOWN = "zen99_future"


def generated_index(packages: int = 300, per: int = 10) -> Index[PackageSummary]:
    """An index of ``packages * per`` specs over known targets, and one archspec does not
    know (``zen99_future``) on the first spec of every package."""
    specs: dict[str, list[SpecDetail]] = {}
    n = 0
    for p in range(packages):
        package = specs[f"pkg-{p:04d}"] = []
        for i in range(per):
            target = UNKNOWN if i == 0 else TARGETS[(p + i) % len(TARGETS)]
            compiler = ("gcc@13.2.0", "gcc@11.4.0", "apple-clang@16.0.0", "none")[n % 4]
            variants = ("+mpi" if n % 2 else "~mpi", f"cuda_arch={'70,80,90' if n % 5 else '80'}")
            package.append(_spec(n, target, compiler, variants, ["e4s" if n % 2 else "hep"]))
            n += 1
    return index_of(specs)


def index_of(specs: dict[str, list[SpecDetail]]) -> Index[PackageSummary]:
    """An index of these packages' specs (their ``meta`` left empty)."""
    summaries = {
        name: PackageSummary(PackageMeta([], len(its), {}, [], [], [], [], []), its)
        for name, its in specs.items()
    }
    total = sum(len(its) for its in specs.values())
    stats = IndexStats(packages=len(specs), specs=total, sources=1, sources_missing=0)
    return Index(branch="develop", sources=[], stats=stats, packages=summaries)


def branch_of(tmp_path_factory: pytest.TempPathFactory, index: Index[PackageSummary]) -> Path:
    """A branch folder holding ``index`` as its ``index.json`` alone."""
    folder = tmp_path_factory.mktemp("branch") / "develop"
    folder.mkdir()
    (folder / "index.json").write_bytes(msgspec.json.encode(index))
    return folder


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return branch_of(tmp_path_factory, generated_index())


# --- loading ---------------------------------------------------------------------------------


def test_load_index_report_and_changes_of_a_published_branch(sample: Path) -> None:
    index = crawler.load_index(sample / "develop")
    assert index.branch == "develop" and index.stats.specs == 58
    assert isinstance(index.packages["zlib"].spec_details[0], crawler.SpecDetail)
    assert crawler.load_index(sample / "develop" / "index.json") == index  # the file itself
    report = crawler.load_report(sample / "develop")
    assert report.branch == "develop" and report.status == "published"
    changes = crawler.load_changes(sample / "develop")
    assert changes.first_publish and changes.totals.specs_after == 58


def test_load_packages_decodes_only_what_is_looked_up(sample: Path) -> None:
    packages = load_packages(sample / "develop")
    assert len(packages) == 30 and "zlib" in packages and "nope" not in packages
    assert packages["zlib"] == crawler.load_index(sample / "develop").packages["zlib"]


@pytest.mark.damages_output
def test_a_query_reads_one_package_at_a_time(sample: Path, tmp_path: Path) -> None:
    """The matches of the first package come before the last one, broken, is decoded; and
    nothing of a package is kept once looked up (each lookup decodes it anew)."""
    branch = tmp_path / "develop"
    shutil.copytree(sample / "develop", branch)
    document = json.loads((branch / "index.json").read_bytes())
    first, *_, last = document["packages"]
    document["packages"][last]["meta"]["num_specs"] = "three"
    (branch / "index.json").write_text(json.dumps(document))
    packages = load_packages(branch)
    matches = crawler.Query().each(packages, Targets())
    assert next(matches).name == first
    with pytest.raises(NotABranchError, match=f"package '{last}': Expected `int`, got `str`"):
        list(matches)
    assert packages[first] == packages[first] and packages[first] is not packages[first]


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("missing", "no such folder"),
        (".", "an output folder, not a branch folder (give one of its branches: develop, "),
        ("nope", "no such branch published in"),
        ("empty", "it holds no index.json"),
        ("loop", "a symbolic link that leads nowhere, or round in a loop"),
        (".crawler/state", "a folder of "),
    ],
)
def test_a_path_that_is_no_published_branch_is_named(
    sample: Path, tmp_path: Path, where: str, says: str
) -> None:
    output = tmp_path / "output"  # a copy: the module's sample stays as published
    shutil.copytree(sample, output, symlinks=True)
    (output / "empty").mkdir()
    (output / "loop").symlink_to("loop")
    path = output / where if where != "missing" else tmp_path / "missing"
    with pytest.raises(NotABranchError) as caught:
        crawler.load_index(path)
    assert str(path) in str(caught.value) and says in str(caught.value)
    assert caught.value.exit_code == ExitCode.NOT_A_BRANCH
    assert int(caught.value.exit_code) == 11


@pytest.mark.parametrize(
    ("text", "error", "says"),
    [
        (b"[1, 2]", NotABranchError, "not a JSON object"),
        (b'{"schema_version": 1, "branch": 3}', NotABranchError, "not an index.json as a publish"),
        (b'{"schema_version": 3, "branch": 3}', SchemaVersionError, "is newer than this crawler"),
        (b'{"schema_version": "1"}', SchemaVersionError, "schema_version '1', unknown"),
    ],
)
@pytest.mark.parametrize("load", [crawler.load_index, load_packages])
def test_a_damaged_or_newer_index_is_refused_with_its_own_error(
    tmp_path: Path, text: bytes, error: type[Exception], says: str, load: Callable[[Path], object]
) -> None:
    """Also by ``load_packages`` (what find and diff read): a newer index of another shape
    said exit 11, not 12 (upgrade)."""
    (tmp_path / "develop").mkdir()
    (tmp_path / "develop" / "index.json").write_bytes(text)
    with pytest.raises(error, match=says):
        load(tmp_path / "develop")


def test_a_newer_index_of_the_same_shape_is_refused_too(sample: Path, tmp_path: Path) -> None:
    document = json.loads((sample / "develop" / "index.json").read_bytes())
    document["schema_version"] = 3
    (tmp_path / "develop").mkdir()
    (tmp_path / "develop" / "index.json").write_text(json.dumps(document))
    with pytest.raises(SchemaVersionError) as caught:
        crawler.load_index(tmp_path / "develop")
    assert caught.value.exit_code == 12 and "upgrade spack-cache-crawler" in str(caught.value)


# --- versions --------------------------------------------------------------------------------


def test_versions_sort_as_spack_sorts_them() -> None:
    ordered = ["1.2", "1.2.rc1", "1.2.0", "1.2.1", "1.9", "1.10", "2", "main", "develop"]
    assert sorted(reversed(ordered), key=version_key) == ordered
    # Numbers of any length, as numbers (int() refuses over 4,300 digits: an internal error)
    huge = "1" * 5000
    numbers = ["0.9", "00.010", f"0.{huge}", "1", "09", f"{huge}.0", "develop"]
    assert sorted(reversed(numbers), key=version_key) == numbers
    assert version_key("01.2") == version_key("1.2") and parse_versions(f"{huge}:")(f"{huge}.1")


@pytest.mark.parametrize(
    ("query", "inside", "outside"),
    [
        ("1.26", ["1.26", "1.26.4"], ["1.260", "1.2", "1.27"]),
        ("=1.26", ["1.26"], ["1.26.4"]),
        ("1.2:1.4", ["1.2", "1.3.9", "1.4", "1.4.2"], ["1.1.9", "1.5", "1.10"]),
        ("1.10:", ["1.10", "2.0", "develop"], ["1.9"]),
        (":1.4", ["0.1", "1.4.7"], ["1.5"]),
        ("1.2,3.0:", ["1.2.5", "3.1"], ["2.0"]),
    ],
)
def test_version_queries(query: str, inside: list[str], outside: list[str]) -> None:
    test = parse_versions(query)
    assert [v for v in inside + outside if test(v)] == inside


@pytest.mark.parametrize("query", ["", ":", "1.2:1:3", "1.4:1.2", "1 2", "=", "1.2;"])
def test_a_malformed_version_is_a_usage_error(query: str) -> None:
    with pytest.raises(QueryError, match="bad version") as caught:
        parse_versions(query)
    assert caught.value.exit_code == ExitCode.USAGE


# --- queries ---------------------------------------------------------------------------------


def _names(found: crawler.Found) -> list[str]:
    return sorted({m.name for m in found})


def test_each_query_kind_on_the_sample(sample: Path) -> None:
    index = crawler.load_index(sample / "develop")
    find = crawler.find_specs
    assert _names(find(index, name="py-numpy")) == ["py-numpy"]
    assert _names(find(index, name="py-*")) == ["py-numpy", "py-pandas", "py-scipy"]
    assert all(m.spec.target == "zen3" for m in find(index, target="zen3")) and find(
        index, target="zen3"
    )
    aarch64 = find(index, family="aarch64")
    assert {m.spec.target for m in aarch64} == {"aarch64", "neoverse_v1", "m1"}
    # x86_64_v3 binaries run on zen3, zen3's too; no aarch64 binary does
    assert {m.spec.target for m in find(index, runs_on="zen3")} == {"x86_64_v3", "zen3"}
    assert {m.spec.target for m in find(index, runs_on="neoverse_v1")} == {"aarch64", "neoverse_v1"}
    assert {m.spec.os for m in find(index, os="sequoia")} == {"sequoia"}
    assert {m.spec.platform for m in find(index, platform="darwin")} == {"darwin"}
    assert {m.spec.compiler for m in find(index, compiler="gcc")} == {"gcc@13.2.0", "gcc@11.4.0"}
    assert {m.spec.compiler for m in find(index, compiler="gcc@13")} == {"gcc@13.2.0"}
    assert {m.spec.compiler for m in find(index, compiler="none")} == {"none"}
    assert all("+mpi" in m.spec.variants for m in find(index, variants="+mpi"))
    assert all("e4s" in m.spec.stacks for m in find(index, stack="e4s"))
    both = find(index, variants=["+mpi", "~openmp"], family="x86_64")
    assert all({"+mpi", "~openmp"} <= set(m.spec.variants) for m in both)
    assert len(find(index)) == 58 and not find(index, name="nope")


def test_a_multi_valued_variant_holds_the_values_asked_for(big: Path) -> None:
    index = crawler.load_index(big)
    assert len(crawler.find_specs(index, variants="cuda_arch=80")) == 3000
    assert len(crawler.find_specs(index, variants="cuda_arch=90,70")) == 2400
    assert len(crawler.find_specs(index, variants="cuda_arch=60")) == 0


def test_runs_on_follows_archspec_and_reports_unknown_targets(big: Path) -> None:
    index = crawler.load_index(big)
    found = crawler.find_specs(index, runs_on="zen4")
    assert {m.spec.target for m in found} == {"x86_64_v3", "zen3", "zen4"}
    assert found.unknown_targets == {UNKNOWN}
    assert not crawler.find_specs(
        index, name="pkg-000*"
    ).unknown_targets  # not asked: not looked at
    by_family = crawler.find_specs(index, family="aarch64")
    assert {m.spec.target for m in by_family} == {"neoverse_v1", "neoverse_v2", "m1"}
    assert by_family.unknown_targets == {UNKNOWN}
    assert len(crawler.find_specs(index, target=UNKNOWN)) == 300  # exact names need no archspec


def test_queries_combine_on_a_generated_index(big: Path) -> None:
    index = crawler.load_index(big)
    found = crawler.find_specs(
        index,
        name="pkg-01*",
        version="1.2:1.4",
        compiler="gcc@13",
        runs_on="neoverse_v2",
        stack="hep",
    )
    for match in found:
        assert match.name.startswith("pkg-01") and match.spec.compiler == "gcc@13.2.0"
        assert match.spec.target in {"neoverse_v1", "neoverse_v2"} and "hep" in match.spec.stacks
        assert version_key("1.2") <= version_key(match.spec.versions[0]) < version_key("1.5")
    assert found  # the criteria were chosen so that some specs meet them all


def test_narrowing_says_how_many_specs_each_criterion_leaves(sample: Path) -> None:
    """What ``find`` says when nothing matched: the criteria taken in turn (the name first),
    up to the first that no spec meets; each count matches a query of the criteria so far."""
    packages = crawler.load_index(sample / "develop").packages
    query = crawler.Query(name="py-*", family="aarch64", compiler="gcc@99", variants="+mpi")
    assert query.narrowing(packages) == [
        (len(crawler.Query(name="py-*").select(packages)), "named py-*"),
        (
            len(crawler.Query(name="py-*", family="aarch64").select(packages)),
            "of family aarch64",
        ),
        (0, "with compiler gcc@99"),
    ]
    assert crawler.Query(os="nope").narrowing(packages) == [(0, "with os nope")]
    assert crawler.Query(name="zlib").narrowing(packages) == [(2, "named zlib")]


@pytest.mark.parametrize(
    ("name", "load"),
    [
        ("index.json", crawler.load_index),
        ("index.json", load_packages),
        ("history.json", crawler.load_history),
        ("links.json", crawler.load_links),
    ],
)
@pytest.mark.damages_output
def test_a_document_nested_too_deeply_is_no_branch_for_readers_and_verify(
    sample: Path, tmp_path: Path, name: str, load: Callable[[Path], object]
) -> None:
    """A value nested thousands deep (a published folder is anyone's to write) made msgspec
    and json give up with RecursionError, an internal error of every consumer command and of
    verify. It is a folder that is no published branch (exit 11), and verify's problem."""
    branch = tmp_path / "develop"
    shutil.copytree(sample / "develop", branch)
    document = branch / name
    deep = "[" * 5000 + "]" * 5000
    document.write_text(document.read_text().replace("{", '{"zzz":' + deep + ",", 1))
    with pytest.raises(NotABranchError, match="nested too deeply"):
        load(branch)
    assert f"{name}: not readable JSON: nested too deeply" in crawler.verify_branch(branch) or (
        name == "links.json"
        and "links.json: not a links.json as a publish writes it: nested too deeply"
        in crawler.verify_branch(branch)
    )


@pytest.mark.parametrize(
    ("criteria", "error", "code"),
    [
        ({"runs_on": "zen99"}, UnknownTargetError, 13),
        ({"family": "zen3"}, UnknownTargetError, 13),
        ({"compiler": "@13"}, QueryError, 2),
        ({"variants": "mpi"}, QueryError, 2),
        ({"variants": "cuda_arch="}, QueryError, 2),
        ({"version": "1.2:1:3"}, QueryError, 2),
    ],
)
def test_a_bad_query_is_refused_before_any_index_is_read(
    criteria: crawler.consume.query.Criteria, error: type[crawler.CrawlerError], code: int
) -> None:
    with pytest.raises(error) as caught:
        crawler.Query(**criteria)
    assert caught.value.exit_code == code
    crawler.Query(family="x86")  # a family, if not x86_64's
