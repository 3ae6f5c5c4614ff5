"""``crawler audit BRANCH_FOLDER``: check that every binary a published branch lists is still
on the mirror (see :mod:`crawler.ops.audit`). Exit 0 when all are, 17 when some are not (each
named on stdout), as ``docs/operations.md`` lists."""

from __future__ import annotations

import argparse
import sys
from functools import partial

from ..config import Config, with_overrides
from ..consume.load import load_index
from ..errors import ExitCode
from ..mirror.fetch import Fetcher
from ..mirror.retry import Sleep
from ..mirror.signing import gpg_program
from ..ops.audit import Audit, audit_branch
from ..text import counted, printable
from .argtypes import path
from .display import Counting
from .records import json_lines
from .streams import printed, tell

HELP = "check that a published branch's binaries are still on the mirror"
TEXTS = {
    "description": "For each spec of a published branch, in every stack that lists it, read "
    "its spec manifest and look for its tarball on the mirror (v3 caches); check the "
    "signature where the cache publishes keys.",
    "epilog": "exit codes: 0 every binary is there, 1 internal error, 2 usage or config error, "
    "9 deadline passed, 11 no published branch, 16 out of memory, 17 binaries missing or not "
    "sound (one per line on stdout; one that cannot be written is a warning), 129/130/143 "
    "interrupted",
}


def add_arguments(audit: argparse.ArgumentParser) -> None:
    """Its own arguments (the common ones are added by :mod:`.arguments`)."""
    audit.add_argument("path", type=path, help="a published branch folder, e.g. output/develop")
    audit.add_argument(
        "--stack", action="append", metavar="GLOB", help="check only the stacks matching GLOB"
    )
    audit.add_argument(
        "--json", action="store_true", help="one JSON object on stdout: the verdict, its findings"
    )


async def run(args: argparse.Namespace, config: Config, sleep: Sleep) -> int:
    if args.mirror is None:  # the mirror the branch was published from
        config = with_overrides(config, mirror=load_index(args.path).mirror or None)
    progress = Counting() if sys.stderr.isatty() and not args.quiet else None
    async with Fetcher(config, sleep=sleep) as fetcher:
        audit = await audit_branch(
            args.path,
            fetcher,
            gpg=gpg_program(),
            stacks=args.stack or (),
            concurrency=config.concurrency,
            progress=partial(progress.count, "checked") if progress else None,
        )
    if progress:
        progress.end()
    results: str | bytes = json_lines([audit]) if args.json else _lines(audit)
    printed(results, "the findings", needed=False)  # the exit code is the verdict, and stands
    if not args.quiet:
        tell(_verdict(audit))
    return ExitCode.BINARIES_MISSING if audit.findings else ExitCode.OK


def _lines(audit: Audit) -> str:
    return "".join(
        f"{f.name}@{f.version} /{f.hash}\t{f.stack}\t{printable(f.finding)}\t{f.manifest}\n"
        for f in audit.findings
    )


def _verdict(audit: Audit) -> str:
    skipped = (
        f" ({counted(audit.not_checked, 'v2 location')} not checked)" if audit.not_checked else ""
    )
    found = counted(len(audit.findings), "finding") if audit.findings else "every binary is there"
    checked = f"{audit.checked:,} binar{'y' if audit.checked == 1 else 'ies'}"
    return f"{audit.path}: {checked} checked{skipped}: {found}"
