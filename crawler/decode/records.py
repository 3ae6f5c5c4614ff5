"""Decode: typed views of Spack's Database JSON (FORMAT.md section 2), read with msgspec.

Each record is decoded into the smallest struct the summary needs; fields not named here are
skipped by the decoder without building Python objects. Root records need the whole node
(variants, dependencies, compiler); a stack's records only contribute their hash and identity.
:mod:`crawler.decode.read` decodes an index a piece of records at a time (the common case
first, :class:`PlainRecord`, then :class:`Record`, then :class:`LegacyRecord`, then record by
record, so that one bad record cannot sink the others); :func:`decode_document` decodes a whole
document's envelope, with each record kept as raw JSON.

Versions (:data:`SUPPORTED_VERSIONS`) are those Spack v1.3 reads: 6 to 9 (5 and older are an
error for every Spack command since v1.0, and a newer one is not used). One set of structs reads
them all, since each version's node adds to the one before: DB 7 moved the deptypes of an edge
to ``parameters`` beside ``virtuals``, DB 8 replaced ``compiler`` by compiler edges and
``annotations``, DB 9 added ``provided_virtuals`` (not needed: skipped). The legacy structs
read what Spack's own readers accept of older writers (:class:`LegacyNode`), kept off the
common path, which they would slow down.

The structs are ``gc=False``: they hold no reference cycles, and keeping tens of thousands of
them out of the cyclic garbage collector roughly halves decoding time on a develop-sized index.
"""

from __future__ import annotations

import codecs
import mmap
import re
from collections.abc import Callable
from typing import Literal, TypeVar

import msgspec

from ..errors import IndexFormatError, UnsupportedVersionError

#: The Database versions read, as ``database.version`` spells them.
SUPPORTED_VERSIONS = ("6", "7", "8", "9")

#: The revision of the rules by which a record is summarised: raised by a change that makes a
#: record summarise otherwise, so that what was kept of the old summaries (the cache, the spec
#: store) is not used, and each branch is built again, by a build of the same version.
SUMMARY_RULES = 4


def made_by() -> str:
    """What kept summaries are made by: this crawler's version and :data:`SUMMARY_RULES`
    (``0.4.0+rules4``)."""
    from .. import __version__

    return f"{__version__}+rules{SUMMARY_RULES}"


Scalar = bool | int | float | str
ParamValue = Scalar | list[Scalar]
#: A dependency type: one of Spack's four, as its readers take them (``crawler.decode.validate.
#: unprintable`` checks the other texts; these are published too, in each spec's edges).
DepType = Literal["build", "link", "run", "test"]


class Target(msgspec.Struct, gc=False):
    """A microarchitecture target given as an object; only its name is used."""

    name: str


class Arch(msgspec.Struct, gc=False):
    """``spec.arch``."""

    platform: str
    platform_os: str
    target: str | Target

    @property
    def target_name(self) -> str:
        return self.target if isinstance(self.target, str) else self.target.name


class CompilerField(msgspec.Struct, gc=False):
    """DB 6/7 ``spec.compiler``."""

    name: str
    version: str


class DepParameters(msgspec.Struct, gc=False):
    """DB 7+ edge attributes: the dependency types, and the virtuals it provides (which mark
    the compiler edge)."""

    deptypes: list[DepType] = []
    virtuals: list[str] = []


class Dependency(msgspec.Struct, gc=False):
    """One edge of ``spec.dependencies``: DB 6 gives its dependency types as ``type``, later
    versions in ``parameters``."""

    name: str
    hash: str
    parameters: DepParameters | None = None
    type: list[DepType] | None = None

    def deptypes(self) -> tuple[str, ...]:
        """The edge's dependency types (``build``, ``link``, ``run``, ``test``), sorted."""
        given = self.parameters.deptypes if self.parameters is not None else self.type
        return tuple(sorted(given)) if given else ()

    def virtuals(self) -> tuple[str, ...]:
        """The virtuals the edge provides (``c``, ``libc``, ``mpi``), sorted; none before DB 7."""
        given = self.parameters.virtuals if self.parameters is not None else None
        return tuple(sorted(set(given))) if given else ()


class Annotations(msgspec.Struct, gc=False):
    """``spec.annotations``: nodes rewritten from old specfiles carry their compiler here."""

    compiler: str | None = None


class Node(msgspec.Struct, gc=False):
    """The fields of ``spec`` that a root record contributes to the summary."""

    name: str
    version: str
    arch: Arch
    hash: str
    compiler: CompilerField | None = None
    parameters: dict[str, ParamValue] = {}
    dependencies: list[Dependency] = []
    annotations: Annotations | None = None
    #: Older writers' name of ``parameters``, which only :class:`LegacyNode` reads: here, a
    #: node that has it does not fit (left out silently, its variants would be lost, or not,
    #: by what else its piece of the index holds).
    variants: None = None


