"""Discovery: read ``<mirror>/cache_spack_io_index.json`` and turn it into typed sources.

The document maps each ref to a list of ``{"label", "url"}`` (FORMAT.md section 1). Each URL
names either a v2 index (``.../build_cache/index.json``, with an ``index.json.hash`` sidecar) or a
v3 index blob (``.../blobs/sha256/<xx>/<sha256>``, whose name is its checksum). ``s3://<bucket>/``
URLs map onto the mirror base unless a configured rewrite matches first.

A ref whose name cannot be a branch's (not a safe path component, or a name the output keeps
for itself, ``index.html``), or whose entries cannot be used (no ``root``
label, a duplicate label, a URL of neither form), is kept in :attr:`Discovery.problems` with the
reason, so that syncing it fails with that reason while the other refs go on.
"""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict
from urllib.parse import quote, urlsplit

import msgspec

from ..config import Config
from ..decode.records import strict_utf8
from ..errors import IndexFormatError
from ..files import as_given, branch_name_problem
from ..text import shown
from ..urls import file_path, has_userinfo, redacted, without_credentials
from .manifest import decoded

DISCOVERY_FILE = "cache_spack_io_index.json"
ROOT_LABEL = "root"

_BLOB = re.compile(r"(?:^|/)blobs/sha256/(?P<prefix>[0-9a-f]{2})/(?P<sum>[0-9a-f]{64})$")
_V2 = re.compile(r"(?:^|/)build_cache/index\.json$")
_LABEL = re.compile(r"[^\x00-\x1f\x7f]{1,200}")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")  # RFC 3986


@dataclass(frozen=True)
class Mirror:
    """The mirror's base, local (a folder) or remote (http/https)."""

    base: str
    #: A local mirror's folder as given (absolute, not resolved), when symbolic links lead from
    #: it to ``base``: the discovery document may name its files under either.
    given: str | None = None

    @classmethod
    def parse(cls, mirror: str) -> Mirror:
        """Normalise a mirror given as ``http(s)://...``, ``file://...`` or a plain path.

        A folder becomes a ``file://`` URL of its absolute path, percent-encoded as URLs are
        (``/srv/my mirror`` is ``file:///srv/my%20mirror``), so that a ``#``, ``?`` or ``%``
        in a folder name is read as part of the name; :func:`file_path` turns it back.
        """
        scheme, sep, rest = mirror.partition("://")
        scheme = scheme.lower() if sep else ""
        if scheme in ("http", "https", "s3"):
            base, _ = without_credentials(f"{scheme}://{rest}")
            return cls(base.rstrip("/"))
        if scheme == "file":
            mirror = file_path(f"file://{rest}")
        path = Path(mirror).expanduser()
        folder = os.fsencode(path.resolve())
        given = os.fsencode(as_given(path)) if path.is_absolute() else folder
        return cls("file://" + quote(folder), "file://" + quote(given) if given != folder else None)

    @property
    def is_local(self) -> bool:
        """True for a folder on this machine."""
        return self.base.startswith("file://")

    def contains(self, url: str) -> bool:
        """Whether ``url`` is on this mirror: same scheme and host, or under the local folder.

        A discovery document is the mirror's word, not the user's: it may not send the crawler
        to other hosts, or from a remote mirror to this machine's files.
        """
        ours, theirs = urlsplit(self.base), urlsplit(url)
        if ours.scheme == "file" or theirs.scheme == "file":
            if ours.scheme != theirs.scheme:
                return False
            # Lexically: ".." cannot climb out, and symlinks inside the mirror are the mirror's.
            path = os.path.normpath(file_path(url))
            for base in filter(None, (self.base, self.given)):
                root = os.path.normpath(file_path(base))
                if path == root or path.startswith(root.rstrip("/") + "/"):
                    return True
            return False
        if ours.scheme == "s3" or theirs.scheme == "s3":
            # In the bucket, and lexically under the prefix: a store may normalise "..".
            root, path = (
                posixpath.normpath(ours.path or "/"),
                posixpath.normpath(theirs.path or "/"),
            )
            under = path == root or path.startswith(root.rstrip("/") + "/")
            return (ours.scheme, ours.netloc) == (theirs.scheme, theirs.netloc) and under
        return (ours.scheme, ours.netloc.lower()) == (theirs.scheme, theirs.netloc.lower())

    def join(self, path: str) -> str:
        """The location of ``path`` (relative to the mirror root)."""
        return f"{self.base}/{path.lstrip('/')}"

    @property
    def discovery_url(self) -> str:
        """Where the discovery document is."""
        return self.join(DISCOVERY_FILE)


