"""Verify: re-check a published branch folder, without the network.

:func:`verify_branch` reads ``<output>/<branch>/`` and returns every problem it finds as a line
naming the file and what is wrong (an empty list means the folder is sound), e.g.
``index.json: package zlib: meta.num_specs is 3 but spec_details has 2 entries``. It never
raises for a bad folder; only the caller decides what a problem costs.

What is checked, in this order:

1. ``index.json`` exists and is JSON. Without it nothing else can be checked.
2. It matches its JSON Schema, ``crawler/schema/index.schema.json`` (types, required
   and unknown keys, hash and name patterns, ``root`` first and read). At most
   :data:`MAX_SCHEMA_ERRORS` schema errors are listed.
3. Consistency, which a schema cannot express:

   * ``branch`` is the folder's name;
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

   These checks read the document through typed records; a document too broken for them (a
   list where an object belongs...) is reported once and the checks are skipped, the schema
   errors saying why.
4. When ``pages/`` exists: exactly one ``pages/<package>/specs.md`` per package, each
   byte-identical to what :func:`crawler.output.render.render_page` makes of the index's
   package, and no other file. A folder of ``pages/`` that cannot be listed is reported as
   such, once, rather than every page under it as missing.
5. ``links.json`` beside an index of schema 2 (see :func:`_links_problems`).
6. When ``changes.json``, ``report.json`` and ``history.json`` exist: each is a JSON object
   for the same branch, which matches its schema (``crawler/schema/<name>.schema.json``; not
   with ``schema=False``).

Schema validation is the slow part: ``jsonschema`` is pure Python and takes about 0.3 ms per spec,
so 15 to 20 seconds for a ``develop`` index of 60,000 specs, where everything else takes about a
second. ``verify_branch(path, schema=False)`` skips step 2 for a quick check.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec
from msgspec import UnsetType

from ..documents import Changes, History, Index, Links, PackageSummary, Report
from ..errors import counted, decode_reason
from ..files import read_regular
from ..output.published import COMPANIONS, OS_LITTER, companion_problem, foreign_entries
from ..output.render import render_page
from .schemas import validator

MAX_SCHEMA_ERRORS = 20
#: How many times a branch replaced while it is verified is verified (see verify_branch).
VERIFY_ATTEMPTS = 3
_MAX_MESSAGE = 200
_HASH = re.compile(r"[a-z2-7]{32}")


def _short(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def _schema_problems(document: object, name: str = "index.json") -> list[str]:
    """The ways the document ``name`` (``index.json``, a companion) breaks its schema."""
    errors = sorted(
        validator(name).iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path]
    )
    problems = [f"{name}: schema: {e.json_path}: {_short(e.message)}" for e in errors]
    if len(problems) > MAX_SCHEMA_ERRORS:
        more = len(problems) - MAX_SCHEMA_ERRORS
        problems = [*problems[:MAX_SCHEMA_ERRORS], f"{name}: schema: ... and {more} more"]
    return problems


def _companion_problems(folder: Path, name: str, schema: bool) -> list[str]:
    """What is wrong with the companion ``name``, if it is there: not a JSON object of the
    branch; else, with ``schema``, what its schema says."""
    problem = companion_problem(folder, name)
    if problem is not None:
        return [_short(problem)]
    if not (folder / name).exists():
        return []
    try:
        data = read_regular(folder / name)
        problems = _schema_problems(json.loads(data), name) if schema else []
        msgspec.json.decode(data, type=_TYPED[name])  # what the readers decode it as
    except msgspec.ValidationError as err:  # a schema may allow it (58.0 for an integer)
        return [*problems, f"{name}: not a {name} as a publish writes it: {_short(str(err))}"]
    except (OSError, ValueError, RecursionError) as err:  # replaced meanwhile: the next pass tells
        return [f"{name}: not readable JSON: {_short(decode_reason(err))}"]
    return problems


#: What each companion is read as (crawler.consume.load).
_TYPED: dict[str, type] = {"changes.json": Changes, "report.json": Report, "history.json": History}


def _list_problem(where: str, field: str, actual: list[str], expected: list[str]) -> str | None:
    """Compare a meta list with the sorted unique values the specs give."""
    if actual == expected:
        return None
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    parts = []
    if missing:
        parts.append(f"lacks {', '.join(missing)}")
    if extra:
        parts.append(f"has {', '.join(extra)} that no spec has")
    if not parts:
        parts.append("is not sorted or has duplicates")
    return f"{where}: meta.{field} {' and '.join(parts)}"


def _package_problems(name: str, package: PackageSummary, readable: set[str]) -> list[str]:
    where = f"index.json: package {name}"
    meta, specs = package.meta, package.spec_details
    problems = []
    if meta.num_specs != len(specs):
        problems.append(
            f"{where}: meta.num_specs is {meta.num_specs} but spec_details has {len(specs)} entries"
        )
    hashes = [s.hash for s in specs]
    if hashes != sorted(hashes):
        problems.append(f"{where}: spec_details are not sorted by hash")
    by_stack: Counter[str] = Counter()
    for spec in specs:
        by_stack.update(spec.stacks)
        if "root" not in spec.stacks:
            problems.append(f"{where}: spec {spec.hash}: stacks lack root")
        if list(spec.stacks) != sorted(set(spec.stacks)):
            problems.append(f"{where}: spec {spec.hash}: stacks are not sorted and unique")
    for label in sorted(set(by_stack) | set(meta.num_specs_by_stack)):
        stated, tallied = meta.num_specs_by_stack.get(label, 0), by_stack[label]
        if stated != tallied:
            problems.append(
                f"{where}: meta.num_specs_by_stack[{label!r}] is {stated} but {tallied} "
                f"spec(s) list that stack"
            )
    for label in sorted(set(by_stack) - readable):
        problems.append(
            f"{where}: stack {label!r} ({by_stack[label]} spec(s)) is not a source read "
            "for this branch"
        )
    expected = {
        "stacks": sorted(by_stack),
        "compilers": sorted({s.compiler for s in specs}),
        "oss": sorted({s.os for s in specs}),
        "platforms": sorted({s.platform for s in specs}),
        "targets": sorted({s.target for s in specs}),
        "versions": sorted({v for s in specs for v in s.versions}),
    }
    for field, values in expected.items():
        problem = _list_problem(where, field, getattr(meta, field), values)
        if problem:
            problems.append(problem)
    return problems


def _count_status(index: Index[PackageSummary], status: str) -> int:
    """How many sources of the index have this status."""
    return sum(s.status == status for s in index.sources)


def _index_problems(index: Index[PackageSummary], folder: str) -> list[str]:
    problems = []
    if index.branch != folder:
        problems.append(f"index.json: branch is {index.branch!r} but the folder is {folder!r}")
    labels = Counter(s.label for s in index.sources)
    for label, count in sorted(labels.items()):
        if count > 1:
            problems.append(f"index.json: source {label!r} is listed {count} times")
    stats = index.stats
    specs = sum(len(p.spec_details) for p in index.packages.values())
    counts: list[tuple[str, int | None, int]] = [
        ("sources", stats.sources, len(index.sources)),
        ("sources_missing", stats.sources_missing, _count_status(index, "missing")),
        ("sources_failed", stats.sources_failed, _count_status(index, "failed")),
        ("packages", stats.packages, len(index.packages)),
        ("specs", stats.specs, specs),
    ]
    for field, stated, actual in counts:
        if stated is not None and stated != actual:
            problems.append(f"index.json: stats.{field} is {stated} but the index has {actual}")
    root = next((s for s in index.sources if s.label == "root"), None)
    filtered = not isinstance(index.filters, UnsetType) and (
        index.filters.packages or index.filters.exclude_packages
    )
    held = root.in_buildcache if root is not None else None
    # The root's specs are all published, unless a filter left packages out.
    if held is not None and (held < specs if filtered else held != specs):
        problems.append(
            f"index.json: source root: in_buildcache is {held:,} but the index "
            f"has {counted(specs, 'spec')}"
        )
    owners: dict[str, list[str]] = defaultdict(list)
    for name, package in index.packages.items():
        for spec in package.spec_details:
            owners[spec.hash].append(name)
    for key, names in sorted(owners.items()):
        if len(names) > 1:
            problems.append(
                f"index.json: hash {key} is the spec of {len(names)} entries "
                f"(packages {', '.join(sorted(names))})"
            )
    readable = {s.label for s in index.sources if s.status == "ok"}
    for name, package in sorted(index.packages.items()):
        problems += _package_problems(name, package, readable)
    return problems


def _links_problems(folder: Path, index: Index[PackageSummary]) -> list[str]:
    """``links.json`` (beside an index of schema 2): the folder's branch's, one entry per spec
    of the index, with hashes for dependencies and locations in the spec's stacks.

    It is read through its typed struct, and these rules say what its schema says: validating
    its tens of MB with ``jsonschema`` would take minutes."""
    path = folder / "links.json"
    if not path.exists():
        return ["links.json: missing (an index.json of schema_version 2 has one beside it)"]
    try:
        links = msgspec.json.decode(read_regular(path), type=Links)
    except (OSError, msgspec.DecodeError, RecursionError) as err:  # ValidationError included
        return [
            f"links.json: not a links.json as a publish writes it: {_short(decode_reason(err))}"
        ]
    problems = []
    if links.branch != folder.name:
        where = f"links.json: branch is {links.branch!r} but the folder is {folder.name!r}"
        problems.append(where)
    stacks = {s.hash: s.stacks for p in index.packages.values() for s in p.spec_details}
    problems += [
        f"links.json: {key} is no spec of the index" for key in links.specs.keys() - stacks
    ]
    problems += [f"links.json: spec {key} has no entry" for key in stacks.keys() - links.specs]
    for key, entry in links.specs.items():
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
    folder: Path, branch: str, names: Iterable[str], packages: dict[str, PackageSummary] | None
) -> list[str]:
    pages = folder / "pages"
    expected = {f"{name}/specs.md": name for name in names}
    found, unlisted = _files_under(pages)
    problems = [
        f"{where}: cannot be listed: {why} (the pages in it are not checked)"
        for where, why in sorted(unlisted.items())
    ]
    for relative in sorted(found | set(expected)):
        if relative not in expected:
            problems.append(f"pages/{relative}: not a page of any package in index.json")
            continue
        if relative not in found:
            if not any(f"pages/{relative}".startswith(f"{where}/") for where in unlisted):
                problems.append(f"pages/{relative}: missing")
            continue
        name = expected[relative]
        if packages is None or name not in packages:
            continue  # index.json could not be read as packages: already reported
        want = render_page(name, branch, packages[name]).encode()
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
    path: Path, *, schema: bool = True, check: Callable[[Path, bool], list[str]] | None = None
) -> list[str]:
    """Every problem of the published branch folder ``path``; empty when it is sound.

    ``schema=False`` skips the (slow) JSON Schema validation; every other check still runs.
    ``check`` is one pass over the folder (default: :func:`verify_once`), for a caller that
    must observe or time it.

    A sync may publish the branch meanwhile, swapping another folder in at ``path``: the files
    read before and after the swap are of two publishes, and would disagree. So when ``path``
    is another folder at the end than at the start, the branch is verified again (up to
    :data:`VERIFY_ATTEMPTS` times in all).
    """
    folder = path.resolve()
    for _ in range(VERIFY_ATTEMPTS):
        before = _folder_identity(folder)
        problems = (check or verify_once)(folder, schema)
        if _folder_identity(folder) == before:
            return problems
    return [*problems, f"{folder}: replaced while it was verified, {VERIFY_ATTEMPTS} times over"]


def _folder_identity(folder: Path) -> tuple[int, int] | None:
    try:
        stat = folder.stat()
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def verify_once(folder: Path, schema: bool) -> list[str]:
    """The problems of one pass over the branch ``folder`` (see :func:`verify_branch`)."""
    index_path = folder / "index.json"
    if not index_path.exists():
        return [f"index.json: missing in {folder}"]
    try:
        # msgspec, as the readers decode it: json.loads takes a byte order mark, they do not.
        document = msgspec.json.decode(read_regular(index_path))
    except (OSError, ValueError, RecursionError) as err:
        return [f"index.json: not readable JSON: {_short(decode_reason(err))}"]
    problems = _schema_problems(document) if schema else []
    index: Index[PackageSummary] | None = None
    try:
        index = msgspec.convert(document, Index[PackageSummary])
    except msgspec.ValidationError as err:
        problems.append(f"index.json: consistency checks skipped: {_short(str(err))}")
    if index is not None:
        problems += _index_problems(index, folder.name)
    pages = folder / "pages"  # a link is no publish's (see _foreign_problems), and not walked
    if pages.is_dir() and not pages.is_symlink():
        raw = document.get("packages") if isinstance(document, dict) else None
        names = list(raw) if isinstance(raw, dict) else []
        branch = index.branch if index is not None else folder.name
        problems += _page_problems(
            folder, branch, names, index.packages if index is not None else None
        )
    if index is not None and index.schema_version >= 2:
        problems += _links_problems(folder, index)
    for name in COMPANIONS:
        problems += _companion_problems(folder, name, schema)
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
