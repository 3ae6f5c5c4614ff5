"""The whole-run lock: real files, real competing processes, no mocks."""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import time
from pathlib import Path

import pytest

from crawler.errors import LockBusyError, OutputError
from crawler.output.atomic import atomic_write
from crawler.output.folder import REPLACED, held_folder
from crawler.output.kept import LINKED
from crawler.output.lock import Holder, RunLock
from crawler.output.stage import BranchStage

from .conftest import LockHolder, dead_pid


@pytest.fixture
def output(tmp_path: Path) -> Path:
    return tmp_path / "out"


def hold(holders: list[LockHolder], output: Path, seconds: float = 30) -> LockHolder:
    holder = LockHolder(output, seconds)
    holders.append(holder)
    return holder


def lock_content(output: Path) -> bytes:
    return (output / ".crawler" / "lock").read_bytes()


def test_acquire_writes_holder_and_release_empties_the_file(output: Path) -> None:
    lock = RunLock(output)
    lock.acquire()
    try:
        assert lock.locked
        assert lock.broken is None
        written = json.loads(lock_content(output))
        assert sorted(written) == ["host", "pid", "started_at"]
        assert written["pid"] == os.getpid()
        assert written["host"] == socket.gethostname()
        assert written["started_at"].endswith("+00:00")
        assert lock.holder == Holder(os.getpid(), socket.gethostname(), written["started_at"])
    finally:
        lock.release()
    assert not lock.locked
    assert lock_content(output) == b""  # kept, emptied: the last run ended cleanly
    lock.release()  # a second release is harmless


def test_lock_is_reusable_after_release(output: Path) -> None:
    with RunLock(output) as first:
        assert first.locked
    with RunLock(output) as second:
        assert second.locked
        assert second.broken is None


async def test_async_context_manager(output: Path) -> None:
    async with RunLock(output, wait=0) as lock:
        assert lock.locked
        with pytest.raises(LockBusyError):
            RunLock(output).acquire()  # a second lock in the same process is refused too
    assert not lock.locked
    assert lock_content(output) == b""


def test_held_by_another_process_is_busy_at_once(output: Path, holders: list[LockHolder]) -> None:
    holder = hold(holders, output)
    started = time.monotonic()
    with pytest.raises(LockBusyError) as caught:
        RunLock(output, wait=0).acquire()
    assert time.monotonic() - started < 0.5
    err = caught.value
    assert err.holder.pid == holder.pid
    assert err.holder.host == socket.gethostname()
    assert err.path == str(output / ".crawler" / "lock")
    message = str(err)
    assert message.startswith("output folder is locked by another crawler run: ")
    assert f"pid {holder.pid} on {socket.gethostname()} (started " in message
    assert f"(lock file {output / '.crawler' / 'lock'})" in message
    assert "waiting" not in message


async def test_busy_after_waiting(output: Path, holders: list[LockHolder]) -> None:
    holder = hold(holders, output)
    started = time.monotonic()
    with pytest.raises(LockBusyError) as caught:
        await RunLock(output, wait=0.3).acquire_async()
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 1.5
    assert caught.value.waited >= 0.3
    assert f"pid {holder.pid}" in str(caught.value)
    assert "after waiting 0.3s" in str(caught.value)


async def test_waiting_succeeds_once_the_holder_exits(
    output: Path, holders: list[LockHolder]
) -> None:
    holder = hold(holders, output, seconds=0.4)
    started = time.monotonic()
    async with RunLock(output, wait=10) as lock:
        assert time.monotonic() - started < 5
        assert holder.process.wait(timeout=5) == 0
        assert lock.broken is None  # the holder released cleanly
        assert json.loads(lock_content(output))["pid"] == os.getpid()


def test_killed_holder_leaves_a_stale_lock_that_is_broken(
    output: Path, holders: list[LockHolder]
) -> None:
    holder = hold(holders, output)
    started_at = json.loads(lock_content(output))["started_at"]
    os.kill(holder.pid, signal.SIGKILL)
    holder.process.wait(timeout=5)
    with RunLock(output, wait=0) as lock:  # the kernel dropped the flock with the process
        assert lock.broken == (
            f"broke stale lock of pid {holder.pid} on {socket.gethostname()} (started {started_at})"
        )


def test_stale_file_with_dead_pid(output: Path) -> None:
    pid = dead_pid()
    path = output / ".crawler" / "lock"
    path.parent.mkdir(parents=True)
    host = socket.gethostname()
    path.write_text(json.dumps({"pid": pid, "host": host, "started_at": "2025-04-20T02:30:00"}))
    with RunLock(output) as lock:
        assert (
            lock.broken == f"broke stale lock of pid {pid} on {host} (started 2025-04-20T02:30:00)"
        )


