"""The ``html`` format: a static, self-contained site of a branch, ``<branch>/site/``.

:func:`site_files` gives its files (relative to the branch folder) from the documents a
publish writes; :mod:`.listing` writes the output folder's page listing its branches. The
layout of ``site/`` is described in docs/site.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib.resources import files

from ...documents import Changes, History, Index, PackageSummary, Report, SpecLinks
from .catalog import catalog_page
from .front import front_page, letter_pages, search_chunks
from .layout import ALL, PACKAGES, Frame
from .package import PackagePages

#: The folder of a branch that holds its site.
SITE = "site"
#: The suffixes of the files a site holds (what else is in ``site/`` is not the crawler's).
SITE_SUFFIXES = (".html", ".css", ".js")
#: The static files every site holds, shipped in this package.
ASSETS = ("site.css", "site.js")


def asset(name: str) -> bytes:
    """One of :data:`ASSETS`."""
    return files(__name__).joinpath(name).read_bytes()


def site_files(
    index: Index[PackageSummary],
    specs: Mapping[str, SpecLinks],
    changes: Changes,
    report: Report,
    history: History | None,
) -> Iterator[tuple[str, bytes]]:
    """The files of the branch's site, ``site/...``, one at a time (the package pages last, in
    name order): the caller writes each and may pause between them. ``specs``: each spec's
    dependencies and locations, by hash."""
    frame = Frame(index.branch, report.finished_at or report.started_at)
    yield f"{SITE}/index.html", front_page(index, changes, report, history, frame).encode()
    yield f"{SITE}/{ALL}", catalog_page(index, frame).encode()
    for name in ASSETS:
        yield f"{SITE}/{name}", asset(name)
    for relative, content in (*letter_pages(index, frame), *search_chunks(index)):
        yield f"{SITE}/{relative}", content.encode()
    pages = PackagePages(index, specs, frame)
    for name, summary in index.packages.items():
        yield f"{SITE}/{PACKAGES}/{name}.html", pages.page(name, summary).encode()
