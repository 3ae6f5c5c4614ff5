"""Verify's checks of ``index.json`` (steps 2 and 3 of :mod:`.verify`), a package at a time.

The document is mapped, its top level decoded with each package left as its bytes; then each
package in turn is validated against its part of the schema, decoded, checked and dropped.
What the checks across packages need is kept of each spec as they go by: its hash and its
stacks (one tuple for each distinct set). So verify holds one package, a few MB of the mapped
file, and those two per spec, never the document's tree (``docs/consumers.md``, Memory).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jsonschema_rs
import msgspec
from msgspec import UnsetType

from ..consume.load import Buffer, Pass
from ..documents import Index, PackageSummary
from ..files import release
from ..output.published import branch_problem
from ..text import counted
from .schemas import Steps, json_path, part_validator, schema_problems, validator

MAX_SCHEMA_ERRORS = 20
_MAX_MESSAGE = 200
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_PACKAGE = msgspec.json.Decoder(PackageSummary)

#: What verify tells as it goes: what it checks (``index.json: package``), how many of how
#: many it has checked.
Progress = Callable[[str, int, int], None]


class Expected(NamedTuple):
    """The branch every document of a branch folder must name (``name``), and whose name
    that is, as a problem says it (``said``: ``the folder is``)."""

    name: str
    said: str = "the folder is"


def short(text: str) -> str:
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


class SchemaErrors:
    """The schema errors of a document, found a part at a time: the first
    :data:`MAX_SCHEMA_ERRORS` by path, and how many there are."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.count = 0
        self._kept: list[tuple[list[str], int, str]] = []

    def add(self, check: jsonschema_rs.Validator, instance: object, at: Sequence[str] = ()) -> None:
        """The errors ``check`` finds in ``instance``, the part at the path ``at``."""
        for steps, message in schema_problems(check, instance):
            where: Steps = [*at, *steps]
            self._kept.append(
                ([str(s) for s in where], self.count, f"{json_path(where)}: {short(message)}")
            )
            self.count += 1
        if len(self._kept) > 4 * MAX_SCHEMA_ERRORS:
            self._kept = sorted(self._kept)[:MAX_SCHEMA_ERRORS]

    def problems(self) -> list[str]:
        """The problems, sorted by path, the count of those left out last."""
        shown = [f"{self.name}: schema: {m}" for _, _, m in sorted(self._kept)[:MAX_SCHEMA_ERRORS]]
        if self.count > MAX_SCHEMA_ERRORS:
            more = self.count - MAX_SCHEMA_ERRORS
            shown.append(f"{self.name}: schema: ... and {more} more")
        return shown


class Tally:
    """What the checks across packages keep of each spec (see the module's docstring)."""

    def __init__(self) -> None:
        self.stacks: dict[str, tuple[str, ...]] = {}
        self.twice: set[str] = set()
        self.specs = 0
        self.whole = True  # every package decoded: the counts are the index's
        self._shared: dict[tuple[str, ...], tuple[str, ...]] = {}

    def add(self, package: PackageSummary) -> None:
        for spec in package.spec_details:
            self.specs += 1
            if spec.hash in self.stacks:
                self.twice.add(spec.hash)
            self.stacks[spec.hash] = self._shared.setdefault(spec.stacks, spec.stacks)


