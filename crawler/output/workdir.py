"""The work folder ``<output>/.crawler/``: its layout, its check before a run, and the
clean-up after runs that died.

One piece: what runs leave in each work folder (downloads, staged branches, half-written files)
is known where it is cleaned up. Everything here runs under the run lock
(:mod:`crawler.output.lock`), and reaches ``.crawler/`` and its folders as
:class:`~crawler.output.kept.KeptFolder` values: never through a symbolic link.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from ..errors import OutputError
from ..files import is_safe_name
from .folder import held_folder
from .kept import MISSING, KeptFolder, failed, is_temporary, linked

STATE_DIR = ".crawler"


def state_dir(output: Path) -> Path:
    """The tool's own folder under the output (staging, reports, caches)."""
    return output / STATE_DIR


def staging_dir(output: Path) -> Path:
    """Where branches are built before they are swapped in (see
    :class:`~crawler.output.stage.BranchStage`)."""
    return state_dir(output) / "staging"


def report_path(output: Path, branch: str) -> Path:
    """Where a branch's last report is kept, whether it published or not."""
    return state_dir(output) / "reports" / f"{branch}.json"


def work_folder(output: Path, name: str | None = None) -> KeptFolder:
    """``.crawler/`` (or its folder ``name``), reached from ``output`` without following a
    link."""
    return KeptFolder(output, (STATE_DIR,) if name is None else (STATE_DIR, name))


def run_folder(output: Path) -> Path:
    """This run's downloads (removed when it ends, or by the next run if it crashed)."""
    return state_dir(output) / "tmp" / str(os.getpid())


@contextlib.contextmanager
def run_workspace(output: Path) -> Iterator[Path]:
    """This run's downloads folder (:func:`run_folder`), made (never through a link) for the
    block and removed after it."""
    tmp, name = work_folder(output, "tmp"), str(os.getpid())
    try:
        os.close(tmp.child(name).open(make=True))
    except OSError as err:
        raise failed(err, run_folder(output)) from None
    try:
        yield run_folder(output)
    finally:
        with contextlib.suppress(OSError, OutputError):
            fd = tmp.open()
            try:
                shutil.rmtree(name, dir_fd=fd, ignore_errors=True)
            finally:
                os.close(fd)


#: The folders of ``.crawler/``, and those that hold the files the crawler keeps (the others
#: hold the folders of runs: downloads, staged branches).
_WORK_FOLDERS = ("tmp", "staging", "state", "reports", "cache", "specs", "binaries")
_FILE_FOLDERS = ("state", "reports", "cache", "specs", "binaries")


def check_work_folders(output: Path, kept: Iterable[KeptFolder] = ()) -> list[str]:
    """Make sure branches can be staged and recorded; returns what was done, for the log.

    A symbolic link at ``.crawler``, at one of its folders (:data:`_WORK_FOLDERS`), or among
    the files of those that hold files (and of the folders ``kept``: a ``cache_dir``) is
    refused (:data:`~crawler.output.kept.LINKED`), before any work: anyone who may write in the
    output may have put it there, and it would carry the run's writes and deletes elsewhere
    (see :mod:`crawler.output.kept`). A file where one of the folders goes is removed:
    ``.crawler/`` is the crawler's own, and every run would fail on it (or, for ``state``,
    read everything again and warn), night after night. A staging folder on another
    filesystem than the output (a ``.crawler`` mounted elsewhere) is refused, before any work:
    a branch is swapped in by renaming its staged folder, which cannot cross filesystems, so
    every publish would fail after all the downloading and decoding."""
    _still_locked(output)
    crawler = work_folder(output)
    done = []
    try:
        fd = crawler.open(make=True)
        try:
            for name in _WORK_FOLDERS:
                done += _not_a_file(fd, crawler.path / name)
        finally:
            os.close(fd)
        for folder in _file_folders(output, kept):
            folder.refuse_links()
        staging = work_folder(output, "staging").open(make=True)
        try:
            apart = os.fstat(staging).st_dev != os.stat(output).st_dev
        finally:
            os.close(staging)
    except OSError as err:
        raise failed(err, crawler.path) from None
    if apart:
        raise OutputError(str(staging_dir(output)), apart_reason(output))
    return done


def _file_folders(output: Path, kept: Iterable[KeptFolder]) -> list[KeptFolder]:
    """The folders of ``.crawler/`` that hold files, and ``kept``, each once."""
    return list(dict.fromkeys([*(work_folder(output, n) for n in _FILE_FOLDERS), *kept]))


