"""Write: serialise a branch's documents and publish them atomically, all or nothing.

A branch is built in a staging folder, ``<output>/.crawler/staging/new-<branch>.<random>``,
flushed to disk with one ``syncfs`` call, and only then put in place of ``<output>/<branch>``:

* on Linux the two folders are swapped with ``renameat2(RENAME_EXCHANGE)``, so a reader (or a
  crash) sees either the old branch or the new one, never a mix or nothing;
* elsewhere, or on a filesystem without that call, the old folder is renamed aside and the new one
  renamed in; a crash between the two renames leaves the old copy under ``.crawler/staging``,
  and the next run puts it back (:func:`recover`).

The old copy is removed afterwards. Single files (run reports) are written to a temporary file in
the same folder, flushed, ``fsync``-ed and renamed over the target.

Inside an output folder whose lock this process holds, staging, the swap and single files are
done relative to the folder's descriptor (:class:`crawler.output.lock.OutputFolder`), and refused
once its path leads elsewhere: a run never writes through a link put in its output's place.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ..documents import Companion, PackageSummary
from ..errors import OutputError
from ..files import read_regular
from .lock import OutputFolder, held_folder

log = logging.getLogger("crawler")

STATE_DIR = ".crawler"
_RENAME_EXCHANGE = 2

try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:  # pragma: no cover - platforms without a C library handle
    _LIBC = None


_ENCODER = msgspec.json.Encoder(order="sorted")


def encode_json(document: Any) -> bytearray:
    """Deterministic JSON: keys sorted, compact, UTF-8, a final newline.

    Encoded into one buffer and the newline appended in place: a develop index is tens of MB,
    and ``encode(...) + b"\\n"`` would briefly hold it twice.
    """
    buffer = bytearray()
    _ENCODER.encode_into(document, buffer)
    buffer += b"\n"
    return buffer


def render_page(package: str, ref: str, summary: PackageSummary) -> str:
    """The reference site's ``_cache/<ref>/<package>/specs.md``, byte for byte.

    The site serialises with Python's ``json.dumps(..., sort_keys=True)`` (separators ``", "``
    and ``": "``, non-ASCII escaped), so the same call is used here.
    """
    meta = json.dumps(msgspec.to_builtins(summary.meta), sort_keys=True)
    details = json.dumps(msgspec.to_builtins(summary.spec_details), sort_keys=True)
    return (
        f'---\ntitle: "{package}"\nlayout: cache\ncategories: [package, {ref}]\n'
        f"meta: {meta}\nspec_details: {details}\n---"
    )


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path,
    data: bytes | bytearray,
    *,
    durable: bool = True,
    mode: int = 0o644,
    make_folder: bool = True,
) -> None:
    """Replace ``path`` with ``data`` so that readers see the old or the new file, whole.

    ``durable=False`` skips the fsyncs, for caches whose loss or truncation is detected and
    costs only a re-download. ``make_folder=False`` fails where the folder is missing rather
    than making it (a file the user names: a typo must not go unnoticed).

    A file in an output folder this process holds the lock of
    (:func:`crawler.output.lock.held_folder`) is written relative to that folder's descriptor, and
    not at all once the output's path leads elsewhere: what the lock protects is what is written.
    """
    try:
        parent = _open_parent(path, make_folder)
        try:
            _replace_at(parent, path.name, data, durable, mode)
        finally:
            os.close(parent)
    except OSError as err:
        raise OutputError(str(path), err.strerror or str(err)) from None


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def _open_parent(path: Path, make_folder: bool) -> int:
    """A descriptor of ``path``'s folder: reached from the held output folder when ``path``
    lies in one (:class:`~crawler.errors.OutputError` if that was replaced), else by path."""
    held = held_folder(path)
    if held is None:
        if make_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path.parent, _FOLDER_FLAGS)
    held.check()
    relative = os.path.relpath(os.path.abspath(path.parent), held.path)
    if make_folder and relative != ".":
        _makedirs_at(held.fd, relative)
    return os.open(relative, _FOLDER_FLAGS, dir_fd=held.fd)


def _makedirs_at(fd: int, relative: str) -> None:
    """``mkdir -p relative``, relative to the folder ``fd``."""
    try:
        os.mkdir(relative, dir_fd=fd)
    except FileExistsError:
        pass
    except FileNotFoundError:
        parent = os.path.dirname(relative)
        if not parent:
            raise
        _makedirs_at(fd, parent)
        with contextlib.suppress(FileExistsError):
            os.mkdir(relative, dir_fd=fd)


def _replace_at(folder: int, name: str, data: bytes | bytearray, durable: bool, mode: int) -> None:
    """Write ``data`` to a temporary file in ``folder`` and rename it to ``name`` there. The
    temporary name is the one ``mkstemp`` would give (``recover`` removes those left)."""
    tmp = f".{name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(fd, mode)  # not the umask's: node_exporter & co. need to read it
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


#: A staged branch of up to this many files is flushed file by file; one with more (pages: one
#: per package) with a single ``syncfs(2)``.
FSYNC_EACH_UP_TO = 64


def _flush_tree(path: Path) -> None:
    """Make every file and folder under ``path`` durable.

    A few files (``index.json`` and its companions) are flushed one by one: ``syncfs`` would
    also write out everything else the filesystem holds unwritten, such as the summary cache
    or another program's files, and wait for it. Thousands of pages are flushed with one
    ``syncfs``, rather than a journal commit each.
    """
    files: list[str] = []
    folders: list[str] = []
    for folder, _, names in os.walk(path, onerror=_raise):
        folders.append(folder)
        files += [os.path.join(folder, name) for name in names]
        if len(files) > FSYNC_EACH_UP_TO:
            _syncfs(path)
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


def _raise(err: OSError) -> None:
    raise err


def _syncfs(path: Path) -> None:
    """Flush every file written under ``path``'s filesystem in one call."""
    fd = os.open(path, os.O_RDONLY)
    try:
        syncfs = getattr(_LIBC, "syncfs", None) if _LIBC is not None else None
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _exchange(a_folder: int, a: str, b_folder: int, b: str) -> bool:
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


