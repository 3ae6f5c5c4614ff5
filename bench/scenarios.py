"""The runs a mirror's operator has every day, measured by ``bench/run.py`` after cold and warm:

* **nightly**: ``develop`` synced cold, then again once the mirror has moved on a night
  (:func:`bench.generate.nightly_specs`: 2% of the root's specs replaced, 5 of 30 stacks
  changed). The second sync's wall time, against its floor: downloading the files that changed
  and reading every key of them (the unchanged stacks are answered ``304``, as a real server's
  ETag allows: their files keep their modification time, which names the ETag);
* **snapshots**: ``sync --all`` into an empty folder over ``develop`` and four snapshots, each
  sharing 95% of its specs with the one before (:func:`bench.generate.chained_refs`), against
  one cold develop-sized sync.

Both check that what they published is byte for byte what a cold sync of the same mirror into an
empty folder publishes (but for ``changes.json``, which tells what changed since the folder's
last publish), and report the spec store's size against the root index's.

The mirrors are served under one folder (``out/mirrors``); the nightly one through a link,
``nightly-current``, pointed at the mirror before, then after the night.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.floor import measure_floor
from bench.generate import Generated, MirrorParams, ensure_mirror

NIGHTLY_LINK = "nightly-current"
DATED = ("report.json", "history.json", "changes.json")

Measure = Callable[[list[str], Path], Any]  # run_measured(argv, log) -> ProcessFigures


@dataclass
class Scenario:
    """What the scenarios need from bench/run.py."""

    mirrors: Path  # the served folder
    url: str  # where it is served
    work: Path
    crawler: list[str]
    measure: Measure
    repeat: int
    workers: int


def _published(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in DATED
    }


def _point(link: Path, target: str) -> None:
    tmp = link.with_name(link.name + ".tmp")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    tmp.replace(link)


def _store_bytes(output: Path) -> int:
    folder = output / ".crawler" / "specs"
    return sum(p.stat().st_size for p in folder.glob("*.msgpack")) if folder.is_dir() else 0


def _same_times(before: Generated, after: Generated) -> list[str]:
    """Give the files the night left alone their time before (the server's ETag is made of
    it), and return the paths of those that changed."""
    changed = []
    for f in after.files:
        old, new = before.root / f.path, after.root / f.path
        if old.read_bytes() == new.read_bytes():
            stat = old.stat()
            os.utime(new, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        else:
            changed.append(f.path)
    return changed


def _sync(s: Scenario, mirror: str, output: Path, *branches: str) -> list[str]:
    chosen = ["--all"] if not branches else [a for b in branches for a in ("--branch", b)]
    where = ["--mirror", mirror, "--output", str(output)]
    return [*s.crawler, "sync", *chosen, *where, "--format", "json"]


def _ok(figures: Any, what: str) -> None:
    if figures.returncode != 0:
        tail = Path(figures.log).read_text(errors="replace").splitlines()[-8:]
        raise SystemExit(f"{what} exited with {figures.returncode}:\n" + "\n".join(tail))


def phases(report: Path) -> dict[str, float]:
    """How a sync's time divides, from its ``report.json``: its sources read at once (the
    longest fetch + decode), the root's download and decode (with the spec store: reading the
    keys and bytes of every record, and decoding the new ones), and the rest (the spec store's
    update, building and writing the output)."""
    data = json.loads(report.read_bytes())
    sources = data["sources"]
    root = next(s for s in sources if s["label"] == "root")
    reading = max(s["fetch_seconds"] + s["decode_seconds"] for s in sources)
    return {
        "duration": data["duration_seconds"],
        "reading": reading,
        "root_fetch": root["fetch_seconds"],
        "root_decode": root["decode_seconds"],
        "stacks_decode_sum": sum(s["decode_seconds"] for s in sources if s is not root),
        "after_reading": data["duration_seconds"] - reading,
    }


def nightly(s: Scenario, params: MirrorParams) -> dict[str, Any]:
    """The nightly scenario's figures (see the module docstring)."""
    before = ensure_mirror(s.mirrors, params)
    after = ensure_mirror(s.mirrors, replace(params, change="nightly"))
    changed = _same_times(before, after)
    link = s.mirrors / NIGHTLY_LINK
    mirror = f"{s.url}/{NIGHTLY_LINK}"
    runs, stores = [], []
    for attempt in range(s.repeat):
        output = s.work / f"nightly-{attempt}"
        shutil.rmtree(output, ignore_errors=True)
        _point(link, before.root.name)
        log = s.work / f"night-before-{attempt}.log"
        first = s.measure(_sync(s, mirror, output, "develop"), log)
        _ok(first, "the sync before the night")
        _point(link, after.root.name)
        second = s.measure(_sync(s, mirror, output, "develop"), s.work / f"nightly-{attempt}.log")
        _ok(second, "the nightly sync")
        runs.append(second)
        stores.append(_store_bytes(output))
    cold = s.work / "nightly-cold"
    shutil.rmtree(cold, ignore_errors=True)
    _ok(s.measure(_sync(s, mirror, cold, "develop"), s.work / "nightly-cold.log"), "cold sync")
    identical = _published(s.work / "nightly-0" / "develop") == _published(cold / "develop")
    files = [f for f in after.files if f.path in changed]
    floors = [
        measure_floor(
            [f"{mirror}/{f.path}" for f in files],
            [(after.root / f.path, f.label == "root") for f in files],
            s.workers,
        )
        for _ in range(s.repeat)
    ]
    root = next(f for f in after.files if f.label == "root")
    return {
        "seconds": statistics.median(r.seconds for r in runs),
        "floor_seconds": statistics.median(f.seconds for f in floors),
        "floor_download_seconds": statistics.median(f.download_seconds for f in floors),
        "floor_keys_seconds": statistics.median(f.decode_seconds for f in floors),
        "changed_files": len(files),
        "changed_bytes": sum(f.bytes for f in files),
        "peak_tree_rss": max(r.peak_tree_rss for r in runs),
        "peak_tree_pss": max(r.peak_tree_pss for r in runs),
        "store_bytes": max(stores),
        "root_bytes": root.bytes,
        "identical": identical,
        "phases": phases(s.work / "nightly-0" / "develop" / "report.json"),
        "log": runs[0].log,
        "runs": [r.to_json() for r in runs],
    }


