"""A package's page: the reference site's table of its specs (hash, version, variants with the
long ones folded, platform, OS, target, compiler, stacks), with each spec's download location
and dependencies, and the filters and sorting ``site.js`` adds to it.

The table is complete HTML: without JavaScript it is a plain table; the filters only hide rows.
"""

from __future__ import annotations

from html import escape

from ...documents import Index, PackageSummary, SpecDependency, SpecDetail, SpecLinks
from .layout import LETTERS, href, letter_key, page, script_json, text

#: Characters of a hash shown, and naming a spec on its package's page (40 bits: two specs of
#: one package that start alike are as likely as a collision of random 40-bit numbers).
SHORT_HASH = 8
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


class PackagePages:
    """The pages of one index's packages. A spec's dependencies, the stacks of a row, and the
    texts are rendered once and reused: a develop-sized branch has 800,000 dependency edges
    among 60,000 specs, mostly to the same few thousand specs."""

    def __init__(self, index: Index[PackageSummary], specs: dict[str, SpecLinks]) -> None:
        self.index = index
        self.specs = specs
        self._dependencies: dict[str, str] = {}
        self._stacks: dict[tuple[str, ...], tuple[str, str]] = {}
        self._variants: dict[tuple[str, ...], str] = {}

    def page(self, name: str, summary: PackageSummary) -> str:
        """The page of package ``name``."""
        specs = summary.spec_details
        meta = summary.meta
        branch = self.index.branch
        rows = "".join([self._row(spec) for spec in specs])
        head = "".join(
            f'<th data-sort="{i}" aria-sort="none">{label}</th>' for i, label in enumerate(_COLUMNS)
        )
        key = letter_key(name)
        body = (
            f'<nav><a href="../index.html">{text(branch)}</a> &rsaquo; '
            f'<a href="../{LETTERS}/{href(key)}">{text(key)}</a></nav>'
            f"<h1>{text(name)}</h1>"
            f"<p>{meta.num_specs} specs of {len(meta.versions)} versions "
            f"({text(', '.join(meta.versions))}) in {len(meta.stacks)} stacks.</p>"
            f"{_filters(specs)}"
            f'<table id="specs" class="specs"><thead><tr>{head}<th>Download</th>'
            f"<th>Dependencies</th></tr></thead><tbody>{rows}</tbody></table>"
        )
        return page(f"{name} — {branch}", body, root="../")

    def _row(self, spec: SpecDetail) -> str:
        links = self.specs.get(spec.hash)
        stacks, stacks_data = self._stacks_of(spec.stacks)
        family = text(spec.family or "unknown")
        os_, compiler = text(spec.os), text(spec.compiler)
        # Hashes are 32 characters of base32 (decoding refuses others): nothing to escape.
        ident, shown = spec.hash, short(spec.hash)
        known = self._dependencies  # looked up here: 800,000 calls are a second of a large site
        edges = links.dependencies if links else ()
        deps = "".join([known.get(d.hash) or self._dependency(d) for d in edges])
        if deps:
            count = len(edges)
            deps = f'<details class="deps"><summary>{count}</summary>{deps}</details>'
        locations = _location(spec.stacks, links.locations) if links else ""
        return (
            f'<tr id="{shown}" data-stacks="{stacks_data}" data-family="{family}" '
            f'data-os="{os_}" data-compiler="{compiler}">'
            f'<td><code title="{ident}">{shown}</code></td><td>{text(spec.versions[0])}</td>'
            f"<td>{self._variants_of(spec.variants)}</td><td>{text(spec.platform)}</td><td>{os_}</td>"
            f"<td>{text(spec.target)}</td><td>{compiler}</td><td>{stacks}</td>"
            f"<td>{locations}</td><td>{deps}</td></tr>"
        )

    def _variants_of(self, variants: tuple[str, ...]) -> str:
        """A row's variants cell (specs of a package often have the same variants)."""
        found = self._variants.get(variants)
        if found is None:
            found = self._variants[variants] = _variants(variants)
        return found

    def _stacks_of(self, stacks: tuple[str, ...]) -> tuple[str, str]:
        """A row's stacks cell, and its ``data-stacks`` (a JSON list, escaped)."""
        found = self._stacks.get(stacks)
        if found is None:
            found = (text(" ".join(stacks)), text(script_json(list(stacks))))
            self._stacks[stacks] = found
        return found

    def _dependency(self, dep: SpecDependency) -> str:
        """One dependency (name/short hash), linked to its row on its package's page when it
        has one (a row's ``id`` is its :func:`short` hash); remembered."""
        found = self._dependencies.get(dep.hash)
        if found is None:
            shown = f"{text(dep.name)}/{short(dep.hash)}"  # base32: nothing to escape
            if dep.name in self.index.packages:  # href() leaves no character to quote
                link = f"{href(dep.name)}#{short(dep.hash)}"
                found = f"<a href={link}>{shown}</a>"
            else:
                found = f"<span>{shown}</span>"
            self._dependencies[dep.hash] = found
        return found


def short(spec_hash: str) -> str:
    """The start of a hash that names a spec on its package's page (its row's ``id``)."""
    return spec_hash[:SHORT_HASH]


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
        + "".join(f'<option value="{text(v)}">{text(v)}</option>' for v in sorted(choices[key]))
        + "</select></label>"
        for key, label in _FILTERS
    )
    return (
        f'<form class="filters" id="filters" hidden>{selects} '
        f'<output id="shown">{len(specs)} of {len(specs)} specs</output></form>'
    )


def _variants(variants: tuple[str, ...]) -> str:
    shown = [text(v) for v in variants]
    if len(shown) <= UNFOLDED_VARIANTS:
        return " ".join(shown)
    first, rest = " ".join(shown[:UNFOLDED_VARIANTS]), " ".join(shown[UNFOLDED_VARIANTS:])
    return f"<details><summary>{first} … ({len(shown)})</summary>{rest}</details>"


def _location(stacks: tuple[str, ...], locations: dict[str, str]) -> str:
    """Where the spec is downloaded from: its root's copy, else its first stack's (the same
    file in each stack's cache; ``index.json`` has them all). One link, not one per stack: a
    develop-sized site would be 30 MB larger."""
    label = "root" if "root" in locations else next((s for s in stacks if s in locations), None)
    if label is None:
        return ""
    return f'<a href="{escape(locations[label])}">{text(label)}</a>'
