"""Queries over a published ``index.json``: which specs have this name, version, target, os,
platform, compiler, variants, stack, or run on this host.

:class:`Query` checks its criteria when it is made (a malformed version is a
:class:`~crawler.errors.QueryError`, an unknown host or family an
:class:`~crawler.errors.UnknownTargetError`, before any index is read); :meth:`Query.run`
gives the specs of an index that meet them all, in the index's order (packages by name, then
specs by hash). :func:`find_specs` does both at once. See ``docs/consumers.md``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypedDict, Unpack

from ..documents import Index, PackageSummary, SpecDetail
from ..errors import QueryError
from ..targets import Targets, check_family, host_target
from .versions import parse_versions

if TYPE_CHECKING:
    from archspec.cpu import Microarchitecture

_GLOB = re.compile(r"[*?\[]")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")

SpecTest = Callable[[SpecDetail], bool]


class Match(NamedTuple):
    """A spec that a query found, and the name of its package."""

    name: str
    spec: SpecDetail


@dataclass(frozen=True)
class Found:
    """What a query found: its matches, and the targets of the index archspec does not know
    when the query needed to know them (``family``, ``runs_on``): their specs are not among
    the matches, whatever they are."""

    matches: list[Match]
    unknown_targets: frozenset[str] = frozenset()

    def __iter__(self) -> Iterator[Match]:
        return iter(self.matches)

    def __len__(self) -> int:
        return len(self.matches)


class Query:
    """Criteria that a spec must all meet; each left None (or empty) asks for nothing.

    - ``name``: the package's name, exact, or a glob (``py-*``);
    - ``version``: ``1.26`` (and the versions it is a prefix of), ``=1.26`` (exactly),
      ``1.2:1.4`` (inclusive; ``1.2:``, ``:1.4``), or several separated by commas, compared as
      Spack compares versions (:mod:`crawler.consume.versions`);
    - ``target``: the target's name, exact (``zen3``);
    - ``family``: the target's family (``x86_64``, ``aarch64``, ``ppc64le``), by archspec;
    - ``runs_on``: a host microarchitecture (``neoverse_v2``; ``host``: this machine): the
      specs whose target is it or one of its ancestors, as Spack decides;
    - ``os``, ``platform``, ``stack``: exact (a spec is in each stack it lists);
    - ``compiler``: its name (``gcc``), or name and version as above (``gcc@13``,
      ``gcc@12:13``);
    - ``variants``: each as ``spec_details`` write them: ``+mpi``, ``~cuda`` (or ``-cuda``),
      ``cuda_arch=80`` (the spec's values include all those given: ``cuda_arch=70,80,90``
      has ``cuda_arch=80`` and ``cuda_arch=80,90``).
    """

    def __init__(
        self,
        *,
        name: str | None = None,
        version: str | None = None,
        target: str | None = None,
        family: str | None = None,
        runs_on: str | None = None,
        os: str | None = None,
        platform: str | None = None,
        compiler: str | None = None,
        variants: str | Sequence[str] = (),
        stack: str | None = None,
    ) -> None:
        self.name = name
        self._asked = {"version": version, "compiler": compiler}  # as given, to name them
        self.version = None if version is None else parse_versions(version)
        self.target = target
        self.family = None if family is None else check_family(family)
        self.host: Microarchitecture | None = None if runs_on is None else host_target(runs_on)
        self.os = os
        self.platform = platform
        self.compiler = None if compiler is None else _compiler_test(compiler)
        self._variants = (variants,) if isinstance(variants, str) else tuple(variants)
        self.variants = [_variant_test(v) for v in self._variants]
        self.stack = stack

    def names(self, packages: Mapping[str, PackageSummary]) -> list[str]:
        """The names of the packages that the query's ``name`` asks for."""
        if self.name is None:
            return list(packages)
        if _GLOB.search(self.name):
            return [p for p in packages if fnmatch.fnmatchcase(p, self.name)]
        return [self.name] if self.name in packages else []

    def run(self, index: Index[PackageSummary]) -> Found:
        """The specs of ``index`` that meet every criterion."""
        return self.select(index.packages)

    def select(self, packages: Mapping[str, PackageSummary]) -> Found:
        """The specs of ``packages`` (an index's, or :func:`~.load.load_packages`' which
        decodes only those looked up) that meet every criterion."""
        targets = Targets()
        return Found(list(self.each(packages, targets)), frozenset(targets.unknown))

    def each(self, packages: Mapping[str, PackageSummary], targets: Targets) -> Iterator[Match]:
        """The matches of :meth:`select` one by one, a package looked up at a time (of
        :func:`~.load.load_packages`', only that one is decoded meanwhile); ``targets`` learns
        the unknown ones as they come."""
        test = _all([test for _, test in self._tests(targets)])
        for name in self.names(packages):
            for spec in packages[name].spec_details:
                if test(spec):
                    yield Match(name, spec)

    def narrowing(self, packages: Mapping[str, PackageSummary]) -> list[tuple[int, str]]:
        """How many specs meet the criteria taken in turn, each with what it asks (``named
        py-numpy``, ``running on neoverse_v2``), up to the first that none meets: why
        nothing matched. The name comes first when one is asked for."""
        specs = [spec for name in self.names(packages) for spec in packages[name].spec_details]
        steps = [] if self.name is None else [(len(specs), f"named {self.name}")]
        for asked, test in self._tests(Targets()):
            if not specs:
                break
            specs = [spec for spec in specs if test(spec)]
            steps.append((len(specs), asked))
        return steps

    def _tests(self, targets: Targets) -> list[tuple[str, SpecTest]]:
        """One test a criterion, the cheapest first, each with what it asks."""
        tests: list[tuple[str, SpecTest]] = []
        for field, wanted in (
            ("target", self.target),
            ("os", self.os),
            ("platform", self.platform),
        ):
            if wanted is not None:
                tests.append((f"with {field} {wanted}", _equals(field, wanted)))
        if self.stack is not None:
            stack = self.stack
            tests.append((f"in stack {stack}", lambda spec: stack in spec.stacks))
        if self.family is not None:
            family = self.family
            test = _by_target(lambda t: targets.family(t) == family)
            tests.append((f"of family {family}", test))
        if self.host is not None:
            host = self.host
            test = _by_target(lambda t: targets.compatible(t, host))
            tests.append((f"running on {host.name}", test))
        if self.compiler is not None:
            tests.append(
                (f"with compiler {self._asked['compiler']}", _cached("compiler", self.compiler))
            )
        if self.version is not None:
            tests.append((f"with version {self._asked['version']}", _any_version(self.version)))
        tests += [
            (f"with variant {v}", test)
            for v, test in zip(self._variants, self.variants, strict=True)
        ]
        return tests


