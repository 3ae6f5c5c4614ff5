"""What changed between two publishes of a branch, on small hand-made indexes."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest

from crawler.build.changes import changes_between, load_published, spec_stacks_of, summary_line
from crawler.documents import Changes, Index, PackageSummary
from crawler.errors import ChangesInputError
from crawler.output.render import encode_json

A = "a" * 32
B = "b" * 32
C = "c" * 32
D = "d" * 32
E = "e" * 32


def compute_changes(old: dict[str, Any] | None, new: dict[str, Any]) -> Changes:
    """The changes a sync lists when ``new`` replaces ``old`` (None: a first publish), both
    ``index.json`` documents as parsed, through the sync's own steps."""
    index = msgspec.convert(new, Index[PackageSummary])
    after = spec_stacks_of(index.packages)
    if old is None:
        return changes_between(index.branch, None, after)
    last = load_published(json.dumps(old).encode())
    return last.removed_specs(changes_between(index.branch, last.specs, after))


def spec(hash: str, *stacks: str) -> dict[str, Any]:
    return {
        "compiler": "gcc@13.2.0",
        "hash": hash,
        "os": "ubuntu24.04",
        "platform": "linux",
        "size": "-",
        "stacks": sorted({"root", *stacks}),
        "target": "x86_64_v3",
        "variants": [],
        "versions": ["1.0"],
    }


def meta(specs: list[dict[str, Any]]) -> dict[str, Any]:
    """A package's meta (the comparison reads none of it, the index must have it)."""
    lists = ("compilers", "oss", "platforms", "stacks", "targets", "versions")
    return {"num_specs": len(specs), "num_specs_by_stack": {}, **{key: [] for key in lists}}


def index(packages: dict[str, list[dict[str, Any]]], branch: str = "develop") -> dict[str, Any]:
    """A small index.json document (the comparison reads the specs' hashes and stacks)."""
    count = sum(len(s) for s in packages.values())
    return {
        "schema_version": 1,
        "branch": branch,
        "mirror": "https://binaries.spack.io",
        "sources": [{"label": "root", "status": "ok"}],
        "stats": {"packages": len(packages), "specs": count, "sources": 1, "sources_missing": 0},
        "packages": {
            name: {"meta": meta(specs), "spec_details": specs}
            for name, specs in sorted(packages.items())
        },
    }


def document(changes: Changes) -> dict[str, Any]:
    """changes.json as a parsed document."""
    found: dict[str, Any] = json.loads(encode_json(changes))
    return found


OLD = index(
    {
        "zlib": [spec(A, "e4s"), spec(B)],
        "cmake": [spec(C, "e4s", "ml")],
    }
)
NEW = index(
    {
        "zlib": [spec(A, "e4s", "ml"), spec(D, "e4s")],
        "curl": [spec(E)],
    }
)


def test_changes_between_two_publishes() -> None:
    changes = compute_changes(OLD, NEW)
    assert document(changes) == {
        "branch": "develop",
        "first_publish": False,
        "added": {"curl": [E], "zlib": [D]},
        "removed": {"cmake": [C], "zlib": [B]},
        "by_stack": {
            # A gained ml; D added (root, e4s); E added (root); B removed (root);
            # C removed (root, e4s, ml).
            "e4s": {"added": 1, "removed": 1},
            "ml": {"added": 1, "removed": 1},
            "root": {"added": 2, "removed": 2},
        },
        "packages_added": ["curl"],
        "packages_removed": ["cmake"],
        "totals": {"specs_before": 3, "specs_after": 3, "added": 2, "removed": 2},
        "removed_specs": {  # what they were: the new index does not say
            "cmake": [_removed(C)],
            "zlib": [_removed(B)],
        },
    }
    assert summary_line(changes) == (
        "develop: +2 specs, -2 specs (3 -> 3), 1 package added, 1 removed"
    )


def _removed(digest: str) -> dict[str, str]:
    """How ``removed_specs`` names a spec made by :func:`spec`."""
    fields = ("compiler", "os", "platform", "target")
    return {"hash": digest, "version": "1.0", **{f: spec(digest)[f] for f in fields}}


