"""Every error the crawler raises on purpose derives from :class:`CrawlerError`; each class
carries the exit code the command line ends with when it stops a run (:class:`ExitCode`).

::

    CrawlerError                  4  (unless a class below says otherwise)
    ├── UsageError                2  bad command-line arguments (unknown branch, unsafe name)
    │   └── QueryError               a malformed query: version, compiler, variant (what, value)
    │       └── SpecSyntaxError          a spec in Spack's syntax that cannot be asked (the token)
    ├── ConfigError               2  a config file that cannot be used (file, key, reason)
    ├── LockBusyError             7  another run holds the output's lock (path, holder)
    ├── FetchError                3  a URL could not be read (url, reason, attempts)
    │   ├── HTTPStatusError          the server answered with a non-success status (status)
    │   │   └── NotFoundError        404 / missing file: a stack without an index is "missing"
    │   ├── NotACacheError           no discovery document and no index where one is looked for
    │   ├── SourceChanged            a local index changed while it was read
    │   └── ChecksumError            the bytes do not match the checksum the mirror promised
    ├── IndexFormatError          3  a discovery document or index not shaped as FORMAT.md says
    │   └── UnsupportedVersionError  an index whose Database version is not 6, 7, 8 or 9
    ├── WorkerError                  a decoding process died while an index decoded (url)
    ├── OutOfMemory                  decoding an index ran out of memory (url)
    ├── PoolError                    the decoding processes cannot be started (reason)
    ├── BranchError                  one branch could not be synced (branch, reason)
    ├── PublishRefused               the publish gate said no (reported as status "refused")
    ├── ChangesInputError            changes asked of something that is not an index
    ├── OutputError                  the output directory cannot be written (path, reason)
    ├── NotABranchError         11  a consumer was given no published branch (path, reason)
    ├── SchemaVersionError      12  an index.json of a schema_version this version does not read
    ├── UnknownTargetError      13  a query names a host or family archspec does not know
    ├── MirrorsDifferError      15  crawler diff of two branches published from two mirrors
    └── MemoryExhausted         16  a command ran out of memory (what it was doing)

Fetch and format errors stop a run only when they concern the mirror itself (its discovery
document); an index's errors fail its source, and a branch's its branch, which the run reports
with the branch statuses (see :func:`crawler.cli.command.exit_code`).

A consumer's errors (``QueryError``, ``SpecSyntaxError``, ``NotABranchError``,
``SchemaVersionError``, ``UnknownTargetError``, ``MirrorsDifferError``) are defined in
:mod:`crawler.consumer_errors`, the helpers that render text in a message (``shown``,
``printable``) in :mod:`crawler.text`.

Each carries the fields a user needs to act on it and renders them in ``str()``; ``args`` are
the constructor's arguments, so errors raised in a worker process survive pickling.
"""

from __future__ import annotations

import enum
import errno
from typing import TYPE_CHECKING, ClassVar

from .text import shown

if TYPE_CHECKING:
    from .output.lock import Holder


class ExitCode(enum.IntEnum):
    """The command line's exit codes (a signal's is 128 + its number, as shells say)."""

    OK = 0  # every requested branch is current and at least one was published
    INTERNAL = 1  # a bug: the traceback is printed
    USAGE = 2  # bad flag, config, branch name or path
    MIRROR = 3  # the mirror is unusable: its discovery document unreachable or invalid
    FAILED = 4  # a branch failed or was refused; or the output cannot be written
    PARTIAL = 5  # published, but some stacks failed (within the budget)
    UNCHANGED = 6  # nothing changed: every branch unchanged or skipped
    LOCKED = 7  # another run holds the output folder's lock
    VERIFY_FAILED = 8  # crawler verify found problems
    DEADLINE = 9  # the run's deadline passed: stopped as if interrupted
    NO_MATCH = 10  # crawler find matched no spec
    NOT_A_BRANCH = 11  # a consumer's command was given no published branch
    SCHEMA_VERSION = 12  # a published index.json of a schema_version not read here (newer)
    UNKNOWN_TARGET = 13  # a query names a host or target family archspec does not know
    DIFFERENT = 14  # crawler diff --exit-code: the two branches differ
    MIRRORS_DIFFER = 15  # crawler diff: the two branches were published from two mirrors
    OUT_OF_MEMORY = 16  # the command ran out of memory (a MemoryError: under ulimit -v, say)
    BINARIES_MISSING = 17  # crawler audit: binaries missing or not sound


