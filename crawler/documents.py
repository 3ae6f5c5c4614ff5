"""Documents: ``index.json``, ``links.json``, ``changes.json``, ``history.json`` and
``report.json``, as the typed structs that the writers fill and the readers decode (nothing
past decoding or before the final encoding is a ``dict``).

They are encoded by :func:`crawler.output.render.encode_json`, which sorts keys: the order the
fields are declared in does not change a byte (they follow ``docs/``'s descriptions). A field
name is its JSON key.

Some fields of ``index.json`` (and of a report's sources, which extend its sources) have
defaults although every writer sets them: indexes written by earlier versions lack them
(``stats.sources_failed``), and :mod:`crawler.ops.verify` checks what it can of a damaged
index (one lacking its ``mirror``, say) rather than nothing; the JSON Schema is what says
every key is there.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

#: ``schema_version`` of the ``index.json`` this version writes (2: each spec's target family,
#: and ``links.json`` beside it; see docs/output-format.md).
SCHEMA_VERSION = 2


# --- index.json ------------------------------------------------------------------------------


class SpecDependency(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One dependency of a spec, as its record's edge states it: another spec's hash (a spec
    of the index, or a record that is in no build cache: an external, a compiler...), its
    name, the dependency types (``build``, ``link``, ``run``, ``test``), and the virtuals it
    provides to the spec (``c``, ``cxx`` for a compiler, ``libc``, ``mpi``), sorted: left
    out of ``links.json`` when there are none (most edges), as in a link written before
    they were kept."""

    hash: str
    name: str
    type: tuple[str, ...]
    virtuals: tuple[str, ...] = ()


#: The ``compiler`` of a spec built with none (pure-Python, data and wrapper packages), as
#: index.json and the pages write it.
NO_COMPILER = "none"


class SpecDetail(msgspec.Struct, frozen=True, gc=False):
    """One entry of a package's ``spec_details``: the fields of the reference site's pages
    (:data:`PAGE_FIELDS`), then ``family`` (schema 2; an index of schema 1 lacks it)."""

    compiler: str
    hash: str
    os: str
    platform: str
    #: The tarball's byte count, in decimal, as its spec manifest gives it; ``-`` where the
    #: cache has no manifests (v2) or the binaries are not read (``binaries: false``).
    size: str
    stacks: tuple[str, ...]
    target: str
    variants: tuple[str, ...]
    versions: tuple[str]
    #: The generic architecture of ``target`` (``x86_64``, ``aarch64``...), None when the
    #: crawler's archspec does not know the target.
    family: str | None = None

    @property
    def shown_compiler(self) -> str:
        """The compiler as a table shows it: ``-`` for none (Spack's ``spack find`` writes no
        ``%`` for such a spec, and files it under ``no compilers``)."""
        return "-" if self.compiler == NO_COMPILER else self.compiler


class SpecLinks(msgspec.Struct, frozen=True, gc=False):
    """What a spec links to, resolved: every URL and name in full, as readers give it for a
    ``links.json`` of either schema (an entry of schema 1 is this; one of schema 2 is packed,
    :mod:`crawler.linkfile`)."""

    dependencies: tuple[SpecDependency, ...] = ()
    #: For each of the spec's ``stacks``, where it is fetched from in that stack's cache: its
    #: spec manifest (v3) or spec file (v2).
    locations: dict[str, str] = {}
    #: The tarball its spec manifest names, in the cache whose manifest was read (v3 only).
    tarball: str | UnsetType = UNSET
    #: The fingerprint of the published key that signed that manifest (a signed cache).
    signer: str | UnsetType = UNSET


#: The fields of a :class:`SpecDetail` that the reference site's pages show, in its order.
PAGE_FIELDS = SpecDetail.__struct_fields__[:9]


class PackageMeta(msgspec.Struct, frozen=True, gc=False):
    """A package's ``meta``."""

    compilers: list[str]
    num_specs: int
    num_specs_by_stack: dict[str, int]
    oss: list[str]
    platforms: list[str]
    stacks: list[str]
    targets: list[str]
    versions: list[str]


