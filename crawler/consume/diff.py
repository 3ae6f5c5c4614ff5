"""What changed between two published branches (or two copies of one): packages, versions and
specs added and removed, and specs whose record changed under the same hash (moved between
stacks, most often).

:func:`diff_indexes` compares two ``index.json`` (a branch folder, the file itself, or an
:class:`~crawler.documents.Index` already read) and returns an :class:`IndexDiff`: the
packages that differ, each a :class:`PackageDiff` of :class:`SpecDiff`. :meth:`IndexDiff.records`
flattens it into :class:`Change` records, one a change, which ``crawler diff --json`` writes as
JSON Lines (``docs/consumers.md``).

It is fast on two 60,000-spec indexes because a publish writes a package's entry the same way
each time (sorted keys, compact): a package whose bytes are the same in both is not decoded at
all, nor, in a package that differs, a spec whose entry's bytes are the same.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import msgspec

from ..consumer_errors import MirrorsDifferError
from ..documents import Index, PackageMeta, PackageSummary, SpecDetail
from .load import Packages, load_packages, no_gc

Side = str | os.PathLike[str] | Index[PackageSummary]
Changed = Literal["added", "removed", "changed"]
ChangeKind = Literal[
    "package_added",
    "package_removed",
    "version_added",
    "version_removed",
    "spec_added",
    "spec_removed",
    "spec_changed",
]
#: The order a package's specs are listed in: removed, added, then changed (each by hash).
_RANK = {"removed": 0, "added": 1, "changed": 2}


class SpecDiff(msgspec.Struct, frozen=True, gc=False):
    """A spec that differs: ``added`` (only in the second index), ``removed`` (only in the
    first), or ``changed`` (in both, under the same hash, with another record)."""

    change: Changed
    before: SpecDetail | None
    after: SpecDetail | None

    @property
    def spec(self) -> SpecDetail:
        """The spec as the second index holds it, or as the first did when it was removed."""
        spec = self.after or self.before
        assert spec is not None
        return spec

    @property
    def fields(self) -> tuple[str, ...]:
        """Which fields of the record changed (empty unless ``changed``)."""
        if self.before is None or self.after is None:
            return ()
        return tuple(
            f
            for f in self.before.__struct_fields__
            if getattr(self.before, f) != getattr(self.after, f)
        )

    @property
    def stacks_added(self) -> tuple[str, ...]:
        """The stacks that hold a changed spec now and did not."""
        return _stacks_only_in(self.after, self.before)

    @property
    def stacks_removed(self) -> tuple[str, ...]:
        """The stacks that held a changed spec and no longer do."""
        return _stacks_only_in(self.before, self.after)


def _stacks_only_in(spec: SpecDetail | None, other: SpecDetail | None) -> tuple[str, ...]:
    if spec is None or other is None:
        return ()
    return tuple(s for s in spec.stacks if s not in other.stacks)


class PackageDiff(msgspec.Struct, frozen=True, gc=False):
    """A package that differs: ``added``, ``removed``, or ``changed`` (in both). Its versions
    added and removed (as ``meta.versions`` lists them), and its specs that differ, removed
    first, then added, then changed, each by hash."""

    name: str
    change: Changed
    versions_added: list[str]
    versions_removed: list[str]
    specs: list[SpecDiff]


class DiffTotals(msgspec.Struct, frozen=True, gc=False):
    """How many of each change a diff holds."""

    packages_added: int
    packages_removed: int
    packages_changed: int
    specs_added: int
    specs_removed: int
    specs_changed: int


class Change(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One change, as ``crawler diff --json`` writes it (a line of JSON Lines). ``change``
    says what; ``name`` is the package's. ``version`` is the version added or removed, or the
    spec's; ``hash`` and ``spec`` (its ``spec_details`` entry: the second index's, or the
    first's when removed) are a spec's. A changed spec also has ``fields`` (the keys of its
    entry that changed), ``before`` (their values in the first index), and when its stacks
    changed, ``stacks_added`` and ``stacks_removed``. A key with nothing to say is left out."""

    change: ChangeKind
    name: str
    version: str | None = None
    hash: str | None = None
    fields: list[str] = []
    before: dict[str, Any] = {}
    stacks_added: list[str] = []
    stacks_removed: list[str] = []
    spec: SpecDetail | None = None


class IndexDiff(msgspec.Struct, frozen=True, gc=False):
    """What changed from the ``before`` index to the ``after`` one (their ``branch``): the
    packages that differ, by name. False when nothing does."""

    before: str
    after: str
    packages: list[PackageDiff]

    def __bool__(self) -> bool:
        return bool(self.packages)

    @property
    def totals(self) -> DiffTotals:
        """The number of packages and specs added, removed and changed."""
        packages = Counter(p.change for p in self.packages)
        specs = Counter(s.change for p in self.packages for s in p.specs)
        return DiffTotals(
            packages_added=packages["added"],
            packages_removed=packages["removed"],
            packages_changed=packages["changed"],
            specs_added=specs["added"],
            specs_removed=specs["removed"],
            specs_changed=specs["changed"],
        )

    def records(self) -> Iterator[Change]:
        """Every change, one record each: for each package, whether it was added or removed,
        then its versions removed and added, then its specs."""
        for package in self.packages:
            name = package.name
            if package.change != "changed":
                yield Change(change=f"package_{package.change}", name=name)  # type: ignore[arg-type]
            for version in package.versions_removed:
                yield Change(change="version_removed", name=name, version=version)
            for version in package.versions_added:
                yield Change(change="version_added", name=name, version=version)
            for diff in package.specs:
                spec, fields = diff.spec, diff.fields
                yield Change(
                    change=f"spec_{diff.change}",  # type: ignore[arg-type]
                    name=name,
                    version=spec.versions[0],
                    hash=spec.hash,
                    fields=list(fields),
                    before={f: getattr(diff.before, f) for f in fields},
                    stacks_added=list(diff.stacks_added),
                    stacks_removed=list(diff.stacks_removed),
                    spec=spec,
                )


