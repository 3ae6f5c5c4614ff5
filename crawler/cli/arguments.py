"""The command line's arguments: the parser of every command, and the settings they give."""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

import msgspec

from .. import __version__
from ..config import Config, load_config, with_overrides
from ..configfile import CONFIG_ENV, DEFAULT_CONFIG
from . import audit, completion, configcmd, find
from . import diff as branch_diff
from . import log as history_log
from .argtypes import FileArgument, FolderArgument, Parser, int_between, path
from .logformat import FORMATS


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None


def _formats(text: str) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    bad = [f for f in items if f not in ("json", "pages", "html")]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"expected json, pages and/or html, got {text!r}")
    return items


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="crawler",
        description="Crawl Spack build-cache mirrors into consolidated JSON indexes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Not required=True: argparse would only say "the following arguments are required".
    commands = parser.add_subparsers(dest="command", parser_class=Parser)
    _add_sync(commands)
    _add_branches(commands)
    _add_verify(commands)
    _add_audit(commands)
    for name, module in (
        ("find", find),
        ("log", history_log),
        ("diff", branch_diff),
        ("config", configcmd),
        ("completion", completion),
    ):
        _add(commands, name, module)
    return parser


def _add(commands: Any, name: str, module: ModuleType) -> argparse.ArgumentParser:
    """The command ``name``, whose texts and arguments are its module's."""
    sub: argparse.ArgumentParser = commands.add_parser(name, help=module.HELP, **module.TEXTS)
    module.add_arguments(sub)
    return sub


def _common(sub: argparse.ArgumentParser) -> None:
    """The options of every command that reads a config and a mirror."""
    sub.add_argument(
        "--config",
        type=path,
        action=FileArgument,
        help=f"YAML config file (default: ${CONFIG_ENV}, else ./{DEFAULT_CONFIG} if present)",
    )
    sub.add_argument("--mirror", help="mirror URL or folder (overrides the config)")
    sub.add_argument(
        "--deadline",
        type=_seconds,
        metavar="SECONDS",
        help="stop the run after this long, as if interrupted (exit 9; default: the "
        "config's deadline, 14400)",
    )
    noise = sub.add_mutually_exclusive_group()
    noise.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    noise.add_argument("-v", "--verbose", action="store_true", help="debug details too")
    sub.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text lines, or one JSON object a record for log collectors (no live display)",
    )


def _add_sync(commands: Any) -> None:
    sync = commands.add_parser(
        "sync",
        help="sync branches into the output folder",
        description="Fetch, validate and consolidate the indexes of branches, then publish them.",
        epilog="exit codes: 0 published, 1 internal error, 2 usage or config error, 3 mirror "
        "unusable, 4 a branch failed or was refused, 5 partial, 6 nothing changed, "
        "7 output locked by another run, 9 deadline passed, 129/130/143 interrupted "
        "(SIGHUP/SIGINT/SIGTERM); --dry-run: 4 or 141 when its forecast cannot be printed",
    )
    sync.add_argument(
        "--branch", action="append", metavar="NAME", help="a ref to sync (repeatable)"
    )
    sync.add_argument("--all", action="store_true", help="sync every ref the mirror lists")
    _common(sync)
    sync.add_argument(
        "--output", action=FolderArgument, help="output folder (overrides the config)"
    )
    _add_outputs(sync)
    _add_publishing(sync)
    sync.add_argument(
        "--dry-run",
        action="store_true",
        help="say what a sync would download and do with each branch, writing nothing "
        "(no lock, state, cache, metrics or output); exits as the sync would",
    )
    sync.add_argument(
        "--json", action="store_true", help="JSON Lines on stdout: one object a branch, at the end"
    )
    _add_filters(sync)


def _add_outputs(sync: argparse.ArgumentParser) -> None:
    """What a sync writes, and how much it reads at once."""
    sync.add_argument(
        "--format",
        type=_formats,
        metavar="json,pages,html",
        help="outputs to write (json is always)",
    )
    sync.add_argument(
        "--prune-formats",
        action="store_true",
        default=None,
        help="publish in exactly these formats, removing others a branch was published in "
        "(by default they are kept)",
    )
    sync.add_argument(
        "--concurrency",
        type=int_between(1, 256),
        metavar="N",
        help="sources downloaded at once, 1-256 (default: the config's concurrency, 8)",
    )
    sync.add_argument(
        "--no-binaries",
        dest="binaries",
        action="store_false",
        default=None,
        help="read no spec manifests: sizes stay '-', no binary is looked for "
        "(the config's binaries: false)",
    )


