"""Interrupt a large ``crawler sync`` many times at random moments; check how each run ends.

``.venv/bin/python bench/interrupts.py [--trials 60] [--from 1.0] [--to 2.6|end] [--trial-seed N]
[--signals TERM,INT,HUP] [--target process|group|both] [--second-after S] [--crawler CMD]``
(and the mirror options of ``bench/generate.py``) reproduces issue 25's first item: a
develop-sized generated mirror is served on loopback (``bench/server.py``), one sync publishes
it, then each trial runs ``crawler sync`` of a *changed* mirror (the same parameters with the
next seed: every index differs, so everything is downloaded and decoded again) into a fresh copy
of that published output, and sends SIGTERM, SIGINT or SIGHUP (seeded random choice) at a random
moment between ``--from`` and ``--to`` seconds after the start.

Each trial checks what an operator relies on (:func:`run_trial`):

* the run ends within ``--exit-within`` seconds (5) of the signal, by itself (the crawler's log
  does not say it ended "at once", as its own 5 s watchdog does); a run still going
  :data:`KILL_GRACE` seconds later is reported as hung (with ``py-spy dump`` of each of its
  processes when py-spy is installed), then every process of its session is killed;
* its exit code is ``128 + signal``, or the signal's own death (``-signal`` for Popen; a shell
  or cron reports it as ``128 + signal`` too: a signal before the crawler installed its
  handlers), or, when the run had published before the signal came, its normal code (0). A
  SIGINT within CPython's own start-up (``Fatal Python error: init_import_site``, before any
  crawler code runs) is noted and accepted whatever the code;
* the lock ``<output>/.crawler/lock`` is free (a non-blocking ``flock`` succeeds);
* no process of the run's session or process group (forkserver, decoding workers, resource
  tracker) is alive :data:`GONE_WITHIN` seconds after it ended;
* the published ``<output>/<branch>/`` is the previous publish byte for byte, or a complete new
  one: ``index.json`` byte-identical to a reference sync of the changed mirror, and
  ``crawler verify --no-schema`` of the folder exits 0 (for every new one and every
  ``--verify-every``-th trial).

With ``--second-after S`` every trial also sends a second signal (another random one) S seconds
after the first: the run must end within :data:`SECOND_WITHIN` second of it, with the first
signal's code (``crawler/cli/stopping.py``: "received SIGTERM again: exiting at once").

It prints one line per trial and a summary: trials, by signal and target, the slowest time
from signal to exit, every trial that hung, held the lock, left processes or damaged the
output, and PASS or FAIL. ``tests/test_interrupts.py`` runs the same trials on a smaller mirror.
Generated mirrors go to ``bench/out/mirrors`` (reused), runs to ``bench/out/interrupts``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.bytecode import compile_crawler  # noqa: E402
from bench.generate import add_arguments, ensure_mirror, params_from  # noqa: E402
from bench.server import ServerProcess  # noqa: E402

OUT = BENCH_DIR / "out"
#: Seconds a run may take to end after the (first) signal.
EXIT_WITHIN = 5.0
#: Seconds a run may take to end after a second signal.
SECOND_WITHIN = 1.0
#: Seconds given beyond those limits before a run is declared hung and killed: a run that ends
#: late (the crawler's own 5 s watchdog, say) is told from one that never ends.
KILL_GRACE = 5.0
#: Seconds the run's other processes (forkserver, workers) may outlive it.
GONE_WITHIN = 2.0
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
TARGETS = ("process", "group")
LOCK = Path(".crawler") / "lock"
#: What CPython says when a signal (SIGINT) ends its own start-up, before any crawler code runs.
PYTHON_STARTUP = "Fatal Python error: init_import_site"
#: What the crawler says when it ends at once rather than cleanly (crawler/cli/stopping.py).
FORCED = "at once"


# --- what a trial does ----------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """One trial: which signal goes where, when (seconds after the start), and a second one."""

    number: int
    signum: signal.Signals
    delay: float
    target: str = "process"  # "process": the crawler alone; "group": its whole process group
    second: signal.Signals | None = None
    second_after: float = 0.0

    def describe(self) -> str:
        """``SIGTERM to the process at 1.234s (then SIGINT 0.05s later)``."""
        text = f"{self.signum.name} to the {self.target} at {self.delay:.3f}s"
        if self.second is not None:
            text += f" (then {self.second.name} {self.second_after:.2f}s later)"
        return text


@dataclass(frozen=True)
class Setup:
    """The run every trial starts, and what its output may be once it ends."""

    command: list[str]  # the crawler command, e.g. [".venv/bin/crawler"]
    args: list[str]  # sync's arguments but --output
    cwd: Path
    branch: str
    snapshot: Path  # the output folder as the previous sync published it (never written)
    output: Path  # where trials run (a fresh copy of the snapshot each time)
    new_index: bytes  # index.json of a complete sync of the changed mirror
    normal_code: int = 0  # the code of a run that is not interrupted

    def argv(self) -> list[str]:
        """The trial's command line."""
        return [*self.command, *self.args, "--output", str(self.output)]


