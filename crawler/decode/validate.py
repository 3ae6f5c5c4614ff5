"""Validate: the checks every record of an index goes through, and the rows they produce.

The decoding workers (:mod:`crawler.decode.root`, :mod:`crawler.decode.stack`) check each
record they decode with :class:`Checker` and reduce it to the types below. A record is left
out, and listed in ``invalid`` with its hash and reason, when

* its key is not 32 characters of lowercase base32 (``^[a-z2-7]{32}$``);
* ``spec.hash`` differs from the key (a node with no ``hash``, as some older writers left it,
  has the key's: Spack's database reader gives every node its record's key);
* a required field is missing or has the wrong type (``name``, ``version``, ``arch`` with
  ``platform``, ``platform_os`` and ``target``, ``hash``; variant values must be booleans,
  strings, numbers or lists of them), or a string is not UTF-8;
* a text it publishes is not printable (:func:`unprintable`, the one rule for every text field
  a mirror controls): ``name``, ``version``, ``arch``, the compiler, a variant's name or value,
  a dependency's name and the virtuals its edge provides (and a dependency type is one of
  Spack's four);
* the package name is not a safe folder name (pages are written to ``pages/<name>/``);
* a field is longer than its limit (:data:`LIMITS`, below): the reason names the field, its
  size and the limit, so that nothing a mirror sends can make one record, or what it adds to
  the output, large;
* (root only) a dependency's hash is not a key of the same index;
* (root only) its compiler cannot be resolved or has no name (an annotation ``@13``).

Limits (generous: Spack's own records are far below them; a develop root's longest version is
a ``git.<40 hex>=<version>`` of about 60 characters, its longest variant a few hundred) are the
constants below, :data:`LIMITS` by name; docs/security.md tabulates them.

What a report quotes is bounded too: a key at most :data:`SHOWN_KEY` characters, a reason
:data:`SHOWN_REASON` (longer ones end in ``...``), and a source lists at most
:data:`INVALID_SHOWN` invalid records, the first by (hash, reason), with the total count
(:attr:`SourceSummary.invalid_total`). Which ones are listed does not depend on how the index
was cut into pieces or shards. An index with more than :data:`MAX_INVALID` invalid records is
no Spack index: :class:`TooManyInvalid` fails it at once. (A record's JSON is bounded apart,
see :mod:`crawler.decode.chunks`.)

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

import hashlib
import heapq
import re
from array import array
from collections.abc import Iterable
from typing import Literal

import msgspec

from ..documents import NO_COMPILER, SpecDependency
from ..files import is_safe_name
from .records import Dependency, Node, ParamValue, PlainValue

HASH = re.compile(r"[a-z2-7]{32}")
IDENTITY_FIELDS = ("name", "version", "platform", "os", "target")
#: The longest each identity field may be, in characters (name, version, platform, os, target;
#: a name's is a safe folder name's too, a target's counts its ``name`` when an object).
IDENTITY_LIMITS = (200, 256, 64, 64, 128)
_SHORTEST_LIMIT = min(IDENTITY_LIMITS)
MAX_COMPILER = 512  # characters of ``name@version``
MAX_VARIANT = 4096  # characters of one rendered variant
MAX_VARIANTS = 1024  # entries of ``parameters``, compiler flags included
MAX_DEPENDENCIES = 4096
MAX_VIRTUALS = 1024  # the virtuals a record's edges provide, in all (a compiler edge gives 3)
MAX_VIRTUAL = 200  # characters of one virtual's name (a package name's limit)
#: What a report quotes: a key (when it is no DAG hash) and a reason, at most, in characters.
SHOWN_KEY = 64
SHOWN_REASON = 256
#: Invalid records a source lists (the total is counted apart).
INVALID_SHOWN = 100
#: Invalid records an index may hold: beyond, it is no Spack index (a develop root holds 60,000
#: records in all), and the source fails at once rather than checking millions of them.
MAX_INVALID = 100_000
#: Every limit of this module by name: docs/security.md states each (tests/test_limits.py).
LIMITS = {
    **{
        f"{field}_chars": limit
        for field, limit in zip(IDENTITY_FIELDS, IDENTITY_LIMITS, strict=True)
    },
    "compiler_chars": MAX_COMPILER,
    "variant_chars": MAX_VARIANT,
    "variants": MAX_VARIANTS,
    "dependencies": MAX_DEPENDENCIES,
    "virtuals": MAX_VIRTUALS,
    "virtual_chars": MAX_VIRTUAL,
    "shown_key_chars": SHOWN_KEY,
    "shown_reason_chars": SHOWN_REASON,
    "invalid_shown_per_source": INVALID_SHOWN,
    "invalid_per_index": MAX_INVALID,
}


class TooManyInvalid(Exception):
    """An index holds more than :data:`MAX_INVALID` invalid records."""


_BASE32 = re.compile(r"[a-z2-7]*")
FLAGS = frozenset({"cflags", "cppflags", "cxxflags", "fflags", "ldflags", "ldlibs"})
COMPILER_VIRTUALS = ("c", "cxx", "fortran")

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
    #: Its edges: numbers in its summary's :attr:`SourceSummary.dependencies`.
    dependencies: tuple[int, ...] = ()

    def identity(self) -> str:
        """What a stack must agree on for this hash, as one compact string (records whose
        fields hold control characters are rejected, so the separator is unambiguous)."""
        fields = (self.name, self.version, self.platform, self.os, self.target)
        return IDENTITY_SEPARATOR.join(fields)


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
    invalid: list[InvalidRecord]  # the first :data:`INVALID_SHOWN` by (hash, reason)
    invalid_unlisted: int = 0  # invalid records beyond those of ``invalid``
    #: root: the distinct edges of ``specs``, which each spec's ``dependencies`` number
    dependencies: list[SpecDependency] = []

    @property
    def invalid_total(self) -> int:
        """How many records were left out, listed or not."""
        return len(self.invalid) + self.invalid_unlisted


IDENTITY_SEPARATOR = "\x1f"
#: name, version, platform, os, target
Identity = tuple[str, str, str, str, str]


def shorten(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters (the last three ``...``) if it is longer."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def key_digest(key: str) -> int:
    """A stable 64-bit digest of a record's key (the same in every process), so that the keys of
    invalid records can be compared across pieces and shards in 8 bytes each, whatever their
    length. Two keys that collide are taken for one; the caller then reads the index whole."""
    data = key.encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def first_invalid(records: Iterable[InvalidRecord]) -> list[InvalidRecord]:
    """The records a report lists: the first :data:`INVALID_SHOWN` by (hash, reason)."""
    return heapq.nsmallest(INVALID_SHOWN, records, key=_order)


def _order(record: InvalidRecord) -> tuple[str, str]:
    return record.hash, record.reason


def unprintable(what: str, text: str) -> str | None:
    """Why ``text``, a record's ``what``, cannot be published, or None: the rule for every text
    field a mirror controls (identity fields, compiler, variants, dependency names and
    virtuals; the
    discovery document's stack labels, and the ``crawler.text.printable`` of messages, go by
    the same; a dependency type must be one of Spack's four, see ``.records.DepType``).

    ``str.isprintable``: no C0 or C1 control character (``U+009B`` starts a terminal sequence),
    no bidi or other format character (``U+202E`` reorders what follows it on a page or a
    terminal), no separator but the space, nothing unassigned."""
    if text.isprintable():
        return None
    return f"control characters in {what} {shorten(text, SHOWN_KEY)!r}"


def too_long(fields: Identity) -> str | None:
    """Why identity fields are too long to accept (see :data:`IDENTITY_LIMITS`), or None."""
    if max(map(len, fields)) <= _SHORTEST_LIMIT:  # the common case, in C
        return None
    for field, value, limit in zip(IDENTITY_FIELDS, fields, IDENTITY_LIMITS, strict=True):
        if len(value) > limit:
            return f"{field} is {len(value):,} characters, more than the limit of {limit}"
    return None


def all_hashes(hashes: list[str]) -> bool:
    """True when every one of ``hashes`` is a DAG hash (in a few C-level calls)."""
    joined = "".join(hashes)
    return len(joined) == 32 * len(hashes) and _BASE32.fullmatch(joined) is not None


def too_large(what: str, size: int, limit: int, unit: str = "characters") -> str | None:
    """A reason when ``size`` is over ``limit``, or None."""
    return None if size <= limit else f"{what} is {size:,} {unit}, more than the limit of {limit:,}"


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


def own_compiler(node: Node) -> str | Dependency:
    """The node's compiler when the node itself says it, else the dependency edge that does.

    See the module docstring for the order; the edge's target is resolved by
    :func:`merge_root`, against every valid record of the index.
    """
    if node.compiler is not None:
        return f"{node.compiler.name}@{node.compiler.version}"
    for virtual in COMPILER_VIRTUALS:
        for dep in node.dependencies:
            if dep.parameters is not None and virtual in dep.parameters.virtuals:
                return dep
    if node.annotations is not None and node.annotations.compiler:
        name, _, version = node.annotations.compiler.partition("@")
        return f"{name}@{version.lstrip('=')}" if version else name
    return NO_COMPILER


class Checker:
    """Per-index record checks (package names memoised), and the records rejected so far:
    the first :data:`INVALID_SHOWN` of them, how many, and the digest of each one's key."""

    def __init__(self) -> None:
        self._invalid: list[InvalidRecord] = []
        self._last: tuple[str, str] | None = None  # the last listable one, once there are enough
        self.count = 0
        self.keys = array("Q")  # :func:`key_digest` of every key rejected
        self._safe_names: set[str] = set()
        self._unsafe_names: set[str] = set()

    def problem(self, key: str, spec_hash: str, fields: Identity) -> str | None:
        """Why a decoded record cannot be used, or None.

        ``fields`` are the identity fields (name, version, platform, os, target), which are
        shown on pages and compared between indexes: control characters are refused.
        """
        if not HASH.fullmatch(key):
            return "key is not a 32-character base32 DAG hash"
        if spec_hash != key and spec_hash:  # none given: the key's (records.LegacyNode)
            return f"spec.hash {shorten(spec_hash, SHOWN_KEY)!r} differs from its key"
        reason = too_long(fields)
        if reason:
            return reason
        if not "".join(fields).isprintable():  # the common case in C, then which one
            return next(filter(None, map(unprintable, IDENTITY_FIELDS, fields)))
        if not self._safe(fields[0]):
            return f"package name {fields[0]!r} is not a safe folder name"
        return None

    def all_pass(
        self, keys: list[str], spec_hashes: list[str], identities: list[str], names: set[str]
    ) -> bool:
        """True when :meth:`problem` finds nothing wrong with any of these records.

        The same checks in bulk, a few C-level calls for a whole piece of an index: when this
        says False, check the records one by one to learn which fail and why. ``identities``
        are :meth:`SpecRow.identity` of each record's fields, ``names`` the distinct package names.
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

    def fit(self, fields: list[Identity]) -> bool:
        """True when no identity field of these records is over its limit: the bulk form of
        :func:`too_long`, a column at a time."""
        if not fields:
            return True
        columns = zip(*fields, strict=True)
        return all(
            max(map(len, column)) <= limit
            for column, limit in zip(columns, IDENTITY_LIMITS, strict=True)
        )

    def reject(self, key: str, reason: str) -> None:
        """Leave a record out, with its reason (both shortened to what a report shows)."""
        self.count += 1
        if self.count > MAX_INVALID:
            raise TooManyInvalid(
                f"more than {MAX_INVALID:,} invalid records (one: {shorten(reason, 120)})"
            )
        self.keys.append(key_digest(key))
        shown = (shorten(key, SHOWN_KEY), shorten(reason, SHOWN_REASON))
        if self._last is not None and shown >= self._last:
            return  # millions of bad records cost no record each
        invalid = self._invalid
        invalid.append(InvalidRecord(*shown))
        if len(invalid) >= 2 * INVALID_SHOWN:  # keep the first ones, in amortised O(1)
            self._invalid = invalid = first_invalid(invalid)
            self._last = _order(invalid[-1])

    @property
    def invalid(self) -> list[InvalidRecord]:
        """The records a report lists (:func:`first_invalid`), sorted."""
        return first_invalid(self._invalid)

    @property
    def unlisted(self) -> int:
        """How many rejected records :attr:`invalid` leaves out."""
        return self.count - min(self.count, INVALID_SHOWN)