def state_dir(output: Path) -> Path:
    """The tool's own folder under the output (staging, reports, caches)."""
    return output / STATE_DIR


def staging_dir(output: Path) -> Path:
    """Where branches are built before they are swapped in (see :class:`BranchStage`)."""
    return state_dir(output) / "staging"


#: The folders of ``.crawler/`` that runs write into (``cache`` apart: see
#: :func:`check_work_folders`).
_WORK_FOLDERS = ("tmp", "staging", "state", "reports")


def check_work_folders(output: Path) -> list[str]:
    """Make sure branches can be staged and recorded; returns what was done, for the log.

    Something else than a folder where one of :data:`_WORK_FOLDERS` goes (a file, a dangling
    link) is removed: ``.crawler/`` is the crawler's own, and every run would fail on it (or,
    for ``state``, read everything again and warn), night after night. A staging folder on
    another filesystem than the output (a ``.crawler`` mounted or linked elsewhere) is refused,
    before any work: a branch is swapped in by renaming its staged folder, which cannot cross
    filesystems, so every publish would fail after all the downloading and decoding.

    ``.crawler/cache`` may be elsewhere: a link there is kept even when it leads nowhere (a
    volume not mounted yet; every run warns that it cannot use the cache); a file there is
    removed like the others (no run could use the cache, and each would warn about every
    source)."""
    _still_locked(output)
    staging = staging_dir(output)
    done = []
    try:
        for name in (*_WORK_FOLDERS, "cache"):
            folder = state_dir(output) / name
            if name == "cache" and folder.is_symlink():
                continue
            if os.path.lexists(folder) and not folder.is_dir():
                folder.unlink()
                done.append(f"removed {folder}, which was not a folder")
        staging.mkdir(parents=True, exist_ok=True)
        apart = os.stat(staging).st_dev != os.stat(output).st_dev
    except OSError as err:
        raise OutputError(str(err.filename or staging), err.strerror or str(err)) from None
    if apart:
        raise OutputError(str(staging), _apart(output))
    return done


def _still_locked(output: Path) -> None:
    """Refuse to work by path in ``output`` if this process locked it and its path now leads
    elsewhere (see :func:`crawler.output.lock.held_folder`)."""
    held = held_folder(output)
    if held is not None:
        held.check()


