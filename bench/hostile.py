"""Peak memory of ``crawler sync`` over the worst root indexes we can build, against the bound.

``.venv/bin/python bench/hostile.py [--max-index-mb 256] [--decode-workers 2] [--only NAME ...]
[--json FILE]``: writes one local mirror per case under ``bench/out/hostile/`` (each with one
root index of about ``--max-index-mb`` MiB, the most a source may be), runs ``crawler sync`` on
it as a subprocess, samples the RSS of its whole process tree (psutil, as ``bench/run.py``
does), and prints each case's peak against :func:`bound_mib` with PASS or FAIL, with the exit
code and the sizes of the published ``index.json`` and of the run's report.

The cases (see :data:`CASES`): one field as large as the file (a version, a key, a variant),
millions of tiny invalid records (with short keys, with DAG-hash keys, and in an envelope that
has no layout, so that the file is read whole), the most minimal valid specs that fit, valid
specs whose every variant is their own, one record with millions of dependencies or
parameters, and values nested deeper than the decoder follows. ``docs/notes/memory-bounds.md``
states the bound and the figures.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.run import crawler_command, run_measured  # noqa: E402

MIB = 1 << 20
HEAD = b'{"database": {"version": "8", "installs": {'
#: ``installs`` before ``version``: valid, but no layout, so every worker reads it whole.
HEAD_OTHER = b'{"database": {"installs": {'
TAIL = b"}}}"
TAIL_OTHER = b'}, "version": "8"}}'

#: The bound's terms, in MiB (docs/notes/memory-bounds.md explains each).
BASE_MIB = 150  # the main process and its modules, idle workers
PER_WORKER_MIB = 100  # a worker's pieces decoding (a few times chunks.LARGE_RANGE at most)
#: Per MiB of ``max_index_mb``: each worker may map the whole index (its pages count in RSS) ...
PER_WORKER_INDEX = 1.0
#: ... and the run holds what valid records are worth: their distinct texts in the workers, the
#: specs and index.json in the main process (worst: specs whose every variant is their own).
PER_INDEX = 8.0


def bound_mib(max_index_mb: int, workers: int) -> float:
    """The documented bound on the peak RSS of a run's process tree, in MiB."""
    per_worker = PER_WORKER_MIB + PER_WORKER_INDEX * max_index_mb
    return BASE_MIB + workers * per_worker + PER_INDEX * max_index_mb


def dag_hash(i: int) -> bytes:
    """A distinct 32-character base32 DAG hash for each ``i``."""
    return base64.b32encode(i.to_bytes(20, "big")).lower()


def _spec(key: bytes, name: bytes, version: bytes, extra: bytes = b"") -> bytes:
    return (
        b'"' + key + b'": {"spec": {"name": "' + name + b'", "version": "' + version + b'", '
        b'"arch": {"platform": "linux", "platform_os": "ubuntu24.04", "target": "x86_64_v3"}, '
        b'"hash": "' + key + b'"' + extra + b'}, "in_buildcache": true}'
    )


Records = Callable[[int], Iterator[bytes]]  # given the room left, yields records


def _one(record: Callable[[int], bytes]) -> Records:
    """A single record that fills the room it is given."""

    def records(room: int) -> Iterator[bytes]:
        yield record(room)

    return records


def _many(record: Callable[[int], bytes]) -> Records:
    def records(room: int) -> Iterator[bytes]:
        i = 0
        while room > 0:
            data = record(i)
            room -= len(data) + 1
            i += 1
            if room >= 0:
                yield data

    return records


def _short_key(i: int) -> bytes:
    return b'"' + base64.b32encode(i.to_bytes(5, "big")).lower().lstrip(b"a") + b'":0'