class Criteria(TypedDict, total=False):
    """The arguments of :class:`Query`."""

    name: str | None
    version: str | None
    target: str | None
    family: str | None
    runs_on: str | None
    os: str | None
    platform: str | None
    compiler: str | None
    variants: str | Sequence[str]
    stack: str | None


def find_specs(index: Index[PackageSummary], **criteria: Unpack[Criteria]) -> Found:
    """The specs of ``index`` that meet ``criteria`` (the arguments of :class:`Query`)."""
    return Query(**criteria).run(index)


def _all(tests: list[SpecTest]) -> SpecTest:
    """One test of them all, the first first: chained with ``and`` (a generator under
    ``all()`` would cost more than the tests, a spec at a time over tens of thousands)."""
    if not tests:
        return lambda spec: True
    combined = tests[0]
    for test in tests[1:]:
        combined = _both(combined, test)
    return combined


def _both(first: SpecTest, then: SpecTest) -> SpecTest:
    return lambda spec: first(spec) and then(spec)


def _any_version(wanted: Callable[[str], bool]) -> SpecTest:
    return lambda spec: any(wanted(v) for v in spec.versions)


def _equals(field: str, wanted: str) -> SpecTest:
    return lambda spec: getattr(spec, field) == wanted


def _by_target(test: Callable[[str], bool]) -> SpecTest:
    """A test of a spec's target, answered once per target name."""
    return _cached("target", test)


def _cached(field: str, test: Callable[[str], bool]) -> SpecTest:
    """A test of one string field, answered once per distinct value (an index has a dozen
    targets and a few compilers for tens of thousands of specs)."""
    answers: dict[str, bool] = {}

    def cached(spec: SpecDetail) -> bool:
        value: str = getattr(spec, field)
        answer = answers.get(value)
        if answer is None:
            answer = answers[value] = test(value)
        return answer

    return cached


def _compiler_test(query: str) -> Callable[[str], bool]:
    """The test of a compiler query (``gcc``, ``gcc@13``) on a spec's ``compiler`` (``gcc@13.2.0``,
    or ``none`` for a spec built without one)."""
    name, at, version = query.partition("@")
    if not _NAME.fullmatch(name):
        raise QueryError("compiler", query, "write a compiler's name, e.g. gcc or gcc@13")
    if not at:
        return lambda compiler: compiler.partition("@")[0] == name
    test = parse_versions(version)

    def matches(compiler: str) -> bool:
        has, _, its = compiler.partition("@")
        return has == name and bool(its) and test(its)

    return matches


def _variant_test(query: str) -> SpecTest:
    """The test of a variant query on a spec's ``variants``."""
    text = query.strip()
    if text[:1] in ("+", "~", "-") and _NAME.fullmatch(text[1:]):
        wanted = ("~" if text[0] == "-" else text[0]) + text[1:]
        return lambda spec: wanted in spec.variants
    name, eq, value = text.partition("=")
    values = frozenset(v for v in value.split(",") if v)
    if not eq or not _NAME.fullmatch(name) or not values:
        raise QueryError(
            "variant", query, "write +name, ~name or name=value (e.g. +mpi, ~cuda, cuda_arch=80)"
        )
    exact, prefix = f"{name}={value}", f"{name}="

    def matches(spec: SpecDetail) -> bool:
        if exact in spec.variants:  # the common case, without splitting anything
            return True
        for variant in spec.variants:
            if variant.startswith(prefix):
                return values <= frozenset(variant[len(prefix) :].split(","))
        return False

    return matches
