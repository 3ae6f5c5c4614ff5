"""``crawler diff A B``: what changed from one published branch to another (two branches, two
snapshots, two copies of one), as a table or JSON Lines. Like ``crawler find``, it only reads,
and starts without the sync's imports (see :mod:`.entry`); the comparison is
:func:`crawler.consume.diff.diff_indexes`.

Its exit code says whether the comparison could be made: 0, differences or none (stderr says
which). With ``--exit-code``, as ``git diff --exit-code``, two branches that differ give 14
(git's 1 is the crawler's internal error).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from ..configfile import CONFIG_ENV
from ..consume.diff import Change, IndexDiff, diff_indexes
from ..consume.load import branch_path, no_gc
from ..errors import ExitCode
from ..files import is_safe_name
from .consumer import add_output_arguments, aligned, output_folder, pointing, rich_table, run_alone
from .streams import printed, tell, write_whole

HELP = "what changed between two published branches"
TEXTS = {
    "description": "Print what changed from the published branch A to B: packages, versions "
    "and specs added and removed, and specs whose record changed (moved between stacks...). "
    "Reads their index.json; writes nothing. With --output or --config, A and B are branches "
    "of that output folder; otherwise a branch name that is no path here is a branch of the "
    "config's output folder (./output without a config).",
    "epilog": "exit codes: 0 compared (with or without differences: stderr says), 1 internal "
    "error, 2 usage or config error, 4 the changes could not be written, 11 A or B is no "
    "published branch, 12 an index.json of a schema_version this crawler does not read (newer), "
    "14 with --exit-code: A and B differ, 15 A and B were published from two mirrors "
    "(see --any-mirror), 16 out of memory, 141 its reader closed the pipe",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    for name, which in (("before", "A"), ("after", "B")):
        parser.add_argument(
            name,
            metavar=which,
            help=f"a published branch folder or its index.json, or a branch name; with "
            f"--output or --config, a branch name ({'the older' if which == 'A' else 'the newer'})",
        )
    add_output_arguments(parser, "A and B are branches of this output folder")
    parser.add_argument(
        "--any-mirror",
        action="store_true",
        help="compare branches published from two mirrors (by default an error, exit 15)",
    )
    parser.add_argument(
        "--exit-code", action="store_true", help="exit 14 when A and B differ, 0 when not"
    )
    parser.add_argument("--json", action="store_true", help="JSON Lines: one change a line")


def run(args: argparse.Namespace) -> int:
    """Run ``crawler diff`` with parsed arguments; returns the exit code, raises a
    :class:`~crawler.errors.CrawlerError` for bad input."""
    before, after, origin = _operands(args)
    with no_gc(), pointing(origin, _WAYS, before, after):
        diff = diff_indexes(before, after, any_mirror=args.any_mirror)
        _KEPT[:] = [diff]
    tell(summary(diff, before, after))
    code = printed(lambda: _write(diff, as_json=args.json), "the changes")
    if code == ExitCode.OK and args.exit_code and diff:
        return ExitCode.DIFFERENT
    return code


#: The ways ``diff`` is told where its branches are, as its errors list them.
_WAYS = (
    "give A and B as branch folders, or as branch names with --output DIR, or with a config "
    f"whose output holds them: --config FILE or {CONFIG_ENV}=FILE"
)


def _operands(args: argparse.Namespace) -> tuple[Path, Path, str]:
    """The folders of A and B, and how they were found. With ``--output`` or ``--config``
    both are branch names; otherwise each is a path, unless no path of that name is here and
    it is a branch's name: then it is a branch of the config's output folder (the config
    read only then)."""
    named = args.output is not None or args.config is not None
    output: Path | None = None
    origin = "A and B name folders, no config was read"
    folders = []
    for given in (args.before, args.after):
        if named or (not os.path.lexists(given) and is_safe_name(given)):
            if output is None:
                output, origin = output_folder(args)
            folders.append(branch_path(output, given))
        else:
            folders.append(Path(given))
    return folders[0], folders[1], origin


def summary(diff: IndexDiff, before: Path, after: Path) -> str:
    """One line saying what changed from ``before`` to ``after``, in numbers."""
    if not diff:
        return f"no differences between {before} and {after}"
    t = diff.totals
    return (
        f"{before} -> {after}: packages +{t.packages_added} -{t.packages_removed} "
        f"~{t.packages_changed}, specs +{t.specs_added:,} -{t.specs_removed:,} "
        f"~{t.specs_changed:,}"
    )


def _write(diff: IndexDiff, *, as_json: bool) -> None:
    out = sys.stdout
    if out is None or not diff:
        return
    if as_json:  # one JSON object a change (see :class:`~crawler.consume.diff.Change`)
        encode = msgspec.json.Encoder().encode
        write_whole(b"".join(encode(change) + b"\n" for change in diff.records()))
    elif out.isatty():
        rows = [_row(change, short=True) for change in diff.records()]
        rich_table(_HEADER, rows, f"{diff.before} -> {diff.after}")
    else:
        write_whole(aligned([_HEADER, *(_row(change, short=False) for change in diff.records())]))


#: What the comparison read, kept until the process ends (as find's ``_KEPT``).
_KEPT: list[object] = []

_COLUMNS = ("change", "name", "version", "hash", "target", "os", "compiler", "detail")
_HEADER = tuple(c.upper() for c in _COLUMNS)
#: How the table's first column writes each kind of change.
_SIGNS = {"added": "+", "removed": "-", "changed": "~"}


def _row(change: Change, short: bool) -> tuple[str, ...]:
    kind, _, what = change.change.partition("_")
    sign = _SIGNS[what] + kind
    spec = change.spec
    if spec is None:
        return (sign, change.name, change.version or "", "", "", "", "", "")
    digest = spec.hash[:7] if short else spec.hash
    return (
        sign,
        change.name,
        change.version or "",
        digest,
        spec.target,
        spec.os,
        spec.shown_compiler,
        _detail(change),
    )


def _detail(change: Change) -> str:
    """What changed in a spec's record; an added or removed spec's stacks."""
    assert change.spec is not None
    if change.change != "spec_changed":  # its stacks but the root, which holds every spec
        stacks = [s for s in change.spec.stacks if s != "root"]
        return "stacks " + ",".join(stacks) if stacks else "root only"
    parts = []
    for field in change.fields:
        if field == "stacks":
            moved = [f"+{s}" for s in change.stacks_added]
            moved += [f"-{s}" for s in change.stacks_removed]
            parts.append(f"stacks {' '.join(moved)}")
        elif isinstance(change.before[field], str):
            parts.append(f"{field} {change.before[field]} -> {getattr(change.spec, field)}")
        else:
            parts.append(f"{field} changed")
    return "; ".join(parts)


def main(argv: Sequence[str]) -> int:
    """``crawler diff ARGV`` on its own, as :mod:`.entry` runs it; returns the exit code."""
    gc.disable()  # as find's: the process ends after this command
    return run_alone("crawler diff", TEXTS, add_arguments, run, argv)
