"""Validate: the checks every record of an index goes through, and the rows they produce.

The decoding workers (:mod:`crawler.summarize`) check each record they decode with
:class:`_Checker` and reduce it to the types below. A record is left out, and listed in
``invalid`` with its hash and reason, when

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

import re
from typing import Literal

import msgspec

from .decode import Dependency, Node, ParamValue, PlainValue
from .discovery import is_safe_name

HASH = re.compile(r"[a-z2-7]{32}")
_BASE32 = re.compile(r"[a-z2-7]*")
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
IDENTITY_SEPARATOR = "\x1f"
#: name, version, platform, os, target
Identity = tuple[str, str, str, str, str]


def identity(name: str, version: str, platform: str, os: str, target: str) -> str:
    """The fields two indexes must agree on for one hash, as one compact string.

    Records whose fields hold control characters are rejected, so the separator is unambiguous.
    """
    return IDENTITY_SEPARATOR.join((name, version, platform, os, target))


def render_variant(name: str, value: ParamValue | PlainValue) -> str:
    """One variant as the reference pages print it."""
    if isinstance(value, bool):
        return ("+" if value else "~") + name
    if isinstance(value, list | tuple):
        if name == "patches":
            return "patches=" + ",".join(str(v)[:7] for v in value)
        return f"{name}=" + ",".join(_scalar(v) for v in value)
    return f"{name}={_scalar(value)}"


def _scalar(value: bool | int | float | str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def compiler_edge(dependencies: list[Dependency]) -> Dependency | None:
    for virtual in COMPILER_VIRTUALS:
        for dep in dependencies:
            if dep.parameters is not None and virtual in dep.parameters.virtuals:
                return dep
    return None


def own_compiler(node: Node) -> str | Dependency:
    """The node's compiler when the node itself says it, else the dependency edge that does.

    See the module docstring for the order; the edge's target is resolved by
    :func:`merge_root`, against every valid record of the index.
    """
    if node.compiler is not None:
        return f"{node.compiler.name}@{node.compiler.version}"
    edge = compiler_edge(node.dependencies)
    if edge is not None:
        return edge
    if node.annotations is not None and node.annotations.compiler:
        name, _, version = node.annotations.compiler.partition("@")
        return f"{name}@{version.lstrip('=')}" if version else name
    return NO_COMPILER


class _Checker:
    """Per-index record checks (package names memoised), and the records rejected so far."""

    def __init__(self) -> None:
        self.invalid: list[InvalidRecord] = []
        self._safe_names: set[str] = set()
        self._unsafe_names: set[str] = set()

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
        if not self._safe(fields[0]):
            return f"package name {fields[0]!r} is not a safe folder name"
        return None

    def all_pass(
        self, keys: list[str], spec_hashes: list[str], identities: list[str], names: set[str]
    ) -> bool:
        """True when :meth:`problem` finds nothing wrong with any of these records.

        The same checks in bulk, a few C-level calls for a whole piece of an index: when this
        says False, check the records one by one to learn which fail and why. ``identities``
        are :func:`identity` of each record's fields, ``names`` the distinct package names.
        """
        if set(map(len, keys)) - {32} or not _BASE32.fullmatch("".join(keys)):
            return False
        if spec_hashes != keys:
            return False
        text = IDENTITY_SEPARATOR.join(identities)
        if identities and text.count(IDENTITY_SEPARATOR) != 5 * len(identities) - 1:
            return False  # a field holds the separator itself
        if not text.replace(IDENTITY_SEPARATOR, "").isprintable():
            return False
        # Names seen safe before are set aside in C; a piece of a stack has about a thousand.
        return all(map(self._safe, names.difference(self._safe_names)))

    def _safe(self, name: str) -> bool:
        if name in self._safe_names:
            return True
        if name in self._unsafe_names:
            return False
        safe = is_safe_name(name)
        (self._safe_names if safe else self._unsafe_names).add(name)
        return safe

    def reject(self, key: str, reason: str) -> None:
        """Leave a record out, with its reason."""
        self.invalid.append(InvalidRecord(key, reason))
