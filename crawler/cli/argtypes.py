"""Argument types shared by the commands: each refuses a bad value with a usage error (exit 2)
naming it. Light, as the consumer's commands import it (:mod:`.entry`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import UsageError


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so the caller owns the exit code, and takes
    no abbreviated option (``--bran``): a crontab line using one would break, or change its
    meaning, the day an option sharing its start is added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def int_between(low: int, high: int | None = None) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high`` (None: no upper bound)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bounds = f"{low} or more" if high is None else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    return parse


def path(text: str) -> Path:
    """A path, which may not be blank: `crawler verify "$UNSET"` must not mean the working
    directory, nor `--config "$UNSET"` a config file named ".", which is one."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty or blank")
    return Path(text)


class FileArgument(argparse.Action):
    """Stores its value, as argparse's default action does; the completion script completes
    it with a file name."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)

    @property
    def complete(self) -> object:
        """What shtab completes the value with (read only as a script is written)."""
        import shtab

        return shtab.FILE


class FolderArgument(FileArgument):
    """:class:`FileArgument` for a folder."""

    @property
    def complete(self) -> object:
        import shtab

        return shtab.DIRECTORY
