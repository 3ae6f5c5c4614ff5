"""The ``crawler`` command line: its arguments, and the exit code of each outcome.

The codes are :class:`~crawler.errors.ExitCode`; an error that stops a run carries its own
(``exit_code``), and :func:`exit_code` gives a finished run's, from its branches' outcomes:
when several branches end differently, the most serious wins: 4, then 5, then 0, then 6. A
signal gives 128 + its number (129 SIGHUP, 130 SIGINT, 143 SIGTERM; see
:mod:`crawler.cli.stopping`), and ``branches`` whose reader closed the pipe 141, as SIGPIPE would.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from .. import __version__
from ..build.changes import counted
from ..config import NO_WORKING_FOLDER, Config, load_config, with_overrides
from ..errors import ConfigError, CrawlerError, ExitCode, UsageError, shown
from ..files import too_large
from ..mirror.discovery import Mirror, is_safe_name
from ..mirror.fetch import Sleep, environment_proxies, local_path
from ..ops.metrics import load_last_success, render_metrics, write_metrics
from ..output.write import STATE_DIR
from ..sync.reporting import LogReporter
from ..sync.run import RunResult, Syncer
from .display import LiveReporter, setup_logging, wants_live
from .stopping import GRACE, Stopper, timer

log = logging.getLogger("crawler")
_M_MMAP_THRESHOLD = -3  # glibc malloc.h

EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGPIPE = 128 + signal.SIGPIPE


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so :func:`main` owns the exit code, and takes
    no abbreviated option (``--bran``): a crontab line using one would break, or change its
    meaning, the day an option sharing its start is added."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _int_between(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None


def _formats(text: str) -> tuple[str, ...]:
    items = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    bad = [f for f in items if f not in ("json", "pages")]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"expected json and/or pages, got {text!r}")
    return items


def _path(text: str) -> Path:
    """A path argument, which may not be blank: `crawler verify "$UNSET"` must not mean the
    working directory, nor `--config "$UNSET"` a config file named ".", which is one."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty or blank")
    return Path(text)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command."""
    parser = _Parser(
        prog="crawler",
        description="Crawl Spack build-cache mirrors into consolidated JSON indexes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Not required=True: argparse would only say "the following arguments are required".
    commands = parser.add_subparsers(dest="command", parser_class=_Parser)

    def common(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--config",
            type=_path,
            help="YAML config file (default: ./config/crawler.yaml if present)",
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

    sync = commands.add_parser(
        "sync",
        help="sync branches into the output folder",
        description="Fetch, validate and consolidate the indexes of branches, then publish them.",
        epilog="exit codes: 0 published, 1 internal error, 2 usage or config error, 3 mirror "
        "unusable, 4 a branch failed or was refused, 5 partial, 6 nothing changed, "
        "7 output locked by another run, 9 deadline passed, 129/130/143 interrupted "
        "(SIGHUP/SIGINT/SIGTERM)",
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
    sync.add_argument(
        "--concurrency",
        type=_int_between(1, 256),
        metavar="N",
        help="sources downloaded at once, 1-256 (default: the config's concurrency, 8)",
    )
    sync.add_argument(
        "--max-failed-stacks",
        type=_int_between(0, 10_000),
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
    sync.add_argument("--metrics", metavar="FILE", help="write an OpenMetrics file after the run")

    branches = commands.add_parser(
        "branches",
        help="list the refs of the mirror and their stacks",
        description="List the refs of the mirror's discovery document with their stack labels.",
        epilog="exit codes: 0 listed, 1 internal error, 2 usage or config error, 3 mirror "
        "unusable, 4 the list could not be written, 9 deadline passed, 129/130/143 "
        "interrupted, 141 its reader closed the pipe",
    )
    common(branches)

    verify = commands.add_parser(
        "verify",
        help="re-check a published branch folder",
        description="Check <output>/<branch>: schema, hash uniqueness, meta against "
        "spec_details, stacks against sources, pages against index.json, the branch named in "
        "its files, and that it holds nothing a publish does not write.",
        epilog="exit codes: 0 all checks hold, 1 internal error, 2 usage error (no branch "
        "folder), 8 problems found (one per line on stdout)",
    )
    verify.add_argument("path", type=_path, help="a published branch folder, e.g. output/develop")
    verify.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    verify.add_argument(
        "--no-schema",
        action="store_true",
        help="skip the JSON Schema check (the slowest one: ~15 s for a 60,000-spec index)",
    )
    verify.add_argument("-v", "--verbose", action="store_true", help=argparse.SUPPRESS)
    return parser


def _config(args: argparse.Namespace) -> Config:
    config = load_config(args.config)
    formats = getattr(args, "format", None)
    if formats is not None and "json" not in formats:
        formats = ("json", *formats)
    budget = getattr(args, "max_failed_stacks", None)
    config = with_overrides(
        config,
        mirror=args.mirror,
        output=getattr(args, "output", None),
        formats=formats,
        concurrency=getattr(args, "concurrency", None),
        metrics=getattr(args, "metrics", None),
        deadline=args.deadline,
    )
    if budget is not None:
        publish = msgspec.structs.replace(config.publish, max_failed_stacks=budget)
        config = msgspec.structs.replace(config, publish=publish)
    return config


def _check_output(config: Config) -> None:
    """Refuse an output folder that cannot be one: it, or the nearest of its parents that
    exists, is a file; it is a local mirror's folder or lies inside it (its branch folders
    would be the mirror's ref folders), by its path or as the same folder (a bind mount); or it
    lies inside a branch folder of another output folder, or its ``.crawler`` (a branch folder
    given for the output: its runs would fill it with what a publish refuses to replace); or
    its parent folder does not exist (the crawler makes the output folder, not the folders
    above it: a mistyped path fails rather than publishing somewhere nobody looks).
    Anything else the filesystem refuses, a folder this user may not look into among them,
    fails the run when it happens, naming the path."""
    where = config.where("output")
    output = config.output_dir.resolve()
    system = _system_folder(output)
    if system is not None:
        reason = f"{output} is {system}: give a folder for the crawler's output alone"
        raise ConfigError(where, reason, "output")
    root = _local_mirror(config)
    if root is not None and output.is_relative_to(root):
        inside = "the mirror folder" if output == root else f"inside the mirror {root}"
        raise ConfigError(where, f"{output} is {inside}", "output")
    for folder in output.parents:
        with contextlib.suppress(OSError):
            if _inside_published(folder, output.relative_to(folder).parts[0]):
                reason = f"{output} lies inside the output folder {folder} of other runs"
                raise ConfigError(where, reason, "output")
    for folder in (output, *output.parents):
        try:
            if not folder.exists():
                continue
            if root is not None and os.path.samefile(folder, root):
                raise ConfigError(
                    where, f"{output} is in the mirror {root} (the same folder)", "output"
                )
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


_OS = "a folder of the operating system, which its package manager owns"
_KERNEL = "a folder of the kernel or of the running system (devices, processes, runtime state)"
_SHARED = "writable by every user, who could put a .crawler or a branch folder there first"
#: The folders no output may be, and why: a run makes ``.crawler`` and a folder per branch in
#: its output, beside what is there. Only these, not what they hold: /var/www, /srv/x or a home
#: folder are fine (a publish never deletes a file it did not write).
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
    try:
        found = os.stat(output)
    except OSError:  # not there (yet): not one of those, which are
        return None
    for folder, reason in SYSTEM_FOLDERS.items():
        with contextlib.suppress(OSError):
            if os.path.samestat(found, os.stat(folder)):
                return reason
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


def _leave_a_deleted_working_folder(config: Config, check: bool) -> None:
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


#: The most bytes an existing metrics file may hold: the crawler writes about 2 KB per branch
#: (5,860 bytes for the sample's three refs), so some 8,000 branches; a larger file is
#: something else, named by mistake.
MAX_METRICS_BYTES = 16 << 20


def _check_metrics(config: Config) -> None:
    """Refuse a metrics file the crawler must not replace: one inside the output folder (a
    branch folder, the crawler's own) or the mirror, the config file itself, anything but a
    regular file (``/dev/null`` would be replaced by a file; a named pipe would block), or a
    file larger than :data:`MAX_METRICS_BYTES` (not one the crawler wrote)."""
    if not config.metrics:
        return
    where = config.where("metrics")
    metrics = Path(config.metrics)
    try:
        resolved = metrics.resolve()
        output = config.output_dir.resolve()
        is_other = metrics.exists() and not metrics.is_file()
        size = metrics.stat().st_size if metrics.is_file() else 0
    except (RuntimeError, OSError) as err:
        raise ConfigError(where, f"cannot resolve {metrics}: {err}", "metrics") from None
    if resolved.is_relative_to(output):
        raise ConfigError(where, f"{metrics} is inside the output folder {output}", "metrics")
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


def exit_code(result: RunResult) -> int:
    """The run's exit code: the most serious outcome of its branches."""
    statuses = {b.status for b in result.branches}
    if statuses & {"failed", "refused"}:
        return ExitCode.FAILED
    if "partial" in statuses:
        return ExitCode.PARTIAL
    if "published" in statuses:
        return ExitCode.OK
    return ExitCode.UNCHANGED


async def _sync(syncer: Syncer, args: argparse.Namespace) -> RunResult:
    wanted = None if args.all else args.branch
    if wants_live(args.quiet):
        with LiveReporter() as live:
            syncer.reporter = live
            return await syncer.run(wanted)
    return await syncer.run(wanted)


def _write_metrics(config: Config, result: RunResult | None, code: int, seconds: float) -> None:
    """Write the metrics file if one is configured; a failure here is logged, not fatal."""
    if not config.metrics:
        return
    path = Path(config.metrics)
    reports = [b.report for b in result.branches] if result else []
    last = load_last_success(path)  # render_metrics updates it for the branches that are current
    text = render_metrics(
        reports, exit_code=code, run_seconds=seconds, now=time.time(), last_success=last
    )
    try:
        write_metrics(path, text)
    except CrawlerError as err:
        log.error("metrics not written: %s", err)


def _verify(args: argparse.Namespace) -> int:
    from ..ops.verify import verify_branch  # jsonschema is slow to import and only needed here

    path: Path = args.path
    try:
        found = _not_a_branch_folder(path)
    except OSError as err:  # a folder this user may not search: nothing can be checked
        reason = err.strerror or str(err)
        raise UsageError(f"crawler verify: cannot look into {path}: {reason}") from None
    if found is not None:  # a typo, the index file itself, the output folder: no branch
        raise UsageError(f"crawler verify: {path}: {found}")
    problems = verify_branch(path, schema=not args.no_schema)
    verdict = [] if problems or args.quiet else [f"{path}: all checks hold"]
    try:
        _results(problems or verdict)
    except BrokenPipeError:
        pass  # the reader took what it wanted (`| head -1`)
    except OSError as err:  # the exit code is the verdict, and stands
        what = "the problems found" if problems else "the verdict"
        _tell(f"warning: cannot write {what} to standard output: {err.strerror or err}")
    if problems:
        if not args.quiet:
            _tell(f"{path}: {counted(len(problems), 'problem')}")
        return ExitCode.VERIFY_FAILED
    return ExitCode.OK


def _not_a_branch_folder(path: Path) -> str | None:
    """Why ``path`` is not a folder to verify, or None; raises OSError if it cannot be told."""
    example = "(give a published branch folder, such as output/develop)"
    if not path.is_dir():
        return f"{'no such folder' if not path.exists() else 'not a folder'} {example}"
    if (path / STATE_DIR).is_dir() and not (path / "index.json").exists():
        branches = sorted(p.parent.name for p in path.glob("*/index.json"))
        such = f"such as {path / branches[0]}" if branches else "such as output/develop"
        return f"an output folder, not a branch folder (give one of its branches, {such})"
    folder = path.resolve()  # as verify_branch names it
    pages = next((p for p in (folder, folder.parent) if p.name == "pages"), None)
    if pages is not None and (pages.parent / "index.json").is_file():
        return f"a folder inside the branch folder {pages.parent}, not a branch folder"
    if not is_safe_name(folder.name):  # .crawler: no branch is so named (nor verifies)
        return f"not a branch folder: {folder.name!r} is no branch name {example}"
    return None


def _tell(line: str) -> None:
    """Print a line for the user on stderr. A stderr that cannot be written (the cron log's
    disk full, a closed pipe) loses the line, but must not change the exit code: an alert on
    it would say "a bug" where the mirror, the lock or a branch is the news."""
    if sys.stderr is None:  # closed when the process started (2>&-): print() would use stdout
        return
    with contextlib.suppress(OSError, ValueError):  # ValueError: closed
        print(line, file=sys.stderr, flush=True)


async def _branches(config: Config, sleep: Sleep) -> int:
    discovery = await Syncer(config, LogReporter(), sleep=sleep).branches()
    lines = [
        f"{ref}\t{' '.join(s.label for s in sources)}" for ref, sources in discovery.refs.items()
    ]
    lines += [f"{shown(ref)}\tUNUSABLE: {problem}" for ref, problem in discovery.problems.items()]
    try:
        _results(lines)
    except BrokenPipeError:  # the reader closed the pipe (`| head -1`): quietly, as SIGPIPE would
        return EXIT_SIGPIPE
    except OSError as err:  # the list is what was asked for: without it, the command failed
        _tell(f"error: cannot write the list of refs to standard output: {err.strerror or err}")
        return ExitCode.FAILED
    return ExitCode.OK


def _results(lines: Iterable[str]) -> None:
    """Print a command's results on stdout and flush them: raises OSError when they cannot be
    written (a full disk, a reader that closed the pipe). A stdout closed when the process
    started (``>&-``) was closed on purpose: nothing is written, and that is no failure."""
    out = sys.stdout
    if out is None:
        return
    for line in lines:
        print(line, file=out)
    out.flush()


async def main_async(
    argv: Sequence[str] | None = None, *, sleep: Sleep = asyncio.sleep, hard: bool = False
) -> int:
    """Run the command line inside a running event loop; returns the exit code.

    ``sleep`` is what retries wait with (tests pass one that records instead of sleeping).
    SIGINT, SIGTERM and SIGHUP cancel the run cleanly (staged files and downloads are removed,
    the published output is untouched) and give 130, 143 and 129; the deadline does the same
    and gives 9. ``hard`` (the command itself, not a caller in-process) also ends the process
    for sure when a stop takes too long or a second signal comes (see :mod:`.stopping`).
    """
    started = time.monotonic()
    config: Config | None = None
    result: RunResult | None = None
    code: int = ExitCode.INTERNAL
    # The signal handlers, kept until a sync's metrics are written: a signal once the outcome is
    # known must neither kill the process before then (the default action) nor change the code.
    held = contextlib.ExitStack()
    try:
        try:
            parser = build_parser()
            args, extra = parser.parse_known_args(argv)
        except SystemExit as done:  # --help and --version
            return int(done.code or 0)
        if args.command is None:  # before the extras: `crawler -q` lacks a command
            which = f"unrecognized arguments: {' '.join(extra)}; " if extra else ""
            raise UsageError(
                f"crawler: {which}give a command: sync, branches or verify (see crawler --help)"
            )
        if extra:
            raise UsageError(f"crawler {args.command}: unrecognized arguments: {' '.join(extra)}")
        setup_logging(args.quiet, args.verbose)
        if args.command == "verify":
            return _verify(args)
        if args.command == "sync" and bool(args.branch) == bool(args.all):
            which = "not both" if args.all else "to say which branches"
            raise UsageError(f"crawler sync: give --branch NAME (repeatable) or --all, {which}")
        loaded = _config(args)
        # Only sync has an output and a metrics file, which may be relative.
        _leave_a_deleted_working_folder(loaded, check=args.command == "sync")
        if args.command == "sync":
            _check_metrics(loaded)  # before `config` is set: a refused file is not written
        config = loaded
        environment_proxies(config.urls)  # a bad proxy is a usage error before anything runs
        stopper = held.enter_context(Stopper(config.deadline, hard=hard).installed())
        syncer: Syncer | None = None
        try:
            if args.command == "branches":
                return await _branches(config, sleep)
            _check_output(config)
            syncer = Syncer(config, LogReporter(), sleep=sleep, force=args.force)
            result = await _sync(syncer, args)
        except asyncio.CancelledError:
            if stopper.reason is None:
                raise
            if syncer is not None:
                result = RunResult(syncer.results)  # what finished before, for the metrics
            _tell(_stopped(stopper, result, config.deadline))
            code = stopper.code
            return code
        code = exit_code(result)
        if result.failed:
            names = ", ".join(b.branch for b in result.failed)
            _tell(f"error: {len(result.failed)} branch(es) failed: {names}")
        return code
    except CrawlerError as err:  # each class carries its exit code
        _tell(f"error: {err.headline}{err}")
        code = err.exit_code
    except Exception:
        log.exception("internal error (a bug in crawler %s)", __version__)
        code = ExitCode.INTERNAL
    finally:
        try:
            if config is not None and args.command == "sync" and code != ExitCode.LOCKED:
                _write_metrics(config, result, code, time.monotonic() - started)
        finally:
            held.close()
    return code


def _stopped(stopper: Stopper, result: RunResult | None, deadline: float) -> str:
    """The line a run stopped by a signal or its deadline ends with: which branches were done
    (a branch swapped in before the stop stays published) and that the rest is untouched."""
    if isinstance(stopper.reason, signal.Signals):
        what = f"interrupted by {stopper.reason.name}"
    else:
        what = f"error: stopped at the run's deadline ({deadline:g} s)"
    if result is None:  # crawler branches: nothing is written
        return what
    finished = ", ".join(f"{b.branch} ({b.status})" for b in result.branches)
    which = f" after {finished}; the rest of the" if finished else "; published"
    return f"{what}{which} output untouched"


def _return_large_blocks() -> None:
    """Have glibc give every block of 512 KiB or more back to the system when it is freed.

    By default glibc raises that threshold each time such a block is freed (up to 32 MiB), so
    workers' results and serialised documents are carved from the heap instead, where freed
    space stays in the process: a develop-sized sync then peaks about 40 MB higher. Smaller
    blocks stay on the heap: the 256 KiB blocks sockets are read into are reused from there,
    whereas mapping each anew costs a page fault per page (0.6 s of system time for 600 MB of
    downloads). Elsewhere (musl, macOS) this does nothing.
    """
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, 512 << 10)
    except (OSError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None, *, hard: bool = False) -> int:
    """Run the command line; returns the exit code. ``hard``: see :func:`main_async`; the
    process also ends for sure within a few seconds once the code is known (Python's exit
    waits for threads, the decoding pool's among them)."""
    _return_large_blocks()
    runner = asyncio.Runner()  # asyncio.run(), but a failure to close loses no exit code
    try:
        try:
            code = runner.run(main_async(argv, hard=hard))
            if hard:
                timer(GRACE, code, "warning: the process did not end by itself; ended at once")
            return code
        finally:
            try:
                runner.close()  # a Ctrl-C here is caught below, as with asyncio.run()
            except RuntimeError as err:  # a last thread to stop its executor (ulimit -v)
                _tell(f"warning: while exiting: {err}")
    except KeyboardInterrupt:
        _tell("interrupted")
        return EXIT_SIGINT


def run() -> None:
    """Console-script entry point."""
    code = main(hard=True)
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # closed when the process started (>&-)
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            # What it holds cannot be written (a full disk, a closed pipe): Python would report
            # that at exit and make the code 120. As its documentation advises for a closed
            # pipe, the rest goes to /dev/null; the exit code stands.
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
    sys.exit(code)