class CrawlerError(Exception):
    """Root of the crawler's own errors."""

    #: The exit code of a run this error stops.
    exit_code: ClassVar[ExitCode] = ExitCode.FAILED
    #: What the command line says before the error's own text, after ``error:``.
    headline: ClassVar[str] = ""


class UsageError(CrawlerError):
    """The command line asks for something that cannot be done."""

    exit_code = ExitCode.USAGE


class ConfigError(CrawlerError):
    """A configuration file is missing, unreadable or holds a bad key or value."""

    exit_code = ExitCode.USAGE

    def __init__(self, path: str, reason: str, key: str | None = None) -> None:
        self.path = path
        self.key = key
        self.reason = reason
        super().__init__(path, reason, key)

    def __str__(self) -> str:
        where = f"{self.path}: key '{self.key}'" if self.key else self.path
        return f"config error in {where}: {self.reason}"


class LockBusyError(CrawlerError):
    """Another run holds the output folder's lock (and kept it for the whole wait)."""

    exit_code = ExitCode.LOCKED

    def __init__(self, path: str, holder: Holder, waited: float) -> None:
        self.path = path
        self.holder = holder
        self.waited = waited
        super().__init__(path, holder, waited)

    def __str__(self) -> str:
        waited = f" after waiting {self.waited:.1f}s" if self.waited > 0 else ""
        return (
            f"output folder is locked by another crawler run: {self.holder.describe()}{waited} "
            f"(lock file {self.path})"
        )


class FetchError(CrawlerError):
    """A URL could not be fetched."""

    exit_code = ExitCode.MIRROR
    headline = "mirror unusable: "

    def __init__(self, url: str, reason: str, attempts: int = 1) -> None:
        self.url = url
        self.reason = reason
        self.attempts = attempts
        super().__init__(url, reason, attempts)

    def __str__(self) -> str:
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        return f"cannot fetch {self.url}: {self.reason}{tries}"


class HTTPStatusError(FetchError):
    """The server answered with a status that is not 200 (or 304 where asked for)."""

    def __init__(self, url: str, status: int, retry_after: float | None = None) -> None:
        self.status = status
        self.retry_after = retry_after
        super().__init__(url, f"HTTP {status}")
        self.args = (url, status, retry_after)


class NotFoundError(HTTPStatusError):
    """The file does not exist on the mirror (HTTP 404, or no such local file)."""

    def __init__(self, url: str) -> None:
        super().__init__(url, 404)
        if url.startswith("file://"):
            self.reason = "no such file"
        self.args = (url,)


class NotACacheError(FetchError):
    """A mirror where nothing is at any place a discovery document or a build cache's index is
    looked for (``looked``, in order), or (``missing``) a folder that is not there."""

    def __init__(self, url: str, looked: tuple[str, ...], missing: bool = False) -> None:
        self.looked = looked
        self.missing = missing
        super().__init__(url, "no such file or folder" if missing else "no build cache")
        self.args = (url, looked, missing)

    def __str__(self) -> str:
        if self.missing:
            return f"{self.url}: no such file or folder"
        places = "".join(f"\n  {place}" for place in self.looked)
        return (
            f"{self.url} is no build cache: nothing is at any place one is looked for:{places}\n"
            "a build cache is what `spack buildcache push` and `spack buildcache update-index`"
            " write: v3/layout.json, v3/manifests/index/index.manifest.json (its index; a view's"
            " is v3/manifests/index/<view>/index.manifest.json) and blobs/sha256/<xx>/<sha256>,"
            " or build_cache/index.json before Spack 1.0; a mirror of several caches lists them"
            " in cache_spack_io_index.json (see docs/mirrors.md)"
        )


class SourceChanged(FetchError):
    """A local index file changed while it was being read (the mirror is being updated)."""


