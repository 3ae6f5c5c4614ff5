"""A published branch folder: its layout, and whether it is as a publish left it.

What a publish writes there (:data:`BRANCH_FILES`, ``pages/<package>/specs.md``, the site
``site/``, the :data:`COMPANIONS` naming their branch) is known here only: a publish refuses
to replace a folder holding anything else (:func:`check_replaceable`), and ``crawler verify``
reports it (:func:`foreign_entries`, :func:`companion_problem`).

A sync asks ``<output>/<branch>/`` four questions before it decides a branch's fate; they are
answered here, in one place, from the folder and the state of the last publish:

* :meth:`PublishedBranch.intact`: is it as its last publish (recorded in the state) wrote it?
* :meth:`PublishedBranch.whole`: without that record, does it look whole?
* :meth:`PublishedBranch.holds`: does it hold exactly these files (a rebuild to the very
  files published is no publish)?
* :meth:`PublishedBranch.published_without`: which stacks was it published without?
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

import msgspec

from ..config import normal_formats
from ..documents import Companion, Index, Report
from ..errors import OutputError
from ..files import open_regular, read_regular
from .site import SITE, SITE_SUFFIXES
from .state import BranchState, PagesDigest

log = logging.getLogger("crawler")

#: The files a published branch folder holds, besides ``pages/<package>/specs.md``.
BRANCH_FILES = frozenset(
    {"index.json", "links.json", "changes.json", "report.json", "history.json"}
)
#: Left by file browsers (macOS Finder) in any folder they show: replaced with the rest.
OS_LITTER = frozenset({".DS_Store"})


def check_replaceable(target: Path) -> None:
    """Refuse to replace ``target`` (``<output>/<branch>``) unless it is absent or holds only
    what a publish writes: the :data:`BRANCH_FILES` as files, ``pages/<package>/specs.md``,
    and a site's files under ``site/``. The output folder may be shared with other data (a
    home folder, the mirror itself): a file the crawler did not write is never deleted.
    """
    try:
        if not target.exists() and not target.is_symlink():
            return
        if target.is_symlink() or not target.is_dir():
            kind = "a symbolic link" if target.is_symlink() else "not a folder"
            raise OutputError(str(target), f"is {kind}, which a publish would replace; move it")
        foreign = foreign_entries(target)
    except OSError as err:  # naming what could not be looked at: pages/ or a package's folder
        reason = err.strerror or str(err)
        raise OutputError(str(err.filename or target), reason, "look into") from None
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise OutputError(
            str(target),
            f"holds {', '.join(foreign[:5])}{more}, which the crawler did not write and a "
            "publish would delete; move them away or choose another output folder",
        )


#: The files a publish writes beside ``index.json``, each a JSON object naming its branch.
COMPANIONS = ("changes.json", "report.json", "history.json")


def companion_problem(folder: Path, name: str, *, branch_too: bool = True) -> str | None:
    """What is wrong with the companion ``name`` (see :data:`COMPANIONS`) of the published
    branch ``folder``, if it is there: it must be a JSON object whose ``branch`` is the
    folder's name (not asked with ``branch_too=False``: verify says it beside the rest).
    None when it is sound or absent."""
    path = folder / name
    if not path.exists():
        return None
    try:
        data = read_regular(path)
        # Typed, so that a large changes.json is only scanned: every sync checks them. The
        # scan skips what it does not read without checking its UTF-8: decoding does.
        branch = _COMPANION.decode(data).branch
        data.decode()
    except msgspec.ValidationError:  # valid JSON, not an object
        return f"{name}: not a JSON object"
    except (OSError, msgspec.DecodeError, UnicodeDecodeError) as err:
        return f"{name}: not readable JSON: {err}"
    except RecursionError:
        return f"{name}: not readable JSON: nested too deeply"
    return branch_problem(name, branch, folder.name) if branch_too else None


def branch_problem(
    name: str, branch: object, expected: str, said: str = "the folder is"
) -> str | None:
    """The problem of the document ``name`` whose ``branch`` is ``branch`` where the branch
    ``expected`` is (by default the folder's name; ``said`` says whose, as the problem
    words it): none when they agree, else naming both (or the branch as missing)."""
    if branch == expected:
        return None
    if branch is None:
        return f"{name}: names no branch ({said} {expected!r})"
    return f"{name}: branch is {branch!r} but {said} {expected!r}"


_COMPANION = msgspec.json.Decoder(Companion)


def foreign_entries(branch: Path, unlisted: Callable[[OSError], None] | None = None) -> list[str]:
    """What in a branch folder a publish did not write (paths relative to it).

    A folder that cannot be listed raises its OSError; with ``unlisted``, that is given the
    error instead and the rest is listed (for :mod:`crawler.ops.verify`, which reports it all).
    """
    foreign: list[str] = []

    def scan(folder: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(folder) as entries:
                return list(entries)
        except OSError as err:
            if unlisted is None:
                raise
            unlisted(err)
            return []

    for entry in scan(str(branch)):
        if entry.name in OS_LITTER:
            continue
        if entry.name in BRANCH_FILES:
            if not entry.is_file(follow_symlinks=False):
                foreign.append(entry.name)
        elif entry.name == SITE and entry.is_dir(follow_symlinks=False):
            foreign += _foreign_in_site(entry.path, SITE, scan)
        elif entry.name == "pages" and entry.is_dir(follow_symlinks=False):
            for package in scan(entry.path):
                where = f"pages/{package.name}"
                if package.name in OS_LITTER:
                    continue
                if not package.is_dir(follow_symlinks=False):
                    foreign.append(where)
                    continue
                for file in scan(package.path):
                    page = file.name == "specs.md" and file.is_file(follow_symlinks=False)
                    if not page and file.name not in OS_LITTER:
                        foreign.append(f"{where}/{file.name}")
        else:
            foreign.append(entry.name)
    return sorted(foreign)


def _foreign_in_site(
    folder: str, where: str, scan: Callable[[str], list[os.DirEntry[str]]]
) -> list[str]:
    """What in a branch's ``site/`` (``folder``, named ``where``) the crawler did not write:
    anything but folders and regular files of a site's suffixes (:data:`SITE_SUFFIXES`)."""
    foreign: list[str] = []
    for entry in scan(folder):
        path = f"{where}/{entry.name}"
        if entry.name in OS_LITTER:
            continue
        if entry.is_dir(follow_symlinks=False):
            foreign += _foreign_in_site(entry.path, path, scan)
        elif not (entry.is_file(follow_symlinks=False) and entry.name.endswith(SITE_SUFFIXES)):
            foreign.append(path)
    return foreign


