"""Verify: re-check a published branch folder, without the network.

:func:`verify_branch` reads ``<output>/<branch>/`` and returns every problem it finds as a line
naming the file and what is wrong (an empty list means the folder is sound), e.g.
``index.json: package zlib: meta.num_specs is 3 but spec_details has 2 entries``. It never
raises for a bad folder; only the caller decides what a problem costs.

What is checked, in this order:

1. ``index.json`` exists and is JSON. Without it nothing else can be checked.
2. It matches its JSON Schema, ``crawler/schema/index.schema.json`` (types, required
   and unknown keys, hash and name patterns, ``root`` first and read). At most
   :data:`.indexcheck.MAX_SCHEMA_ERRORS` schema errors are listed.
3. Consistency, which a schema cannot express:

   * ``branch`` is the folder's name, or the branch asked for (``crawler verify --branch``);
     a folder whose documents all name one other branch is a copy of that branch under
     another name, which is no problem (:func:`expected_branch`);
   * source labels are unique, and ``stats.sources`` / ``sources_missing`` / ``sources_failed``
     count them;
   * no hash is the spec of two entries (in one package or across packages);
   * per package: ``meta.num_specs`` is the number of ``spec_details``; ``num_specs_by_stack``
     and ``meta.stacks`` / ``compilers`` / ``oss`` / ``platforms`` / ``targets`` / ``versions``
     are what the specs give (sorted unique lists); ``spec_details`` are sorted by hash; every
     spec's ``stacks`` are sorted and include ``root``, and name only sources that were read
     (``status`` ``ok``);
   * ``stats.packages`` and ``stats.specs`` count the packages and specs, and the root source's
     ``in_buildcache`` equals the number of specs.

   These checks read the document through typed records, a package at a time
   (:mod:`.indexcheck`: the memory verify needs is in ``docs/consumers.md``); a top level too
   broken for them (a list where an object belongs...) is reported once and the checks are
   skipped, the schema errors saying why; a package too broken is named, the others still
   checked, and the counts over all specs (``stats.specs``, ``in_buildcache``, step 5) left
   out.
4. When ``pages/`` exists: exactly one ``pages/<package>/specs.md`` per package, each
   byte-identical to what :func:`crawler.output.render.render_page` makes of the index's
   package, and no other file. A folder of ``pages/`` that cannot be listed is reported as
   such, once, rather than every page under it as missing.
5. ``links.json`` beside an index of schema 2, of its own schema 2 or 1 (see
   :func:`_links_problems`).
6. When ``changes.json``, ``report.json`` and ``history.json`` exist: each is a JSON object
   for the same branch, which matches its schema (``crawler/schema/<name>.schema.json``; not
   with ``schema=False``).

Over a ``develop``-sized branch (60,000 specs) verify takes about 1.6 s, 0.3 s of it the schema
(``jsonschema-rs``; the pure-Python ``jsonschema`` took 21 s of it). ``verify_branch(path,
schema=False)`` skips step 2.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import NamedTuple

import msgspec

from ..consume.load import Pass, RawLinks
from ..documents import Changes, Companion, History, PackageSummary, Report
from ..files import map_regular, read_regular, release
from ..linkfile import LINKS_VERSION
from ..output.published import (
    COMPANIONS,
    OS_LITTER,
    branch_problem,
    companion_problem,
    foreign_entries,
)
from ..output.render import render_page
from ..text import decode_reason
from .indexcheck import Expected, IndexCheck, Progress, SchemaErrors, short
from .schemas import validator

#: How many times a branch replaced while it is verified is verified (see verify_branch).
VERIFY_ATTEMPTS = 3
_HASH = re.compile(r"[a-z2-7]{32}")
_NAMED = msgspec.json.Decoder(Companion)


class Branch(NamedTuple):
    """The branch every document of a branch folder must name (:class:`Expected`), and a
    note when the folder is a copy of it under another name."""

    expected: Expected
    note: str | None = None


def expected_branch(folder: Path, asked: str | None = None) -> Branch:
    """The branch the documents of ``folder`` must name: ``asked`` when given, else the
    folder's name, unless every document that names a branch names one other branch: then
    the folder is a copy of that branch under another name (``cp -r output/develop
    snapshots/develop-2025-04-20``, as docs/consumers.md suggests), which the note says."""
    named = _named_branches(folder)
    if len(named) != 1 or folder.name in named:
        note = None
    else:
        only = next(iter(named))
        note = f"a copy of branch {only!r} under another name ({folder.name!r})"
    if asked is not None:
        return Branch(Expected(asked, "the branch expected is"), note if asked in named else None)
    if note is not None:
        return Branch(Expected(only, "the other documents name"), note)
    return Branch(Expected(folder.name))


def _named_branches(folder: Path) -> set[str]:
    """The branch names the documents of ``folder`` give; one that cannot be read gives
    none (that is a problem of its own). Each is only scanned: about 0.5 ms a MB."""
    named = set()
    for name in ("index.json", "links.json", *COMPANIONS):
        try:
            branch = _NAMED.decode(map_regular(folder / name)).branch
        except (OSError, ValueError, RecursionError):  # msgspec's errors are ValueErrors
            continue
        if isinstance(branch, str):
            named.add(branch)
    return named


def _companion_problems(folder: Path, name: str, schema: bool, expected: Expected) -> list[str]:
    """What is wrong with the companion ``name``, if it is there: not a JSON object; else all
    of: another branch's (or none's), what its schema says (with ``schema``), not what the
    readers decode."""
    problem = companion_problem(folder, name, branch_too=False)
    if problem is not None:
        return [short(problem)]
    if not (folder / name).exists():
        return []
    try:
        data = read_regular(folder / name)
        document = json.loads(data)
        other = branch_problem(name, document.get("branch"), *expected)
        problems = [] if other is None else [short(other)]
        if schema:
            errors = SchemaErrors(name)
            errors.add(validator(name), document)
            problems += errors.problems()
        msgspec.json.decode(data, type=_TYPED[name])  # what the readers decode it as
    except msgspec.ValidationError as err:  # a schema may allow it (58.0 for an integer)
        return [*problems, f"{name}: not a {name} as a publish writes it: {short(str(err))}"]
    except (OSError, ValueError, RecursionError) as err:  # replaced meanwhile: the next pass tells
        return [f"{name}: not readable JSON: {short(decode_reason(err))}"]
    return problems


#: What each companion is read as (crawler.consume.load).
_TYPED: dict[str, type] = {"changes.json": Changes, "report.json": Report, "history.json": History}


def _links_problems(
    folder: Path, stacks: dict[str, tuple[str, ...]], expected: Expected, progress: Progress
) -> list[str]:
    """``links.json`` (beside an index of schema 2), of its ``schema_version`` 2 (packed) or
    1 (before it had one): the folder's branch's, one entry per spec of the index
    (``stacks``: each spec's), each resolved (a packed entry's stacks have caches, its
    dependencies are numbers in ``edges``, whose hashes have names), with hashes for
    dependencies and locations in the spec's stacks.

    It is read through its typed struct, an entry at a time, and these rules say what its
    schema says: its schema's check would hold the whole document as a tree."""
    path = folder / "links.json"
    if not path.exists():
        return ["links.json: missing (an index.json of schema_version 2 has one beside it)"]
    try:
        data = map_regular(path)
        links = msgspec.json.decode(data, type=RawLinks)
    except (OSError, msgspec.DecodeError, RecursionError) as err:  # ValidationError included
        return [f"links.json: not a links.json as a publish writes it: {short(decode_reason(err))}"]
    release(data)
    if links.schema_version not in (1, LINKS_VERSION):
        return [f"links.json: schema_version {links.schema_version}, not one this version reads"]
    other = branch_problem("links.json", links.branch, *expected)
    problems = [] if other is None else [other]
    problems += [
        f"links.json: {key} is no spec of the index" for key in links.specs if key not in stacks
    ]
    problems += [f"links.json: spec {key} has no entry" for key in stacks if key not in links.specs]
    reading = Pass(data)
    for done, (key, raw) in enumerate(links.specs.items(), 1):
        progress("links.json: spec", done, len(links.specs))
        try:
            entry = links.decoded(reading.read(raw))
        except (msgspec.DecodeError, RecursionError) as err:  # a ValueError: before it
            problems.append(
                f"links.json: spec {key}: not as a publish writes it: {short(decode_reason(err))}"
            )
            continue
        except ValueError as err:  # a packed entry that does not resolve
            problems.append(f"links.json: spec {key}: {short(str(err))}")
            continue
        strays = sorted(entry.locations.keys() - set(stacks.get(key, entry.locations)))
        if strays:
            problems.append(f"links.json: spec {key}: locations in no stack of it: {strays}")
        bad = sorted({d.hash for d in entry.dependencies if not _HASH.fullmatch(d.hash)})
        if bad:
            problems.append(f"links.json: spec {key}: dependency hashes {bad[:3]} are no DAG hash")
    return sorted(problems)


