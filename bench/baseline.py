"""Sequential baseline: the reference generator's algorithm, in plain Python.

spack/cache.spack.io's ``generate_cache.py`` downloads the root index of a ref, one request at a
time, loads it whole with ``json``, groups the specs in the build cache by package, downloads each
stack's index to learn which stacks hold each hash, and writes one page per package. This module
does the same, without Spack (whose ``Database``/``Spec`` objects make the original much slower:
this is a *lower* bound on the reference's cost):

* ``urllib`` requests, one at a time (a stack answering 404 is skipped, as the original does);
* ``json.loads`` of every index into full dict objects; the root index stays loaded while the
  stacks are read, each stack is dropped after its hashes were collected;
* ``meta`` and ``spec_details`` as FORMAT.md section 3 describes, with the crawler's documented
  rendering (compiler from DB 6/7 ``compiler``, else the ``c``/``cxx``/``fortran`` dependency,
  else ``annotations.compiler``, else ``none``; variants in ``parameters`` order without the
  compiler flags, lists as ``name=a,b``, ``patches=`` with 7-character prefixes);
* ``json.dumps(..., sort_keys=True)`` of each page, written to
  ``<output>/<ref>/<package>/specs.md``.

No record is validated. ``python bench/baseline.py --mirror URL|DIR --branch REF --output DIR``;
:func:`summarize_ref` gives the per-package summaries to the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DISCOVERY = "cache_spack_io_index.json"
BUCKET = "s3://spack-binaries/"
FLAGS = frozenset({"cflags", "cppflags", "cxxflags", "fflags", "ldflags", "ldlibs"})
COMPILER_VIRTUALS = ("c", "cxx", "fortran")
PAGE = '---\ntitle: "%s"\nlayout: cache\ncategories: [package, %s]\nmeta: %s\nspec_details: %s\n---'


@dataclass
class BaselineStats:
    """What the baseline read."""

    requests: int = 0
    bytes: int = 0
    records: int = 0
    missing: list[str] = field(default_factory=list)


def mirror_base(mirror: str) -> str:
    """A mirror given as a URL or a folder, as a base URL urllib can open."""
    if mirror.startswith(("http://", "https://", "file://")):
        return mirror.rstrip("/")
    return Path(mirror).resolve().as_uri()


def fetch(url: str, stats: BaselineStats) -> bytes | None:
    """The body at ``url``; None for a 404 (or a missing local file)."""
    stats.requests += 1
    try:
        with urllib.request.urlopen(url, timeout=600) as response:
            body: bytes = response.read()
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise
    except urllib.error.URLError as err:
        if isinstance(err.reason, FileNotFoundError):
            return None
        raise
    stats.bytes += len(body)
    return body


def _compiler(node: dict[str, Any], installs: dict[str, Any]) -> str:
    compiler = node.get("compiler")
    if compiler:
        return f"{compiler['name']}@{compiler['version']}"
    for virtual in COMPILER_VIRTUALS:
        for dep in node.get("dependencies", []):
            if virtual in (dep.get("parameters") or {}).get("virtuals", []):
                target = installs[dep["hash"]]["spec"]
                return f"{target['name']}@{target['version']}"
    annotated = (node.get("annotations") or {}).get("compiler")
    if annotated:
        name, _, version = annotated.partition("@")
        return f"{name}@{version.lstrip('=')}" if version else name
    return "none"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _variant(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return ("+" if value else "~") + name
    if isinstance(value, list):
        if name == "patches":
            return "patches=" + ",".join(str(v)[:7] for v in value)
        return f"{name}=" + ",".join(_scalar(v) for v in value)
    return f"{name}={_scalar(value)}"


def _target(arch: dict[str, Any]) -> str:
    target = arch["target"]
    return target if isinstance(target, str) else str(target["name"])


def summarize_ref(mirror: str, ref: str) -> tuple[dict[str, dict[str, Any]], BaselineStats]:
    """Per-package ``{"meta", "spec_details"}`` of ``ref`` (sorted by package), and stats."""
    stats = BaselineStats()
    base = mirror_base(mirror)
    discovery_body = fetch(f"{base}/{DISCOVERY}", stats)
    if discovery_body is None:
        raise FileNotFoundError(f"{base}/{DISCOVERY}")
    entries = json.loads(discovery_body)[ref]

    def location(url: str) -> str:
        return f"{base}/{url.removeprefix(BUCKET)}"

    root_entry = next(e for e in entries if e["label"] == "root")
    root_body = fetch(location(root_entry["url"]), stats)
    if root_body is None:
        raise FileNotFoundError(location(root_entry["url"]))
    installs: dict[str, Any] = json.loads(root_body)["database"]["installs"]
    del root_body
    stats.records += len(installs)

    specs: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    hash_stacks: dict[str, set[str]] = defaultdict(set)
    for key, record in installs.items():
        hash_stacks[key].add("root")
        if record.get("in_buildcache"):
            specs[record["spec"]["name"]].append((key, record["spec"]))

    for entry in entries:
        if entry["label"] == "root":
            continue
        body = fetch(location(entry["url"]), stats)
        if body is None:
            stats.missing.append(entry["label"])
            continue
        index = json.loads(body)
        del body
        stack_installs = index["database"]["installs"]
        stats.records += len(stack_installs)
        for key in stack_installs:
            hash_stacks[key].add(entry["label"])
        del index, stack_installs

    packages: dict[str, dict[str, Any]] = {}
    for name in sorted(specs):
        details = []
        by_stack: dict[str, int] = defaultdict(int)
        for key, node in specs[name]:
            stacks = sorted(hash_stacks[key])
            for label in stacks:
                by_stack[label] += 1
            arch = node["arch"]
            details.append(
                {
                    "compiler": _compiler(node, installs),
                    "hash": key,
                    "os": arch["platform_os"],
                    "platform": arch["platform"],
                    "size": "-",
                    "stacks": stacks,
                    "target": _target(arch),
                    "variants": [
                        _variant(k, v)
                        for k, v in node.get("parameters", {}).items()
                        if k not in FLAGS
                    ],
                    "versions": [node["version"]],
                }
            )
        details.sort(key=lambda d: str(d["hash"]))
        meta = {
            "compilers": sorted({d["compiler"] for d in details}),
            "num_specs": len(details),
            "num_specs_by_stack": dict(sorted(by_stack.items())),
            "oss": sorted({d["os"] for d in details}),
            "platforms": sorted({d["platform"] for d in details}),
            "stacks": sorted(by_stack),
            "targets": sorted({d["target"] for d in details}),
            "versions": sorted({d["versions"][0] for d in details}),
        }
        packages[name] = {"meta": meta, "spec_details": details}
    return packages, stats


def write_pages(output: Path, ref: str, packages: dict[str, dict[str, Any]]) -> int:
    """Write every package's ``specs.md`` page; returns the bytes written."""
    written = 0
    for name, summary in packages.items():
        meta = json.dumps(summary["meta"], sort_keys=True)
        details = json.dumps(summary["spec_details"], sort_keys=True)
        folder = output / ref / name
        folder.mkdir(parents=True, exist_ok=True)
        page = (PAGE % (name, ref, meta, details)).encode()
        (folder / "specs.md").write_bytes(page)
        written += len(page)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description="Sequential reference-algorithm baseline.")
    parser.add_argument("--mirror", required=True, help="mirror base URL or folder")
    parser.add_argument("--branch", required=True, help="the ref to summarize")
    parser.add_argument("--output", type=Path, required=True, help="pages go to OUTPUT/REF/")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    packages, stats = summarize_ref(args.mirror, args.branch)
    written = write_pages(args.output, args.branch, packages)
    specs = sum(p["meta"]["num_specs"] for p in packages.values())
    print(
        f"baseline {args.branch}: {stats.requests} requests, {stats.bytes:,} bytes, "
        f"{stats.records:,} records, {len(packages):,} packages, {specs:,} specs, "
        f"{written:,} page bytes, missing stacks {stats.missing}, "
        f"{time.perf_counter() - started:.2f}s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