def package_names(index: bytes) -> set[str] | None:
    """The package names of a published ``index.json`` (None when it does not decode)."""
    try:
        # Raw: the names are enough, the specs (tens of MB for develop) are not decoded.
        return set(msgspec.json.decode(index, type=Index[msgspec.Raw]).packages)
    except msgspec.DecodeError:
        return None


def page_names(pages: Path) -> set[str] | None:
    """The packages a published ``pages/`` folder has a page for, by looking at its entries
    only (no folder: no pages); None when it cannot be looked at.

    A page is ``<package>/specs.md``, a regular file in a folder. Anything else there is not a
    page and does not count: Finder's ``.DS_Store``, a note someone left (a branch that is
    rebuilt keeps refusing to delete those; an unchanged one does not mind them).
    """
    try:
        with os.scandir(pages) as entries:
            folders = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        return {
            p
            for p in folders
            if (pages / p / "specs.md").is_file() and not (pages / p / "specs.md").is_symlink()
        }
    except FileNotFoundError:
        return set()
    except OSError:
        return None


def pages_sha256(pages: Path) -> str | None:
    """:class:`PagesDigest` of the pages (see :func:`page_names`) in a published ``pages/``
    folder, None when one cannot be read."""
    names = page_names(pages)
    if names is None:
        return None
    digest = PagesDigest()
    try:
        for package in sorted(names):
            digest.add(package, read_regular(pages / package / "specs.md"))
    except OSError:
        return None
    return digest.hexdigest()


