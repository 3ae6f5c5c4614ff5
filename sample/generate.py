"""Regenerate the committed sample mirror: ``python sample/generate.py [--out sample/mirror]``.

The target folder is deleted and rebuilt; the result is byte-identical on every run. Refs:

* ``develop``: Database 8, v3 layout, generated packages in four stacks plus one stack listed in
  the discovery document without an index (``ml-darwin-aarch64-mps``, a 404); some specs carry
  their compiler as an annotation, some pure-Python specs have no compiler; its top-level cache
  holds each spec's manifest and (synthetic) tarball, except one spec (the first, ``DROPPED``),
  whose tarball blob is left out, so that a sync reports it under ``missing_binaries``
  (``missing: tarball``);
* ``develop-2025-04-20``: Database 7, v2 layout, the specs of the reference pages in
  ``sample/reference/`` (a crawl must reproduce those pages) plus generated packages;
* ``v0.23.1``: Database 6, v2 layout, a few generated packages in two stacks.

And beside it, ``site-cache``: a site's own plain build cache, as ``spack buildcache push`` and
``update-index`` (Spack v1.3) leave one: no discovery document, a v3 top-level index listing a
Database 8 and a Database 9 blob side by side, the view ``stable`` (``update-index --name``),
and each spec's manifest and (synthetic) tarball.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

SAMPLE_DIR = Path(__file__).resolve().parent
if str(SAMPLE_DIR.parent) not in sys.path:
    sys.path.insert(0, str(SAMPLE_DIR.parent))

from bench.synth import (  # noqa: E402
    SynthRef,
    build_mirror,
    build_plain_cache,
    generate_specs,
    page_to_specs,
)

REFERENCE_DIR = SAMPLE_DIR / "reference"
DEVELOP_STACKS = ("data-vis-sdk", "e4s", "ml-linux-x86_64-cpu", "ml-linux-x86_64-cuda")
#: The one spec of ``develop`` (its index) whose tarball blob the sample leaves out.
DROPPED = 0


def sample_refs() -> list[SynthRef]:
    """The refs of the sample mirror."""
    develop = generate_specs(
        2025, 30, stacks=DEVELOP_STACKS, specs_per_package=(1, 3), annotation_fraction=0.2
    )
    page_specs = []
    page_packages = set()
    for page in sorted(REFERENCE_DIR.glob("develop-2025-04-20/*/specs.md")):
        package, ref, specs = page_to_specs(page.read_text(encoding="utf-8"))
        assert ref == "develop-2025-04-20", page
        page_packages.add(package)
        page_specs.extend(specs)
    page_stacks = sorted({label for spec in page_specs for label in spec.stacks})
    snapshot = page_specs + generate_specs(
        20250420,
        15,
        stacks=page_stacks,
        specs_per_package=(1, 2),
        allow_no_compiler=False,
        exclude=page_packages,
    )
    release = generate_specs(
        231, 10, stacks=("data-vis-sdk", "e4s"), specs_per_package=(1, 2), allow_no_compiler=False
    )
    return [
        SynthRef(
            "develop",
            tuple(develop),
            db_version=8,
            layout="v3",
            extra_stacks=("ml-darwin-aarch64-mps",),
            binaries=True,
            without_tarball=(develop[DROPPED].dag_hash,),
        ),
        SynthRef("develop-2025-04-20", tuple(snapshot), db_version=7, layout="v2"),
        SynthRef("v0.23.1", tuple(release), db_version=6, layout="v2"),
    ]


def generate(out: Path) -> dict[str, list[dict[str, str]]]:
    """Delete ``out`` and build the sample mirror there; return its discovery document."""
    _clear(out, "cache_spack_io_index.json")
    return build_mirror(out, sample_refs())


def generate_plain(out: Path) -> None:
    """Delete ``out`` and build the sample's plain build cache there."""
    _clear(out, "v3/layout.json")
    specs = generate_specs(1300, 12, stacks=(), specs_per_package=(1, 2))
    build_plain_cache(out, specs, db_versions=(8, 9), views={"stable": specs[::2]}, binaries=True)


def _clear(out: Path, sign: str) -> None:
    """Delete ``out``, if it holds ``sign``: never a folder that is something else."""
    if out.exists():
        if any(out.iterdir()) and not (out / sign).is_file():
            raise SystemExit(f"refusing to delete {out}: it does not look like a mirror")
        shutil.rmtree(out)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=SAMPLE_DIR / "mirror")
    parser.add_argument("--plain-out", type=Path, default=SAMPLE_DIR / "site-cache")
    args = parser.parse_args(argv)
    out: Path = args.out
    for ref in sample_refs():
        labels = sorted({label for spec in ref.specs for label in spec.stacks})
        packages = len({spec.name for spec in ref.specs})
        print(
            f"{ref.name}: DB {ref.db_version} {ref.layout}, {packages} packages, "
            f"{len(ref.specs)} specs, stacks {labels} + 404 {list(ref.extra_stacks)}"
        )
    generate(out)
    generate_plain(args.plain_out)
    for folder in (out, args.plain_out):
        size = sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
        print(f"wrote {folder} ({size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