class IndexCheck:
    """The checks of one mapped ``index.json`` (``data``) of a branch folder whose documents
    must name the branch ``expected`` (``progress`` told of each package checked):
    :meth:`run` gives its problems; then :attr:`index` is its top level (None when
    too broken for the consistency checks), :attr:`names` its packages' names, :attr:`tally`
    what its specs are, and :meth:`package` decodes one package again (for its page)."""

    def __init__(self, data: Buffer, expected: Expected, schema: bool, progress: Progress) -> None:
        self.data = data
        self.expected = expected
        self.schema = schema
        self.progress = progress
        self.index: Index[msgspec.Raw] | None = None
        self.raw: dict[str, msgspec.Raw] = {}
        self.names: list[str] = []
        self.tally = Tally()
        self.broken: set[str] = set()
        self._reading = Pass(data)

    def run(self) -> list[str]:
        """The problems of the index: schema, then consistency (raises ``ValueError`` or
        ``RecursionError`` for what is not JSON, as msgspec finds it)."""
        errors = SchemaErrors("index.json")
        try:
            top = _TOP.decode(self.data)
        except msgspec.ValidationError as err:  # JSON, but no object: the schema says what
            if self.schema:
                errors.add(validator("index.json"), msgspec.json.decode(self.data))
            return [*errors.problems(), f"index.json: consistency checks skipped: {err}"]
        skeleton: dict[str, Any] = {
            k: msgspec.json.decode(v) for k, v in top.items() if k != "packages"
        }
        if "packages" in top:
            try:
                self.raw = _TOP.decode(top["packages"])
                skeleton["packages"] = {}
            except msgspec.ValidationError:  # not an object: decoded, for the schema to say
                skeleton["packages"] = msgspec.json.decode(top["packages"])
        self.names = list(self.raw)
        release(self.data)
        if self.schema:
            errors.add(validator("index.json"), skeleton)
        skipped = []
        try:
            self.index = msgspec.json.decode(self.data, type=Index[msgspec.Raw])
        except msgspec.ValidationError as err:
            skipped = [f"index.json: consistency checks skipped: {short(str(err))}"]
        release(self.data)
        packages = self._packages(errors)
        head = self._top_problems() if self.index is not None else []
        return [*errors.problems(), *skipped, *head, *packages]

    def _packages(self, errors: SchemaErrors) -> list[str]:
        """Each package's problems, by name; its schema errors into ``errors``."""
        problems: list[str] = []
        sources = self.index.sources if self.index is not None else []
        readable = {s.label for s in sources if s.status == "ok"}
        check = part_validator("index.json", "/properties/packages") if self.schema else None
        for done, name in enumerate(sorted(self.raw), 1):
            self.progress("index.json: package", done, len(self.raw))
            raw = self._reading.read(self.raw[name])
            if check is not None:
                errors.add(check, {name: msgspec.json.decode(raw)}, ["packages"])
            if self.index is None:
                continue
            try:
                package = _PACKAGE.decode(raw)
            except msgspec.DecodeError as err:  # ValidationError included
                self.broken.add(name)
                self.tally.whole = False
                where = f"index.json: package {name}"
                problems.append(f"{where}: not as a publish writes it: {short(str(err))}")
                continue
            self.tally.add(package)
            problems += package_problems(name, package, readable)
        release(self.data)
        return problems

    def package(self, name: str) -> PackageSummary | None:
        """Package ``name`` decoded again, None if it is none or does not decode."""
        if self.index is None or name in self.broken or name not in self.raw:
            return None
        return _PACKAGE.decode(self._reading.read(self.raw[name]))

    def _top_problems(self) -> list[str]:
        index, tally = self.index, self.tally
        assert index is not None
        other = branch_problem("index.json", index.branch, *self.expected)
        problems = [] if other is None else [other]
        labels = Counter(s.label for s in index.sources)
        for label, count in sorted(labels.items()):
            if count > 1:
                problems.append(f"index.json: source {label!r} is listed {count} times")
        stats = index.stats
        specs = tally.specs if tally.whole else None
        counts: list[tuple[str, int | None, int | None]] = [
            ("sources", stats.sources, len(index.sources)),
            ("sources_missing", stats.sources_missing, _count_status(index, "missing")),
            ("sources_failed", stats.sources_failed, _count_status(index, "failed")),
            ("packages", stats.packages, len(index.packages)),
            ("specs", stats.specs, specs),
        ]
        for field, stated, actual in counts:
            if stated is not None and actual is not None and stated != actual:
                problems.append(f"index.json: stats.{field} is {stated} but the index has {actual}")
        root = next((s for s in index.sources if s.label == "root"), None)
        filtered = not isinstance(index.filters, UnsetType) and (
            index.filters.packages or index.filters.exclude_packages
        )
        held = root.in_buildcache if root is not None else None
        # The root's specs are all published, unless a filter left packages out.
        if held is not None and specs is not None and (held < specs if filtered else held != specs):
            problems.append(
                f"index.json: source root: in_buildcache is {held:,} but the index "
                f"has {counted(specs, 'spec')}"
            )
        return problems + self._twice()

    def _twice(self) -> list[str]:
        """A hash that is the spec of two entries: its packages, found by a second pass over
        the packages that has only those hashes to look for (an index has none)."""
        if not self.tally.twice:
            return []
        owners: dict[str, list[str]] = {key: [] for key in self.tally.twice}
        for name in self.raw:
            package = self.package(name)
            for spec in package.spec_details if package is not None else ():
                if spec.hash in owners:
                    owners[spec.hash].append(name)
        return [
            f"index.json: hash {key} is the spec of {len(names)} entries "
            f"(packages {', '.join(sorted(names))})"
            for key, names in sorted(owners.items())
        ]


def _count_status(index: Index[Any], status: str) -> int:
    return sum(s.status == status for s in index.sources)


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


def package_problems(name: str, package: PackageSummary, readable: set[str]) -> list[str]:
    """What is inconsistent in one package: its ``meta`` against its specs, their order."""
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
