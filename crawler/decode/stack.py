"""Stack: a stack index summarised by one worker (the hashes it holds and what they are).

:func:`summarize_stack` runs in a worker process (see :mod:`crawler.decode.pool`): it reads
the index a piece at a time (:mod:`.read`), checks each record (:mod:`.validate`) and returns a
:class:`.validate.SourceSummary` as msgpack bytes, cheap to send back.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ..files import open_regular
from . import chunks
from .read import (
    DEFAULT_INDEX_LIMIT,
    STACK,
    Overlap,
    Records,
    at_most_invalid,
    distinct,
    read_pieces,
    read_whole,
    typed,
)
from .records import StackRecord
from .specstore import forget_known
from .validate import IDENTITY_SEPARATOR, Checker, SourceSummary


def _stack(version: str, pieces: Iterable[Records[StackRecord]]) -> SourceSummary:
    check = Checker()
    hashes: list[str] = []
    identities: list[str] = []
    records = 0
    for piece in pieces:
        records += len(piece)
        decoded = typed(piece, STACK, check)
        keys = list(decoded)
        nodes = [record.spec for record in decoded.values()]
        archs = [node.arch for node in nodes]
        # Column by column: a few comprehensions over a whole piece cost less than a loop body
        # per record.
        fields = list(
            zip(
                [node.name for node in nodes],
                [node.version for node in nodes],
                [arch.platform for arch in archs],
                [arch.platform_os for arch in archs],
                [a.target if type(a.target) is str else a.target.name for a in archs],  # type: ignore[union-attr]
                strict=True,
            )
        )
        texts = list(map(IDENTITY_SEPARATOR.join, fields))
        spec_hashes, names = [n.hash for n in nodes], {n.name for n in nodes}
        if check.fit(fields) and check.all_pass(keys, spec_hashes, texts, names):
            hashes += keys
            identities += texts
            continue
        for key, node, these, text in zip(keys, nodes, fields, texts, strict=True):
            problem = check.problem(key, node.hash, these)
            if problem:
                check.reject(key, problem)
                continue
            hashes.append(key)
            identities.append(text)
    if distinct(set(hashes), check.keys) != records:
        raise Overlap
    return SourceSummary(version, records, 0, hashes, [], identities, check.invalid, check.unlisted)


def summarize_stack(path: str, url: str, limit: int = DEFAULT_INDEX_LIMIT) -> bytes:
    """Check and reduce a stack index (a worker's job); msgpack of :class:`SourceSummary`.

    A stack index only contributes which hashes it holds and what it says they are, so its
    records' edges and parameters are not read. ``limit`` bounds a gunzipped index.
    """
    forget_known()  # the root's store, of no use to a stack (a root part after reloads it)
    with open(open_regular(path), "rb") as file:
        span = chunks.layout(file.fileno())
        if span is not None:
            try:
                ranges = chunks.pieces(file.fileno(), span, 0, 1)
                pieces = read_pieces(file.fileno(), ranges, span.version, url, STACK)
                with at_most_invalid(url):
                    summary = _stack(span.version, pieces)
                return msgspec.msgpack.encode(summary)
            except (chunks.BadCut, Overlap):
                pass  # read whole below
    with at_most_invalid(url):
        try:
            summary = _stack(*read_whole(path, url, STACK, limit))
        except Overlap:  # a key repeated: its last value counts, as in a dict
            summary = _stack(*read_whole(path, url, STACK, limit, last_first=True))
        return msgspec.msgpack.encode(summary)


def load_summary(data: bytes) -> SourceSummary:
    """Decode what :func:`summarize_stack` returned."""
    return msgspec.msgpack.decode(data, type=SourceSummary)
