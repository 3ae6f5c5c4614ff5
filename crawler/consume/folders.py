"""Folders: is a folder a published branch folder, and if not, what is it (an output folder,
a part of a branch folder, the crawler's own ``.crawler/``)? The words a consumer is told."""

from __future__ import annotations

from pathlib import Path

from ..output.workdir import STATE_DIR

#: How a message about a folder that is no branch folder ends.
EXAMPLE = "give a published branch folder, such as output/develop"


#: The folders a publish writes in a branch folder (``pages/<package>/``, ``site/packages/``).
_BRANCH_PARTS = ("pages", "site")


def enclosing_branch(folder: Path) -> Path | None:
    """The published branch folder that ``folder`` is a part of (its ``pages`` or ``site``, or
    a folder right in them), or None: a user who gives one is told which folder to give. A
    folder with an ``index.json`` of its own is none (a branch copied into a site's folder)."""
    resolved = folder.resolve()
    if (resolved / "index.json").exists():
        return None
    for part in (resolved, resolved.parent):
        if part.name in _BRANCH_PARTS and (part.parent / "index.json").is_file():
            return part.parent
    return None


def not_a_branch_folder(folder: Path) -> str | None:
    """Why the existing folder ``folder`` cannot be a published branch folder (an output
    folder, a folder a publish wrote in one), or None. Its ``index.json`` is not asked for:
    a branch folder that lost it is a finding of ``crawler verify``."""
    if (folder / STATE_DIR).is_dir() and not (folder / "index.json").exists():
        return f"an output folder, not a branch folder (give one of its branches{_such(folder)})"
    branch = enclosing_branch(folder)
    if branch is not None:
        return f"a folder inside the branch folder {branch}, not a branch folder"
    # An output's .crawler/: its state/ tells it from a folder so named that the output is in.
    work = next(
        (p for p in folder.resolve().parents if p.name == STATE_DIR and (p / "state").is_dir()),
        None,
    )
    if work is not None:
        return f"a folder of {work}, the crawler's own, not a branch folder"
    return None


def no_such_branch(path: Path) -> str:
    """Why a missing path is no branch: in an output folder, which branches it has."""
    if path.is_symlink():
        return f"a symbolic link that leads nowhere, or round in a loop ({EXAMPLE})"
    if (path.parent / STATE_DIR).is_dir():
        return f"no such branch published in {path.parent} (its branches{_such(path.parent)})"
    return f"no such folder ({EXAMPLE})"


def _such(output: Path) -> str:
    branches = sorted(p.parent.name for p in output.glob("*/index.json"))
    return f": {', '.join(branches)}" if branches else ": none yet"
