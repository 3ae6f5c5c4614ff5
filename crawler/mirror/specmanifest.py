"""Spec manifests of a v3 build cache: what a binary is, read from the manifest that
``spack buildcache push`` writes for each spec.

``<cache>/v3/manifests/spec/<name>/<name>-<version>-<hash>.spec.manifest.json`` is a manifest
(:mod:`.manifest`) listing two blobs: the tarball (``application/vnd.spack.install.v2.tar+gzip``)
and the spec file (``application/vnd.spack.spec.vN+json``), each by its SHA-256 and byte count
(``contentLength``). A signed cache clear-signs it (:mod:`.signing` checks the signature).

A manifest never changes for its hash (pushing a spec again writes the same name only when its
blobs are the same spec's: a new build is a new hash), so what is read of it is kept
(:mod:`crawler.sync.binaries`).
"""

from __future__ import annotations

import re

import msgspec

from ..errors import IndexFormatError
from ..text import shown
from .manifest import blob_path, check_checksum, is_signed, read_manifest

#: The media type of a binary's tarball, as Spack writes it.
TARBALL_TYPE = "application/vnd.spack.install.v2.tar+gzip"
_SPEC_TYPE = re.compile(r"application/vnd\.spack\.spec\.v[0-9]{1,4}\+json")
#: The largest spec manifest read: Spack's are under 1 KB, 2 KB signed.
SPEC_MANIFEST_LIMIT = 64 << 10
#: The largest tarball size believed (1 TiB): a larger ``contentLength`` is no binary's.
MAX_TARBALL = 1 << 40


class Binary(msgspec.Struct, frozen=True, gc=False):
    """What a spec manifest says of its binary: the tarball blob (SHA-256, bytes), the spec
    blob's SHA-256 if listed, and whether the manifest is clear-signed."""

    tarball: str
    size: int
    spec_blob: str | None
    signed: bool

    @property
    def tarball_path(self) -> str:
        """The tarball's path under its cache root."""
        return blob_path(self.tarball)


def read_spec_manifest(body: bytes, url: str) -> Binary:
    """The binary the spec manifest at ``url`` names; :class:`IndexFormatError` naming
    ``url`` and the reason when it is no manifest, lists no tarball, or names it so that its
    path or size cannot be trusted."""
    manifest = read_manifest(body, url)
    tarballs = [blob for blob in manifest.data if blob.media_type == TARBALL_TYPE]
    if not tarballs:
        types = ", ".join(shown(b.media_type, 80) for b in manifest.data) or "nothing"
        raise IndexFormatError(url, f"the spec manifest lists no tarball ({TARBALL_TYPE}): {types}")
    tarball = tarballs[0]  # the first, as Spack takes
    check_checksum(tarball, "tarball", url)
    size = tarball.content_length
    if size is None:
        raise IndexFormatError(url, "tarball: no contentLength")
    if not 0 <= size <= MAX_TARBALL:
        raise IndexFormatError(url, f"tarball: contentLength {size:,} is no binary's size")
    specs = [blob for blob in manifest.data if _SPEC_TYPE.fullmatch(blob.media_type)]
    if specs:
        check_checksum(specs[0], "spec file", url)
    spec_blob = specs[0].checksum if specs else None
    return Binary(tarball.checksum, size, spec_blob, is_signed(body))
