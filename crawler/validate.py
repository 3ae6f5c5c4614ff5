"""Validate: check every record of an index and reduce it to what the summary needs.

:func:`summarize_stack` and :func:`summarize_root_shard` run in worker processes (see
:mod:`crawler.sources`): they read one index file, decode it (:mod:`crawler.decode`), check each
record and return a compact summary; a root index is split across workers and joined by
:func:`merge_root`. A record is left out, and listed in ``invalid`` with its hash and reason, when

* its key is not 32 characters of lowercase base32 (``^[a-z2-7]{32}$``);
* ``spec.hash`` differs from the key;
* a required field is missing or has the wrong type (``name``, ``version``, ``arch`` with
  ``platform``, ``platform_os`` and ``target``, ``hash``; variant values must be booleans,
  strings, numbers or lists of them);
* the package name is not a safe folder name (pages are written to ``pages/<name>/``);
* (root only) a dependency's hash is not a key of the same index;
* (root only) its compiler cannot be resolved.

A stack index only contributes which hashes it holds and what it says they are (name, version,
arch, compared with the root's), so its records' edges are not read.

Compiler resolution, in order: the DB 6/7 ``compiler`` field; else the dependency whose
``virtuals`` contain ``c``, else ``cxx``, else ``fortran``, named ``name@version`` from the record
that edge points to; else ``annotations.compiler`` (``gcc@=11.4.0`` is shown as ``gcc@11.4.0``);
else, for a node with no compiler at all (pure-Python, data and wrapper packages), the string
``none``. A compiler edge pointing at a record that is absent or itself invalid makes the record
invalid rather than silently falling back.

Variants keep the order of the ``parameters`` keys, compiler flags left out: ``true`` is
``+name``, ``false`` is ``~name``, a list is ``name=a,b`` (the form the reference site shows, not
Spack 1.x's ``name:=a,b``), ``patches`` is ``patches=`` and the first 7 characters of each
checksum, anything else ``name=value``.
"""

from __future__ import annotations

import gzip
import mmap
import re
import sys
import zlib
from array import array
from typing import Literal

import msgspec

from .decode import (
    ROOT_DECODER,
    STACK_DECODER,
    Dependency,
    Node,
    ParamValue,
    decode_document,
)
from .discovery import is_safe_name
from .errors import IndexFormatError

HASH = re.compile(r"[a-z2-7]{32}")
FLAGS = frozenset({"cflags", "cppflags", "cxxflags", "fflags", "ldflags", "ldlibs"})
COMPILER_VIRTUALS = ("c", "cxx", "fortran")
NO_COMPILER = "none"

Kind = Literal["root", "stack"]


