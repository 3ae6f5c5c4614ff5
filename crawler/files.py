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
import os
import stat
from pathlib import Path

NOT_REGULAR = "not a regular file (a named pipe, a device or a socket)"


def open_regular(path: Path | str) -> int:
    """A descriptor of ``path`` opened to read; ``IsADirectoryError`` for a folder and
    ``OSError`` for anything else that is not a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
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


def read_regular(path: Path | str) -> bytes:
    """The bytes of ``path``, a regular file (see :func:`open_regular`)."""
    with open(open_regular(path), "rb") as file:
        return file.read()


def as_given(path: Path) -> Path:
    """An absolute ``path`` with what leads up to its last ``..`` resolved (a ``..`` after a
    link goes where the filesystem takes it, as ``ls`` does) and the rest as written: a link
    there is kept, not replaced by its target."""
    parts = path.parts
    if ".." not in parts:
        return path
    last = len(parts) - 1 - parts[::-1].index("..")
    return Path(*parts[: last + 1]).resolve().joinpath(*parts[last + 1 :])