class Record(msgspec.Struct, gc=False):
    """One entry of ``installs`` in the root index. A missing ``in_buildcache`` means false."""

    spec: Node
    in_buildcache: bool = False


#: What parameters hold in practice: strings, booleans and lists of them (Spack writes variant
#: values so). Lists decode as tuples, so that every (name, value) pair can key a dict.
PlainValue = str | bool | tuple[str | bool, ...]


class PlainNode(Node, gc=False):
    """A :class:`Node` whose parameters are all :data:`PlainValue` (no numbers)."""

    parameters: dict[str, PlainValue] = {}  # type: ignore[assignment]


class PlainRecord(Record, gc=False):
    """A :class:`Record` of a :class:`PlainNode`: the common case, decoded first."""

    spec: PlainNode


def _first_hash(*hashes: str | None) -> str:
    """The first hash given; "" when there is none (an edge then fails as one of a bad hash)."""
    return next((found for found in hashes if found), "")


class LegacyEdge(msgspec.Struct, gc=False):
    """An edge as spec-file v1 keys it by name: ``{"zlib": {"hash": ..., "type": [...]}}``.

    Its hash is the first of ``hash``, ``package_hash``, ``full_hash``, ``build_hash``,
    ``process_hash`` given (the order of Spack's reader, ``ht.HASHES``; ``process_hash`` from
    Spack 0.17's). Only ``hash`` is ever a key of a database, so an edge that gives another one
    points at no record, as in Spack.
    """

    hash: str | None = None
    package_hash: str | None = None
    full_hash: str | None = None
    build_hash: str | None = None
    process_hash: str | None = None
    parameters: DepParameters | None = None
    type: list[DepType] | None = None

    def dag_hash(self) -> str:
        return _first_hash(
            self.hash, self.package_hash, self.full_hash, self.build_hash, self.process_hash
        )


class LegacyDependency(Dependency, gc=False):
    """A :class:`Dependency` whose hash may be under another name (see :class:`LegacyEdge`)."""

    hash: str = ""
    package_hash: str | None = None
    full_hash: str | None = None
    build_hash: str | None = None
    process_hash: str | None = None

    def __post_init__(self) -> None:
        if not self.hash:
            self.hash = _first_hash(
                self.package_hash, self.full_hash, self.build_hash, self.process_hash
            )


class LegacyNode(Node, gc=False):
    """A :class:`Node` as Spack's readers take it from older writers:

    * no ``hash`` (Spack's database reader puts the record's key there, and ignores what the
      node holds: Spack's own test mirror ``legacy_yaml`` has a DB 6 index whose nodes carry
      ``_hash`` and ``_full_hash`` instead); "" here, which the checks read as the key;
    * an edge's hash under ``full_hash``, ``build_hash``, ... (:class:`LegacyEdge`);
    * ``dependencies`` as an object keyed by name, and ``variants`` for ``parameters``: the
      spec-file v1 spellings that Spack 0.17's database reader (which wrote DB 6) accepted.
    """

    hash: str = ""
    dependencies: list[LegacyDependency] | dict[str, LegacyEdge] = []  # type: ignore[assignment]
    variants: dict[str, ParamValue] | None = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if isinstance(self.dependencies, dict):
            self.dependencies = [
                LegacyDependency(name, edge.dag_hash(), edge.parameters, edge.type)
                for name, edge in self.dependencies.items()
            ]
        if self.variants is not None and not self.parameters:
            self.parameters = self.variants


class LegacyRecord(Record, gc=False):
    """A :class:`Record` of a :class:`LegacyNode`: tried when the others do not fit."""

    spec: LegacyNode


class StackNode(msgspec.Struct, gc=False):
    """The identity of a spec as a stack index states it (its edges are not read)."""

    name: str
    version: str
    arch: Arch
    hash: str


class StackRecord(msgspec.Struct, gc=False):
    """One entry of ``installs`` in a stack index."""

    spec: StackNode


class LegacyStackNode(StackNode, gc=False):
    """A :class:`StackNode` with no ``hash`` (see :class:`LegacyNode`)."""

    hash: str = ""


class LegacyStackRecord(StackRecord, gc=False):
    """A :class:`StackRecord` of a :class:`LegacyStackNode`."""

    spec: LegacyStackNode


class _Database(msgspec.Struct, gc=False):
    version: str | int
    installs: dict[str, msgspec.Raw]


class _Document(msgspec.Struct, gc=False):
    database: _Database


class _RawDatabase(msgspec.Struct, gc=False):
    version: str | int
    installs: msgspec.Raw