def diff_indexes(before: Side, after: Side, *, any_mirror: bool = False) -> IndexDiff:
    """What changed from ``before`` to ``after``: each a published branch folder, its
    ``index.json`` (or a copy), or an index already read.

    Two indexes published from two mirrors (``mirror``) are a
    :class:`~crawler.consumer_errors.MirrorsDifferError`, unless ``any_mirror``; a path that is no
    published branch, a :class:`~crawler.consumer_errors.NotABranchError`; an index of another
    ``schema_version``, a :class:`~crawler.consumer_errors.SchemaVersionError`."""
    (old_index, old), (new_index, new) = _read(before), _read(after)
    mirrors = old_index.mirror, new_index.mirror
    if not any_mirror and all(mirrors) and mirrors[0] != mirrors[1]:
        raise MirrorsDifferError(_named(before), _named(after), *mirrors)
    with no_gc():  # thousands of new records, none in a cycle
        packages = [
            package
            for name in sorted(set(old) | set(new))
            if (package := _package_diff(name, old, new)) is not None
        ]
    return IndexDiff(old_index.branch, new_index.branch, packages)


def _read(side: Side) -> tuple[Index[Any], Mapping[str, PackageSummary]]:
    """The index (for its ``branch`` and ``mirror``) and its packages, those of a path
    decoded when looked up."""
    if isinstance(side, Index):
        return side, side.packages
    packages = load_packages(side)
    return packages.index, packages


def _named(side: Side) -> str:
    return f"the index of {side.branch}" if isinstance(side, Index) else str(side)


def _package_diff(
    name: str, old: Mapping[str, PackageSummary], new: Mapping[str, PackageSummary]
) -> PackageDiff | None:
    """How package ``name`` differs (None: it does not)."""
    if name not in new:
        return _whole(name, "removed", old[name])
    if name not in old:
        return _whole(name, "added", new[name])
    differing = _differing(name, old, new)
    if differing is None:
        return None
    (versions_before, gone), (versions_after, came) = differing
    old_specs = {s.hash: s for s in gone}
    new_specs = {s.hash: s for s in came}
    specs = [SpecDiff("removed", spec, None) for h, spec in old_specs.items() if h not in new_specs]
    specs += [SpecDiff("added", None, spec) for h, spec in new_specs.items() if h not in old_specs]
    specs += [
        SpecDiff("changed", spec, new_specs[h])
        for h, spec in old_specs.items()
        if h in new_specs and spec != new_specs[h]
    ]
    specs.sort(key=lambda s: (_RANK[s.change], s.spec.hash))
    added = sorted(set(versions_after) - set(versions_before))
    removed = sorted(set(versions_before) - set(versions_after))
    if not (specs or added or removed):  # the same, written another way
        return None
    return PackageDiff(name, "changed", versions_added=added, versions_removed=removed, specs=specs)


class _Entries(msgspec.Struct, frozen=True, gc=False):
    """A package read with each entry of ``spec_details`` left as its bytes."""

    meta: PackageMeta
    spec_details: list[msgspec.Raw]


_ENTRIES = msgspec.json.Decoder(_Entries)
_SPEC = msgspec.json.Decoder(SpecDetail)
_Side = tuple[list[str], list[SpecDetail]]


def _differing(
    name: str, old: Mapping[str, PackageSummary], new: Mapping[str, PackageSummary]
) -> tuple[_Side, _Side] | None:
    """Both sides of package ``name``: its versions, and its specs that the other side does
    not hold as they are; None when it is the same in both.

    Of two published indexes, a package whose bytes are the same in both is not decoded, nor
    the entries of a spec whose bytes are. (Other bytes may still say the same, written
    another way: a copy pretty-printed by hand; the caller compares what they say.)"""
    if isinstance(old, Packages) and isinstance(new, Packages):
        raw_old, raw_new = old.raw(name), new.raw(name)
        if raw_old == raw_new:
            return None
        try:
            before, after = _ENTRIES.decode(raw_old), _ENTRIES.decode(raw_new)
            held_before = {bytes(e) for e in before.spec_details}
            held_after = {bytes(e) for e in after.spec_details}
            gone = [_SPEC.decode(e) for e in before.spec_details if bytes(e) not in held_after]
            came = [_SPEC.decode(e) for e in after.spec_details if bytes(e) not in held_before]
            return (before.meta.versions, gone), (after.meta.versions, came)
        except msgspec.DecodeError:  # not as a publish writes it: the full decoding says why
            pass
    package_before, package_after = old[name], new[name]
    if package_before == package_after:
        return None
    return (
        (package_before.meta.versions, package_before.spec_details),
        (package_after.meta.versions, package_after.spec_details),
    )


def _whole(name: str, change: Changed, package: PackageSummary) -> PackageDiff:
    """A package only one index has: every version and spec of it added, or removed."""
    versions, specs = list(package.meta.versions), package.spec_details
    if change == "added":
        diffs = [SpecDiff(change, None, spec) for spec in specs]
        return PackageDiff(name, change, versions_added=versions, versions_removed=[], specs=diffs)
    diffs = [SpecDiff(change, spec, None) for spec in specs]
    return PackageDiff(name, change, versions_added=[], versions_removed=versions, specs=diffs)
