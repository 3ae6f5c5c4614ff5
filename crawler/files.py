"""Files: open what must be a regular file, without ever waiting on anything else; and name a
folder as it was given (:func:`as_given`).

Opening a named pipe to read waits for a writer, for ever; a device never ends. Where the
crawler expects a file it wrote (a published ``index.json``, a page, its state, a cached summary,
the metrics file) or a mirror's index, one of those would hang the run with its lock held, and
signals unheard while the event loop is blocked. So files are opened without waiting and
refused unless they are regular files (or links to one).
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import stat
from pathlib import Path
from typing import Protocol

NOT_REGULAR = "not a regular file (a named pipe, a device or a socket)"

#: A name that becomes one path component: no separators, no leading dot, no control characters.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")


def is_safe_name(name: str) -> bool:
    """True when ``name`` can be used as a single file or folder name under the output (a
    branch, a package's page): both the mirror's refs and an index's package names must be."""
    return SAFE_NAME.fullmatch(name) is not None


#: What the output folder keeps at its top for itself, beside its branch folders, and what for:
#: the list of branches (:mod:`crawler.output.site.listing`) and the work folder
#: (:mod:`crawler.output.workdir`). No branch may take one of these names, in any case: on a
#: case-insensitive filesystem ``INDEX.HTML/`` is ``index.html``.
OUTPUT_OWN = {"index.html": "its list of branches", ".crawler": "its work folder"}


def branch_name_problem(name: str, what: str = "branch") -> str | None:
    """Why ``name`` cannot be a branch's folder under the output (``what`` says what names it:
    a ref, a view), or None: a safe name (:func:`is_safe_name`), none the output keeps for
    itself (:data:`OUTPUT_OWN`)."""
    if not is_safe_name(name):
        return f"{what} name {name!r} is not a safe folder name"
    kept = OUTPUT_OWN.get(name.casefold())
    if kept is not None:
        return f"{what} name {name!r} is refused: the output folder keeps it for {kept}"
    return None


def open_regular(path: Path | str, *, follow: bool = True, dir_fd: int | None = None) -> int:
    """A descriptor of ``path`` (relative to the folder ``dir_fd``, if given) opened to read;
    ``IsADirectoryError`` for a folder and ``OSError`` for anything else that is not a regular
    file (a symbolic link too, not ``follow``)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, NOT_REGULAR, str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(
    path: Path | str, limit: int | None = None, *, follow: bool = True, dir_fd: int | None = None
) -> bytes:
    """The bytes of ``path``, a regular file (see :func:`open_regular`); with ``limit``, an
    ``OSError`` (``EFBIG``) for one of more bytes than that, also if it grows while read."""
    with open(open_regular(path, follow=follow, dir_fd=dir_fd), "rb") as file:
        if limit is None:
            return file.read()
        if os.fstat(file.fileno()).st_size > limit:
            raise OSError(errno.EFBIG, too_large(limit), str(path))
        data = file.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, too_large(limit), str(path))
    return data


def map_regular(path: Path | str) -> mmap.mmap | bytes:
    """The bytes of ``path``, a regular file (see :func:`open_regular`), memory-mapped: its
    pages are the page cache's, read as they are touched, and given back first when memory is
    short, rather than a copy in the process's own memory. A published document is replaced,
    never rewritten in place (see :mod:`crawler.consume.load`), so its mapping stays whole."""
    with open(open_regular(path), "rb") as file:
        return map_descriptor(file.fileno())


def map_descriptor(fd: int) -> mmap.mmap | bytes:
    """The whole file ``fd`` mapped to read (an empty one, which cannot be, as no bytes). A
    mapping refused for want of memory (``ENOMEM``, under ``ulimit -v``) is a ``MemoryError``,
    as a copy that could not be had would be."""
    try:
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    except ValueError:  # an empty file cannot be mapped
        return b""
    except OSError as err:
        if err.errno == errno.ENOMEM:
            raise MemoryError(f"cannot map a file of {os.fstat(fd).st_size:,} bytes") from err
        raise


def release(data: mmap.mmap | bytes) -> None:
    """Let the pages of a mapped file go from the process's memory: they stay in the page
    cache, and a page touched again is mapped again, without being read from the disk. A pass
    over a document that does so as it goes holds a few of its pages, not the whole file (in
    its RSS). Nothing for bytes, or where the system has no ``MADV_DONTNEED``."""
    if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        data.madvise(mmap.MADV_DONTNEED)


def too_large(limit: int) -> str:
    """Why a file of more than ``limit`` bytes is refused."""
    return f"larger than {_size(limit)} (the most it may hold)"


def _size(count: int) -> str:
    if count % (1 << 20) == 0:
        return f"{count >> 20} MiB"
    return f"{count:,} bytes"


def as_given(path: Path) -> Path:
    """An absolute ``path`` with what leads up to its last ``..`` resolved (a ``..`` after a
    link goes where the filesystem takes it, as ``ls`` does) and the rest as written: a link
    there is kept, not replaced by its target."""
    parts = path.parts
    if ".." not in parts:
        return path
    last = len(parts) - 1 - parts[::-1].index("..")
    return Path(*parts[: last + 1]).resolve().joinpath(*parts[last + 1 :])


class Digest(Protocol):
    """A running hash (what ``hashlib.sha256()`` returns, which has no public type)."""

    def update(self, data: bytes | bytearray | memoryview, /) -> None: ...

    def hexdigest(self) -> str: ...
