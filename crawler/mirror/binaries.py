"""What one spec's binary is in one v3 cache: its spec manifest read (:mod:`.specmanifest`),
its signature checked (:mod:`.signing`), and its tarball looked for (``HEAD``, ``HeadObject``
or a look at a file), through the run's :class:`~crawler.mirror.fetch.Fetcher` and so with its
retries. Used by the sync for the specs it has not seen before and by ``crawler audit`` for
every spec of a published branch.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack

import msgspec

from ..errors import FetchError, IndexFormatError, NotFoundError
from .fetch import Fetcher
from .signing import (
    BAD_SIGNATURE,
    UNCHECKED,
    UNKNOWN_KEY,
    UNSIGNED,
    Keyring,
    Verdict,
    published_keys,
)
from .specmanifest import SPEC_MANIFEST_LIMIT, read_spec_manifest

log = logging.getLogger(__name__)

#: Where a cache's spec manifests are, under its root.
SPEC_FOLDER = "/v3/manifests/spec/"
_LIMIT = "the limit for a spec manifest"
#: The verdicts that are findings.
_FINDINGS = (UNSIGNED, UNKNOWN_KEY, BAD_SIGNATURE)


class BinaryFacts(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """What was learnt of a spec's binary in one cache. ``missing`` is ``manifest`` or
    ``tarball`` when that file is not there; ``problem`` says why a manifest that is there
    gives no binary (not JSON, no tarball, a size or checksum not to be trusted) or why it
    could not be read; ``signature`` is a :class:`~crawler.mirror.signing.Verdict`'s state."""

    manifest: str
    tarball: str | None = None
    size: int | None = None
    missing: str | None = None
    problem: str | None = None
    signature: str | None = None
    signer: str | None = None

    @property
    def finding(self) -> str | None:
        """What is wrong, in a few words, or None: a missing file, an unreadable manifest, or
        a signature that is not a published key's (``unsigned`` is given only in a cache that
        publishes keys: see :meth:`Keyrings.verify`)."""
        if self.missing:
            return f"{self.missing} missing"
        if self.problem:
            return self.problem
        return self.signature if self.signature in _FINDINGS else None


def cache_of(manifest_url: str) -> str | None:
    """The root of the cache a spec manifest URL is in; None for a URL of no v3 cache."""
    cache, found, _ = manifest_url.rpartition(SPEC_FOLDER)
    return cache if found else None


class Keyrings:
    """Each cache's keyring, read once, when its first signed manifest needs it; use as
    ``async with``. ``gpg`` None: signatures are not checked (warned of once)."""

    def __init__(self, fetcher: Fetcher, gpg: str | None) -> None:
        self._fetcher = fetcher
        self._gpg = gpg
        self._rings: dict[str, asyncio.Task[Keyring]] = {}
        self._stack = AsyncExitStack()
        self._warned = False

    async def __aenter__(self) -> Keyrings:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for task in self._rings.values():
            task.cancel()
        await asyncio.gather(*self._rings.values(), return_exceptions=True)
        await self._stack.aclose()

    async def verify(self, cache: str, body: bytes, signed: bool) -> Verdict | None:
        """The verdict on a manifest of ``cache``: None for an unsigned one of a cache that
        publishes no key (an unsigned cache), ``unsigned`` in one that does."""
        if signed and self._gpg is None:
            if not self._warned:
                self._warned = True
                log.warning("no gpg program found: signatures of spec manifests not checked")
            return Verdict(UNCHECKED)
        task = self._rings.get(cache)
        if task is None:
            task = self._rings[cache] = asyncio.ensure_future(self._ring(cache))
        ring = await asyncio.shield(task)
        if not signed:
            return Verdict(UNSIGNED) if ring.keys else None
        return await ring.verify(body, signed)

    async def _ring(self, cache: str) -> Keyring:
        try:
            keys = await published_keys(self._fetcher, cache)
        except (FetchError, IndexFormatError) as err:
            log.warning("the keys of %s cannot be read: %s", cache, err)
            keys = []
        try:
            return await self._stack.enter_async_context(Keyring(keys, self._gpg))
        except OSError as err:  # its temporary keyring cannot be made: no key is known
            log.warning("the keys of %s cannot be imported: %s", cache, err.strerror or err)
            return await self._stack.enter_async_context(Keyring([], self._gpg))


async def look_up(fetcher: Fetcher, manifest_url: str, keyrings: Keyrings | None) -> BinaryFacts:
    """What the spec manifest at ``manifest_url`` says of its binary, and whether its tarball
    is there. A file that is not there or cannot be read is a fact, not an error."""
    cache = cache_of(manifest_url) or manifest_url
    try:
        body = await fetcher.read_bounded(manifest_url, SPEC_MANIFEST_LIMIT, _LIMIT)
    except NotFoundError:
        return BinaryFacts(manifest=manifest_url, missing="manifest")
    except FetchError as err:
        return BinaryFacts(manifest=manifest_url, problem=f"manifest not read: {err.reason}")
    try:
        binary = read_spec_manifest(body, manifest_url)
    except IndexFormatError as err:
        return BinaryFacts(manifest=manifest_url, problem=f"bad manifest: {err.reason}")
    verdict = await keyrings.verify(cache, body, binary.signed) if keyrings else None
    tarball = f"{cache}/{binary.tarball_path}"
    facts = BinaryFacts(
        manifest=manifest_url,
        tarball=tarball,
        size=binary.size,
        signature=verdict.state if verdict else None,
        signer=verdict.fingerprint if verdict else None,
    )
    try:
        there = await fetcher.exists(tarball)
    except FetchError as err:
        return msgspec.structs.replace(facts, problem=f"tarball not looked for: {err.reason}")
    return facts if there else msgspec.structs.replace(facts, missing="tarball")