def _apart(output: Path) -> str:
    return (
        f"on another filesystem than {output}, and a branch is swapped in by a rename, which "
        f"cannot cross filesystems: keep {STATE_DIR}/ on the output's filesystem "
        f"({STATE_DIR}/cache may be a link to another)"
    )


def recover(output: Path) -> list[str]:
    """Clean up after runs that died: restore a branch left renamed aside, drop staging folders
    and partial downloads. Returns what was done, for the log.

    Called while holding the run lock (:mod:`crawler.output.lock`), so whatever is found belongs to
    a run that is gone, whatever its pid (pids are reused, and are meaningless across hosts).
    """
    _still_locked(output)
    done: list[str] = []
    state = state_dir(output)
    try:
        tmp = state / "tmp"
        for entry in _ours(tmp, _RUN_FOLDER):
            shutil.rmtree(entry, ignore_errors=True)
            done.append(f"removed downloads left by an interrupted run ({entry.name})")
        staging = staging_dir(output)
        for entry in _ours(staging, _STAGED_BRANCH):
            kind, _, rest = entry.name.partition("-")
            target = output / rest.rpartition(".")[0]
            if kind == "old" and target.parent == output and not target.exists():
                os.replace(entry, target)
                done.append(f"restored {target} from an interrupted publish")
            else:
                shutil.rmtree(entry, ignore_errors=True)
                done.append(f"removed {entry.name} left by an interrupted run")
        for folder in ("state", "reports"):  # the cache's are pruned with it
            for entry in _ours(state / folder, _HALF_WRITTEN, folders=False):
                entry.unlink(missing_ok=True)
                done.append(f"removed {folder}/{entry.name} left by an interrupted run")
    except OSError as err:  # naming what could not be listed or moved, not only .crawler
        raise OutputError(str(err.filename or state), err.strerror or str(err)) from None
    return done


#: What runs leave in ``.crawler/tmp`` (a folder per pid) and ``.crawler/staging`` (a branch
#: built or set aside, suffixed with random hex, or with a pid by earlier versions).
_RUN_FOLDER = re.compile(r"[0-9]+")
_STAGED_BRANCH = re.compile(r"(new|old)-.+\.[0-9a-f]+")
#: What :func:`atomic_write` leaves when its run dies before the rename (``mkstemp``'s name).
_HALF_WRITTEN = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


def _ours(folder: Path, name: re.Pattern[str], *, folders: bool = True) -> list[Path]:
    """The folders (or regular files) in ``folder`` named as a run names them (not symbolic
    links): anything else there was put by someone else and is left alone."""
    if not folder.is_dir():
        return []
    return sorted(
        entry
        for entry in folder.iterdir()
        if name.fullmatch(entry.name)
        and (entry.is_dir() if folders else entry.is_file())
        and not entry.is_symlink()
    )


#: The files a published branch folder holds, besides ``pages/<package>/specs.md``.
BRANCH_FILES = frozenset({"index.json", "changes.json", "report.json"})
#: Left by file browsers (macOS Finder) in any folder they show: replaced with the rest.
OS_LITTER = frozenset({".DS_Store"})


def _moved(source: Path, into: Path) -> bool:
    """Whether ``source`` could be renamed to ``into`` (its folder made if need be)."""
    try:
        into.parent.mkdir(parents=True, exist_ok=True)
        os.rename(source, into)
    except OSError:
        return False
    return True


def check_replaceable(target: Path) -> None:
    """Refuse to replace ``target`` (``<output>/<branch>``) unless it is absent or holds only
    what a publish writes: ``index.json``, ``changes.json``, ``report.json`` as files, and
    ``pages/<package>/specs.md``. The output folder may be shared with other data (a home
    folder, the mirror itself): a file the crawler did not write is never deleted.
    """
    try:
        if not target.exists() and not target.is_symlink():
            return
        if target.is_symlink() or not target.is_dir():
            kind = "a symbolic link" if target.is_symlink() else "not a folder"
            raise OutputError(str(target), f"is {kind}, which a publish would replace; move it")
        foreign = foreign_entries(target)
    except OSError as err:  # naming what could not be looked at: pages/ or a package's folder
        reason = err.strerror or str(err)
        raise OutputError(str(err.filename or target), reason, "look into") from None
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise OutputError(
            str(target),
            f"holds {', '.join(foreign[:5])}{more}, which the crawler did not write and a "
            "publish would delete; move them away or choose another output folder",
        )


