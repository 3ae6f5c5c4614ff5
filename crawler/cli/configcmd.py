"""``crawler config --defaults``: the documented default config, as shipped in the package.

The text printed is ``crawler/config/defaults.yaml``, package data kept byte for byte equal to
the repository's ``config/crawler.yaml`` (a test says so): every key, its default and what it
means. Redirected to a file, it is a config ``crawler sync --config FILE`` takes as it is.
"""

from __future__ import annotations

import argparse
from importlib import resources

from ..errors import UsageError
from .streams import printed

HELP = "print the default config file"
TEXTS = {
    "description": "Print the default config file, every key commented.",
    "epilog": "Save it, edit it and give it to --config: its relative paths (output: ../output) "
    "are resolved against the folder it is saved in. exit codes: 0 printed, 2 usage error, 4 it "
    "could not be written, 141 its reader closed the pipe",
}


def default_config() -> str:
    return resources.files("crawler.config").joinpath("defaults.yaml").read_text("utf-8")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--defaults", action="store_true", help="print the documented default config"
    )


def run(args: argparse.Namespace) -> int:
    if not args.defaults:  # room for `crawler config --show` (the settings in effect) later
        raise UsageError("crawler config: give --defaults to print the default config")
    return printed(default_config(), "the default config")
