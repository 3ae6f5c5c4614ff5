"""Spack's spec syntax, as a query of a published index: ``rs-base@1.1 +shared %gcc@12``.

:func:`parse_spec` reads one spec as Spack's parser does (``spack/spec_parser.py``) and gives
a :class:`SpecQuery`: what :class:`~crawler.consume.query.Query` then asks of each spec, with
the meaning ``spack find`` gives it (``Spec.satisfies`` of a concrete spec). What each part
matches, and what the index cannot answer (an error naming the token, never a silent
"nothing"), is in docs/consumers.md, "Spack's spec syntax".
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..consumer_errors import QueryError, SpecSyntaxError
from .versions import parse_versions

_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.\-]*"
_VALUE = r"(?:[A-Za-z0-9_\-+*.,:=%^~/\\]+|'[^']*'|\"[^\"]*\")"
_VERSION_PART = r"[=A-Za-z0-9_.:\-]+"

#: The tokens, tried in this order at each place (as Spack's tokenizer does: the first that
#: matches wins, so ``a=b`` is a key-value pair before it could be a name).
_TOKENS = re.compile(
    "|".join(
        (
            r"(?P<ws>\s+)",
            r"(?P<edge>[%^]\s*\[|\^|%%)",
            rf"(?P<compiler>%\s*(?:(?P<virtuals>{_NAME}(?:,{_NAME})*)=)?)",
            rf"(?P<version>@\s*(?P<versions>{_VERSION_PART}(?:\s*,\s*{_VERSION_PART})*))",
            rf"(?P<propagated>(?:\+\+|~~|--)\s*{_NAME}|{_NAME}:?=={_VALUE})",
            rf"(?P<bool>[+~-]\s*(?P<bool_name>{_NAME}))",
            rf"(?P<pair>(?P<key>{_NAME})(?P<exact>:?)=(?P<value>{_VALUE}))",
            rf"(?P<empty>{_NAME}:?=)",
            r"(?P<hash>/[A-Za-z0-9_]*)",
            r"(?P<name>[A-Za-z0-9_*?\[][A-Za-z0-9_.*?\[\]!\-]*)",
            r"(?P<other>.)",
        )
    ),
    re.S,
)

#: Compiler flags: Spack's node attributes that the index does not keep.
_FLAGS = frozenset({"cflags", "cxxflags", "fflags", "cppflags", "ldflags", "ldlibs"})
#: The virtuals whose provider is a spec's compiler (as the index takes its compiler).
_COMPILER_VIRTUALS = frozenset({"c", "cxx", "fortran"})
#: Compilers as Spack before 1.0 named them, and the packages Spack 1.x names them by.
COMPILER_ALIASES = {
    "clang": "llvm",
    "oneapi": "intel-oneapi-compilers",
    "rocmcc": "llvm-amdgpu",
    "intel": "intel-oneapi-compiler-classic",
    "arm": "acfl",
}
_ARCH_KEYS = ("platform", "os", "target")


@dataclass(frozen=True)
class VariantTerm:
    """One variant asked for: ``name`` with ``values`` (distinct; empty for ``name=*``,
    which asks only that the spec has it); ``exact`` when the spec's values must be those
    and no others (``name:=a,b``, and a boolean); ``text`` as written."""

    name: str
    values: frozenset[str]
    exact: bool
    text: str


@dataclass(frozen=True)
class SpecQuery:
    """What one spec in Spack's syntax asks (see docs/consumers.md); None or empty for
    what it leaves unasked. ``version`` and each of ``compilers`` are in the syntax of
    :func:`~crawler.consume.versions.parse_versions` and of ``Query(compiler=...)``."""

    text: str
    name: str | None = None
    version: str | None = None
    compilers: tuple[str, ...] = ()
    variants: tuple[VariantTerm, ...] = ()
    platform: str | None = None
    os: str | None = None
    target: str | None = None
    hash: str | None = None


@dataclass
class _Token:
    kind: str
    match: re.Match[str]

    @property
    def text(self) -> str:
        return self.match[0]


@dataclass
class _Parts:
    """A spec as it is read, token after token."""

    text: str
    fields: dict[str, str] = field(default_factory=dict)
    compilers: list[str] = field(default_factory=list)
    variants: dict[str, VariantTerm] = field(default_factory=dict)
    in_compiler: bool = False  # after a %compiler: what follows is its node's
    has_options: bool = False  # after a node option: a name there starts another spec


def _tokens(text: str) -> Iterator[_Token]:
    for match in _TOKENS.finditer(text):
        kind = match.lastgroup
        assert kind is not None
        if kind != "ws":
            yield _Token(kind, match)


def parse_spec(text: str) -> SpecQuery:
    """The query of one spec in Spack's syntax; a :class:`SpecSyntaxError` pointing at the
    token for one that is malformed, or that asks what the index cannot answer."""
    parts = _Parts(text)
    tokens = list(_tokens(text))
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.kind == "compiler":
            i += _compiler(parts, token, tokens[i + 1 : i + 3])
        else:
            _node_option(parts, token)
        i += 1
    fields = parts.fields
    return SpecQuery(
        text=text,
        name=fields.get("name"),
        version=fields.get("version"),
        compilers=tuple(parts.compilers),
        variants=tuple(parts.variants.values()),
        platform=fields.get("platform"),
        os=fields.get("os"),
        target=fields.get("target"),
        hash=fields.get("hash"),
    )


def _fail(parts: _Parts, token: _Token, reason: str) -> SpecSyntaxError:
    return SpecSyntaxError(parts.text, token.match.start(), token.match.end(), reason)


def _compiler(parts: _Parts, token: _Token, following: list[_Token]) -> int:
    """``%name[@versions]``, or ``%c=name[@versions]``: one compiler asked for; how many of
    the ``following`` tokens it took."""
    virtuals = set(token.match["virtuals"].split(",")) if token.match["virtuals"] else set()
    if not virtuals <= _COMPILER_VIRTUALS:
        raise _fail(
            parts,
            token,
            "the index knows a spec's compiler (what provides c, cxx or "
            "fortran), not its other dependencies",
        )
    if virtuals - {"c"}:  # the index keeps one: c's provider, else cxx's, else fortran's
        raise _fail(parts, token, _ONE_COMPILER + ": ask %c=name or %name")
    if parts.compilers:
        raise _fail(parts, token, _ONE_COMPILER + ": give one %compiler")
    if not following or following[0].kind != "name":
        raise _fail(parts, token, "% is followed by a compiler's name: %gcc, %gcc@12")
    name = following[0].text
    if "." in name or not re.fullmatch(r"[A-Za-z0-9_*?\[\]!\-]+", name):
        raise _fail(parts, following[0], f"{name!r} is not a compiler's name")
    asked, taken = name, following[:1]
    if len(following) > 1 and following[1].kind == "version":
        asked += "@" + following[1].match["versions"]
        taken = following[:2]
    from .query import compiler_test

    try:
        compiler_test(asked)  # checked here, to point at it
    except QueryError as err:
        raise _fail(parts, taken[-1], err.reason) from None
    parts.compilers.append(asked)
    parts.in_compiler = True
    return len(taken)


_ONE_COMPILER = (
    "the index keeps one compiler per spec, the provider of its c (else of cxx, else of "
    "fortran), not one per language"
)


def _node_option(parts: _Parts, token: _Token) -> None:
    """One token of the spec's own node: its name, version, a variant, an arch key, a hash."""
    kind = token.kind
    if (parts.in_compiler or parts.has_options) and kind == "name":  # Spack: [name] [options]
        raise _fail(parts, token, "a second spec: give one spec at a time")
    parts.has_options = kind != "name"
    if parts.in_compiler and kind in ("bool", "pair", "hash", "version"):
        compiler = parts.compilers[-1]
        raise _fail(
            parts,
            token,
            f"in Spack 1.x, {token.text} after %{compiler} describes the compiler, and the "
            f"index knows only its name and version: write it before %{compiler}",
        )
    if kind == "name":
        _once(parts, token, "name", token.text, "a second name: give one spec at a time")
        if "." in token.text:
            raise _fail(parts, token, "the index has no namespaces: give the package's name")
    elif kind == "version":
        versions = token.match["versions"].strip()
        if versions == ":":  # any version, as in Spack
            return
        try:
            parse_versions(versions)
        except QueryError as err:
            raise _fail(parts, token, err.reason) from None
        _once(parts, token, "version", versions, "a spec has one version (write a list: @1.2,1.4)")
    elif kind == "bool":
        name = token.match["bool_name"]
        _variant(parts, token, VariantTerm(name, _bool(token.text[0] == "+"), True, token.text))
    elif kind == "pair":
        _pair(parts, token)
    elif kind == "hash":
        if len(token.text) < 2:
            raise _fail(parts, token, "/ is followed by a hash, or the start of one")
        _once(parts, token, "hash", token.text[1:].lower(), "a spec has one hash")
    elif token.text == "@":
        raise _fail(parts, token, "@ is followed by a version: @1.2, @1.2:1.4, @=1.2")
    else:
        raise _fail(parts, token, _UNANSWERED.get(kind, "unexpected here"))


