"""Publish: a branch's documents and pages staged, then swapped in whole.

Building and writing a large branch is seconds of synchronous work; :func:`checkpoint` gives
the event loop a turn every few dozen pages, so that a signal stops the run before the swap
(the staging folder is removed, the published branch stays as it was).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from ..build.branch import Built
from ..build.history import extended
from ..documents import History, Index, PackageSummary, Report
from ..errors import CrawlerError
from ..linkfile import Resolving
from ..output.published import PublishedBranch
from ..output.render import encode_chunked, encode_json, render_page
from ..output.site import site_files
from ..output.stage import BranchStage
from ..output.state import PagesDigest

log = logging.getLogger(__name__)

#: Pages written between two checks for a signal (a few milliseconds' work).
PAGES_PER_CHECKPOINT = 50


async def checkpoint() -> None:
    """Give the event loop a turn in a long synchronous stretch, so that a SIGTERM or SIGINT
    that came meanwhile is handled (it cancels the run, raising CancelledError here).

    A signal reaches asyncio through a pipe: one turn polls it and queues the reading of the
    pipe, the next reads it and queues the handler, the third runs the handler before this task
    goes on. So it takes three turns for the cancellation to land here rather than later.
    """
    for _ in range(3):
        await asyncio.sleep(0)


class Written(NamedTuple):
    """What a publish wrote: the SHA-256 of its ``index.json``, the
    :class:`~crawler.output.state.PagesDigest` of its pages (None without), the size of its
    ``links.json``, as the state records them, and whether it was swapped in."""

    index_sha256: str
    pages_sha256: str | None
    links_size: int
    swapped: bool


async def publish_branch(
    output: Path,
    built: Built,
    *,
    with_pages: bool,
    started: float,
    history: History | None,
    keep: int,
    with_site: bool,
) -> Written:
    """Stage and publish the branch ``built``, with its pages or not. The report's end is
    stamped just before it is written (:func:`stamp`, ``started``: the branch's start on the
    monotonic clock). With a ``history`` (the branch's before),
    ``history.json`` is written too: this publish first, at most ``keep`` publishes in all.
    ``with_site``: its site too (``site/``, the ``html`` format), made from those documents.

    It is not swapped in when the published folder already holds exactly these ``index.json``
    and pages, and intact companions: a run stopped (SIGKILL, a power cut) after its swap but
    before it saved the state left it so. Swapping in the same index would replace that run's
    ``changes.json`` by one listing no change.
    """
    index, changes, report, links = built.index, built.changes, built.report, built.links
    branch = index.branch
    stage = BranchStage(output, branch)
    try:
        hashed = hashlib.sha256()  # index.json's: what the state and the history record
        stage.write_chunks("index.json", encode_chunked(index, "packages"), hashed)
        digest = hashed.hexdigest()
        await checkpoint()
        links_hashed = hashlib.sha256()
        links_size = stage.write_chunks("links.json", encode_chunked(links, "specs"), links_hashed)
        links_digest = links_hashed.hexdigest()
        await checkpoint()
        stage.write("changes.json", encode_json(changes))
        pages_digest = await _write_pages(stage, index) if with_pages else None
        written = Written(digest, pages_digest, links_size, swapped=False)
        if PublishedBranch(output, branch).holds(
            digest, pages_digest, links_sha256=links_digest, links_size=links_size, site=with_site
        ):
            return written
        stamp(report, started)
        stage.write("report.json", encode_json(report))
        after = None
        if history is not None:
            after = extended(history, report.finished_at, digest, changes, keep)
            stage.write("history.json", encode_json(after))
        if with_site:
            for i, (relative, content) in enumerate(
                site_files(index, Resolving(links), changes, report, after)
            ):
                if i % PAGES_PER_CHECKPOINT == 0:
                    await checkpoint()
                stage.write(relative, content)
        await checkpoint()
        stage.publish()
    finally:
        stage.discard()
    return written._replace(swapped=True)


async def _write_pages(stage: BranchStage, index: Index[PackageSummary]) -> str:
    """Stage the reference site's pages of ``index``; their :class:`PagesDigest`."""
    pages = PagesDigest()
    for i, (name, summary) in enumerate(index.packages.items()):  # sorted by name
        if i % PAGES_PER_CHECKPOINT == 0:
            await checkpoint()
        page = render_page(name, index.branch, summary).encode()
        stage.write(f"pages/{name}/specs.md", page)
        pages.add(name, page)
    return pages.hexdigest()


def utc_now() -> str:
    """Now, as a report's times are written."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def stamp(report: Report, started: float) -> None:
    """Set the report's end and duration: now, and since ``started`` (``time.monotonic()``)."""
    report.finished_at = utc_now()
    report.duration_seconds = round(time.monotonic() - started, 3)


def after_publish(bookkeeping: Callable[[], None], done: str = "published") -> None:
    """Run bookkeeping that follows a publish (or finding the output ``done`` otherwise): the
    publish stands even if it fails."""
    try:
        bookkeeping()
    except CrawlerError as err:
        log.warning("%s, but %s (the next run redoes it)", done, err)
