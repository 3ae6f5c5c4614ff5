"""The branch's front page (totals, stacks, plots, the last publish's changes, the package
list by first character and the search box), the lists of packages by first character, and
the search index in chunks that ``site.js`` loads as scripts (``fetch`` of a local file is
refused from ``file://``).
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

from ...documents import Changes, History, Index, PackageSummary, Report
from ...mirror.layout import Place
from ...text import counted
from ...urls import redacted
from . import plots
from .layout import (
    ALL,
    LETTERS,
    PACKAGES,
    SEARCH,
    Frame,
    href,
    letter_key,
    natural_key,
    newest_first,
    number,
    page,
    script_json,
    search_keys,
    table,
    text,
)

#: Packages named in "what changed" before the rest are only counted.
MAX_CHANGED_NAMES = 100


def front_page(
    index: Index[PackageSummary],
    changes: Changes,
    report: Report,
    history: History | None,
    frame: Frame,
) -> str:
    """``site/index.html``."""
    branch = index.branch
    body = (
        '<nav><a href="../../index.html">All branches</a></nav>'
        f"<h1>{text(branch)}</h1>{_get_started(branch, report)}{_totals(index, report)}"
        '<form id="search-form" class="search" hidden role="search">'
        '<label>Search packages <input id="search" type="search" autocomplete="off" '
        'placeholder="name, or a word of it"></label><ul id="results"></ul></form>'
        f'<h2>Packages by name</h2>{_letters(index)}<p><a href="{ALL}">All packages</a>, '
        "in a table of their versions, specs and stacks.</p>"
        f"<h2>Stacks</h2>{_stacks(index)}{_plots(index, history)}"
        f"<h2>What changed at the last publish</h2>{_changes(changes)}"
    )
    return page(f"{branch} — spack build cache", body, root="", frame=frame)


def mirror_url(report: Report) -> str | None:
    """The URL of the cache the branch's root index was fetched from, as ``spack mirror add``
    takes it: without credentials, query or fragment (never any in the output); None when the
    report names no root location."""
    sources = report.sources or []
    root = next((s.location or s.url for s in sources if s.label == "root"), "")
    if not root:
        return None
    try:
        cache = Place.of(root).cache
    except ValueError:
        return None
    parts = urlsplit(cache)
    return redacted(urlunsplit(parts._replace(query="", fragment="")))


def mirror_name(url: str, branch: str) -> str:
    """The name ``spack mirror add`` is given: the first label of the mirror's host (``local``
    without one: a ``file://`` URL) and the branch, ``binaries-develop`` for
    ``https://binaries.spack.io/develop``; characters other than letters, digits, ``.``, ``_``
    and ``-`` made ``-``."""
    host = (urlsplit(url).hostname or "local").split(".")[0] or "local"
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{host}-{branch}")


def _get_started(branch: str, report: Report) -> str:
    """The commands that make this branch a mirror of Spack's and trust its keys, with a copy
    button (``site.js`` shows it)."""
    url = mirror_url(report)
    if url is None:
        return ""
    add = f"spack mirror add {shlex.quote(mirror_name(url, branch))} {shlex.quote(url)}"
    commands = f"{add}\nspack buildcache keys --install --trust"
    return (
        '<section class="get-started"><h2>Get started</h2>'
        "<p>Use this branch's binaries: add it as a mirror and trust its signing keys.</p>"
        f'<div class="commands"><pre id="commands"><code>{text(commands)}</code></pre>'
        '<button type="button" class="copy" data-copy="commands" hidden>Copy</button></div>'
        "</section>"
    )


def _totals(index: Index[PackageSummary], report: Report) -> str:
    stats = index.stats
    stacks = sum(s.label != "root" and s.status == "ok" for s in index.sources)
    rows = [
        ["Mirror", text(index.mirror)],
        ["Crawled", text(report.finished_at or report.started_at)],
        ["Status", text(report.status)],
        ["Packages", number(stats.packages)],
        ["Specs", number(stats.specs)],
        ["Stacks read", number(stacks)],
        ["Stacks missing", number(stats.sources_missing)],
    ]
    return table(["", ""], rows, cls="totals")


def _letters(index: Index[PackageSummary]) -> str:
    counts = Counter(letter_key(name) for name in index.packages)
    links = "".join(
        f'<li><a href="{LETTERS}/{href(key)}">{text(key)}</a> <small>{number(count)}</small></li>'
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
    rows = [
        [f'<span class="name">{text(label)}</span>', number(count)]
        for label, count in sorted(counts.items(), key=lambda item: natural_key(item[0]))
    ]
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
        head = f"<p>First publish: {counted(totals.specs_after, 'spec')}.</p>"
    else:
        head = (
            f"<p>{number(totals.specs_before)} → {counted(totals.specs_after, 'spec')}: "
            f"{number(totals.added)} added, {number(totals.removed)} removed.</p>"
        )
    by_stack = [
        [f'<span class="name">{text(label)}</span>', number(c.added), number(c.removed)]
        for label, c in sorted(changes.by_stack.items(), key=lambda item: natural_key(item[0]))
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
    names = sorted(names, key=natural_key)
    shown = [
        f'<a href="{PACKAGES}/{href(n)}">{text(n)}</a>' if link else text(n)
        for n in names[:MAX_CHANGED_NAMES]
    ]
    more = ""
    if len(names) > MAX_CHANGED_NAMES:  # all of them are in changes.json, beside the site
        rest = number(len(names) - MAX_CHANGED_NAMES)
        more = f' and <a href="../changes.json">{rest} more</a>'
    return f"<p>{text(title)} ({number(len(names))}): {', '.join(shown)}{more}</p>"


def letter_pages(index: Index[PackageSummary], frame: Frame) -> Iterator[tuple[str, str]]:
    """``letters/<key>.html``: the packages whose name starts with ``key``, with their counts."""
    by_key: dict[str, list[str]] = {}
    for name in sorted(index.packages, key=natural_key):
        by_key.setdefault(letter_key(name), []).append(name)
    for key, names in sorted(by_key.items()):
        rows = [
            [
                f'<a href="../{PACKAGES}/{href(n)}">{text(n)}</a>',
                number(index.packages[n].meta.num_specs),
                text(" ".join(newest_first(index.packages[n].meta.versions))),
            ]
            for n in names
        ]
        body = (
            f'<nav><a href="../index.html">{text(index.branch)}</a></nav>'
            f"<h1>Packages: {text(key)}</h1>{table(['Package', 'Specs', 'Versions'], rows)}"
        )
        title = f"{key} — {index.branch}"
        yield f"{LETTERS}/{key}.html", page(title, body, root="../", frame=frame)


def search_chunks(index: Index[PackageSummary]) -> Iterator[tuple[str, str]]:
    """``search/<key>.js``: for each key, the packages with a word starting with it and their
    spec counts, as a call ``site.js`` answers (a script loads from ``file://``, JSON would not)."""
    chunks: dict[str, list[tuple[str, int]]] = {}
    for name in sorted(index.packages, key=natural_key):
        summary = index.packages[name]
        for key in search_keys(name):
            chunks.setdefault(key, []).append((name, summary.meta.num_specs))
    for key, entries in sorted(chunks.items()):
        yield f"{SEARCH}/{key}.js", f"crawlerSearch({script_json(key)},{script_json(entries)});\n"
