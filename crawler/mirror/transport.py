"""What a transport is: the few operations the :class:`~crawler.mirror.fetch.Fetcher` asks of
one (HTTP in :mod:`.http`, a local folder in :mod:`.local`, S3 in :mod:`.s3`), the
:class:`Fetched` result of a download, and the size check each applies to a body."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..errors import FetchError, SourceChanged

#: Told how many bytes of a download are on disk (0 when an attempt starts over).
Progress = Callable[[int], None]
#: Told the size of a download's body as its answer announces it (``Content-Length``), before
#: the body comes; not told when the answer announces none, or the size of an encoded body.
Announced = Callable[[int], None]
#: What the limit on an index is called in an error: the setting that sets it.
MAX_INDEX = "max_index_mb"


@dataclass(frozen=True)
class Fetched:
    """A downloaded (or local) index file and what was learnt fetching it."""

    location: str
    path: Path | None  # None when the server answered 304 Not Modified
    size: int
    sha256: str | None
    attempts: int
    seconds: float
    etag: str | None = None
    #: The ``Content-Encoding`` the body was sent with (undone, unless downloaded ``stored``),
    #: if any.
    encoding: str | None = None
    #: A local file is used in place: device, inode, size, mtime and ctime when it was hashed
    #: (ctime too: a tool may write a file and set its mtime back, never its ctime).
    identity: tuple[int, ...] | None = None

    @property
    def not_modified(self) -> bool:
        """True when a conditional request said the cached copy is current."""
        return self.path is None

    def check_unchanged(self) -> None:
        """Raise :class:`SourceChanged` when a local file is no longer the one that was hashed
        (replaced, or written to): what was read from it may not be the bytes of ``sha256``."""
        if self.identity is None or self.path is None:
            return  # a download is the crawler's own file
        try:
            now = file_identity(os.stat(self.path))
        except OSError:
            now = None
        if now != self.identity:
            raise SourceChanged(self.location, "changed while it was being read")


@dataclass(frozen=True)
class Probed:
    """What the request a download would start with says of an index, its body not read
    (``crawler sync --dry-run``): not modified since ``etag``, or its announced size and ETag
    (for a local file, which is hashed in place: its size and SHA-256)."""

    location: str
    not_modified: bool
    size: int | None
    etag: str | None
    sha256: str | None = None


def file_identity(found: os.stat_result) -> tuple[int, ...]:
    """A file's :attr:`Fetched.identity`."""
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


class Transport(Protocol):
    """One way of reaching a mirror's files. Each applies what it needs of the fetcher's
    policy: HTTP retries transient failures; a local file does not fail transiently."""

    async def confirmed(self, location: str) -> bool:
        """Whether the file is certainly there (see :meth:`Fetcher.confirmed`)."""
        ...

    async def exists(self, location: str) -> bool:
        """Whether the file is there, retried (see :meth:`Fetcher.exists`)."""
        ...

    async def present(self, location: str, seconds: float) -> bool | None:
        """One quick look for the file (see :meth:`Fetcher.present`)."""
        ...

    async def read(self, location: str, limit: int, what: str) -> bytes:
        """The whole body of a small file of at most ``limit`` bytes (``what`` names it)."""
        ...

    async def download(
        self,
        location: str,
        dest: Path,
        limit: int,
        *,
        etag: str | None,
        progress: Progress | None,
        stored: bool,
        announced: Announced | None = None,
    ) -> Fetched:
        """An index of at most ``limit`` bytes, hashed (see :meth:`Fetcher.download`); its
        ``seconds`` are the fetcher's to fill in."""
        ...

    async def probe(self, location: str, limit: int, *, etag: str | None) -> Probed:
        """The request :meth:`download` starts with (conditional with ``etag``), its body not
        read (see :meth:`Fetcher.probe`)."""
        ...

    async def listdir(self, location: str) -> list[str] | None:
        """The names of the entries directly under this folder URL; None when this transport
        cannot list (HTTP). A folder that is not there lists nothing."""
        ...


def check_size(
    location: str, size: int | None, limit: int, what: str, how: str = "announced"
) -> None:
    """Fail a body of ``size`` bytes beyond ``limit``: as ``announced`` (Content-Length), ``on
    disk`` (a local file's size) or ``read`` so far. Not retried: the server would send the same
    again."""
    if size is not None and size > limit:
        told = f"at least {size:,} bytes" if how == "read" else f"{size:,} bytes {how}"
        raise FetchError(location, f"larger than {what} ({_binary(limit)}): {told}")


def _binary(size: int) -> str:
    """A limit in MiB or KiB as the configuration and README give it."""
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
