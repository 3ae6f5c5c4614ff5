"""The time ``--format html`` adds to a develop-sized sync, and the size of the site.

``.venv/bin/python bench/site.py [--records 60000 --stacks 30 ...] [--repeat 1]``: generates
(or reuses) the mirror as ``bench/run.py`` does, serves it on 127.0.0.1, then runs ``crawler
sync`` cold into an empty output folder twice per repeat, with ``--format json`` and with
``--format json,html`` (alternately, so that other work on the machine weighs on both alike),
and prints each run, both fastest wall times, the difference as a share of the cold sync
(target: at most 20%), the site's files and bytes, and the time its pages take to make in
one process from the published documents (without writing them: the least noisy figure).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.generate import add_arguments, describe, ensure_mirror, params_from  # noqa: E402
from bench.run import OUT, crawler_command, prime_page_cache, run_measured  # noqa: E402
from bench.server import ServerProcess  # noqa: E402
from crawler.documents import (  # noqa: E402
    Changes,
    History,
    Index,
    PackageSummary,
    Report,
    SpecLinks,
)
from crawler.output.site import site_files  # noqa: E402

#: The most ``--format html`` may add to a cold sync, as a share of it.
TARGET_SHARE = 0.20


def tree_size(folder: Path) -> tuple[int, int]:
    """Files and bytes under ``folder``."""
    files = size = 0
    for top, _, names in os.walk(folder):
        files += len(names)
        size += sum(os.path.getsize(os.path.join(top, n)) for n in names)
    return files, size


class _Specs(msgspec.Struct):
    specs: dict[str, SpecLinks] = {}


def make_seconds(published: Path) -> float:
    """The seconds :func:`~crawler.output.site.site_files` takes over a published branch."""
    index = msgspec.json.decode((published / "index.json").read_bytes(), type=Index[PackageSummary])
    # Each spec's links: in index.json's "specs", or in a links.json of its own (the same key).
    linked = published / "links.json"
    linked = linked if linked.exists() else published / "index.json"
    specs = msgspec.json.decode(linked.read_bytes(), type=_Specs).specs
    changes = msgspec.json.decode((published / "changes.json").read_bytes(), type=Changes)
    report = msgspec.json.decode((published / "report.json").read_bytes(), type=Report)
    history = msgspec.json.decode((published / "history.json").read_bytes(), type=History)
    started = time.perf_counter()
    for _ in site_files(index, specs, changes, report, history):
        pass
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument("--repeat", type=int, default=3, help="cold syncs of each kind (fastest)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"mirrors and runs ({OUT})")
    args = parser.parse_args(argv)
    params = params_from(args)
    out = args.out.resolve()
    generated = ensure_mirror(out / "mirrors", params)
    print(describe(generated), flush=True)
    prime_page_cache(generated)
    branch = generated.refs[0]
    work = out / "runs" / f"{params.key}-site"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    seconds: dict[str, list[float]] = {"json": [], "json,html": []}
    with ServerProcess.start(generated.root) as server:
        for attempt in range(args.repeat):
            for formats in seconds:
                output = work / f"{formats.replace(',', '-')}-{attempt}"
                sync = [*crawler_command(None), "sync", "--branch", branch]
                sync += ["--mirror", server.url, "--output", str(output), "--format", formats]
                log = work / f"{formats}-{attempt}.log"
                run = run_measured(sync, cwd=REPO, log=log, ours=[server.process.pid])
                if run.returncode != 0:
                    print(f"crawler sync --format {formats} exited {run.returncode}: see {log}")
                    return 1
                seconds[formats].append(run.seconds)
    for formats, runs in seconds.items():
        print(f"  --format {formats}: " + ", ".join(f"{s:.2f}s" for s in runs))
    plain, html = (min(seconds[f]) for f in ("json", "json,html"))
    published = work / f"json-html-{args.repeat - 1}" / branch
    files, size = tree_size(published / "site")
    share = (html - plain) / plain
    verdict = "PASS" if share <= TARGET_SHARE else "FAIL"
    print(f"cold sync --format json:      {plain:.2f}s")
    print(f"cold sync --format json,html: {html:.2f}s")
    print(f"html adds {html - plain:.2f}s, {share:.0%} of the cold sync (target <= 20%): {verdict}")
    print(f"site: {files} files, {size / 1e6:.1f} MB")
    print(f"site made in one process: {make_seconds(published):.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
