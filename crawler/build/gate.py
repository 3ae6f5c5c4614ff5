"""The publish gate: a branch is not published when its root has no specs, or when it lost more
than ``publish.max_drop`` of the specs last published (a mirror half-written, or emptied by
mistake, must not empty its consumers' index). ``--force`` lifts it."""

from __future__ import annotations

from ..errors import PublishRefused
from ..text import counted


def check_gate(branch: str, before: int | None, specs: int, max_drop: float) -> None:
    """Raise :class:`~crawler.errors.PublishRefused` for an empty root, or for fewer than
    ``(1 - max_drop)`` times the ``before`` specs published (None: nothing known)."""
    if specs == 0:
        raise PublishRefused(f"branch {branch}: refused to publish: the root index has no specs")
    if before is None:
        return
    if specs < before * (1 - max_drop):
        raise PublishRefused(
            f"branch {branch}: refused to publish: {counted(specs, 'spec')} against {before:,} "
            f"published (a drop of more than {max_drop:.0%}); use --force to publish anyway"
        )
