"""The ``crawler`` command line; exit codes are decided here and nowhere else.

=====  =====================================================================
code   meaning
=====  =====================================================================
0      every requested branch was published
1      internal error (a bug: please report it with the traceback)
2      usage or config error (bad flag, config file, unknown or unsafe branch)
3      the mirror could not be read (discovery document unreachable or invalid)
4      one or more branches failed; their previous output is untouched
130    interrupted (SIGINT)
=====  =====================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from . import __version__
from .config import Config, load_config, with_overrides
from .errors import ConfigError, CrawlerError, FetchError, IndexFormatError, UsageError
from .fetch import Sleep
from .progress import LiveReporter, LogReporter, setup_logging, wants_live
from .sync import RunResult, Syncer

log = logging.getLogger("crawler")

EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_USAGE = 2
EXIT_MIRROR = 3
EXIT_BRANCH_FAILED = 4
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so :func:`main` owns the exit code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError(f"must be from 1 to 256, got {value}")
    return value


def _formats(text: str) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    bad = [f for f in items if f not in ("json", "pages")]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"expected json and/or pages, got {text!r}")
    return items


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = _Parser(
        prog="crawler",
        description="Crawl Spack build-cache mirrors into consolidated JSON indexes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--config",
            type=Path,
            help="YAML config file (default: ./config/crawler.yaml if present)",
        )
        sub.add_argument("--mirror", help="mirror URL or folder (overrides the config)")
        noise = sub.add_mutually_exclusive_group()
        noise.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
        noise.add_argument("-v", "--verbose", action="store_true", help="retries and timings too")

    sync = commands.add_parser(
        "sync",
        help="sync branches into the output folder",
        description="Fetch, validate and consolidate the indexes of branches, then publish them.",
    )
    sync.add_argument(
        "--branch", action="append", metavar="NAME", help="a ref to sync (repeatable)"
    )
    sync.add_argument("--all", action="store_true", help="sync every ref the mirror lists")
    common(sync)
    sync.add_argument("--output", help="output folder (overrides the config)")
    sync.add_argument(
        "--format", type=_formats, metavar="json,pages", help="outputs to write (json is always)"
    )
    sync.add_argument("--concurrency", type=_positive_int, metavar="N", help="parallel downloads")

    branches = commands.add_parser(
        "branches",
        help="list the refs of the mirror and their stacks",
        description="List the refs of the mirror's discovery document with their stack labels.",
    )
    common(branches)
    return parser


def _config(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    formats = getattr(args, "format", None)
    if formats is not None and "json" not in formats:
        formats = ("json", *formats)
    return with_overrides(
        config,
        mirror=args.mirror,
        output=getattr(args, "output", None),
        formats=formats,
        concurrency=getattr(args, "concurrency", None),
    )


async def _sync(config: Config, args: argparse.Namespace, sleep: Sleep) -> RunResult:
    wanted = None if args.all else args.branch
    if wants_live(args.quiet):
        with LiveReporter(Console(stderr=True)) as live:
            return await Syncer(config, live, sleep=sleep).run(wanted)
    return await Syncer(config, LogReporter(), sleep=sleep).run(wanted)


async def _branches(config: Config, sleep: Sleep) -> int:
    discovery = await Syncer(config, LogReporter(), sleep=sleep).branches()
    for ref, sources in discovery.refs.items():
        print(f"{ref}\t{' '.join(s.label for s in sources)}")
    for ref, problem in discovery.problems.items():
        print(f"{ref}\tUNUSABLE: {problem}")
    return EXIT_OK


async def main_async(argv: Sequence[str] | None = None, *, sleep: Sleep = asyncio.sleep) -> int:
    """Run the command line inside a running event loop; returns the exit code.

    ``sleep`` is what retries wait with (tests pass one that records instead of sleeping).
    """
    try:
        try:
            args = build_parser().parse_args(argv)
        except SystemExit as done:  # --help and --version
            return int(done.code or 0)
        setup_logging(args.quiet, args.verbose)
        if args.command == "sync" and bool(args.branch) == bool(args.all):
            raise UsageError("crawler sync: give --branch NAME (repeatable) or --all, not both")
        config = _config(args)
        if args.command == "branches":
            return await _branches(config, sleep)
        result = await _sync(config, args, sleep)
    except (UsageError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    except (FetchError, IndexFormatError) as err:
        print(f"error: mirror unusable: {err}", file=sys.stderr)
        return EXIT_MIRROR
    except CrawlerError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BRANCH_FAILED
    except Exception:
        log.exception("internal error (a bug in crawler %s)", __version__)
        return EXIT_INTERNAL
    if result.failed:
        names = ", ".join(b.branch for b in result.failed)
        print(f"error: {len(result.failed)} branch(es) failed: {names}", file=sys.stderr)
        return EXIT_BRANCH_FAILED
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    try:
        return asyncio.run(main_async(argv))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
