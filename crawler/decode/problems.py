"""Problems: why a root record's dependencies, compiler or variants cannot be published, in
the words a report gives (the checks of :mod:`.shard`, which finds them)."""

from __future__ import annotations

from .records import Dependency, ParamValue, PlainValue
from .validate import (
    HASH,
    MAX_COMPILER,
    MAX_VARIANT,
    MAX_VARIANTS,
    MAX_VIRTUAL,
    MAX_VIRTUALS,
    SHOWN_KEY,
    render_variant,
    shorten,
    too_large,
    unprintable,
)


def too_many_parameters(parameters: dict[str, PlainValue] | dict[str, ParamValue]) -> str:
    return f"parameters is {len(parameters):,} entries, more than the limit of {MAX_VARIANTS:,}"


def virtuals_problem(dependencies: list[Dependency]) -> str | None:
    """Why the virtuals the edges provide cannot be published (too many, too long, not
    printable), or None."""
    virtuals = [v for dep in dependencies if dep.parameters for v in dep.parameters.virtuals]
    if not virtuals:
        return None
    if len(virtuals) > MAX_VIRTUALS:
        return too_large("virtuals", len(virtuals), MAX_VIRTUALS, "entries")
    longest = max(virtuals, key=len)
    if len(longest) > MAX_VIRTUAL:
        return too_large(f"virtual {shorten(longest, SHOWN_KEY)!r}", len(longest), MAX_VIRTUAL)
    if not "".join(virtuals).isprintable():
        return next(filter(None, (unprintable("virtual", v) for v in virtuals)))
    return None


def compiler_problem(compiler: str | Dependency) -> str | None:
    """Why a compiler (or the name of the edge that gives it) cannot be shown, or None: too
    long, without a name (an annotation ``@13``), or with control characters, refused as in
    a name or version (pages and the site show it, ``crawler find`` prints it)."""
    if isinstance(compiler, Dependency):
        return too_large("the compiler dependency's name", len(compiler.name), MAX_COMPILER)
    if len(compiler) > MAX_COMPILER:
        return too_large("compiler", len(compiler), MAX_COMPILER)
    if compiler[:1] in ("", "@"):
        return f"compiler {compiler!r} has no name"
    return unprintable("compiler", compiler)


def bad_edge(dependencies: list[Dependency]) -> str:
    for dep in dependencies:
        if not HASH.fullmatch(dep.hash):
            name = shorten(dep.name, 64)
            return f"dependency {name!r} has a hash that is not a 32-character base32 DAG hash"
    raise AssertionError("no bad edge")  # pragma: no cover


def variant_problem(name: str, value: ParamValue | PlainValue) -> str:
    """Why a variant is refused (see :mod:`.shard`): too long, or not printable."""
    text = render_variant(name, value)
    if len(text) <= MAX_VARIANT:
        reason = unprintable("variant", text)
        assert reason is not None  # refused, and not for its length
        return reason
    limit = f"more than the limit of {MAX_VARIANT:,}"
    return f"variant {shorten(name, 64)!r} is {len(text):,} characters, {limit}"
