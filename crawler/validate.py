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

import re
from pathlib import Path
from typing import Literal

import msgspec

from .decode import (
    ROOT_DECODER,
    STACK_DECODER,
    Arch,
    Dependency,
    Node,
    ParamValue,
    Record,
    decode_document,
)
from .discovery import is_safe_name

HASH = re.compile(r"[a-z2-7]{32}")
FLAGS = frozenset({"cflags", "cppflags", "cxxflags", "fflags", "ldflags", "ldlibs"})
COMPILER_VIRTUALS = ("c", "cxx", "fortran")
NO_COMPILER = "none"

Kind = Literal["root", "stack"]


class Identity(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """What two indexes must agree on for one hash."""

    hash: str
    name: str
    version: str
    platform: str
    os: str
    target: str


class SpecRow(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One root record in the build cache, ready for the summary."""

    identity: Identity
    compiler: str
    variants: tuple[str, ...]


class InvalidRecord(msgspec.Struct, frozen=True, gc=False):
    """A record left out of the summary, and why."""

    hash: str
    reason: str


class SourceSummary(msgspec.Struct, frozen=True, gc=False):
    """Everything one index contributes to its branch."""

    db_version: str
    records: int  # entries of ``installs``, valid or not
    in_buildcache: int  # valid records with ``in_buildcache: true`` (root only; 0 for stacks)
    hashes: list[str]  # every valid record, whether in the build cache or not
    specs: list[SpecRow]  # root: valid records in the build cache
    identities: list[Identity]  # stacks: identity of every valid record
    invalid: list[InvalidRecord]


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


def resolve_compiler(node: Node, valid: dict[str, Record]) -> str:
    """The node's compiler as ``name@version`` (see the module docstring); ValueError if broken."""
    if node.compiler is not None:
        return f"{node.compiler.name}@{node.compiler.version}"
    edge = _compiler_edge(node.dependencies)
    if edge is not None:
        target = valid.get(edge.hash)
        if target is None:
            raise ValueError(f"compiler dependency {edge.name}/{edge.hash} is not a valid record")
        return f"{target.spec.name}@{target.spec.version}"
    if node.annotations is not None and node.annotations.compiler:
        name, _, version = node.annotations.compiler.partition("@")
        return f"{name}@{version.lstrip('=')}" if version else name
    return NO_COMPILER


def _identity_problem(key: str, name: str, spec_hash: str) -> str | None:
    if not HASH.fullmatch(key):
        return "key is not a 32-character base32 DAG hash"
    if spec_hash != key:
        return f"spec.hash {spec_hash!r} differs from its key"
    if not is_safe_name(name):
        return f"package name {name!r} is not a safe folder name"
    return None


def _identity(key: str, name: str, version: str, arch: Arch) -> Identity:
    return Identity(key, name, version, arch.platform, arch.platform_os, arch.target_name)


def _summarize_root(
    installs: dict[str, msgspec.Raw],
) -> tuple[list[str], list[SpecRow], list[InvalidRecord]]:
    invalid: list[InvalidRecord] = []
    decoded: dict[str, Record] = {}
    for key, raw in installs.items():
        try:
            record = ROOT_DECODER.decode(raw)
        except msgspec.ValidationError as err:
            invalid.append(InvalidRecord(key, f"bad record: {err}"))
            continue
        node = record.spec
        problem = _identity_problem(key, node.name, node.hash)
        if problem is None:
            missing = [d for d in node.dependencies if d.hash not in installs]
            if missing:
                problem = f"dependency {missing[0].name}/{missing[0].hash} is not in this index"
        if problem:
            invalid.append(InvalidRecord(key, problem))
        else:
            decoded[key] = record
    specs: list[SpecRow] = []
    for key, record in decoded.items():
        if not record.in_buildcache:
            continue
        node = record.spec
        try:
            compiler = resolve_compiler(node, decoded)
        except ValueError as err:
            invalid.append(InvalidRecord(key, str(err)))
            continue
        identity = _identity(key, node.name, node.version, node.arch)
        specs.append(SpecRow(identity, compiler, render_variants(node.parameters)))
    return list(decoded), specs, invalid


def _summarize_stack(
    installs: dict[str, msgspec.Raw],
) -> tuple[list[str], list[Identity], list[InvalidRecord]]:
    invalid: list[InvalidRecord] = []
    identities: list[Identity] = []
    for key, raw in installs.items():
        try:
            node = STACK_DECODER.decode(raw).spec
        except msgspec.ValidationError as err:
            invalid.append(InvalidRecord(key, f"bad record: {err}"))
            continue
        problem = _identity_problem(key, node.name, node.hash)
        if problem is None:
            missing = [d for d in node.dependencies if d.hash not in installs]
            if missing:
                problem = f"dependency {missing[0].hash} is not in this index"
        if problem:
            invalid.append(InvalidRecord(key, problem))
            continue
        identities.append(_identity(key, node.name, node.version, node.arch))
    return [i.hash for i in identities], identities, invalid


def summarize_index(path: str, url: str, kind: Kind) -> bytes:
    """Read, check and reduce one index file; returns a msgpack-encoded :class:`SourceSummary`.

    Meant for a worker process: the arguments and the result are cheap to pass between
    processes, and the decoded records never leave the worker. (The file's checksum was
    verified by the fetch stage, which hashes while it downloads.)
    """
    body = Path(path).read_bytes()
    version, installs = decode_document(body, url)
    if kind == "root":
        hashes, specs, invalid = _summarize_root(installs)
        identities: list[Identity] = []
        in_cache = len(specs)
    else:
        hashes, identities, invalid = _summarize_stack(installs)
        specs, in_cache = [], 0
    summary = SourceSummary(version, len(installs), in_cache, hashes, specs, identities, invalid)
    return msgspec.msgpack.encode(summary)


def load_summary(data: bytes) -> SourceSummary:
    """Decode what :func:`summarize_index` returned."""
    return msgspec.msgpack.decode(data, type=SourceSummary)