class PublishedBranch:
    """``<output>/<branch>/`` as the last publish may have left it."""

    def __init__(self, output: Path, branch: str) -> None:
        self.branch = branch
        self.folder = output / branch
        self.pages = self.folder / "pages"
        self.site = self.folder / SITE

    def has_site(self) -> bool:
        """Whether it holds a site: ``site/index.html``, a regular file in a folder of its own
        (a site is checked for being there, not byte for byte: it is made from the documents,
        which are)."""
        front = self.site / "index.html"
        return not self.site.is_symlink() and front.is_file() and not front.is_symlink()

    def has_pages(self) -> bool:
        """Whether it holds pages: a ``pages`` folder of its own (not a link, which the
        crawler did not write and will not replace) with something in it."""
        try:
            if self.pages.is_symlink() or not self.pages.is_dir():
                return False
            with os.scandir(self.pages) as entries:
                return next(entries, None) is not None
        except OSError:
            return False

    def _companions_intact(self) -> bool:
        """Whether the companions of its ``index.json`` are sound, or absent, as
        :mod:`crawler.ops.verify` wants them (a damaged one must not pass as current for ever)."""
        for name in COMPANIONS:
            problem = companion_problem(self.folder, name)
            if problem:
                log.debug("%s: published %s", self.branch, problem)
                return False
        return True

    def _links_size(self) -> int | None:
        """The size of its ``links.json``; None when it has none that is a regular file."""
        try:
            info = os.lstat(self.folder / "links.json")
        except OSError:
            return None
        return info.st_size if stat.S_ISREG(info.st_mode) else None

    def _links_are(self, sha256: str, size: int) -> bool:
        """Whether its ``links.json`` is a regular file of this size and SHA-256 (read a block
        at a time, and only when the size is right: it is 100-odd MB for a develop-sized
        branch)."""
        try:
            with open(open_regular(self.folder / "links.json", follow=False), "rb") as file:
                if os.fstat(file.fileno()).st_size != size:
                    return False
                return hashlib.file_digest(file, "sha256").hexdigest() == sha256
        except OSError:
            return False

    def index(self, sha256: str) -> bytes | None:
        """The bytes of its ``index.json`` when they have this SHA-256 and its companions are
        intact; else None. A link is not what a publish wrote, whatever it leads to: its
        content is another file's to change (``crawler verify`` fails it too)."""
        try:
            index = read_regular(self.folder / "index.json", follow=False)
        except OSError:
            log.debug("%s: no published index.json can be read", self.branch)
            return None
        if hashlib.sha256(index).hexdigest() != sha256:
            log.debug("%s: published index.json has other bytes than expected", self.branch)
            return None
        return index if self._companions_intact() else None

    def holds(
        self,
        index_sha256: str,
        pages_digest: str | None,
        *,
        links_sha256: str,
        links_size: int,
        site: bool,
    ) -> bool:
        """Whether it holds, intact, an ``index.json`` of this SHA-256, a ``links.json`` of
        this SHA-256 and size, these pages (a :class:`PagesDigest`; None: no ``pages/`` at
        all), and a site or none (``site``)."""
        if self.index(index_sha256) is None or not self._links_are(links_sha256, links_size):
            return False
        if self.has_site() != site or (not site and os.path.lexists(self.site)):
            return False
        if pages_digest is None:
            return not os.path.lexists(self.pages)
        return pages_sha256(self.pages) == pages_digest

    def whole(self, asked: list[str]) -> bool:
        """Without a record of its publish (``.crawler/`` deleted, or a run killed between its
        swap and the save), whether it looks whole: its ``index.json`` and companions decode,
        and it has pages if ``asked`` for them, one for each package. Weaker than
        :meth:`intact`, but it catches a cut or deleted file without the mirror."""
        try:
            names = package_names(read_regular(self.folder / "index.json", follow=False))
        except OSError:
            names = None
        if names is None or not self._companions_intact() or self._links_size() is None:
            return False
        if "html" in asked and not self.has_site():
            return False
        if not self.has_pages():
            return "pages" not in asked
        return page_names(self.pages) == names

    def intact(self, previous: BranchState, asked: list[str], exact: bool = True) -> bool:
        """True when it is as its last publish wrote it, in the formats ``asked``: its
        ``index.json`` and its pages (if it has pages; else it holds none) are the bytes
        published.

        Not ``exact`` (an immutable ref, which stays put): it has at least the formats asked
        for (pages published before stay), and its pages are only listed, not read (a nightly
        ``--all`` would otherwise read every page of every release): one for each package of
        its ``index.json``.
        """
        published = normal_formats(previous.formats)
        if asked != published if exact else not set(asked) <= set(published):
            log.debug("%s: published in other formats", self.branch)
            return False
        index = self.index(previous.index_sha256)
        if index is None:
            return False
        size = self._links_size()  # a state written before it was kept: rebuilt once
        if size is None or previous.links_size is None or size != previous.links_size:
            log.debug("%s: its links.json is missing or not the size published", self.branch)
            return False
        if "html" in published and not self.has_site():
            log.debug("%s: its site is missing", self.branch)
            return False
        if exact and "html" not in published and os.path.lexists(self.site):
            log.debug("%s: it holds a site, but none was published", self.branch)
            return False
        if "pages" not in published:
            # A link is not the crawler's (it refuses to replace one).
            if exact and not self.pages.is_symlink() and page_names(self.pages):
                log.debug("%s: it holds pages, but none were published", self.branch)
                return False
            return True
        if not exact:
            names = page_names(self.pages)
            if names is None or names != package_names(index):
                log.debug("%s: published pages are not those of its packages", self.branch)
                return False
            return True
        digest = pages_sha256(self.pages)
        if digest is None or digest != previous.pages_sha256:
            log.debug("%s: published pages are not the ones published", self.branch)
            return False
        return True

    def published_without(self, previous: BranchState | None) -> frozenset[str] | None:
        """The stacks it was published without (``partial``), by its state, or else by its
        ``report.json``; None when it is complete.

        An immutable ref published without some stacks is synced again until they are in; if
        they all fail again, it stays partial (exit 5), as published. When the report does not
        say which stacks (no state, no readable report), the ref is synced again all the same,
        and none is excused.
        """
        if previous is not None:
            failed = frozenset(s.label for s in previous.sources if s.status == "failed")
            return failed or None
        try:  # a report that does not decode as one tells nothing: synced, nothing excused
            published = msgspec.json.decode(read_regular(self.folder / "report.json"), type=Report)
        except (OSError, msgspec.DecodeError):  # ValidationError included
            return frozenset()
        if published.status == "published":
            return None
        if published.status != "partial" or not published.failed_stacks:
            return frozenset()
        return frozenset(published.failed_stacks)
