"""``crawler completion bash|zsh|fish``: a shell completion script, generated from the parser.

shtab writes the script from the command line's own parser, so it offers exactly the commands
and flags ``crawler`` takes; an option that takes a path (config and metrics files, output and
branch folders) is declared with :class:`.argtypes.FileArgument` or
:class:`.argtypes.FolderArgument`, whose ``complete`` shtab reads. shtab is imported only when
a script is asked for (importing it takes longer than printing the script).
"""

from __future__ import annotations

import argparse

from .streams import printed

HELP = "print a shell completion script (bash, zsh or fish)"
TEXTS = {
    "description": "Print crawler's completion script for bash, zsh or fish.",
    "epilog": "bash: source <(crawler completion bash) in ~/.bashrc, or save it as "
    '~/.local/share/bash-completion/completions/crawler. zsh: eval "$(crawler completion '
    'zsh)" in ~/.zshrc after compinit, or save it as _crawler in a folder of $fpath. fish: save '
    "it as ~/.config/fish/completions/crawler.fish. exit codes: 0 printed, 2 usage error, 4 it "
    "could not be written, 141 its reader closed the pipe",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete in")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``crawler completion SHELL``, ``parser`` being the whole command line's: the exit code."""
    import shtab

    script = shtab.complete(parser, shell=args.shell)
    return printed(script, f"the {args.shell} completion script")