class _Envelope(msgspec.Struct, gc=False):
    database: _RawDatabase


_ENVELOPE_DECODER = msgspec.json.Decoder(_Envelope)

#: An escape in a JSON string, surrogates apart: a high one with its low one, a lone one, or
#: any other (consumed whole, so that ``\\udcff``, an escaped backslash and text, is not read
#: as an escape of its own).
_ESCAPE = re.compile(
    rb"\\(?:u(?:[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|u(?P<lone>[dD][89a-fA-F][0-9a-fA-F]{2})|.)",
    re.S,
)
_REPLACEMENT = rb"\ufffd"  # U+FFFD, escaped as JSON text
#: What an index is decoded from: a file's bytes, mapped or read.
Buffer = bytes | bytearray | memoryview | mmap.mmap
T = TypeVar("T")


def mend_surrogates(data: Buffer) -> bytes | None:
    """The JSON text with every lone UTF-16 surrogate escape (``\\udcff``) made U+FFFD, or None
    when it holds none.

    Python's ``json`` writes one for a string that is not valid Unicode (a file name that is not
    UTF-8, read with ``surrogateescape``, as an external's path), and reads it back; msgspec
    refuses the whole document. Called only once a decode has failed.
    """
    text = bytes(data)
    if b"\\u" not in text:
        return None
    mended = _ESCAPE.sub(lambda m: _REPLACEMENT if m["lone"] else m[0], text)
    return mended if mended != text else None


#: How msgspec 0.23 and later say that a string they decode is not UTF-8 (a DecodeError; before,
#: a UnicodeDecodeError). See :func:`strict_utf8`.
_NOT_UTF8 = "Invalid UTF-8"


def strict_utf8(decode: Callable[[Buffer], T]) -> Callable[[Buffer], T]:
    """``decode``, raising :class:`UnicodeDecodeError` for a string that is not UTF-8 whichever
    msgspec is installed: the readers tell it from malformed JSON (such a record is left out,
    a document named as not UTF-8). Its reason is Python's codec's, found on the error's path
    only."""

    def decoding(data: Buffer) -> T:
        try:
            return decode(data)
        except msgspec.DecodeError as err:
            if not str(err).startswith(_NOT_UTF8):
                raise
            codecs.utf_8_decode(data, "strict", True)  # raises it, with its reason
            raise  # the bytes are UTF-8 after all: msgspec's error stands

    return decoding


_DECODE_DOCUMENT = strict_utf8(msgspec.json.Decoder(_Document).decode)


def decode_mending(decode: Callable[[Buffer], T], data: Buffer) -> T:
    """``decode(data)``; when that finds the JSON malformed, ``decode`` again with its lone
    surrogate escapes mended (:func:`mend_surrogates`), if it has any."""
    try:
        return decode(data)
    except msgspec.DecodeError:
        mended = mend_surrogates(data)
        if mended is None:
            raise
        return decode(mended)


def decode_envelope(body: Buffer, url: str) -> tuple[str, msgspec.Raw] | None:
    """The DB version and ``installs`` as one raw object, no record decoded (a document of
    millions of tiny records would take GBs as a dict); None when the document is not plainly
    so (not JSON, ``installs`` no object, ...): :func:`decode_document` then says why."""
    try:
        envelope = _ENVELOPE_DECODER.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None
    installs, version = envelope.database.installs, envelope.database.version
    if bytes(memoryview(installs)[:1]) != b"{":
        return None
    if not isinstance(version, str) or version not in SUPPORTED_VERSIONS:
        raise UnsupportedVersionError(url, version)
    return version, installs


def decode_document(body: Buffer, url: str) -> tuple[str, dict[str, msgspec.Raw]]:
    """The DB version and the raw records of an index; errors name ``url`` and the problem."""
    if not body:
        raise IndexFormatError(url, "empty body")
    try:
        document = decode_mending(_DECODE_DOCUMENT, body)
    except msgspec.ValidationError as err:
        raise IndexFormatError(url, f"not a Spack database index: {err}") from None
    except msgspec.DecodeError as err:
        reason = "truncated JSON" if "truncated" in str(err) else "not valid JSON"
        raise IndexFormatError(url, f"{reason}: {err}") from None
    except UnicodeDecodeError as err:  # a key or the version
        raise IndexFormatError(
            url, f"a key or the version is not valid UTF-8 ({err.reason})"
        ) from None
    except RecursionError:  # msgspec gives up on values nested thousands deep
        raise IndexFormatError(url, "not a Spack database index: nested too deeply") from None
    version = document.database.version
    if not isinstance(version, str) or version not in SUPPORTED_VERSIONS:
        raise UnsupportedVersionError(url, version)
    return version, document.database.installs