@dataclass
class Outcome:
    """How one trial ended."""

    plan: Plan
    code: int | None = None  # None: it never ended by itself (killed after hung_after)
    hung_after: float = 0.0
    signalled: bool = False  # the signal reached a running crawler
    second_sent: bool = False
    ended_after: float | None = None  # seconds from the (first) signal to the end
    ended_after_second: float | None = None
    lock_free: bool = True
    leftovers: list[str] = field(default_factory=list)
    output: str = "?"  # "previous", "new", or what is wrong
    verified: bool | None = None  # crawler verify --no-schema exited 0 (None: not run)
    problems: list[str] = field(default_factory=list)
    stuck: str = ""  # py-spy dump of a run that did not end
    log_tail: str = ""
    log: str = ""  # where the run's output is
    traceback: bool = False  # a traceback in the run's output (noted, not a failure)
    forced: str = ""  # the crawler's line saying it ended at once (a second signal, its watchdog)
    python_startup: bool = False  # the signal ended CPython's own start-up (see PYTHON_STARTUP)

    @property
    def ok(self) -> bool:
        """Whether the trial ended as it must."""
        return not self.problems

    @property
    def hung(self) -> bool:
        """Whether the run did not end within the time allowed."""
        return self.code is None

    def line(self) -> str:
        """One line for the trial's report."""
        plan = self.plan
        if not self.signalled:
            how = f"ended before the signal, exit {self.code}"
        elif self.hung:
            how = f"HUNG (killed {self.hung_after:g}s after the signal)"
        else:
            how = f"exit {self.code} after {self.ended_after:.2f}s"
            if self.ended_after_second is not None:
                how += f" ({self.ended_after_second:.2f}s after the second)"
        checks = f"lock {'free' if self.lock_free else 'HELD'}, output {self.output}"
        if self.leftovers:
            checks += f", {len(self.leftovers)} process(es) left"
        if self.verified is not None:
            checks += ", verify " + ("ok" if self.verified else "FAILED")
        if self.python_startup:
            checks += ", CPython's start-up interrupted"
        elif self.traceback:
            checks += ", a traceback in its output"
        if self.forced:
            checks += f", ended at once ({self.forced!r})"
        verdict = "ok" if self.ok else "FAIL: " + "; ".join(self.problems)
        return f"trial {plan.number:3d}: {plan.describe()}: {how}; {checks}; {verdict}"


def plans(
    rng: random.Random,
    count: int,
    start: float,
    stop: float,
    *,
    signals: Sequence[signal.Signals] = SIGNALS,
    targets: Sequence[str] = ("process",),
    second_after: float | None = None,
) -> list[Plan]:
    """``count`` trials, each a random signal at a uniformly random moment in [start, stop]."""
    made = []
    for number in range(1, count + 1):
        signum = rng.choice(list(signals))
        delay = rng.uniform(start, stop)
        target = rng.choice(list(targets))
        second = rng.choice(list(signals)) if second_after is not None else None
        made.append(Plan(number, signum, delay, target, second, second_after or 0.0))
    return made


