"""The folders the crawler keeps its own files in (``<output>/.crawler/`` and its folders, or the
folder ``cache_dir`` names), reached without ever following a symbolic link; and the record of
what it wrote in each, which alone a clean-up deletes.

Anyone who may write in the output may put a link there. Followed, it carried the run's writes,
renames and deletes into the folder it leads to: a linked ``cache/`` got the summaries, and its
prune deleted the files there named like them; a linked ``state/`` or ``reports/`` got files
named after the mirror's refs. So a :class:`KeptFolder` is a trusted root (the output folder the
run locked, reached through its descriptor; a folder the config names, the operator's word) and
the parts below it, each opened relative to the one above with ``O_NOFOLLOW``; a file in it is
read, replaced or deleted relative to its descriptor, never through a link at its name. A link
anywhere there is an ``OSError`` (``ELOOP``) that names it and says what to do (:data:`LINKED`);
:func:`~crawler.output.workdir.check_work_folders` refuses the run on one (exit 4) before any
work.

Each folder also holds ``.written``: the names of the files the crawler wrote there, one a line,
appended before each file (and its temporary file) is made. :meth:`KeptFolder.prune` deletes
only names found there: a file the crawler did not record writing, however it is named, is
never deleted (those of a version that kept no record stay: delete them by hand once). The
record is only read for names to delete in its own folder, each a single safe name
(:func:`~crawler.files.is_safe_name`) or a temporary file's: a record written by someone else
can make a prune delete nothing but files of that folder named as the crawler names its own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

from ..errors import OutputError
from ..files import is_safe_name, open_regular, read_regular
from .atomic import FOLDER_FLAGS, replace_at, temp_name
from .folder import held_folder

#: Why a symbolic link where the crawler keeps a folder or a file is refused, and what to do.
LINKED = (
    "a symbolic link, which the crawler never reads, writes or deletes through (anyone who may "
    "write there may have put it): remove it; to keep the cache on another disk, name its "
    "folder with cache_dir in the config"
)

_T = TypeVar("_T")

#: What opening a folder that is not there raises (a file in its place: removed by
#: :func:`~crawler.output.workdir.check_work_folders`).
MISSING = (FileNotFoundError, NotADirectoryError)

#: The record of what the crawler wrote in a folder.
WRITTEN = ".written"
#: The longest line of the record looked at: longer ones name no file the crawler writes.
_MAX_LINE = 1024
#: A temporary file of :func:`~crawler.output.atomic.temp_name`.
_TEMPORARY = re.compile(r"\.[A-Za-z0-9][A-Za-z0-9._+-]{0,199}\.[0-9a-f]{8}\.tmp")


def is_temporary(name: str) -> bool:
    """Whether ``name`` is one a temporary file of :func:`replace_at` is given."""
    return _TEMPORARY.fullmatch(name) is not None


class Pruned(NamedTuple):
    """What :meth:`KeptFolder.prune` deleted, and what it could not do (for the log)."""

    removed: list[str]
    problems: list[str]


def failed(err: OSError, path: Path) -> OutputError:
    """The :class:`~crawler.errors.OutputError` of ``err``, naming the path it names (else
    ``path``)."""
    return OutputError(str(err.filename or path), err.strerror or str(err))


def linked(path: Path) -> OSError:
    """The error for a symbolic link at ``path``."""
    return OSError(errno.ELOOP, LINKED, str(path))


@dataclass(frozen=True)
class KeptFolder:
    """``root`` (trusted: opened as it resolves) and, below it, ``parts``, never followed."""

    root: Path
    parts: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        """The folder's path, for messages."""
        return self.root.joinpath(*self.parts)

    def child(self, name: str) -> KeptFolder:
        """The folder ``name`` in this one."""
        return KeptFolder(self.root, (*self.parts, name))

    def open(self, *, make: bool = False) -> int:
        """A descriptor of the folder, its parts below the root made if missing (``make``);
        raises ``OSError`` naming the part that failed (``ELOOP``: :data:`LINKED`), and
        :class:`~crawler.errors.OutputError` when the root is an output whose path no longer
        leads to the folder this run locked."""
        held = held_folder(self.root)
        if held is not None and held.path == Path(os.path.abspath(self.root)):
            held.check()
            return open_below(held.fd, self.root, self.parts, make=make)
        fd = _at(lambda: os.open(self.root, FOLDER_FLAGS), self.root)
        try:
            return open_below(fd, self.root, self.parts, make=make)
        finally:
            os.close(fd)

    def names(self) -> list[str]:
        """The names in the folder, sorted ([] when it is missing)."""
        try:
            fd = self.open()
        except MISSING:
            return []
        try:
            return sorted(_at(lambda: os.listdir(fd), self.path))
        finally:
            os.close(fd)

    def refuse_links(self) -> None:
        """Raise :func:`linked` for a symbolic link in the folder (nothing when it is missing)."""
        try:
            fd = self.open()
        except MISSING:
            return
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        raise linked(self.path / entry.name)
        finally:
            os.close(fd)

    def is_file(self, name: str) -> bool:
        """Whether ``name`` is a regular file in the folder (not a link to one)."""
        try:
            fd = self.open()
        except MISSING:
            return False
        try:
            return stat.S_ISREG(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except FileNotFoundError:
            return False
        finally:
            os.close(fd)

    def read(self, name: str, limit: int | None = None) -> bytes:
        """The bytes of the regular file ``name`` (see :func:`~crawler.files.read_regular`)."""
        fd = self.open()
        try:
            return _at(lambda: read_regular(name, limit, follow=False, dir_fd=fd), self.path / name)
        finally:
            os.close(fd)

    def write(
        self, name: str, data: bytes | bytearray, *, durable: bool = True, record: bool = False
    ) -> None:
        """Replace ``name`` with ``data`` whole (the folder made if need be), its temporary
        file recorded first (and ``name`` too, with ``record``: a file :meth:`prune` may
        delete); :class:`~crawler.errors.OutputError` if it cannot be, a link at ``name``
        among the reasons."""
        path = self.path / name
        try:
            fd = self.open(make=True)
            try:
                if _is_link(fd, name):
                    raise linked(path)
                tmp = temp_name(name)
                self._record(fd, [tmp, name] if record else [tmp])
                _at(lambda: replace_at(fd, name, data, durable=durable, tmp=tmp), path)
            finally:
                os.close(fd)
        except OSError as err:
            raise failed(err, path) from None

    def remove(self, name: str) -> None:
        """Delete the file ``name`` (not a link: :func:`linked`); nothing if it is gone."""
        fd = self.open()
        try:
            if _is_link(fd, name):
                raise linked(self.path / name)
            with contextlib.suppress(FileNotFoundError):
                _at(lambda: os.unlink(name, dir_fd=fd), self.path / name)
        finally:
            os.close(fd)

    def prune(self, keep: Callable[[str], bool]) -> Pruned:
        """Delete the files the crawler recorded writing here but for those ``keep`` keeps,
        and record the rest anew: the record, however long it grew, is compacted to the names
        it lists of files still there. A record that cannot be read is started anew, empty,
        with a warning: the files it named are then unrecorded, and never deleted."""
        pruned = Pruned([], [])
        try:
            present = set(self.names())
            recorded = self._recorded(present)
        except MISSING:
            return pruned
        except OSError as err:
            pruned.problems.append(
                f"cannot read {self.path / WRITTEN}: {err.strerror or err}; recorded anew, "
                "empty (the files it named are left alone)"
            )
            recorded = []
            with contextlib.suppress(OSError):  # not a link (refused): the writing says why
                self.remove(WRITTEN)  # a FIFO, say, that the writing would append to first
        kept = set()
        for name in recorded:
            if keep(name):
                kept.add(name)
                continue
            try:
                self.remove(name)
                pruned.removed.append(name)
            except OSError as err:
                pruned.problems.append(f"cannot remove {err.filename}: {err.strerror or err}")
                kept.add(name)
        try:
            self.write(WRITTEN, "".join(f"{n}\n" for n in sorted(kept)).encode())
        except OutputError as err:
            pruned.problems.append(str(err))
        return pruned

    def _recorded(self, present: set[str]) -> list[str]:
        """The names the record lists of files in ``present``, once each, in order; read a
        line at a time, so that memory is bounded by the folder's listing, not the record."""
        path = self.path / WRITTEN
        fd = self.open()
        try:
            record = _at(lambda: open_regular(WRITTEN, follow=False, dir_fd=fd), path)
        finally:
            os.close(fd)
        found: dict[str, None] = {}
        with open(record, "rb") as file:
            while line := _at(lambda: file.readline(_MAX_LINE), path):
                if len(line) == _MAX_LINE and not line.endswith(b"\n"):  # no name: skip it
                    while (rest := file.readline(_MAX_LINE)) and not rest.endswith(b"\n"):
                        pass
                    continue
                name = line.rstrip(b"\n").decode("utf-8", "replace")
                ours = name != WRITTEN and (is_safe_name(name) or is_temporary(name))
                if ours and name in present:  # else no file the crawler writes: never deleted
                    found[name] = None
        return list(found)

    def _record(self, fd: int, names: list[str]) -> None:
        """Append ``names`` to the record of what was written in the folder ``fd`` (this
        one), before they are written: a run killed after the file is made leaves it named."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        path = self.path / WRITTEN
        out = _at(lambda: os.open(WRITTEN, flags | os.O_CLOEXEC, 0o644, dir_fd=fd), path)
        try:
            if not stat.S_ISREG(os.fstat(out).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(path))
            os.write(out, "".join(f"{n}\n" for n in names).encode())
        finally:
            os.close(out)


def open_below(fd: int, root: Path, parts: tuple[str, ...], *, make: bool = False) -> int:
    """A new descriptor of the folder ``parts`` below the folder ``fd`` (at ``root``, for
    messages), each part opened without following a link (made if missing, ``make``)."""
    fd = os.dup(fd)
    path = root
    try:
        for part in parts:
            path = path / part
            below = _open_part(fd, part, path, make)
            os.close(fd)
            fd = below
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_part(fd: int, part: str, path: Path, make: bool) -> int:
    """The folder ``part`` in the folder ``fd`` (made if missing, ``make``), not a link."""
    flags = FOLDER_FLAGS | os.O_NOFOLLOW
    try:
        return _at(lambda: os.open(part, flags, dir_fd=fd), path)
    except FileNotFoundError:
        if not make:
            raise
    with contextlib.suppress(FileExistsError):
        _at(lambda: os.mkdir(part, dir_fd=fd), path)
    return _at(lambda: os.open(part, flags, dir_fd=fd), path)


def _is_link(fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _at(call: Callable[[], _T], path: Path) -> _T:
    """``call()``, its ``OSError`` naming ``path`` (a link there: :func:`linked`)."""
    try:
        return call()
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
            raise linked(path) from None
        raise OSError(err.errno, err.strerror or str(err), str(path)) from None
