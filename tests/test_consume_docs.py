"""The Python examples of docs/consumers.md run, as written, against a real publish of the
sample mirror (``OUTPUT`` is its output folder)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from crawler.cli.command import main

from .conftest import REPO
from .test_query import sync_sample

DOC = REPO / "docs" / "consumers.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_page_has_examples() -> None:
    assert len(examples()) >= 3


@pytest.fixture(scope="module")
def output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("docs") / "output"
    sync_sample(folder)
    plain = ["sync", "--all", "--mirror", str(REPO / "sample" / "site-cache"), "-q"]
    assert main([*plain, "--output", str(folder)]) == 0
    return folder


@pytest.mark.parametrize("number", range(len(examples())))
def test_an_example_runs(output: Path, number: int) -> None:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(
            compile(examples()[number], f"{DOC}: example {number + 1}", "exec"), {"OUTPUT": output}
        )
    assert printed.getvalue()  # each example shows something
