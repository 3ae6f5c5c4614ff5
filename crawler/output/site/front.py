"""The branch's front page (totals, stacks, plots, the last publish's changes, the package
list by first character and the search box), the lists of packages by first character, and
the search index in chunks that ``site.js`` loads as scripts (``fetch`` of a local file is
refused from ``file://``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from ...documents import Changes, History, Index, PackageSummary, Report
from . import plots
from .layout import (
    LETTERS,
    PACKAGES,
    SEARCH,
    href,
    letter_key,
    page,
    script_json,
    search_keys,
    table,
    text,
)

#: Packages named in "what changed" before the rest are only counted.
MAX_CHANGED_NAMES = 100


def front_page(
    index: Index[PackageSummary], changes: Changes, report: Report, history: History | None
) -> str:
    """``site/index.html``."""
    branch = index.branch
    body = (
        '<nav><a href="../../index.html">All branches</a></nav>'
        f"<h1>{text(branch)}</h1>{_totals(index, report)}"
        '<form id="search-form" class="search" hidden role="search">'
        '<label>Search packages <input id="search" type="search" autocomplete="off" '
        'placeholder="name, or a word of it"></label><ul id="results"></ul></form>'
        f"<h2>Packages by name</h2>{_letters(index)}"
        f"<h2>Stacks</h2>{_stacks(index)}{_plots(index, history)}"
        f"<h2>What changed at the last publish</h2>{_changes(changes)}"
    )
    return page(f"{branch} — spack build cache", body, root="")


def _totals(index: Index[PackageSummary], report: Report) -> str:
    stats = index.stats
    rows = [
        ["Mirror", text(index.mirror)],
        ["Crawled", text(report.finished_at or report.started_at)],
        ["Status", text(report.status)],
        ["Packages", str(stats.packages)],
        ["Specs", str(stats.specs)],
        ["Stacks read", str(stats.sources - stats.sources_missing)],
        ["Stacks missing", str(stats.sources_missing)],
    ]
    return table(["", ""], rows, cls="totals")


def _letters(index: Index[PackageSummary]) -> str:
    counts = Counter(letter_key(name) for name in index.packages)
    links = "".join(
        f'<li><a href="{LETTERS}/{href(key)}">{text(key)}</a> <small>{count}</small></li>'
        for key, count in sorted(counts.items())
    )
    return f'<ul class="letters">{links}</ul>'


def stack_counts(index: Index[PackageSummary]) -> Counter[str]:
    """Specs per stack."""
    counts: Counter[str] = Counter()
    for summary in index.packages.values():
        counts.update(summary.meta.num_specs_by_stack)
    return counts


def _stacks(index: Index[PackageSummary]) -> str:
    counts = stack_counts(index)
    rows = [[text(label), str(count)] for label, count in sorted(counts.items())]
    return table(["Stack", "Specs"], rows)


def _plots(index: Index[PackageSummary], history: History | None) -> str:
    families: Counter[str] = Counter()
    oss: Counter[str] = Counter()
    for summary in index.packages.values():
        for spec in summary.spec_details:
            families[spec.family or "unknown"] += 1
            oss[spec.os] += 1
    figures = [
        plots.bars("Specs per stack", list(stack_counts(index).items())),
        plots.bars("Specs per target family", list(families.items())),
        plots.bars("Specs per OS", list(oss.items())),
    ]
    if history is not None and len(history.publishes) > 1:  # one point is no line
        points = [(p.published_at, p.changes.totals.specs_after) for p in history.publishes]
        figures.append(plots.line("Specs over the last publishes", points[::-1]))
    return f'<div class="plots">{"".join(figures)}</div>'


def _changes(changes: Changes) -> str:
    totals = changes.totals
    if changes.first_publish:
        head = f"<p>First publish: {totals.specs_after} specs.</p>"
    else:
        head = (
            f"<p>{totals.specs_before} → {totals.specs_after} specs: "
            f"{totals.added} added, {totals.removed} removed.</p>"
        )
    by_stack = [
        [text(label), str(c.added), str(c.removed)] for label, c in sorted(changes.by_stack.items())
    ]
    stacks = table(["Stack", "Added", "Removed"], by_stack) if by_stack else ""
    return (
        head
        + _named("Packages added", changes.packages_added, link=True)
        + _named("Packages removed", changes.packages_removed, link=False)
        + stacks
    )


def _named(title: str, names: list[str], *, link: bool) -> str:
    if not names:
        return ""
    shown = [
        f'<a href="{PACKAGES}/{href(n)}">{text(n)}</a>' if link else text(n)
        for n in names[:MAX_CHANGED_NAMES]
    ]
    more = f" and {len(names) - MAX_CHANGED_NAMES} more" if len(names) > MAX_CHANGED_NAMES else ""
    return f"<p>{text(title)} ({len(names)}): {', '.join(shown)}{more}</p>"


def letter_pages(index: Index[PackageSummary]) -> Iterator[tuple[str, str]]:
    """``letters/<key>.html``: the packages whose name starts with ``key``, with their counts."""
    by_key: dict[str, list[str]] = {}
    for name in index.packages:  # sorted
        by_key.setdefault(letter_key(name), []).append(name)
    for key, names in by_key.items():
        rows = [
            [
                f'<a href="../{PACKAGES}/{href(n)}">{text(n)}</a>',
                str(index.packages[n].meta.num_specs),
                text(" ".join(index.packages[n].meta.versions)),
            ]
            for n in names
        ]
        body = (
            f'<nav><a href="../index.html">{text(index.branch)}</a></nav>'
            f"<h1>Packages: {text(key)}</h1>{table(['Package', 'Specs', 'Versions'], rows)}"
        )
        yield f"{LETTERS}/{key}.html", page(f"{key} — {index.branch}", body, root="../")


def search_chunks(index: Index[PackageSummary]) -> Iterator[tuple[str, str]]:
    """``search/<key>.js``: for each key, the packages with a word starting with it and their
    spec counts, as a call ``site.js`` answers (a script loads from ``file://``, JSON would not)."""
    chunks: dict[str, list[tuple[str, int]]] = {}
    for name, summary in index.packages.items():
        for key in search_keys(name):
            chunks.setdefault(key, []).append((name, summary.meta.num_specs))
    for key, entries in sorted(chunks.items()):
        yield f"{SEARCH}/{key}.js", f"crawlerSearch({script_json(key)},{script_json(entries)});\n"
