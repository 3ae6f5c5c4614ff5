"""Streaming a download to its file: hashed and written in batches in a worker thread, its
size bounded as it comes. One piece for every transport that downloads a body (HTTP, S3)."""

from __future__ import annotations

import asyncio
import hashlib
import math
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from ..errors import OutputError
from ..files import Digest
from .transport import MAX_INDEX, Progress, check_size


def time_limit(seconds: float) -> float | None:
    """A time limit as aiohttp and botocore take it: None for none (``.inf`` in the config)."""
    return None if math.isinf(seconds) else seconds


async def stream_to(
    chunks: AsyncIterator[bytes],
    dest: Path,
    location: str,
    limit: int,
    progress: Progress | None,
    write_batch: int,
) -> tuple[int, str]:
    """Write a body (its ``chunks``) to ``dest`` while hashing it, off the event loop.

    A body longer than ``limit`` bytes (once decoded, for a compressed ``Content-Encoding``)
    fails as soon as it is: a runaway or hostile server cannot fill the disk.

    Chunks are gathered into batches of about ``write_batch`` bytes; each batch is hashed and
    written by one call in a worker thread (``hashlib`` and file writes release the GIL), so the
    event loop only reads sockets: hashing 600 MB on the loop would stall every other download.
    """
    digest = hashlib.sha256()
    size = 0
    batch: list[bytes] = []
    pending = 0
    tell = progress or (lambda _: None)
    tell(0)  # before an earlier attempt's file is replaced
    try:
        # On the loop, not in a thread: a download cancelled meanwhile (the branch's root
        # failed, or SIGTERM) would leave the file the thread opened unclosed.
        out = _create(dest)
    except FileExistsError:
        raise OutputError(str(dest), _PUT_BACK) from None
    except OSError as err:
        raise OutputError(str(dest), err.strerror or str(err)) from None
    try:
        async for chunk in chunks:
            batch.append(chunk)
            pending += len(chunk)
            check_size(location, size + pending, limit, MAX_INDEX, "read")
            if pending >= write_batch:
                await asyncio.to_thread(_hash_and_write, digest, out, batch)
                size, batch, pending = size + pending, [], 0
                tell(size)
        if batch:
            await asyncio.to_thread(_hash_and_write, digest, out, batch)
            size += pending
            tell(size)
    finally:
        # Not in a thread either: a download cancelled while it waited for a free one (the
        # batches are flushed: closing is one syscall) would leave the file open.
        out.close()
    return size, digest.hexdigest()


_PUT_BACK = "something was put at this name while it was being replaced: it is never followed"
#: A file the run makes itself: a link or a file planted at its name after the unlink fails the
#: open instead of being followed (and the file it names truncated) or written into.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _create(dest: Path) -> BinaryIO:
    """A new, empty file at ``dest``. An earlier attempt's file is unlinked, not truncated: a
    decoding worker may still have it mapped, and a mapping past a file's end faults."""
    dest.unlink(missing_ok=True)
    return open(os.open(dest, _NEW_FILE, 0o600), "wb")


def _hash_and_write(digest: Digest, out: BinaryIO, chunks: list[bytes]) -> None:
    try:
        for chunk in chunks:
            digest.update(chunk)
            out.write(chunk)
        out.flush()  # what the progress callback is told is on disk must be in the file
    except OSError as err:  # disk full, quota: the output's problem, not the mirror's
        raise OutputError(out.name, err.strerror or str(err)) from None
