"""A package's page: the reference site's table of its specs (hash, version, variants with the
long ones folded, platform, OS, target, compiler, stacks), with each spec's download locations
and dependencies, and the filters and sorting ``site.js`` adds to it.

The table is complete HTML: without JavaScript it is a plain table; the filters only hide rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ...documents import PackageSummary, SpecDependency, SpecDetail, SpecLinks
from .layout import LETTERS, attr, href, letter_key, page, script_json, text

#: Variants shown in full; more are folded behind the first few.
UNFOLDED_VARIANTS = 4
_COLUMNS = ("Hash", "Version", "Variants", "Platform", "OS", "Target", "Compiler", "Stacks")
#: The filters above the table: the row attribute each reads, and its label.
_FILTERS = (
    ("stacks", "Stack"),
    ("family", "Target family"),
    ("os", "OS"),
    ("compiler", "Compiler"),
)


def package_page(
    name: str,
    summary: PackageSummary,
    links: Callable[[str], SpecLinks | None],
    known: Callable[[str], bool],
    branch: str,
) -> str:
    """The page of package ``name``; ``links`` gives a spec's links by hash, and ``known``
    whether a package has a page (a dependency's name is a link then)."""
    specs = summary.spec_details
    meta = summary.meta
    rows = "".join(_row(spec, links(spec.hash), known) for spec in specs)
    head = "".join(
        f'<th data-sort="{i}" aria-sort="none">{label}</th>' for i, label in enumerate(_COLUMNS)
    )
    body = (
        f'<nav><a href="../index.html">{text(branch)}</a> &rsaquo; '
        f'<a href="../{LETTERS}/{href(letter_key(name))}">{text(letter_key(name))}</a></nav>'
        f"<h1>{text(name)}</h1>"
        f"<p>{meta.num_specs} specs of {len(meta.versions)} versions "
        f"({text(', '.join(meta.versions))}) in {len(meta.stacks)} stacks.</p>"
        f"{_filters(specs)}"
        f'<table id="specs" class="specs"><thead><tr>{head}<th>Download</th>'
        f"<th>Dependencies</th></tr></thead><tbody>{rows}</tbody></table>"
    )
    return page(f"{name} — {branch}", body, root="../")


def _filters(specs: list[SpecDetail]) -> str:
    """The filter choices (hidden until ``site.js`` makes them work) and the count shown."""
    choices: dict[str, set[str]] = {key: set() for key, _ in _FILTERS}
    for spec in specs:
        choices["stacks"].update(spec.stacks)
        choices["family"].add(spec.family or "unknown")
        choices["os"].add(spec.os)
        choices["compiler"].add(spec.compiler)
    selects = "".join(
        f'<label>{label} <select data-filter="{key}"><option value="">all</option>'
        + "".join(f'<option value="{attr(v)}">{text(v)}</option>' for v in sorted(choices[key]))
        + "</select></label>"
        for key, label in _FILTERS
    )
    return (
        f'<form class="filters" id="filters" hidden>{selects} '
        f'<output id="shown">{len(specs)} of {len(specs)} specs</output></form>'
    )


def _row(spec: SpecDetail, links: SpecLinks | None, known: Callable[[str], bool]) -> str:
    data = (
        f' data-stacks="{attr(script_json(list(spec.stacks)))}"'
        f' data-family="{attr(spec.family or "unknown")}" data-os="{attr(spec.os)}"'
        f' data-compiler="{attr(spec.compiler)}"'
    )
    cells = [
        f'<code title="{attr(spec.hash)}">{text(spec.hash[:8])}</code>',
        text(spec.versions[0]),
        _variants(spec.variants),
        text(spec.platform),
        text(spec.os),
        text(spec.target),
        text(spec.compiler),
        text(" ".join(spec.stacks)),
        _locations(links.locations if links else {}),
        _dependencies(links.dependencies if links else (), known),
    ]
    return f'<tr id="{attr(spec.hash)}"{data}>' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _variants(variants: Iterable[str]) -> str:
    shown = [text(v) for v in variants]
    if len(shown) <= UNFOLDED_VARIANTS:
        return " ".join(shown)
    first = " ".join(shown[:UNFOLDED_VARIANTS])
    return f"<details><summary>{first} … ({len(shown)})</summary>{' '.join(shown)}</details>"


def _locations(locations: dict[str, str]) -> str:
    return " ".join(
        f'<a href="{attr(url)}">{text(label)}</a>' for label, url in sorted(locations.items())
    )


def _dependencies(dependencies: Iterable[SpecDependency], known: Callable[[str], bool]) -> str:
    items = []
    for dep in dependencies:
        shown = f"{text(dep.name)}/{text(dep.hash[:8])}"
        if known(dep.name):
            shown = f'<a href="{href(dep.name)}#{attr(dep.hash)}">{shown}</a>'
        items.append(f'<li title="{text(",".join(dep.type))}">{shown}</li>')
    if not items:
        return ""
    return f"<details><summary>{len(items)}</summary><ul>{''.join(items)}</ul></details>"
