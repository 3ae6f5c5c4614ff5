"""State kept between runs so that an unchanged mirror is not downloaded or decoded again.

Next to the output, under ``<output>/.crawler/``:

* ``cache/<kind>-<sha256>.<made by>.parts.msgpack``: the summary of an index file with that
  SHA-256 (a pure function of the bytes, of whether it is a root or a stack index, and of what
  made it, :func:`~crawler.decode.records.made_by`: the tool's version and the revision of its
  rules, so it can be reused whenever the same bytes come back to the same build),
  stored as the decoding workers returned it (the parts of a root index, the
  :class:`~crawler.decode.validate.SourceSummary` of a stack), so that saving it costs no encoding
  (in the folder ``cache_dir`` names instead, if the config names one);
* ``specs/``: the spec store (:mod:`crawler.decode.specstore`), written by :meth:`Store.save_specs`,
  pruned of other versions' files by :meth:`Store.prune`;
* ``state/<branch>.json``: per source of the last published sync, its URL, SHA-256, size, ETag
  and counts, plus a fingerprint of the inputs and digests of the published ``index.json`` and
  pages (a branch whose files were deleted or altered since is published again).

A source is not downloaded again when something the mirror says proves its bytes are those of a
cached summary: a v3 blob's checksum (its name), a v2 ``index.json.hash`` sidecar, or a ``304 Not
Modified`` answer to ``If-None-Match`` with the ETag of the last download. A missing or changed
validator means a fresh download; even then, bytes whose SHA-256 has a cached summary are not
decoded again. State and summaries written by another tool version are ignored (another
version may check or render records differently), and the next prune deletes those summaries.
A prune deletes only files the crawler recorded writing (:mod:`crawler.output.kept`), and every
one of these folders and files is reached without following a symbolic link.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Collection
from pathlib import Path

import msgspec

from .. import __version__
from ..decode.records import made_by
from ..decode.root import summary_of
from ..decode.specstore import store_path
from ..decode.validate import Kind, SourceSummary
from ..documents import IndexFilters, IndexSource, IndexStats
from ..errors import OutputError
from .folder import REPLACED, held_folder
from .kept import KeptFolder
from .render import encode_json
from .workdir import state_dir, work_folder

log = logging.getLogger(__name__)


class CachedSummary(msgspec.Struct, frozen=True, gc=False):
    """A summary with the size of the bytes it was computed from."""

    size: int
    summary: SourceSummary


class _Cached(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A cache file: the size of the bytes, and what the workers returned for them."""

    size: int
    parts: list[bytes]


class SourceFacts(msgspec.Struct, frozen=True, gc=False):
    """The counts an index contributes to ``index.json``, known without loading its summary."""

    db_version: str
    records: int
    in_buildcache: int
    invalid_records: int

    @classmethod
    def of(cls, summary: SourceSummary) -> SourceFacts:
        return cls(summary.db_version, summary.records, summary.in_buildcache, len(summary.invalid))


class SourceState(msgspec.Struct, frozen=True, gc=False):
    """What the last published sync learnt about one source.

    ``etag`` and ``downloaded`` describe the server at ``location``, where the source was
    fetched from: they carry over only to a run that fetches it from there again.
    """

    label: str
    url: str
    status: str
    sha256: str | None = None
    size: int | None = None
    etag: str | None = None
    facts: SourceFacts | None = None
    #: True once this URL was really downloaded (so ``etag`` None means "the server sends none").
    downloaded: bool = False
    location: str | None = None


class BranchState(msgspec.Struct, frozen=True, gc=False):
    """The state of one branch after its last publish."""

    version: str
    fingerprint: str
    index_sha256: str
    formats: list[str]
    sources: list[SourceState]
    stats: IndexStats | None = None  # None: a state written before they were kept
    pages_sha256: str | None = None  # :class:`PagesDigest` of the pages, if any were written
    #: The size of ``links.json`` as published (None: a state written before it was kept),
    #: which a warm run checks; a rebuild compares its bytes with the new ones (hashing its
    #: 100-odd MB every run would cost a warm run a sixth of its time).
    links_size: int | None = None

    def source(self, label: str, url: str, location: str) -> SourceState | None:
        """The previous state of a source, if it had the same URL and was fetched from the same
        place (a local mirror tells nothing about a server's ETags, nor one server about
        another's)."""
        for s in self.sources:
            if (s.label, s.url, s.location) == (label, url, location):
                return s
        return None


