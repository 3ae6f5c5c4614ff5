"""Benchmark ``crawler sync`` against its floor and the sequential baseline, on one served mirror.

``.venv/bin/python bench/run.py [--records 60000 --stacks 30 ...] [--latency-ms 50
--bandwidth-mbps 50] [--json FILE]``: generates the mirror into ``bench/out/mirrors/`` unless a
mirror with the same parameters is there already, serves it with ``bench/server.py`` (a separate
process, on 127.0.0.1), then measures, in this order:

1. ``crawler sync`` cold (empty output folder) as a subprocess, from the repository root (so
   ``config/crawler.yaml`` applies, as for a user): wall time and peak RSS of the whole process
   tree (psutil, every 20 ms: the sum over the process and all its descendants, and the largest
   single process), and the kernel's figures (``wait4`` max RSS and
   ``getrusage(RUSAGE_CHILDREN).ru_maxrss``, taken in a tiny spawner process because a child's
   kernel max RSS starts from its parent's high-water RSS);
2. ``crawler sync`` warm: same mirror, same output folder; its ``index.json`` must be
   byte-identical to the cold one;
3. the floor (``bench/floor.py``): all index files downloaded at once, then decoded minimally
   on 2 processes; then the same files fetched by 8 parallel plain downloads (8 connections,
   each file once, largest first), the yardstick of the shaped network's target;
4. the baseline (``bench/baseline.py``) as a subprocess, sampled the same way;
5. the scenarios of :mod:`bench.scenarios` (``--scenarios``, by default both): a nightly run
   against its floor, and ``--all`` over five snapshots against one cold sync.

It prints machine info, the figures, the ratios and PASS/FAIL per target, and with ``--json``
saves them. Before measuring, every mirror file is read once so that all runs see a warm page
cache. Run folders are under ``bench/out/runs/``. Every mirror is served from one folder,
``bench/out/mirrors/``, each under its own path.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# psutil ships no types; types-psutil may or may not be installed, and psutil itself is only
# in the 'bench' extra: keep mypy clean in every case.
import psutil  # type: ignore[import-untyped,import-not-found,unused-ignore]

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.bytecode import compile_crawler  # noqa: E402
from bench.floor import PLAIN_CONNECTIONS, FloorFigures, download_pooled, measure_floor  # noqa: E402
from bench.generate import (  # noqa: E402
    Generated,
    add_arguments,
    describe,
    ensure_mirror,
    params_from,
)
from bench.scenarios import Scenario, nightly, snapshots  # noqa: E402
from bench.scenarios import lines as scenario_lines  # noqa: E402
from bench.scenarios import targets as scenario_targets  # noqa: E402
from bench.server import ServerProcess  # noqa: E402

OUT = BENCH_DIR / "out"
MB = 1e6
SAMPLE_SECONDS = 0.02

# Targets of the "Scale" issue.
# Issue 43's targets (the straight line).
TARGET_COLD_OVER_FLOOR = 3.0
TARGET_BASELINE_OVER_COLD = 8.0
TARGET_PEAK = 350 * MB  # the process tree's summed PSS
TARGET_WARM_SECONDS = 0.5
# Set for a network shaped like a CDN (50 ms a request, 50 MB/s a connection); SKIP unshaped.
TARGET_COLD_OVER_PLAIN = 1.5
SHAPED_TARGET = (
    f"cold <= {TARGET_COLD_OVER_PLAIN:g}x {PLAIN_CONNECTIONS} parallel downloads (shaped)"
)
# crawler exit codes: 0 published; 6 nothing changed (the expected answer of a warm run).
EXIT_PUBLISHED, EXIT_UNCHANGED = 0, 6


@dataclass
class ProcessFigures:
    """One measured subprocess run."""

    argv: list[str]
    returncode: int
    seconds: float
    peak_tree_rss: int  # max over samples of the sum of RSS of the process and its descendants
    # The same sum without file-backed and shared pages (RSS - statm "shared"): the memory the
    # tree really owns. RSS counts a page-cache page once per process that maps it (mmap).
    peak_tree_anon: int
    # The same sum of PSS (each page divided among the processes that map it: the forkserver's
    # pages its workers share count once): the figure issue 43's memory target names.
    peak_tree_pss: int
    peak_single_rss: int  # max over samples of the largest single process's RSS
    peak_processes: int  # most processes seen in one sample
    # The kernel's figures, from the spawner: max RSS of the process and of the descendants it
    # reaped (wait4), and the spawner's getrusage(RUSAGE_CHILDREN) after it (the same, counted
    # by the spawner). Both start from the spawner's own high-water RSS (spawner_maxrss).
    wait4_maxrss: int
    rusage_children_maxrss: int
    spawner_maxrss: int
    samples: int
    log: str
    processes: list[dict[str, Any]]  # each process seen: role, peak RSS, CPU; biggest first
    cpu_seconds: float  # user + system CPU of the tree (as of each process's last sample)
    # Busy CPU time of the machine meanwhile that neither the tree, this script nor the server
    # used: other work that skews the figures (plus up to a sample's worth of the tree's own).
    other_cpu_seconds: float

    def to_json(self) -> dict[str, Any]:
        """JSON-able figures."""
        return dataclasses.asdict(self)


@dataclass
class _Seen:
    """One process of a measured tree, as last sampled."""

    role: str
    peak_rss: int = 0
    peak_anon: int = 0  # RSS less file-backed and shared pages
    cpu_seconds: float = 0.0  # user + system, at its last sample


class _Sampler(threading.Thread):
    """Samples the RSS (and CPU time) of a process tree until stopped."""

    def __init__(self, pid: int, interval: float) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.done = threading.Event()
        self.peak_tree = 0
        self.peak_tree_anon = 0
        self.peak_tree_pss = 0
        self.peak_single = 0
        self.peak_processes = 0
        self.samples = 0
        self.seen: dict[int, _Seen] = {}

    def run(self) -> None:
        try:
            parent = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self.done.is_set():
            self.sample(parent)
            self.done.wait(self.interval)

    def sample(self, parent: psutil.Process) -> None:
        """One sample: RSS of ``parent`` and every descendant alive right now."""
        try:
            processes = [parent, *parent.children(recursive=True)]
        except psutil.Error:
            return
        sizes, anons, psses = [], [], []
        for process in processes:
            try:
                memory = process.memory_full_info()  # smaps_rollup: about 0.2 ms a process
                rss, anon = int(memory.rss), int(memory.rss - getattr(memory, "shared", 0))
                pss = int(memory.pss)  # Linux, from smaps_rollup
                times = process.cpu_times()
                seen = self.seen.get(process.pid)
                if seen is None:
                    seen = self.seen[process.pid] = _Seen(_role(process, self.pid))
            except psutil.Error:
                continue  # ended between the listing and the read
            seen.peak_rss = max(seen.peak_rss, rss)
            seen.peak_anon = max(seen.peak_anon, anon)
            anons.append(anon)
            psses.append(pss)
            seen.cpu_seconds = float(times.user + times.system)
            sizes.append(rss)
        if sizes:
            self.samples += 1
            self.peak_tree = max(self.peak_tree, sum(sizes))
            self.peak_tree_anon = max(self.peak_tree_anon, sum(anons))
            self.peak_tree_pss = max(self.peak_tree_pss, sum(psses))
            self.peak_single = max(self.peak_single, max(sizes))
            self.peak_processes = max(self.peak_processes, len(sizes))


def _busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all CPUs, not idle or waiting on I/O)."""
    times = psutil.cpu_times()
    return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))


