"""Time ``crawler diff`` on two develop-sized published branches (60,000 specs each): each
comparison a process of its own, as a user runs it, start-up included.

``python bench/diff.py [--repeat 5] [--out bench/out]``: ``develop`` is published as for
``bench/find.py`` (reused when there), then changed copies of its ``index.json`` are written
beside it under ``<out>/diff/`` (as a publish writes them: keys sorted, compact, so that the
packages left alone keep their bytes):

* ``night``: what a night's publish changes: 1 % of the specs removed, as many added (new
  hashes), 1 % moved between stacks, two packages dropped, one new;
* ``restacked``: every spec moved between stacks: no package is the same (the worst case:
  every package of both indexes decoded and compared).

Each comparison runs ``--repeat`` times (``--json`` to a pipe, read whole); the median wall
time is the figure, the process's CPU time beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.find import published, timed  # noqa: E402
from crawler.output.render import encode_json  # noqa: E402

Document = dict[str, Any]


def _night(index: Document, rng: random.Random) -> None:
    """A night's changes (see the module docstring)."""
    packages = index["packages"]
    names = sorted(packages)
    for name in rng.sample(names, 2):
        del packages[name]
    packages["zzz-new-package"] = packages[next(iter(packages))]
    labels = sorted({s["label"] for s in index["sources"]} - {"root"})
    for package in packages.values():
        kept = []
        for spec in package["spec_details"]:
            roll = rng.random()
            if roll < 0.01:
                continue  # removed
            if roll < 0.02:
                spec = {**spec, "stacks": sorted({*spec["stacks"], rng.choice(labels)})}
            elif roll < 0.03:
                new = "".join(rng.choices("abcdefghijklmnopqrstuvwxyz234567", k=32))
                kept.append({**spec, "hash": new})  # added, beside it
            kept.append(spec)
        package["spec_details"] = sorted(kept, key=lambda s: s["hash"])


def _restacked(index: Document, rng: random.Random) -> None:
    """Every spec in one more stack, or one fewer."""
    for package in index["packages"].values():
        for spec in package["spec_details"]:
            extra = [s for s in spec["stacks"] if s != "root"]
            spec["stacks"] = ["root", *extra[1:]] if extra else ["root", "zz-new-stack"]
            spec["stacks"].sort()


VARIANTS: dict[str, Callable[[Document, random.Random], None]] = {
    "night": _night,
    "restacked": _restacked,
}


def derived(develop: Path, out: Path, name: str) -> Path:
    """The copy ``name`` of ``develop``'s index, written once (a folder of one index.json)."""
    folder = out / "diff" / name
    if (folder / "index.json").is_file():
        return folder
    index = json.loads((develop / "index.json").read_bytes())
    VARIANTS[name](index, random.Random(f"diff:{name}"))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "index.json").write_bytes(encode_json(index))
    return folder


def measure(before: Path, after: Path, args: Sequence[str]) -> tuple[float, float, int, int]:
    """One run of ``crawler diff BEFORE AFTER ARGS`` (see :func:`bench.find.timed`)."""
    return timed(["diff", str(before), str(after), *args])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time crawler diff (see the docstring).")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each comparison (median)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "out", help="work folder")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    develop = published(out)
    size = (develop / "index.json").stat().st_size
    print(f"index: {develop / 'index.json'} ({size / 1e6:.1f} MB)")
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    cases: list[tuple[str, Path, tuple[str, ...]]] = [("the same index twice", develop, ())]
    cases += [(f"{name}, JSON", derived(develop, out, name), ("--json",)) for name in VARIANTS]
    cases += [("night, table", derived(develop, out, "night"), ())]
    for label, after, extra in cases:
        runs = [measure(develop, after, extra) for _ in range(args.repeat)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        code, printed = runs[-1][2], runs[-1][3]
        print(
            f"{wall:5.3f} s wall  {cpu:5.3f} s CPU  exit {code:<3} {printed / 1e6:6.2f} MB out  "
            f"{label}: crawler diff develop {after.name} {' '.join(extra)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