def snapshots(s: Scenario, params: MirrorParams) -> dict[str, Any]:
    """The snapshots scenario's figures (see the module docstring)."""
    chain = ensure_mirror(s.mirrors, replace(params, refs=5, change="chain"))
    mirror = f"{s.url}/{chain.root.name}"
    runs, stores = [], []
    for attempt in range(s.repeat):
        output = s.work / f"snapshots-{attempt}"
        shutil.rmtree(output, ignore_errors=True)
        figures = s.measure(_sync(s, mirror, output), s.work / f"snapshots-{attempt}.log")
        _ok(figures, "sync --all")
        runs.append(figures)
        stores.append(_store_bytes(output))
    last = chain.refs[-1]
    cold = s.work / "snapshots-cold"
    shutil.rmtree(cold, ignore_errors=True)
    _ok(s.measure(_sync(s, mirror, cold, last), s.work / "snapshots-cold.log"), "cold sync")
    identical = _published(s.work / "snapshots-0" / last) == _published(cold / last)
    roots = [f.bytes for f in chain.files if f.label == "root"]
    return {
        "refs": list(chain.refs),
        "seconds": statistics.median(r.seconds for r in runs),
        "peak_tree_rss": max(r.peak_tree_rss for r in runs),
        "peak_tree_pss": max(r.peak_tree_pss for r in runs),
        "store_bytes": max(stores),
        "root_bytes": max(roots),
        "identical": identical,
        "runs": [r.to_json() for r in runs],
    }


def targets(figures: dict[str, Any], cold_seconds: float, peak: float) -> dict[str, bool]:
    """The issue's targets for the scenarios measured."""
    found: dict[str, bool] = {}
    night = figures.get("nightly")
    if night:
        found["nightly <= 3x its floor"] = night["seconds"] <= 3 * night["floor_seconds"]
        found["nightly <= 1/2 of cold"] = night["seconds"] <= cold_seconds / 2
    snaps = figures.get("snapshots")
    if snaps:
        found["--all over 5 refs <= 3x cold"] = snaps["seconds"] <= 3 * cold_seconds
    done = [f for f in (night, snaps) if f]
    if done:
        highest = max(f["peak_tree_pss"] for f in done)
        found["peak PSS <= 350 MB in every scenario"] = highest <= peak
        found["store <= its root index"] = all(f["store_bytes"] <= f["root_bytes"] for f in done)
        found["scenario outputs identical to cold"] = all(f["identical"] for f in done)
    return found


def lines(figures: dict[str, Any], cold_seconds: float) -> Sequence[str]:
    """The scenarios' figures, printed."""
    out = []
    night = figures.get("nightly")
    if night:
        out.append(
            f"nightly    wall     {night['seconds']:7.2f}s  ({night['seconds'] / cold_seconds:.2f}"
            f" of cold; {night['seconds'] / night['floor_seconds']:.2f}x its floor "
            f"{night['floor_seconds']:.2f}s = download {night['floor_download_seconds']:.2f}s of "
            f"{night['changed_files']} changed files, {night['changed_bytes'] / 1e6:.1f} MB + "
            f"keys {night['floor_keys_seconds']:.2f}s); peak tree PSS "
            f"{night['peak_tree_pss'] / 1e6:.0f} MB (RSS {night['peak_tree_rss'] / 1e6:.0f} MB); "
            f"spec store {night['store_bytes'] / 1e6:.1f} MB"
            f" (root {night['root_bytes'] / 1e6:.1f} MB); output "
            + ("identical to cold" if night["identical"] else "DIFFERS from cold")
        )
        cut = night["phases"]
        out.append(
            f"{'':<10} its report.json (run 1): {cut['duration']:.2f}s = reading the sources "
            f"{cut['reading']:.2f}s (root: download {cut['root_fetch']:.2f}s, keys and new "
            f"records {cut['root_decode']:.2f}s; stacks decoding {cut['stacks_decode_sum']:.2f}"
            f" CPU-s) + spec store and output {cut['after_reading']:.2f}s"
        )
    snaps = figures.get("snapshots")
    if snaps:
        out.append(
            f"snapshots  wall     {snaps['seconds']:7.2f}s  (--all over {len(snaps['refs'])} refs:"
            f" {snaps['seconds'] / cold_seconds:.2f}x one cold sync); peak tree PSS "
            f"{snaps['peak_tree_pss'] / 1e6:.0f} MB (RSS {snaps['peak_tree_rss'] / 1e6:.0f} MB); "
            f"spec store {snaps['store_bytes'] / 1e6:.1f} MB"
            f" (a root {snaps['root_bytes'] / 1e6:.1f} MB); output "
            + ("identical to cold" if snaps["identical"] else "DIFFERS from cold")
        )
    return out