class PackageSummary(msgspec.Struct, frozen=True, gc=False):
    """What a downstream consumer reads for one package of one ref (a value of ``packages``)."""

    meta: PackageMeta
    spec_details: list[SpecDetail]


class IndexSource(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One entry of ``sources``: only facts about the mirror's content. ``status`` is ``ok``
    (read), ``missing``, ``failed`` or ``not_read``; the counts are None unless it was read."""

    label: str
    url: str = ""
    layout: str = ""
    status: str
    sha256: str | None = None
    bytes: int | None = None
    db_version: str | None = None
    records: int | None = None
    in_buildcache: int | None = None
    invalid_records: int | None = None


class IndexStats(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """``stats``: counts over the whole branch."""

    packages: int
    specs: int
    root_records: int = 0
    sources: int
    sources_missing: int
    sources_failed: int | None = None  # None: an index written before it was counted
    invalid_records: int = 0
    conflicts: int = 0


#: What a reader decodes ``packages``' values as: :class:`PackageSummary`, or ``msgspec.Raw``
#: to learn the package names without decoding tens of MB of specs.
P = TypeVar("P")


class IndexFilters(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """``filters``: the globs a filtered branch was published with (the config's
    ``filters``, those set); absent from a branch published whole."""

    packages: list[str] = []
    exclude_packages: list[str] = []
    stacks: list[str] = []
    exclude_stacks: list[str] = []


class Index(msgspec.Struct, Generic[P], frozen=True, kw_only=True, gc=False):
    """``index.json``: one branch, its sources and its packages (sorted by name)."""

    schema_version: int = SCHEMA_VERSION
    branch: str
    mirror: str = ""
    filters: IndexFilters | UnsetType = UNSET
    sources: list[IndexSource]
    stats: IndexStats
    packages: dict[str, P]


class Links(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What ``links.json`` (beside an ``index.json`` of schema 2) says, resolved: each spec's
    dependencies and locations, by hash (a ``links.json`` of schema 1 is this; a publish
    writes it packed, schema 2: :mod:`crawler.linkfile`). Apart from the index, a reader of
    the packages does not read them (``crawler find`` two to three times faster, ``crawler
    verify`` ten times), and one who wants them reads them alone."""

    branch: str
    specs: dict[str, SpecLinks]


# --- changes.json ----------------------------------------------------------------------------


class StackChanges(msgspec.Struct, gc=False):
    """A stack's entry in ``by_stack``: memberships gained and lost (mutable while counted)."""

    added: int = 0
    removed: int = 0


class ChangeTotals(msgspec.Struct, frozen=True, gc=False):
    """``totals`` of ``changes.json`` (also a publish's ``changes`` in ``report.json``)."""

    specs_before: int
    specs_after: int
    added: int
    removed: int


class RemovedSpec(msgspec.Struct, frozen=True, gc=False):
    """An entry of ``removed_specs``: a spec a publish removed, as the index before held it
    (the new index no longer says what it was)."""

    hash: str
    version: str
    compiler: str
    os: str
    platform: str
    target: str


class Changes(msgspec.Struct, frozen=True, gc=False):
    """``changes.json``: what a publish changed (see :mod:`crawler.build.changes`).
    ``removed_specs`` names each spec of ``removed`` (package -> specs, by hash), unless the
    index before could not be read (a repair after it was damaged)."""

    branch: str
    first_publish: bool
    added: dict[str, list[str]]
    removed: dict[str, list[str]]
    by_stack: dict[str, StackChanges]
    packages_added: list[str]
    packages_removed: list[str]
    totals: ChangeTotals
    removed_specs: dict[str, list[RemovedSpec]] = {}


# --- history.json ----------------------------------------------------------------------------


class HistoryEntry(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One publish of a branch: when (its report's ``finished_at``), which ``index.json``
    (its SHA-256), and what it changed (its ``changes.json``)."""

    published_at: str
    index_sha256: str
    changes: Changes


class History(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """``history.json``: a branch's last publishes, newest first (at most the config's
    ``history`` of them)."""

    branch: str
    publishes: list[HistoryEntry]


# --- what the companions of index.json have in common -----------------------------------------


class Companion(msgspec.Struct, frozen=True, gc=False):
    """What every sync checks of the companions of a published ``index.json`` (see
    :func:`crawler.output.published.companion_problem`): a JSON object naming its branch. Only
    that: a companion written by another version is still sound, and a ``branch`` of any type
    is decoded, to be named in the problem."""

    branch: object = None


# --- report.json -----------------------------------------------------------------------------


class ReportSource(IndexSource, frozen=True, kw_only=True, gc=False):
    """One entry of a report's ``sources``: the index's entry, with how it was fetched.
    ``status`` is the outcome: ``fetched``, ``unchanged``, ``missing``, ``failed``,
    ``not_read``. (Its defaults: see the module docstring.)"""

    location: str = ""
    sidecar_sha256: str | None = None
    sidecar_matches: bool | None = None
    attempts: int = 0
    retries: int = 0
    decoded: bool = False
    fetch_seconds: float = 0.0
    decode_seconds: float = 0.0
    error: str | None = None
    #: A v3 index read through its manifest (a plain cache; not written otherwise): the
    #: manifest, the media type read, and the others it listed (other Database versions).
    manifest: str | UnsetType = UNSET
    media_type: str | UnsetType = UNSET
    media_types_left: list[str] | UnsetType = UNSET


class InvalidRecord(msgspec.Struct, frozen=True, gc=False):
    """A record of a source that failed validation, and why."""

    source: str
    hash: str
    reason: str


class Conflict(msgspec.Struct, frozen=True, gc=False):
    """A stack disagreeing with the root about a spec; the root's value is kept."""

    hash: str
    source: str
    field: str
    root: str
    stack: str


class MissingBinary(msgspec.Struct, frozen=True, gc=False):
    """A spec whose binary is not there: its ``manifest`` or its ``tarball`` (``missing``),
    in the cache of ``stack``."""

    hash: str
    name: str
    version: str
    stack: str
    missing: str


class BinaryFinding(msgspec.Struct, frozen=True, gc=False):
    """A spec whose binary is there but not as it should be: a manifest that cannot be read
    or trusted, or a signature that is no published key's (``finding`` says which)."""

    hash: str
    name: str
    version: str
    stack: str
    finding: str


class Report(msgspec.Struct, kw_only=True, gc=False):
    """``report.json`` (and ``.crawler/reports/<branch>.json``): one attempt at a branch.

    Filled as the branch goes, so mutable. A field left UNSET is not written: a failed branch
    has no ``stats``, only a publish has ``changes``, only a rebuild has the findings.
    ``status``, ``error``, ``finished_at`` and ``duration_seconds`` are set before any
    report is written.
    """

    tool: str
    branch: str
    mirror: str
    started_at: str
    status: str = ""
    error: str | None = None
    stats: IndexStats | UnsetType = UNSET
    sources: list[ReportSource] | UnsetType = UNSET
    invalid_records: list[InvalidRecord] | UnsetType = UNSET
    invalid_records_total: int | UnsetType = UNSET
    conflicts: list[Conflict] | UnsetType = UNSET
    conflicts_total: int | UnsetType = UNSET
    missing_stacks: list[str] | UnsetType = UNSET
    failed_stacks: list[str] | UnsetType = UNSET
    changes: ChangeTotals | UnsetType = UNSET
    #: A rebuild that read binaries (v3 caches, ``binaries: true``): the first of each.
    missing_binaries: list[MissingBinary] | UnsetType = UNSET
    missing_binaries_total: int | UnsetType = UNSET
    binary_findings: list[BinaryFinding] | UnsetType = UNSET
    binary_findings_total: int | UnsetType = UNSET
    finished_at: str = ""
    duration_seconds: float = 0.0