def run_trial(
    setup: Setup,
    plan: Plan,
    *,
    verify: bool = False,
    exit_within: float = EXIT_WITHIN,
    second_within: float = SECOND_WITHIN,
    log: Path | None = None,
) -> Outcome:
    """Run one trial (see the module docstring) and check how it ended."""
    fresh_output(setup)
    log = log or setup.output.with_name(f"{setup.output.name}-{plan.number}.log")
    outcome = Outcome(plan)
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            setup.argv(),
            cwd=setup.cwd,
            env=crawler_env(),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session: every process it starts can be found
            preexec_fn=_signals_at_default,
        )
    try:
        _drive(proc, plan, outcome, exit_within, second_within)
        # A run that never ended still holds the lock: say so before it is killed.
        outcome.lock_free = lock_is_free(setup.output)
        if outcome.hung:
            outcome.stuck = stack_dump(proc.pid)
    finally:
        kill_session(proc.pid)
        proc.wait()
    outcome.leftovers = leftovers(proc.pid)
    outcome.output = output_state(setup)
    if outcome.output == "new" or verify:
        outcome.verified = verify_ok(setup)
    outcome.log, outcome.log_tail = str(log), _tail(log)
    text = log.read_text(errors="replace")
    outcome.traceback = "Traceback (most recent call last)" in text
    outcome.python_startup = text.startswith(PYTHON_STARTUP)
    outcome.forced = next((line for line in text.splitlines() if FORCED in line), "")
    outcome.problems = judge(setup, outcome, exit_within, second_within)
    return outcome


