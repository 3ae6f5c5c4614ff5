"""``links.json`` as a publish writes it (its ``schema_version`` 2), and the resolved links of
:mod:`crawler.documents` packed into it and read back.

The resolved links (:class:`~crawler.documents.Links`, what readers hand their callers, and
what ``links.json`` was before it had a ``schema_version``: version 1) give, for every spec,
the full URL of its manifest in each stack and the name of each dependency: for a branch of
60,000 specs in 30 stacks, 120 MB, most of it the same cache URLs and names over and over.
Packed, each is stated once:

* ``caches``: each stack's cache URL (label -> URL); a spec's manifest is given by its path
  under the caches (``paths``: path -> the stacks whose cache has it there: a spec has the
  same path in every cache of one layout), its tarball by a stack and the path under its cache;
* ``names``: the name of each hash a dependency edge reaches; an edge names its dependency
  itself only where another edge to that hash gave another name (which no Spack writes).

Nothing is left for a reader to guess: a URL is a cache's URL, ``/``, and a path, and
:func:`resolved` gives back, entry by entry, the very links that were packed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec
from msgspec import UNSET, UnsetType

from .documents import Links, SpecDependency, SpecLinks

#: ``schema_version`` of the ``links.json`` this version writes (version 1, the resolved
#: links, has none). Independent of ``index.json``'s, which it sits beside.
LINKS_VERSION = 2

#: What precedes a spec's path in its cache's URL, in each layout (v3: its spec manifest; v2:
#: its spec file), as :mod:`crawler.build.locations` makes them.
_CACHE_FOLDERS = ("/v3/manifests/spec/", "/build_cache/")


class PackedDependency(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A dependency edge of a spec: as :class:`~crawler.documents.SpecDependency`, its name
    left to ``names`` (given here only where it is another one)."""

    hash: str
    type: tuple[str, ...]
    virtuals: tuple[str, ...] = ()
    name: str | UnsetType = UNSET


class PackedTarball(msgspec.Struct, frozen=True, gc=False):
    """Where a spec's tarball is: a stack of the spec, and the path under its cache's URL."""

    stack: str
    path: str


class PackedSpecLinks(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A spec's entry of a packed ``links.json``."""

    dependencies: tuple[PackedDependency, ...] = ()
    #: The path of its manifest (or v2 spec file) under a cache -> the stacks (sorted) whose
    #: caches hold it there.
    paths: dict[str, tuple[str, ...]] = {}
    tarball: PackedTarball | UnsetType = UNSET
    signer: str | UnsetType = UNSET


class PackedLinks(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """``links.json`` of ``schema_version`` 2 (see the module docstring)."""

    schema_version: int = LINKS_VERSION
    branch: str
    caches: dict[str, str]
    names: dict[str, str]
    specs: dict[str, PackedSpecLinks]


def packed(links: Links) -> PackedLinks:
    """``links`` packed: a ``ValueError`` if the locations of one stack are not under one
    cache URL (what no build makes: :class:`~crawler.build.locations.Caches` gives each stack
    one)."""
    caches: dict[str, str] = {}
    under: dict[str, str] = {}  # a stack's cache URL and "/": what its paths follow
    edges = _Edges()
    edge = edges.__getitem__
    specs = {}
    # One loop, its names local: it is most of the time it takes to write links.json. In the
    # links' own order (a build's: package by package): in another, each spec's objects are
    # far from the last one's in memory, and it takes a third longer.
    for key, link in links.specs.items():  # the first edge to a hash, in this order, names it
        paths: dict[str, list[str]] = {}
        for stack, url in link.locations.items():
            prefix = under.get(stack)
            if prefix is None:
                caches[stack] = _cache_of(stack, url)
                prefix = under[stack] = f"{caches[stack]}/"
            if not url.startswith(prefix):
                raise ValueError(f"stack {stack}: {url} is not in its cache, {caches[stack]}")
            paths.setdefault(url[len(prefix) :], []).append(stack)
        tarball: PackedTarball | UnsetType = UNSET
        if not isinstance(link.tarball, UnsetType):
            tarball = _tarball(link.tarball, link.locations, under)
        specs[key] = PackedSpecLinks(
            tuple(map(edge, link.dependencies)),
            {path: tuple(sorted(stacks)) for path, stacks in paths.items()},  # keys: encoded sorted
            tarball,
            link.signer,
        )
    return PackedLinks(
        branch=links.branch,
        caches=dict(sorted(caches.items())),
        names=dict(sorted(edges.names.items())),
        specs=specs,
    )


class _Edges(dict[SpecDependency, PackedDependency]):
    """Each edge packed once (a build's specs share the root's table of edges, a tenth as
    many as the specs have), the first to a hash naming it in ``names``."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[str, str] = {}

    def __missing__(self, dep: SpecDependency) -> PackedDependency:
        name = self.names.setdefault(dep.hash, dep.name)
        own = UNSET if name == dep.name else dep.name
        packed = self[dep] = PackedDependency(dep.hash, dep.type, dep.virtuals, own)
        return packed


def _cache_of(stack: str, url: str) -> str:
    for folder in _CACHE_FOLDERS:
        cache, found, _ = url.rpartition(folder)
        if found and cache:
            return cache
    raise ValueError(f"stack {stack}: {url} is no spec manifest or spec file of a cache")


def _tarball(url: str, stacks: Iterable[str], under: Mapping[str, str]) -> PackedTarball:
    """The tarball under the cache of one of the spec's ``stacks`` (``under``: each stack's
    cache URL and ``/``): the longest that holds it (one cache may be in another's folder),
    then the first stack."""
    held = None
    for stack in stacks:
        if url.startswith(under[stack]) and (held is None or len(under[stack]) > len(held[1])):
            held = (stack, under[stack])
    if held is None:
        raise ValueError(f"tarball {url} is in no cache of its spec's stacks")
    return PackedTarball(held[0], url[len(held[1]) :])


def resolved(
    entry: PackedSpecLinks, caches: Mapping[str, str], names: Mapping[str, str]
) -> SpecLinks:
    """A spec's links, its URLs and names resolved against ``caches`` and ``names``; a
    ``ValueError`` for a stack of no cache, a dependency of no name, or a stack given two
    paths."""
    locations = {}
    for path, stacks in entry.paths.items():
        for stack in stacks:
            if stack in locations:
                raise ValueError(f"stack {stack} is given two paths")
            locations[stack] = f"{_cache(caches, stack)}/{path}"
    dependencies = []
    for dep in entry.dependencies:
        name = names.get(dep.hash) if isinstance(dep.name, UnsetType) else dep.name
        if name is None:
            raise ValueError(f"dependency {dep.hash} has no name in names")
        dependencies.append(SpecDependency(dep.hash, name, dep.type, dep.virtuals))
    tarball: str | UnsetType = UNSET
    if not isinstance(entry.tarball, UnsetType):
        tarball = f"{_cache(caches, entry.tarball.stack)}/{entry.tarball.path}"
    return SpecLinks(tuple(dependencies), dict(sorted(locations.items())), tarball, entry.signer)


def _cache(caches: Mapping[str, str], stack: str) -> str:
    cache = caches.get(stack)
    if cache is None:
        raise ValueError(f"stack {stack} has no cache in caches")
    return cache
