"""Staging and publishing a branch: built off to the side, then swapped in, all or nothing.

A branch is built in a staging folder, ``<output>/.crawler/staging/new-<branch>.<random>``,
flushed to disk, and only then put in place of ``<output>/<branch>``:

* on Linux the two folders are swapped with ``renameat2(RENAME_EXCHANGE)``, so a reader (or a
  crash) sees either the old branch or the new one, never a mix or nothing;
* elsewhere, or on a filesystem without that call, the old folder is renamed aside and the new one
  renamed in; a crash between the two renames leaves the old copy under ``.crawler/staging``,
  and the next run puts it back (:func:`crawler.output.workdir.recover`).

The old copy is removed afterwards. Inside an output folder whose lock this process holds,
staging and the swap are done relative to the folder's descriptor
(:class:`crawler.output.folder.OutputFolder`), and refused once its path leads elsewhere: a run
never writes through a link put in its output's place.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from ..errors import OutputError
from ..files import Digest
from .atomic import FOLDER_FLAGS, exchange, flush_tree, makedirs_at
from .folder import OutputFolder, held_folder
from .kept import open_below
from .published import check_replaceable, foreign_entries
from .workdir import apart_reason, staging_dir, work_folder

log = logging.getLogger("crawler")


def _moved(source: Path, into: Path) -> bool:
    """Whether ``source`` could be renamed to ``into`` (its folder made if need be)."""
    try:
        into.parent.mkdir(parents=True, exist_ok=True)
        os.rename(source, into)
    except OSError:
        return False
    return True


class BranchStage:
    """A branch's next output, assembled off to the side and then published as a whole.

    Everything is done relative to descriptors of the output folder (the one whose lock this
    process holds, see :func:`crawler.output.folder.held_folder`, else the folder opened
    here), of its staging folder and of the staged folder: if the output's path is swapped for
    a link during the run, nothing is staged or published through it, and :meth:`publish`
    refuses. ``flush`` makes the staged folder durable before the swap
    (:func:`~crawler.output.atomic.flush_tree`).
    """

    def __init__(
        self, output: Path, branch: str, *, flush: Callable[[Path], None] = flush_tree
    ) -> None:
        self.output = output
        self.branch = branch
        self._flush = flush
        self.name = f"new-{branch}.{secrets.token_hex(4)}"
        self.path = staging_dir(output) / self.name
        held = held_folder(output)
        if held is not None and held.path != Path(os.path.abspath(output)):
            held = None  # a folder inside the locked output: not an output of its own
        self._own = held is None
        try:
            self._folder = OutputFolder.open(output) if held is None else held
            self._folder.check()
            parts = work_folder(Path(), "staging").parts
            self._staging = open_below(self._folder.fd, output, parts, make=True)
            os.mkdir(self.name, dir_fd=self._staging)
            self._fd = os.open(self.name, FOLDER_FLAGS | os.O_NOFOLLOW, dir_fd=self._staging)
        except OSError as err:  # naming the folder that failed (a link there), else the branch's
            named = isinstance(err.filename, str) and os.path.isabs(err.filename)
            where = err.filename if named else self.path
            raise OutputError(str(where), err.strerror or str(err)) from None

    def write(self, relative: str, data: bytes | bytearray) -> None:
        """Add one file to the staged branch (no fsync: :meth:`publish` flushes them all)."""
        self.write_chunks(relative, [data])

    def write_chunks(
        self,
        relative: str,
        chunks: Iterable[bytes | bytearray],
        digest: Digest | None = None,
    ) -> int:
        """Add one file written a chunk at a time, each also fed to ``digest`` if given; its
        size."""
        folder = os.path.dirname(relative)
        try:
            if folder:
                makedirs_at(self._fd, folder)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
            size = 0
            with open(os.open(relative, flags, 0o666, dir_fd=self._fd), "wb") as out:
                for chunk in chunks:
                    if digest is not None:
                        digest.update(chunk)
                    size += out.write(chunk)
        except OSError as err:
            raise OutputError(str(self.path / relative), err.strerror or str(err)) from None
        return size

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
        copy afterwards is only logged (the next run's
        :func:`~crawler.output.workdir.recover` removes it). Refused
        (:class:`~crawler.errors.OutputError`) when the output's path no longer leads to the
        folder the run locked: the swap would publish elsewhere.
        """
        target = self.output / self.branch
        self._folder.check()
        check_replaceable(target)
        try:
            self._flush(self.path)
            aside = self._swap()
            os.fsync(self._folder.fd)
        except OSError as err:
            self._folder.check()  # a replaced output folder explains the failure best
            if err.errno == errno.EXDEV:  # a mount at .crawler/staging since check_work_folders()
                raise OutputError(str(self.path.parent), apart_reason(self.output)) from None
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
        if exchange(staging, self.name, out, branch):
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
        written into it since :func:`~crawler.output.published.check_replaceable` looked
        (flushing the staged files can take a while): that is moved into the new folder, where
        it was put, and the next publish stops on it as on any file the crawler did not write.
        What cannot be moved back (the name is taken, a folder cannot be listed) is kept with
        the previous folder as ``.crawler/staging/kept-<branch>.<hex>``: a file the crawler did
        not write is never deleted."""
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
