"""Peak memory of the consumer's commands (``find``, ``verify``, ``diff``) on a large published
branch, against the bound ``docs/consumers.md`` states. Prints the figures and PASS/FAIL.

``python bench/consumers.py [--specs 700000] [--out bench/out]``: two branch folders are
written straight (no sync: a mirror of that many records would be gigabytes) under
``<out>/consumers/<specs>/``, ``a`` and ``b``, each an ``index.json`` and ``links.json`` that
``crawler verify`` finds sound; ``b`` is ``a`` with one package in fifty changed (a spec added,
one moved to another stack). 700,000 specs make a 290 MiB ``index.json`` (and a links.json
about half that). Reused while they are there: delete the folder to write them again. Each
command runs in a process of its own, its RSS sampled as ``bench/run.py`` does; the figure is
the peak RSS, the bound's is :func:`bound_mib` of the files the command reads.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import msgspec

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.run import crawler_command, run_measured  # noqa: E402
from crawler.documents import (  # noqa: E402
    Index,
    IndexSource,
    IndexStats,
    Links,
    PackageMeta,
    PackageSummary,
    SpecDependency,
    SpecDetail,
    SpecLinks,
)
from crawler.linkfile import packed  # noqa: E402

MIB = 1 << 20
STACKS = tuple(f"stack-{i:02d}" for i in range(30))
TARGETS = (("zen3", "x86_64"), ("x86_64_v3", "x86_64"), ("neoverse_v2", "aarch64"))
_ENCODE = msgspec.json.Encoder(order="sorted").encode


def _hash(text: str) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz234567"
    digest = hashlib.sha256(text.encode()).digest()
    return "".join(alphabet[b & 31] for b in digest[:32])


def _package(
    rng: random.Random, name: str, count: int, salt: str
) -> tuple[PackageSummary, dict[str, SpecLinks]]:
    specs, links = [], {}
    for i in range(count):
        key = _hash(f"{salt}/{name}/{i}")
        target, family = TARGETS[i % len(TARGETS)]
        stacks = tuple(sorted({"root", *rng.sample(STACKS, rng.randint(1, 3))}))
        variants = tuple(f"+opt{j}" if (i >> j) & 1 else f"~opt{j}" for j in range(10))
        variants += ("build_system=cmake", "build_type=Release", "cuda_arch=70,80,90")
        variants += ("generator=ninja", "libs=shared,static", "patches=0a1b2c3,4d5e6f7")
        specs.append(
            SpecDetail(
                compiler=f"gcc@{12 + i % 3}.2.0",
                hash=key,
                os="ubuntu24.04" if i % 4 else "rhel8",
                platform="linux",
                size="-",
                stacks=stacks,
                target=target,
                variants=variants,
                versions=(f"{1 + i % 5}.{i % 7}.{i % 11}",),
                family=family,
            )
        )
        deps = tuple(
            SpecDependency(_hash(f"dep/{j}"), f"dependency-{j}", ("build", "link"))
            for j in range(rng.randint(3, 12))
        )
        where = {
            s: f"https://binaries.example.org/{s}/v3/manifests/spec/{name}/{name}-{key}.spec.manifest.json"
            for s in stacks
        }
        links[key] = SpecLinks(dependencies=deps, locations=where)
    specs.sort(key=lambda s: s.hash)
    by_stack = Counter(s for spec in specs for s in spec.stacks)
    meta = PackageMeta(
        compilers=sorted({s.compiler for s in specs}),
        num_specs=len(specs),
        num_specs_by_stack=dict(sorted(by_stack.items())),
        oss=sorted({s.os for s in specs}),
        platforms=["linux"],
        stacks=sorted(by_stack),
        targets=sorted({s.target for s in specs}),
        versions=sorted({v for s in specs for v in s.versions}),
    )
    return PackageSummary(meta, specs), links


def _sizes(specs: int, rng: random.Random) -> list[int]:
    """Package sizes summing to ``specs``: most small, a few of thousands (the largest
    package is what a per-package reader holds at once)."""
    sizes: list[int] = []
    while sum(sizes) < specs:
        sizes.append(rng.choice((1, 2, 5, 10, 20, 40, 80, 200, 500)) if len(sizes) % 97 else 5000)
    sizes[-1] -= sum(sizes) - specs
    return [s for s in sizes if s > 0]


def _write_map(
    out: BinaryIO, frame: bytes, key: bytes, entries: Iterator[tuple[str, bytes]]
) -> None:
    """``frame`` (a document encoded with its map ``key`` empty) with the entries put there."""
    head, tail = frame.split(b'"' + key + b'":{}', 1)
    out.write(head + b'"' + key + b'":{')
    for n, (name, value) in enumerate(entries):
        out.write((b"," if n else b"") + _ENCODE(name) + b":" + value)
    out.write(b"}" + tail + b"\n")


def write_branch(folder: Path, specs: int, *, changed: bool) -> None:
    """A sound branch folder of ``specs`` specs; ``changed``: one package in fifty changed."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(2025)
    sizes = _sizes(specs, rng)
    names = sorted(f"package-{i:06d}" for i in range(len(sizes)))
    sources = [
        IndexSource(
            label=s,
            url=f"s3://binaries/{s}/index.json",
            layout="v3",
            status="ok",
            sha256="0" * 64,
            bytes=1,
            db_version="8",
            records=0,
            in_buildcache=0,
            invalid_records=0,
        )
        for s in ("root", *STACKS)
    ]
    links: dict[str, SpecLinks] = {}
    total = 0

    def packages() -> Iterator[tuple[str, bytes]]:
        nonlocal total
        for n, (name, size) in enumerate(zip(names, sizes, strict=True)):
            salt = "b" if changed and n % 50 == 0 else "a"
            package, its = _package(
                random.Random(f"{name}/{salt}"), name, size + (salt == "b"), salt
            )
            total += len(package.spec_details)
            links.update(its)
            yield name, _ENCODE(package)

    index_file = folder / "index.json.tmp"
    with index_file.open("wb") as out:
        # The frame's counts are known once the packages are written: written again then.
        _write_map(out, b'"packages":{}', b"packages", packages())
    body = index_file.read_bytes()[len(b'"packages":') :].rstrip(b"\n")
    root = msgspec.structs.replace(sources[0], in_buildcache=total, records=total)
    index = Index[PackageSummary](
        branch=folder.name,
        mirror="https://binaries.example.org",
        sources=[root, *sources[1:]],
        stats=IndexStats(
            packages=len(names),
            specs=total,
            root_records=total,
            sources=len(sources),
            sources_missing=0,
            sources_failed=0,
        ),
        packages={},
    )
    with (folder / "index.json").open("wb") as out:
        head, tail = _ENCODE(index).split(b'"packages":{}', 1)
        out.write(head + b'"packages":' + body + tail + b"\n")
    index_file.unlink()
    # As a publish writes it: packed (links.json's schema 2).
    document = packed(Links(branch=folder.name, specs=dict(sorted(links.items()))))
    with (folder / "links.json").open("wb") as out:
        frame = _ENCODE(msgspec.structs.replace(document, specs={}))
        _write_map(out, frame, b"specs", ((k, _ENCODE(v)) for k, v in document.specs.items()))


