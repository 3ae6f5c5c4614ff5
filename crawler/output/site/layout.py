"""What every page of the site shares: the frame around its body, escaping helpers, and the
names of its files (a package's page, the list of packages by their first character).

Every text from the mirror goes through :func:`text` (``html.escape``, in text and in
attributes), and every file name into a link through :func:`href` (percent-encoded). Both
give ASCII, a character beyond it written as a reference (``&#233;``): a page made of them
is a string of one byte a character, joined and encoded as mere copies. One ``é`` in each
would make a develop-sized site's pages twice the memory, and their joins and encoding
0.19 s rather than 0.01 s.
"""

from __future__ import annotations

import functools
import json
import re
from html import escape
from typing import NamedTuple
from urllib.parse import quote

from ...consume.versions import version_key
from ...text import byte_size

#: The folders of ``site/``: one page per package, one list per first character, the search
#: index in chunks (see :func:`search_keys`).
PACKAGES, LETTERS, SEARCH = "packages", "letters", "search"
#: The page of the table of all packages, in ``site/``.
ALL = "all.html"
#: A package's page on packages.spack.io (its recipe, maintainers, versions).
PACKAGES_SPACK_IO = "https://packages.spack.io/package.html?name="
_DIGITS = re.compile(r"([0-9]+)")


@functools.lru_cache(maxsize=1 << 16)
def text(value: str) -> str:
    """``value`` as HTML text (quotes escaped too, so that it is safe in an attribute), in
    ASCII. Cached: a branch's pages repeat the same versions, compilers and targets a million
    times."""
    return html_ascii(value)


class Texts(dict[str, str]):
    """:func:`text` of each key, computed once: for the texts a site repeats in most of its
    rows (a lookup, where :func:`text`'s cache also keeps its order of use)."""

    def __missing__(self, value: str) -> str:
        found = self[value] = html_ascii(value)
        return found


def html_ascii(value: str) -> str:
    """:func:`text`, not cached: for a text seen once (a spec's URL, its variants). Most have
    nothing to escape, which five searches tell three times faster than ``html.escape``."""
    if "&" in value or "<" in value or ">" in value or '"' in value or "'" in value:
        value = escape(value, quote=True)
    if value.isascii():
        return value
    return value.encode("ascii", "xmlcharrefreplace").decode("ascii")


def href(name: str, suffix: str = ".html") -> str:
    """A link to the file ``name + suffix`` in the same folder, percent-encoded."""
    return quote(name + suffix, safe="")


def letter_key(name: str) -> str:
    """The list a package is in: its first character, lower case (names start with one)."""
    return name[:1].lower()


def search_keys(name: str) -> set[str]:
    """The search chunks a package is in: the first character of each of its words (``py-numpy``
    is in ``p`` and ``n``), so that a search for ``numpy`` loads one chunk and finds it."""
    words = name.lower().replace("_", "-").replace(".", "-").replace("+", "-").split("-")
    return {word[0] for word in words if word}


def natural_key(name: str) -> tuple[tuple[tuple[int | str, ...], ...], str]:
    """The key that sorts names naturally: runs of digits as numbers (``paraview-2`` before
    ``paraview-10``), the rest case-folded, then the name itself, so that the order is total.
    A number is keyed by its count of digits and its digits (leading zeros left out), not by
    ``int()``, which refuses thousands of digits. Text and numbers alternate, text first, so
    that two keys compare text with text and numbers with numbers."""
    parts = _DIGITS.split(name.lower())
    key = tuple(
        (len(part.lstrip("0")), part.lstrip("0")) if i % 2 else (part,)
        for i, part in enumerate(parts)
    )
    return key, name


def newest_first(versions: list[str]) -> list[str]:
    """Versions in Spack's order, the newest first."""
    return sorted(versions, key=version_key, reverse=True)


def number(n: int) -> str:
    """A count as the CLI writes it: ``12,345``."""
    return f"{n:,}"


def size_cell(size: str) -> str:
    """A table cell of a tarball's size (:func:`~crawler.text.byte_size`), its exact count in
    its title and as what the table sorts by."""
    shown = byte_size(size)
    if shown == "-":
        return "<td>-</td>"
    count = int(size)
    return f'<td data-value="{count}" title="{number(count)} bytes">{shown}</td>'


def script_json(value: object) -> str:
    """``value`` as JSON to put in a script, in ASCII: ``<`` escaped, so that ``</script>`` in
    the data cannot end the script block."""
    return json.dumps(value, separators=(",", ":")).replace("<", "\\u003c")


class Frame(NamedTuple):
    """What the header and footer of every page of a branch's site say: the branch and when
    it was crawled (the report's time: the same input gives the same bytes)."""

    branch: str
    crawled: str

    def header(self, root: str) -> str:
        """The header: the branch (its front page), the table of all packages, the crawl."""
        return (
            f'<header><a href="{root}index.html"><strong>{text(self.branch)}</strong></a> '
            f'&middot; <a href="{root}{ALL}">All packages</a> &middot; '
            f"crawled {text(self.crawled)}</header>"
        )

    def footer(self, package: str = "") -> str:
        """The footer: the branch and the crawl, and a package's page on packages.spack.io."""
        about = ""
        if package:
            link = PACKAGES_SPACK_IO + quote(package, safe="")
            about = f' &middot; <a href="{link}">{text(package)} on packages.spack.io</a>'
        return f"<footer>Branch {text(self.branch)}, crawled {text(self.crawled)}{about}</footer>"


def page(title: str, *body: str, root: str, frame: Frame, package: str = "") -> str:
    """A whole page, its body the pieces ``body`` (joined once: a page of a large package is
    megabytes) between ``frame``'s header and footer (which links ``package`` to
    packages.spack.io); ``root`` is the relative path to ``site/`` (``""`` or ``"../"``)."""
    head = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{text(title)}</title>"
        f'<link rel="stylesheet" href="{root}site.css"></head>\n<body>'
    )
    foot = f'{frame.footer(package)}<script src="{root}site.js"></script></body></html>\n'
    return "".join([head, frame.header(root), "<main>", *body, "</main>", foot])


def table(headers: list[str], rows: list[list[str]], *, cls: str = "") -> str:
    """A plain table of cells already rendered as HTML."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    klass = f' class="{cls}"' if cls else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