class SpecRow(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One root record in the build cache, ready for the summary."""

    hash: str
    name: str
    version: str
    platform: str
    os: str
    target: str
    compiler: str
    variants: tuple[str, ...]

    def identity(self) -> str:
        """What a stack must agree on for this hash (see :func:`identity`)."""
        return identity(self.name, self.version, self.platform, self.os, self.target)


class InvalidRecord(msgspec.Struct, frozen=True, gc=False):
    """A record left out of the summary, and why."""

    hash: str
    reason: str


class SourceSummary(msgspec.Struct, frozen=True, gc=False):
    """Everything one index contributes to its branch."""

    db_version: str
    records: int  # entries of ``installs``, valid or not
    in_buildcache: int  # root: valid records with ``in_buildcache: true``; 0 for stacks
    hashes: list[str]  # every valid record, whether in the build cache or not
    specs: list[SpecRow]  # root: the valid records in the build cache
    identities: list[str]  # stacks: identity of each of ``hashes``, same order
    invalid: list[InvalidRecord]


IDENTITY_FIELDS = ("name", "version", "platform", "os", "target")
#: name, version, platform, os, target
Identity = tuple[str, str, str, str, str]


def identity(name: str, version: str, platform: str, os: str, target: str) -> str:
    """The fields two indexes must agree on for one hash, as one compact string.

    Records whose fields hold control characters are rejected, so the separator is unambiguous.
    """
    return "\x1f".join((name, version, platform, os, target))


def render_variant(name: str, value: ParamValue) -> str:
    """One variant as the reference pages print it."""
    if isinstance(value, bool):
        return ("+" if value else "~") + name
    if isinstance(value, list):
        if name == "patches":
            return "patches=" + ",".join(str(v)[:7] for v in value)
        return f"{name}=" + ",".join(_scalar(v) for v in value)
    return f"{name}={_scalar(value)}"


def _scalar(value: bool | int | float | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_variants(parameters: dict[str, ParamValue]) -> tuple[str, ...]:
    """All variants of a node in ``parameters`` order, compiler flags left out."""
    return tuple(render_variant(k, v) for k, v in parameters.items() if k not in FLAGS)


def _compiler_edge(dependencies: list[Dependency]) -> Dependency | None:
    for virtual in COMPILER_VIRTUALS:
        for dep in dependencies:
            if dep.parameters is not None and virtual in dep.parameters.virtuals:
                return dep
    return None


def own_compiler(node: Node) -> str | None:
    """The node's compiler when the node itself says it, None when a dependency edge does.

    See the module docstring for the order; the edge's target is resolved by
    :func:`merge_root`, against every valid record of the index.
    """
    if node.compiler is not None:
        return f"{node.compiler.name}@{node.compiler.version}"
    if _compiler_edge(node.dependencies) is not None:
        return None
    if node.annotations is not None and node.annotations.compiler:
        name, _, version = node.annotations.compiler.partition("@")
        return f"{name}@{version.lstrip('=')}" if version else name
    return NO_COMPILER


_MEMO_LIMIT = 20_000


def _memo_key(value: bool | int | float | str) -> tuple[type, object]:
    """A dict key that tells apart values Python deems equal but that print differently."""
    return (type(value), repr(value) if isinstance(value, float) else value)


class _Checker:
    """Per-index record checks, with the repetitive parts (names, variants) memoised."""

    def __init__(self, installs: dict[str, msgspec.Raw]) -> None:
        self.installs = installs
        self.invalid: list[InvalidRecord] = []
        self._names: dict[str, bool] = {}
        self._items: dict[tuple[object, ...], str] = {}

    def problem(self, key: str, spec_hash: str, fields: Identity) -> str | None:
        """Why a decoded record cannot be used, or None.

        ``fields`` are the identity fields (name, version, platform, os, target), which are
        shown on pages and compared between indexes: control characters are refused.
        """
        if not HASH.fullmatch(key):
            return "key is not a 32-character base32 DAG hash"
        if spec_hash != key:
            return f"spec.hash {spec_hash!r} differs from its key"
        if not "".join(fields).isprintable():
            return f"control characters in name, version or arch: {fields!r}"
        name = fields[0]
        safe = self._names.get(name)
        if safe is None:
            safe = self._names[name] = is_safe_name(name)
        if not safe:
            return f"package name {name!r} is not a safe folder name"
        return None

    def missing_dependency(self, dependencies: list[Dependency]) -> str | None:
        """The first edge whose hash is not a key of this index, as a message."""
        installs = self.installs
        for dep in dependencies:
            if dep.hash not in installs:
                return f"dependency {dep.name}/{dep.hash} is not in this index"
        return None

    def variants(self, parameters: dict[str, ParamValue]) -> tuple[str, ...]:
        """:func:`render_variants`, each name and value memoised (they repeat a lot)."""
        return tuple(self._render(k, v) for k, v in parameters.items() if k not in FLAGS)

    def _render(self, name: str, value: ParamValue) -> str:
        """:func:`render_variant`, memoised per name and value (values repeat a lot)."""
        # The type is part of the key: True == 1 == 1.0 as dict keys, but they render differently.
        # Floats by repr: 0.0 == -0.0 but they print differently.
        if isinstance(value, list):
            key: tuple[object, ...] = (name, list, tuple(map(_memo_key, value)))
        else:
            key = (name, *_memo_key(value))
        text = self._items.get(key)
        if text is None:
            text = render_variant(name, value)
            if len(self._items) < _MEMO_LIMIT:
                self._items[key] = text
        return text

    def reject(self, key: str, reason: str) -> None:
        """Leave a record out, with its reason."""
        self.invalid.append(InvalidRecord(key, reason))


class RootShard(msgspec.Struct, frozen=True, gc=False):
    """One worker's share of a root index, before compilers are resolved across shards.

    The specs' text fields travel as indexes into ``strings``: a develop root repeats a few
    thousand distinct strings (platforms, targets, compilers, variants) over a million times,
    and sending each occurrence would make the receiving process build a string for each.
    """

    db_version: str
    records: int
    hashes: list[str]  # valid records of this shard
    versions: list[str]  # "name@version" of each of ``hashes``, for compiler edges
    strings: list[str]  # the distinct text of the rows
    #: (hash, name/version/platform/os/target/compiler as indexes, variants as indexes); the
    #: indexes are ``array("I")`` bytes; the compiler is "" where ``edges`` has a say.
    rows: list[tuple[str, bytes, bytes]]
    edges: list[tuple[int, str, str]]  # (index in rows, edge hash, edge name)
    invalid: list[InvalidRecord]


class _Strings:
    """Numbers each distinct string as it is first seen."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}

    def pack(self, values: tuple[str, ...]) -> bytes:
        numbers = self.numbers
        return array("I", [numbers.setdefault(v, len(numbers)) for v in values]).tobytes()

    def table(self) -> list[str]:
        return list(self.numbers)  # dicts keep insertion order: position == number


def _root_shard(
    installs: dict[str, msgspec.Raw], version: str, shard: int, shards: int
) -> RootShard:
    check = _Checker(installs)
    strings = _Strings()
    hashes: list[str] = []
    versions: list[str] = []
    rows: list[tuple[str, bytes, bytes]] = []
    edges: list[tuple[int, str, str]] = []
    for position, (key, raw) in enumerate(installs.items()):
        if position % shards != shard:
            continue
        try:
            record = ROOT_DECODER.decode(raw)
            node = record.spec
            arch = node.arch
            fields = (node.name, node.version, arch.platform, arch.platform_os, arch.target_name)
            problem = check.problem(key, node.hash, fields) or check.missing_dependency(
                node.dependencies
            )
        except msgspec.ValidationError as err:
            check.reject(key, f"bad record: {err}")
            continue
        if problem:
            check.reject(key, problem)
            continue
        hashes.append(key)
        versions.append(f"{node.name}@{node.version}")
        if not record.in_buildcache:
            continue
        compiler = own_compiler(node)
        if compiler is None:
            edge = _compiler_edge(node.dependencies)
            assert edge is not None  # own_compiler returns None only when there is an edge
            edges.append((len(rows), edge.hash, edge.name))
            compiler = ""
        variants = check.variants(node.parameters)
        rows.append((key, strings.pack((*fields, compiler)), strings.pack(variants)))
    return RootShard(
        version, len(installs), hashes, versions, strings.table(), rows, edges, check.invalid
    )


def merge_root(shards: list[RootShard]) -> SourceSummary:
    """Join the shards of a root index and resolve compiler edges against all its records."""
    valid: dict[str, str] = {}
    for shard in shards:
        valid.update(zip(shard.hashes, shard.versions, strict=True))
    specs: list[SpecRow] = []
    invalid: list[InvalidRecord] = []
    for shard in shards:
        invalid += shard.invalid
        edges = {i: (h, name) for i, h, name in shard.edges}
        text = shard.strings.__getitem__
        for i, (key, packed, variants) in enumerate(shard.rows):
            name, version, platform, os, target, compiler = map(text, array("I", packed))
            if i in edges:
                edge_hash, edge_name = edges[i]
                found = valid.get(edge_hash)
                if found is None:
                    reason = f"compiler dependency {edge_name}/{edge_hash} is not a valid record"
                    invalid.append(InvalidRecord(key, reason))
                    continue
                compiler = found
            rendered = tuple(map(text, array("I", variants)))
            specs.append(SpecRow(key, name, version, platform, os, target, compiler, rendered))
    invalid.sort(key=lambda r: (r.hash, r.reason))
    first = shards[0]
    hashes = [h for shard in shards for h in shard.hashes]
    summary = SourceSummary(first.db_version, first.records, len(specs), hashes, specs, [], invalid)
    return compact(summary)


def compact(summary: SourceSummary) -> SourceSummary:
    """The same summary with its hashes and identities shared with other summaries'.

    Every stack repeats hashes (and identities) the root and other stacks hold; decoding makes
    a new string for each occurrence, and ``sys.intern`` folds them back into one. (Rebuilding
    the root's rows the same way saved less memory than it cost in time, so they are left.)
    """
    return msgspec.structs.replace(
        summary,
        hashes=list(map(sys.intern, summary.hashes)),
        identities=list(map(sys.intern, summary.identities)),
    )


def _stack(installs: dict[str, msgspec.Raw]) -> tuple[list[str], list[str], _Checker]:
    check = _Checker(installs)
    hashes: list[str] = []
    identities: list[str] = []
    for key, raw in installs.items():
        try:
            node = STACK_DECODER.decode(raw).spec
        except msgspec.ValidationError as err:
            check.reject(key, f"bad record: {err}")
            continue
        arch = node.arch
        fields = (node.name, node.version, arch.platform, arch.platform_os, arch.target_name)
        problem = check.problem(key, node.hash, fields)
        if problem:
            check.reject(key, problem)
            continue
        hashes.append(key)
        identities.append(identity(*fields))
    return hashes, identities, check


def read_index(path: str, url: str) -> tuple[str, dict[str, msgspec.Raw]]:
    """Read an index file (gunzipped if it is gzip data, FORMAT.md section 1) and decode its
    envelope: the DB version and the raw records.

    The file is memory-mapped rather than read: workers that share a root index then share its
    pages (the page cache) instead of holding a private copy each.
    """
    with open(path, "rb") as file:
        try:
            body: bytes | mmap.mmap = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            body = b""
    if body[:2] == b"\x1f\x8b":
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as err:
            raise IndexFormatError(url, f"bad gzip data: {err}") from None
    return decode_document(body, url)


def summarize_root_shard(path: str, url: str, shard: int = 0, shards: int = 1) -> bytes:
    """Check and reduce every ``shards``-th record of a root index, from the ``shard``-th.

    Meant for a worker process: arguments and result (msgpack of :class:`RootShard`) are cheap
    to pass, and the decoded records never leave the worker. Each shard reads the whole file
    but decodes only its own records, so a large root index is spread over every worker.
    """
    version, installs = read_index(path, url)
    return msgspec.msgpack.encode(_root_shard(installs, version, shard, shards))


def summarize_stack(path: str, url: str) -> bytes:
    """Check and reduce a stack index (a worker's job); msgpack of :class:`SourceSummary`."""
    version, installs = read_index(path, url)
    hashes, identities, check = _stack(installs)
    invalid = sorted(check.invalid, key=lambda r: (r.hash, r.reason))
    summary = SourceSummary(version, len(installs), 0, hashes, [], identities, invalid)
    return msgspec.msgpack.encode(summary)


def load_summary(data: bytes) -> SourceSummary:
    """Decode what :func:`summarize_stack` returned."""
    return compact(msgspec.msgpack.decode(data, type=SourceSummary))


def load_root_shard(data: bytes) -> RootShard:
    """Decode what :func:`summarize_root_shard` returned."""
    return msgspec.msgpack.decode(data, type=RootShard)
