"""Standard streams: a command's results written whole on stdout, lines for the user on stderr.

Every command that prints results (``find``, ``log``, ``diff``, ``branches``, ``verify``, ``sync
--dry-run`` and ``--json``, ``config``, ``completion``) prints them through :func:`printed`, so
that each ends the same way when its stdout fails: 141, quietly, when the reader closed the
pipe (``| head``), as a shell reports SIGPIPE; 4 with an error line when it cannot be written (a
full disk). A stdout closed when the process started (``>&-``) was closed on purpose: nothing
is written, and that is no failure.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import select
import signal
import sys
from collections.abc import Callable

from ..errors import ExitCode
from .logformat import told

#: The exit code of a command whose reader closed the pipe, as a shell reports SIGPIPE.
EXIT_SIGPIPE = 128 + signal.SIGPIPE


def _shown_bytes(err: UnicodeError) -> tuple[bytes, int]:
    """Encoding error handler of results: a byte that was not UTF-8 in a path (decoded with
    ``surrogateescape``) goes out as it was, as ``ls`` would print it; a character the
    terminal's encoding lacks (``é`` on an ASCII locale) goes out as a ``\\x``, ``\\u`` escape,
    as Python escapes it on stderr. Either way the results are printed, not a traceback."""
    assert isinstance(err, UnicodeEncodeError)
    text = err.object[err.start : err.end]
    out = bytearray()
    for c in text:
        if "\udc80" <= c <= "\udcff":
            out.append(ord(c) - 0xDC00)
        else:
            out += c.encode("ascii", "backslashreplace")
    return bytes(out), err.end


codecs.register_error("crawler.results", _shown_bytes)


def tell(line: str) -> None:
    """Print a line for the user on stderr (one JSON record with ``--log-format json``). A
    stderr that cannot be written (the cron log's disk full, a closed pipe) loses the line but
    must not change the exit code: an alert on it would say "a bug" where the mirror, the lock
    or a branch is the news."""
    if sys.stderr is None:  # closed when the process started (2>&-): print() would use stdout
        return
    with contextlib.suppress(OSError, ValueError):  # ValueError: closed
        print(told(line), file=sys.stderr, flush=True)


def write_whole(data: str | bytes) -> None:
    """Write ``data`` on stdout, all of it; raises OSError when it cannot be
    (:class:`BrokenPipeError`: the reader closed the pipe).

    Straight to the file, in a loop: with ``PYTHONUNBUFFERED`` (``python -u``, common in
    containers) a write may take part of the data when the reader goes away meanwhile, and the
    text layer drops the rest without a word (the command would exit 0, its results cut
    short); and a stdout left non-blocking by whoever started the command refuses what its
    pipe cannot take yet, which is waited for here. Text is encoded as stdout would, but
    what its encoding cannot hold is escaped, never an error (:func:`_shown_bytes`).
    """
    out = sys.stdout
    if out is None:
        return
    out.flush()
    if isinstance(data, str):
        data = data.encode(out.encoding, "crawler.results")
    try:
        fd = out.fileno()
    except (io.UnsupportedOperation, AttributeError):  # no file: a caller's own stream
        out.buffer.write(data)
        out.flush()
        return
    rest = memoryview(data)
    while rest:
        try:
            rest = rest[os.write(fd, rest) :]
        except BlockingIOError:
            select.select([], [fd], [])


def printed(results: str | bytes | Callable[[], None], what: str, *, needed: bool = True) -> int:
    """Print a command's ``results`` (text, or what writes them), named ``what`` in a message;
    the exit code it leaves: 0 once written; :data:`EXIT_SIGPIPE` when the reader closed the
    pipe; 4 with an error line when stdout cannot be written. Results not ``needed`` are those
    whose command's exit code is its verdict (``verify``, ``sync --json``): their failure is a
    warning and leaves 0, for the caller's code to stand."""
    try:
        if callable(results):
            results()
        else:
            write_whole(results)
    except BrokenPipeError:  # the reader took what it wanted (`| head -1`)
        return ExitCode.OK if not needed else EXIT_SIGPIPE
    except OSError as err:
        kind = "error" if needed else "warning"
        tell(f"{kind}: cannot write {what} to standard output: {err.strerror or err}")
        return ExitCode.FAILED if needed else ExitCode.OK
    return ExitCode.OK