def _signals_at_default() -> None:
    """``preexec_fn`` of a trial's run: the three signals at their default, as for a run started
    from a terminal or by cron, also when this script runs under ``nohup`` or in the background
    of a shell without job control (which ignore SIGHUP, or SIGINT: the run would inherit that,
    and the crawler leaves an ignored SIGHUP alone)."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def _drive(
    proc: subprocess.Popen[bytes],
    plan: Plan,
    outcome: Outcome,
    exit_within: float,
    second_within: float,
) -> None:
    """Send the plan's signal(s) to a started run and wait for its end: at most
    ``exit_within`` seconds after the first signal (or ``second_within`` after the second)."""
    started = time.monotonic()
    if _ended(proc, started + plan.delay):
        outcome.code = proc.returncode
        return
    sent = _send(proc.pid, plan.signum, plan.target)
    outcome.signalled = True
    second: float | None = None
    if plan.second is not None and not _ended(proc, sent + plan.second_after):
        second = _send(proc.pid, plan.second, plan.target)
        outcome.second_sent = True
    deadline = sent + exit_within + KILL_GRACE
    if second is not None:
        deadline = max(deadline, second + second_within + KILL_GRACE)
    outcome.hung_after = deadline - sent
    if _ended(proc, deadline):
        ended = time.monotonic()
        outcome.code, outcome.ended_after = proc.returncode, ended - sent
        if second is not None:
            outcome.ended_after_second = ended - second


def _ended(proc: subprocess.Popen[bytes], until: float) -> bool:
    """Whether the process ends before the monotonic time ``until`` (polled every 5 ms)."""
    while proc.poll() is None:
        left = until - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(0.005, left))
    return True


def _send(pid: int, signum: signal.Signals, target: str) -> float:
    """Send ``signum`` to the process or its group; returns when (monotonic)."""
    with contextlib.suppress(ProcessLookupError):  # it ended just now: the poll will tell
        if target == "group":
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    return time.monotonic()


def judge(setup: Setup, outcome: Outcome, exit_within: float, second_within: float) -> list[str]:
    """What is wrong with how a trial ended (nothing: it ended as it must)."""
    plan, problems = outcome.plan, []
    if outcome.hung:
        problems.append(
            f"did not end within {outcome.hung_after:g}s of {plan.signum.name} sent at "
            f"{plan.delay:.3f}s (killed)"
        )
    elif outcome.signalled:
        if outcome.ended_after is not None and outcome.ended_after > exit_within:
            problems.append(f"ended {outcome.ended_after:.2f}s after {plan.signum.name}")
        late = outcome.ended_after_second
        if late is not None and late > second_within:
            assert plan.second is not None
            problems.append(f"ended {late:.2f}s after the second signal, {plan.second.name}")
        if outcome.forced and not outcome.second_sent:
            problems.append(f"the clean stop did not end by itself: {outcome.forced!r}")
        if (
            outcome.code not in (codes := interrupted_codes(plan, outcome.forced))
            and not (outcome.code == setup.normal_code and outcome.output == "new")
            and not outcome.python_startup  # no crawler code ran: nothing it could do
        ):
            problems.append(f"exit code {outcome.code}, not {codes}")
    elif outcome.code != setup.normal_code:
        problems.append(f"ended by itself with {outcome.code}, not {setup.normal_code}")
    if not outcome.lock_free:
        problems.append(f"the lock {setup.output / LOCK} was held")
    if outcome.leftovers:
        problems.append(
            f"processes of the run alive {GONE_WITHIN:g}s after it ended: "
            + ", ".join(outcome.leftovers)
        )
    if outcome.output not in ("previous", "new"):
        problems.append(f"output damaged: {outcome.output}")
    if outcome.verified is False:
        problems.append("crawler verify failed on the published branch")
    return problems


def interrupted_codes(plan: Plan, forced: str = "") -> tuple[int, ...]:
    """The exit codes an interrupted run may give: ``128 + signal`` (the crawler stopped
    cleanly) or ``-signal`` (Popen's way of saying the signal's default action ended it, before
    the crawler handles signals; a shell reports it as ``128 + signal`` too). A second signal
    ends the run at once with the first one's code (``crawler/cli/stopping.py``); it can only end it
    itself (``-second``) once the crawler no longer handles signals, as it exits.

    Two signals pending at once (sent 20 ms apart to a process busy in C for longer) reach its
    handlers in the order of their numbers, not the order they were sent: SIGTERM then SIGHUP
    is then handled as SIGHUP first, and the run ends with the second's code, saying "received
    SIGTERM again". That code is one the run may give too. Sent right after each other, the
    two may also reach the process's threads in either order (CI of 2026-12-02: SIGHUP then
    SIGTERM ended with 143, "received SIGHUP again"): the second's code is then the run's too
    when its ``forced`` line says the first came again."""
    codes = [128 + plan.signum, -plan.signum]
    if plan.second is not None:
        codes.append(-plan.second)
        if plan.second < plan.signum or f"received {plan.signum.name} again" in forced:
            codes.append(128 + plan.second)
    return tuple(dict.fromkeys(int(code) for code in codes))


# --- the checks ---------------------------------------------------------------------------------


def crawler_env() -> dict[str, str]:
    """The environment of a crawler run: unbuffered, no terminal sizing or colour."""
    env = dict(os.environ)
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "PYTHONWARNINGS"):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def fresh_output(setup: Setup) -> None:
    """Make the trial's output folder a copy of the previous publish (its caches included)."""
    shutil.rmtree(setup.output, ignore_errors=True)
    shutil.copytree(setup.snapshot, setup.output, symlinks=True)


def session_members(sid: int) -> list[int]:
    """Live (not zombie) processes whose session or process group is ``sid``, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # ended meanwhile
            continue
        if fields[0] != "Z" and sid in (int(fields[2]), int(fields[3])):
            members.append(int(stat.parent.name))
    return sorted(members)


def describe_process(pid: int) -> str:
    """``pid (command line)``, shortened."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        command = "?"
    return f"{pid} ({command.strip()[:100]})"


