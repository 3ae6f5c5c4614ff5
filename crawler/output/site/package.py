"""A package's page: the reference site's table of its specs (hash, version, variants with the
long ones folded, platform, OS, target, compiler, stacks), with each spec's download location
and dependencies, and the filters and sorting ``site.js`` adds to it.

The table is complete HTML: without JavaScript it is a plain table, each spec's dependencies
are lines of text (``name/hash``), and under the table the packages they belong to are listed
once, linked to their pages. Unfolded, ``site.js`` turns a spec's dependencies into links to
their rows, from that list. The filters read the rows' cells: the target's title is its
family, and a tab, shown as a space, separates two stacks.

A develop-sized branch is 60,000 rows with 800,000 dependency edges: what rows share is
rendered once (a dependency's line, an OS and compiler's cells, a set of stacks), a row is one
f-string, a page one join, and all of it ASCII (:func:`~.layout.text`), so that the page is a
string of one byte a character, encoded as a copy.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ...consume.versions import version_key
from ...documents import Index, PackageSummary, SpecDependency, SpecDetail, SpecLinks
from ...text import counted
from .catalog import stacks_of
from .layout import (
    LETTERS,
    Frame,
    Texts,
    href,
    html_ascii,
    letter_key,
    natural_key,
    newest_first,
    page,
    size_cell,
    text,
)

#: Characters of a hash shown, and naming a spec on its package's page (40 bits: two specs of
#: one package that start alike are as likely as a collision of random 40-bit numbers).
SHORT_HASH = 8
#: Variants shown in full; more are folded behind the first few.
UNFOLDED_VARIANTS = 4
_COLUMNS = (
    "Hash",
    "Version",
    "Variants",
    "Platform",
    "OS",
    "Target",
    "Compiler",
    "Stacks",
    "Size",
)
_HEAD = "".join(
    f'<th data-sort="{i}" aria-sort="none">{label}</th>' for i, label in enumerate(_COLUMNS)
)
#: What a download link is, by the end of its URL: Spack's names of a spec's files.
_KINDS = (
    (".spec.manifest.json", "spec manifest"),
    (".spec.json.sig", "spec file"),
    (".spec.json", "spec file"),
)
_TAB, _LINE = "\t", "\n"


class PackagePages:
    """The pages of one index's packages. What many rows share is rendered once and reused: a
    spec's dependencies (a develop-sized branch has 800,000 edges to a few thousand specs),
    its platform, OS, target and compiler (a few dozen of them), its stacks (one of a few
    thousand sets), its version."""

    def __init__(
        self, index: Index[PackageSummary], specs: Mapping[str, SpecLinks], frame: Frame
    ) -> None:
        self.index = index
        self.specs = specs
        self.frame = frame
        self._texts = Texts()
        self._dependencies: dict[str, str] = {}  # hash -> its line
        self._names: dict[str, str] = {}  # line -> its package's name
        self._packages = _Linked(index.packages)
        self._arch: dict[tuple[str, str, str, str, str | None], str] = {}
        self._stacks: dict[tuple[str, ...], str] = {}

    def page(self, name: str, summary: PackageSummary) -> str:
        """The page of package ``name``."""
        meta = summary.meta
        branch = self.index.branch
        depends: set[str] = set()
        rows = [self._row(spec, depends) for spec in ordered(summary.spec_details)]
        key = letter_key(name)
        versions = text(", ".join(newest_first(meta.versions)))
        head = (
            f'<nav><a href="../index.html">{text(branch)}</a> &rsaquo; '
            f'<a href="../{LETTERS}/{href(key)}">{text(key)}</a></nav>'
            f"<h1>{text(name)}</h1>"
            f"<p>{counted(meta.num_specs, 'spec')} of {counted(len(meta.versions), 'version')} "
            f"({versions}) in {counted(stacks_of(summary), 'stack')}.</p>"
            f'<form class="filters" id="filters" hidden><output id="shown">{len(rows)} of '
            f"{len(rows)} specs</output></form>"
            f'<table id="specs" class="specs"><thead><tr>{_HEAD}<th>Download</th>'
            f"<th>Dependencies</th></tr></thead><tbody>"
        )
        tail = f"</tbody></table>{self._depends(depends)}"
        title = f"{name} — {branch}"
        return page(title, head, *rows, tail, root="../", frame=self.frame, package=name)

    def _row(self, spec: SpecDetail, depends: set[str]) -> str:
        """One spec's row; its dependencies' lines are added to ``depends``."""
        # Hashes are 32 characters of base32 (decoding refuses others): nothing to escape.
        ident, shown = spec.hash, spec.hash[:SHORT_HASH]
        arch = (spec.platform, spec.os, spec.target, spec.compiler, spec.family)
        cells = self._arch.get(arch) or self._arch_of(arch)
        stacks = self._stacks.get(spec.stacks) or self._stacks_of(spec.stacks)
        links = self.specs.get(ident)
        if links is None:
            location = deps = ""
        else:
            location = _location(spec.stacks, links)
            deps = self._dependencies_of(links.dependencies, depends)
        return (
            f'<tr id="{shown}"><td><code title="{ident}">{shown}</code></td>'
            f"<td>{self._texts[spec.versions[0]]}</td><td>{_variants(spec.variants)}</td>"
            f"{cells}{stacks}{size_cell(spec.size)}<td>{location}</td>"
            f"<td>{deps}</td></tr>"
        )

    def _dependencies_of(self, edges: tuple[SpecDependency, ...], depends: set[str]) -> str:
        """A row's dependencies cell: one ``name/hash`` a line, folded behind their count."""
        if not edges:
            return ""
        known = self._dependencies  # local: 800,000 lookups are a large share of a site
        lines = [known.get(d.hash) or self._dependency(d) for d in edges]
        depends.update(lines)  # the same few thousand strings: quicker than the hashes
        return f'<details class="deps"><summary>{len(edges)}</summary>{_LINE.join(lines)}</details>'

    def _dependency(self, dep: SpecDependency) -> str:
        """One dependency's line (name/short hash; base32: nothing to escape); remembered,
        and its package's name by it."""
        found = self._dependencies[dep.hash] = f"{text(dep.name)}/{short(dep.hash)}"
        self._names[found] = dep.name
        return found

    def _arch_of(self, arch: tuple[str, str, str, str, str | None]) -> str:
        """The cells platform, OS, target and compiler; the target's title is its family
        (which the filters read)."""
        platform, os_, target, compiler, family = map(text, (*arch[:4], arch[4] or "unknown"))
        found = self._arch[arch] = (
            f'<td>{platform}</td><td>{os_}</td><td title="{family}">{target}</td>'
            f'<td class="name">{compiler}</td>'
        )
        return found

    def _stacks_of(self, stacks: tuple[str, ...]) -> str:
        """The stacks cell. Between two stacks a tab, shown as a space: ``site.js`` splits
        the stacks at it (a label may hold a space, never a control character); each stack
        is one span, which does not wrap at its hyphens."""
        names = _TAB.join(f"<span>{text(stack)}</span>" for stack in stacks)
        found = self._stacks[stacks] = f'<td class="names">{names}</td>'
        return found

    def _depends(self, lines: set[str]) -> str:
        """The packages the page's specs depend on, linked to their pages when they have one
        (``site.js`` links each spec's dependencies from these)."""
        if not lines:
            return ""
        names = sorted(set(map(self._names.__getitem__, lines)), key=natural_key)
        shown = ", ".join(map(self._packages.__getitem__, names))
        return f'<h2>Dependencies</h2><p id="depends">{shown}</p>'


