"""Reading a published branch: ``<output>/<branch>/`` and its documents, as the typed structs of
:mod:`crawler.documents`.

Nothing here writes, locks or records anything: a consumer may read while a sync publishes. A
publish swaps the whole branch folder in with one rename, and never rewrites a file in place;
each document is mapped with one ``open`` (:func:`read_document`), so a document is always one
publish's, whole; two documents read one after the other may be of two publishes (compare
their ``branch`` and the report's ``finished_at`` if it matters). (A copy of a branch that is
rewritten in place while a reader maps it may end that reader with ``SIGBUS``: replace a copy
as a publish does, by a rename.)

Every function takes a published branch folder (``output/develop``) or the document's own file
(``output/develop/index.json``, a copy elsewhere). A path that is neither is a
:class:`~crawler.consumer_errors.NotABranchError` naming it and why; an ``index.json`` of another
``schema_version`` than this version reads (a ``links.json``: its own), a ``SchemaVersionError``.
"""

from __future__ import annotations

import functools
import gc
import mmap
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import msgspec

from ..consumer_errors import NotABranchError, SchemaVersionError
from ..documents import (
    SCHEMA_VERSION,
    Changes,
    History,
    Index,
    Links,
    PackageSummary,
    Report,
    SpecDetail,
    SpecLinks,
)
from ..errors import UsageError
from ..files import is_safe_name, map_regular, release
from ..linkfile import LINKS_VERSION, PackedDependency, PackedSpecLinks, ResolvedEdges, resolved
from ..text import decode_reason
from .folders import EXAMPLE, no_such_branch, not_a_branch_folder

PathLike = str | os.PathLike[str]
#: A document's bytes as read: mapped (or, empty, bytes).
Buffer = bytes | mmap.mmap
D = TypeVar("D")
P = TypeVar("P")


def branch_path(output: PathLike, branch: str) -> Path:
    """The folder of ``branch`` in the output folder ``output`` (a :class:`UsageError` for a
    name that is no branch's: ``..``, ``a/b``)."""
    if not is_safe_name(branch):
        raise UsageError(f"{branch!r} is no branch name (letters, digits, '.', '_', '+', '-')")
    return Path(output) / branch


def load_index(path: PathLike) -> Index[PackageSummary]:
    """The ``index.json`` of a published branch folder (or that file itself), typed."""
    file = _document(path, "index.json")
    return _decode_index(file, read_document(file), PackageSummary)


def _decode_index(file: Path, data: Buffer, kind: type[P]) -> Index[P]:
    """``index.json``'s bytes as an index of ``kind`` packages, of a schema version read."""
    try:
        index = _decode(file, data, Index[kind], "an index.json")  # type: ignore[valid-type]
    except NotABranchError:
        version = _schema_version(file, data)
        if version is not None:  # a newer index's shape may differ: that is the news
            _check_version(file, version)
        raise
    _check_version(file, index.schema_version)  # a newer one may have this shape, too
    return index


class _Brief(
    SpecDetail, frozen=True, kw_only=True, gc=False, rename={"variants": "variants (not read)"}
):
    """An entry of ``spec_details`` read without its variants: they are two thirds of the
    time it takes to decode an index. The key renamed to one no index has, ``variants``
    is skipped as unknown and left empty. For reading only: never encode one."""

    variants: tuple[str, ...] = ()


class _BriefPackage(PackageSummary, frozen=True, gc=False):
    # Read-only (frozen): a list of _Brief is a list of SpecDetail to every reader.
    spec_details: list[_Brief]  # type: ignore[assignment]