def _deps(room: int) -> bytes:
    one = b'{"name": "d", "hash": "' + dag_hash(1) + b'"}'
    return _spec(
        dag_hash(0), b"p", b"1", b', "dependencies": [' + b",".join([one] * (room // 60)) + b"]"
    )


def _unique_variants(i: int) -> bytes:
    """A valid spec whose 64 variants are its own: no text is shared between specs."""
    values = b",".join(b'"v%d": "%d"' % (j, i) for j in range(64))
    return _spec(dag_hash(i), b"p%d" % (i % 1000), b"1", b', "parameters": {' + values + b"}")


def _params(room: int) -> bytes:
    items = b",".join(b'"v%d": true' % i for i in range(room // 20))
    return _spec(dag_hash(0), b"p", b"1", b', "parameters": {' + items + b"}")


def _deep(room: int) -> bytes:
    depth = min(room // 2 - 200, 10_000_000)
    return _spec(dag_hash(0), b"p", b"1", b', "x": ' + b"[" * depth + b"]" * depth)


#: name -> (head, tail, records): what fills one root index.
CASES: dict[str, tuple[bytes, bytes, Records]] = {
    "huge-version": (HEAD, TAIL, _one(lambda room: _spec(dag_hash(0), b"p", b"1" * (room - 300)))),
    "huge-key": (HEAD, TAIL, _one(lambda room: b'"' + b"k" * (room - 10) + b'": 0')),
    "huge-variant": (
        HEAD,
        TAIL,
        _one(
            lambda room: _spec(
                dag_hash(0), b"p", b"1", b', "parameters": {"v": "' + b"x" * (room - 400) + b'"}'
            )
        ),
    ),
    "tiny-invalid": (HEAD, TAIL, _many(_short_key)),
    "tiny-invalid-hash-keys": (HEAD, TAIL, _many(lambda i: b'"' + dag_hash(i) + b'":0')),
    "tiny-invalid-whole": (HEAD_OTHER, TAIL_OTHER, _many(_short_key)),
    "minimal-specs": (
        HEAD,
        TAIL,
        _many(lambda i: _spec(dag_hash(i), b"p%d" % (i % 1000), b"%d" % i)),
    ),
    "unique-variants": (HEAD, TAIL, _many(_unique_variants)),
    "many-dependencies": (HEAD, TAIL, _one(_deps)),
    "many-parameters": (HEAD, TAIL, _one(_params)),
    "deep-nesting": (HEAD, TAIL, _one(_deep)),
}


def write_index(path: Path, size: int, head: bytes, tail: bytes, records: Records) -> int:
    """Write an index of at most ``size`` bytes; returns its size."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        out.write(head)
        written = len(head) + len(tail)
        batch: list[bytes] = []
        first = True
        for record in records(size - written - 1):
            batch.append(record if first else b"," + record)
            first = False
            if len(batch) >= 65536:
                written += sum(map(len, batch))
                out.write(b"".join(batch))
                batch.clear()
        written += sum(map(len, batch))
        out.write(b"".join(batch))
        out.write(tail)
    return written


def build_case(folder: Path, name: str, max_index_mb: int) -> int:
    """A local mirror with one ref, ``develop``, whose root index is the case's."""
    head, tail, records = CASES[name]
    index = folder / "mirror" / "develop" / "build_cache" / "index.json"
    size = write_index(index, max_index_mb * MIB, head, tail, records)
    document = {
        "develop": [{"label": "root", "url": "s3://spack-binaries/develop/build_cache/index.json"}]
    }
    (folder / "mirror" / "cache_spack_io_index.json").write_text(json.dumps(document))
    return size


def run_case(folder: Path, crawler: list[str], max_index_mb: int, workers: int) -> dict[str, Any]:
    output = folder / "out"
    shutil.rmtree(output, ignore_errors=True)
    config = folder / "crawler.yaml"
    config.write_text(
        json.dumps(
            {
                "mirror": str(folder / "mirror"),
                "output": str(output),
                "max_index_mb": max_index_mb,
                "decode_workers": workers,
            }
        )
    )
    argv = [*crawler, "sync", "--branch", "develop", "--config", str(config), "-q"]
    figures = run_measured(argv, cwd=folder, log=folder / "sync.log")
    report = output / ".crawler" / "reports" / "develop.json"
    published = output / "develop"
    return {
        "exit": figures.returncode,
        "seconds": round(figures.seconds, 2),
        "peak_tree_rss": figures.peak_tree_rss,
        "peak_single_rss": figures.peak_single_rss,
        "index_bytes": _size(published / "index.json"),
        "report_bytes": _size(published / "report.json") or _size(report),
    }


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--max-index-mb", type=int, default=256)
    parser.add_argument("--decode-workers", type=int, default=2, help="0: one per CPU")
    parser.add_argument("--only", nargs="*", choices=sorted(CASES), default=sorted(CASES))
    parser.add_argument("--json", type=Path, help="also save the figures here")
    parser.add_argument("--crawler", help="the command to run (default: the venv's crawler)")
    args = parser.parse_args(argv)
    workers = args.decode_workers or os.cpu_count() or 1
    bound = bound_mib(args.max_index_mb, workers)
    print(
        f"max_index_mb {args.max_index_mb}, decode_workers {workers}: bound {bound:,.0f} MiB "
        f"(the default max_index_mb of 2048 would give {bound_mib(2048, workers):,.0f} MiB)"
    )
    crawler = crawler_command(args.crawler)
    results: dict[str, Any] = {}
    failed = False
    for name in args.only:
        folder = BENCH_DIR / "out" / "hostile" / name
        shutil.rmtree(folder, ignore_errors=True)
        started = time.monotonic()
        size = build_case(folder, name, args.max_index_mb)
        built = time.monotonic() - started
        result = run_case(folder, crawler, args.max_index_mb, workers)
        peak = result["peak_tree_rss"] / MIB
        ok = peak <= bound
        failed |= not ok
        results[name] = {**result, "index_size": size, "bound_mib": bound}
        print(
            f"{'PASS' if ok else 'FAIL'} {name:24} peak {peak:7,.0f} MiB of {bound:,.0f} "
            f"(largest process {result['peak_single_rss'] / MIB:,.0f}); exit {result['exit']}, "
            f"{result['seconds']:.1f}s; index {size / MIB:,.0f} MiB (built in {built:.0f}s); "
            f"published index.json {result['index_bytes']:,} B, "
            f"report {result['report_bytes']:,} B",
            flush=True,
        )
        shutil.rmtree(folder / "mirror", ignore_errors=True)  # the disk is not ours alone
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