def _tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of a live process tree, including the children each process has reaped."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for process in processes:
        try:
            t = process.cpu_times()
        except psutil.Error:
            continue
        total += float(t.user + t.system + t.children_user + t.children_system)
    return total


def _own_cpu_seconds(extra: Sequence[int]) -> float:
    """CPU seconds of this script and of the ``extra`` processes (the mirror server)."""
    total = 0.0
    for pid in (os.getpid(), *extra):
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += float(times.user + times.system)
    return total


# Runs one command for run_measured and reports on it. The kernel's max-RSS figures of a child
# start from its parent's own high-water RSS (vfork/fork + exec keep it), so the command is
# started by this small stdlib-only process (python -I -S: ~10 MB) instead of this script.
_SPAWNER = """
import json, os, resource, subprocess, sys, time
log, cwd, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(log, "wb") as out:
    started = time.perf_counter()
    child = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    print(child.pid, flush=True)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
child.returncode = os.waitstatus_to_exitcode(status)
print(json.dumps({
    "returncode": child.returncode,
    "seconds": seconds,
    "wait4_maxrss": usage.ru_maxrss * 1024,
    "rusage_children_maxrss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024,
    "spawner_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
}), flush=True)
"""


def _role(process: psutil.Process, main: int) -> str:
    """A short name for a process of a measured tree."""
    if process.pid == main:
        return "main"
    command = " ".join(process.cmdline())
    if "multiprocessing.forkserver" in command:
        return "forkserver" if process.ppid() == main else "pool worker"
    if "resource_tracker" in command:
        return "resource tracker"
    return Path(command.split(" ", 1)[0]).name or "?"