_UNANSWERED = {
    "edge": "dependencies (^, %%, edge attributes) are not in the index: it knows a spec's "
    "compiler (%gcc), not what its dependencies are",
    "empty": "a value follows = (name=* for any value)",
    "propagated": "propagation (++v, ~~v, --v, v==x) asks about dependencies, which the index "
    "does not describe: write +v, ~v or v=x",
}


def _once(parts: _Parts, token: _Token, key: str, value: str, reason: str) -> None:
    if key in parts.fields:
        raise _fail(parts, token, reason)
    parts.fields[key] = value


def _bool(value: bool) -> frozenset[str]:
    return frozenset({"true" if value else "false"})


def _pair(parts: _Parts, token: _Token) -> None:
    """``key=value``: an arch key, or a variant."""
    key, exact = token.match["key"], bool(token.match["exact"])
    value = token.match["value"]
    if value[:1] in ("'", '"'):
        value = value[1:-1]
    if key in _FLAGS:
        raise _fail(parts, token, "compiler flags are not in the index")
    if key == "namespace":
        raise _fail(parts, token, "the index has no namespaces")
    if key in ("arch", "architecture"):
        fields = value.split("-")
        if len(fields) != 3:
            raise _fail(parts, token, "arch= is platform-os-target: linux-ubuntu24.04-zen3")
        for name, part in zip(_ARCH_KEYS, fields, strict=True):
            if part and part != "None":
                _arch(parts, token, name, part)
        return
    if key in _ARCH_KEYS:
        _arch(parts, token, key, value)
        return
    _variant(parts, token, _variant_term(key, value, exact, token.text))


