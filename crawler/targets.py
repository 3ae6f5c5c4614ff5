"""Targets (microarchitectures) as Spack knows them, through archspec, Spack's own library.

A binary built for target ``T`` runs on a host of microarchitecture ``H`` when ``T`` is ``H``
or one of its ancestors (``x86_64_v3`` runs on ``zen3``; ``neoverse_v1`` does not run on
``m1``): archspec's ``T <= H``, as Spack decides which binaries a host can use. A target's
family is its generic architecture, the root of its ancestors (``x86_64``, ``aarch64``,
``ppc64le``).

archspec is imported when first needed, so queries that use no target pay nothing for it. An
index may hold a target this archspec does not know (a newer archspec may): such a target has
no family and runs on no host here, and is reported (:attr:`Targets.unknown`), never an error.

Used by a sync (each spec's ``family`` in ``index.json``) and by queries of a published index.
"""

from __future__ import annotations

import difflib
from functools import cache
from typing import TYPE_CHECKING

from .consumer_errors import UnknownTargetError

if TYPE_CHECKING:
    from archspec.cpu import Microarchitecture

#: What ``--runs-on`` takes to mean the machine it runs on.
THIS_HOST = "host"


@cache
def _targets() -> dict[str, Microarchitecture]:
    from archspec.cpu import TARGETS  # about 40 ms: its JSON is read on first use

    return dict(TARGETS)


def archspec_version() -> str:
    """The version of archspec in use (a newer one knows more targets)."""
    import archspec

    return str(archspec.__version__)


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=3)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def host_target(name: str) -> Microarchitecture:
    """The microarchitecture named ``name`` (``host``: this machine's), or an
    :class:`UnknownTargetError`."""
    if name == THIS_HOST:
        from archspec.cpu import host

        return host()
    known = _targets()
    if name not in known:
        hint = (
            f"archspec {archspec_version()} knows no such microarchitecture"
            f"{_suggest(name, sorted(known))}; `host` means this machine"
        )
        raise UnknownTargetError("host", name, hint)
    return known[name]


def families() -> list[str]:
    """The names of the target families archspec knows (``aarch64``, ``x86_64``, ...)."""
    return sorted(name for name, target in _targets().items() if target.family == target)


def check_family(name: str) -> str:
    """``name`` if it is a family archspec knows, else an :class:`UnknownTargetError`."""
    known = _targets()
    if name in known and known[name].family == known[name]:
        return name
    if name in known:
        hint = f"{name} is a target of family {known[name].family.name}, not a family"
    else:
        hint = f"the families are {', '.join(families())}{_suggest(name, families())}"
    raise UnknownTargetError("family", name, hint)


class Targets:
    """What a query asks of the targets of an index: answers cached by target name (an index
    of 60,000 specs has a dozen targets), and the names archspec does not know."""

    def __init__(self) -> None:
        self.unknown: set[str] = set()
        self._family: dict[str, str | None] = {}

    def target(self, name: str) -> Microarchitecture | None:
        """The microarchitecture of an index's target; None (and noted) if unknown."""
        found = _targets().get(name)
        if found is None:
            self.unknown.add(name)
        return found

    def family(self, name: str) -> str | None:
        """The family of an index's target (``x86_64`` for ``zen3``); None if unknown."""
        if name not in self._family:
            target = self.target(name)
            self._family[name] = None if target is None else target.family.name
        return self._family[name]

    def compatible(self, name: str, host: Microarchitecture) -> bool:
        """Whether a binary built for the index's target ``name`` runs on ``host``."""
        target = self.target(name)
        return target is not None and target <= host
