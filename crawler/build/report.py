"""Report: what a branch's run found, as ``report.json`` and ``index.json`` state it.

From the sources' outcomes and the consolidated packages: the findings (invalid records,
conflicts, missing and failed stacks, set on the :class:`~crawler.documents.Report`) and the
branch's ``stats``.

The findings are bounded, whatever the mirror sends: each source lists at most
:data:`crawler.decode.validate.INVALID_SHOWN` invalid records, a branch at most
:data:`INVALID_SHOWN` (the first by source order, then hash) and :data:`CONFLICTS_SHOWN`
conflicts; ``invalid_records_total`` and ``conflicts_total`` count them all, as do ``stats``
and each source's ``invalid_records``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Protocol

from ..decode.validate import SourceSummary
from ..documents import (
    Conflict,
    IndexStats,
    InvalidRecord,
    PackageSummary,
    Report,
)

log = logging.getLogger(__name__)

#: Invalid records and conflicts a branch's report lists, at most (the totals are counted apart).
INVALID_SHOWN = 1000
CONFLICTS_SHOWN = 1000


class ReadSource(Protocol):
    """What a report needs of a source once read (a :class:`crawler.sync.outcome.SourceOutcome`)."""

    @property
    def label(self) -> str: ...

    @property
    def status(self) -> str:
        """``missing`` and ``failed`` are reported as such."""

    @property
    def summary(self) -> SourceSummary | None: ...


def record_findings(
    report: Report, outcomes: Sequence[ReadSource], conflicts: list[Conflict]
) -> None:
    """Set the report's invalid records (with their source), conflicts, missing and failed
    stacks: the first of each (see the module docstring), and their totals."""
    summaries = [(o.label, o.summary) for o in outcomes if o.summary is not None]
    listed = itertools.chain.from_iterable(
        ((label, r) for r in summary.invalid) for label, summary in summaries
    )
    report.invalid_records = [
        InvalidRecord(label, r.hash, r.reason)
        for label, r in itertools.islice(listed, INVALID_SHOWN)
    ]
    report.invalid_records_total = sum(summary.invalid_total for _, summary in summaries)
    report.conflicts = conflicts[:CONFLICTS_SHOWN]
    report.conflicts_total = len(conflicts)
    report.missing_stacks = [o.label for o in outcomes if o.status == "missing"]
    report.failed_stacks = [o.label for o in outcomes if o.status == "failed"]


def branch_stats(
    outcomes: Sequence[ReadSource], packages: dict[str, PackageSummary], conflicts: list[Conflict]
) -> IndexStats:
    """The ``stats`` of ``index.json`` (root first in ``outcomes``)."""
    root = outcomes[0].summary
    return IndexStats(
        packages=len(packages),
        specs=sum(p.meta.num_specs for p in packages.values()),
        root_records=root.records if root else 0,
        sources=len(outcomes),
        sources_missing=sum(o.status == "missing" for o in outcomes),
        sources_failed=sum(o.status == "failed" for o in outcomes),
        invalid_records=sum(o.summary.invalid_total for o in outcomes if o.summary),
        conflicts=len(conflicts),
    )
