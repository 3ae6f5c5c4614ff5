"""Decoding: a fetched index turned into its summary by the pool of worker processes, and
the summary cached under the index's SHA-256.

A stack is one job. The root is the largest index and everything waits for it: it is decoded
on every worker at once, in parts while it downloads (:mod:`crawler.decode.progressive`) or in
shards of the file, with rounds again when the pieces do not fit together (see
:meth:`Decoding.root_shards`). Its records are read through the spec store
(:mod:`crawler.decode.specstore`), updated with them once the branch is done.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterable
from pathlib import Path
from typing import NamedTuple

import msgspec

from ..build.consolidate import paused_gc
from ..decode.chunks import BadCut
from ..decode.pool import DecodePool
from ..decode.progressive import RootParts
from ..decode.root import load_root_shard, merge_root, root_gaps, summarize_root_shard, summary_of
from ..decode.shard import RootShard
from ..decode.specsave import updated_store
from ..decode.specstore import today
from ..decode.stack import summarize_stack
from ..decode.validate import SourceSummary
from ..errors import OutputError
from ..mirror.transport import Fetched
from ..output.state import Store
from .outcome import SourceOutcome

log = logging.getLogger(__name__)


async def _all_or_none(jobs: Iterable[Awaitable[bytes]]) -> list[bytes]:
    """Every job's result, in order; at the first failure the others are cancelled."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _load_shards(results: list[bytes]) -> tuple[list[RootShard], list[str] | None]:
    """The workers' shards of a root, and :func:`root_gaps` of them.

    This and :func:`_merged` run in a thread: they take a few tenths of a second for a
    develop root, during which the event loop goes on handing the stacks still queued to the
    decoding workers (which would otherwise sit idle) and taking their results.
    """
    with paused_gc():
        loaded = [load_root_shard(p) for p in results]
        return loaded, root_gaps(loaded)


def _merged(loaded: list[RootShard]) -> SourceSummary:
    """:func:`merge_root` of the shards, in a thread (see :func:`_load_shards`)."""
    with paused_gc():
        return merge_root(loaded)


class _PendingRoot(NamedTuple):
    """A root read through the spec store, for :meth:`Decoding.settle`: its shards as the
    workers encoded them, held only when they could not be cached."""

    db_version: str
    sha256: str | None
    held: list[bytes] | None