def _not_a_file(fd: int, path: Path) -> list[str]:
    """Remove a file at ``path`` (in the folder ``fd``), where a folder goes; raise for a
    link."""
    try:
        mode = os.stat(path.name, dir_fd=fd, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return []
    if stat.S_ISLNK(mode):
        raise linked(path)
    if stat.S_ISDIR(mode):
        return []
    os.unlink(path.name, dir_fd=fd)
    return [f"removed {path}, which was not a folder"]


def _still_locked(output: Path) -> None:
    """Refuse to work by path in ``output`` if this process locked it and its path now leads
    elsewhere (see :func:`crawler.output.folder.held_folder`)."""
    held = held_folder(output)
    if held is not None:
        held.check()


def apart_reason(output: Path) -> str:
    """Why a staging folder on another filesystem than ``output`` is refused."""
    return (
        f"on another filesystem than {output}, and a branch is swapped in by a rename, which "
        f"cannot cross filesystems: keep {STATE_DIR}/ on the output's filesystem (to keep "
        "the cache on another, name its folder with cache_dir in the config)"
    )


def recover(output: Path, kept: Iterable[KeptFolder] = ()) -> list[str]:
    """Clean up after runs that died: restore a branch left renamed aside, drop staging folders
    and partial downloads, and the temporary files of half-written ones in the folders that
    hold files (and in ``kept``). Returns what was done, for the log.

    Called while holding the run lock (:mod:`crawler.output.lock`), so whatever is found belongs to
    a run that is gone, whatever its pid (pids are reused, and are meaningless across hosts).
    A folder is removed only when named as runs name theirs, in ``.crawler/tmp`` or
    ``.crawler/staging`` (never a link); a file only when recorded as written
    (:meth:`~crawler.output.kept.KeptFolder.prune`).
    """
    _still_locked(output)
    done: list[str] = []
    try:
        with _opened(work_folder(output, "tmp")) as tmp:
            for name in _ours(tmp, _RUN_FOLDER):
                shutil.rmtree(name, dir_fd=tmp, ignore_errors=True)
                done.append(f"removed downloads left by an interrupted run ({name})")
        with _opened(work_folder(output, "staging")) as staging:
            for name in _ours(staging, _STAGED_BRANCH):
                done.append(_recovered(output, staging, name))
        for folder in _file_folders(output, kept):
            pruned = folder.prune(lambda name: not is_temporary(name))
            done += [
                f"removed {folder.path / n} left by an interrupted run" for n in pruned.removed
            ]
            done += pruned.problems
    except OSError as err:  # naming what could not be listed or moved, not only .crawler
        raise failed(err, state_dir(output)) from None
    return done


def _recovered(output: Path, staging: int, name: str) -> str:
    """Put back the branch folder ``name`` of the folder ``staging``, renamed aside by an
    interrupted publish, when its place is free; else remove it."""
    kind, _, rest = name.partition("-")
    branch = rest.rpartition(".")[0]
    if kind == "old" and is_safe_name(branch):
        with _opened(KeptFolder(output)) as out:
            try:
                os.stat(branch, dir_fd=out, follow_symlinks=False)
            except FileNotFoundError:
                os.rename(name, branch, src_dir_fd=staging, dst_dir_fd=out)
                return f"restored {output / branch} from an interrupted publish"
    shutil.rmtree(name, dir_fd=staging, ignore_errors=True)
    return f"removed {name} left by an interrupted run"


@contextlib.contextmanager
def _opened(folder: KeptFolder) -> Iterator[int]:
    """A descriptor of ``folder`` for the block; -1 when it is missing."""
    try:
        fd = folder.open()
    except MISSING:
        yield -1
        return
    try:
        yield fd
    finally:
        os.close(fd)


#: What runs leave in ``.crawler/tmp`` (a folder per pid) and ``.crawler/staging`` (a branch
#: built or set aside, suffixed with random hex, or with a pid by earlier versions).
_RUN_FOLDER = re.compile(r"[0-9]+")
_STAGED_BRANCH = re.compile(r"(new|old)-.+\.[0-9a-f]+")


def _ours(folder: int, name: re.Pattern[str]) -> list[str]:
    """The folders in the folder ``folder`` (-1: none) named as a run names them (not symbolic
    links): anything else there was put by someone else and is left alone."""
    if folder < 0:
        return []
    with os.scandir(folder) as entries:
        return sorted(
            e.name for e in entries if name.fullmatch(e.name) and e.is_dir(follow_symlinks=False)
        )