class ChecksumError(FetchError):
    """The body's SHA-256 differs from the checksum its URL or sidecar promised."""

    def __init__(
        self,
        url: str,
        expected: str,
        actual: str,
        encoding: str | None = None,
        decoded: str | None = None,
    ) -> None:
        """``actual`` is the checksum of the bytes as sent; when they came with a
        ``Content-Encoding``, ``decoded`` is that of the body once it was undone."""
        self.expected = expected
        self.actual = actual
        reason = f"sha256 is {actual}, expected {expected}"
        if encoding:
            reason += (
                f" (of the bytes as sent with Content-Encoding {shown(encoding)};"
                f" once that is undone, {decoded})"
            )
        super().__init__(url, reason)
        self.args = (url, expected, actual, encoding, decoded)


class IndexFormatError(CrawlerError):
    """A document fetched from the mirror does not have the expected shape."""

    exit_code = ExitCode.MIRROR
    headline = "mirror unusable: "

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(url, reason)

    def __str__(self) -> str:
        return f"bad document at {self.url}: {self.reason}"


class UnsupportedVersionError(IndexFormatError):
    """An index uses a Database version this tool does not read."""

    def __init__(self, url: str, version: object) -> None:
        self.version = version
        # 8 reads as 8 whether a number or a string: say so when it is a number.
        what = "" if isinstance(version, str) else "a number, not a string; "
        super().__init__(
            url, f"unsupported database version {version!r} ({what}supported: '6', '7', '8', '9')"
        )
        self.args = (url, version)


class WorkerError(CrawlerError):
    """A decoding process died (killed, out of memory) while an index was being decoded in
    its pool, whichever index killed it (see :mod:`crawler.decode.pool`): the next run reads
    the index again."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(url)

    def __str__(self) -> str:
        return (
            f"a decoding process died while {self.url} was being decoded (out of memory, "
            "killed, or an index file cut short as it was read); the next run reads it again"
        )


class OutOfMemory(CrawlerError):
    """Decoding an index ran out of memory (a ``MemoryError``, under ``ulimit -v`` say)."""

    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(url)

    def __str__(self) -> str:
        return f"out of memory decoding {self.url}"


class PoolError(CrawlerError):
    """The decoding processes cannot be started (a thread or a process could not be had)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)

    def __str__(self) -> str:
        return f"cannot start the decoding processes: {self.reason}"


def out_of_memory(err: BaseException) -> bool:
    """Whether an exception says memory ran out: a ``MemoryError``, or an ``OSError`` of
    ``ENOMEM`` (a failed ``mmap`` under an address-space limit)."""
    return isinstance(err, MemoryError) or (isinstance(err, OSError) and err.errno == errno.ENOMEM)


class MemoryExhausted(CrawlerError):
    """A command ran out of memory (a ``MemoryError``, or a mapping refused for ``ENOMEM``:
    under ``ulimit -v``, say), outside the sync's decoding, whose sources fail alone
    (:class:`OutOfMemory`). ``doing`` says what it was doing, ``hint`` how much it needs."""

    exit_code = ExitCode.OUT_OF_MEMORY

    def __init__(self, doing: str, hint: str = "") -> None:
        self.doing = doing
        self.hint = hint
        super().__init__(doing, hint)

    def __str__(self) -> str:
        hint = f" ({self.hint})" if self.hint else ""
        return f"out of memory: {self.doing}{hint}"


class BranchError(CrawlerError):
    """One branch failed; its previous output is left as it was."""

    def __init__(self, branch: str, reason: str) -> None:
        self.branch = branch
        self.reason = reason
        super().__init__(branch, reason)

    def __str__(self) -> str:
        return f"branch {self.branch} failed: {self.reason}"


class PublishRefused(CrawlerError):
    """The publish gate said no: a branch's output would lose too many specs (reported as the
    branch's status ``refused``, not as a failure)."""


class ChangesInputError(CrawlerError):
    """The ``index.json`` a publish replaces, read to list the changes
    (:func:`~crawler.build.changes.load_published`), does not have the shape of one."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)

    def __str__(self) -> str:
        return f"cannot compare indexes: the previous index is not a branch index: {self.reason}"


class OutputError(CrawlerError):
    """The output directory cannot be written, or what the crawler keeps there cannot be looked
    into or read back (``doing`` says which)."""

    def __init__(self, path: str, reason: str, doing: str = "write") -> None:
        self.path = path
        self.reason = reason
        self.doing = doing  # what could not be done: write, look into
        super().__init__(path, reason, doing)

    def __str__(self) -> str:
        return f"cannot {self.doing} {self.path}: {self.reason}"