def test_unlocked_file_naming_a_live_pid_does_not_block(output: Path) -> None:
    path = output / ".crawler" / "lock"
    path.parent.mkdir(parents=True)
    host = socket.gethostname()
    path.write_text(json.dumps({"pid": os.getppid(), "host": host, "started_at": "x"}))
    with RunLock(output) as lock:
        assert lock.broken == (
            f"broke lock left by pid {os.getppid()} on {host} (started x), "
            "whose pid now belongs elsewhere"
        )


def test_other_host_without_flock_is_taken(output: Path) -> None:
    path = output / ".crawler" / "lock"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"pid": 4242, "host": "elsewhere", "started_at": "t0"}))
    with RunLock(output) as lock:
        assert lock.broken == (
            "broke lock left by pid 4242 on elsewhere (started t0), which no longer holds it"
        )


def test_other_host_with_flock_held_is_busy(output: Path, holders: list[LockHolder]) -> None:
    hold(holders, output)
    # Whatever the file says, the flock decides: rewrite it as if another host held it.
    (output / ".crawler" / "lock").write_text(
        json.dumps({"pid": 1, "host": "elsewhere", "started_at": "t0"})
    )
    with pytest.raises(LockBusyError) as caught:
        RunLock(output).acquire()
    assert "pid 1 on elsewhere (started t0)" in str(caught.value)


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff\xfe garbage",
        b"{not json",
        b"[1, 2, 3]",
        b'{"pid": "twelve", "host": 7}',
        b'{"pid": -5}',
        b'{"pid": true}',
    ],
)
def test_garbage_content_is_an_unknown_holder(output: Path, content: bytes) -> None:
    path = output / ".crawler" / "lock"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    with RunLock(output) as lock:
        assert lock.broken == "broke a lock left with unreadable content (holder unknown)"
        assert json.loads(lock_content(output))["pid"] == os.getpid()


def test_garbage_content_while_held_names_an_unknown_holder(
    output: Path, holders: list[LockHolder]
) -> None:
    hold(holders, output)
    (output / ".crawler" / "lock").write_bytes(b"\x00garbage")
    with pytest.raises(LockBusyError) as caught:
        RunLock(output).acquire()
    assert caught.value.holder == Holder()
    assert "locked by another crawler run: an unknown process (lock file " in str(caught.value)


def test_what_a_lock_file_says_is_quoted_as_printable_text(
    output: Path, holders: list[LockHolder]
) -> None:
    """The file is anyone's to write: a terminal escape or a newline in it used to reach the
    user's terminal (and the cron log) as it was."""
    hold(holders, output)
    said = {"pid": 7, "host": "evil\x1b[2J\nhost", "started_at": "now\u202e"}
    (output / ".crawler" / "lock").write_text(json.dumps(said))
    with pytest.raises(LockBusyError) as caught:
        RunLock(output).acquire()
    message = str(caught.value)
    assert message.isprintable(), message
    assert "pid 7 on evil\\x1b[2J\\nhost (started now\\u202e)" in message


def test_error_survives_pickling() -> None:
    err = LockBusyError("/x/.crawler/lock", Holder(12, "h", "t"), 1.5)
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err)
    assert copy.holder == Holder(12, "h", "t")


def test_bad_arguments_and_double_acquire(output: Path) -> None:
    with pytest.raises(ValueError, match="wait must be >= 0"):
        RunLock(output, wait=-1)
    with RunLock(output) as lock, pytest.raises(RuntimeError, match="already locked"):
        lock.acquire()


@pytest.mark.parametrize("kind", ["file", "dangling link", "link to a folder"])
def test_a_crawler_folder_that_is_not_one_is_named(output: Path, kind: str) -> None:
    """A file or a link at ``.crawler``: the error names it and says why, where it said
    ``cannot write .../.crawler/lock: File exists`` (and a link to a folder was followed: the
    lock, and everything after it, went where the link led)."""
    output.mkdir()
    folder = output / ".crawler"
    elsewhere = output.with_name("elsewhere")
    if kind == "file":
        folder.write_text("")
    elif kind == "dangling link":
        folder.symlink_to(output / "not-there")
    else:
        elsewhere.mkdir()
        folder.symlink_to(elsewhere)
    with pytest.raises(OutputError) as caught, RunLock(output, wait=0):
        pass
    reason = "not a folder (a file, or a link that leads nowhere): move it away"
    assert str(caught.value) == f"cannot write {folder}: {LINKED if 'link' in kind else reason}"
    assert caught.value.exit_code == 4
    assert not (output / "not-there").exists()
    assert not elsewhere.exists() or not any(elsewhere.iterdir())


# --- the folder the lock protects (issue 25, item 3) ----------------------------------------


def swap_for_a_link(output: Path, elsewhere: Path) -> Path:
    """Move ``output`` aside and put a link to ``elsewhere`` (made) in its place; returns where
    the locked folder went."""
    moved = output.with_name(f"{output.name}.moved")
    output.rename(moved)
    elsewhere.mkdir(exist_ok=True)
    output.symlink_to(elsewhere)
    return moved


