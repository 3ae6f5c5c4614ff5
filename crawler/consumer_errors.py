"""A consumer's errors: reading a published branch, and querying it (part of the tree of
:mod:`crawler.errors`, whose exit codes they carry)."""

from __future__ import annotations

from .errors import CrawlerError, ExitCode, UsageError
from .text import printable, shown


class QueryError(UsageError):
    """A query that cannot be asked: a malformed version, compiler or variant (``what`` says
    which criterion, ``value`` is as given)."""

    def __init__(self, what: str, value: str, reason: str) -> None:
        self.what = what
        self.value = value
        self.reason = reason
        super().__init__(what, value, reason)

    def __str__(self) -> str:
        return f"bad {self.what} {shown(self.value)!r}: {self.reason}"


class SpecSyntaxError(QueryError):
    """A spec in Spack's syntax that is malformed, or asks what the index cannot answer: the
    spec, where its token starts and ends (``start``, ``end``: offsets in ``text``), and why.
    Shown as Spack shows it: the spec, and a caret line under the token."""

    def __init__(self, text: str, start: int, end: int, reason: str) -> None:
        self.text = text
        self.start = start
        self.end = end
        super().__init__("spec", text, reason)
        self.args = (text, start, end, reason)

    def caret(self) -> str:
        """The spec as shown, and under it a caret line marking the token (the spec's
        characters that are not printable escaped alike in both)."""
        before, token = (
            printable(self.text[: self.start]),
            printable(self.text[self.start : self.end]),
        )
        return f"{printable(self.text)}\n{' ' * len(before)}{'^' * max(len(token), 1)}"

    def __str__(self) -> str:
        return f"bad spec (column {self.start + 1}): {self.reason}\n{self.caret()}"


class NotABranchError(CrawlerError):
    """A path given to read a published branch is none: missing, an output folder, a folder
    without ``index.json``, or one whose documents cannot be read as a publish writes them."""

    exit_code = ExitCode.NOT_A_BRANCH

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(path, reason)

    def __str__(self) -> str:
        return f"{self.path}: not a published branch: {self.reason}"


class SchemaVersionError(CrawlerError):
    """A published ``index.json`` (or ``links.json``) of a ``schema_version`` this version does
    not read: a newer crawler wrote it (upgrade), or it is no crawler's."""

    exit_code = ExitCode.SCHEMA_VERSION

    def __init__(self, path: str, version: object, supported: int) -> None:
        self.path = path
        self.version = version
        self.supported = supported
        super().__init__(path, version, supported)

    def __str__(self) -> str:
        reads = f"this crawler reads schema_version {self.supported} and older"
        newer = type(self.version) is int and self.version > self.supported
        if newer:
            return (
                f"{self.path}: schema_version {self.version} is newer than {reads}; "
                "upgrade spack-cache-crawler to read it"
            )
        what = "no schema_version" if self.version is None else f"schema_version {self.version!r}"
        return f"{self.path}: {what}, unknown: {reads}"


class UnknownTargetError(CrawlerError):
    """A query names a host microarchitecture or a target family that archspec does not know
    (``what``: ``host`` or ``family``); ``hint`` says what would be known."""

    exit_code = ExitCode.UNKNOWN_TARGET

    def __init__(self, what: str, name: str, hint: str) -> None:
        self.what = what
        self.name = name
        self.hint = hint
        super().__init__(what, name, hint)

    def __str__(self) -> str:
        return f"unknown {self.what} {shown(self.name)!r}: {self.hint}"


class MirrorsDifferError(CrawlerError):
    """Two branches to compare were published from two mirrors (their ``index.json``'s
    ``mirror``): their specs would all differ for reasons that are not news, or the wrong
    folder was given. ``crawler diff --any-mirror`` compares them anyway."""

    exit_code = ExitCode.MIRRORS_DIFFER

    def __init__(self, before: str, after: str, mirror_before: str, mirror_after: str) -> None:
        self.before = before
        self.after = after
        self.mirror_before = mirror_before
        self.mirror_after = mirror_after
        super().__init__(before, after, mirror_before, mirror_after)

    def __str__(self) -> str:
        return (
            f"{self.before} and {self.after} were published from two mirrors, "
            f"{shown(self.mirror_before)} and {shown(self.mirror_after)} "
            "(--any-mirror compares them anyway)"
        )
