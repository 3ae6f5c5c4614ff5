"""``crawler find``: the specs of a published branch that meet a query, as a table or JSON Lines.

It only reads (no lock, no state, nothing written under the output), and starts fast: it
imports what it uses and nothing of the sync (aiohttp, the decoding pool), the config only
when it reads one for its output folder, rich only to draw a table on a terminal, archspec
only for ``--family`` and ``--runs-on``. The
``crawler`` command runs it through :mod:`.entry` without importing the rest of the command
line; :mod:`.command` runs it too, in-process.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import sys
from collections.abc import Callable, Collection, Sequence
from itertools import islice
from pathlib import Path

import msgspec

from ..consume.load import Packages, load_packages, no_gc
from ..consume.query import Found, Match, Query
from ..documents import SpecLinks
from ..errors import ExitCode, UsageError
from ..targets import Targets
from ..text import byte_size, counted, shown
from .consumer import (
    BRANCH_WAYS,
    add_branch_arguments,
    aligned,
    branch_folder,
    pointing,
    rich_table,
    run_alone,
)
from .streams import printed, tell, write_whole

HELP = "find specs in a published branch"
TEXTS = {
    "description": "Print the specs of a published branch that meet every criterion given "
    "(none: every spec). Reads <output>/<branch>/index.json, <output> being --output, else "
    "the config's output folder; writes nothing.",
    "epilog": "exit codes: 0 found, 1 internal error, 2 usage or config error (a bad flag, a "
    "malformed spec, version, compiler or variant, a config that cannot be read), 4 the results "
    "could not be written, 10 no spec matches, 11 no published branch there, 12 its index.json "
    "has a schema_version this crawler does not read (newer), 13 an unknown --runs-on host, "
    "--family or bound of a target range, 16 out of memory, 141 its reader closed the pipe",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "spec",
        nargs="*",
        metavar="SPEC",
        help="a spec in Spack's syntax, in one or several words: a package name or a glob "
        "('py-*'), @version, +variant, ~variant, key=value, key:=a,b, %%gcc@12, target=, os=, "
        "platform=, arch=platform-os-target, /hash (see docs/consumers.md)",
    )
    add_branch_arguments(parser)
    query = parser.add_argument_group("criteria (each narrows the answer)")
    query.add_argument(
        "--version", metavar="V", help="1.26 (and 1.26.x), =1.26 (exactly), 1.2:1.4, 1.2:, :1.4"
    )
    query.add_argument(
        "--target", metavar="T", help="target, exactly: zen3, x86_64_v3; a range: x86_64_v3:"
    )
    query.add_argument("--family", metavar="F", help="target family: x86_64, aarch64, ppc64le")
    query.add_argument(
        "--runs-on",
        metavar="HOST",
        help="binaries that run on this microarchitecture (neoverse_v2; 'host': this machine)",
    )
    query.add_argument("--os", metavar="OS", help="operating system: ubuntu24.04")
    query.add_argument("--platform", metavar="P", help="platform: linux, darwin")
    query.add_argument("--compiler", metavar="C", help="gcc, gcc@13, gcc@12:13")
    query.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="V",
        help="+mpi, ~cuda, debug=true, cuda_arch=80, features:=a,b (repeatable: all must hold)",
    )
    query.add_argument("--stack", metavar="S", help="a stack holding the spec: e4s")
    parser.add_argument("--json", action="store_true", help="JSON Lines: one spec a line")
    parser.add_argument(
        "--links",
        action="store_true",
        help="with --json: each spec's dependencies and locations too (reads links.json)",
    )


#: What the last query read: kept until the process ends (:mod:`.entry` ends it without
#: Python's teardown), as freeing a 60,000-spec index object by object takes a tenth of a
#: second more than the answer.
_KEPT: list[object] = []


def run(args: argparse.Namespace) -> int:
    """Run ``crawler find`` with parsed arguments; returns the exit code, raises a
    :class:`CrawlerError` for bad input."""
    query = Query(  # checked before the index is read
        " ".join(args.spec) if args.spec else None,
        version=args.version,
        target=args.target,
        family=args.family,
        runs_on=args.runs_on,
        os=args.os,
        platform=args.platform,
        compiler=args.compiler,
        variants=args.variant,
        stack=args.stack,
    )
    if args.links and not args.json:
        raise UsageError("--links adds to the JSON lines: give --json too")
    folder, origin = branch_folder(args)
    with no_gc():  # a short run over one acyclic document: a collection would only walk it
        # A table shows no variants: unless a criterion tests them, they are not even read.
        with pointing(origin, BRANCH_WAYS, folder):
            packages = load_packages(folder, variants=args.json or query.asks_variants)
        if args.json:
            return _stream(query, packages, folder, links=args.links)
        found = query.select(packages)
        _KEPT[:] = [packages, found]
        _unknown_targets(found.unknown_targets, folder)
        if not found:
            return _nothing(query, packages, folder)
        return printed(lambda: _write(found, folder), "the results")


#: How many JSON lines :func:`_stream` encodes at once.
_BATCH = 1000


def _stream(query: Query, packages: Packages, folder: Path, *, links: bool) -> int:
    """``--json``: the matches written as they are found, a batch at a time, so that only one
    package's specs and a batch's lines are held beside the index (its targets that archspec
    does not know said last, once all are known); the exit code."""
    targets = Targets()
    matches = query.each(packages, targets)
    batch = list(islice(matches, _BATCH))
    if not batch:
        _unknown_targets(targets.unknown, folder)
        return _nothing(query, packages, folder)
    if links and packages.links_file is None:
        tell(
            f"warning: {folder} has no links (no links.json beside its index, or an index "
            "of schema 1, before them): the lines have no dependencies or locations"
        )

    def write() -> None:
        rest = batch
        while rest:
            write_whole(json_lines(rest, packages.links if links else None))
            rest = list(islice(matches, _BATCH))

    code = printed(write, "the results")
    _unknown_targets(targets.unknown, folder)
    return code


def _unknown_targets(unknown: Collection[str], folder: Path) -> None:
    """Warn of the targets of the index that archspec does not know, if a query met any."""
    if unknown:
        from ..targets import archspec_version

        tell(
            f"warning: {folder} holds targets archspec {archspec_version()} does not know: "
            f"{', '.join(sorted(unknown))} (their specs match no --family, "
            "--runs-on or target range; a newer archspec may know them)"
        )


def _nothing(query: Query, packages: Packages, folder: Path) -> int:
    """Say that nothing matched: a package name that is none, or how much was asked; the exit
    code."""
    if query.name is not None and not query.names(packages):
        close = difflib.get_close_matches(query.name, list(packages), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        tell(f"no package {query.name!r} in {folder}{hint}")
    else:
        narrowing = query.narrowing(packages)
        steps = ", and ".join(f"{shown(asked, 100)}: {count:,}" for count, asked in narrowing)
        why = f": {steps}" if steps else ""  # none when the index has no spec at all
        specs = packages.index.stats.specs
        tell(f"no spec of {folder} meets the criteria (it has {specs:,}){why}")
    return ExitCode.NO_MATCH


def _write(found: Found, folder: Path) -> None:
    """The results on stdout, as a table: rich's on a terminal, else aligned columns (for a pipe
    or a file: full hashes, no colours, nothing cut)."""
    out = sys.stdout
    if out is None:  # closed when the process started (>&-): on purpose
        return
    if out.isatty():
        packages = len({m.name for m in found.matches})
        caption = f"{counted(len(found), 'spec')} of {counted(packages, 'package')} in {folder}"
        rich_table(_HEADER, [_row(m, short=True) for m in found.matches], caption)
    else:
        write_whole(aligned([_HEADER, *(_row(m, short=False) for m in found.matches)]))


def json_lines(matches: Sequence[Match], links: Callable[[str], SpecLinks | None] | None) -> bytes:
    """One JSON object a match: its package's ``name``, its entry of ``spec_details``, then
    its ``links`` (``dependencies``, ``locations``) when the index has them."""
    encode = msgspec.json.Encoder().encode
    lines = []
    for m in matches:
        # Each part encodes as an object ('{...}'): their keys follow the name's, in one.
        line = b'{"name":' + encode(m.name) + b"," + encode(m.spec)[1:-1]
        found = links(m.spec.hash) if links else None
        if found is not None:
            line += b"," + encode(found)[1:-1]
        lines.append(line + b"}\n")
    return b"".join(lines)


_COLUMNS = ("name", "version", "hash", "target", "os", "compiler", "size", "stacks")
_HEADER = tuple(c.upper() for c in _COLUMNS)  # on a terminal as in a pipe


def _row(match: Match, short: bool) -> tuple[str, ...]:
    spec = match.spec
    stacks = ",".join(s for s in spec.stacks if s != "root") or "-"
    digest = spec.hash[:7] if short else spec.hash
    return (
        match.name,
        ",".join(spec.versions),
        digest,
        spec.target,
        spec.os,
        spec.shown_compiler,
        byte_size(spec.size),
        stacks,
    )


def main(argv: Sequence[str]) -> int:
    """``crawler find ARGV`` on its own, as :mod:`.entry` runs it (see :func:`run_alone`)."""
    # The process ends after this command: its one document, acyclic, would only be walked.
    gc.disable()
    return run_alone("crawler find", TEXTS, add_arguments, run, argv)
