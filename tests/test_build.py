"""The build of a branch's documents (crawler.build.branch), in-process: no server, process
or file, only values in and values out."""

from __future__ import annotations

from dataclasses import dataclass, replace

from msgspec import UNSET

from bench.synth import make_hash
from crawler.build.branch import BuildInput, Built, Consolidated, Previous, Refused, build, filtered
from crawler.build.changes import load_published
from crawler.build.consolidate import Consolidator
from crawler.build.locations import Caches
from crawler.decode.validate import SourceSummary, SpecRow
from crawler.documents import IndexFilters, IndexSource, Report, SpecDependency
from crawler.linkfile import PackedDependency, PackedTarball, Resolving
from crawler.mirror.binaries import BinaryFacts
from crawler.output.render import encode_json

A, B, C, G = (make_hash(x) for x in ("a", "b", "c", "g"))
#: The root summary's table of edges, which its rows number.
EDGES = [SpecDependency(C, "alpha", ("link",)), SpecDependency(G, "gcc", ("build",), ("c",))]


def _row(key: str, name: str, version: str = "1.0", edges: tuple[int, ...] = ()) -> SpecRow:
    return SpecRow(key, name, version, "linux", "ubuntu24.04", "x86_64", "gcc@13.2.0", (), edges)


ROOT = SourceSummary(
    "8",
    3,
    3,
    [A, B, C],
    [_row(A, "alpha", edges=(0, 1)), _row(B, "beta", edges=(1,)), _row(C, "alpha", "2.0")],
    [],
    [],
    dependencies=EDGES,
)


def _consolidated(root: SourceSummary) -> Consolidated:
    """``root`` consolidated as a sync does, its specs in the cache ``https://m`` (v3)."""
    consolidator = Consolidator()
    packages, conflicts = consolidator.finish(root, Caches({"root": ("https://m", "v3")}))
    return Consolidated(packages, conflicts, consolidator.links("develop"))


@dataclass
class _Read:
    """A source as the sync read it (the protocol BuiltSource)."""

    label: str
    summary: SourceSummary | None
    status: str = "fetched"

    def index_entry(self) -> IndexSource:
        return IndexSource(
            label=self.label, url=f"https://m/{self.label}", layout="v2", status="ok"
        )


def _given(**changed: object) -> BuildInput:
    given = BuildInput(
        branch="develop",
        mirror="https://m",
        sources=[_Read("root", ROOT)],
        consolidated=_consolidated(ROOT),
        facts={},
        previous=Previous(),
        filters=None,
        max_drop=0.5,
        report=Report(tool="t", branch="develop", mirror="https://m", started_at="now"),
    )
    return replace(given, **changed)  # type: ignore[arg-type]


def test_a_first_build_adds_every_spec_and_counts_them() -> None:
    built = build(_given())
    assert isinstance(built, Built)
    assert built.index.stats.specs == 3 and built.index.stats.packages == 2
    assert sorted(built.changes.added) == ["alpha", "beta"]
    assert set(built.links.specs) == {A, B, C}
    # The links as links.json states them: each edge once, numbered as the specs use them.
    assert built.links.edges == [
        PackedDependency(C, ("link",)),
        PackedDependency(G, ("build",), ("c",)),
    ]
    assert built.links.names == {C: "alpha", G: "gcc"}
    assert built.links.caches == {"root": "https://m"}
    resolved = Resolving(built.links)
    assert resolved[A].dependencies == tuple(EDGES) and resolved[B].dependencies == (EDGES[1],)
    manifest = f"https://m/v3/manifests/spec/beta/beta-1.0-{B}.spec.manifest.json"
    assert resolved[B].locations == {"root": manifest}
    assert built.report.stats == built.index.stats


def test_the_callers_report_is_left_as_it_was() -> None:
    given = _given()
    built = build(given)
    assert built.report.stats is not UNSET and built.report.conflicts_total == 0
    assert given.report.stats is UNSET and given.report.conflicts_total is UNSET


def test_too_large_a_drop_is_refused_and_the_report_keeps_the_stats() -> None:
    refused = build(_given(previous=Previous(count=10)))
    assert isinstance(refused, Refused)
    assert "refused to publish: 3 specs against 10 published" in refused.message
    assert refused.report.stats == build(_given(max_drop=None)).report.stats


def test_no_gate_when_forced() -> None:
    assert isinstance(build(_given(previous=Previous(count=10), max_drop=None)), Built)


def test_changes_are_against_the_last_publish() -> None:
    first = build(_given())
    assert isinstance(first, Built)
    last = load_published(bytes(encode_json(first.index)))
    smaller = SourceSummary("8", 2, 2, [A, B], [_row(A, "alpha"), _row(B, "beta")], [], [])
    again = build(
        _given(
            consolidated=_consolidated(smaller),
            sources=[_Read("root", smaller)],
            previous=Previous(published=last),
        )
    )
    assert isinstance(again, Built)
    assert again.changes.added == {} and again.changes.removed == {"alpha": [C]}
    assert [r.hash for r in again.changes.removed_specs["alpha"]] == [C]


def test_filters_keep_their_packages_and_the_links_of_their_specs_alone() -> None:
    given = _given()
    kept = filtered(given.consolidated, lambda name: name == "beta")
    assert list(kept.packages) == ["beta"] and list(kept.links.specs) == [B]
    # Its edges alone, numbered anew.
    assert kept.links.edges == [PackedDependency(G, ("build",), ("c",))]
    assert kept.links.specs[B].dependencies == (0,) and kept.links.names == {G: "gcc"}
    assert Resolving(kept.links)[B] == Resolving(given.consolidated.links)[B]
    built = build(replace(given, consolidated=kept, filters=IndexFilters(packages=["beta"])))
    assert isinstance(built, Built) and built.index.filters == IndexFilters(packages=["beta"])


def test_a_tarballs_size_and_url_come_from_its_manifest() -> None:
    facts = {
        A: ("root", BinaryFacts(manifest="https://m/a.json", size=1234, tarball="https://m/t"))
    }
    built = build(_given(facts=facts))
    assert isinstance(built, Built)
    sizes = {d.hash: d.size for p in built.index.packages.values() for d in p.spec_details}
    assert sizes == {A: "1234", B: "-", C: "-"}
    assert built.links.specs[A].tarball == PackedTarball("root", "t")
    assert Resolving(built.links)[A].tarball == "https://m/t"