_DECODE_CACHED = msgspec.msgpack.Decoder(_Cached)


def _cache_suffix() -> str:
    """How this version's cache files end: another version's are not read, and
    :meth:`Store.prune` deletes them (0.1 named them ``<kind>-<sha256>.msgpack``)."""
    return f".{made_by()}.parts.msgpack"


def fingerprint(
    entries: list[IndexSource],
    formats: list[str],
    mirror: str,
    locations: list[str],
    filters: IndexFilters | None = None,
) -> str:
    """A digest of everything the published files are computed from (the tool's version, the
    formats, the mirror and where each source was read, what each source held, and the
    filters, if any: a branch published whole keeps the digest it had before filters)."""
    parts: list[object] = [made_by(), formats, mirror, locations, entries]
    if filters is not None:
        parts.append(filters)
    return hashlib.sha256(encode_json(parts)).hexdigest()


class PagesDigest:
    """A digest of a branch's pages, fed in package-name order: the same pages, and no others,
    give the same digest."""

    def __init__(self) -> None:
        self._sha256 = hashlib.sha256()

    def add(self, package: str, page: bytes) -> None:
        """One page: ``pages/<package>/specs.md``."""
        self._sha256.update(f"{package}\n{len(page)}\n".encode())
        self._sha256.update(page)

    def hexdigest(self) -> str:
        """The digest of the pages added so far."""
        return self._sha256.hexdigest()


