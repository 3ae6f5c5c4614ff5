"""Heap: how the crawler's main process gives the memory it freed back to the system (glibc;
elsewhere, musl or macOS, these do nothing).

A run's documents and the workers' results are large blocks, freed once used; a branch's
summaries are millions of small objects, freed once it is published. glibc keeps what was freed
in the process unless told otherwise, and the next branch of ``--all`` then starts with the last
one's memory still counted in its RSS, beside the decoding workers it starts.
"""

from __future__ import annotations

import contextlib
import ctypes

_M_MMAP_THRESHOLD = -3  # glibc malloc.h


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def return_large_blocks() -> None:
    """Have glibc give every block of 512 KiB or more back to the system when it is freed.

    By default glibc raises that threshold each time such a block is freed (up to 32 MiB), so
    workers' results and serialised documents are carved from the heap instead, where freed
    space stays in the process: a develop-sized sync then peaks about 40 MB higher. Smaller
    blocks stay on the heap: the 256 KiB blocks sockets are read into are reused from there,
    whereas mapping each anew costs a page fault per page (0.6 s of system time for 600 MB of
    downloads).
    """
    libc = _libc()
    with contextlib.suppress(AttributeError):
        if libc is not None:
            libc.mallopt(_M_MMAP_THRESHOLD, 512 << 10)


def trim() -> None:
    """Give back the heap's free pages, once a branch is done: 25-30 MB of a develop-sized
    branch that the next one's reading would otherwise carry (``--all`` over five
    develop-sized refs, interleaved: peak RSS of the process tree 384-395 MB instead of
    400-419, same wall time). Python's own arenas for small objects are not glibc's to trim:
    one still holding a live object stays whole, and after a branch 80-odd of them hold
    about 20 MB of live objects."""
    libc = _libc()
    with contextlib.suppress(AttributeError):
        if libc is not None:
            libc.malloc_trim(0)
