"""Consolidating stacks one by one, in any order, gives what consolidating them at once gives.

A sync folds each stack in as soon as it is decoded, before or after the root (the early
consolidation of crawler.sync.collect), so the order depends on which download finishes first.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from bench.synth import make_hash
from crawler.build.consolidate import Consolidator, consolidate, prepare_root
from crawler.decode.validate import SourceSummary, SpecRow
from crawler.documents import Conflict, PackageSummary

A, B, C, ONLY_IN_STACK = (make_hash(x) for x in ("a", "b", "c", "stack only"))


def _row(key: str, name: str, version: str = "1.0", target: str = "x86_64") -> SpecRow:
    return SpecRow(key, name, version, "linux", "ubuntu24.04", target, "gcc@13.2.0", ("+shared",))


ROOT_ROWS = [_row(A, "alpha"), _row(B, "beta"), _row(C, "alpha", "2.0")]
ROOT = SourceSummary("8", 3, 3, [A, B, C], ROOT_ROWS, [], [])


def _stack(*rows: SpecRow) -> SourceSummary:
    hashes = [r.hash for r in rows]
    return SourceSummary("8", len(rows), 0, hashes, [], [r.identity() for r in rows], [])


STACKS = {
    "e4s": _stack(_row(A, "alpha"), _row(B, "beta")),
    "ml": _stack(_row(C, "alpha", "2.0", target="zen4"), _row(ONLY_IN_STACK, "gamma")),
    "hep": _stack(_row(B, "beta", "9.9")),  # disagrees on the version
    "aaa": _stack(),
}


def _in_every_order(
    stacks: dict[str, SourceSummary],
) -> Iterator[tuple[dict[str, PackageSummary], list[Conflict]]]:
    """What finishing gives after folding ``stacks`` in, for each order they can come in, and
    with the root prepared before, between or after them, or not at all, and prepared by
    :func:`prepare_root` beforehand (as a sync does, in a thread) or by the consolidator."""
    for order, ahead in itertools.product(itertools.permutations(stacks), (False, True)):
        for prepared_at in range(len(order) + 2):
            consolidator = Consolidator()
            prepared = prepare_root(ROOT) if ahead else None
            for i, label in enumerate(order):
                if i == prepared_at:
                    consolidator.prepare(ROOT, prepared)
                consolidator.add(label, stacks[label].hashes, stacks[label].identities)
            if prepared_at == len(order):
                consolidator.prepare(ROOT, prepared)
            assert consolidator.folded == set(stacks)
            yield consolidator.finish(ROOT)


def test_stacks_folded_in_any_order_give_the_same_summaries_and_conflicts() -> None:
    expected = consolidate(ROOT, STACKS)
    packages, conflicts = expected
    stacks = {d.hash: d.stacks for p in packages.values() for d in p.spec_details}
    assert stacks == {A: ("e4s", "root"), B: ("e4s", "hep", "root"), C: ("ml", "root")}
    assert [(c.hash, c.source, c.field, c.root, c.stack) for c in conflicts] == [
        (B, "hep", "version", "1.0", "9.9"),
        (C, "ml", "target", "x86_64", "zen4"),
    ]
    for result in _in_every_order(STACKS):
        assert result == expected


def test_stacks_that_disagree_with_each_other_are_each_compared_with_the_root() -> None:
    """Folding keeps what the first stack holding a hash says, and only what the others say
    when it differs: each stack still gets its own conflicts, whichever comes first."""
    stacks = {
        "same": _stack(_row(A, "alpha")),
        "v2": _stack(_row(A, "alpha", "2.0")),
        "v3": _stack(_row(A, "alpha", "3.0", target="zen4")),
        "v2-too": _stack(_row(A, "alpha", "2.0")),
    }
    expected = [
        (A, "v2", "version", "1.0", "2.0"),
        (A, "v2-too", "version", "1.0", "2.0"),
        (A, "v3", "version", "1.0", "3.0"),
        (A, "v3", "target", "x86_64", "zen4"),
    ]
    for packages, conflicts in _in_every_order(stacks):
        assert [(c.hash, c.source, c.field, c.root, c.stack) for c in conflicts] == expected
        (detail,) = [d for d in packages["alpha"].spec_details if d.hash == A]
        assert detail.stacks == ("root", "same", "v2", "v2-too", "v3")


def test_conflicts_are_listed_by_stack_then_hash_across_packages() -> None:
    """Specs are built package by package; a stack's conflicts still come by hash, each
    spec's fields in their order."""
    first, second, third = sorted([A, B, C])  # named so that packages sort the other way
    rows = [_row(first, "zlib"), _row(second, "mpich"), _row(third, "alpha")]
    root = SourceSummary("8", 3, 3, [r.hash for r in rows], rows, [], [])
    changed = [
        _row(first, "zlib", "2.0", "zen4"),
        _row(second, "mpich", "2.0"),
        _row(third, "alpha", "2.0"),
    ]
    stacks = {"e4s": _stack(*changed), "aaa": _stack(changed[2])}
    _, conflicts = consolidate(root, stacks)
    assert [(c.source, c.hash, c.field) for c in conflicts] == [
        ("aaa", third, "version"),
        ("e4s", first, "version"),
        ("e4s", first, "target"),
        ("e4s", second, "version"),
        ("e4s", third, "version"),
    ]


def test_a_hash_a_stack_lists_twice_counts_once() -> None:
    consolidator = Consolidator()
    e4s = STACKS["e4s"]
    consolidator.add("e4s", e4s.hashes * 2, e4s.identities * 2)
    packages, _ = consolidator.finish(ROOT)
    assert {d.hash: d.stacks for d in packages["alpha"].spec_details}[A] == ("e4s", "root")


def test_a_root_is_prepared_once_and_finished_with() -> None:
    """Stacks handed over after the root are folded against it at once: finishing with another
    root would need them again, so it is refused, as is a second root."""
    stale = SourceSummary("8", 1, 1, [A], [_row(A, "stale")], [], [])
    consolidator = Consolidator()
    consolidator.prepare(stale)
    with pytest.raises(ValueError, match="already prepared"):
        consolidator.prepare(ROOT)
    with pytest.raises(ValueError, match="prepared with another root"):
        consolidator.finish(ROOT)
    with pytest.raises(ValueError, match="prepared from another summary"):
        Consolidator().prepare(ROOT, prepare_root(stale))


def test_a_stack_cannot_be_folded_in_twice_nor_as_the_root() -> None:
    consolidator = Consolidator()
    e4s = STACKS["e4s"]
    consolidator.add("e4s", e4s.hashes, e4s.identities)
    with pytest.raises(ValueError, match="'e4s' is already consolidated"):
        consolidator.add("e4s", e4s.hashes, e4s.identities)
    with pytest.raises(ValueError, match="'root' is the root's label"):
        consolidator.add("root", e4s.hashes, e4s.identities)
    with pytest.raises(ValueError, match="2 hashes, 1 identities"):
        consolidator.add("ml", e4s.hashes, e4s.identities[:1])


def test_nothing_is_folded_in_or_finished_after_the_finish() -> None:
    """finish() frees what folding needs: a later add() or finish() is a mistake, said so."""
    consolidator = Consolidator()
    consolidator.finish(ROOT)
    e4s = STACKS["e4s"]
    with pytest.raises(ValueError, match="finished"):
        consolidator.add("e4s", e4s.hashes, e4s.identities)
    with pytest.raises(ValueError, match="finished"):
        consolidator.finish(ROOT)
    with pytest.raises(ValueError, match="finished"):
        consolidator.prepare(ROOT)
