"""The work folder ``<output>/.crawler/``: its layout, its check before a run, and the
clean-up after runs that died.

One piece: what runs leave in each work folder (downloads, staged branches, half-written files)
is known where it is cleaned up. Everything here runs under the run lock
(:mod:`crawler.output.lock`).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from ..errors import OutputError
from .folder import held_folder

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


def run_folder(output: Path) -> Path:
    """This run's downloads (removed when it ends, or by the next run if it crashed)."""
    return state_dir(output) / "tmp" / str(os.getpid())


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
        raise OutputError(str(staging), apart_reason(output))
    return done


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
        for entry in _ours(run_folder(output).parent, _RUN_FOLDER):
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
#: What :func:`~crawler.output.atomic.atomic_write` leaves when its run dies before the rename
#: (``mkstemp``'s name).
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
