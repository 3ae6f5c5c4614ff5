"""``crawler log``: a published branch's last publishes, newest first, with what each changed
(its ``history.json``), as a table or JSON Lines. Like ``crawler find``, it only reads, and
starts without the sync's imports (see :mod:`.entry`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import msgspec

from ..consume.load import load_history
from ..documents import ChangeTotals, HistoryEntry
from .argtypes import int_between
from .consumer import BRANCH_WAYS, add_branch_arguments, aligned, branch_folder, pointing, run_alone
from .streams import printed

HELP = "list a published branch's last publishes"
TEXTS = {
    "description": "List the last publishes of a published branch, newest first, with what "
    "each changed. Reads <output>/<branch>/history.json, <output> being --output, else the "
    "config's output folder; writes nothing.",
    "epilog": "exit codes: 0 listed, 1 internal error, 2 usage or config error, 4 the list "
    "could not be written, 11 no published branch there (or one published without a history: "
    "history: 0), 16 out of memory, 141 its reader closed the pipe",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_branch_arguments(parser)
    parser.add_argument(
        "-n",
        "--max-count",
        type=int_between(0),
        metavar="N",
        help="the last N publishes only (0: none, as git log -n 0)",
    )
    parser.add_argument("--json", action="store_true", help="JSON Lines: one publish a line")


def run(args: argparse.Namespace) -> int:
    folder, origin = branch_folder(args)
    with pointing(origin, BRANCH_WAYS, folder):
        history = load_history(folder)
    publishes = history.publishes
    if args.max_count is not None:
        publishes = publishes[: args.max_count]
    text = json_lines(publishes) if args.json else table(publishes)
    return printed(text, "the list")


class Logged(msgspec.Struct, frozen=True, kw_only=True):
    """A publish as ``crawler log --json`` prints it: when, which index, its totals and the
    packages it added and removed (the specs, by hash, are in ``history.json``)."""

    published_at: str
    index_sha256: str
    first_publish: bool
    totals: ChangeTotals
    packages_added: list[str]
    packages_removed: list[str]


def json_lines(publishes: Sequence[HistoryEntry]) -> bytes:
    """One line of JSON a publish (a :class:`Logged`)."""
    encode = msgspec.json.Encoder().encode
    return b"".join(
        encode(
            Logged(
                published_at=p.published_at,
                index_sha256=p.index_sha256,
                first_publish=p.changes.first_publish,
                totals=p.changes.totals,
                packages_added=p.changes.packages_added,
                packages_removed=p.changes.packages_removed,
            )
        )
        + b"\n"
        for p in publishes
    )


def table(publishes: Sequence[HistoryEntry]) -> str:
    rows = [("PUBLISHED", "SPECS", "ADDED", "REMOVED", "PACKAGES")]
    for p in publishes:
        totals = p.changes.totals
        specs = (
            f"{totals.specs_after:,}"
            if p.changes.first_publish
            else (f"{totals.specs_before:,} -> {totals.specs_after:,}")
        )
        packages = f"+{len(p.changes.packages_added)} -{len(p.changes.packages_removed)}"
        rows.append((p.published_at, specs, f"+{totals.added:,}", f"-{totals.removed:,}", packages))
    return aligned(rows)


def main(argv: Sequence[str]) -> int:
    """``crawler log ARGV`` on its own, as :mod:`.entry` runs it; returns the exit code."""
    return run_alone("crawler log", TEXTS, add_arguments, run, argv)
