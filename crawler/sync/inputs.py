"""Inputs: what one branch is made from (its sources, the filters it is published with, the
fingerprint of what was read), whether its published output is current, and what its last
publish was, as a sync and a dry run (:mod:`.forecast`) both decide them."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from ..build.changes import SpecStacks, spec_stacks_of
from ..build.consolidate import consolidate
from ..config import Config
from ..decode.validate import SourceSummary
from ..documents import IndexFilters
from ..errors import BranchError, CrawlerError
from ..mirror.discovery import Mirror
from ..output.published import PublishedBranch
from ..output.state import BranchState, Store, fingerprint
from .outcome import SourceOutcome

log = logging.getLogger(__name__)

#: How a branch ended (see :mod:`.branch`).
BranchStatus = Literal["published", "partial", "unchanged", "skipped", "refused", "failed"]


def failure_line(branch: str, err: CrawlerError | OSError) -> str:
    """The line a branch that failed ends with (a sync's, a dry run's)."""
    if isinstance(err, BranchError):
        return str(err)
    if isinstance(err, OSError):  # the output as the filesystem has it
        where = f"cannot use {err.filename}: " if err.filename is not None else ""
        return f"branch {branch} failed: {where}{err.strerror or err}"
    return f"branch {branch} failed: {err}"


def current_status(failed: Sequence[SourceOutcome]) -> tuple[BranchStatus, str]:
    """The status and line of a branch whose output is current, its ``failed`` stacks apart."""
    if not failed:
        return "unchanged", "output is current"
    labels = ", ".join(o.source.label for o in failed)
    return "partial", f"output is current, but stacks still fail: {labels}"


def published_filters(config: Config) -> IndexFilters | None:
    """The filters a branch is published with (None: whole), as ``index.json`` states them."""
    f = config.filters  # refs apart: they choose branches, not what a branch holds
    shaped = IndexFilters(
        packages=list(f.packages),
        exclude_packages=list(f.exclude_packages),
        stacks=list(f.stacks),
        exclude_stacks=list(f.exclude_stacks),
    )
    return shaped if shaped != IndexFilters() else None


def inputs_of(
    outcomes: Sequence[SourceOutcome],
    formats: list[str],
    mirror: Mirror,
    filters: IndexFilters | None,
) -> str:
    """A branch's inputs as read (its sources' outcomes, written in ``formats``, published
    with ``filters``): what an unchanged branch has the same of."""
    entries = [o.index_entry() for o in outcomes]
    locations = [o.source.location for o in outcomes]
    return fingerprint(entries, formats, mirror.base, locations, filters)


def is_current(
    output: Path, branch: str, previous: BranchState, inputs: str, formats: list[str]
) -> bool:
    """True when the published branch was made from exactly these inputs and is intact in
    the ``formats`` a run would write."""
    if previous.fingerprint != inputs:
        log.debug("%s: inputs differ from the last publish's", branch)
        return False
    return PublishedBranch(output, branch).intact(previous, formats)


def recorded_spec_stacks(store: Store, branch: str, previous: BranchState) -> SpecStacks | None:
    """The specs (and their stacks) of the last publish, rebuilt from the cached summaries
    of its sources, when its ``index.json`` cannot be read (deleted, damaged): the changes
    of a repair are those since that publish, not a first publish's. None when a summary
    is not in the cache any more."""
    summaries: dict[str, SourceSummary] = {}
    for i, source in enumerate(previous.sources):
        if source.sha256 is None or source.facts is None:  # missing or failed then
            continue
        cached = store.load("root" if i == 0 else "stack", source.sha256)
        if cached is None:
            log.info(
                "%s: the last publish's summaries are gone: comparing against nothing",
                branch,
            )
            return None
        summaries[source.label] = cached.summary
    root = summaries.pop(previous.sources[0].label, None) if previous.sources else None
    if root is None:
        return None
    packages, _ = consolidate(root, summaries)
    log.info("%s: changes are against the last publish's specs, from its summaries", branch)
    return spec_stacks_of(packages)
