"""Time ``crawler find`` on a develop-sized published branch (60,000 specs): each query a
process of its own, as a user runs it, start-up included. Prints the figures and PASS/FAIL
against the target (0.5 s).

``python bench/find.py [--repeat 5] [--out bench/out]``: the mirror is made (or reused) by
``bench/generate.py``'s defaults, synced once with ``crawler sync --format json`` into
``<out>/find/output`` (reused while its ``index.json`` is there; delete the folder to sync
again), then each query runs ``--repeat`` times; the median wall time is the figure (and the
process's CPU time beside it: wall above CPU means the machine was busy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.generate import MirrorParams, ensure_mirror  # noqa: E402

TARGET_SECONDS = 0.5

#: (what it asks, the arguments of crawler find)
QUERIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("one package, table", ("py-numpy",)),
    ("one package, runs on a host, JSON", ("adios2", "--runs-on", "zen3", "--json")),
    ("a glob, family and compiler", ("py-*", "--family", "aarch64", "--compiler", "gcc")),
    ("every package: runs on a host, count", ("--runs-on", "neoverse_v2", "--stack", "e4s")),
    ("every package: variant and version", ("--variant", "+mpi", "--version", "1:2")),
    ("every spec of a target, JSON", ("--target", "zen4", "--json")),
    ("nothing matches (exit 10)", ("no-such-package",)),
)


def published(out: Path) -> Path:
    """The develop branch of the generated mirror, published (synced once, then reused)."""
    output = out / "find" / "output"
    if (output / "develop" / "index.json").is_file():
        return output / "develop"
    generated = ensure_mirror(out / "mirrors", MirrorParams())
    output.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    sync = [sys.executable, "-m", "crawler", "sync", "--branch", "develop"]
    sync += ["--mirror", str(generated.root), "--output", str(output), "--format", "json", "-q"]
    subprocess.run(sync, cwd=out, check=True)
    print(f"synced {generated.root} in {time.monotonic() - started:.1f} s", flush=True)
    return output / "develop"


def measure(folder: Path, args: Sequence[str]) -> tuple[float, float, int, int]:
    """One run of ``crawler find ARGS --in FOLDER`` (see :func:`timed`)."""
    return timed(["find", *args, "--in", str(folder)])


def timed(argv: Sequence[str]) -> tuple[float, float, int, int]:
    """One run of ``crawler ARGV`` in a process of its own: wall and CPU seconds, exit code,
    bytes printed."""
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "crawler", *argv],
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu, done.returncode, len(done.stdout)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time crawler find (see the docstring).")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each query (median)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "out", help="work folder")
    args = parser.parse_args(argv)
    folder = published(args.out.resolve())
    size = (folder / "index.json").stat().st_size
    print(f"index: {folder / 'index.json'} ({size / 1e6:.1f} MB)")
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    passed = True
    for label, query in QUERIES:
        runs = [measure(folder, query) for _ in range(args.repeat)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        ok = wall <= TARGET_SECONDS
        passed &= ok
        code, printed = runs[-1][2], runs[-1][3]
        print(
            f"{'PASS' if ok else 'FAIL'}  {wall:5.3f} s wall  {cpu:5.3f} s CPU  exit {code:<3} "
            f"{printed / 1e6:6.2f} MB out  {label}: crawler find {' '.join(query)}"
        )
    print(f"{'PASS' if passed else 'FAIL'}: every query within {TARGET_SECONDS} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