def test_output_is_deterministic_and_sorted() -> None:
    changes = compute_changes(OLD, NEW)
    shuffled_new = copy.deepcopy(NEW)
    shuffled_new["packages"] = dict(reversed(list(shuffled_new["packages"].items())))
    for package in shuffled_new["packages"].values():
        package["spec_details"].reverse()
    again = compute_changes(OLD, shuffled_new)
    assert encode_json(again) == encode_json(changes)
    assert list(changes.added) == sorted(changes.added)
    assert list(changes.by_stack) == sorted(changes.by_stack)


def test_first_publish() -> None:
    changes = compute_changes(None, NEW)
    doc = document(changes)
    assert doc["first_publish"] is True
    assert doc["added"] == {"curl": [E], "zlib": [A, D]}
    assert doc["removed"] == {}
    assert doc["packages_added"] == ["curl", "zlib"]
    assert doc["packages_removed"] == []
    assert doc["by_stack"] == {
        "e4s": {"added": 2, "removed": 0},
        "ml": {"added": 1, "removed": 0},
        "root": {"added": 3, "removed": 0},
    }
    assert doc["totals"] == {
        "specs_before": 0,
        "specs_after": 3,
        "added": 3,
        "removed": 0,
    }
    assert summary_line(changes) == "develop: first publish, 3 specs in 2 packages"


def test_nothing_changed() -> None:
    changes = compute_changes(OLD, copy.deepcopy(OLD))
    doc = document(changes)
    assert doc["added"] == {} and doc["removed"] == {} and doc["by_stack"] == {}
    assert summary_line(changes) == (
        "develop: +0 specs, -0 specs (3 -> 3), 0 packages added, 0 removed"
    )


def test_only_stack_membership_changed() -> None:
    new = index({"zlib": [spec(A), spec(B, "ml")], "cmake": [spec(C, "e4s", "ml", "xsdk")]})
    changes = compute_changes(OLD, new)
    doc = document(changes)
    assert doc["added"] == {} and doc["removed"] == {}
    assert doc["by_stack"] == {
        "e4s": {"added": 0, "removed": 1},  # A left e4s
        "ml": {"added": 1, "removed": 0},  # B joined ml
        "xsdk": {"added": 1, "removed": 0},  # C joined xsdk
    }
    assert "root" not in doc["by_stack"]
    assert summary_line(changes) == (
        "develop: +0 specs, -0 specs (3 -> 3), 0 packages added, 0 removed, "
        "3 stack memberships changed"
    )


def test_a_hash_moving_package_is_removed_and_added() -> None:
    new = index({"zlib-ng": [spec(A, "e4s")], "zlib": [spec(B)], "cmake": [spec(C, "e4s", "ml")]})
    changes = compute_changes(OLD, new)
    doc = document(changes)
    assert doc["added"] == {"zlib-ng": [A]}
    assert doc["removed"] == {"zlib": [A]}
    assert doc["by_stack"] == {
        "e4s": {"added": 1, "removed": 1},
        "root": {"added": 1, "removed": 1},
    }


def test_large_numbers_use_thousands_separators() -> None:
    old = index({"p": [spec(f"{i:032d}") for i in range(1500)]})
    new = index({"p": [spec(f"{i:032d}") for i in range(1, 1501)], "q": [spec(A), spec(B)]})
    changes = compute_changes(old, new)
    assert summary_line(changes) == (
        "develop: +3 specs, -1 spec (1,500 -> 1,502), 1 package added, 0 removed"
    )


def test_branch_comes_from_the_new_index() -> None:
    changes = compute_changes(index({}, "develop-2025-04-13"), index({}, "develop-2025-04-20"))
    doc = document(changes)
    assert doc["branch"] == "develop-2025-04-20"
    assert summary_line(changes).startswith("develop-2025-04-20: +0 specs")


@pytest.mark.parametrize(
    ("old", "message"),
    [
        ({"branch": "x", "packages": []}, "Expected `object`, got `array` - at `$.packages`"),
        ({"branch": "x"}, "Object missing required field `sources`"),
        (index({"zlib": [dict(spec(A), stacks="root")]}), "got `str` - at `$.packages[...]"),
    ],
)
def test_a_previous_index_that_is_not_one(old: dict[str, Any], message: str) -> None:
    with pytest.raises(ChangesInputError) as caught:
        compute_changes(old, NEW)
    assert str(caught.value).startswith("cannot compare indexes: the previous index is not ")
    assert message in str(caught.value)