def run_measured(
    argv: Sequence[str], *, cwd: Path, log: Path, ours: Sequence[int] = ()
) -> ProcessFigures:
    """Run ``argv`` to completion, sampling its process tree's RSS every 20 ms.

    The wall time is taken by the spawner around ``Popen`` and ``wait4`` (exact, not rounded to
    a sample); RSS samples start as soon as the spawner reports the child's pid. ``ours``: pids
    of other processes of the benchmark (the server), whose CPU time is not "other work".
    """
    busy, own = _busy_seconds(), _own_cpu_seconds(ours)
    spawner = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _SPAWNER, str(log), str(cwd), *argv],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert spawner.stdout is not None
    with spawner:
        pid_line = spawner.stdout.readline()
        if not pid_line.strip().isdigit():
            raise RuntimeError(f"could not start {argv[0]}: {pid_line!r}")
        sampler = _Sampler(int(pid_line), SAMPLE_SECONDS)
        sampler.start()
        result = json.loads(spawner.stdout.readline())
        sampler.done.set()
        sampler.join()
    tree_cpu = sum(seen.cpu_seconds for seen in sampler.seen.values())
    busy, own = _busy_seconds() - busy, _own_cpu_seconds(ours) - own
    return ProcessFigures(
        argv=list(argv),
        returncode=int(result["returncode"]),
        seconds=float(result["seconds"]),
        peak_tree_rss=sampler.peak_tree,
        peak_tree_anon=sampler.peak_tree_anon,
        peak_tree_pss=sampler.peak_tree_pss,
        peak_single_rss=sampler.peak_single,
        peak_processes=sampler.peak_processes,
        wait4_maxrss=int(result["wait4_maxrss"]),
        rusage_children_maxrss=int(result["rusage_children_maxrss"]),
        spawner_maxrss=int(result["spawner_maxrss"]),
        samples=sampler.samples,
        log=str(log),
        processes=[
            dataclasses.asdict(seen)
            for seen in sorted(sampler.seen.values(), key=lambda seen: -seen.peak_rss)
        ],
        cpu_seconds=tree_cpu,
        other_cpu_seconds=max(0.0, busy - own - tree_cpu),
    )


