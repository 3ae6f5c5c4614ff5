"""What reading spec manifests costs a sync (issue 41): the first sync, which reads every
spec's manifest, and a nightly one, which reads only the new specs'.

``python bench/binaries.py [--records 60000] [--stacks 30] [--seed 2025] [--out bench/out]``
generates (or reuses) two v3 mirrors with a spec manifest for every spec of develop's top-level
cache (``bench/generate.py --layout v3 --binaries``): develop, and develop a night later
(``--change nightly``: 2% of its specs new builds). Each is served over loopback HTTP by
``bench/server.py`` in its own process. Then, each ``crawler sync --branch develop --format
json`` from the repository root, timed:

1. first night, ``--no-binaries``, into an empty output; 2. first night, binaries read, into
another empty output (every manifest read, every tarball looked for);
3. the next night, ``--no-binaries``, over output 1; 4. the next night, binaries read, over
output 2 (only the new specs' manifests: the others are kept in ``.crawler/binaries/``).

It prints each wall time, the manifests each read (from the crawler's log line), and the two
costs: run 2 less run 1 (the first sync) and run 4 less run 3 (a nightly one).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.generate import MirrorParams, ensure_mirror
from bench.run import crawler_command
from bench.server import ServerProcess

REPO = Path(__file__).resolve().parent.parent
_READ = re.compile(r"develop: (\d+) spec manifests read, (\d+) known")


def sync(crawler: list[str], url: str, output: Path, *flags: str) -> tuple[float, int]:
    """One ``crawler sync`` of develop: its wall time and the spec manifests it read."""
    argv = [*crawler, "sync", "--branch", "develop", "--mirror", url, "--output", str(output)]
    started = time.perf_counter()
    done = subprocess.run(
        [*argv, "--format", "json", "-v", *flags], cwd=REPO, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 6):
        raise SystemExit(f"crawler sync failed ({done.returncode}):\n{done.stderr[-3000:]}")
    found = _READ.search(done.stderr)
    return seconds, int(found[1]) if found else 0


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=60_000)
    parser.add_argument("--stacks", type=int, default=30)
    parser.add_argument("--seed", type=int, default=2025)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--crawler", help="another crawler command")
    args = parser.parse_args(argv)
    base = MirrorParams(
        records=args.records, stacks=args.stacks, seed=args.seed, layout="v3", binaries=True
    )
    nights = [
        ensure_mirror(args.out / "mirrors", base),
        ensure_mirror(args.out / "mirrors", MirrorParams(**{**vars(base), "change": "nightly"})),
    ]
    crawler = crawler_command(args.crawler)
    runs: dict[str, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory(dir=args.out) as work:
        plain, read = Path(work) / "plain", Path(work) / "read"
        for night, generated in zip(("first", "nightly"), nights, strict=True):
            with ServerProcess.start(generated.root) as server:
                runs[f"{night}, --no-binaries"] = sync(crawler, server.url, plain, "--no-binaries")
                runs[f"{night}, binaries read"] = sync(crawler, server.url, read)
    for name, (seconds, manifests) in runs.items():
        print(f"{name:<28} {seconds:8.2f} s  {manifests:>7,} spec manifests read")
    values = list(runs.values())
    first, nightly = values[1][0] - values[0][0], values[3][0] - values[2][0]
    print(f"cost of the binaries, first sync: {first:+.2f} s ({values[1][1]:,} manifests)")
    print(f"cost of the binaries, nightly:    {nightly:+.2f} s ({values[3][1]:,} manifests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
