"""``links.json`` as a publish writes it (its ``schema_version`` 2): a build's links, and
readers' way back to the resolved links of :mod:`crawler.documents`.

The resolved links (:class:`~crawler.documents.Links`, what readers hand their callers, and
what ``links.json`` was before it had a ``schema_version``: version 1) give, for every spec,
the full URL of its manifest in each stack and each dependency edge in full: for a branch of
60,000 specs in 30 stacks, 120 MB, most of it the same cache URLs and edges over and over.
Packed, each is stated once:

* ``caches``: each stack's cache URL (label -> URL); a spec's manifest is given by its path
  under the caches (``paths``: path -> the stacks whose cache has it there: a spec has the
  same path in every cache of one layout), its tarball by a stack and the path under its cache;
* ``edges``: each distinct dependency edge (hash, types, virtuals), numbered in the order the
  specs first use them; a spec's ``dependencies`` are numbers into it (a develop root's
  800,000 edges are a few thousand distinct ones);
* ``names``: the name of each hash an edge reaches; an edge names its dependency itself only
  where another edge to that hash gave another name (which no Spack writes).

A build makes this form directly (:class:`EdgeTable`, :class:`Renumbering`; paths by
:mod:`crawler.build.locations`); :func:`packed` packs resolved links (benchmarks, tests).
Nothing is left for a reader to guess: a URL is a cache's URL, ``/``, and a path, and
:func:`resolved` gives back, entry by entry, the very links that were packed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

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
    """An entry of ``edges``: as :class:`~crawler.documents.SpecDependency`, its name left to
    ``names`` (given here only where it is another one)."""

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

    #: Its edges, in its record's order: numbers in ``edges``.
    dependencies: tuple[int, ...] = ()
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
    edges: list[PackedDependency]
    names: dict[str, str]
    specs: dict[str, PackedSpecLinks]


class EdgeTable(dict[SpecDependency, int]):
    """The ``edges`` and ``names`` of a ``links.json`` being made: each edge numbered when
    first looked up, the first edge to a hash naming it."""

    def __init__(self) -> None:
        super().__init__()
        self.edges: list[PackedDependency] = []
        self.names: dict[str, str] = {}

    def __missing__(self, dep: SpecDependency) -> int:
        name = self.names.setdefault(dep.hash, dep.name)
        own = UNSET if name == dep.name else dep.name
        self.edges.append(PackedDependency(dep.hash, dep.type, dep.virtuals, own))
        number = self[dep] = len(self.edges) - 1
        return number

    def sorted_names(self) -> dict[str, str]:
        """``names``, as ``links.json`` gives it: sorted by hash."""
        return dict(sorted(self.names.items()))


class Renumbering(dict[int, int]):
    """Numbers in another table of the same edges (a root summary's, another ``links.json``'s)
    -> numbers in ``table``, each edge looked up there once."""

    def __init__(self, source: Edges, table: EdgeTable) -> None:
        super().__init__()
        self.source = source
        self.table = table

    def __missing__(self, i: int) -> int:
        number = self[i] = self.table[self.source[i]]
        return number

    def numbers(self, given: Iterable[int]) -> tuple[int, ...]:
        """``given``, numbers in ``table``."""
        return tuple(map(self.__getitem__, given))


def packed(links: Links) -> PackedLinks:
    """``links`` packed: a ``ValueError`` if the locations of one stack are not under one
    cache URL (what no build makes: :class:`~crawler.build.locations.Caches` gives each stack
    one)."""
    caches: dict[str, str] = {}
    under: dict[str, str] = {}  # a stack's cache URL and "/": what its paths follow
    edges = EdgeTable()
    edge = edges.__getitem__
    specs = {}
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
            tarball = packed_tarball(link.tarball, link.locations, under)
        specs[key] = PackedSpecLinks(
            tuple(map(edge, link.dependencies)),
            {path: tuple(sorted(stacks)) for path, stacks in paths.items()},  # keys: encoded sorted
            tarball,
            link.signer,
        )
    return PackedLinks(
        branch=links.branch,
        caches=dict(sorted(caches.items())),
        edges=edges.edges,
        names=edges.sorted_names(),
        specs=specs,
    )


def subset(links: PackedLinks, keys: Iterable[str]) -> PackedLinks:
    """The entries of ``links``' specs ``keys`` alone, with the caches, edges and names they
    use (numbered anew, as a build of those specs alone numbers them)."""
    table = EdgeTable()
    renumbering = Renumbering(ResolvedEdges(links.edges, links.names), table)
    specs: dict[str, PackedSpecLinks] = {}
    stacks: set[str] = set()
    for key in keys:
        entry = links.specs[key]
        specs[key] = msgspec.structs.replace(
            entry, dependencies=renumbering.numbers(entry.dependencies)
        )
        stacks.update(*entry.paths.values())
        if not isinstance(entry.tarball, UnsetType):
            stacks.add(entry.tarball.stack)
    return PackedLinks(
        branch=links.branch,
        caches={s: url for s, url in links.caches.items() if s in stacks},
        edges=table.edges,
        names=table.sorted_names(),
        specs=specs,
    )


def _cache_of(stack: str, url: str) -> str:
    for folder in _CACHE_FOLDERS:
        cache, found, _ = url.rpartition(folder)
        if found and cache:
            return cache
    raise ValueError(f"stack {stack}: {url} is no spec manifest or spec file of a cache")


def packed_tarball(url: str, stacks: Iterable[str], under: Mapping[str, str]) -> PackedTarball:
    """The tarball ``url`` under the cache of one of the spec's ``stacks`` (``under``: each
    stack's cache URL and ``/``): the longest that holds it (one cache may be in another's
    folder), then the first stack; a ``ValueError`` if none does."""
    held = None
    for stack in stacks:
        prefix = under.get(stack)
        if prefix and url.startswith(prefix) and (held is None or len(prefix) > len(held[1])):
            held = (stack, prefix)
    if held is None:
        raise ValueError(f"tarball {url} is in no cache of its spec's stacks")
    return PackedTarball(held[0], url[len(held[1]) :])


class Edges(Protocol):
    """A table of edges, by number: a root summary's list, or :class:`ResolvedEdges`."""

    def __getitem__(self, i: int, /) -> SpecDependency: ...


