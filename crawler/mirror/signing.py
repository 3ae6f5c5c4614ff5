"""Signatures of a signed v3 build cache: who signed each spec manifest.

A signed cache publishes its public keys as manifests: ``v3/manifests/key/keys.manifest.json``
lists the key index blob (``application/vnd.spack.keyindex.v1+json``: ``{"keys":
{<fingerprint>: {...}}}``), and ``v3/manifests/key/<fingerprint>.key.manifest.json`` each
key's blob (``application/pgp-keys``). A spec manifest is clear-signed by one of them.

The check is the one Spack makes, with the ``gpg`` program (``$CRAWLER_GPG`` names another):
the cache's keys, and only those, imported into a keyring of the run's own (a temporary
folder: the user's keyring is never read), then ``gpg --verify`` of each manifest, its status
lines read. A verdict is ``signed`` (with the primary key's fingerprint), ``unsigned``,
``unknown key`` (signed by no key the cache publishes), ``bad signature`` (the text does not
match, or no signature gpg can read) or ``unchecked`` (no gpg on this machine: warned of once,
never a failure).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

import msgspec

from ..errors import FetchError, IndexFormatError, NotFoundError
from ..text import shown
from .fetch import Fetcher
from .manifest import blob_path, check_checksum, read_manifest

log = logging.getLogger(__name__)

KEY_INDEX_TYPE = "application/vnd.spack.keyindex.v1+json"
KEY_TYPE = "application/pgp-keys"
#: The largest key manifest read (Spack's are a few hundred bytes), key index and key.
KEY_MANIFEST_LIMIT = 64 << 10
KEY_LIMIT = 1 << 20
#: The most keys a cache's index may list (Spack's public mirror publishes one or two).
MAX_KEYS = 64
#: How long one ``gpg`` run may take.
GPG_SECONDS = 30.0
_FINGERPRINT = re.compile(r"[0-9A-Fa-f]{16,64}")

SIGNED, UNSIGNED, UNKNOWN_KEY, BAD_SIGNATURE, UNCHECKED = (
    "signed",
    "unsigned",
    "unknown key",
    "bad signature",
    "unchecked",
)


class Verdict(msgspec.Struct, frozen=True, gc=False):
    """What the check of one manifest found, and the signer's fingerprint when it is signed."""

    state: str
    fingerprint: str | None = None


class _KeyIndex(msgspec.Struct):
    keys: dict[str, msgspec.Raw]


def gpg_program() -> str | None:
    """The gpg program to run (``$CRAWLER_GPG``, else ``gpg``), None when it is not found."""
    return shutil.which(os.environ.get("CRAWLER_GPG") or "gpg")


async def published_keys(fetcher: Fetcher, cache: str) -> list[bytes]:
    """The public keys the cache at ``cache`` publishes (none when it has no key index);
    :class:`FetchError` or :class:`IndexFormatError` when they cannot be read."""
    folder = f"{cache}/v3/manifests/key"
    try:
        index = await _blob(fetcher, cache, f"{folder}/keys.manifest.json", KEY_INDEX_TYPE)
    except NotFoundError:
        return []
    url = f"{folder}/keys.manifest.json"
    try:
        listed = msgspec.json.decode(index, type=_KeyIndex)
    except msgspec.DecodeError as err:
        raise IndexFormatError(
            url, f"the key index is no {{keys: {{...}}}} object: {err}"
        ) from None
    if len(listed.keys) > MAX_KEYS:
        raise IndexFormatError(
            url, f"the key index lists {len(listed.keys):,} keys (at most {MAX_KEYS})"
        )
    keys = []
    for fingerprint in sorted(listed.keys):
        if not _FINGERPRINT.fullmatch(fingerprint):
            raise IndexFormatError(
                url, f"the key index names {shown(fingerprint, 80)!r}, no fingerprint"
            )
        manifest = f"{folder}/{fingerprint}.key.manifest.json"
        keys.append(await _blob(fetcher, cache, manifest, KEY_TYPE))
    return keys