@dataclass(frozen=True)
class Command:
    """A command measured, what it reads, and the terms of its bound (docs/consumers.md):
    ``base`` MiB, plus the largest file it reads, plus ``per_spec`` bytes a spec of the index
    and ``per_line`` bytes a line it prints."""

    what: str
    argv: tuple[str, ...]
    reads: tuple[str, ...]
    base: int = 100
    per_spec: int = 0
    per_line: int = 0


INDEX, LINKS, AFTER = "a/index.json", "a/links.json", "b/index.json"
COMMANDS = (
    Command("find one package", ("find", "package-000001", "--in", "{a}"), (INDEX,), per_line=2048),
    Command(
        "find a third, table", ("find", "--target", "zen3", "--in", "{a}"), (INDEX,), per_line=2048
    ),
    Command("find a third, JSON", ("find", "--target", "zen3", "--json", "--in", "{a}"), (INDEX,)),
    Command("find every spec, JSON", ("find", "--json", "--in", "{a}"), (INDEX,)),
    Command(
        "find a package, JSON, links",
        ("find", "package-000000", "--json", "--links", "--in", "{a}"),
        (INDEX, LINKS),
        per_spec=300,
    ),
    Command("verify", ("verify", "{a}"), (INDEX, LINKS), base=150, per_spec=400),
    Command(
        "verify --no-schema",
        ("verify", "--no-schema", "{a}"),
        (INDEX, LINKS),
        base=150,
        per_spec=400,
    ),
    Command("diff", ("diff", "{a}", "{b}"), (INDEX, AFTER), per_line=2048),
    Command("diff --json", ("diff", "--json", "{a}", "{b}"), (INDEX, AFTER), per_line=2048),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the branches (once), measure each command, print PASS/FAIL against the bound."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", type=int, default=700_000)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "out")
    parser.add_argument("--crawler", help="another crawler command (an older checkout's)")
    parser.add_argument("--only", action="append", default=[], help="commands whose name has this")
    args = parser.parse_args(argv)
    where = (args.out / "consumers" / str(args.specs)).resolve()
    for name, changed in (("a", False), ("b", True)):
        if not (where / name / "links.json").is_file():
            print(f"writing {where / name} ({args.specs:,} specs)", flush=True)
            write_branch(where / name, args.specs, changed=changed)
    for name in ("a/index.json", "a/links.json", "b/index.json"):
        print(f"{name}: {(where / name).stat().st_size / MIB:,.1f} MiB")
    crawler = crawler_command(args.crawler)
    failed = 0
    for command in COMMANDS:
        if args.only and not any(o in command.what for o in args.only):
            continue
        argv_ = [*crawler, *(a.format(a=where / "a", b=where / "b") for a in command.argv)]
        log = where / f"command-{os.getpid()}.log"
        figures = run_measured(argv_, cwd=where, log=log)
        with log.open("rb") as printed:
            lines = sum(1 for _ in printed)
        log.unlink()
        largest = max((where / r).stat().st_size for r in command.reads)
        bound = bound_mib(command, largest, args.specs, lines)
        peak = figures.peak_single_rss / MIB
        ok = peak <= bound and figures.returncode == 0
        failed += not ok
        print(
            f"{command.what:<28} exit {figures.returncode:>2} {figures.seconds:6.1f} s "
            f"(CPU {figures.cpu_seconds:5.1f} s)  peak RSS {peak:7.1f} MiB (anonymous "
            f"{figures.peak_tree_anon / MIB:6.1f})  bound {bound:7.1f} MiB  "
            f"{'PASS' if ok else 'FAIL'}",
            flush=True,
        )
    return 1 if failed else 0


def bound_mib(command: Command, largest: int, specs: int, lines: int) -> float:
    """The documented bound on ``command``'s peak RSS, in MiB: reading files of which the
    largest has ``largest`` bytes, of an index of ``specs`` specs, printing ``lines``."""
    extra = command.per_spec * specs + command.per_line * lines
    return command.base + (largest + extra) / MIB


if __name__ == "__main__":
    sys.exit(main())
