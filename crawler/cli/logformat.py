"""How log records are written on stderr: plain lines (``--log-format text``, the default) or
one JSON object a record (``--log-format json``, for log collectors).

A JSON record holds ``time`` (ISO 8601, local time with its offset, to the millisecond),
``level``, ``logger`` and ``message``, then the fields the record carries (``event``,
``branch``, ``source``, ``url``, ``status``, ``bytes``, ...; see
:class:`crawler.sync.reporting.LogReporter`), and ``traceback`` for an internal error. The
line a run ends with (``error: ...``, ``interrupted by SIGINT; ...``) is one such object too
(:func:`told`).
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime

from ..text import printable, without_surrogates

FORMATS = ("text", "json")

#: The attributes every LogRecord has: what is not one of them, a record carries as a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}
_json = False


class TextFormatter(logging.Formatter):
    """A record as a line, where a byte that was not UTF-8 in a path is ``\\xNN``, as in
    messages and JSON results (stderr would write it ``\\udcNN``)."""

    def format(self, record: logging.LogRecord) -> str:
        return without_surrogates(super().format(record))


class JSONFormatter(logging.Formatter):
    """One JSON object a record, on one line; texts as :class:`TextFormatter` writes them."""

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created).astimezone()
        entry = {
            "time": when.isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": without_surrogates(record.getMessage()),
        }
        entry.update(
            (k, without_surrogates(v) if isinstance(v, str) else v)
            for k, v in vars(record).items()
            if k not in _STANDARD
        )
        if record.exc_info:
            entry["traceback"] = without_surrogates(self.formatException(record.exc_info))
        # ASCII, other characters as \u escapes: valid JSON whatever stderr's encoding.
        return json.dumps(entry, default=str)


def setup_logging(quiet: bool, verbose: bool, log_format: str) -> None:
    """Log to stderr: warnings with ``--quiet``, debug with ``--verbose``, info otherwise."""
    global _json
    _json = log_format == "json"
    level = logging.WARNING if quiet else logging.DEBUG if verbose else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    if _json:
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("crawler")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def json_logs() -> bool:
    return _json


def told(line: str) -> str:
    """A line for the user on stderr as the logs are written: itself, or with JSON logs one
    record of the ``crawler`` logger (``error: ...`` an error, ``warning: ...`` and an
    interrupt a warning)."""
    if not _json:  # what it quotes of a document, escaped: a terminal acts on control characters
        return "\n".join(map(printable, line.split("\n")))
    level = logging.ERROR if line.startswith("error:") else logging.INFO
    if line.startswith(("warning:", "interrupted")):
        level = logging.WARNING
    record = logging.LogRecord("crawler", level, "", 0, line, None, None)
    return JSONFormatter().format(record)