def machine_info() -> dict[str, Any]:
    """What the figures were measured on."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = "?"
    import aiohttp
    import msgspec

    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "cpu": _cpu_model(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "aiohttp": aiohttp.__version__,
        "msgspec": msgspec.__version__,
        "git": commit,
        "loadavg_1min": round(os.getloadavg()[0], 2),
        "cpu_busy_percent": psutil.cpu_percent(interval=0.5),  # other work right before
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def prime_page_cache(generated: Generated) -> float:
    """Read every mirror file once, so that no measurement pays for the disk."""
    started = time.perf_counter()
    for path in generated.root.rglob("*"):
        if path.is_file():
            with path.open("rb") as src:
                while src.read(8 << 20):
                    pass
    return time.perf_counter() - started


def crawler_command(given: str | None) -> list[str]:
    """``--crawler`` split like a shell would, else the ``crawler`` beside this interpreter (the
    venv's), else the one on PATH."""
    if given:
        return shlex.split(given)
    beside = Path(sys.executable).parent / "crawler"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("crawler")
    if found is None:
        raise SystemExit("error: the crawler command is not installed (pip install -e .)")
    return [found]


def crawler_report(output: Path, branch: str) -> dict[str, Any]:
    """The stage timings in the crawler's ``report.json`` (empty if absent or unreadable)."""
    try:
        report: dict[str, Any] = json.loads((output / branch / "report.json").read_bytes())
    except (OSError, ValueError):
        return {}
    sources = [s for s in report.get("sources", []) if isinstance(s, dict)]
    root = next((s for s in sources if s.get("label") == "root"), {})
    stacks = [s for s in sources if s.get("label") != "root"]

    def total(key: str) -> float:
        return round(sum(float(s.get(key) or 0) for s in stacks), 3)

    def most(key: str) -> float:
        return max((float(s.get(key) or 0) for s in stacks), default=0.0)

    return {
        "duration_seconds": report.get("duration_seconds"),
        "root_fetch_seconds": root.get("fetch_seconds"),
        "root_decode_seconds": root.get("decode_seconds"),
        "stacks_fetch_seconds_sum": total("fetch_seconds"),
        "stacks_decode_seconds_sum": total("decode_seconds"),
        "stacks_fetch_seconds_max": most("fetch_seconds"),
        "stacks_decode_seconds_max": most("decode_seconds"),
        "stats": report.get("stats"),
    }


def _fmt_mb(value: float) -> str:
    return f"{value / MB:,.1f} MB"


def _status(ok: bool | None) -> str:
    return "SKIP" if ok is None else "PASS" if ok else "FAIL"


def _check_ok(figures: ProcessFigures, what: str, ok: Sequence[int] = (0,)) -> None:
    if figures.returncode not in ok:
        tail = Path(figures.log).read_text(errors="replace")[-3000:]
        raise SystemExit(f"error: {what} exited with {figures.returncode}; log:\n{tail}")


def measure_plain(urls: Sequence[str], repeat: int, ours: Sequence[int]) -> dict[str, Any]:
    """``urls`` fetched by 8 parallel plain downloads, ``repeat`` times (median), with the other
    work on the machine meanwhile (the downloads run in this script; ``ours``: the server)."""
    busy, own = _busy_seconds(), _own_cpu_seconds(ours)
    runs = [asyncio.run(download_pooled(urls, PLAIN_CONNECTIONS)) for _ in range(repeat)]
    other = (_busy_seconds() - busy) - (_own_cpu_seconds(ours) - own)
    return {
        "connections": PLAIN_CONNECTIONS,
        "files": len(urls),
        "bytes": runs[0][1],
        "seconds": _median([seconds for seconds, _ in runs]),
        "runs": [seconds for seconds, _ in runs],
        "other_cpu_seconds": max(0.0, other),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="Benchmark crawler sync (see bench/README.md).")
    add_arguments(parser)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="server latency per request")
    parser.add_argument("--bandwidth-mbps", type=float, default=None, help="MB/s per connection")
    parser.add_argument("--branch", help="ref to sync (default: the first, develop)")
    parser.add_argument("--repeat", type=int, default=1, help="cold+warm runs and floors (median)")
    parser.add_argument("--decode-workers", type=int, default=2, help="floor decode processes")
    parser.add_argument(
        "--crawler", metavar="CMD", help="crawler command (default: the venv's crawler)"
    )
    parser.add_argument("--skip-baseline", action="store_true", help="do not run the baseline")
    parser.add_argument(
        "--scenarios",
        default="nightly,snapshots",
        help="comma-separated scenarios to run after cold and warm ('' for none)",
    )
    parser.add_argument("--json", type=Path, help="also save the figures to this file")
    parser.add_argument(
        "--out", type=Path, default=OUT, help=f"generated mirrors and runs (default: {OUT})"
    )
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    wanted = [name for name in args.scenarios.split(",") if name]
    if set(wanted) - {"nightly", "snapshots"}:
        parser.error(f"--scenarios: nightly and/or snapshots, not {args.scenarios!r}")

    machine = machine_info()
    print(
        f"machine: {machine['cores']} cores ({machine['cores_usable']} usable), {machine['cpu']}, "
        f"{machine['memory_gib']} GiB; Python {machine['python']}; aiohttp {machine['aiohttp']}, "
        f"msgspec {machine['msgspec']}; crawler at {machine['git']}",
        flush=True,
    )
    if machine["cpu_busy_percent"] > 10:
        print(
            f"WARNING: the CPUs were {machine['cpu_busy_percent']:.0f}% busy before starting "
            f"(load {machine['loadavg_1min']}): other work skews these figures",
            flush=True,
        )

    params = params_from(args)
    print(f"mirror {params.key} ...", flush=True)
    out = args.out.resolve()  # the crawler runs from the repository, not from here
    generated = ensure_mirror(out / "mirrors", params)
    print(describe(generated), flush=True)
    branch = args.branch or generated.refs[0]
    if branch not in generated.refs:
        parser.error(f"--branch {branch}: the mirror has {', '.join(generated.refs)}")
    files = [f for f in generated.files if f.ref == branch]
    print(f"page cache primed in {prime_page_cache(generated):.1f}s", flush=True)

    shape = f"lat{args.latency_ms:g}-bw{args.bandwidth_mbps:g}" if args.bandwidth_mbps else ""
    shape = shape or (f"lat{args.latency_ms:g}" if args.latency_ms else "unshaped")
    work = out / "runs" / f"{params.key}-{shape}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    crawler = crawler_command(args.crawler)
    if not args.crawler:
        print(compile_crawler(), flush=True)
    startup = run_measured([*crawler, "--version"], cwd=REPO, log=work / "version.log")

    with ServerProcess.start(
        generated.root.parent, latency_ms=args.latency_ms, bandwidth_mbps=args.bandwidth_mbps
    ) as server:
        url = f"{server.url}/{generated.root.name}"
        ours = [server.process.pid]
        print(f"serving {generated.root} at {url} ({shape})", flush=True)
        colds: list[ProcessFigures] = []
        warms: list[ProcessFigures] = []
        identical = True
        warm_failures = 0
        report: dict[str, Any] = {}
        for attempt in range(args.repeat):
            output = work / f"output-{attempt}"
            sync = [*crawler, "sync", "--branch", branch, "--mirror", url, "--output", str(output)]
            sync += ["--format", "json"]
            cold = run_measured(sync, cwd=REPO, log=work / f"cold-{attempt}.log", ours=ours)
            _check_ok(cold, "crawler sync (cold)")
            cold_index = (output / branch / "index.json").read_bytes()
            report = crawler_report(output, branch)
            warm = run_measured(sync, cwd=REPO, log=work / f"warm-{attempt}.log", ours=ours)
            if warm.returncode in (EXIT_PUBLISHED, EXIT_UNCHANGED):
                identical &= (output / branch / "index.json").read_bytes() == cold_index
            else:  # reported as a failed target; the other figures are still worth having
                warm_failures += 1
                tail = Path(warm.log).read_text(errors="replace").splitlines()[-8:]
                print(f"  warm run exited with {warm.returncode}:", *tail, sep="\n    ")
            colds.append(cold)
            warms.append(warm)
            print(
                f"  run {attempt + 1}: cold {cold.seconds:.2f}s, "
                f"peak tree PSS {_fmt_mb(cold.peak_tree_pss)}; warm {warm.seconds:.2f}s",
                flush=True,
            )

        served = [f"{url}/{f.path}" for f in files]
        local = [(generated.root / f.path, f.label == "root") for f in files]
        # This script, its floor workers (reaped by its forkserver) and the server.
        busy, own = _busy_seconds(), _tree_cpu_seconds(os.getpid())
        floors = [measure_floor(served, local, args.decode_workers) for _ in range(args.repeat)]
        time.sleep(0.3)  # lets the forkserver reap its workers, whose CPU time it then holds
        floor_other = (_busy_seconds() - busy) - (_tree_cpu_seconds(os.getpid()) - own)
        # Largest first: the root on its own connection from the start, the shortest any
        # schedule of whole files over 8 connections gets, so the strictest yardstick.
        largest = sorted(files, key=lambda f: f.bytes, reverse=True)
        plain = measure_plain([f"{url}/{f.path}" for f in largest], args.repeat, ours)

        baseline: ProcessFigures | None = None
        if not args.skip_baseline:
            baseline_argv = [sys.executable, str(BENCH_DIR / "baseline.py"), "--mirror", url]
            baseline_argv += ["--branch", branch, "--output", str(work / "baseline-pages")]
            baseline = run_measured(baseline_argv, cwd=REPO, log=work / "baseline.log", ours=ours)
            _check_ok(baseline, "bench/baseline.py")

        scenario = Scenario(
            generated.root.parent,
            server.url,
            work,
            crawler,
            lambda argv, log: run_measured(argv, cwd=REPO, log=log, ours=ours),
            args.repeat,
            args.decode_workers,
        )
        found: dict[str, Any] = {}
        for name in wanted:
            print(f"scenario {name} ...", flush=True)
            found[name] = (nightly if name == "nightly" else snapshots)(scenario, params)

    identical = identical and not warm_failures
    figures = _summarize(
        machine, generated, branch, shape, args, startup, colds, warms, identical, floors, baseline
    )
    figures["plain_downloads"] = plain
    _add_shaped_target(figures)
    figures["floor"]["other_cpu_seconds"] = max(0.0, floor_other)
    figures["crawler_report"] = report
    figures["scenarios"] = found
    figures["targets"].update(scenario_targets(found, figures["cold"]["seconds"], TARGET_PEAK))
    _print(figures)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"figures saved to {args.json}")
    return 0