async def _blob(fetcher: Fetcher, cache: str, manifest_url: str, media_type: str) -> bytes:
    """The blob of ``media_type`` the manifest at ``manifest_url`` lists, its checksum checked."""
    body = await fetcher.read_bounded(
        manifest_url, KEY_MANIFEST_LIMIT, "the limit for a key manifest"
    )
    listed = [b for b in read_manifest(body, manifest_url).data if b.media_type == media_type]
    if not listed:
        raise IndexFormatError(manifest_url, f"the manifest lists no {media_type} blob")
    check_checksum(listed[0], media_type, manifest_url)
    url = f"{cache}/{blob_path(listed[0].checksum)}"
    data = await fetcher.read_bounded(url, KEY_LIMIT, "the limit for a key")
    if hashlib.sha256(data).hexdigest() != listed[0].checksum:
        raise FetchError(url, "the blob is not the one its manifest names (sha256 differs)")
    return data


class Keyring:
    """The keys of one cache in a keyring of their own; use as ``async with``. Without a gpg
    program (``gpg=None``), every signed manifest is ``unchecked``."""

    def __init__(self, keys: list[bytes], gpg: str | None) -> None:
        self.keys = keys
        self.gpg = gpg
        self._home: str | None = None

    async def __aenter__(self) -> Keyring:
        if self.gpg is not None and self.keys:
            self._home = tempfile.mkdtemp(prefix="crawler-gpg-")
            for number, key in enumerate(self.keys):
                file = Path(self._home) / f"key-{number}.asc"
                file.write_bytes(key)
                await self._run("--import", str(file))  # a key gpg refuses is simply not there
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._home is not None:
            shutil.rmtree(self._home, ignore_errors=True)

    async def verify(self, body: bytes, signed: bool) -> Verdict:
        """The verdict on the manifest ``body`` (``signed``: clear-signed)."""
        if not signed:
            return Verdict(UNSIGNED)
        if self.gpg is None:
            return Verdict(UNCHECKED)
        if self._home is None:  # the cache publishes no key
            return Verdict(UNKNOWN_KEY)
        return status_verdict(await self._run("--verify", input=body))

    async def _run(self, *args: str, input: bytes = b"") -> bytes:
        """gpg's status lines (``--status-fd 1``) for ``args`` in this keyring; none when gpg
        cannot be run or takes longer than :data:`GPG_SECONDS` (warned of): a key not
        imported, a signature not verified."""
        assert self.gpg is not None and self._home is not None
        try:
            process = await asyncio.create_subprocess_exec(
                self.gpg,
                "--homedir",
                self._home,
                "--batch",
                "--no-tty",
                "--no-auto-key-retrieve",
                "--status-fd",
                "1",
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as err:
            log.warning("cannot run %s: %s", self.gpg, err.strerror or err)
            return b""
        try:
            async with asyncio.timeout(GPG_SECONDS):
                out, _ = await process.communicate(input)
        except TimeoutError:
            log.warning("gpg %s took longer than %gs: stopped", args[0], GPG_SECONDS)
            out = b""
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        return out


def status_verdict(status: bytes) -> Verdict:
    """The verdict gpg's status lines of a ``--verify`` give (see GnuPG's doc/DETAILS)."""
    words = [line.split() for line in status.splitlines() if line.startswith(b"[GNUPG:] ")]
    found = {w[1]: w[2:] for w in words if len(w) > 1}
    if b"BADSIG" in found:
        return Verdict(BAD_SIGNATURE)
    valid = found.get(b"VALIDSIG")
    if valid:  # its last field is the primary key's fingerprint (10 fields), else the key's
        return Verdict(SIGNED, valid[-1].decode("ascii", "replace").upper())
    if b"NO_PUBKEY" in found or b"ERRSIG" in found:
        return Verdict(UNKNOWN_KEY)
    return Verdict(BAD_SIGNATURE)
