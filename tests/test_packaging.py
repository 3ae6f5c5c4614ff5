"""The package as it is shipped: ``python -m build`` makes an sdist and a wheel; the sdist,
unpacked and installed with its test extra in a fresh virtual environment, passes its own fast
suite; the wheel holds the default config, the license texts and the project's metadata.

The fresh environment installs its dependencies from the package index (pip may download), as a
user's does: nothing of this interpreter's site-packages is borrowed.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Sequence
from email.parser import HeaderParser
from pathlib import Path

import pytest

from crawler.ops.schemas import SCHEMAS

from .conftest import REPO, cli_env

LICENSES = ("LICENSE", "LICENSE-APACHE", "LICENSE-MIT")
#: What the sdist's own tests need, unpacked (each was missing from it once).
SDIST_HOLDS = (
    "tests/__init__.py",
    "tests/conftest.py",
    "sample/mirror/cache_spack_io_index.json",
    "sample/reference",
    "config/crawler.yaml",
    "config/sample.yaml",
    "examples/crontab",
    "docs/operations.md",
    "bench/synth.py",
    "crawler/config/defaults.yaml",
    "CHANGELOG.md",
    *LICENSES,
)


def run(argv: Sequence[object], cwd: Path, timeout: float) -> str:
    """Run a command of the build; its output, or a failure that shows it."""
    env = cli_env()
    env.pop("PYTHONPATH", None)  # the fresh environment imports what it installed, only
    proc = subprocess.run(
        [str(arg) for arg in argv],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    # pytest's own summary lines name what failed; the tail shows how.
    named = "\n".join(
        line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))
    )
    assert proc.returncode == 0, (
        f"{' '.join(map(str, argv))} failed:\n{named}\n{proc.stdout[-6000:]}"
    )
    return proc.stdout


def check_wheel(wheel: Path) -> None:
    """The default config as the repository documents it, the license texts, the metadata."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        defaults = archive.read("crawler/config/defaults.yaml")
        [info] = {name.split("/")[0] for name in names if ".dist-info/" in name}
        metadata = HeaderParser().parsestr(archive.read(f"{info}/METADATA").decode())
    assert defaults == (REPO / "config" / "crawler.yaml").read_bytes()
    assert {f"{info}/licenses/{name}" for name in LICENSES} <= names
    assert {f"crawler/schema/{file}" for file in SCHEMAS.values()} <= names
    assert "crawler/py.typed" in names
    assert not any(name.startswith(("tests/", "bench/", "sample/")) for name in names)
    assert metadata["License-Expression"] == "Apache-2.0 OR MIT"
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL", []))
    assert urls["Repository"] == "https://github.com/spack/spack-cache-crawler"
    assert {"Changelog", "Documentation", "Issues"} <= set(urls)
    classifiers = metadata.get_all("Classifier", [])
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Typing :: Typed" in classifiers


def unpack(sdist: Path, into: Path) -> Path:
    """The sdist's one top folder, unpacked into ``into``; checked to hold what tests need."""
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    [top] = into.iterdir()
    for name in SDIST_HOLDS:
        assert (top / name).exists(), f"the sdist lacks {name}"
    assert not list(top.rglob("__pycache__")) and not (top / "bench" / "out").exists()
    return top


@pytest.mark.slow
@pytest.mark.release  # minutes: .ci/release-check runs it (pytest --release)
@pytest.mark.timeout(1200)
def test_the_sdist_installs_and_passes_its_own_fast_suite(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", dist, REPO], cwd=tmp_path, timeout=600)
    [sdist], [wheel] = list(dist.glob("*.tar.gz")), list(dist.glob("*.whl"))
    check_wheel(wheel)
    source = unpack(sdist, tmp_path / "unpacked")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path, timeout=120)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", ".[test]"], cwd=source, timeout=600)
    # The console script, as installed: the default config and a completion script.
    printed = run([venv / "bin" / "crawler", "config", "--defaults"], cwd=tmp_path, timeout=60)
    assert printed == (REPO / "config" / "crawler.yaml").read_text("utf-8")
    completion = run([venv / "bin" / "crawler", "completion", "bash"], cwd=tmp_path, timeout=60)
    assert "complete -o bashdefault -F _shtab_crawler crawler" in completion
    fast = [python, "-m", "pytest", "-m", "not slow", "-q", "-p", "no:cacheprovider"]
    summary = run(fast, cwd=source, timeout=900).strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
