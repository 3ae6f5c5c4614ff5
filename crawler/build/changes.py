"""Changes: what a publish changed in a branch, compared with the index it replaces.

:func:`changes_between` compares the specs of two ``index.json`` documents (the one being
replaced, read by :func:`load_published`, or None for a branch's first publish, and the new
one) and returns a deterministic :class:`~crawler.documents.Changes`, which ``changes.json``
holds once :meth:`Published.removed_specs` has named the specs removed.

Choices:

* A spec is identified by its DAG hash within its package. Since a DAG hash covers the package
  name, a hash never legitimately changes package; if it did, it is reported as removed from one
  and added to the other. Changes of a spec's other fields cannot happen without its hash
  changing, so they are not looked for.
* ``by_stack`` counts stack memberships: an added spec counts as added in each of its stacks
  (``root`` included), a removed spec as removed in each of its former stacks, and a spec that
  stays but gains or loses a stack counts as added or removed for that stack only. Only stacks
  with a non-zero count are listed. So ``by_stack["root"]`` always equals the totals, and a
  stack that starts publishing an existing spec shows up even though no spec was added.
* Only the content is compared (specs and their stacks), not the sources' checksums or sizes, so
  a re-uploaded index with the same specs is not a change.
* On a first publish every spec is "added" and every package is in ``packages_added``.
* Every key is always present; mappings are sorted by key, lists are sorted. ``branch`` is the
  new index's.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import msgspec
from msgspec import UnsetType

from ..documents import (
    Changes,
    ChangeTotals,
    Index,
    IndexFilters,
    PackageSummary,
    RemovedSpec,
    StackChanges,
)
from ..errors import ChangesInputError, CrawlerError
from ..files import read_regular
from ..text import counted

log = logging.getLogger(__name__)

#: ``(package, hash) -> stacks`` of every spec of an index.
SpecStacks = dict[tuple[str, str], frozenset[str]]
_NONE: frozenset[str] = frozenset()


class _SpecStacks(msgspec.Struct, frozen=True, gc=False):
    """What a spec of a published index is compared by (its other fields are not decoded)."""

    hash: str
    stacks: tuple[str, ...]


class _PackageStacks(msgspec.Struct, frozen=True, gc=False):
    spec_details: list[_SpecStacks]


class _RemovedFrom(msgspec.Struct, frozen=True, gc=False):
    """What names a spec of a published index that a publish removes (its variants, the
    bulk of a spec, are not decoded)."""

    hash: str
    compiler: str
    os: str
    platform: str
    target: str
    versions: tuple[str]


class _PackageRemovedFrom(msgspec.Struct, frozen=True, gc=False):
    spec_details: list[_RemovedFrom]


def spec_stacks_of(
    packages: Mapping[str, PackageSummary] | Mapping[str, _PackageStacks],
) -> SpecStacks:
    """Every spec of an index's ``packages`` as :func:`changes_between` compares them."""
    shared: dict[tuple[str, ...], frozenset[str]] = {}  # few distinct stack lists: one set each
    result: SpecStacks = {}
    for name, package in packages.items():
        for d in package.spec_details:
            stacks = shared.get(d.stacks)
            if stacks is None:
                stacks = shared[d.stacks] = frozenset(d.stacks)
            result[name, d.hash] = stacks
    return result


class Published(NamedTuple):
    """What a publish is compared with: the specs of its ``index.json``, the packages' bytes
    (to name the specs a publish removes), and the filters it was published with (None:
    whole)."""

    specs: SpecStacks
    packages: dict[str, msgspec.Raw]
    filters: IndexFilters | None

    def removed_specs(self, changes: Changes) -> Changes:
        """``changes`` naming each spec it removed from this index (only the packages that
        lost specs are decoded); a package that is not what an index holds keeps its removed
        specs named by hash alone, with a warning.

        The packages' values point into the bytes of the index read: they are held until
        the changes are known (a develop index: 33 MB)."""
        lost = {}
        for name in changes.removed:
            try:
                lost[name] = _REMOVED_FROM.decode(self.packages[name])
            except msgspec.ValidationError as err:
                log.warning(
                    "previous index.json of %s: package %s: %s: its removed specs named by hash",
                    changes.branch,
                    name,
                    err,
                )
        return _with_removed_specs(changes, lost)


class _RawPackages(msgspec.Struct, frozen=True, gc=False):
    packages: dict[str, msgspec.Raw]


_REMOVED_FROM = msgspec.json.Decoder(_PackageRemovedFrom)


