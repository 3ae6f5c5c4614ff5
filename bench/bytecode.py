"""Bytecode for the crawler that ``bench/run.py`` measures (kept apart from the runner, which
needs psutil, so that the test suite can check it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def compile_crawler() -> str:
    """Compile the venv's crawler package to bytecode, as ``pip install`` does for a regular
    install; returns a line saying where.

    An editable install writes its bytecode at first import, unless ``PYTHONDONTWRITEBYTECODE``
    is set: then the crawler and its decoding processes would compile every module at every
    start (about 40 ms each here), which no installed crawler does.
    """
    found = subprocess.run(
        [sys.executable, "-c", "import crawler, os; print(os.path.dirname(crawler.__file__))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    package = found.stdout.strip()
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True)
    return f"bytecode of {package} compiled (python -m compileall), as an install does"
