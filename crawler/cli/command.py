"""The ``crawler`` command line: each command run, and the exit code of each outcome (its
arguments are :mod:`.arguments`, the checks of its paths :mod:`.checks`).

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
import logging
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .. import __version__
from ..config import Config
from ..consume.folders import no_such_branch, not_a_branch_folder
from ..errors import CrawlerError, ExitCode, UsageError
from ..files import is_safe_name
from ..heap import tune_heap
from ..mirror.proxies import environment_proxies
from ..mirror.retry import Sleep
from ..ops import metrics
from ..output.lock import lock_named
from ..sync.reporting import LogReporter
from ..sync.run import RunResult, Syncer
from ..text import counted, printable, shown
from . import audit, completion, configcmd, find, preview, sigint
from . import diff as branch_diff
from . import log as history_log
from .arguments import build_parser, settings
from .checks import check_metrics, check_output, leave_a_deleted_working_folder
from .consumer import out_of_memory
from .display import Counting, LiveReporter, wants_live
from .logformat import setup_logging
from .records import Verified, json_lines, listed, synced
from .stopping import Stopper, timer
from .streams import printed, tell

log = logging.getLogger("crawler")

EXIT_SIGINT = 128 + signal.SIGINT


def exit_code(outcomes: Iterable[str]) -> int:
    """The exit code of branches ending with these statuses: the most serious one's."""
    statuses = set(outcomes)
    if statuses & {"failed", "refused"}:
        return ExitCode.FAILED
    if "partial" in statuses:
        return ExitCode.PARTIAL
    if "published" in statuses:
        return ExitCode.OK
    return ExitCode.UNCHANGED


def _write_metrics(config: Config, result: RunResult | None, code: int, seconds: float) -> None:
    """Write the metrics file if one is configured; a failure here is logged, not fatal."""
    if not config.metrics:
        return
    path = Path(config.metrics)
    reports = [b.report for b in result.branches] if result else []
    last = metrics.load_last_success(path)  # updated for the branches that are current
    text = metrics.render_metrics(
        reports, exit_code=code, run_seconds=seconds, now=time.time(), last_success=last
    )
    try:
        metrics.write_metrics(path, text)
    except CrawlerError as err:
        log.error("metrics not written: %s", err)


def _interruptible(hard: bool) -> None:
    """A command that runs no task of its own (all but ``sync`` and ``branches``) takes a
    Ctrl-C from now on, the one held since it started too (see :mod:`.sigint`), as Python's
    KeyboardInterrupt: ``main`` says ``interrupted``, 130. The handler of the ``asyncio.Runner``
    that runs ``main`` only cancels its task, which such a command never awaits: a verify ran
    to its end before it took a Ctrl-C."""
    if hard and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored: stays so
        signal.signal(signal.SIGINT, signal.default_int_handler)
    sigint.release()


def _verify(args: argparse.Namespace, hard: bool) -> int:
    from ..ops.verify import expected_branch, verify_branch  # only needed here

    _interruptible(hard)  # once verify is loaded (see .sigint)
    path: Path = args.path
    try:
        found = _not_a_branch_folder(path)
    except OSError as err:  # a folder this user may not search: nothing can be checked
        reason = err.strerror or str(err)
        raise UsageError(f"crawler verify: cannot look into {path}: {reason}") from None
    if found is not None:  # a typo, the index file itself, the output folder: no branch
        raise UsageError(f"crawler verify: {path}: {found}")
    note = expected_branch(path.resolve(), args.branch).note
    # Its progress on a terminal, but not with --quiet or --json.
    counting = Counting() if not args.json and wants_live(args.quiet) else None
    try:
        problems = verify_branch(
            path,
            schema=not args.no_schema,
            branch=args.branch,
            progress=(lambda what, done, total: counting.count(f"checking {what}", done, total))
            if counting
            else None,
        )
    finally:
        if counting:
            counting.end()
    verdict = [] if problems or args.quiet else [f"{path}: all checks hold"]
    # A problem may quote the folder's documents, anyone's to write: escaped for a terminal.
    results: str | bytes = _text([printable(p) for p in problems] or verdict)
    if args.json:  # the verdict, whatever it is
        schema = not args.no_schema
        verified = Verified(
            path=str(path), ok=not problems, schema=schema, problems=problems, note=note
        )
        results = json_lines([verified])
    if note is not None and not args.quiet:
        tell(f"note: {path}: {printable(note)}")
    what = "the problems found" if problems else "the verdict"
    printed(results, what, needed=False)  # the exit code is the verdict, and stands
    if problems:
        if not args.quiet:
            tell(f"{path}: {counted(len(problems), 'problem')}")
        return ExitCode.VERIFY_FAILED
    return ExitCode.OK