class _Linked(dict[str, str]):
    """A package's name as the list of dependencies shows it: linked to its page when it has
    one (``quote`` for the link takes microseconds: once a name, not once a page)."""

    def __init__(self, pages: Collection[str]) -> None:
        super().__init__()
        self._pages = pages

    def __missing__(self, name: str) -> str:
        found = self[name] = (
            f'<a href="{href(name)}">{text(name)}</a>' if name in self._pages else text(name)
        )
        return found


def short(spec_hash: str) -> str:
    """The start of a hash that names a spec on its package's page (its row's ``id``)."""
    return spec_hash[:SHORT_HASH]


def _variants(variants: tuple[str, ...]) -> str:
    """A row's variants cell, the long ones folded. Escaped joined (two calls, rather than
    one a variant: a spec has 20 on average, mostly unlike any other spec's)."""
    if len(variants) <= UNFOLDED_VARIANTS:
        return html_ascii(" ".join(variants))
    first = html_ascii(" ".join(variants[:UNFOLDED_VARIANTS]))
    rest = html_ascii(" ".join(variants[UNFOLDED_VARIANTS:]))
    return f"<details><summary>{first} &hellip; ({len(variants)})</summary>{rest}</details>"


def ordered(specs: list[SpecDetail]) -> list[SpecDetail]:
    """A package's specs as its page lists them: by version, the newest first (Spack's
    order), then by target, then by hash (so that the order is total)."""
    by_target = sorted(specs, key=lambda spec: (spec.target, spec.hash))
    return sorted(by_target, key=lambda spec: version_key(spec.versions[0]), reverse=True)


def _location(stacks: tuple[str, ...], links: SpecLinks) -> str:
    """Where the spec is downloaded from: its tarball, where its spec manifest named one (in
    the cache whose manifest the sync read), else its root's spec manifest or file, else its
    first stack's (the same file in each stack's cache; ``links.json`` has them all). One
    link, not one per stack: a develop-sized site would be 30 MB larger."""
    locations = links.locations
    label = "root" if "root" in locations else next((s for s in stacks if s in locations), None)
    if isinstance(links.tarball, str):
        return download_link(links.tarball, label or "its cache", "tarball")
    if label is None:
        return ""
    return download_link(locations[label], label)


def download_link(url: str, stack: str, kind: str = "") -> str:
    """A link to one of a spec's files in ``stack``'s cache (named in its title), shown as
    ``kind`` (``tarball`` for a tarball, whose v3 blob URL does not say so), else as what the
    URL's end names (``spec manifest``, ``spec file``)."""
    kind = kind or next((k for end, k in _KINDS if url.endswith(end)), "download")
    return f'<a href="{html_ascii(url)}" title="{text(stack)}">{text(kind)}</a>'