@dataclass(frozen=True)
class Source:
    """One index of one ref: the ``root`` cache or a stack's."""

    ref: str
    label: str
    url: str  # as listed in the discovery document
    location: str  # where it is fetched from (http(s):// or file://)
    layout: Literal["v2", "v3"]
    checksum: str | None  # v3: the sha256 the blob's name promises
    #: v3 read through an index manifest (a plain cache, :mod:`.layout`): the manifest's
    #: location, the media type of the blob it led to (None: the manifest was not found), and
    #: the media types it listed besides.
    manifest: str | None = None
    media_type: str | None = None
    media_types_left: tuple[str, ...] = ()

    @property
    def is_root(self) -> bool:
        """True for the ref's top-level cache."""
        return self.label == ROOT_LABEL

    @property
    def kind(self) -> Literal["root", "stack"]:
        """What a report calls the source."""
        return "root" if self.is_root else "stack"

    @property
    def is_local(self) -> bool:
        """True for a file on this machine (read and hashed in place, never cached)."""
        return self.location.startswith("file://")

    @property
    def sidecar(self) -> str | None:
        """The v2 ``index.json.hash`` location, None for v3."""
        return self.location + ".hash" if self.layout == "v2" else None


class ManifestFacts(TypedDict, total=False):
    """What a report says of a source read through a manifest (see :func:`manifest_facts`)."""

    manifest: str
    media_type: str
    media_types_left: list[str]


def manifest_facts(source: Source) -> ManifestFacts:
    """The manifest, media type read and media types left of a source read through a manifest,
    as a report's source entry has them; nothing for another source."""
    if source.manifest is None:
        return {}
    facts = ManifestFacts(manifest=source.manifest)
    if source.media_type is not None:
        facts["media_type"] = source.media_type
        facts["media_types_left"] = list(source.media_types_left)
    return facts


@dataclass(frozen=True)
class Discovery:
    """The refs of a mirror with their sources, and the refs that cannot be synced."""

    url: str
    refs: dict[str, tuple[Source, ...]]
    problems: dict[str, str]
    #: How each ref was found (see :mod:`.refs`): "listed in <discovery document>", "v3 view
    #: 'x' of <cache>", "declared in <config>"...
    how: dict[str, str] = field(default_factory=dict)
    #: True for the refs of a discovery document: releases and snapshots, published once, that
    #: ``immutable_refs`` holds still. A plain cache's refs (its top-level index, its views) and
    #: declared refs are caches a site keeps pushing to: each run reads them again.
    releases: bool = False

    def is_immutable(self, ref: str, config: Config) -> bool:
        """Whether ``ref``, once published, is not synced again without ``--force``."""
        return self.releases and config.is_immutable(ref)


class _Entry(msgspec.Struct):
    label: str
    url: str


_decode_document = strict_utf8(msgspec.json.Decoder(dict[str, list[_Entry]]).decode)