def _add_shaped_target(figures: dict[str, Any]) -> None:
    """The shaped network's ratio and target (SKIP, None, unshaped: it is set for a CDN)."""
    plain_s = figures["plain_downloads"]["seconds"]
    ratio = figures["cold"]["seconds"] / plain_s if plain_s else None
    figures["ratios"]["cold_over_8_parallel"] = ratio
    shaped = figures["shaping"]["name"] != "unshaped"
    figures["targets"][SHAPED_TARGET] = (
        None if not shaped else ratio is not None and ratio <= TARGET_COLD_OVER_PLAIN
    )


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def _summarize(
    machine: dict[str, Any],
    generated: Generated,
    branch: str,
    shape: str,
    args: argparse.Namespace,
    startup: ProcessFigures,
    colds: list[ProcessFigures],
    warms: list[ProcessFigures],
    identical: bool,
    floors: list[FloorFigures],
    baseline: ProcessFigures | None,
) -> dict[str, Any]:
    cold_s = _median([c.seconds for c in colds])
    warm_s = _median([w.seconds for w in warms])
    floor_s = _median([f.seconds for f in floors])
    peak_tree = max(c.peak_tree_rss for c in colds + warms)
    peak_pss = max(c.peak_tree_pss for c in colds + warms)
    ratios: dict[str, float | None] = {
        "cold_over_floor": cold_s / floor_s if floor_s else None,
        "baseline_over_cold": baseline.seconds / cold_s if baseline and cold_s else None,
    }
    cold_over_floor = ratios["cold_over_floor"]
    baseline_over_cold = ratios["baseline_over_cold"]
    targets = {
        "cold <= 3x floor": cold_over_floor is not None
        and cold_over_floor <= TARGET_COLD_OVER_FLOOR,
        "baseline/cold >= 8": None
        if baseline_over_cold is None
        else baseline_over_cold >= TARGET_BASELINE_OVER_COLD,
        "peak PSS <= 350 MB": peak_pss <= TARGET_PEAK,
        "warm <= 0.5 s": warm_s <= TARGET_WARM_SECONDS
        and all(w.returncode in (EXIT_PUBLISHED, EXIT_UNCHANGED) for w in warms),
        "warm index.json identical": identical,
    }
    files = [f for f in generated.files if f.ref == branch]
    return {
        "machine": machine,
        "mirror": {
            **generated.to_json(),
            "root": str(generated.root),
            "branch": branch,
            "branch_files": len(files),
            "branch_bytes": sum(f.bytes for f in files),
            "branch_records": sum(f.records for f in files),
        },
        "shaping": {
            "name": shape,
            "latency_ms": args.latency_ms,
            "bandwidth_mbps": args.bandwidth_mbps,
        },
        "repeat": args.repeat,
        "floor": {
            "download_seconds": _median([f.download_seconds for f in floors]),
            "decode_seconds": _median([f.decode_seconds for f in floors]),
            "seconds": floor_s,
            "runs": [{**dataclasses.asdict(f), "seconds": f.seconds} for f in floors],
        },
        "crawler_startup": startup.to_json(),
        "cold": {"seconds": cold_s, "runs": [c.to_json() for c in colds]},
        "warm": {"seconds": warm_s, "runs": [w.to_json() for w in warms], "identical": identical},
        "baseline": baseline.to_json() if baseline else None,
        "peak_tree_rss": peak_tree,
        "peak_tree_pss": peak_pss,
        "ratios": ratios,
        "targets": targets,
    }


