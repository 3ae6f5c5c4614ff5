"""Locations: where a spec is fetched from in each cache that holds it (``index.json`` schema 2).

Spack names a spec's files after the spec, so the name, version, hash (and, in v2, the
architecture and compiler) of a spec and the cache's URL are enough:

* a v3 cache (Spack v1.0+) has the spec's manifest at
  ``<cache>/v3/manifests/spec/<name>/<name>-<version>-<hash>.spec.manifest.json``; it lists the
  spec file and the tarball as blobs of the cache (``<cache>/blobs/sha256/<xx>/<sha256>``);
* a v2 cache (Spack 0.18-0.23) has the spec file at ``<cache>/build_cache/<platform>-<os>-
  <target>-<compiler name>-<compiler version>-<name>-<version>-<hash>.spec.json.sig`` (the
  name Spack tries first; an unsigned cache has ``.spec.json``), and the tarball beside it, in
  ``<platform>-<os>-<target>/<compiler name>-<compiler version>/<name>-<version>/``, ending in
  ``.spack``.

``links.json`` gives each spec's path under the caches, and each cache's URL once.
A cache's URL is where its index was fetched from (so ``s3://`` URLs of a discovery document
are mapped to the mirror as the index's were). docs/consumers.md shows the way to the tarball.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from urllib.parse import quote

from ..decode.validate import SpecRow
from ..mirror.discovery import Source
from ..mirror.layout import Place


class Caches:
    """The caches of one ref's indexes, by label: their URL and layout."""

    def __init__(self, caches: Mapping[str, tuple[str, str]]) -> None:
        self._caches = dict(caches)
        #: Each tuple of stacks met: its stacks of known caches, grouped by layout (60,000
        #: specs hold a few hundred distinct tuples; the groups are shared, as the tuples are).
        self._layouts: dict[tuple[str, ...], list[tuple[str, tuple[str, ...]]]] = {}

    @classmethod
    def of(cls, sources: Iterable[Source]) -> Caches:
        """The caches of a ref's sources."""
        return cls({s.label: (Place.of(s.location).cache, s.layout) for s in sources})

    def paths(self, row: SpecRow, stacks: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
        """Where ``row``'s spec is under the caches of ``stacks`` (those known, sorted): its
        path under them -> the stacks whose caches hold it there (``links.json``'s
        ``paths``): one path per layout, whatever the cache."""
        groups = self._layouts.get(stacks)
        if groups is None:
            groups = self._layouts[stacks] = self._grouped(stacks)
        return {_quoted(_path(row, layout)): labels for layout, labels in groups}

    def _grouped(self, stacks: tuple[str, ...]) -> list[tuple[str, tuple[str, ...]]]:
        by_layout: dict[str, list[str]] = {}
        for label in stacks:
            cache = self._caches.get(label)
            if cache is not None:
                by_layout.setdefault(cache[1], []).append(label)
        return [(layout, tuple(labels)) for layout, labels in by_layout.items()]

    def urls(self) -> dict[str, str]:
        """The URL of the cache of each stack :meth:`paths` gave a path under (by label)."""
        used = {
            label for groups in self._layouts.values() for _, labels in groups for label in labels
        }
        return {label: self._caches[label][0] for label in sorted(used)}


#: Characters a path keeps as they are (quote's unreserved ones and ``safe`` below): most
#: paths are made of them alone, and a match costs far less than quote().
_PLAIN = re.compile(r"[A-Za-z0-9_.\-~/=+@]*")


def _quoted(path: str) -> str:
    return path if _PLAIN.fullmatch(path) else quote(path, safe="/~=+@")


def _path(row: SpecRow, layout: str) -> str:
    """The path of ``row``'s spec manifest (v3) or spec file (v2) in its cache, each value
    with ``/`` made ``_``, as Spack's ``Spec.format_path`` makes it (a git version may hold
    one: ``git.feature/x=1.0``)."""
    name, version = row.name, row.version
    if layout == "v3":
        name, version = _part(name), _part(version)
        return f"v3/manifests/spec/{name}/{name}-{version}-{row.hash}.spec.manifest.json"
    compiler = row.compiler.replace("@", "-")
    path = f"{row.platform}-{row.os}-{row.target}-{compiler}-{name}-{version}-{row.hash}"
    if "/" in path:  # rare: replaced in each value alone (the hash holds none)
        values = (row.platform, row.os, row.target, compiler, name, version)
        path = "-".join([*map(_part, values), row.hash])
    return f"build_cache/{path}.spec.json.sig"


def _part(value: str) -> str:
    return value.replace("/", "_")
