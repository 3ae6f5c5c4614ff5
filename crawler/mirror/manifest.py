"""Index manifests of a v3 build cache: which index blob to read.

``<cache>/v3/manifests/index/[<view>/]index.manifest.json`` is
``{"version": 3, "data": [{"mediaType", "compression", "checksumAlgorithm", "checksum",
"contentLength"}, ...]}`` (Spack's ``schema/url_buildcache_manifest.py``). Since Spack v1.3 it may
list several index blobs, one per Database version (``application/vnd.spack.db.v8+json`` beside
``...db.v9+json``), so that older releases can read the same cache. The newest version this
crawler reads is taken (:data:`~crawler.decode.records.SUPPORTED_VERSIONS`); the others are
reported as left.

A manifest may be PGP clear-signed. The armour is taken off here and the signature is **not**
verified: the index blob is checked against the checksum the manifest names, no more (the
discovery document is trusted the same way). Spec manifests share the shape
(:mod:`.specmanifest`); their signatures are checked by :mod:`.signing`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import msgspec

from ..decode.records import SUPPORTED_VERSIONS, strict_utf8
from ..errors import IndexFormatError
from ..text import shown

#: The layout version of a manifest (Spack refuses others: "Layout version mismatch").
MANIFEST_VERSION = 3
#: Media types of an index blob: a Spack Database of version N.
_INDEX_TYPE = re.compile(r"application/vnd\.spack\.db\.v(?P<version>[0-9]{1,4})\+json")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COMPRESSIONS = ("none", "gzip")  # a gzip blob is also recognised by its bytes

_SIGNED = b"-----BEGIN PGP SIGNED MESSAGE-----"
_SIGNATURE = b"-----BEGIN PGP SIGNATURE-----"
T = TypeVar("T")


class Blob(msgspec.Struct, frozen=True, rename="camel"):
    """One entry of a manifest's ``data``: a blob of the cache."""

    media_type: str
    checksum_algorithm: str
    checksum: str
    compression: str = "none"
    content_length: int | None = None


class Manifest(msgspec.Struct, frozen=True):
    """A manifest of a v3 cache (index, spec, key or key index): the blobs it lists."""

    version: int
    data: list[Blob]


_decode_manifest = strict_utf8(msgspec.json.Decoder(Manifest).decode)


@dataclass(frozen=True)
class IndexBlob:
    """The index blob a manifest leads to, and what it left."""

    media_type: str
    db_version: int
    checksum: str
    #: The other media types the manifest lists (other Database versions, anything else), in
    #: its order.
    left: tuple[str, ...]

    @property
    def path(self) -> str:
        """The blob's path under its cache root (``url_buildcache``'s blob path)."""
        return blob_path(self.checksum)


def blob_path(checksum: str) -> str:
    """``blobs/sha256/<xx>/<checksum>``: where a cache keeps a blob (beside ``v3/``)."""
    return f"blobs/sha256/{checksum[:2]}/{checksum}"


def supported_versions() -> list[int]:
    """The Database versions the decoder reads, as numbers."""
    return sorted(int(v) for v in SUPPORTED_VERSIONS)


def is_signed(body: bytes) -> bool:
    """Whether ``body`` is a PGP clear-signed message."""
    return body.lstrip().startswith(_SIGNED)


def unsigned(body: bytes, url: str) -> bytes:
    """The text of a PGP clear-signed message (RFC 4880 7.1: the armour headers, the
    dash-escaping and the signature taken off), or ``body`` itself when it is not signed. The
    signature is not verified."""
    if not is_signed(body):
        return body
    lines = body.lstrip().splitlines()
    try:
        start = lines.index(b"", 1) + 1  # the armour headers end with an empty line
        end = lines.index(_SIGNATURE, start)
    except ValueError:
        raise IndexFormatError(url, "a PGP clear-signed manifest without its parts") from None
    text = [line[2:] if line.startswith(b"- ") else line for line in lines[start:end]]
    return b"\n".join(text)


def choose_index(body: bytes, url: str) -> IndexBlob:
    """The index blob to read of the manifest at ``url``: the newest Database version the
    decoder reads. :class:`IndexFormatError` (naming ``url``) when there is none."""
    manifest = read_manifest(body, url)
    listed = [(_index_version(blob.media_type), blob) for blob in manifest.data]
    indexes = [(version, blob) for version, blob in listed if version is not None]
    if not indexes:
        types = ", ".join(shown(blob.media_type, 80) for blob in manifest.data) or "nothing"
        raise IndexFormatError(
            url, f"the manifest lists no index blob (application/vnd.spack.db.vN+json): {types}"
        )
    readable = [(v, blob) for v, blob in indexes if v in supported_versions()]
    if not readable:
        found = ", ".join(str(v) for v in sorted({v for v, _ in indexes}))
        reads = ", ".join(str(v) for v in supported_versions())
        raise IndexFormatError(
            url,
            f"the manifest lists only index blobs of Database versions {found} "
            f"(this crawler reads {reads})",
        )
    newest = max(v for v, _ in readable)
    blob = next(blob for v, blob in readable if v == newest)  # the first, as Spack takes
    _check_blob(blob, url)
    left = tuple(shown(b.media_type, 80) for b in manifest.data if b is not blob)
    return IndexBlob(blob.media_type, newest, blob.checksum, left)


def read_manifest(body: bytes, url: str) -> Manifest:
    """The manifest at ``url``, its clear-signing taken off (not verified), of layout version
    3; :class:`IndexFormatError` naming ``url`` and what is wrong otherwise."""
    manifest = decoded(_decode_manifest, unsigned(body, url), url, "a manifest")
    if manifest.version != MANIFEST_VERSION:
        raise IndexFormatError(
            url, f"manifest layout version {manifest.version} (this crawler reads 3)"
        )
    return manifest


def decoded(decode: Callable[[bytes], T], body: bytes, url: str, what: str) -> T:
    """``decode(body)``; an :class:`IndexFormatError` naming ``url`` when ``body`` is not
    ``what`` (a manifest, a discovery document)."""
    try:
        return decode(body)
    except msgspec.ValidationError as err:
        raise IndexFormatError(url, f"not {what}: {err}") from None
    except msgspec.DecodeError as err:
        raise IndexFormatError(url, f"not valid JSON: {err}") from None
    except UnicodeDecodeError as err:
        raise IndexFormatError(url, f"a string is not valid UTF-8 ({err.reason})") from None
    except RecursionError:
        raise IndexFormatError(url, f"not {what}: nested too deeply") from None


def _index_version(media_type: str) -> int | None:
    found = _INDEX_TYPE.fullmatch(media_type)
    return int(found["version"]) if found else None


def _check_blob(blob: Blob, url: str) -> None:
    """The chosen blob must be named so that its path and its check are certain."""
    what = f"index blob {blob.media_type}"
    check_checksum(blob, what, url)
    if blob.compression not in _COMPRESSIONS:
        compression = shown(blob.compression, 40)
        raise IndexFormatError(url, f"{what}: compression {compression!r} (read: none, gzip)")


def check_checksum(blob: Blob, what: str, url: str) -> None:
    """A blob's checksum names its path: it must be a SHA-256 in hex."""
    if blob.checksum_algorithm != "sha256":
        algorithm = shown(blob.checksum_algorithm, 40)
        raise IndexFormatError(url, f"{what}: checksum algorithm {algorithm!r} (not sha256)")
    if not _SHA256.fullmatch(blob.checksum):
        checksum = shown(blob.checksum, 80)
        raise IndexFormatError(url, f"{what}: checksum {checksum!r} is no sha256 in hex")
