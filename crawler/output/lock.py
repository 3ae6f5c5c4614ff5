"""Lock: one crawler run at a time per output folder.

Two runs writing the same output folder would race on its staging folder, its caches and its
reports. A run therefore holds ``<output>/.crawler/lock`` from start to end::

    async with RunLock(output, wait=60) as lock:
        if lock.broken:
            log.warning("%s", lock.broken)
        ...

How it works, and why:

* The lock is a ``flock(LOCK_EX | LOCK_NB)`` on a file descriptor kept open for the whole run.
  The kernel drops it when the descriptor is closed, which includes the process dying in any
  way (``SIGKILL``, out of memory, power loss of a container): there is never a lock that only a
  human can clear. ``flock`` is advisory, so only crawlers honour it; other readers of the output
  are unaffected (they are protected by the atomic publish of :mod:`crawler.output.stage`).
* Once locked, the file's content is replaced by ``{"pid", "host", "started_at"}`` (JSON, one
  line). The content is informational only: it lets a run that finds the folder busy say *who*
  holds it, and lets the next run notice that a previous one did not end cleanly. The ``flock``
  alone decides who holds the lock; the content is never trusted over it, so a pid that is alive
  (or a host that is not this one) in an unlocked file does not block anybody, and a dead pid
  in a locked file does not let anybody in.
* When the lock is busy, :meth:`RunLock.acquire` tries again every :data:`POLL_SECONDS` (0.1) until
  ``wait`` seconds have passed, then raises :class:`LockBusyError`, which names the holder's
  pid, host and start time and the lock file. ``wait=0`` fails at once.
* A file that still names a holder when the lock is taken was left by a run that did not
  release it (killed, crashed, or its machine rebooted). The lock is taken all the same and
  :attr:`RunLock.broken` describes the leftover, e.g. ``"broke stale lock of pid 12345 on
  build01 (started 2025-04-20T02:30:00+00:00)"``, so the caller can log it.
* Content that is not the JSON above (empty, truncated, garbage, another tool's) never raises;
  the holder is then reported as unknown.
* On release the content is emptied, then the lock dropped and the descriptor closed. The file
  itself is kept: deleting it would let two runs lock two different files under the same name
  (one holding the deleted file, one a newly created one). An empty file therefore means "the
  last run ended cleanly". For the same reason, anything but a regular file there (a link,
  which the lock's writes would go through, a folder, a pipe) is refused, and left for a
  human to move away: the run fails (exit 4) rather than write through it or replace it. A
  file with other names (hard links, as ``cp -al`` makes) is locked but not written to.

* The lock is in the folder the run opened: :class:`RunLock` opens the output folder once (by
  its resolved path, never through a link, :mod:`crawler.output.folder`), makes and locks
  ``.crawler/lock`` relative to that descriptor (``.crawler`` not a link either), and keeps
  it open. A branch is staged and swapped in relative to it (:mod:`crawler.output.stage`),
  and so are the run's states, reports, caches and clean-ups (:mod:`crawler.output.kept`),
  once :func:`~crawler.output.folder.held_folder` says that the output's path still leads to
  that folder: it refuses, with an :class:`~crawler.errors.OutputError`, once it does not
  (moved, or replaced by a link or another folder during the run). A second run started
  after such a swap locks the folder the path now leads to.

The lock can be used with ``async with`` (waiting with ``asyncio.sleep``, so the event loop
keeps running), with ``with``, or with :meth:`RunLock.acquire` / :meth:`RunLock.release`. Locks
are per open file description: a second :class:`RunLock` on the same folder in the same process
is refused too. The descriptor is close-on-exec, so programs the run starts do not inherit the
lock; a child made by a bare ``fork`` (multiprocessing's ``fork`` start method) shares it and
keeps the folder locked until it exits as well (the decode workers are made by a
``forkserver``, which is started by exec, so they never hold it). The lock works on local
filesystems; on NFS, Linux emulates ``flock`` with byte-range locks, which works when the
server supports locking.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..errors import LockBusyError, OutputError
from ..files import read_regular
from ..text import shown
from .folder import OutputFolder, hold, let_go
from .kept import open_below

log = logging.getLogger(__name__)

LOCK_FILE = Path(".crawler") / "lock"
POLL_SECONDS = 0.1
_MAX_CONTENT = 4096
_NOT_A_FOLDER = "not a folder (a file, or a link that leads nowhere): move it away"
_NOT_A_FILE = "not a regular file (a link, a folder, a pipe): move it away"


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a lock, as its lock file says; unknown fields are None."""

    pid: int | None = None
    host: str | None = None
    started_at: str | None = None

    @property
    def known(self) -> bool:
        """True when the file named at least a pid or a host."""
        return self.pid is not None or self.host is not None

    def describe(self) -> str:
        """``pid 123 on build01 (started 2025-04-20T02:30:00+00:00)``, or ``an unknown process``."""
        if not self.known:
            return "an unknown process"
        pid = f"pid {self.pid}" if self.pid is not None else "an unknown pid"
        # The file is anyone's to write: what it says is quoted as a server's text would be.
        host = f" on {shown(self.host)}" if self.host is not None else ""
        started = f" (started {shown(self.started_at)})" if self.started_at is not None else ""
        return f"{pid}{host}{started}"

    @classmethod
    def parse(cls, data: bytes) -> Holder:
        """The holder a lock file's content names; anything unexpected gives an unknown holder."""
        try:
            content = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return cls()
        if not isinstance(content, dict):
            return cls()
        pid = content.get("pid")
        host = content.get("host")
        started = content.get("started_at")
        return cls(
            pid=pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
            host=host if isinstance(host, str) and host else None,
            started_at=started if isinstance(started, str) and started else None,
        )

    def encode(self) -> bytes:
        """The lock file's content for this holder."""
        document = {"pid": self.pid, "host": self.host, "started_at": self.started_at}
        return json.dumps(document, sort_keys=True).encode() + b"\n"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