def _not_a_branch_folder(path: Path) -> str | None:
    """Why ``path`` is not a folder to verify, or None; raises OSError if it cannot be told."""
    example = "(give a published branch folder, such as output/develop)"
    if not path.exists():
        return no_such_branch(path)
    if not path.is_dir():
        return f"not a folder {example}"
    folder = path.resolve()  # as verify_branch names it
    problem = not_a_branch_folder(folder)
    if problem is None and not is_safe_name(folder.name):  # .crawler: no branch is so named
        problem = f"not a branch folder: {folder.name!r} is no branch name {example}"
    return problem


async def _branches(config: Config, sleep: Sleep, as_json: bool) -> int:
    discovery = await Syncer(config, LogReporter(), sleep=sleep).branches()
    if as_json:
        return printed(json_lines(listed(discovery)), "the list of refs")
    lines = [
        f"{ref}\t{' '.join(s.label for s in sources)}\t{discovery.how.get(ref, '')}"
        for ref, sources in discovery.refs.items()
    ]
    lines += [f"{shown(ref)}\tUNUSABLE: {problem}" for ref, problem in discovery.problems.items()]
    return printed(_text(lines), "the list of refs")


def _text(lines: Iterable[str]) -> str:
    """A command's result lines, each ended, for :func:`printed`."""
    return "".join(f"{line}\n" for line in lines)


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
    command: str | None = None
    config: Config | None = None
    result: RunResult | None = None
    code: int = ExitCode.INTERNAL
    dry = False
    # The signal handlers, kept until a sync's metrics are written: a signal once the outcome is
    # known must neither kill the process before then (the default action) nor change the code.
    held = contextlib.ExitStack()
    stopper: Stopper | None = None
    try:
        args = _parse(argv)
        if isinstance(args, int):  # --help and --version
            return args
        command = args.command
        if command not in ("sync", "branches", "verify"):  # see _interruptible
            _interruptible(hard)
        dry = command == "sync" and args.dry_run  # writes nothing: no metrics either
        if command in _READERS:  # reads or prints only: no logging, signals or metrics
            return _READERS[command](args)
        setup_logging(args.quiet, args.verbose, getattr(args, "log_format", "text"))
        if command == "verify":
            return _verify(args, hard)
        config = _settings(args)
        environment_proxies(config.urls)  # a bad proxy is a usage error before anything runs
        stopper = held.enter_context(Stopper(config.deadline, hard=hard).installed())
        code, result = await _command(args, config, stopper, sleep)
        return code
    except MemoryError:  # no bug: the machine's or ulimit's, and the answer is to give more
        code = out_of_memory(f"crawler {command or ''}".rstrip())
    except CrawlerError as err:  # each class carries its exit code
        tell(f"error: {err.headline}{err}")
        code = err.exit_code
    except Exception:
        log.exception("internal error (a bug in crawler %s)", __version__)
        code = ExitCode.INTERNAL
    finally:
        if stopper is not None:
            stopper.settle(code)
        try:
            if config is not None and command == "sync" and code != ExitCode.LOCKED and not dry:
                _write_metrics(config, result, code, time.monotonic() - started)
        finally:
            held.close()
    return code


#: The commands that only read a published branch (find, log, diff) or print a text (config,
#: completion).
_READERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "find": find.run,
    "log": history_log.run,
    "diff": branch_diff.run,
    "config": configcmd.run,
    "completion": lambda args: completion.run(args, build_parser()),
}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace | int:
    """The arguments, or the exit code of ``--help`` and ``--version``."""
    try:
        args, extra = build_parser().parse_known_args(argv)
    except SystemExit as done:
        return int(done.code or 0)
    if args.command is None:  # before the extras: `crawler -q` lacks a command
        which = f"unrecognized arguments: {' '.join(extra)}; " if extra else ""
        raise UsageError(
            f"crawler: {which}give a command: sync, branches, verify, audit, find, log, diff, "
            "config or completion (see crawler --help)"
        )
    if extra:
        raise UsageError(f"crawler {args.command}: unrecognized arguments: {' '.join(extra)}")
    if args.command == "sync" and bool(args.branch) == bool(args.all):
        which = "not both" if args.all else "to say which branches"
        raise UsageError(f"crawler sync: give --branch NAME (repeatable) or --all, {which}")
    if args.command == "sync" and not args.all and (args.ref or args.exclude_ref):
        raise UsageError("crawler sync: --ref and --exclude-ref choose among the refs of --all")
    return args


