"""Heap: how the crawler's processes (the main one and each decoding worker) keep what they
freed from counting in their memory (glibc; elsewhere, musl or macOS, this does nothing).

A run's documents and the workers' results are large blocks, freed once used. glibc keeps what
was freed in the process unless told otherwise, still counted in its RSS while the next ones
are read, beside the decoding workers.
"""

from __future__ import annotations

import contextlib
import ctypes

_M_MMAP_THRESHOLD = -3  # glibc malloc.h
_M_ARENA_MAX = -8


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def tune_heap() -> None:
    """Have glibc give every block of 512 KiB or more back to the system when it is freed, and
    serve every thread from one arena.

    By default glibc raises that threshold each time such a block is freed (up to 32 MiB), so
    workers' results and serialised documents are carved from the heap instead, where freed
    space stays in the process: a develop-sized sync then peaks about 40 MB higher. Smaller
    blocks stay on the heap: the 256 KiB blocks sockets are read into are reused from there,
    whereas mapping each anew costs a page fault per page (0.6 s of system time for 600 MB of
    downloads). Measured (docs/performance.md, 2026-12-01): without it the nightly run's
    process tree peaks at 344-352 MB instead of 290-292 (the target: 350), the cold sync's at
    331-341 MB instead of 310-319. In the decoding workers too (2026-12-02): over ``--all``'s
    five refs the workers peaked at 82-83 MB each instead of 88-108 (the spec store they drop
    when the stacks come is large blocks), the tree at 387-405 MB instead of 430-451, in the
    same time (34.6-40.6 s against 36.7-58.3 s, a loaded machine).

    The threads that consolidate and build a branch (``asyncio.to_thread``) would each get an
    arena of their own, whose freed space stays there between the branches of ``--all``: with
    one arena, ``--all`` over five refs peaked at 331-339 MB summed PSS instead of 348-357 (the
    target: 350), in the same time (docs/performance.md, 2026-12-02): the threads take turns
    at the GIL, and so at the one arena's lock.
    """
    libc = _libc()
    with contextlib.suppress(AttributeError):
        if libc is not None:
            libc.mallopt(_M_MMAP_THRESHOLD, 512 << 10)
            libc.mallopt(_M_ARENA_MAX, 1)