def test_the_lock_is_in_the_folder_opened_and_a_swap_is_noticed(tmp_path: Path) -> None:
    output = tmp_path / "out"
    with RunLock(output) as lock:
        assert lock.folder is not None and held_folder(output / ".crawler" / "x") is lock.folder
        assert not lock.folder.replaced()
        moved = swap_for_a_link(output, tmp_path / "other")
        assert lock.folder.replaced()
        with pytest.raises(OutputError) as caught:
            lock.folder.check()
        assert str(caught.value) == f"cannot write into {output}: {REPLACED}"
        # A second lock through the link locks the other folder: the first holds the one moved.
        with RunLock(output, wait=0) as second:
            assert second.locked
        assert json.loads((moved / ".crawler" / "lock").read_bytes())["pid"] == os.getpid()
    assert held_folder(output) is None
    assert (moved / ".crawler" / "lock").read_bytes() == b""


def test_a_file_is_not_written_through_a_link_put_in_place_of_the_output(
    tmp_path: Path,
) -> None:
    output = tmp_path / "out"
    with RunLock(output):
        atomic_write(output / ".crawler" / "state" / "a.json", b"1")
        moved = swap_for_a_link(output, tmp_path / "other")
        with pytest.raises(OutputError, match="no longer the folder this run locked"):
            atomic_write(output / ".crawler" / "state" / "b.json", b"2")
    assert (moved / ".crawler" / "state" / "a.json").read_bytes() == b"1"
    assert list((tmp_path / "other").iterdir()) == []


@pytest.mark.parametrize("when", ["before staging", "before the swap"])
def test_a_branch_is_not_published_through_a_link_put_in_place_of_the_output(
    tmp_path: Path, when: str
) -> None:
    """The staged files and the swap are relative to the locked folder's descriptor; the swap
    is refused once the output's path leads elsewhere, and the staged folder is dropped from
    the locked folder's staging, not looked for through the link."""
    output = tmp_path / "out"
    other = tmp_path / "other"
    with RunLock(output):
        previous = BranchStage(output, "develop")
        previous.write("index.json", b"old")
        previous.publish()
        previous.discard()
        stage = BranchStage(output, "develop")
        if when == "before staging":
            moved = swap_for_a_link(output, other)
        stage.write("index.json", b"new")
        stage.write("pages/zlib/specs.md", b"page")
        if when == "before the swap":
            moved = swap_for_a_link(output, other)
        with pytest.raises(OutputError, match="no longer the folder this run locked"):
            stage.publish()
        stage.discard()
    assert list(other.iterdir()) == []
    assert (moved / "develop" / "index.json").read_bytes() == b"old"
    assert list((moved / ".crawler" / "staging").iterdir()) == []


@pytest.mark.parametrize("what", ["link to a file", "hard link", "dangling link", "folder", "pipe"])
async def test_a_lock_file_that_is_no_regular_file_is_refused(
    output: Path, tmp_path: Path, what: str
) -> None:
    """The lock is written and emptied: through a link it emptied the file the link led to
    (a file outside the output). Whatever is not a regular file there is refused (exit 4),
    left as it is, and nothing is written through it."""
    lock = output / ".crawler" / "lock"
    lock.parent.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    if what == "link to a file":
        lock.symlink_to(victim)
    elif what == "dangling link":
        lock.symlink_to(tmp_path / "gone")
    elif what == "folder":
        lock.mkdir()
    else:
        os.mkfifo(lock)
    with pytest.raises(OutputError) as caught:
        await RunLock(output).acquire_async()
    assert str(caught.value) == (
        f"cannot write {lock}: not a regular file (a link, a folder, a pipe): move it away"
    )
    assert caught.value.exit_code == 4
    assert victim.read_text() == "precious" and not (tmp_path / "gone").exists()
    assert lock.is_symlink() or (lock.exists() and not lock.is_file())  # left as it was


async def test_a_hard_linked_lock_file_is_locked_but_not_written(
    output: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A lock file with another name (a copy made with ``cp -al``) is that file's content
    too: the pid written and emptied would change it. The lock is taken, with a warning, and
    nothing is written; a second run is still kept out."""
    lock = output / ".crawler" / "lock"
    lock.parent.mkdir(parents=True)
    other = tmp_path / "other-name"
    other.write_text("precious")
    lock.hardlink_to(other)
    held = RunLock(output)
    await held.acquire_async()
    try:
        assert held.locked and other.read_text() == "precious"
        with pytest.raises(LockBusyError):
            await RunLock(output).acquire_async()
    finally:
        held.release()
    assert other.read_text() == "precious" and lock.stat().st_nlink == 2
    assert "has other names (hard links): locked without writing to it" in caplog.text
