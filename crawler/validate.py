"""Validate: check every record of an index and reduce it to what the summary needs.

:func:`summarize_index` runs in a worker process (see :mod:`crawler.sync`): it reads one index
file, decodes it (:mod:`crawler.decode`), checks each
record and returns a compact :class:`SourceSummary`. A record is left out, and listed in
``invalid`` with its hash and reason, when

* its key is not 32 characters of lowercase base32 (``^[a-z2-7]{32}$``);
* ``spec.hash`` differs from the key;
* a required field is missing or has the wrong type (``name``, ``version``, ``arch`` with
  ``platform``, ``platform_os`` and ``target``, ``hash``; variant values must be booleans,
  strings, numbers or lists of them);
* the package name is not a safe folder name (pages are written to ``pages/<name>/``);
* a dependency's hash is not a key of the same index;
* (root only) its compiler cannot be resolved.

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
import re
import zlib
from collections.abc import Callable
from pathlib import Path
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


def resolve_compiler(node: Node, compiler_of: Callable[[str], str | None]) -> str:
    """The node's compiler as ``name@version`` (see the module docstring); ValueError if broken.

    ``compiler_of(hash)`` gives ``name@version`` of the record a compiler edge points to, or
    None when that record is absent or invalid.
    """
    if node.compiler is not None:
        return f"{node.compiler.name}@{node.compiler.version}"
    edge = _compiler_edge(node.dependencies)
    if edge is not None:
        found = compiler_of(edge.hash)
        if found is None:
            raise ValueError(f"compiler dependency {edge.name}/{edge.hash} is not a valid record")
        return found
    if node.annotations is not None and node.annotations.compiler:
        name, _, version = node.annotations.compiler.partition("@")
        return f"{name}@{version.lstrip('=')}" if version else name
    return NO_COMPILER


class _Checker:
    """Per-index record checks, with the repetitive parts (names, variants) memoised."""

    def __init__(self, installs: dict[str, msgspec.Raw]) -> None:
        self.installs = installs
        self.invalid: list[InvalidRecord] = []
        self._names: dict[str, bool] = {}
        self._variants: dict[tuple[str, ParamValue], str] = {}

    def problem(
        self, key: str, spec_hash: str, deps: list[str], fields: tuple[str, ...]
    ) -> str | None:
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
        for dep in deps:
            if dep not in self.installs:
                return f"dependency {dep} is not in this index"
        return None

    def variants(self, parameters: dict[str, ParamValue]) -> tuple[str, ...]:
        """:func:`render_variants`, memoised for scalar values."""
        out = []
        cache = self._variants
        for name, value in parameters.items():
            if name in FLAGS:
                continue
            if isinstance(value, list):
                out.append(render_variant(name, value))
                continue
            text = cache.get((name, value))
            if text is None:
                text = cache[(name, value)] = render_variant(name, value)
            out.append(text)
        return tuple(out)

    def reject(self, key: str, reason: str) -> None:
        """Leave a record out, with its reason."""
        self.invalid.append(InvalidRecord(key, reason))


def _summarize_root(installs: dict[str, msgspec.Raw]) -> tuple[list[str], list[SpecRow], _Checker]:
    """Check every record, then resolve compilers against the records that passed."""
    check = _Checker(installs)
    valid: dict[str, str] = {}  # hash -> "name@version" of every valid record
    pending: list[tuple[str, Node, Identity]] = []  # specs in the build cache, to finish
    for key, raw in installs.items():
        try:
            record = ROOT_DECODER.decode(raw)
        except msgspec.ValidationError as err:
            check.reject(key, f"bad record: {err}")
            continue
        node = record.spec
        arch = node.arch
        fields = (node.name, node.version, arch.platform, arch.platform_os, arch.target_name)
        problem = check.problem(key, node.hash, [d.hash for d in node.dependencies], fields)
        if problem:
            check.reject(key, problem)
            continue
        valid[key] = f"{node.name}@{node.version}"
        if record.in_buildcache:
            pending.append((key, node, fields))
    specs: list[SpecRow] = []
    for key, node, fields in pending:
        try:
            compiler = resolve_compiler(node, valid.get)
        except ValueError as err:
            check.reject(key, str(err))
            continue
        specs.append(SpecRow(key, *fields, compiler, check.variants(node.parameters)))
    return list(valid), specs, check


def _summarize_stack(installs: dict[str, msgspec.Raw]) -> tuple[list[str], list[str], _Checker]:
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
        problem = check.problem(key, node.hash, [d.hash for d in node.dependencies], fields)
        if problem:
            check.reject(key, problem)
            continue
        hashes.append(key)
        identities.append(identity(*fields))
    return hashes, identities, check


def read_index(path: str) -> bytes:
    """An index file's bytes, gunzipped when they are gzip data (FORMAT.md section 1)."""
    body = Path(path).read_bytes()
    if body[:2] == b"\x1f\x8b":
        try:
            body = gzip.decompress(body)
        except (OSError, EOFError, zlib.error) as err:
            raise IndexFormatError(path, f"bad gzip data: {err}") from None
    return body


def summarize_index(path: str, url: str, kind: Kind) -> bytes:
    """Read, check and reduce one index file; returns a msgpack-encoded :class:`SourceSummary`.

    Meant for a worker process: the arguments and the result are cheap to pass between
    processes, and the decoded records never leave the worker. (The file's checksum was
    verified by the fetch stage, which hashes while it downloads.)
    """
    try:
        body = read_index(path)
    except IndexFormatError as err:
        raise IndexFormatError(url, err.reason) from None
    version, installs = decode_document(body, url)
    specs: list[SpecRow] = []
    identities: list[str] = []
    if kind == "root":
        hashes, specs, check = _summarize_root(installs)
    else:
        hashes, identities, check = _summarize_stack(installs)
    summary = SourceSummary(
        version, len(installs), len(specs), hashes, specs, identities, check.invalid
    )
    return msgspec.msgpack.encode(summary)


def load_summary(data: bytes) -> SourceSummary:
    """Decode what :func:`summarize_index` returned."""
    return msgspec.msgpack.decode(data, type=SourceSummary)