class Decoding:
    """Summarises the indexes of a run on one pool of decoding processes."""

    def __init__(self, pool: DecodePool, store: Store, limit: int) -> None:
        self.pool = pool
        self.store = store
        self.limit = limit  # max_index_bytes
        #: Roots being downloaded, decoding in parts as they come (by download path).
        self.parts: dict[Path, RootParts] = {}
        #: The spec store's folder, given to the workers (None: it cannot be made).
        self.specs = store.specs_folder()
        #: The last root read through the spec store, until :meth:`settle` updates the
        #: store with its shards.
        self._pending: _PendingRoot | None = None

    def root_parts(self, dest: Path, url: str) -> RootParts:
        """Decode the root downloading to ``dest`` in parts as it comes."""
        parts = self.parts[dest] = RootParts(self.pool, dest, url, self.specs)
        return parts

    def abandon(self, dest: Path) -> None:
        """Stop decoding what was downloading to ``dest`` (done, failed or cancelled)."""
        parts = self.parts.pop(dest, None)
        if parts is not None:
            parts.abandon()

    async def settle(self) -> None:
        """Update the spec store with the last root read through it, if it was not yet: once
        its branch is done (published or not: what was decoded is right either way), in the
        memory the branch's output freed, and before the next root is read through it (see
        :mod:`crawler.decode.specsave`)."""
        pending, self._pending = self._pending, None
        if pending is not None and self.specs is not None:
            await asyncio.to_thread(self._saved, self.specs, pending)

    def _saved(self, folder: str, pending: _PendingRoot) -> None:
        results = pending.held
        if results is None and pending.sha256 is not None:
            results = self.store.parts("root", pending.sha256)
        if results is None:  # its cached copy is gone (or unreadable) meanwhile
            log.info("the spec store is not updated: the root's cached summary is gone")
            return
        try:
            with paused_gc():
                data = updated_store(folder, pending.db_version, results, today())
        # Only a cache; a cached summary that decodes, yet holds something else, may raise
        # IndexError or KeyError.
        except (OSError, ValueError, IndexError, KeyError, msgspec.DecodeError) as err:
            log.warning("cannot update the spec store (the next run decodes more): %s", err)
            return
        self.store.save_specs(pending.db_version, data)

    async def decode(self, fetched: Fetched, outcome: SourceOutcome) -> None:
        """Summarise a fetched index and cache the summary under its SHA-256; raises
        :class:`SourceChanged` when a local file changed meanwhile (nothing is cached)."""
        started = time.monotonic()
        # Errors name where the bytes came from, as fetch errors do (not the listed s3:// URL).
        kind, url, path = outcome.kind, outcome.source.location, fetched.path
        assert path is not None
        shards: list[RootShard] | None = None
        try:
            if kind == "root":
                parts, shards, outcome.known = await self.root_shards(path, url, outcome.size or 0)
            else:
                parts = [await self.pool.run(summarize_stack, str(path), url, self.limit)]
                summary = summary_of(kind, parts)
        except Exception as err:
            # Bytes half written meanwhile, or shards of a root that read two versions of it
            # (whatever that made of them): read again, not failed.
            fetched.check_unchanged()
            if isinstance(err, OSError) and err.filename == str(path) and not fetched.identity:
                # The crawler's own download, gone from .crawler/tmp (or unreadable) meanwhile:
                # a problem of the output folder, not of the mirror, and no bug.
                raise OutputError(str(path), err.strerror or str(err), "read") from None
            raise
        fetched.check_unchanged()
        sha256, size, cached = outcome.sha256, outcome.size, False
        if sha256 is not None and size is not None:  # cached under the index's SHA-256
            cached = self.store.save(kind, sha256, size, parts)
        if shards is not None:
            # Cached, the shards' bytes are read back for the store's update rather than held
            # through the merge and the output (20-odd MB of a develop root).
            held = None if cached else parts
            del parts
            summary = await asyncio.to_thread(_merged, shards)
            if outcome.known is not None:  # read through the spec store
                self._pending = _PendingRoot(summary.db_version, outcome.sha256, held)
        outcome.use(summary)
        outcome.decoded = True
        outcome.decode_seconds = time.monotonic() - started

    async def root_shards(
        self, path: Path, url: str, size: int
    ) -> tuple[list[bytes], list[RootShard], int | None]:
        """Summarise a root index on every worker at once (see :mod:`crawler.decode.root`);
        returns what the workers encoded, its shards (for :func:`_merged`), and, when it was
        read through the spec store (not when read whole), how many of its records the store
        held.

        A root downloaded from a server was cut into parts that were decoding while it
        downloaded (:mod:`crawler.decode.progressive`); otherwise each worker takes a shard.
        Parts or shards read in pieces are read again whole if a piece does not decode or two
        pieces hold the same key, and again with the missing hashes if records point at
        dependencies that none of them holds.
        """
        parts = self.parts.pop(path, None)
        if parts is not None and not parts.complete(size):
            parts = None
        try:
            return await self._root_rounds(path, url, parts)
        finally:
            if parts is not None:
                parts.abandon()  # parts still running after a failure are of no use

    async def _root_rounds(
        self,
        path: Path,
        url: str,
        parts: RootParts | None,
    ) -> tuple[list[bytes], list[RootShard], int | None]:
        """The rounds of :meth:`root_shards`: parts or shards, then again if need be."""
        shards = self.pool.workers
        whole = False
        missing: tuple[str, ...] = ()
        while True:
            try:
                if parts is not None and not whole:
                    results = await parts.results(missing)
                else:
                    run, args = self.pool.run, (shards, missing, whole, self.limit, self.specs)
                    jobs = (
                        run(summarize_root_shard, str(path), url, i, *args) for i in range(shards)
                    )
                    results = await _all_or_none(jobs)
            except BadCut as err:
                # Read whole, a root is cut only inside its installs, checked as JSON first
                # (read.read_whole), so brackets balance; a key that does not decode fails it
                # as IndexFormatError. A BadCut here is a bug.
                if whole:
                    raise AssertionError(f"{url}: {err} in a whole read") from err
                log.info("reading %s whole: %s", url, err)
                if parts is not None:
                    parts.abandon()
                whole = True
                continue
            # Done, the workers still hold 60-100 MB each: not through the root's merge (the
            # run's peak, in a nightly run), unless a stack's job still needs them. A round
            # again, or a stack read after, starts new ones.
            self.pool.close_if_idle()
            loaded, gaps = await asyncio.to_thread(_load_shards, results)
            if gaps is None:
                if whole:  # shards of one decoded document cannot share a key
                    raise AssertionError(f"{url}: a key in two shards of a whole read")
                log.info("reading %s whole: a key occurs in two of its pieces", url)
                whole = True
            elif gaps and not missing:
                missing = tuple(gaps)
            else:
                digested = any(shard.digests for shard in loaded)
                # Once, from the round whose shards are kept (a round again would say it again).
                tell_rewritten(url, [found for shard in loaded for found in shard.rewritten])
                known = sum(shard.known for shard in loaded) if digested else None
                return results, loaded, known


def tell_rewritten(url: str, rewritten: list[tuple[str, bool]]) -> None:
    """Log the records of a root whose hash the spec store knew with other bytes (see
    :mod:`crawler.decode.specstore`): summarised again from their new bytes, as a cold run
    would. A warning when their summary changed: a DAG hash stands for one spec, so a mirror
    that gives it another content is worth an operator's look."""
    if not rewritten:
        return
    changed = sorted(key for key, differs in rewritten if differs)
    if changed:
        log.warning(
            "%s: %d record(s) changed content under a DAG hash seen before (%s%s); "
            "their new content is used",
            url,
            len(changed),
            ", ".join(changed[:3]),
            ", ..." if len(changed) > 3 else "",
        )
    if len(changed) < len(rewritten):
        log.info(
            "%s: %d record(s) rewritten with the same content under a DAG hash seen before",
            url,
            len(rewritten) - len(changed),
        )
