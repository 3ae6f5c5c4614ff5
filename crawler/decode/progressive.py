"""Progressive: decode a root index while it downloads.

The root index is the largest file of a ref, and everything else waits for it. Rather than
decode it once it is all on disk, :class:`RootParts` cuts it into parts of about
:data:`PART_BYTES` as the download writes it (:mod:`crawler.decode.chunks` finds record boundaries
in what is already written) and hands each part to the decoding workers at once; when the last
byte lands, most of the file is decoded already.

Parts are only kept from the first attempt that writes any bytes (an attempt answered 503
writes none): when another attempt starts writing (a retry), its bytes may differ, so the
parts are abandoned before the file is replaced, and the complete file is decoded as any
other; each part job also checks that the file is still the one it was cut from. Parts are
abandoned too when the file does not start with Spack's usual envelope, names a DB version
this tool does not read, or does not end like one. The caller checks the parts' results as it
checks a root's shards (:func:`crawler.decode.root.root_gaps`): a part that does not decode or a
key in two parts sends it back to reading the file whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from . import chunks
from .pool import DecodePool
from .records import SUPPORTED_VERSIONS
from .root import summarize_root_part

#: Target size of a part: a few per worker for a develop root, each a few pieces.
PART_BYTES = 16 << 20


class RootParts:
    """The parts of one root index download, cut and decoding as it is written.

    Give :meth:`written` to the download as its progress callback, then call :meth:`complete`
    once the download is done (or :meth:`abandon` if it is not used).
    """

    def __init__(self, decoder: DecodePool, path: Path, url: str, store: str | None = None) -> None:
        self._decoder = decoder
        self._store = store  # the spec store's folder (see :mod:`.specstore`)
        self._path = path
        self._url = url
        self._fd: int | None = None
        self._file_id: tuple[int, int] | None = None
        self._searched = 0  # how far a search for a cut found none (the file was shorter)
        self._attempts = 0
        self._version: str | None = None
        self._next = 0  # where the next part starts (once the header is read)
        self.ranges: list[tuple[int, int]] = []
        self._jobs: list[asyncio.Future[bytes]] = []
        self.usable = True

    def written(self, size: int) -> None:
        """The download's progress: ``size`` bytes are on disk (0: an attempt starts)."""
        if not self.usable:
            return
        try:
            if size == 0:
                self._attempts += 1
                if self._attempts > 1:  # a retry: its bytes may not be the first attempt's
                    self.abandon()
            elif size >= chunks.HEADER_BYTES and self._read_header():
                self._cut(size)
        except OSError:  # cannot read back what was written: decode it once complete
            self.abandon()

    def complete(self, size: int) -> bool:
        """The download is done and ``size`` bytes long: submit the last part. False when the
        parts cannot be used (they are then abandoned)."""
        if not self.usable or self._attempts != 1:
            self.abandon()
            return False
        try:
            if not self._read_header():
                return False
            end = chunks.records_end(self._open(), size, self._next)
        except OSError:
            end = None
        if end is None:
            self.abandon()
            return False
        self._submit(self._next, end)
        self._close()
        return True

    async def results(self, missing: tuple[str, ...] = ()) -> list[bytes]:
        """What every part returned (in file order); with ``missing``, the parts run again with
        those dependency hashes marked absent. Raises :class:`chunks.BadCut` as a shard does."""
        if missing:
            self._jobs = [self._job(start, stop, missing) for start, stop in self.ranges]
        return list(await asyncio.gather(*self._jobs))

    def abandon(self) -> None:
        """Stop using the parts: cancel their jobs (results still to come are dropped)."""
        self.usable = False
        for job in self._jobs:
            job.cancel()
        self._jobs = []
        self._close()

    def _read_header(self) -> bool:
        """Read the envelope's start once (at least :data:`chunks.HEADER_BYTES` are written, or
        the file is complete); False, with the parts abandoned, if it is not usable."""
        if self._version is not None:
            return True
        found = chunks.header(os.pread(self._open(), chunks.HEADER_BYTES, 0))
        if found is None or found[0] not in SUPPORTED_VERSIONS:
            self.abandon()
            return False
        self._version, self._next = found
        return True

    def _cut(self, size: int) -> None:
        fd = self._open()
        while size - self._next > PART_BYTES:
            # Resume where the last search gave up, not from the target again: a file without
            # boundaries would otherwise be scanned from the same place at every write.
            offset = max(self._next + PART_BYTES, self._searched - chunks.OVERLAP)
            cut = chunks.cut_after(fd, offset, size)
            if cut is None:
                self._searched = size
                return
            self._submit(self._next, cut)
            self._next = cut + 1

    def _submit(self, start: int, stop: int) -> None:
        self.ranges.append((start, stop))
        self._jobs.append(self._job(start, stop, ()))

    def _job(self, start: int, stop: int, missing: tuple[str, ...]) -> asyncio.Future[bytes]:
        assert self._version is not None
        args = (self._version, start, stop, missing, self._file_id, self._store)
        job = asyncio.ensure_future(
            self._decoder.run(summarize_root_part, str(self._path), self._url, *args)
        )
        job.add_done_callback(_retrieve)
        return job

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDONLY)
            stat = os.fstat(self._fd)
            self._file_id = (stat.st_dev, stat.st_ino)
        return self._fd

    def _close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _retrieve(job: asyncio.Future[bytes]) -> None:
    """Mark a part's failure as seen: an abandoned part's error is of no interest."""
    if not job.cancelled():
        job.exception()
