"""Checks of the paths a sync is given, before anything runs: the output folder and the
metrics file must be what they must be (each refusal a config error, exit 2)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..config import NO_WORKING_FOLDER, Config
from ..errors import ConfigError
from ..files import too_large
from ..mirror.discovery import Mirror
from ..mirror.local import local_path
from ..ops.metrics import MAX_METRICS_BYTES
from ..output.workdir import STATE_DIR


def _in_the_mirror(config: Config, reason: str) -> ConfigError:
    """An output in the mirror, blamed on ``--mirror`` when only that was given on the command
    line (the file's output is not what changed), else on the output."""
    key = "mirror" if "mirror" in config.flags and "output" not in config.flags else "output"
    return ConfigError(config.where(key), reason, key)


def check_output(config: Config) -> None:
    """Refuse an output folder that cannot be one: it, or the nearest of its parents that
    exists, is a file; it is a local mirror's folder or lies inside it (its branch folders
    would be the mirror's ref folders), by its path or as the same folder (a bind mount); or it
    lies inside a branch folder of another output folder, or its ``.crawler`` (a branch folder
    given for the output: its runs would fill it with what a publish refuses to replace); or
    its parent folder does not exist (the crawler makes the output folder, not the folders
    above it: a mistyped path fails rather than publishing somewhere nobody looks).
    Anything else the filesystem refuses, a folder this user may not look into among them,
    fails the run when it happens, naming the path. The ``cache_dir`` is checked too
    (:func:`_check_cache_dir`)."""
    where = config.where("output")
    output = config.output_dir.resolve()
    system = _system_folder(output)
    if system is not None:
        reason = f"{output} is {system}: give a folder for the crawler's output alone"
        raise ConfigError(where, reason, "output")
    root = _local_mirror(config)
    _check_cache_dir(config, output, root)
    if root is not None and output.is_relative_to(root):
        inside = "the mirror folder" if output == root else f"inside the mirror {root}"
        raise _in_the_mirror(config, f"{output} is {inside}")
    other = _other_output_around(output)
    if other is not None:
        reason = f"{output} lies inside the output folder {other} of other runs"
        raise ConfigError(where, reason, "output")
    for folder in (output, *output.parents):
        try:
            if not folder.exists():
                continue
            if root is not None and os.path.samefile(folder, root):
                raise _in_the_mirror(config, f"{output} is in the mirror {root} (the same folder)")
            if folder.is_dir():
                break
        except OSError:
            return
        raise ConfigError(where, f"{folder} is a file, not a folder", "output")
    if folder not in (output, output.parent):
        # A mistyped path (after a config edit, say) would publish where nobody reads, and
        # succeed night after night while the real output goes stale.
        given = config.output_dir
        named = "" if given.parent == output.parent else f" ({given.parent} leads there)"
        reason = (
            f"{output.parent} does not exist{named} (the crawler makes the output folder, "
            "not the folders above it)"
        )
        raise ConfigError(where, reason, "output")


def _check_cache_dir(config: Config, output: Path, mirror: Path | None) -> None:
    """Refuse a ``cache_dir`` inside the output folder (where anyone who may write there
    could replace it by a link: the output's cache is ``.crawler/cache``, with ``cache_dir``
    null), inside a branch folder or the ``.crawler`` of another output folder, or inside the
    mirror; or one that is a file."""
    if config.cache_folder is None:
        return
    where, cache = config.where("cache_dir"), config.cache_folder
    try:
        resolved = cache.resolve()
    except (RuntimeError, OSError) as err:
        raise ConfigError(where, f"cannot resolve {cache}: {err}", "cache_dir") from None
    reason = None
    if resolved.is_relative_to(output):
        reason = f"{cache} is inside the output folder {output} (null keeps it in .crawler/)"
    elif (other := _other_output_around(resolved)) is not None:
        reason = f"{cache} is inside a branch folder or the .crawler of the output folder {other}"
    elif mirror is not None and resolved.is_relative_to(mirror):
        reason = f"{cache} is inside the mirror {mirror}"
    elif resolved.exists() and not resolved.is_dir():
        reason = f"{cache} is not a folder"
    if reason is not None:
        raise ConfigError(where, reason, "cache_dir")


_OS = "a folder of the operating system, which its package manager owns"
_KERNEL = "a folder of the kernel or of the running system (devices, processes, runtime state)"
_SHARED = "writable by every user, who could put a .crawler or a branch folder there first"
#: The folders no output may be, and why: a run makes ``.crawler`` and a folder per branch in
#: its output, beside what is there. Only these, not what they hold: /var/www, /srv/x or a home
#: folder are fine (a publish never deletes a file it did not write).
#: Trees of the kernel's own files, where no folder can hold an output (/dev/shm can).
_KERNEL_TREES = ("/proc", "/sys")
SYSTEM_FOLDERS = {
    "/": "the root folder (branch folders would sit beside /etc and /usr)",
    **dict.fromkeys(
        ("/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr"), _OS
    ),
    **dict.fromkeys(("/dev", "/proc", "/run", "/sys"), _KERNEL),
    "/home": "the folder of every user's home (a branch folder would sit among them)",
    "/var": "the folder of every service's data, logs and caches",
    "/tmp": _SHARED,
    "/var/tmp": _SHARED,
}


def _system_folder(output: Path) -> str | None:
    """Why the resolved ``output`` may not be an output folder, if it is one of
    :data:`SYSTEM_FOLDERS`, by its path or as the same folder (a bind mount of ``/``)."""
    if str(output) in SYSTEM_FOLDERS:
        return SYSTEM_FOLDERS[str(output)]
    if any(output.is_relative_to(tree) for tree in _KERNEL_TREES):  # /proc/self, say
        return f"inside /{output.parts[1]}, {_KERNEL}"
    try:
        found = os.stat(output)
    except OSError:  # not there (yet): not one of those, which are
        return None
    for folder, reason in SYSTEM_FOLDERS.items():
        with contextlib.suppress(OSError):
            if os.path.samestat(found, os.stat(folder)):
                return reason
    return None


def _other_output_around(path: Path) -> Path | None:
    """The output folder whose branch folder or ``.crawler`` the resolved ``path`` lies in,
    if any (see :func:`_inside_published`)."""
    for folder in path.parents:
        with contextlib.suppress(OSError):
            if _inside_published(folder, path.relative_to(folder).parts[0]):
                return folder
    return None


def _inside_published(folder: Path, child: str) -> bool:
    """Whether ``folder/child`` is the crawler's own folder or a branch folder of an output
    folder ``folder`` (one that holds the crawler's state: a ``.crawler`` folder alone may be
    another tool's)."""
    state = folder / STATE_DIR
    if not (state / "state").is_dir():
        return False
    return (
        child == STATE_DIR
        or (folder / child / "index.json").exists()
        or (state / "state" / f"{child}.json").exists()
    )


def _local_mirror(config: Config) -> Path | None:
    mirror = Mirror.parse(config.mirror)
    return local_path(mirror.base) if mirror.is_local else None


def leave_a_deleted_working_folder(config: Config, check: bool) -> None:
    """Work from ``/`` if the folder the run was started in has been deleted (starting the
    decoding processes needs a working folder), once sure (``check``) that no path the command
    uses is relative to it: a flag's or a file's would have been refused, but the built-in
    ``output`` is relative."""
    try:
        os.getcwd()
        return
    except FileNotFoundError:
        pass
    for key in ("output", "metrics") if check else ():
        value = getattr(config, key)
        if value and not Path(value).is_absolute():
            reason = f"{value!r} is {NO_WORKING_FOLDER}"
            raise ConfigError(config.where(key), reason, key)
    os.chdir("/")


def check_metrics(config: Config) -> None:
    """Refuse a metrics file the crawler must not replace: one inside the output folder (a
    branch folder, the crawler's own), inside a branch folder or the ``.crawler`` of another
    output folder (a published ``index.json``, a state file), or inside the mirror; the config
    file itself; anything but a regular file (``/dev/null`` would be replaced by a file; a named
    pipe would block); or a file larger than :data:`MAX_METRICS_BYTES` (not one the crawler
    wrote). Also a symbolic link (textfile-collector folders are often group-writable: a link
    planted there would aim a root cron job at any file), and a file whose folder is missing or
    no folder (a mistyped path: no metrics would be written, and alerts on them stay silent)."""
    if not config.metrics:
        return
    where = config.where("metrics")
    metrics = Path(config.metrics)
    try:
        if metrics.is_symlink():
            reason = (
                f"{metrics} is a symbolic link: give the file it points to (a link in a folder "
                "others may write to could make the run replace any file)"
            )
            raise ConfigError(where, reason, "metrics")
        if not metrics.parent.is_dir():
            what = "is a file, not a folder" if metrics.parent.exists() else "does not exist"
            reason = f"{metrics.parent} {what} (the crawler makes the metrics file, not its folder)"
            raise ConfigError(where, reason, "metrics")
        resolved = metrics.resolve()
        output = config.output_dir.resolve()
        is_other = metrics.exists() and not metrics.is_file()
        size = metrics.stat().st_size if metrics.is_file() else 0
    except (RuntimeError, OSError) as err:
        raise ConfigError(where, f"cannot resolve {metrics}: {err}", "metrics") from None
    if resolved.is_relative_to(output):
        raise ConfigError(where, f"{metrics} is inside the output folder {output}", "metrics")
    other = _other_output_around(resolved)
    if other is not None:
        reason = f"{metrics} is inside a branch folder or the .crawler of the output folder {other}"
        raise ConfigError(where, reason, "metrics")
    root = _local_mirror(config)
    if root is not None and resolved.is_relative_to(root):
        raise ConfigError(where, f"{metrics} is inside the mirror {root}", "metrics")
    if config.origin != "<defaults>" and resolved == Path(config.origin).resolve():
        raise ConfigError(where, f"{metrics} is the config file", "metrics")
    if is_other:
        raise ConfigError(where, f"{metrics} is not a regular file", "metrics")
    if size > MAX_METRICS_BYTES:
        reason = f"{metrics} is {too_large(MAX_METRICS_BYTES)}: not a metrics file it wrote"
        raise ConfigError(where, reason, "metrics")
