"""The settings as one frozen value: its parts, their defaults and bounds.

One piece because every other module of the crawler reads these types, and nothing else: no
YAML, no URL parsing, so that decoding processes may import the defaults cheaply.

Every key, with its default and its meaning, is in docs/configuration.md (and, commented, in
the file ``crawler config --defaults`` prints); the bounds are the ``Meta`` of each field below.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Literal

import msgspec

PUBLIC_MIRROR = "https://binaries.spack.io"

Format = Literal["json", "pages", "html"]
#: Seconds a run may take by default: a nightly job that hangs is stopped well before the next.
DEFAULT_DEADLINE = 4 * 3600.0
#: The longest deadline (a week): a run must end, so ``.inf`` is refused.
MAX_DEADLINE = 7 * 24 * 3600.0
#: The default of the ``max_index_mb`` setting: the largest index file read, in MiB (a develop
#: root is a few hundred MB).
DEFAULT_MAX_INDEX_MB = 2048


class Timeouts(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Time limits, in seconds, applied to every request."""

    connect: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    read: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    source: Annotated[float, msgspec.Meta(gt=0)] = 1800.0


class Retry(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """How transient failures (connection errors, timeouts, 429, 5xx) are retried."""

    attempts: Annotated[int, msgspec.Meta(ge=1, le=20)] = 5
    backoff: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    max_wait: Annotated[float, msgspec.Meta(ge=0)] = 60.0


class Rewrite(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Replace ``prefix`` at the start of a source URL with ``replacement``."""

    prefix: Annotated[str, msgspec.Meta(min_length=1)]
    replacement: str


class Publish(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """When a branch's new output may replace the last published one."""

    max_drop: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    max_failed_stacks: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 0  # as the flag


#: The name of an environment variable (never a secret: the config names where it is).
EnvName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]


class HTTP(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """How http(s) mirrors are reached, with the names Spack's config uses: ``verify_ssl`` and
    ``ssl_certs`` (config.yaml), ``access_token_variable`` (mirrors.yaml)."""

    verify_ssl: bool = True
    ssl_certs: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    access_token_variable: EnvName | None = None


class S3(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """How an ``s3://`` mirror is reached, as Spack's mirrors.yaml describes it
    (``endpoint_url``, ``profile``, credentials in named environment variables). Without
    credentials or ``anonymous``, botocore's default chain (``AWS_*`` variables, the default
    profile, the instance's role) provides them."""

    endpoint_url: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    region: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9-]{1,64}$")] | None = None
    profile: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    access_key_id_variable: EnvName | None = None
    secret_access_key_variable: EnvName | None = None
    session_token_variable: EnvName | None = None
    anonymous: bool = False
    addressing_style: Literal["auto", "path", "virtual"] = "auto"


#: A glob of names (fnmatch, case-sensitive): ``py-*``, ``e4s*``, ``develop-2025-*``.
Glob = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class Filters(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Which packages and stacks a branch is published with, and which refs ``--all`` syncs.

    Each list keeps the names that match one of its globs (empty: all); each ``exclude_``
    list then drops those that match one of its. The root index is always read: it is the
    branch. See docs/configuration.md for how filters meet deduplication and the gate.
    """

    packages: tuple[Glob, ...] = ()
    exclude_packages: tuple[Glob, ...] = ()
    stacks: tuple[Glob, ...] = ()
    exclude_stacks: tuple[Glob, ...] = ()
    refs: tuple[Glob, ...] = ()
    exclude_refs: tuple[Glob, ...] = ()

    def keeps_package(self, name: str) -> bool:
        return _kept(name, self.packages, self.exclude_packages)

    def keeps_stack(self, label: str) -> bool:
        return _kept(label, self.stacks, self.exclude_stacks)

    def keeps_ref(self, ref: str) -> bool:
        """Whether ``--all`` syncs the ref ``ref``."""
        return _kept(ref, self.refs, self.exclude_refs)


def _kept(name: str, wanted: Iterable[str], excluded: Iterable[str]) -> bool:
    if wanted and not any(fnmatch.fnmatchcase(name, g) for g in wanted):
        return False
    return not any(fnmatch.fnmatchcase(name, g) for g in excluded)


class IndexAt(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """An index given as a build cache's root and one of its views: ``{url, view}``."""

    url: Annotated[str, msgspec.Meta(min_length=1)]
    view: Annotated[str, msgspec.Meta(min_length=1)] | None = None


#: Where a declared index is: a cache root, an index's URL or a folder (a string; a relative
#: one is under the mirror), or a view of a cache (see docs/mirrors.md).
IndexPlace = Annotated[str, msgspec.Meta(min_length=1)] | IndexAt


class RefEntry(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A declared ref as the config file writes it: ``{root: <index>, stacks: {<label>:
    <index>}}`` (:class:`DeclaredRef` is the value kept)."""

    root: IndexPlace
    stacks: dict[str, IndexPlace] = msgspec.field(default_factory=dict)


class DeclaredRef(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """A ref declared in the config: its name, its top-level index and its stacks' (label,
    index), in the order given (a tuple: the config is hashable)."""

    name: str
    root: IndexPlace
    stacks: tuple[tuple[str, IndexPlace], ...] = ()

    @property
    def places(self) -> list[tuple[str, IndexPlace]]:
        """``("root", root)`` and each stack's, in the order given."""
        return [("root", self.root), *self.stacks]


def normal_formats(formats: Iterable[str]) -> list[str]:
    """One spelling of each choice of formats: json (always written) among them, each once,
    sorted. What a branch was published in (its state) then compares equal however the formats
    were given, by a config, a flag, or an older version's state."""
    return sorted({"json", *formats})


class Config(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """All settings of one run: build it with :func:`load_config` and :func:`with_overrides`.

    Unknown keys are errors and the value is immutable.
    """

    mirror: Annotated[str, msgspec.Meta(min_length=1)] = PUBLIC_MIRROR
    output: Annotated[str, msgspec.Meta(min_length=1)] = "output"
    formats: Annotated[tuple[Format, ...], msgspec.Meta(min_length=1)] = ("json",)
    prune_formats: bool = False
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=256)] = 8
    binaries: bool = True
    decode_workers: Annotated[int, msgspec.Meta(ge=0, le=64)] = 0
    timeouts: Timeouts = Timeouts()
    retry: Retry = Retry()
    rewrites: tuple[Rewrite, ...] = ()
    publish: Publish = Publish()
    filters: Filters = Filters()
    history: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 30
    s3: S3 = S3()
    http: HTTP = HTTP()
    immutable_refs: tuple[str, ...] = ("*",)
    mutable_refs: tuple[str, ...] = ("develop",)
    lock_wait: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    deadline: Annotated[float, msgspec.Meta(gt=0, le=MAX_DEADLINE)] = DEFAULT_DEADLINE
    metrics: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    cache_dir: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    max_index_mb: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] = DEFAULT_MAX_INDEX_MB
    refs: tuple[DeclaredRef, ...] = ()
    views: tuple[Annotated[str, msgspec.Meta(min_length=1)], ...] = ()
    #: The file the settings came from, for messages; not a key of the file.
    origin: str = "<defaults>"
    #: The keys that command-line flags set (see :meth:`where`); not a key of the file.
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "formats", tuple(normal_formats(self.formats)))

    def where(self, key: str) -> str:
        """Where the value of ``key`` came from, for messages: the command line or a file."""
        return "command line" if key in self.flags else self.origin

    @property
    def urls(self) -> tuple[str, ...]:
        """The URLs the user gave: the mirror, the rewrites' replacements, the declared refs'
        indexes."""
        declared = [
            place if isinstance(place, str) else place.url
            for ref in self.refs
            for _, place in ref.places
        ]
        return (self.mirror, *(r.replacement for r in self.rewrites), *declared)

    @property
    def output_dir(self) -> Path:
        return Path(self.output)

    @property
    def cache_folder(self) -> Path | None:
        """``cache_dir`` as a path (None: the cache is ``<output>/.crawler/cache``)."""
        return Path(self.cache_dir) if self.cache_dir else None

    @property
    def max_index_bytes(self) -> int:
        return self.max_index_mb << 20

    def is_immutable(self, ref: str) -> bool:
        """True for a ref of a discovery document that, once published, is not synced again
        without ``--force`` (see :meth:`~crawler.mirror.discovery.Discovery.is_immutable`)."""
        if any(fnmatch.fnmatchcase(ref, p) for p in self.mutable_refs):
            return False
        return any(fnmatch.fnmatchcase(ref, p) for p in self.immutable_refs)