def _settings(args: argparse.Namespace) -> Config:
    """The settings of ``sync`` or ``branches``, checked before anything runs."""
    loaded = settings(args)
    # Only sync has an output and a metrics file, which may be relative.
    leave_a_deleted_working_folder(loaded, check=args.command == "sync")
    if args.command == "sync":
        check_metrics(loaded)  # a refused file is not written: the caller has no config yet
    return loaded


async def _command(
    args: argparse.Namespace, config: Config, stopper: Stopper, sleep: Sleep
) -> tuple[int, RunResult | None]:
    """Run ``sync``, ``branches`` or ``audit``: the exit code, and a sync's result (for the
    metrics)."""
    syncer: Syncer | None = None
    try:
        if args.command == "branches":
            return await _branches(config, sleep, args.json), None
        if args.command == "audit":
            return await audit.run(args, config, sleep), None
        check_output(config)
        if args.dry_run:
            return await _dry_run(config, args, sleep), None
        live = LiveReporter() if wants_live(args.quiet) else None
        syncer = Syncer(config, live or LogReporter(), sleep=sleep, force=args.force)
        with live or contextlib.nullcontext():
            result = await syncer.run(None if args.all else args.branch)
    except asyncio.CancelledError:
        if stopper.reason is None:
            raise
        stopped = RunResult(syncer.results) if syncer is not None else None  # what finished
        tell(_stopped(stopper, stopped, config.deadline))
        if args.json and stopped is not None:
            _synced(stopped, config)
        return stopper.code, stopped
    if args.json:
        _synced(result, config)
    if result.failed:
        names = ", ".join(b.branch for b in result.failed)
        tell(f"error: {len(result.failed)} branch(es) failed: {names}")
    return exit_code(b.status for b in result.branches), result


async def _dry_run(config: Config, args: argparse.Namespace, sleep: Sleep) -> int:
    """``sync --dry-run``: each branch's forecast on stdout, and the exit code a sync would
    most likely have (see :mod:`crawler.sync.forecast`)."""
    busy = lock_named(config.output_dir.resolve())
    if busy is not None:
        log.warning("%s; a dry run does not wait for it", busy)
    syncer = Syncer(config, LogReporter(), sleep=sleep, force=args.force)
    forecasts = await syncer.forecast(None if args.all else args.branch)
    code = exit_code(f.status for f in forecasts)
    written = printed(_text([*preview.lines(forecasts), preview.verdict(code)]), "the forecast")
    return code if written == ExitCode.OK else written


def _synced(result: RunResult, config: Config) -> None:
    """``sync --json``: a line of JSON a branch. One that cannot be written is a warning: the
    exit code says how the sync went, and stands."""
    output = config.output_dir.resolve()
    records = [synced(b.branch, b.status, b.message, b.report, output) for b in result.branches]
    printed(json_lines(records), "the branches synced", needed=False)


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


def main(argv: Sequence[str] | None = None, *, hard: bool = False) -> int:
    """Run the command line; returns the exit code. ``hard``: see :func:`main_async`; the
    process also ends for sure within a few seconds once the code is known (Python's exit
    waits for threads, the decoding pool's among them)."""
    tune_heap()
    runner = asyncio.Runner()  # asyncio.run(), but a failure to close loses no exit code
    try:
        try:
            code = runner.run(main_async(argv, hard=hard))
            if hard:
                timer(code)
            return code
        finally:
            try:
                runner.close()  # a Ctrl-C here is caught below, as with asyncio.run()
            except RuntimeError as err:  # a last thread to stop its executor (ulimit -v)
                tell(f"warning: while exiting: {err}")
    except KeyboardInterrupt:  # before the handlers were installed, or after
        tell("interrupted")
        if hard:
            timer(EXIT_SIGINT)
        return EXIT_SIGINT
