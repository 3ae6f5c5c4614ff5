"""Atomic and durable file operations: a file replaced whole, a tree flushed, two folders swapped.

One piece: the system calls (``openat``-style descriptors, ``fsync``, ``syncfs``,
``renameat2``) that make a publish all or nothing, kept apart from what is published. A file in
an output folder this process holds the lock of is written relative to that folder's
descriptor (:func:`crawler.output.folder.held_folder`), and not at all once the output's path
leads elsewhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from ..errors import OutputError
from .folder import held_folder

_RENAME_EXCHANGE = 2

try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - platforms without a C library handle
    _LIBC = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | bytearray, *, make_folder: bool = True) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, whole.

    ``make_folder=False`` fails where the folder is missing rather than making it (a file the
    user names: a typo must not go unnoticed).

    A file in an output folder this process holds the lock of
    (:func:`crawler.output.folder.held_folder`) is written relative to that folder's descriptor, and
    not at all once the output's path leads elsewhere: what the lock protects is what is written.
    """
    try:
        parent = _open_parent(path, make_folder)
        try:
            replace_at(parent, path.name, data)
        finally:
            os.close(parent)
    except OSError as err:
        raise OutputError(str(path), err.strerror or str(err)) from None


FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _open_parent(path: Path, make_folder: bool) -> int:
    """A descriptor of ``path``'s folder: reached from the held output folder when ``path``
    lies in one (:class:`~crawler.errors.OutputError` if that was replaced), else by path."""
    held = held_folder(path)
    if held is None:
        if make_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path.parent, FOLDER_FLAGS)
    held.check()
    relative = os.path.relpath(os.path.abspath(path.parent), held.path)
    if make_folder and relative != ".":
        makedirs_at(held.fd, relative)
    return os.open(relative, FOLDER_FLAGS, dir_fd=held.fd)


def makedirs_at(fd: int, relative: str) -> None:
    """``mkdir -p relative``, relative to the folder ``fd``."""
    try:
        os.mkdir(relative, dir_fd=fd)
    except FileExistsError:
        pass
    except FileNotFoundError:
        parent = os.path.dirname(relative)
        if not parent:
            raise
        makedirs_at(fd, parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(relative, dir_fd=fd)


def temp_name(name: str) -> str:
    """A new name for the temporary file that becomes ``name``: ``.<name>.<8 hex>.tmp``."""
    return f".{name}.{secrets.token_hex(4)}.tmp"


def replace_at(
    folder: int,
    name: str,
    data: bytes | bytearray,
    *,
    durable: bool = True,
    tmp: str | None = None,
) -> None:
    """Write ``data`` to a temporary file in ``folder`` (named ``tmp``, else by
    :func:`temp_name`) and rename it to ``name`` there: a link at ``name`` is replaced, never
    written through. ``durable=False`` skips the fsyncs, for caches whose loss or truncation
    is detected and costs only a re-download."""
    tmp = tmp or temp_name(name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(fd, 0o644)  # not the umask's: node_exporter & co. need to read it
            out.write(data)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise
    if durable:
        os.fsync(folder)


def _raise(err: OSError) -> None:
    raise err


def syncfs(path: Path) -> None:
    """Flush every file written under ``path``'s filesystem in one call."""
    fd = os.open(path, os.O_RDONLY)
    try:
        call = getattr(_LIBC, "syncfs", None) if _LIBC is not None else None
        if call is None or call(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


#: A staged branch of up to this many files is flushed file by file; one with more (pages: one
#: per package) with a single ``syncfs(2)``.
FSYNC_EACH_UP_TO = 64


def flush_tree(path: Path, *, flush_all: Callable[[Path], None] = syncfs) -> None:
    """Make every file and folder under ``path`` durable.

    A few files (``index.json`` and its companions) are flushed one by one: ``syncfs`` would
    also write out everything else the filesystem holds unwritten, such as the summary cache
    or another program's files, and wait for it. Thousands of pages are flushed with one
    ``flush_all(path)`` (:func:`syncfs`), rather than a journal commit each.
    """
    files: list[str] = []
    folders: list[str] = []
    for folder, _, names in os.walk(path, onerror=_raise):
        folders.append(folder)
        files += [os.path.join(folder, name) for name in names]
        if len(files) > FSYNC_EACH_UP_TO:
            flush_all(path)
            return
    for name in files:
        # Only regular files: the crawler writes nothing else, and opening a named pipe put
        # there by another program would wait for a writer (O_NONBLOCK), a link leads out.
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as err:
            if err.errno == errno.ELOOP:  # a symbolic link
                continue
            raise
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.fsync(fd)
        finally:
            os.close(fd)
    for folder in folders:
        _fsync_dir(Path(folder))


def exchange(a_folder: int, a: str, b_folder: int, b: str) -> bool:
    """Swap ``a`` in the folder ``a_folder`` and ``b`` in ``b_folder`` atomically; False when
    the platform or filesystem cannot."""
    renameat2 = getattr(_LIBC, "renameat2", None) if _LIBC is not None else None
    if renameat2 is None:
        return False
    if renameat2(a_folder, os.fsencode(a), b_folder, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), a)