def map_url(url: str, mirror: Mirror, config: Config) -> str:
    """Where a listed source URL is fetched from (rewrites first, then ``s3://`` mapping), its
    scheme in lowercase as the rest of the tool compares it (``FILE://`` is ``file://``)."""
    for rewrite in config.rewrites:
        if url.startswith(rewrite.prefix):
            replacement, _ = without_credentials(rewrite.replacement)
            return _lower_scheme(replacement + url[len(rewrite.prefix) :])
    url = _lower_scheme(url)
    parts = urlsplit(url)
    shown_url = redacted(url)
    if parts.scheme == "s3":
        if mirror.base.startswith("s3://") and mirror.contains(url):
            return url  # a mirror in S3 reads the URLs on it as they are
        location = mirror.join(parts.path)
        if not mirror.contains(location):  # a local mirror's folder: ".." may not climb out
            raise ValueError(f"URL {shown_url} leads out of the mirror {mirror.base}")
        return location
    if parts.scheme in ("http", "https", "file") and mirror.contains(url):
        return url
    if parts.scheme in ("http", "https", "file"):
        raise ValueError(
            f"URL {shown_url} is not on the mirror {mirror.base} "
            "(a configured rewrite can allow it)"
        )
    raise ValueError(f"unsupported URL {shown_url!r} (expected s3://, http(s):// or file://)")


def _lower_scheme(url: str) -> str:
    found = _SCHEME.match(url)
    return found[0].lower() + url[found.end() :] if found else url


def _source(ref: str, entry: _Entry, mirror: Mirror, config: Config) -> Source:
    # Labels are printed and logged: no control or bidi characters (isprintable).
    if not _LABEL.fullmatch(entry.label) or not entry.label.isprintable():
        raise ValueError(f"bad stack label {entry.label!r}")
    # Every message shows the URL through crawler.urls.redacted: no password, query or fragment.
    url = redacted(entry.url)
    if not entry.url.isprintable():
        raise ValueError(f"URL {url!r} of stack {entry.label!r} holds control characters")
    parts = urlsplit(entry.url)
    if has_userinfo(entry.url):  # in any scheme (s3://KEY:SECRET@ too): they would be published
        raise ValueError(
            f"URL of stack {entry.label!r} holds credentials (user@ or user:password@)"
        )
    if "?" in entry.url or "#" in entry.url:  # a bare "?" or "#" leaves urlsplit's fields empty
        # Neither form of index URL has one; the sidecar's URL is the index's plus ".hash", and
        # the s3:// mapping would drop a query (an S3 versionId, say) without a word.
        raise ValueError(f"URL {url} of stack {entry.label!r} has a query or fragment")
    location = map_url(entry.url, mirror, config)
    if location.startswith("file://") and "\0" in file_path(location):
        raise ValueError(f"URL {url} of stack {entry.label!r} names a path with a NUL (%00)")
    path = parts.path
    blob = _BLOB.search(path)
    if blob:
        if blob["sum"][:2] != blob["prefix"]:
            raise ValueError(f"blob URL {url} is not under blobs/sha256/{blob['sum'][:2]}/")
        return Source(ref, entry.label, entry.url, location, "v3", blob["sum"])
    if _V2.search(path):
        return Source(ref, entry.label, entry.url, location, "v2", None)
    raise ValueError(
        f"URL {url} of stack {entry.label!r} is neither .../build_cache/index.json "
        "nor .../blobs/sha256/<xx>/<sha256>"
    )


def parse_discovery(body: bytes, url: str, mirror: Mirror, config: Config) -> Discovery:
    """Validate a discovery document's bytes and build the sources of every ref."""
    document = decoded(_decode_document, body, url, "a discovery document")
    if not document:  # a mirror being set up or torn down: no run can do anything with it
        raise IndexFormatError(url, "the discovery document lists no refs")
    refs: dict[str, tuple[Source, ...]] = {}
    problems: dict[str, str] = {}
    for ref, entries in sorted(document.items()):
        refused = branch_name_problem(ref, "ref")
        if refused is not None:
            problems[ref] = shown(refused)
            continue
        try:
            sources = [_source(ref, entry, mirror, config) for entry in entries]
        except ValueError as err:  # quoting the document's text: escaped, and not too long
            problems[ref] = shown(str(err))
            continue
        labels = [s.label for s in sources]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            problems[ref] = f"duplicate stack labels {duplicates}"
        elif ROOT_LABEL not in labels:
            problems[ref] = f"no '{ROOT_LABEL}' index listed"
        else:
            refs[ref] = tuple(sorted(sources, key=lambda s: (not s.is_root, s.label)))
    return Discovery(url, refs, problems, dict.fromkeys(refs, f"listed in {url}"), releases=True)
