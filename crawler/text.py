"""Text in messages: what a server, a document or a user wrote, as a message, a log line or a
report may show it (escaped, not too long), and counts in words."""

from __future__ import annotations

#: The most characters of a server's text (a header, an error's body) a message quotes.
SHOWN_LIMIT = 300


def shown(text: str, limit: int = SHOWN_LIMIT) -> str:
    """A server's text as a message may quote it: at most ``limit`` characters, and anything
    not printable escaped (control and bidi characters, which a terminal would act on, and
    the surrogates that stand for bytes that were not UTF-8, which JSON cannot hold)."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text):,} characters)"
    return printable(text)


def printable(text: str) -> str:
    """``text`` with anything not printable escaped, as :func:`shown` does, whatever its
    length: what a terminal may be given of a document someone else wrote."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escaped(c) for c in text)


def counted(n: int, word: str) -> str:
    """``1 spec``, ``2 specs``, ``1,234 specs``: a count in a message."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


_UNITS = ("B", "kB", "MB", "GB", "TB")


def byte_size(size: str) -> str:
    """A tarball's size (``index.json``'s byte count) as a reader takes it in, in decimal
    units: ``88 B``, ``12.3 MB``; ``-`` where it is unknown (anything but a byte count)."""
    if not (size.isascii() and size.isdigit()):
        return "-"
    count = int(size)
    value, unit = float(count), 0
    while unit < len(_UNITS) - 1 and round(value, 1) >= 1000:  # 999,999 bytes: 1.0 MB
        value, unit = value / 1000, unit + 1
    return f"{count} B" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def _escaped(c: str) -> str:
    if "\udc80" <= c <= "\udcff":  # a byte that was not UTF-8 (decoded with surrogateescape)
        return f"\\x{ord(c) - 0xDC00:02x}"
    return ascii(c)[1:-1]


def decode_reason(err: Exception) -> str:
    """Why a document did not decode, as its error says; ``nested too deeply`` for a
    RecursionError (msgspec and json give up on values nested thousands deep so)."""
    return "nested too deeply" if isinstance(err, RecursionError) else str(err)


def without_surrogates(text: str) -> str:
    """``text`` with each lone surrogate escaped, as :func:`shown` escapes it (``\\xNN`` for a
    byte that was not UTF-8 in a path): what UTF-8, and so JSON, can hold."""
    if text.isascii():
        return text
    return "".join(_escaped(c) if "\ud800" <= c <= "\udfff" else c for c in text)