class ResolvedEdges(dict[int, SpecDependency]):
    """The ``edges`` of a ``links.json``, each resolved (named from ``names``) when first
    looked up; a ``ValueError`` for a number that is no edge's, or an edge of no name."""

    def __init__(self, edges: Sequence[PackedDependency], names: Mapping[str, str]) -> None:
        super().__init__()
        self._edges = edges
        self._names = names

    def __missing__(self, i: int) -> SpecDependency:
        found = self[i] = self._resolve(i)
        return found

    def _resolve(self, i: int) -> SpecDependency:
        if not 0 <= i < len(self._edges):
            raise ValueError(f"dependency {i} is no number of edges (0 to {len(self._edges) - 1})")
        dep = self._edges[i]
        name = self._names.get(dep.hash) if isinstance(dep.name, UnsetType) else dep.name
        if name is None:
            raise ValueError(f"dependency {dep.hash} has no name in names")
        return SpecDependency(dep.hash, name, dep.type, dep.virtuals)


def resolved(entry: PackedSpecLinks, caches: Mapping[str, str], edges: Edges) -> SpecLinks:
    """A spec's links, its URLs and edges resolved against ``caches`` and ``edges`` (a
    :class:`ResolvedEdges`); a ``ValueError`` for a stack of no cache, a dependency that does
    not resolve, or a stack given two paths."""
    locations = {}
    for path, stacks in entry.paths.items():
        for stack in stacks:
            if stack in locations:
                raise ValueError(f"stack {stack} is given two paths")
            locations[stack] = f"{_cache(caches, stack)}/{path}"
    dependencies = tuple(map(edges.__getitem__, entry.dependencies))
    tarball: str | UnsetType = UNSET
    if not isinstance(entry.tarball, UnsetType):
        tarball = f"{_cache(caches, entry.tarball.stack)}/{entry.tarball.path}"
    return SpecLinks(dependencies, dict(sorted(locations.items())), tarball, entry.signer)


class Resolving(Mapping[str, SpecLinks]):
    """The specs of ``links``, each resolved when looked up (what the site reads): its edges
    resolved once for all."""

    def __init__(self, links: PackedLinks) -> None:
        self._links = links
        self._edges = ResolvedEdges(links.edges, links.names)

    def __getitem__(self, key: str) -> SpecLinks:
        return resolved(self._links.specs[key], self._links.caches, self._edges)

    def __iter__(self) -> Iterator[str]:
        return iter(self._links.specs)

    def __len__(self) -> int:
        return len(self._links.specs)


def _cache(caches: Mapping[str, str], stack: str) -> str:
    cache = caches.get(stack)
    if cache is None:
        raise ValueError(f"stack {stack} has no cache in caches")
    return cache
