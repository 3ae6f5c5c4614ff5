"""Consolidating stacks one by one, in any order, gives what consolidating them at once gives.

A sync folds each stack in as soon as it and the root are decoded (crawler.sync's early
consolidation), so the order depends on which download finishes first.
"""

from __future__ import annotations

import itertools

import pytest

from crawler.consolidate import Consolidator, consolidate
from crawler.synth import make_hash
from crawler.validate import SourceSummary, SpecRow

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


def test_stacks_folded_in_any_order_give_the_same_summaries_and_conflicts() -> None:
    expected = consolidate(ROOT, STACKS)
    packages, conflicts = expected
    stacks = {d.hash: d.stacks for p in packages.values() for d in p.spec_details}
    assert stacks == {A: ("e4s", "root"), B: ("e4s", "hep", "root"), C: ("ml", "root")}
    assert [(c.hash, c.source, c.field, c.root, c.stack) for c in conflicts] == [
        (B, "hep", "version", "1.0", "9.9"),
        (C, "ml", "target", "x86_64", "zen4"),
    ]
    for order in itertools.permutations(STACKS):
        consolidator = Consolidator(ROOT)
        for label in order:
            consolidator.add(label, STACKS[label].hashes, STACKS[label].identities)
        assert consolidator.folded == set(STACKS)
        assert consolidator.finish() == expected


def test_a_stack_cannot_be_folded_in_twice() -> None:
    consolidator = Consolidator(ROOT)
    e4s = STACKS["e4s"]
    consolidator.add("e4s", e4s.hashes, e4s.identities)
    with pytest.raises(ValueError, match="'e4s' is already consolidated"):
        consolidator.add("e4s", e4s.hashes, e4s.identities)


def test_nothing_is_folded_in_or_finished_after_the_finish() -> None:
    """finish() frees what folding needs: a later add() or finish() is a mistake, said so."""
    consolidator = Consolidator(ROOT)
    consolidator.finish()
    e4s = STACKS["e4s"]
    with pytest.raises(ValueError, match="finished"):
        consolidator.add("e4s", e4s.hashes, e4s.identities)
    with pytest.raises(ValueError, match="finished"):
        consolidator.finish()