class Packages(Mapping[str, PackageSummary]):
    """The packages of a published ``index.json``, each decoded when looked up: a query by
    name decodes one package of a 60,000-spec index, not all of them (``crawler find``). None
    is kept once looked up (each lookup decodes it again), so that a reader going through
    them all holds one package at a time, beside the mapped file (see docs/consumers.md,
    Memory). ``index`` is the rest of the document (``branch``, ``sources``, ``stats``).
    Without ``variants``, its specs' ``variants`` are left empty (and read three times
    faster). :meth:`links` gives a spec's entry of ``links.json``."""

    def __init__(
        self, file: Path, data: Buffer, index: Index[msgspec.Raw], *, variants: bool = True
    ) -> None:
        self.file = file
        self.index = index
        release(data)  # the decoding went over it all: what is touched next is what counts
        self._pass = Pass(data)
        kind = PackageSummary if variants else _BriefPackage
        self._decoder = msgspec.json.Decoder(kind)
        self._links: RawLinks | None = None
        self._links_path = file.with_name("links.json")

    def raw(self, name: str) -> msgspec.Raw:
        """The bytes of package ``name`` (a ``KeyError`` for a name that is none), read as a
        lookup reads them: they count towards the pages let go."""
        return self._pass.read(self.index.packages[name])

    def __getitem__(self, name: str) -> PackageSummary:
        try:
            with no_gc():
                package: PackageSummary = self._decoder.decode(self.raw(name))
        except (msgspec.DecodeError, RecursionError) as err:  # ValidationError included
            why = f"package {name!r}: {decode_reason(err)}"
            raise _unwritten(self.file, "an index.json", why) from None
        return package

    def __iter__(self) -> Iterator[str]:
        return iter(self.index.packages)

    def __len__(self) -> int:
        return len(self.index.packages)

    def __contains__(self, name: object) -> bool:
        return name in self.index.packages

    @property
    def links_file(self) -> Path | None:
        """The ``links.json`` beside the index; None in a branch of schema 1 (before it was
        written) and beside an ``index.json`` copied without it."""
        file = self._links_path
        return file if self.index.schema_version >= 2 and file.exists() else None

    def links(self, key: str) -> SpecLinks | None:
        """The dependencies and locations of the spec ``key``, from :attr:`links_file` (None
        without that file, or for a hash that is no spec of it), its URLs and names resolved
        whatever the file's schema. The first call reads it, its entries kept undecoded until
        looked up."""
        if self._links is None:
            self._links = load_raw_links(self.links_file) if self.links_file else RawLinks({})
        found = self._links.specs.get(key)
        return None if found is None else self._links.entry(self._links_path, key, found)


class RawLinks(msgspec.Struct, dict=True):  # dict: its edges resolved once (a cached property)
    """``links.json`` with each spec's entry left as its bytes (:func:`load_raw_links`), and
    the tables of a packed one (schema 2, :mod:`crawler.linkfile`)."""

    specs: dict[str, msgspec.Raw]
    branch: str = ""
    schema_version: int = 1  # the resolved links, written before it was given
    caches: dict[str, str] = {}
    edges: list[PackedDependency] = []
    names: dict[str, str] = {}

    @functools.cached_property
    def resolved_edges(self) -> ResolvedEdges:
        """``edges``, each resolved once (shared by the entries that use it)."""
        return ResolvedEdges(self.edges, self.names)

    def entry(self, file: Path, key: str, raw: msgspec.Raw) -> SpecLinks:
        try:
            with no_gc():
                return self.decoded(raw)
        except (msgspec.DecodeError, RecursionError) as err:  # ValidationError included
            raise _unwritten(file, f"spec {key} of links", decode_reason(err)) from None
        except ValueError as err:
            raise _unwritten(file, "a links.json", f"spec {key}: {err}") from None

    def decoded(self, raw: msgspec.Raw) -> SpecLinks:
        """An entry, decoded (a ``msgspec.DecodeError`` if it cannot be) and resolved (a
        ``ValueError`` if it cannot be)."""
        if self.schema_version == 1:
            return _SPEC_LINKS.decode(raw)
        return resolved(_PACKED_SPEC.decode(raw), self.caches, self.resolved_edges)


_SPEC_LINKS = msgspec.json.Decoder(SpecLinks)
_PACKED_SPEC = msgspec.json.Decoder(PackedSpecLinks)


def load_raw_links(file: Path) -> RawLinks:
    """The ``links.json`` ``file``, each spec's entry left undecoded; its pages let go once
    read (:func:`~crawler.files.release`), so that looking up an entry maps only its own."""
    data = read_document(file)
    links = _decode(file, data, RawLinks, "a links.json")
    version = links.schema_version
    if type(version) is not int or version not in (1, LINKS_VERSION):
        raise SchemaVersionError(str(file), version, LINKS_VERSION)
    release(data)
    return links


def load_packages(path: PathLike, *, variants: bool = True) -> Packages:
    """The packages of a published ``index.json`` (as :func:`load_index` finds and checks
    it), each decoded when looked up; without ``variants``, faster (see
    :class:`Packages`)."""
    file = _document(path, "index.json")
    data = read_document(file)
    return Packages(file, data, _decode_index(file, data, msgspec.Raw), variants=variants)