def _add_publishing(sync: argparse.ArgumentParser) -> None:
    """When a sync publishes a branch, and where it says how the run went."""
    sync.add_argument(
        "--max-failed-stacks",
        type=int_between(0, 10_000),
        metavar="N",
        help=(
            "publish a branch with up to N failed stacks, as partial "
            "(default: the config's publish.max_failed_stacks, 0)"
        ),
    )
    sync.add_argument(
        "--force",
        action="store_true",
        help="lift the publish gate and re-sync immutable refs that are already published",
    )
    sync.add_argument(
        "--metrics",
        action=FileArgument,
        metavar="FILE",
        help="write an OpenMetrics file after the run",
    )


#: The filter flags: each a list of globs that replaces the config's (filters.<key>).
_FILTERS = {
    "package": ("packages", "publish only the packages matching GLOB (repeatable)"),
    "exclude_package": ("exclude_packages", "leave out the packages matching GLOB"),
    "stack": ("stacks", "read only the stacks matching GLOB (the root always is)"),
    "exclude_stack": ("exclude_stacks", "do not read the stacks matching GLOB"),
    "ref": ("refs", "with --all, sync only the refs matching GLOB"),
    "exclude_ref": ("exclude_refs", "with --all, leave out the refs matching GLOB"),
}


def _add_filters(sync: argparse.ArgumentParser) -> None:
    group = sync.add_argument_group(
        "filters", "each replaces the config's filters.<key> list; see docs/configuration.md"
    )
    for dest, (_, text) in _FILTERS.items():
        flag = "--" + dest.replace("_", "-")
        group.add_argument(flag, dest=dest, action="append", metavar="GLOB", help=text)


def _add_branches(commands: Any) -> None:
    branches = commands.add_parser(
        "branches",
        help="list the refs of the mirror and their stacks",
        description="List the refs of the mirror with their stack labels and how each was found.",
        epilog="exit codes: 0 listed, 1 internal error, 2 usage or config error, 3 mirror "
        "unusable, 4 the list could not be written, 9 deadline passed, 129/130/143 "
        "interrupted, 141 its reader closed the pipe",
    )
    _common(branches)
    branches.add_argument("--json", action="store_true", help="JSON Lines: one object a ref")


def _add_verify(commands: Any) -> None:
    verify = commands.add_parser(
        "verify",
        help="re-check a published branch folder",
        description="Check <output>/<branch>: the JSON Schemas of its documents, hash "
        "uniqueness, meta against spec_details, stacks against sources, pages against "
        "index.json, the branch named in its files (the folder's name, or --branch; a folder "
        "whose files all name one other branch is a copy of it, which a note says), and that "
        "it holds nothing a publish does not write. On a terminal, its progress on stderr.",
        epilog="exit codes: 0 all checks hold, 1 internal error, 2 usage error (no branch "
        "folder), 8 problems found (one per line on stdout), 16 out of memory",
    )
    verify.add_argument(
        "path",
        type=path,
        action=FolderArgument,
        help="a published branch folder, e.g. output/develop",
    )
    verify.add_argument(
        "--branch",
        metavar="NAME",
        help="the branch its files must name (default: the folder's name, or the one branch "
        "they all name, for a copy under another name)",
    )
    verify.add_argument(
        "-q", "--quiet", action="store_true", help="print problems only (no progress, no note)"
    )
    verify.add_argument(
        "--json",
        action="store_true",
        help="one JSON object on stdout: the verdict, its problems, the note (no progress)",
    )
    verify.add_argument(
        "--no-schema",
        action="store_true",
        help="skip the JSON Schema check (the slowest one: ~15 s for a 60,000-spec index)",
    )
    verify.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)


def _add_audit(commands: Any) -> None:
    sub = _add(commands, "audit", audit)
    _common(sub)
    sub.add_argument(
        "--concurrency",
        type=int_between(1, 256),
        metavar="N",
        help="binaries looked for at once, 1-256 (default: the config's concurrency, 8)",
    )


def settings(args: argparse.Namespace) -> Config:
    """The config file named (or found), with the flags given applied on top (formats gain
    ``json`` as the config normalises them)."""
    config = load_config(args.config)
    budget = getattr(args, "max_failed_stacks", None)
    given = {key: getattr(args, dest, None) for dest, (key, _) in _FILTERS.items()}
    given = {key: globs for key, globs in given.items() if globs is not None}
    return with_overrides(
        config,
        mirror=args.mirror,
        output=getattr(args, "output", None),
        formats=getattr(args, "format", None),
        concurrency=getattr(args, "concurrency", None),
        binaries=getattr(args, "binaries", None),
        metrics=getattr(args, "metrics", None),
        prune_formats=getattr(args, "prune_formats", None),
        deadline=args.deadline,
        publish=_with(config.publish, max_failed_stacks=budget) if budget is not None else None,
        filters=_with(config.filters, **given) if given else None,
    )


def _with(settings: msgspec.Struct, **values: object) -> dict[str, Any]:
    """A section of the config as data, with ``values`` in place of its own."""
    return {**msgspec.to_builtins(settings), **values}