def _arch(parts: _Parts, token: _Token, key: str, value: str) -> None:
    if not value:
        raise _fail(parts, token, f"{key}= is followed by a value")
    if key == "target":
        from .query import target_test

        try:
            target_test(value)
        except QueryError as err:
            raise _fail(parts, token, err.reason) from None
    _once(parts, token, key, value, f"a spec has one {key}")


def _variant_term(name: str, value: str, exact: bool, text: str) -> VariantTerm:
    """A variant as Spack reads ``name=value``: ``true`` or ``false`` (any case) a boolean,
    ``*`` any value, else its values separated by commas."""
    if value.upper() in ("TRUE", "FALSE"):
        return VariantTerm(name, _bool(value.upper() == "TRUE"), True, text)
    if value == "*":
        return VariantTerm(name, frozenset(), False, text)
    return VariantTerm(name, frozenset(v for v in value.split(",") if v), exact, text)


def _variant(parts: _Parts, token: _Token, term: VariantTerm) -> None:
    if term.name in parts.variants:
        raise _fail(parts, token, f"variant {term.name!r} is given twice")
    if not term.values and term.exact:
        raise _fail(parts, token, f"{term.name}:= is followed by its values")
    parts.variants[term.name] = term


def parse_variant(text: str) -> VariantTerm:
    """One variant in the syntax of a spec (``+mpi``, ``~cuda``, ``-cuda``, ``debug=true``,
    ``cuda_arch=80``, ``features:=a,b``), as ``--variant`` takes it; a
    :class:`QueryError` naming it for anything else."""
    try:
        query = parse_spec(text.strip())
    except SpecSyntaxError as err:
        raise QueryError("variant", text, _VARIANT_HINT) from err
    if len(query.variants) != 1 or query != SpecQuery(query.text, variants=query.variants):
        raise QueryError("variant", text, _VARIANT_HINT)
    return query.variants[0]


_VARIANT_HINT = "write +name, ~name, name=value or name:=a,b (e.g. +mpi, ~cuda, cuda_arch=80)"
