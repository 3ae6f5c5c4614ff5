"""The local transport: a mirror's files in a folder of this machine (``file://``), read in
place, never copied. A local file does not fail transiently: nothing here is retried."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

from ..errors import FetchError, NotFoundError
from ..files import open_regular
from ..urls import file_path
from .transport import MAX_INDEX, Announced, Fetched, Probed, Progress, check_size, file_identity

#: How much of a local index is hashed at a time.
_READ_BATCH = 2 << 20


def local_path(location: str) -> Path:
    """The filesystem path of a ``file://`` location."""
    return Path(file_path(location))


def hash_file(location: str, path: Path, limit: int) -> tuple[int, str, tuple[int, ...]]:
    """Size, SHA-256 and identity (see :attr:`Fetched.identity`, taken before reading) of a
    local file (runs in a thread; hashlib releases the GIL); one larger than ``limit`` bytes
    fails."""
    digest = hashlib.sha256()
    size = 0
    try:
        with open(_open_local(location, path), "rb") as src:
            found = os.fstat(src.fileno())
            check_size(location, found.st_size, limit, MAX_INDEX, "on disk")
            while chunk := src.read(_READ_BATCH):  # a file may grow as it is read
                digest.update(chunk)
                size += len(chunk)
                check_size(location, size, limit, MAX_INDEX, "read")
    except OSError as err:
        raise FetchError(location, err.strerror or str(err)) from None
    return size, digest.hexdigest(), file_identity(found)


class LocalFolder:
    """The :class:`~crawler.mirror.transport.Transport` of ``file://`` locations."""

    #: How an index is hashed (:func:`hash_file`, in a thread). A hook: a test wraps it to
    #: change a file just after it was hashed, as a writer on the mirror's host may.
    hash_file = staticmethod(hash_file)

    async def exists(self, location: str) -> bool:
        """Whether the file is there: a look at it."""
        return local_path(location).is_file()

    confirmed = exists

    async def present(self, location: str, seconds: float) -> bool | None:
        return local_path(location).is_file()  # at once: ``seconds`` is not needed

    async def read(self, location: str, limit: int, what: str) -> bytes:
        """The whole file, which must be a regular one of at most ``limit`` bytes."""
        data = await asyncio.to_thread(_read_local, location, local_path(location), limit)
        check_size(location, len(data), limit, what, "read")
        return data

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
        """The file itself, hashed in place: ``dest`` is not written, and there is no ETag,
        progress nor size to announce (it is complete from the start) nor encoding to ask
        for."""
        path = local_path(location)
        size, digest, identity = await asyncio.to_thread(self.hash_file, location, path, limit)
        return Fetched(location, path, size, digest, 1, 0.0, identity=identity)

    async def probe(self, location: str, limit: int, *, etag: str | None) -> Probed:
        """The file hashed in place, as a download does (a local file has no validator)."""
        path = local_path(location)
        size, digest, _ = await asyncio.to_thread(self.hash_file, location, path, limit)
        return Probed(location, False, size, None, digest)

    async def listdir(self, location: str) -> list[str] | None:
        """The names in a local folder, sorted; none for a folder that is not there (or is no
        folder)."""
        return await asyncio.to_thread(_list_folder, location, local_path(location))


def _list_folder(location: str, path: Path) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as err:  # not searchable: the folder is there, but cannot be read
        raise FetchError(location, err.strerror or str(err)) from None


def _read_local(location: str, path: Path, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of a local mirror file (see :func:`_open_local`), opened, read
    and closed in one thread: a read cancelled meanwhile (its ref's other reads failed) must
    not leave its descriptor open, as one opened here and read on the loop would."""
    fd = _open_local(location, path)
    try:
        with open(fd, "rb") as src:  # closes fd
            return src.read(limit + 1)
    except OSError as err:
        raise FetchError(location, err.strerror or str(err)) from None


def _open_local(location: str, path: Path) -> int:
    """A descriptor of a local mirror file, which must be a regular file: a folder is no file
    (``NotFoundError``, as a 404), and a named pipe, a device or a socket fails the read. A
    pipe is never opened for reading as such: that waits, for ever, for a writer."""
    try:
        return open_regular(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise NotFoundError(location) from None
    except OSError as err:
        raise FetchError(location, err.strerror or str(err)) from None