def _first_difference(a: bytes, b: bytes) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _page_problems(
    folder: Path,
    branch: str,
    names: Iterable[str],
    package: Callable[[str], PackageSummary | None],
    progress: Progress,
) -> list[str]:
    """The pages against the packages ``names`` of the index, each decoded when its page is
    compared (``package``: None for one too broken to be)."""
    pages = folder / "pages"
    expected = {f"{name}/specs.md": name for name in names}
    found, unlisted = _files_under(pages)
    problems = [
        f"{where}: cannot be listed: {why} (the pages in it are not checked)"
        for where, why in sorted(unlisted.items())
    ]
    every = sorted(found | set(expected))
    for done, relative in enumerate(every, 1):
        progress("pages: page", done, len(every))
        if relative not in expected:
            problems.append(f"pages/{relative}: not a page of any package in index.json")
            continue
        if relative not in found:
            if not any(f"pages/{relative}".startswith(f"{where}/") for where in unlisted):
                problems.append(f"pages/{relative}: missing")
            continue
        name = expected[relative]
        summary = package(name)
        if summary is None:
            continue  # index.json could not be read as packages: already reported
        want = render_page(name, branch, summary).encode()
        try:
            have = read_regular(pages / relative)
        except OSError as err:
            problems.append(f"pages/{relative}: unreadable: {err.strerror or err}")
            continue
        if have != want:
            problems.append(
                f"pages/{relative}: differs from package {name} in index.json "
                f"(first difference at byte {_first_difference(have, want)})"
            )
    return problems


