"""The links of the README and the docs: every relative link reaches a file of the repository,
and every ``#anchor`` a heading of its page (as GitHub makes them), so that a reader following
one lands where it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "bench" / "README.md"],
) + sorted((REPO / "docs").rglob("*.md"))
#: ``[text](target)``, outside code; a target has no spaces.
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.M)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``page``: lowercased, punctuation dropped but
    ``-`` and ``_``, spaces made hyphens, a repeated one numbered."""
    found: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text())):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        numbered, n = slug, 0
        while numbered in found:
            n += 1
            numbered = f"{slug}-{n}"
        found.add(numbered)
    return found


def links(page: Path) -> list[str]:
    """The relative link targets of ``page``, outside code blocks and code spans."""
    text = _CODE.sub("", _FENCE.sub("", page.read_text()))
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_the_pages_are_found() -> None:
    assert len(PAGES) >= 10 and all(page.is_file() for page in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_reaches_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no such heading")
    assert not broken, broken


def test_a_broken_anchor_is_seen(tmp_path: Path) -> None:
    """The check itself: a heading's anchor is found, a missing one is not."""
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## The spec store: a night's `run`\n\n```\n# not a heading\n```\n")
    assert anchors(page) == {"title", "the-spec-store-a-nights-run"}
    page.write_text("[a](#title) `[b](#code)` [c](other.md#x) [d](https://example.org/#y)\n")
    assert links(page) == ["#title", "other.md#x"]
