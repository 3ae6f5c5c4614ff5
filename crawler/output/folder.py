"""The output folder a run holds the lock of, and whether its path still leads there.

:class:`~crawler.output.lock.RunLock` opens the output folder once and registers it for the
process (:func:`hold`); every writer in the process asks :func:`held_folder` which folder it may
write into, and writes relative to its descriptor or checks it just before, so that an output
path swapped for a link during a run does not carry the run's writes elsewhere. One piece: the
folder, the registry and the one error they give.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import OutputError

#: Why a path no longer names the folder a run opened (see :meth:`OutputFolder.check`).
REPLACED = (
    "is no longer the folder this run locked (it was moved, or replaced by a link or another "
    "folder, during the run): nothing is written through it; the folder this run locked is "
    "left as it was"
)


class OutputFolder:
    """An output folder opened once, by its resolved path (never through a link), and the
    question "does its path still lead there?" (:meth:`check`).

    Everything a run writes into the output is made relative to :attr:`fd`, or checked with
    :meth:`check` just before, so that a path swapped for a link during the run does not
    carry the run's writes (and its lock's protection) elsewhere.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        found = os.fstat(fd)
        self._identity = (found.st_dev, found.st_ino)

    @classmethod
    def open(cls, path: Path) -> OutputFolder:
        """Open the folder ``path`` (made if missing, with its parents), as it resolves now;
        raises ``OSError``."""
        path = Path(os.path.abspath(path))
        path.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: the resolved path's last part became a link since resolve() looked.
        flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
        return cls(path, os.open(path.resolve(), flags))

    def replaced(self) -> bool:
        """Whether ``path`` no longer leads to the folder that was opened (or to none)."""
        try:
            found = os.stat(self.path)
        except OSError:
            return True
        return (found.st_dev, found.st_ino) != self._identity

    def error(self) -> OutputError | None:
        """The :class:`~crawler.errors.OutputError` saying that ``path`` no longer leads here,
        or None while it does."""
        if not self.replaced():
            return None
        return OutputError(str(self.path), REPLACED, "write into")

    def check(self) -> None:
        """Raise :meth:`error` when ``path`` no longer leads here."""
        error = self.error()
        if error is not None:
            raise error

    def close(self) -> None:
        """Close the descriptor (once)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


#: The output folders this process holds the lock of, by path (see :func:`held_folder`).
_HELD: dict[Path, OutputFolder] = {}


def hold(folder: OutputFolder) -> None:
    """Record that this process holds the lock of ``folder`` (its lock calls this)."""
    _HELD[folder.path] = folder


def let_go(folder: OutputFolder) -> None:
    """Record that this process no longer holds the lock of ``folder``."""
    _HELD.pop(folder.path, None)


def held_folder(path: Path) -> OutputFolder | None:
    """The output folder whose lock this process holds and that ``path`` lies in (or is),
    by their paths as given; None when there is none.

    Locks are held per process (the kernel's ``flock`` is per open file), so this is where any
    writer in the process learns which folder it may write into, without the lock being passed
    down to every function that writes a file.
    """
    if not _HELD:
        return None
    try:
        absolute = Path(os.path.abspath(path))
    except OSError:  # a relative path, and no working folder to make it absolute
        return None
    for folder in _HELD.values():
        if absolute.is_relative_to(folder.path):
            return folder
    return None


def replaced_error(path: Path) -> OutputError | None:
    """The error to report when ``path`` lies in an output folder this process locked and the
    output's path leads elsewhere now (whatever failed then, that is why), else None."""
    held = held_folder(path)
    return None if held is None else held.error()
