"""History: a branch's last publishes, carried from one publish to the next in its
``history.json``, so that "what changed this month" has an answer after the ``changes.json``
of each publish has been replaced by the next one's.

The history is read from the published folder (it is published with the branch, whole) and
extended by each publish; an unreadable one (damaged, or not a history) is started anew,
with a warning: it only tells what happened.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec

from ..documents import Changes, History, HistoryEntry
from ..files import read_regular

log = logging.getLogger(__name__)

#: The most bytes of a history read (30 nightly publishes of a develop-sized branch take a
#: few MB; more is no history this crawler wrote).
MAX_HISTORY_BYTES = 256 << 20


def read_history(path: Path, branch: str) -> History:
    """The history at ``path`` (empty when there is none, or it cannot be used)."""
    try:
        history = msgspec.json.decode(read_regular(path, MAX_HISTORY_BYTES), type=History)
    except FileNotFoundError:
        return History(branch=branch, publishes=[])
    except (OSError, msgspec.DecodeError) as err:  # ValidationError included
        log.warning("%s: %s cannot be read (%s): the history starts anew", branch, path, err)
        return History(branch=branch, publishes=[])
    if history.branch != branch:
        log.warning("%s: %s is another branch's history: the history starts anew", branch, path)
        return History(branch=branch, publishes=[])
    return history


def extended(
    history: History, published_at: str, index_sha256: str, changes: Changes, keep: int
) -> History:
    """``history`` with this publish first, and at most ``keep`` publishes in all."""
    entry = HistoryEntry(published_at=published_at, index_sha256=index_sha256, changes=changes)
    return History(branch=history.branch, publishes=[entry, *history.publishes][:keep])