def leftovers(sid: int, within: float = GONE_WITHIN) -> list[str]:
    """The processes of a run's session still alive ``within`` seconds from now (then killed)."""
    deadline = time.monotonic() + within
    while (members := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.02)
    found = [describe_process(pid) for pid in members]
    kill_session(sid)
    return found


def kill_session(sid: int) -> None:
    """SIGKILL, one pid at a time, every process of a run's session (all started by us)."""
    for pid in session_members(sid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def lock_is_free(output: Path) -> bool:
    """Whether a non-blocking ``flock`` on the output's lock file succeeds (released at once)."""
    try:
        fd = os.open(output / LOCK, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the lock, if taken
    return True


def branch_files(folder: Path) -> dict[str, bytes]:
    """Every file under a branch folder (relative path -> bytes)."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def output_state(setup: Setup) -> str:
    """``previous`` (the branch folder as it was, byte for byte), ``new`` (index.json as a
    complete sync of the changed mirror publishes it), or what is wrong."""
    folder = setup.output / setup.branch
    try:
        index = (folder / "index.json").read_bytes()
    except OSError as err:
        return f"index.json unreadable ({err.strerror or err})"
    if index == setup.new_index:
        return "new"
    if index != (setup.snapshot / setup.branch / "index.json").read_bytes():
        return f"index.json is neither the previous nor the new one ({len(index)} bytes)"
    now, before = branch_files(folder), branch_files(setup.snapshot / setup.branch)
    changed = sorted(
        name for name in now.keys() | before.keys() if now.get(name) != before.get(name)
    )
    return "previous" if not changed else "previous index.json, but changed: " + ", ".join(changed)


def verify_ok(setup: Setup, folder: Path | None = None, *, schema: bool = False) -> bool:
    """Whether ``crawler verify`` (``--no-schema`` unless ``schema``) accepts a branch folder
    (by default the trial's)."""
    folder = folder or setup.output / setup.branch
    argv = [*setup.command, "verify", "-q", *([] if schema else ["--no-schema"]), str(folder)]
    done = subprocess.run(argv, cwd=setup.cwd, env=crawler_env(), capture_output=True, check=False)
    return done.returncode == 0


def stack_dump(pid: int) -> str:
    """``py-spy dump`` of a process and its children, if py-spy is installed (else a hint)."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None:
        return "(install py-spy to see where it was stuck)"
    dumps = []
    for member in session_members(pid):
        try:
            done = subprocess.run(
                [spy, "dump", "--pid", str(member)], capture_output=True, text=True, timeout=20
            )
            dumps.append(done.stdout.strip() or done.stderr.strip())
        except subprocess.TimeoutExpired:
            dumps.append(f"py-spy dump --pid {member} timed out")
    return "\n".join(dumps)


def _tail(log: Path, lines: int = 12) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# --- the summary ----------------------------------------------------------------------------------


def summary(outcomes: Sequence[Outcome]) -> tuple[list[str], bool]:
    """Lines summing up the trials, and whether they all passed."""
    signalled = [o for o in outcomes if o.signalled]
    by_signal = Counter(o.plan.signum.name for o in signalled)
    by_target = Counter(o.plan.target for o in signalled)
    ended = [o for o in signalled if o.ended_after is not None]
    slowest = max(ended, key=lambda o: o.ended_after or 0.0, default=None)
    lines = [
        f"trials: {len(outcomes)}, signalled while running: {len(signalled)} "
        f"({', '.join(f'{n} {k}' for k, n in sorted(by_signal.items())) or 'none'}; "
        f"{', '.join(f'{n} to the {k}' for k, n in sorted(by_target.items())) or '-'}), "
        f"ended before the signal: {len(outcomes) - len(signalled)}",
        f"exit codes: {dict(sorted(Counter(str(o.code) for o in outcomes).items()))}; output: "
        f"{dict(sorted(Counter(o.output for o in outcomes).items()))}",
    ]
    if slowest is not None:
        lines.append(
            f"slowest from signal to exit: {slowest.ended_after:.2f}s (trial "
            f"{slowest.plan.number}: {slowest.plan.describe()})"
        )
    seconds = [o.ended_after_second for o in outcomes if o.ended_after_second is not None]
    if seconds:
        lines.append(f"slowest from the second signal to exit: {max(seconds):.2f}s")
    for what, bad in (
        ("hung", [o for o in outcomes if o.hung]),
        ("lock held", [o for o in outcomes if not o.lock_free]),
        ("processes left", [o for o in outcomes if o.leftovers]),
        ("output damaged", [o for o in outcomes if o.output not in ("previous", "new")]),
        ("failed", [o for o in outcomes if o.problems]),
        (
            "CPython's own start-up interrupted (any code accepted)",
            [o for o in outcomes if o.python_startup],
        ),
        (
            "with a traceback in the run's output (not a failure)",
            [o for o in outcomes if o.traceback],
        ),
    ):
        numbers = ", ".join(str(o.plan.number) for o in bad) or "none"
        lines.append(f"{what}: {len(bad)} ({numbers})")
    passed = all(o.ok for o in outcomes)
    lines.append("PASS" if passed else "FAIL")
    return lines, passed


# --- the script ---------------------------------------------------------------------------------


def crawler_command(given: str | None) -> list[str]:
    """``--crawler`` split like a shell would, else the venv's ``crawler``."""
    if given:
        return shlex.split(given)
    beside = Path(sys.executable).parent / "crawler"
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "crawler"]


def sync_once(
    command: list[str], args: list[str], output: Path, log: Path, cwd: Path = REPO
) -> tuple[int, float]:
    """Run a sync to its end; its exit code and wall time."""
    started = time.monotonic()
    with log.open("wb") as sink:
        done = subprocess.run(
            [*command, *args, "--output", str(output)],
            cwd=cwd,
            env=crawler_env(),
            stdout=sink,
            stderr=subprocess.STDOUT,
            check=False,
        )
    return done.returncode, time.monotonic() - started


def prepare(
    command: list[str], base: list[str], previous: str, changed: str, work: Path, cwd: Path = REPO
) -> tuple[Setup, float]:
    """Publish the ``previous`` mirror with ``sync`` arguments ``base`` (no ``--mirror`` nor
    ``--output``; one ``--branch``), then sync the ``changed`` one into a copy of that output
    (the reference, checked by ``crawler verify`` with its schema). Returns the trials' setup
    and the reference sync's wall time."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    branch = base[base.index("--branch") + 1]
    snapshot, reference = work / "previous", work / "reference"
    args = [*base, "--mirror", previous]
    code, seconds = sync_once(command, args, snapshot, work / "previous.log", cwd)
    if code != 0:
        raise RuntimeError(f"the first sync exited with {code}: {_tail(work / 'previous.log')}")
    shutil.copytree(snapshot, reference, symlinks=True)
    args = [*base, "--mirror", changed]
    code, seconds = sync_once(command, args, reference, work / "reference.log", cwd)
    if code != 0:
        raise RuntimeError(
            f"the reference sync exited with {code}: {_tail(work / 'reference.log')}"
        )
    new_index = (reference / branch / "index.json").read_bytes()
    setup = Setup(command, args, cwd, branch, snapshot, work / "trial", new_index)
    if not verify_ok(setup, reference / branch, schema=True):
        raise RuntimeError(f"crawler verify found problems in {reference / branch}")
    return setup, seconds


def serve_quietly(root: Path, log: Path) -> ServerProcess:
    """``bench/server.py`` serving ``root``, its stderr in ``log``: every interrupted download
    makes aiohttp log a connection reset there, with a traceback."""
    argv = [sys.executable, str(BENCH_DIR / "server.py"), str(root), "--port", "0"]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=sink, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if " at http://" not in line:
        process.kill()
        process.wait()
        raise RuntimeError(f"bench server did not start: {line!r}; see {log}")
    return ServerProcess(process, line.rsplit(" at ", 1)[1].strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="Interrupt crawler sync at random moments.")
    add_arguments(parser)
    parser.add_argument("--branch", default="develop", help="ref to sync (develop)")
    parser.add_argument("--trials", type=int, default=60, help="number of trials (60)")
    parser.add_argument("--from", dest="start", type=float, default=1.0, help="earliest signal, s")
    parser.add_argument(
        "--to", dest="stop", default="2.6", help="latest signal, s; 'end': the reference's time"
    )
    parser.add_argument("--trial-seed", type=int, help="seed of the random trials (default: new)")
    parser.add_argument("--signals", default="TERM,INT,HUP", help="signals to pick from")
    parser.add_argument("--target", choices=("process", "group", "both"), default="process")
    parser.add_argument("--second-after", type=float, help="send a second signal S s later")
    parser.add_argument("--exit-within", type=float, default=EXIT_WITHIN, help="seconds (5)")
    parser.add_argument("--verify-every", type=int, default=10, help="verify every Nth trial")
    parser.add_argument("--crawler", metavar="CMD", help="crawler command (default: the venv's)")
    parser.add_argument(
        "--config", type=Path, help="config file (default: the repository's config/crawler.yaml)"
    )
    parser.add_argument("--out", type=Path, default=OUT, help=f"mirrors and runs ({OUT})")
    args = parser.parse_args(argv)
    signals = [signal.Signals[f"SIG{name.strip().upper()}"] for name in args.signals.split(",")]
    seed = (
        args.trial_seed if args.trial_seed is not None else random.SystemRandom().randrange(2**32)
    )
    params = params_from(args)
    changed = dataclasses.replace(params, seed=params.seed + 1)  # every index differs
    out = args.out.resolve()
    mirrors = out / "mirrors"
    for wanted in (params, changed):
        print(f"mirror {wanted.key}: {ensure_mirror(mirrors, wanted).files[0].bytes:,} B root")
    command = crawler_command(args.crawler)
    if not args.crawler:  # as bench/run.py: imports compiled, as an installed crawler's are
        print(compile_crawler(), flush=True)
    targets = TARGETS if args.target == "both" else (args.target,)
    with serve_quietly(mirrors, out / "interrupts-server.log") as server:
        base = ["sync", "--branch", args.branch, "--format", "json"]
        base += ["--config", str((args.config or REPO / "config" / "crawler.yaml").resolve())]
        previous, new = f"{server.url}/{params.key}", f"{server.url}/{changed.key}"
        # Run from the work folder, not the repository: `python -m crawler` (--crawler) would
        # import the repository's crawler package before the one it names.
        work = out / "interrupts"
        setup, seconds = prepare(command, base, previous, new, work, cwd=work)
        print(f"changed mirror synced in {seconds:.2f}s (the reference); trial seed {seed}")
        print(f"runs and their logs: {setup.output.parent}", flush=True)
        rng = random.Random(seed)
        stop = seconds if args.stop == "end" else float(args.stop)
        outcomes = []
        for plan in plans(
            rng,
            args.trials,
            args.start,
            stop,
            signals=signals,
            targets=targets,
            second_after=args.second_after,
        ):
            verify = plan.number % max(1, args.verify_every) == 0
            outcome = run_trial(setup, plan, verify=verify, exit_within=args.exit_within)
            outcomes.append(outcome)
            print(outcome.line(), flush=True)
            if not outcome.ok:
                print("  log:", *outcome.log_tail.splitlines(), sep="\n    ")
                if outcome.stuck:
                    print("  stuck in:", *outcome.stuck.splitlines()[:60], sep="\n    ")
    lines, passed = summary(outcomes)
    print(f"\ntrial seed {seed}; crawler: {shlex.join(command)}")
    print(*lines, sep="\n")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
