"""What the consumer's commands (``find``, ``log``, ``diff``) share: which published branch
they read, their tables, and how each runs on its own, started by :mod:`.entry` without the
sync's imports (so the error line and exit code are given here rather than by
:mod:`.command`, which runs them in-process too)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..configfile import CONFIG_ENV, DEFAULT_CONFIG, config_file
from ..consume.load import branch_path
from ..consumer_errors import NotABranchError
from ..errors import CrawlerError, ExitCode, MemoryExhausted, UsageError
from ..text import printable
from .argtypes import FileArgument, FolderArgument, Parser, path
from .streams import tell, write_whole

DEFAULT_OUTPUT = "output"
DEFAULT_BRANCH = "develop"


def add_branch_arguments(parser: argparse.ArgumentParser) -> None:
    """Which published branch a consumer's command reads: ``--output`` (or the config's
    output) and ``--branch``, or ``--in`` a branch folder (see :func:`branch_folder`)."""
    where = parser.add_argument_group("which branch")
    add_output_arguments(
        where, f"output folder (default: the config's output, else ./{DEFAULT_OUTPUT})"
    )
    where.add_argument("--branch", metavar="NAME", help=f"branch (default: {DEFAULT_BRANCH})")
    where.add_argument(
        "--in",
        dest="folder",
        type=path,
        metavar="FOLDER",
        help="a published branch folder instead, e.g. snapshots/develop-2025-04-20",
    )


def add_output_arguments(group: Any, output: str) -> None:
    """``--output`` (helped as ``output``) and ``--config``, the config whose output folder is
    read without it (``group``: a parser or an argument group)."""
    group.add_argument("--output", type=path, action=FolderArgument, metavar="DIR", help=output)
    group.add_argument(
        "--config",
        type=path,
        action=FileArgument,
        metavar="FILE",
        help=f"the config whose output folder to read, without --output (default: "
        f"${CONFIG_ENV}, else ./{DEFAULT_CONFIG} if present)",
    )


def branch_folder(args: argparse.Namespace) -> tuple[Path, str]:
    """The branch folder :func:`add_branch_arguments` named, and how it was found (for a
    message)."""
    if args.folder is not None:
        if args.output is not None or args.branch is not None or args.config is not None:
            raise UsageError("give --in FOLDER, or --output (or --config) and --branch, not both")
        return args.folder, "--in named it, no config was read"
    output, origin = output_folder(args)
    branch = DEFAULT_BRANCH if args.branch is None else args.branch
    return branch_path(output, branch), origin


def output_folder(args: argparse.Namespace) -> tuple[Path, str]:
    """The output folder: ``--output``, else the config's (``--config``, ``$CRAWLER_CONFIG``
    or ``./config/crawler.yaml``), else ``./output``; and how it was found. The config's
    modules are imported only when there is one to read."""
    if args.output is not None:
        return args.output, "--output named the output folder, no config was read"
    found = config_file(args.config)
    if found.path is None:
        return Path(DEFAULT_OUTPUT), f"{found.describe()}, so the output folder is ./output"
    from ..config.load import load_config

    output = load_config(args.config).output_dir
    return output, f"{output} is the output folder of {found.describe()}"


#: The ways ``find`` and ``log`` are told where a branch is, as their errors list them.
BRANCH_WAYS = (
    "point at a branch with --in FOLDER, or --output DIR (and --branch NAME), or a config "
    f"whose output holds it with --config FILE or {CONFIG_ENV}=FILE"
)


@contextmanager
def pointing(origin: str, ways: str, *folders: Path) -> Iterator[None]:
    """A :class:`NotABranchError` about one of ``folders`` says how it was found
    (``origin``) and the ``ways`` to point at another: without them, a user who ran a
    command in another folder than usual learnt only that ``output/develop`` is none."""
    try:
        yield
    except NotABranchError as err:
        if err.path not in map(str, folders):
            raise
        raise NotABranchError(err.path, f"{err.reason}; {origin}; {ways}") from None


def aligned(rows: Sequence[tuple[str, ...]]) -> str:
    """Rows as columns aligned with two spaces between them, one line each, without trailing
    blanks; what is not printable in a cell escaped (:func:`_printable_rows`)."""
    rows = _printable_rows(rows)
    widths = [max(map(len, column)) for column in list(zip(*rows, strict=True))[:-1]]
    line = "  ".join(f"{{:<{width}}}" for width in widths) + "  {}"
    return "".join(line.format(*row).rstrip() + "\n" for row in rows)


def rich_table(columns: Sequence[str], rows: Sequence[tuple[str, ...]], caption: str) -> None:
    """Rows as a table drawn by rich for the terminal on stdout (its width), under a bold
    header. Drawn to text first, then written as any results are (:func:`.streams.write_whole`):
    rich's own writes would fail on what the terminal's encoding lacks (``ü`` on an ASCII
    locale). Cells and caption are plain text, not rich's markup (``[/x]`` in an index would
    fail it)."""
    from rich.console import Console  # only here: about 50 ms to import
    from rich.table import Column, Table
    from rich.text import Text

    caption_text = Text(printable(caption), style="table.caption")
    # A cell too wide for its column folds onto more lines rather than being cut (rich's
    # ellipsis): a narrow terminal must not leave out what the reader looks for.
    folded = (Column(name, overflow="fold") for name in columns)
    table = Table(*folded, caption=caption_text, box=None, header_style="bold")
    for row in _printable_rows(rows):
        table.add_row(*map(Text, row))
    console = Console(file=sys.stdout)
    with console.capture() as drawn:
        console.print(table)
    write_whole(drawn.get())


def _printable_rows(rows: Sequence[tuple[str, ...]]) -> Sequence[tuple[str, ...]]:
    """``rows`` with what is not printable in a cell escaped: a published index is anyone's
    to write, and a terminal acts on control characters (an escape sequence in a compiler's
    name could retitle the window or clear the screen)."""
    if all(all(map(str.isprintable, row)) for row in rows):
        return rows
    return [tuple(map(printable, row)) for row in rows]


def run_alone(
    prog: str,
    texts: dict[str, str],
    add: Callable[[argparse.ArgumentParser], None],
    command: Callable[[argparse.Namespace], int],
    argv: Sequence[str],
) -> int:
    """A consumer's command (find, log, diff) on its own, without the command line's parser: its
    exit code; an error is a line on stderr, a bug its traceback."""
    try:
        parser = Parser(prog=prog, **texts)
        add(parser)
        try:
            args = parser.parse_args(argv)
        except SystemExit as done:  # --help
            return int(done.code or 0)
        return command(args)
    except MemoryError:
        return out_of_memory(prog)
    except CrawlerError as err:  # each class carries its exit code
        tell(f"error: {err.headline}{err}")
        return err.exit_code
    except Exception:
        import traceback

        from .. import __version__

        tell(f"internal error (a bug in crawler {__version__}):\n{traceback.format_exc()}")
        return ExitCode.INTERNAL


#: Where a user who ran out of memory learns how much a command needs.
MEMORY_HINT = "docs/consumers.md, section Memory, says how much each command needs"


def out_of_memory(doing: str) -> int:
    """Say that ``doing`` (``crawler find``) ran out of memory, in one line; its exit code.
    What held the memory is freed by now: the error unwound past it."""
    err = MemoryExhausted(doing, MEMORY_HINT)
    tell(f"error: {err}")
    return err.exit_code
