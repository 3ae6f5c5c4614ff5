"""A plain build cache (what ``spack buildcache push`` and ``update-index`` write), and how one
of its indexes becomes a :class:`~crawler.mirror.discovery.Source`.

A cache root holds, in layout v3 (Spack 1.0+), ``v3/manifests/index/index.manifest.json`` (the
top-level index), ``v3/manifests/index/<view>/index.manifest.json`` (index views, Spack's
``update-index --name``) and ``blobs/sha256/<xx>/<sha256>``; in layout v2 (Spack 0.18-0.23),
``build_cache/index.json`` with its ``index.json.hash``. Both may sit under one root (``spack
buildcache migrate``): v3 is read first, as Spack does.

An index is given by a :class:`Place`: a cache root (its index found as above), a view of one,
or the index itself (a v2 ``index.json``, a v3 manifest, a v3 blob). A manifest is read when
the refs are found, and its blob becomes the source; one that is not there (404) leaves the
manifest as the source, so that reading it says "missing", as for any index not found.

A view's name is held as Spack writes it (``gcc+cuda``), and spelt in a location as the
location's scheme spells a path (:func:`spelt`): percent-encoded in an ``http(s)://`` or
``file://`` URL, as it is in an ``s3://`` one, whose path is the object's key (botocore
encodes it for the request).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from ..errors import NotFoundError
from ..urls import without_credentials
from .discovery import Source
from .fetch import Fetcher
from .manifest import MANIFEST_VERSION, choose_index

INDEX_FOLDER = f"v{MANIFEST_VERSION}/manifests/index"
MANIFEST_FILE = "index.manifest.json"
V2_INDEX = "build_cache/index.json"

_V2 = re.compile(r"^(?P<cache>.*?)/?build_cache/index\.json$")
_MANIFEST = re.compile(
    r"^(?P<cache>.*?)/?v3/manifests/index/(?:(?P<view>[^/]+)/)?index\.manifest\.json$"
)
_BLOB = re.compile(r"^(?P<cache>.*?)/?blobs/sha256/(?P<prefix>[0-9a-f]{2})/(?P<sum>[0-9a-f]{64})$")

Kind = Literal["cache", "v2", "manifest", "blob"]


@dataclass(frozen=True)
class Place:
    """Where one index of a plain cache is: the cache root (a URL, no slash at its end), and
    what of it: the cache itself (its top-level index, or a view), or one index file."""

    cache: str
    kind: Kind
    view: str | None = None
    checksum: str | None = None  # a blob's

    @classmethod
    def of(cls, location: str, view: str | None = None) -> Place:
        """The place of a URL (credentials taken off: requests get them by origin) naming a
        cache root, or an index file of one by its path in the layout. ``view``: a view of the
        cache root ``location``."""
        location = without_credentials(location)[0].rstrip("/")
        parts = urlsplit(location)
        path = parts.path
        if view is not None:
            return cls(location, "cache", view)
        for kind, pattern in (("v2", _V2), ("manifest", _MANIFEST), ("blob", _BLOB)):
            found = pattern.match(path)
            if found:
                cache = urlunsplit(parts._replace(path=found["cache"]))
                if kind == "blob" and found["sum"][:2] != found["prefix"]:
                    raise ValueError(
                        f"blob {location} is not under blobs/sha256/{found['sum'][:2]}/"
                    )
                groups = found.groupdict()
                named = groups.get("view")
                view = None if named is None else unspelt(location, named)
                return cls(cache, kind, view, groups.get("sum"))  # type: ignore[arg-type]
        return cls(location, "cache")

    def join(self, path: str) -> str:
        """The location of ``path`` under the cache root."""
        return f"{self.cache}/{path}"

    @property
    def manifest(self) -> str:
        """Where the index manifest of the cache (or of its view) is."""
        folder = f"{INDEX_FOLDER}/{spelt(self.cache, self.view)}" if self.view else INDEX_FOLDER
        return self.join(f"{folder}/{MANIFEST_FILE}")

    @property
    def views_folder(self) -> str:
        """The folder that holds the cache's views (one folder each)."""
        return self.join(INDEX_FOLDER)

    @property
    def v2_index(self) -> str:
        """Where a v2 cache's index is."""
        return self.join(V2_INDEX)

    def describe(self) -> str:
        """How the index was found, for ``crawler branches`` and the logs."""
        what = {"cache": "index", "v2": "v2 index", "manifest": "v3 index", "blob": "v3 blob"}
        view = f"v3 view {self.view!r}" if self.view else what[self.kind]
        return f"{view} of {self.cache or '/'}"


def spelt(base: str, path: str) -> str:
    """``path`` as a location under ``base`` spells it: percent-encoded under an
    ``http(s)://`` or ``file://`` URL (``+`` kept, as Spack writes it), as it is under an
    ``s3://`` one, whose path is a key."""
    return path if base.lower().startswith("s3://") else quote(path, safe="/~+")


def unspelt(location: str, segment: str) -> str:
    """A part of ``location``'s path as a name: :func:`spelt` undone."""
    return segment if location.lower().startswith("s3://") else unquote(segment)


def relative(base: str, path: str) -> str:
    """``path`` (a relative path, ``/`` between its parts) under the URL ``base``, spelt as
    ``base`` spells a path (:func:`spelt`), its ``.`` and ``..`` resolved (a folder's as a
    URL's)."""
    parts = urlsplit(base)
    joined = posixpath.normpath(posixpath.join(parts.path or "/", spelt(base, path)))
    return urlunsplit(parts._replace(path=joined.rstrip("/") if joined != "/" else ""))


async def resolve(fetcher: Fetcher, ref: str, label: str, place: Place) -> Source:
    """The source of the index at ``place``: a manifest is read, and its blob is the source.

    Raises :class:`~crawler.errors.IndexFormatError` for a manifest that cannot be used and
    :class:`~crawler.errors.FetchError` for one that cannot be read (but not found).
    """
    if place.kind == "v2":
        location = place.v2_index
        return Source(ref, label, location, location, "v2", None)
    if place.kind == "blob":
        assert place.checksum is not None
        location = place.join(f"blobs/sha256/{place.checksum[:2]}/{place.checksum}")
        return Source(ref, label, location, location, "v3", place.checksum)
    manifest = place.manifest
    try:
        body = await fetcher.read(manifest)
    except NotFoundError:
        if place.kind == "cache" and place.view is None and await _v2_there(fetcher, place):
            return await resolve(fetcher, ref, label, Place(place.cache, "v2"))
        # Reading it says "missing", naming the manifest (a pruned stack; a root not indexed).
        return Source(ref, label, manifest, manifest, "v3", None, manifest=manifest)
    blob = choose_index(body, manifest)
    location = place.join(blob.path)
    return Source(
        ref,
        label,
        location,
        location,
        "v3",
        blob.checksum,
        manifest=manifest,
        media_type=blob.media_type,
        media_types_left=blob.left,
    )


async def _v2_there(fetcher: Fetcher, place: Place) -> bool:
    """Whether the cache has a v2 index: a ``HEAD`` finds it, or (a server that does not
    answer ``HEAD``) its ``index.json.hash`` is there, which ``update-index`` writes with it."""
    if await fetcher.confirmed(place.v2_index):
        return True
    try:
        await fetcher.read(place.v2_index + ".hash", sidecar=True)
    except NotFoundError:
        return False
    return True


def absent(source: Source) -> bool:
    """Whether ``source`` is a v3 manifest that was not found (its index is not there)."""
    return source.manifest is not None and source.media_type is None