def _print(figures: dict[str, Any]) -> None:
    mirror, floor = figures["mirror"], figures["floor"]
    size, records = mirror["branch_bytes"], mirror["branch_records"]
    runs = floor["runs"]
    print()
    print(
        f"== {mirror['branch']}: {mirror['branch_files']} index files, "
        f"{_fmt_mb(size)}, {records:,} records; shaping: {figures['shaping']['name']}; "
        f"repeat {figures['repeat']} (medians)"
    )
    download = floor["download_seconds"]
    print(
        f"floor      download {download:7.2f}s  ({size / MB / download:,.0f} MB/s, "
        f"{runs[0]['files']} files at once)"
    )
    print(
        f"           decode   {floor['decode_seconds']:7.2f}s  "
        f"({runs[0]['decode_workers']} processes, minimal structs)"
    )
    print(
        f"           floor    {floor['seconds']:7.2f}s  (download + decode; other work on the "
        f"machine during the floor phase: {floor['other_cpu_seconds']:.2f} CPU-s)"
    )
    plain = figures.get("plain_downloads")
    if plain:
        print(
            f"plain      download {plain['seconds']:7.2f}s  "
            f"({plain['bytes'] / MB / plain['seconds']:,.0f} MB/s, {plain['files']} files over "
            f"{plain['connections']} parallel connections, largest first; other work on the "
            f"machine meanwhile: {plain['other_cpu_seconds']:.2f} CPU-s)"
        )
    startup = figures["crawler_startup"]
    print(f"crawler    startup  {startup['seconds']:7.2f}s  (crawler --version)")
    for name in ("cold", "warm"):
        block = figures[name]
        run = max(block["runs"], key=lambda r: r["peak_tree_rss"])
        extra = ""
        if name == "warm":
            codes = sorted({r["returncode"] for r in block["runs"]})
            extra = f"; exit {codes}; index.json " + (
                "identical" if block["identical"] else "DIFFERS (or warm failed)"
            )
        _print_process(f"{name:<10}", block["seconds"], run, extra)
    report = figures.get("crawler_report") or {}
    if report:
        print(
            f"           cold report.json: duration {report.get('duration_seconds')}s, root fetch "
            f"{report.get('root_fetch_seconds')}s + decode {report.get('root_decode_seconds')}s; "
            f"stacks fetch max {report.get('stacks_fetch_seconds_max')}s, decode max "
            f"{report.get('stacks_decode_seconds_max')}s "
            f"(sum {report.get('stacks_decode_seconds_sum')}s)"
        )
    baseline = figures["baseline"]
    if baseline:
        _print_process("baseline  ", baseline["seconds"], baseline, "")
    for line in scenario_lines(figures.get("scenarios") or {}, figures["cold"]["seconds"]):
        print(line)
    ratios = figures["ratios"]
    print()
    for key, value in ratios.items():
        print(f"{key:<20} {'n/a' if value is None else f'{value:.2f}'}")
    print()
    shaped = figures["shaping"]["name"] != "unshaped"
    if shaped:
        # The issue sets these targets on unshaped loopback: shaped, they are only a comparison.
        print("targets are set for unshaped loopback; with shaping they are for comparison only")
    targets = dict(figures["targets"])
    shaped_ok = targets.pop(SHAPED_TARGET, None)
    for name, ok in targets.items():
        print(f"{_status(ok)}  {name}")
    if shaped:
        print(
            "target set for a shaped network (50 ms a request, 50 MB/s a connection; this run: "
            f"{figures['shaping']['name']})"
        )
    print(f"{_status(shaped_ok)}  {SHAPED_TARGET}")


