"""``crawler completion bash|zsh|fish``: a shell completion script, generated from the parser.

shtab writes the script from the command line's own parser, so it offers exactly the commands
and flags ``crawler`` takes; an option that takes a path (config and metrics files, output and
branch folders) is declared with :class:`.argtypes.FileArgument` or
:class:`.argtypes.FolderArgument`, whose ``complete`` shtab reads. shtab is imported only when
a script is asked for (importing it takes longer than printing the script).
"""

from __future__ import annotations

import argparse
from typing import Any

from .streams import printed

SHELLS = ("bash", "zsh", "fish")
EPILOG = (
    "bash: source <(crawler completion bash) in ~/.bashrc, or save it as "
    '~/.local/share/bash-completion/completions/crawler. zsh: eval "$(crawler completion '
    'zsh)" in ~/.zshrc after compinit, or save it as _crawler in a folder of $fpath. fish: save '
    "it as ~/.config/fish/completions/crawler.fish. exit codes: 0 printed, 2 usage error, 4 it "
    "could not be written, 141 its reader closed the pipe"
)


def add_parser(commands: Any) -> argparse.ArgumentParser:
    """Add ``completion`` to the command line's subparsers (``add_subparsers()``'s action)."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "completion",
        help="print a shell completion script (bash, zsh or fish)",
        description="Print crawler's completion script for bash, zsh or fish.",
        epilog=EPILOG,
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    return parser


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` (the whole command line's) for ``shell``."""
    import shtab

    return shtab.complete(parser, shell=shell)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``crawler completion SHELL``: the exit code."""
    return printed(script(parser, args.shell), f"the {args.shell} completion script")