class RunLock:
    """The whole-run lock of one output folder (see the module documentation)."""

    def __init__(self, output: Path, *, wait: float = 0.0) -> None:
        if wait < 0:
            raise ValueError(f"wait must be >= 0, got {wait}")
        self.output = output
        self.path = output / LOCK_FILE
        self.wait = wait
        #: What was left in the lock file by a run that did not release it, if anything.
        self.broken: str | None = None
        #: This process, as written into the lock file while it holds the lock.
        self.holder: Holder | None = None
        self._fd: int | None = None
        self._written = False  # whether the holder was written into the file (not a hard link)
        #: The output folder, held open while locked (see :class:`OutputFolder`).
        self.folder: OutputFolder | None = None

    @property
    def locked(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, waiting (blocking the thread) up to ``wait`` seconds."""
        for pause in self._attempts():
            time.sleep(pause)

    async def acquire_async(self) -> None:
        """Take the lock, waiting (without blocking the event loop) up to ``wait`` seconds."""
        for pause in self._attempts():
            await asyncio.sleep(pause)

    def _attempts(self) -> Iterator[float]:
        """Try to lock until done, yielding how long to pause between tries; raises when busy
        past ``wait`` (the caller does the pausing, blocking or not)."""
        started = time.monotonic()
        deadline = started + self.wait
        while (holder := self._try()) is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                waited = time.monotonic() - started if self.wait > 0 else 0.0
                raise LockBusyError(str(self.path), holder, waited)
            yield min(POLL_SECONDS, remaining)

    def release(self) -> None:
        """Empty the lock file and drop the lock; does nothing when the lock is not held."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        folder, self.folder = self.folder, None
        try:
            if self._written:
                with contextlib.suppress(OSError):  # the lock goes with the descriptor anyway
                    os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
            if folder is not None:
                let_go(folder)
                folder.close()

    def _try(self) -> Holder | None:
        """One attempt: None when the lock was taken, else the holder the file names."""
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already locked by this RunLock")
        folder = self._open_folder()
        try:
            fd = self._open_file(folder)
        except BaseException:
            folder.close()
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            folder.close()
            holder = Holder.parse(self._read(fd))
            for _ in range(10):  # the holder may have the lock but not have written itself yet
                if holder.known:
                    break
                time.sleep(0.01)
                holder = Holder.parse(self._read(fd))
            os.close(fd)
            return holder
        except OSError as err:
            os.close(fd)
            folder.close()
            raise OutputError(str(self.path), f"cannot lock: {err.strerror or err}") from None
        try:
            content = self._read(fd)
            self.broken = self._leftover(Holder.parse(content), content)
            now = datetime.now(UTC).isoformat(timespec="seconds")
            self.holder = Holder(os.getpid(), socket.gethostname(), now)
            # A hard link's other names are the same content (a copy made with `cp -al`):
            # writing the pid there would change them. The lock holds all the same.
            self._written = os.fstat(fd).st_nlink == 1
            if self._written:
                os.ftruncate(fd, 0)
                os.pwrite(fd, self.holder.encode(), 0)
            else:
                log.warning(
                    "%s has other names (hard links): locked without writing to it", self.path
                )
        except OSError as err:
            os.close(fd)
            folder.close()
            raise OutputError(str(self.path), err.strerror or str(err)) from None
        self._fd = fd
        self.folder = folder
        hold(folder)
        return None

    def _open_folder(self) -> OutputFolder:
        """The output folder, opened (and made if missing) for this attempt."""
        try:
            return OutputFolder.open(self.output)
        except FileExistsError as err:  # from mkdir: "File exists" would not say what is wrong
            raise OutputError(str(err.filename or self.output), _NOT_A_FOLDER) from None
        except OSError as err:
            if err.errno == errno.ELOOP:  # a link put there since the path was resolved
                reason = "became a symbolic link while it was being opened: run again"
                raise OutputError(str(self.output), reason) from None
            raise OutputError(str(err.filename or self.output), err.strerror or str(err)) from None

    def _open_file(self, folder: OutputFolder) -> int:
        """The lock file, made if missing, opened relative to the folder's descriptor: the lock
        is in the folder the run works in, whatever the path leads to later."""
        state = self.path.parent
        try:  # .crawler, never through a link (see crawler.output.kept)
            crawler = open_below(folder.fd, self.output, LOCK_FILE.parent.parts, make=True)
        except (FileExistsError, NotADirectoryError):  # a file
            raise OutputError(str(state), _NOT_A_FOLDER) from None
        except OSError as err:
            raise OutputError(str(state), err.strerror or str(err)) from None
        # Never through a link: the lock is written and emptied, which would empty whatever
        # file the link leads to. Not removed either: a run holding the lock on a real file
        # there could then be joined by another one.
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            fd = os.open(LOCK_FILE.name, flags, 0o644, dir_fd=crawler)
        except OSError as err:
            not_a_file = err.errno in (errno.ELOOP, errno.EISDIR)
            reason = _NOT_A_FILE if not_a_file else err.strerror or str(err)
            raise OutputError(str(self.path), reason) from None
        finally:
            os.close(crawler)
        try:
            info = os.fstat(fd)
        except OSError as err:
            os.close(fd)
            raise OutputError(str(self.path), err.strerror or str(err)) from None
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise OutputError(str(self.path), _NOT_A_FILE)
        return fd

    @staticmethod
    def _read(fd: int) -> bytes:
        return os.pread(fd, _MAX_CONTENT, 0)

    @staticmethod
    def _leftover(previous: Holder, content: bytes) -> str | None:
        """Describe what a run that did not release the lock left in the file."""
        if not previous.known:
            if not content.strip():
                return None
            return "broke a lock left with unreadable content (holder unknown)"
        if previous.host == socket.gethostname() and previous.pid is not None:
            if _pid_alive(previous.pid):
                # Only a reused pid can be alive here: the real holder would still hold the flock.
                return f"broke lock left by {previous.describe()}, whose pid now belongs elsewhere"
            return f"broke stale lock of {previous.describe()}"
        return f"broke lock left by {previous.describe()}, which no longer holds it"

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    async def __aenter__(self) -> RunLock:
        await self.acquire_async()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()


def lock_named(output: Path) -> str | None:
    """What ``output``'s lock file says of a run holding it, read without locking it; None
    when it names no run, or one of this host that is gone. A dry run takes no lock: even a
    shared one would, for an instant, refuse the lock to a run started with ``lock_wait`` 0."""
    path = output / LOCK_FILE
    try:
        holder = Holder.parse(read_regular(path, _MAX_CONTENT))
    except OSError:
        return None
    pid, here = holder.pid, holder.host == socket.gethostname()
    if not holder.known or (here and pid is not None and not _pid_alive(pid)):
        return None
    return f"{path} names {holder.describe()}: a sync may be running"