def _print_process(label: str, seconds: float, run: dict[str, Any], extra: str) -> None:
    print(
        f"{label} wall     {seconds:7.2f}s  peak PSS: tree {_fmt_mb(run['peak_tree_pss'])}; "
        f"peak RSS: tree {_fmt_mb(run['peak_tree_rss'])} "
        f"(without file/shared pages {_fmt_mb(run['peak_tree_anon'])}) "
        f"(max {run['peak_processes']} processes), largest process "
        f"{_fmt_mb(run['peak_single_rss'])}, wait4 {_fmt_mb(run['wait4_maxrss'])}, "
        f"RUSAGE_CHILDREN {_fmt_mb(run['rusage_children_maxrss'])}{extra}"
    )
    print(
        f"{'':<10} CPU {run['cpu_seconds']:.2f}s ({run['cpu_seconds'] / seconds:.2f} cores); "
        f"other work on the machine meanwhile: {run['other_cpu_seconds']:.2f} CPU-s"
    )
    if len(run["processes"]) > 1:
        peaks = ", ".join(
            f"{p['role']} {_fmt_mb(p['peak_rss'])} ({_fmt_mb(p['peak_anon'])}) / "
            f"{p['cpu_seconds']:.1f} CPU-s"
            for p in run["processes"]
        )
        print(f"{'':<10} per process (peak RSS (without file/shared) / CPU): {peaks}")


if __name__ == "__main__":
    sys.exit(main())