class Store:
    """The cache and branch states under one output folder (the cache in ``cache_dir``
    instead, when the config names one), each reached as a
    :class:`~crawler.output.kept.KeptFolder`: never through a symbolic link."""

    def __init__(self, output: Path, cache_dir: Path | None = None) -> None:
        self.root = state_dir(output)
        #: Where the summaries are kept: ``.crawler/cache``, or the folder ``cache_dir`` names
        #: (the operator's: not made, since a volume not mounted would be written under it).
        self.kept = KeptFolder(cache_dir) if cache_dir else work_folder(output, "cache")
        self.cache = self.kept.path
        self._states = work_folder(output, "state")
        self.states = self._states.path
        self._specs = work_folder(output, "specs")
        self.specs = self._specs.path  # the spec store (crawler.decode.specstore)
        self._cache_gone_told = False  # warned that cache_dir does not exist

    @staticmethod
    def _summary_name(kind: Kind, sha256: str) -> str:
        return f"{kind}-{sha256}{_cache_suffix()}"

    def has(self, kind: Kind, sha256: str | None) -> bool:
        """True when the summary of these bytes is cached (and the cache can be looked at)."""
        if sha256 is None:
            return False
        try:
            return self.kept.is_file(self._summary_name(kind, sha256))
        except OSError:  # a folder that cannot be searched: only a cache, go without it
            return False

    def load(self, kind: Kind, sha256: str) -> CachedSummary | None:
        """A cached summary, or None when it is absent or unreadable (then it is re-fetched)."""
        try:
            cached = self._read(kind, sha256)
            return CachedSummary(cached.size, summary_of(kind, cached.parts))
        except FileNotFoundError:
            return None
        # ValueError, IndexError, KeyError: decodable, yet not what the workers returned
        except (OSError, msgspec.DecodeError, ValueError, IndexError, KeyError) as err:
            log.warning("dropping unreadable cached summary %s-%s: %s", kind, sha256, err)
            try:
                self.kept.remove(self._summary_name(kind, sha256))
            except OSError as gone:  # only a cache: the next prune tries again
                log.warning("cannot remove %s-%s: %s", kind, sha256, gone)
            return None

    def parts(self, kind: Kind, sha256: str) -> list[bytes] | None:
        """What the workers returned for bytes with this SHA-256, as cached, or None when it
        is not cached (or cannot be read)."""
        try:
            return self._read(kind, sha256).parts
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError) as err:
            log.warning("cannot read the cached summary %s-%s: %s", kind, sha256, err)
            return None

    def _read(self, kind: Kind, sha256: str) -> _Cached:
        return _DECODE_CACHED.decode(self.kept.read(self._summary_name(kind, sha256)))

    def save(self, kind: Kind, sha256: str, size: int, parts: list[bytes]) -> bool:
        """Cache the summary of bytes with this SHA-256, as the workers returned it; True
        when it is cached.

        Only a cache: when it cannot be written (a full disk, say), the run goes on without it
        and the next one decodes those bytes again. The summary itself is sound, and the source
        must not fail for the cache's sake."""
        data = msgspec.msgpack.encode(_Cached(size, parts))
        try:
            self.kept.write(self._summary_name(kind, sha256), data, durable=False, record=True)
            return True
        except OutputError as err:
            if self.kept.parts or self.kept.root.exists():
                log.warning("cannot cache a summary (the next run decodes it again): %s", err)
            elif not self._cache_gone_told:  # said once: every source would say the same
                self._cache_gone_told = True
                log.warning(
                    "cannot cache summaries (the next run decodes them again): cache_dir "
                    "%s does not exist (a volume not mounted?)",
                    self.cache,
                )
            return False

    def specs_folder(self) -> str | None:
        """The spec store's folder, made if need be; None when it cannot be (the run then goes
        without the store)."""
        try:
            os.close(self._specs.open(make=True))
        except (OSError, OutputError) as err:
            log.warning("cannot keep a spec store (every record is decoded): %s", err)
            return None
        return str(self.specs)

    def save_specs(self, db_version: str, data: bytes | bytearray) -> None:
        """Replace the spec store of a Database version (only a cache, as :meth:`save`)."""
        try:
            name = store_path(".", db_version).name
            self._specs.write(name, data, durable=False, record=True)
        except OutputError as err:
            log.warning("cannot update the spec store (the next run decodes more): %s", err)

    def branch(self, branch: str, any_version: bool = False) -> BranchState | None:
        """The state of a branch's last publish, if usable by this version (``any_version``:
        whichever version wrote it, for what it says of the published files)."""
        path = self.states / f"{branch}.json"
        try:
            data = self._states.read(path.name)
            state = msgspec.json.decode(data, type=BranchState)
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as err:
            if not any_version:
                log.warning("ignoring unreadable state %s: %s", path, err)
            return None
        return state if any_version or state.version == __version__ else None

    def save_branch(self, branch: str, state: BranchState) -> None:
        """Record a branch's publish (or what a run found out about its sources)."""
        self._states.write(f"{branch}.json", encode_json(state))

    def prune(self, read: Collection[str] = ()) -> None:
        """Delete cached summaries that no branch state refers to, but for those of the bytes
        ``read`` in this run (the SHA-256 of each index read), and the spec stores of other
        versions. Only files the crawler recorded writing are deleted
        (:meth:`~crawler.output.kept.KeptFolder.prune`): a file merely named like one of its
        own is left alone.

        Run at the end of each run: a branch that keeps failing (or being refused) caches the
        summaries of what it read each time, and only its latest are worth keeping, for the
        next try."""
        held = held_folder(self.root)
        if held is not None and held.replaced():  # the path leads to another output's cache
            log.warning("cannot prune the cache: %s %s", held.path, REPLACED)
            return
        keep: set[str] = set(read)
        try:
            states = [n for n in self._states.names() if n.endswith(".json")]
        except OSError as err:  # only a cache: the next prune tries again
            log.warning("cannot prune the cache: %s", err)
            return
        for name in states:
            state = self.branch(name.removesuffix(".json"))
            if state is not None:
                keep.update(s.sha256 for s in state.sources if s.sha256)
        suffix, current = _cache_suffix(), f"{made_by()}-db"

        def kept(name: str) -> bool:  # this version's, and of a source still referred to
            return name.endswith(suffix) and name.removesuffix(suffix).partition("-")[2] in keep

        specs = (self._specs, lambda name: name.startswith(current))  # this version's
        for folder, keeps in ((self.kept, kept), specs):
            try:
                problems = folder.prune(keeps).problems
            except (OSError, OutputError) as err:
                problems = [str(err)]
            for problem in problems:  # only a cache: the next prune tries again
                log.warning("cannot prune %s: %s", folder.path, problem)
