"""Queries over a published ``index.json``: which specs have this name, version, target, os,
platform, compiler, variants, stack, or run on this host.

:class:`Query` checks its criteria when it is made (a malformed version is a
:class:`~crawler.consumer_errors.QueryError`, an unknown host or family an
:class:`~crawler.consumer_errors.UnknownTargetError`, before any index is read); :meth:`Query.run`
gives the specs of an index that meet them all, in the index's order (packages by name, then
specs by hash). :func:`find_specs` does both at once. See ``docs/consumers.md``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple, TypedDict, TypeVar, Unpack

from ..consumer_errors import QueryError
from ..documents import Index, PackageSummary, SpecDetail
from ..targets import Targets, check_family, host_target
from .specsyntax import COMPILER_ALIASES, SpecQuery, VariantTerm, parse_spec, parse_variant
from .versions import parse_versions

if TYPE_CHECKING:
    from archspec.cpu import Microarchitecture

_GLOB = re.compile(r"[*?\[]")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")

SpecTest = Callable[[SpecDetail], bool]
#: What makes a criterion's test, given what a run learns of the index's targets.
_Criterion = Callable[[Targets], SpecTest]
T = TypeVar("T")


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

    - ``spec``: a spec in Spack's syntax (``rs-base@1.1 +shared %gcc@12 target=zen3``), with
      the meaning ``spack find`` gives it (:mod:`crawler.consume.specsyntax`); what it asks
      adds to what the other criteria ask (a name only once);
    - ``name``: the package's name, exact, or a glob (``py-*``);
    - ``version``: ``1.26`` (and the versions it is a prefix of), ``=1.26`` (exactly),
      ``1.2:1.4`` (inclusive; ``1.2:``, ``:1.4``), or several separated by commas, compared as
      Spack compares versions (:mod:`crawler.consume.versions`);
    - ``target``: the target's name, exact (``zen3``), or as ``target=`` takes it in a spec
      (``x86_64_v3:``, a range of targets by archspec);
    - ``family``: the target's family (``x86_64``, ``aarch64``, ``ppc64le``), by archspec;
    - ``runs_on``: a host microarchitecture (``neoverse_v2``; ``host``: this machine): the
      specs whose target is it or one of its ancestors, as Spack decides;
    - ``os``, ``platform``, ``stack``: exact (a spec is in each stack it lists);
    - ``compiler``: its name (``gcc``), or name and version as above (``gcc@13``,
      ``gcc@12:13``); Spack's old and new names of a compiler alike (``clang``, ``llvm``);
    - ``variants``: each as in a spec: ``+mpi``, ``~cuda`` (or ``-cuda``), ``debug=true``
      (``+debug``), ``cuda_arch=80`` (the spec's values include all those given:
      ``cuda_arch=70,80,90`` has ``cuda_arch=80`` and ``cuda_arch=80,90``), ``features:=a,b``
      (exactly those values).
    """

    def __init__(
        self,
        spec: str | None = None,
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
        asked = parse_spec(spec) if spec is not None else SpecQuery("")
        if asked.name is not None and name is not None:
            raise QueryError("name", name, f"the spec names a package already ({asked.name})")
        self.spec = asked
        self.name = name if asked.name in (None, "*") else asked.name
        self.family = None if family is None else check_family(family)
        self.host: Microarchitecture | None = None if runs_on is None else host_target(runs_on)
        given = (variants,) if isinstance(variants, str) else tuple(variants)
        #: Whether a criterion tests the specs' variants (else a reader may leave them out).
        self.asks_variants = bool(given or asked.variants)
        #: Each criterion but the name: what it asks (to say it), and the maker of its test
        #: of a spec (given what the run learns of targets), the cheapest first.
        self.criteria: list[tuple[str, _Criterion]] = [
            *[(f"with hash {h}", _static(_hash_test(h))) for h in _given(asked.hash)],
            *[(f"with target {t}", _target_criterion(t)) for t in _given(target, asked.target)],
            *[(f"with os {v}", _static(_equals("os", v))) for v in _given(os, asked.os)],
            *[
                (f"with platform {v}", _static(_equals("platform", v)))
                for v in _given(platform, asked.platform)
            ],
            *[(f"in stack {stack}", _static(_in_stack(stack))) for stack in _given(stack)],
            *[(f"of family {f}", _family_criterion(f)) for f in _given(self.family)],
            *[(f"running on {h.name}", _host_criterion(h)) for h in _given(self.host)],
            *[
                (f"with compiler {c}", _static(_cached("compiler", compiler_test(c))))
                for c in _given(compiler, *asked.compilers)
            ],
            *[
                (f"with version {v}", _static(_any_version(parse_versions(v))))
                for v in _given(version, asked.version)
            ],
            *[(f"with variant {v}", _static(variant_test(parse_variant(v)))) for v in given],
            *[(f"with variant {t.text}", _static(variant_test(t))) for t in asked.variants],
        ]

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
        return [(asked, make(targets)) for asked, make in self.criteria]


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


def find_specs(
    index: Index[PackageSummary], spec: str | None = None, /, **criteria: Unpack[Criteria]
) -> Found:
    """The specs of ``index`` that meet ``spec``, a spec in Spack's syntax
    (``find_specs(index, "rs-base@1.1 +shared %gcc@12")``), and ``criteria`` (the other
    arguments of :class:`Query`)."""
    return Query(spec, **criteria).run(index)


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


def _given(*values: T | None) -> list[T]:
    return [v for v in values if v is not None]


def _static(test: SpecTest) -> _Criterion:
    return lambda targets: test


def _hash_test(prefix: str) -> SpecTest:
    return lambda spec: spec.hash.startswith(prefix)


def _in_stack(stack: str) -> SpecTest:
    return lambda spec: stack in spec.stacks


def _family_criterion(family: str) -> _Criterion:
    return lambda targets: _cached("target", lambda t: targets.family(t) == family)


def _host_criterion(host: Microarchitecture) -> _Criterion:
    return lambda targets: _cached("target", lambda t: targets.compatible(t, host))


def _target_criterion(query: str) -> _Criterion:
    test = target_test(query)
    return lambda targets: _cached("target", lambda t: test(t, targets))


def target_test(query: str) -> Callable[[str, Targets], bool]:
    """The test of a ``target=`` query on a spec's target: names (``zen3``, exactly, as
    ``spack find`` compares a concrete target) and ranges (``x86_64_v3:``, ``:zen3``,
    ``haswell:zen3``: the targets between, by archspec's order of ancestors), any of several
    separated by commas. A range's bounds must be targets archspec knows; a spec's target it
    does not know is in no range (and noted in ``targets``)."""
    names: set[str] = set()
    ranges: list[tuple[Microarchitecture | None, Microarchitecture | None]] = []
    for part in query.split(","):
        low, colon, high = (p.strip() for p in part.partition(":"))
        if not colon:
            if not low:
                raise QueryError("target", query, "an empty target (write zen3, or x86_64_v3:)")
            names.add(low)
            continue
        if not low and not high:
            raise QueryError("target", query, f"{part!r} gives no bound (x86_64_v3: or :zen3)")
        ranges.append((host_target(low) if low else None, host_target(high) if high else None))

    def test(name: str, targets: Targets) -> bool:
        if name in names:
            return True
        if not ranges:
            return False
        target = targets.target(name)
        return target is not None and any(
            (low is None or low <= target) and (high is None or target <= high)
            for low, high in ranges
        )

    return test


def compiler_test(query: str) -> Callable[[str], bool]:
    """The test of a compiler query (``gcc``, ``gcc@13``) on a spec's ``compiler`` (``gcc@13.2.0``,
    or ``none`` for a spec built without one)."""
    name, at, version = query.partition("@")
    if not _NAME.fullmatch(name):
        raise QueryError("compiler", query, "write a compiler's name, e.g. gcc or gcc@13")
    # Its old and new names in Spack alike (clang and llvm).
    names = {name}.union(*(pair for pair in COMPILER_ALIASES.items() if name in pair))
    if not at:
        return lambda compiler: compiler.partition("@")[0] in names
    test = parse_versions(version)

    def matches(compiler: str) -> bool:
        has, _, its = compiler.partition("@")
        return has in names and bool(its) and test(its)

    return matches


@lru_cache(maxsize=4096)  # an index has a few thousand distinct variants
def _values(variant: str) -> frozenset[str]:
    """The values of a spec's variant as ``spec_details`` write it (``+mpi``: ``true``,
    ``cuda_arch=70,80``: ``70`` and ``80``); ``true`` or ``false`` in any case is a
    boolean, as Spack reads it."""
    if variant[:1] in ("+", "~"):
        return frozenset({"true" if variant[0] == "+" else "false"})
    value = variant.partition("=")[2]
    if value.upper() in ("TRUE", "FALSE"):
        return frozenset({value.lower()})
    return frozenset(value.split(","))


def _holds(values: frozenset[str], value: str, patches: bool) -> bool:
    """Whether a spec's ``values`` hold ``value``. Patches are named by the start of their
    checksum, and ``spec_details`` keep seven characters of each: either may be the
    start of the other."""
    if not patches:
        return value in values
    return any(v.startswith(value) or value.startswith(v) for v in values)


def variant_test(term: VariantTerm) -> SpecTest:
    """The test of a variant asked for on a spec's ``variants``, as Spack's ``satisfies``
    answers it of a concrete spec: the spec has the variant, and its values include those
    asked (all of them, and no others, for an exact one)."""
    name, wanted, exact = term.name, term.values, term.exact
    forms = (f"+{name}", f"~{name}")
    prefix = f"{name}="
    patches = name == "patches"
    quick = next(iter(wanted)) if len(wanted) == 1 else None
    fast = {"true": forms[0], "false": forms[1]}.get(quick or "", f"{prefix}{quick}")

    def matches(spec: SpecDetail) -> bool:
        variants = spec.variants
        if quick is not None and fast in variants:  # the common case, nothing split
            return True
        for variant in variants:
            if variant in forms or variant.startswith(prefix):
                values = _values(variant)
                if exact and len(values) != len(wanted):
                    return False
                return all(_holds(values, v, patches) for v in wanted)
        return False

    return matches