#: The files a publish writes beside ``index.json``, each a JSON object naming its branch.
COMPANIONS = ("changes.json", "report.json")


def companion_problem(folder: Path, name: str) -> str | None:
    """What is wrong with the companion ``name`` (see :data:`COMPANIONS`) of the published
    branch ``folder``, if it is there: it must be a JSON object whose ``branch`` is the
    folder's name. None when it is sound or absent."""
    path = folder / name
    if not path.exists():
        return None
    try:
        data = read_regular(path)
        # Typed, so that a large changes.json is only scanned: every sync checks them. The
        # scan skips what it does not read without checking its UTF-8: decoding does.
        branch = _COMPANION.decode(data).branch
        data.decode()
    except msgspec.ValidationError:  # valid JSON, not an object
        return f"{name}: not a JSON object"
    except (OSError, msgspec.DecodeError, UnicodeDecodeError) as err:
        return f"{name}: not readable JSON: {err}"
    except RecursionError:
        return f"{name}: not readable JSON: nested too deeply"
    if branch != folder.name:
        return f"{name}: branch is {branch!r} but the folder is {folder.name!r}"
    return None


_COMPANION = msgspec.json.Decoder(Companion)


def foreign_entries(branch: Path, unlisted: Callable[[OSError], None] | None = None) -> list[str]:
    """What in a branch folder a publish did not write (paths relative to it).

    A folder that cannot be listed raises its OSError; with ``unlisted``, that is given the
    error instead and the rest is listed (for :mod:`crawler.ops.verify`, which reports it all).
    """
    foreign: list[str] = []

    def scan(folder: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(folder) as entries:
                return list(entries)
        except OSError as err:
            if unlisted is None:
                raise
            unlisted(err)
            return []

    for entry in scan(str(branch)):
        if entry.name in OS_LITTER:
            continue
        if entry.name in BRANCH_FILES:
            if not entry.is_file(follow_symlinks=False):
                foreign.append(entry.name)
        elif entry.name == "pages" and entry.is_dir(follow_symlinks=False):
            for package in scan(entry.path):
                where = f"pages/{package.name}"
                if package.name in OS_LITTER:
                    continue
                if not package.is_dir(follow_symlinks=False):
                    foreign.append(where)
                    continue
                for file in scan(package.path):
                    page = file.name == "specs.md" and file.is_file(follow_symlinks=False)
                    if not page and file.name not in OS_LITTER:
                        foreign.append(f"{where}/{file.name}")
        else:
            foreign.append(entry.name)
    return sorted(foreign)


class BranchStage:
    """A branch's next output, assembled off to the side and then published as a whole.

    Everything is done relative to descriptors of the output folder (the one whose lock this
    process holds, see :func:`crawler.output.lock.held_folder`, else the folder opened here), of its
    staging folder and of the staged folder: if the output's path is swapped for a link during
    the run, nothing is staged or published through it, and :meth:`publish` refuses.
    """

    def __init__(self, output: Path, branch: str) -> None:
        self.output = output
        self.branch = branch
        self.name = f"new-{branch}.{secrets.token_hex(4)}"
        self.path = staging_dir(output) / self.name
        held = held_folder(output)
        if held is not None and held.path != Path(os.path.abspath(output)):
            held = None  # a folder inside the locked output: not an output of its own
        self._own = held is None
        try:
            self._folder = OutputFolder.open(output) if held is None else held
            self._folder.check()
            staging = str(staging_dir(Path()))
            _makedirs_at(self._folder.fd, staging)
            self._staging = os.open(staging, _FOLDER_FLAGS, dir_fd=self._folder.fd)
            os.mkdir(self.name, dir_fd=self._staging)
            self._fd = os.open(self.name, _FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=self._staging)
        except OSError as err:
            raise OutputError(str(self.path), err.strerror or str(err)) from None

    def write(self, relative: str, data: bytes | bytearray) -> None:
        """Add one file to the staged branch (no fsync: :meth:`publish` flushes them all)."""
        folder = os.path.dirname(relative)
        try:
            if folder:
                _makedirs_at(self._fd, folder)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            with open(os.open(relative, flags, 0o666, dir_fd=self._fd), "wb") as out:
                out.write(data)
        except OSError as err:
            raise OutputError(str(self.path / relative), err.strerror or str(err)) from None

    def discard(self) -> None:
        """Drop the staged files; the published branch is untouched."""
        if self._fd < 0:
            return
        with contextlib.suppress(OSError):
            shutil.rmtree(self.name, dir_fd=self._staging)
        for fd in (self._fd, self._staging):
            os.close(fd)
        self._fd = self._staging = -1
        if self._own:
            self._folder.close()

    def publish(self) -> Path:
        """Flush the staged files and swap them in for ``<output>/<branch>``.

        Once the new folder is in place the publish has happened: failing to remove the old
        copy afterwards is only logged (the next run's :func:`recover` removes it). Refused
        (:class:`~crawler.errors.OutputError`) when the output's path no longer leads to the
        folder the run locked: the swap would publish elsewhere.
        """
        target = self.output / self.branch
        self._folder.check()
        check_replaceable(target)
        try:
            _flush_tree(self.path)
            aside = self._swap()
            os.fsync(self._folder.fd)
        except OSError as err:
            self._folder.check()  # a replaced output folder explains the failure best
            if err.errno == errno.EXDEV:  # a mount at .crawler/staging since check_work_folders()
                raise OutputError(str(self.path.parent), _apart(self.output)) from None
            raise OutputError(str(target), err.strerror or str(err)) from None
        if aside is not None and not self._folder.replaced():  # else the next run's recover()
            self._retire(self.path.with_name(aside), target)
        return target

    def _swap(self) -> str | None:
        """Put the staged folder in place of the branch's, relative to the descriptors, once
        sure the output's path still leads to the locked folder; returns the name in the
        staging folder of the previous branch folder, if there was one."""
        out, staging, branch = self._folder.fd, self._staging, self.branch
        self._folder.check()
        try:
            os.stat(branch, dir_fd=out, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(self.name, branch, src_dir_fd=staging, dst_dir_fd=out)
            return None
        if _exchange(staging, self.name, out, branch):
            return self.name  # the staging folder now holds the previous branch
        old = f"old-{branch}.{secrets.token_hex(4)}"
        os.rename(branch, old, src_dir_fd=out, dst_dir_fd=staging)
        try:
            os.rename(self.name, branch, src_dir_fd=staging, dst_dir_fd=out)
        except OSError:
            os.rename(old, branch, src_dir_fd=staging, dst_dir_fd=out)
            raise
        return old

    def _retire(self, aside: Path, target: Path) -> None:
        """Remove the previous branch folder, set ``aside`` by the swap, but for what was
        written into it since :func:`check_replaceable` looked (flushing the staged files can
        take a while): that is moved into the new folder, where it was put, and the next
        publish stops on it as on any file the crawler did not write. What cannot be moved
        back (the name is taken, a folder cannot be listed) is kept with the previous folder
        as ``.crawler/staging/kept-<branch>.<hex>``: a file the crawler did not write is never
        deleted."""
        left = False
        try:
            foreign = foreign_entries(aside)
        except OSError:
            foreign, left = [], True
        for name in foreign:
            into = target / name
            if os.path.lexists(into) or not _moved(aside / name, into):
                left = True
                continue
            log.warning(
                "%s: %s was written into %s while it was replaced: moved into the new one, "
                "where the next publish stops on it",
                self.branch,
                name,
                target,
            )
        if not left:
            shutil.rmtree(aside, ignore_errors=True)
            return
        # Renamed in its folder (no other filesystem, no new folder to make), to a name that
        # recover() leaves alone.
        kept = aside.with_name(f"kept-{self.branch}.{secrets.token_hex(4)}")
        try:
            os.rename(aside, kept)
        except OSError as err:
            log.warning(
                "%s: cannot keep %s, which the next run removes: %s",
                self.branch,
                aside,
                err.strerror or err,
            )
            kept = aside
        log.warning(
            "%s: the previous branch folder held what the crawler did not write, written "
            "while it was replaced, and not all of it could be moved into the new one: kept "
            "in %s",
            self.branch,
            kept,
        )
