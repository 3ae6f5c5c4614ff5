"""Small SVG plots for the site, drawn here so that no JavaScript library is needed: bars of
counts (specs per stack, target family, OS) and a line of a branch's specs over its publishes.

Every label goes through :func:`html.escape`: they come from the mirror.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

#: Bars shown at most; the rest are summed into one "others" bar.
MAX_BARS = 20
_ROW = 18  # pixels per bar
_LABEL = 170  # pixels left of the bars for their labels
_WIDTH = 560


def bars(title: str, counts: Sequence[tuple[str, int]]) -> str:
    """A horizontal bar chart of ``counts`` (label, count), largest first; empty without counts."""
    items = sorted(counts, key=lambda item: (-item[1], item[0]))
    if len(items) > MAX_BARS:
        rest = sum(count for _, count in items[MAX_BARS - 1 :])
        items = [*items[: MAX_BARS - 1], (f"{len(items) - MAX_BARS + 1} others", rest)]
    if not items:
        return ""
    top = max(count for _, count in items) or 1
    span = _WIDTH - _LABEL - 60
    height = _ROW * len(items) + 4
    rows = []
    for i, (label, count) in enumerate(items):
        y = i * _ROW + 2
        width = max(1, round(span * count / top))
        shown = label if len(label) <= 26 else label[:25] + "…"
        rows.append(
            f'<text x="{_LABEL - 6}" y="{y + 13}" text-anchor="end">{escape(shown)}</text>'
            f'<rect x="{_LABEL}" y="{y + 2}" width="{width}" height="{_ROW - 5}">'
            f"<title>{escape(label)}: {count:,}</title></rect>"
            f'<text x="{_LABEL + width + 4}" y="{y + 13}">{count:,}</text>'
        )
    return _figure(title, _WIDTH, height, "".join(rows))


def line(title: str, points: Sequence[tuple[str, int]]) -> str:
    """A line of ``points`` (date, count), oldest first, evenly spaced; empty without points."""
    if not points:
        return ""
    height, left, right, top_pad, bottom = 180, 60, 20, 12, 36
    low = min(count for _, count in points)
    high = max(count for _, count in points)
    if high == low:
        low, high = max(0, low - 1), high + 1
    inner_w, inner_h = _WIDTH - left - right, height - top_pad - bottom
    step = inner_w / max(1, len(points) - 1)

    def xy(i: int, count: int) -> tuple[float, float]:
        x = left + (i * step if len(points) > 1 else inner_w / 2)
        return round(x, 1), round(top_pad + inner_h * (high - count) / (high - low), 1)

    coords = [xy(i, count) for i, (_, count) in enumerate(points)]
    path = " ".join(f"{x},{y}" for x, y in coords)
    dots = "".join(
        f'<circle cx="{x}" cy="{y}" r="3"><title>{escape(when)}: {count:,} specs</title></circle>'
        for (x, y), (when, count) in zip(coords, points, strict=True)
    )
    axis = (
        f'<text x="{left - 6}" y="{top_pad + 4}" text-anchor="end">{high:,}</text>'
        f'<text x="{left - 6}" y="{top_pad + inner_h + 4}" text-anchor="end">{low:,}</text>'
        f'<text x="{left}" y="{height - 8}">{escape(points[0][0][:10])}</text>'
        f'<text x="{_WIDTH - right}" y="{height - 8}" text-anchor="end">'
        f"{escape(points[-1][0][:10])}</text>"
        f'<line x1="{left}" y1="{top_pad + inner_h}" x2="{_WIDTH - right}" '
        f'y2="{top_pad + inner_h}" class="axis"/>'
    )
    return _figure(title, _WIDTH, height, f'{axis}<polyline points="{path}"/>{dots}')


def _figure(title: str, width: int, height: int, body: str) -> str:
    return (
        f'<figure class="plot"><figcaption>{escape(title)}</figcaption>'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
        f"{body}</svg></figure>"
    )