def load_links(path: PathLike) -> Links:
    """The ``links.json`` of a published branch folder (or that file itself), typed: each
    spec's dependencies and locations, by hash (beside an index of ``schema_version`` 2),
    their URLs and names resolved, whatever the file's own ``schema_version`` (2, packed,
    or 1, before it had one)."""
    file = _document(path, "links.json")
    links = load_raw_links(file)
    entry = links.entry
    return Links(branch=links.branch, specs={k: entry(file, k, v) for k, v in links.specs.items()})


def load_report(path: PathLike) -> Report:
    """The ``report.json`` of a published branch folder (or that file itself), typed: the
    last publish's statistics, sources and findings."""
    return _load(path, "report.json", Report)


def load_history(path: PathLike) -> History:
    """The ``history.json`` of a published branch folder (or that file itself), typed: its
    last publishes, newest first, each with what it changed."""
    return _load(path, "history.json", History)


def load_changes(path: PathLike) -> Changes:
    """The ``changes.json`` of a published branch folder (or that file itself), typed: what
    the last publish added and removed."""
    return _load(path, "changes.json", Changes)


def _load(path: PathLike, name: str, kind: type[D]) -> D:
    file = _document(path, name)
    return _decode(file, read_document(file), kind, f"a {name}")


class _Versioned(msgspec.Struct):
    schema_version: object = None


def _schema_version(file: Path, data: Buffer) -> object:
    try:
        return msgspec.json.decode(data, type=_Versioned).schema_version
    except msgspec.DecodeError as err:  # ValidationError included: not an object
        raise NotABranchError(str(file), f"not a JSON object: {err}") from None
    except RecursionError as err:
        raise NotABranchError(str(file), decode_reason(err)) from None


def _check_version(file: Path, version: object) -> None:
    """Versions 1 to :data:`SCHEMA_VERSION` are read: a spec of version 1 has no family,
    dependencies or locations (their defaults: None, empty)."""
    if type(version) is not int or not 1 <= version <= SCHEMA_VERSION:
        raise SchemaVersionError(str(file), version, SCHEMA_VERSION)


def _document(path: PathLike, name: str) -> Path:
    """The file ``name`` of the branch folder ``path``, or ``path`` if it is a file."""
    given = Path(path)
    try:
        if given.is_dir():
            problem = not_a_branch_folder(given)
            if problem is None and not (given / "index.json").exists():
                problem = f"it holds no index.json ({EXAMPLE})"
            elif problem is None and not (given / name).exists():
                problem = f"it holds no {name}"
        elif given.exists():
            return given
        else:
            problem = no_such_branch(given)
    except OSError as err:  # a folder this user may not search
        problem = f"cannot look into it: {err.strerror or err}"
    if problem is not None:
        raise NotABranchError(str(given), problem)
    return given / name


#: How many bytes of a mapped document a pass reads before it lets their pages go.
RELEASE_EVERY = 32 << 20


class Pass:
    """A pass over the pieces of the mapped document ``data``: every :data:`RELEASE_EVERY`
    bytes of them read, the pages of the file are let go (:func:`~crawler.files.release`),
    so that the pass holds a few MB of the file at a time rather than all it went over."""

    def __init__(self, data: Buffer) -> None:
        self.data = data
        self._read = 0

    def read(self, piece: msgspec.Raw) -> msgspec.Raw:
        self._read += len(piece)
        if self._read >= RELEASE_EVERY:
            release(self.data)
            self._read = 0
        return piece


def read_document(file: Path) -> Buffer:
    """The bytes of a published document, mapped (:func:`~crawler.files.map_regular`): a
    reader holds only the pages it touches, and those are the page cache's."""
    try:
        return map_regular(file)
    except OSError as err:
        raise NotABranchError(str(file), f"cannot be read: {err.strerror or err}") from None


def _decode(file: Path, data: Buffer | msgspec.Raw, kind: type[D], what: str) -> D:
    try:
        with no_gc():
            return msgspec.json.decode(data, type=kind)
    except (msgspec.DecodeError, RecursionError) as err:  # ValidationError included
        raise _unwritten(file, what, decode_reason(err)) from None


def _unwritten(file: Path, what: str, why: str) -> NotABranchError:
    reason = f"not {what} as a publish writes it: {why} (crawler verify says more)"
    return NotABranchError(str(file), reason)


@contextmanager
def no_gc() -> Iterator[None]:
    """The collector off while a document decodes: its hundreds of thousands of new tuples
    and lists would set it off again and again, for nothing (they hold no cycles); that
    halves the time of a 60,000-spec index."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
