"""``site/all.html``: the table of all the branch's packages (name, versions, specs, stacks),
in natural name order, as cache.spack.io's tag pages list theirs. ``site.js`` pages it (a
develop-sized branch has 10,000 rows), filters it by a word of the name and sorts it by a
column; without JavaScript it is one plain table.
"""

from __future__ import annotations

from ...documents import Index, PackageSummary
from .layout import PACKAGES, Frame, href, natural_key, number, page, text

#: Rows shown on one page of the table.
PAGE_ROWS = 100
_COLUMNS = ("Package", "Versions", "Specs", "Stacks")


def stacks_of(summary: PackageSummary) -> int:
    """The stacks a package's specs are in, the root's cache left out (every spec is in it)."""
    return sum(stack != "root" for stack in summary.meta.stacks)


def catalog_page(index: Index[PackageSummary], frame: Frame) -> str:
    """The page of the table of all packages."""
    rows = []
    for name in sorted(index.packages, key=natural_key):
        meta = index.packages[name].meta
        rows.append(
            f'<tr><td><a href="{PACKAGES}/{href(name)}">{text(name)}</a></td>'
            f"<td>{number(len(meta.versions))}</td><td>{number(meta.num_specs)}</td>"
            f"<td>{number(stacks_of(index.packages[name]))}</td></tr>"
        )
    head = "".join(
        f'<th data-sort="{i}" aria-sort="none">{label}</th>' for i, label in enumerate(_COLUMNS)
    )
    body = (
        f"<h1>All packages of {text(index.branch)}</h1>"
        f'<form class="filters" id="catalog-filters" hidden role="search">'
        '<label>Filter <input id="catalog-filter" type="search" autocomplete="off" '
        'placeholder="a word of the name"></label>'
        '<button type="button" id="previous">&lsaquo; Previous</button>'
        f'<output id="catalog-shown">{number(len(rows))} packages</output>'
        '<button type="button" id="next">Next &rsaquo;</button></form>'
        f'<table id="catalog" data-page-rows="{PAGE_ROWS}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    return page(f"All packages — {index.branch}", body, root="", frame=frame)