def load_published(data: bytes) -> Published:
    """The specs of a serialised ``index.json``, read straight from its bytes (their hashes
    and stacks alone: a third of the time of whole specs), and its filters. Raises
    :class:`ChangesInputError` if it is not an index."""
    try:  # read twice, typed then raw: faster than one raw read and a decode per package
        index = msgspec.json.decode(data, type=Index[_PackageStacks])
        packages = msgspec.json.decode(data, type=_RawPackages).packages
    except (msgspec.DecodeError, msgspec.ValidationError) as err:
        raise ChangesInputError(str(err)) from None
    filters = index.filters if not isinstance(index.filters, UnsetType) else None
    return Published(spec_stacks_of(index.packages), packages, filters)


def published(path: Path) -> Published | None:
    """The specs (and filters) of a branch's published index; None if there is none or it is
    unreadable."""
    try:
        return load_published(read_regular(path))
    except FileNotFoundError:
        return None
    except (OSError, CrawlerError) as err:
        log.warning("previous %s is unreadable (%s)", path, err)
        return None


def _with_removed_specs(changes: Changes, before: Mapping[str, _PackageRemovedFrom]) -> Changes:
    """``changes`` naming each spec it removed, as ``before`` (the packages of the index
    before; those of the removed specs are enough) held it; a package ``before`` lacks is
    not named."""
    named: dict[str, list[RemovedSpec]] = {}
    for name, hashes in changes.removed.items():
        if name in before:
            details = {d.hash: d for d in before[name].spec_details}
            named[name] = [_removed(h, details[h]) for h in hashes if h in details]
    return msgspec.structs.replace(changes, removed_specs=named)


def _removed(digest: str, spec: _RemovedFrom) -> RemovedSpec:
    version = spec.versions[0] if spec.versions else ""
    return RemovedSpec(digest, version, spec.compiler, spec.os, spec.platform, spec.target)


def changes_between(branch: str, before: SpecStacks | None, after: SpecStacks) -> Changes:
    """What changed from ``before`` to ``after``, specs keyed ``(package, hash) -> stacks``.

    ``before`` is None on a first publish. The sync builds these straight from its summaries,
    which spares converting a develop-sized index to dicts and back.
    """
    first_publish = before is None
    before = before or {}
    added: dict[str, list[str]] = defaultdict(list)
    removed: dict[str, list[str]] = defaultdict(list)
    # How many specs went from one set of stacks to another: a few distinct moves, counted
    # once each, rather than two set differences per spec.
    moves: Counter[tuple[frozenset[str], frozenset[str]]] = Counter()
    for key, stacks in after.items():
        previous = before.get(key)
        if previous is None:
            added[key[0]].append(key[1])
            moves[_NONE, stacks] += 1
        elif previous != stacks:
            moves[previous, stacks] += 1
    for key, stacks in before.items():
        if key not in after:
            removed[key[0]].append(key[1])
            moves[stacks, _NONE] += 1
    by_stack: dict[str, StackChanges] = defaultdict(StackChanges)
    for (old, new), count in moves.items():
        for label in new - old:
            by_stack[label].added += count
        for label in old - new:
            by_stack[label].removed += count
    packages_before = {name for name, _ in before}
    packages_after = {name for name, _ in after}
    return Changes(
        branch=branch,
        first_publish=first_publish,
        added={name: sorted(hashes) for name, hashes in sorted(added.items())},
        removed={name: sorted(hashes) for name, hashes in sorted(removed.items())},
        by_stack=dict(sorted(by_stack.items())),
        packages_added=sorted(packages_after - packages_before),
        packages_removed=sorted(packages_before - packages_after),
        totals=ChangeTotals(
            specs_before=len(before),
            specs_after=len(after),
            added=sum(len(hashes) for hashes in added.values()),
            removed=sum(len(hashes) for hashes in removed.values()),
        ),
    )


def summary_line(changes: Changes) -> str:
    """One line for a log or a commit message, of a :class:`~crawler.documents.Changes`.

    ``develop: +12 specs, -3 specs (60,012 -> 60,021), 2 packages added, 1 removed``;
    ``develop: first publish, 58 specs in 30 packages`` the first time;
    ``develop: +0 specs, -0 specs (58 -> 58), 0 packages added, 0 removed, 2 stack memberships
    changed`` when only stacks changed.
    """
    totals, branch = changes.totals, changes.branch
    if changes.first_publish:
        packages = counted(len(changes.packages_added), "package")
        return f"{branch}: first publish, {counted(totals.specs_after, 'spec')} in {packages}"
    line = (
        f"{branch}: +{counted(totals.added, 'spec')}, -{counted(totals.removed, 'spec')} "
        f"({totals.specs_before:,} -> {totals.specs_after:,}), "
        f"{counted(len(changes.packages_added), 'package')} added, "
        f"{len(changes.packages_removed):,} removed"
    )
    if not totals.added and not totals.removed and changes.by_stack:
        moved = sum(c.added + c.removed for c in changes.by_stack.values())
        line += f", {counted(moved, 'stack membership')} changed"
    return line
