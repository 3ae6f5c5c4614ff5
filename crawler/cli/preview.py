"""What ``crawler sync --dry-run`` prints: each branch's forecast (see
:mod:`crawler.sync.forecast`), its sources below it, and the exit code a sync would have."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..sync.forecast import BranchForecast

#: How each foreseen status reads.
_SAID = {
    "published": "would be published",
    "partial": "would be published as partial",
    "unchanged": "unchanged",
    "skipped": "skipped",
    "failed": "would fail",
}


def lines(forecasts: Iterable[BranchForecast]) -> Iterator[str]:
    """``branch: what a sync would do (why)``, then a line per source it would read."""
    for forecast in forecasts:
        said = _SAID.get(forecast.status, forecast.status)
        why = f" ({forecast.message})" if forecast.message else ""
        yield f"{forecast.branch}: {said}{why}"
        for source in forecast.sources:
            yield f"  {source.line()}"


def verdict(code: int) -> str:
    """The last line: nothing written, and the exit code a sync would most likely have."""
    return f"dry run, nothing written: a sync now would most likely exit {code}"
