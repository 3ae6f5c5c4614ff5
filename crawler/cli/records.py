"""What ``--json`` makes ``crawler branches``, ``crawler verify`` and ``crawler sync`` print on
stdout: JSON Lines, as ``find``, ``log`` and ``diff`` do, one object a ref, a folder verified, a
branch synced (the fields: ``docs/operations.md``). Logs stay on stderr."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import msgspec

from ..documents import ChangeTotals, IndexStats, Report
from ..mirror.discovery import Discovery
from ..output.workdir import report_path
from ..text import without_surrogates


class RefListed(msgspec.Struct, frozen=True, kw_only=True):
    """A ref of the mirror (``crawler branches --json``): its stacks (root first) and how it
    was found; or, not ``usable``, why it cannot be synced (``problem``)."""

    branch: str
    usable: bool
    stacks: list[str]
    how: str | None
    problem: str | None


class Verified(msgspec.Struct, frozen=True, kw_only=True):
    """The verdict on a branch folder (``crawler verify --json``): ``ok`` when ``problems``
    is empty; ``schema``: whether the JSON Schemas were checked (not with ``--no-schema``);
    ``note``: that the folder is a copy of a branch under another name, or null."""

    path: str
    ok: bool
    schema: bool
    problems: list[str]
    note: str | None = None


class Synced(msgspec.Struct, frozen=True, kw_only=True):
    """A branch a sync took up (``crawler sync --json``), as its report says: ``status``
    (``published``, ``partial``, ``unchanged``, ``skipped``, ``refused``, ``failed``), the
    line the log ends it with, ``error`` when refused or failed, its ``stats`` and a
    publish's ``changes`` (null otherwise), and where its folder (null when there is no
    published branch there) and its report are."""

    branch: str
    status: str
    message: str
    error: str | None
    folder: str | None
    report: str
    stats: IndexStats | None
    changes: ChangeTotals | None
    started_at: str
    finished_at: str
    duration_seconds: float


def listed(discovery: Discovery) -> list[RefListed]:
    """Every ref of ``discovery``, usable first (as ``crawler branches`` lists them)."""
    refs = [
        RefListed(
            branch=ref,
            usable=True,
            stacks=[s.label for s in sources],
            how=discovery.how.get(ref),
            problem=None,
        )
        for ref, sources in discovery.refs.items()
    ]
    return refs + [
        RefListed(branch=ref, usable=False, stacks=[], how=discovery.how.get(ref), problem=why)
        for ref, why in discovery.problems.items()
    ]


def synced(branch: str, status: str, message: str, report: Report, output: Path) -> Synced:
    folder = output / branch
    return Synced(
        branch=branch,
        status=status,
        message=message,
        error=report.error,
        folder=str(folder) if (folder / "index.json").is_file() else None,
        report=str(report_path(output, branch)),
        stats=report.stats or None,
        changes=report.changes or None,
        started_at=report.started_at,
        finished_at=report.finished_at,
        duration_seconds=report.duration_seconds,
    )


def json_lines(records: Iterable[msgspec.Struct]) -> bytes:
    """One line of JSON a record (keys in the order of the fields), in UTF-8 whatever the
    locale: JSON is exchanged as UTF-8."""
    return b"".join(_json_line(record) + b"\n" for record in records)


def _json_line(record: msgspec.Struct) -> bytes:
    try:
        return _encode(record)
    except UnicodeEncodeError:  # a path given with bytes that are not UTF-8: JSON holds text
        return _encode(_escaped(msgspec.to_builtins(record)))


_encode = msgspec.json.Encoder().encode


def _escaped(value: object) -> object:
    """``value`` (builtins) with its strings :func:`~crawler.text.without_surrogates`."""
    if isinstance(value, str):
        return without_surrogates(value)
    if isinstance(value, dict):
        return {key: _escaped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_escaped(item) for item in value]
    return value
