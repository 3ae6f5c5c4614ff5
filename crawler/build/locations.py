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

    @classmethod
    def of(cls, sources: Iterable[Source]) -> Caches:
        """The caches of a ref's sources."""
        return cls({s.label: (Place.of(s.location).cache, s.layout) for s in sources})

    def locations(self, row: SpecRow, stacks: Iterable[str]) -> dict[str, str]:
        """Where ``row``'s spec is in the cache of each of ``stacks`` (those known)."""
        found = {}
        paths: dict[str, str] = {}  # a spec has one path per layout, whatever the cache
        for label in stacks:
            cache = self._caches.get(label)
            if cache is not None:
                url, layout = cache
                path = paths.get(layout)
                if path is None:
                    path = paths[layout] = _quoted(_path(row, layout))
                found[label] = f"{url}/{path}"
        return found


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
