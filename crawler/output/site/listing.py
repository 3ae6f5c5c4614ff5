"""The output folder's page listing its branches, ``<output>/index.html``: each branch folder
holding an ``index.json``, with its status, size and time from its ``report.json``, linked to
its site (``<branch>/site/index.html``) or, without one, to its ``index.json``.

Written after a run that published a branch with a site (atomically: a reader sees the old
page or the new one). It is the crawler's file, as ``.crawler/`` is (both are
:data:`~crawler.files.OUTPUT_OWN`): no ref so named becomes a branch.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import msgspec

from ...documents import IndexStats
from ...errors import OutputError
from ...files import branch_name_problem, read_regular
from ..atomic import atomic_write
from . import SITE, asset
from .layout import href, number, table, text

log = logging.getLogger("crawler")

#: The listing's file name in the output folder.
LISTING = "index.html"


class Source(msgspec.Struct, frozen=True, gc=False):
    manifest: str = ""  # a v3 index's manifest: a view's is in a folder of the view's name


class Summary(msgspec.Struct, frozen=True, gc=False):
    """What the listing shows of a branch's ``report.json``."""

    status: str = ""
    finished_at: str = ""
    stats: IndexStats | None = None
    sources: list[Source] = []


#: A ref named as Spack names its releases, and as cache.spack.io names develop's snapshots.
_RELEASE = re.compile(r"v\d+(\.\d+)*")
_SNAPSHOT = re.compile(r".+-\d{4}-\d{2}-\d{2}")
_VIEW = re.compile(r".*/manifests/index/[^/]+/index\.manifest\.json")


def kind(name: str, summary: Summary) -> str:
    """What a branch is: a view of a plain build cache (its index's manifest is under
    ``manifests/index/<view>/``), a release, a snapshot, or another ref."""
    if any(_VIEW.fullmatch(source.manifest) for source in summary.sources):
        return "view"
    if _RELEASE.fullmatch(name):
        return "release"
    return "snapshot" if _SNAPSHOT.fullmatch(name) else "ref"


def _summary(folder: Path) -> Summary:
    try:
        return msgspec.json.decode(read_regular(folder / "report.json"), type=Summary)
    except (OSError, msgspec.DecodeError):
        return Summary()


def _row(folder: Path) -> list[str]:
    name = folder.name
    if (folder / SITE / "index.html").is_file():
        link = f'<a href="{href(name, "")}/{SITE}/index.html">{text(name)}</a>'
    else:
        link = f'{text(name)} (<a href="{href(name, "")}/index.json">index.json</a>)'
    summary = _summary(folder)
    stats = summary.stats
    counts = [number(stats.packages), number(stats.specs)] if stats else ["", ""]
    return [link, kind(name, summary), text(summary.status), *counts, text(summary.finished_at)]


def branch_folders(output: Path) -> list[Path]:
    """The published branch folders of ``output``, by name."""
    with os.scandir(output) as entries:
        names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    return [
        output / n
        for n in names
        if branch_name_problem(n) is None and (output / n / "index.json").is_file()
    ]


def listing_page(output: Path) -> str:
    """The listing of ``output``'s branches."""
    rows = [_row(folder) for folder in branch_folders(output)]
    headers = ["Branch", "Kind", "Status", "Packages", "Specs", "Published"]
    style = asset("site.css").decode()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Spack build cache branches</title><style>{style}</style></head>\n"
        f"<body><h1>Branches</h1>{table(headers, rows)}</body></html>\n"
    )


def write_listing(output: Path) -> None:
    """Write ``<output>/index.html`` when a branch has a site (not when a branch folder has
    that name); raises :class:`~crawler.errors.OutputError`."""
    try:
        folders = branch_folders(output)
    except OSError as err:
        raise OutputError(str(output), err.strerror or str(err), "list") from None
    if not any((folder / SITE / "index.html").is_file() for folder in folders):
        return
    target = output / LISTING
    if target.is_dir() or target.is_symlink():
        # A branch an older version published under this name: never removed unasked.
        why = (
            " (a branch so named, which is refused now)" if (target / "index.json").exists() else ""
        )
        log.warning(
            "%s: not replaced by the list of branches: it is not the crawler's%s; remove it for "
            "the list to be written",
            target,
            why,
        )
        return
    atomic_write(target, listing_page(output).encode())