def _files_under(pages: Path) -> tuple[set[str], dict[str, str]]:
    """The files under ``pages`` (relative paths; symbolic links too, not followed), and the
    folders that could not be listed (``pages/...``), with why: their pages are not missing,
    they cannot be told apart from missing ones."""
    found: set[str] = set()
    unlisted: dict[str, str] = {}

    def failed(err: OSError) -> None:
        unlisted[_unlisted_at(err, pages.parent)] = err.strerror or str(err)

    for top, _, files in os.walk(pages, onerror=failed):
        at = Path(top).relative_to(pages)
        # Finder's litter, which publishes tolerate
        found.update((at / name).as_posix() for name in files if name not in OS_LITTER)
    return found, unlisted


def verify_branch(
    path: Path,
    *,
    schema: bool = True,
    check: Callable[[Path, bool], list[str]] | None = None,
    branch: str | None = None,
    progress: Progress | None = None,
) -> list[str]:
    """Every problem of the published branch folder ``path``; empty when it is sound.

    ``schema=False`` skips the (slow) JSON Schema validation; every other check still runs.
    ``branch`` is the branch its documents must name (default: see :func:`expected_branch`).
    ``progress`` is told, as each pass goes, what it checks and how far it is
    (``progress("index.json: package", 12, 3000)``). ``check`` is one pass over the folder
    (default: :func:`verify_once`), for a caller that must observe or time it.

    A sync may publish the branch meanwhile, swapping another folder in at ``path``: the files
    read before and after the swap are of two publishes, and would disagree. So when ``path``
    is another folder at the end than at the start, the branch is verified again (up to
    :data:`VERIFY_ATTEMPTS` times in all).
    """
    folder = path.resolve()
    once = check or partial(verify_once, branch=branch, progress=progress or _unseen)
    for _ in range(VERIFY_ATTEMPTS):
        before = _folder_identity(folder)
        problems = once(folder, schema)
        if _folder_identity(folder) == before:
            return problems
    return [*problems, f"{folder}: replaced while it was verified, {VERIFY_ATTEMPTS} times over"]


def _unseen(what: str, done: int, total: int) -> None:
    """No progress shown."""


def _folder_identity(folder: Path) -> tuple[int, int] | None:
    try:
        stat = folder.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def verify_once(
    folder: Path, schema: bool, branch: str | None = None, progress: Progress = _unseen
) -> list[str]:
    """The problems of one pass over the branch ``folder`` (see :func:`verify_branch`)."""
    index_path = folder / "index.json"
    if not index_path.exists():
        return [f"index.json: missing in {folder}"]
    expected = expected_branch(folder, branch).expected
    try:
        # msgspec, as the readers decode it: json.loads takes a byte order mark, they do not.
        check = IndexCheck(map_regular(index_path), expected, schema, progress)
        problems = check.run()
    except (OSError, ValueError, RecursionError) as err:
        return [f"index.json: not readable JSON: {short(decode_reason(err))}"]
    index = check.index
    pages = folder / "pages"  # a link is no publish's (see _foreign_problems), and not walked
    if pages.is_dir() and not pages.is_symlink():
        named = index.branch if index is not None else folder.name
        problems += _page_problems(folder, named, check.names, check.package, progress)
    if index is not None and index.schema_version >= 2 and check.tally.whole:
        problems += _links_problems(folder, check.tally.stacks, expected, progress)
    for name in COMPANIONS:
        problems += _companion_problems(folder, name, schema, expected)
    reported = {p.split(": ", 1)[0] for p in problems if p.startswith(("pages/", "pages:"))}
    return problems + _foreign_problems(folder, reported)


def _foreign_problems(folder: Path, reported: set[str]) -> list[str]:
    """Entries a publish does not write (a symbolic link where a page should be, too), and
    folders that cannot be listed, unless the page checks already ``reported`` them: the next
    publish of the branch would refuse to replace the folder."""
    problems: list[str] = []

    def unlisted(err: OSError) -> None:
        where = _unlisted_at(err, folder)
        if where not in reported:
            problems.append(f"{where}: cannot be listed: {err.strerror or err}")

    foreign = [name for name in foreign_entries(folder, unlisted) if name not in reported]
    message = "not written by a publish (the next one would stop on it)"
    return problems + [f"{name}: {message}" for name in foreign]


def _unlisted_at(err: OSError, folder: Path) -> str:
    """Where a folder could not be listed, relative to the branch ``folder`` (``pages``,
    ``pages/zlib``), as problems name paths; the branch folder itself by its full path."""
    failed = Path(err.filename or folder)
    inside = failed != folder and failed.is_relative_to(folder)
    return failed.relative_to(folder).as_posix() if inside else str(folder)
