"""Plan: what a run does with a branch before reading any of its sources.

The last publish's state, the formats to write (those asked for, and those the branch was
published in unless ``prune_formats`` says otherwise), and whether an immutable ref already
published is skipped, or synced again because its output is damaged, it was published
without some stacks, or stacks missing then are back. A branch published from another mirror
than the run's is warned of (:func:`other_mirror`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from ..config import Config, normal_formats
from ..errors import BranchError
from ..files import map_regular
from ..mirror.discovery import Discovery, Mirror, Source
from ..mirror.fetch import Fetcher
from ..output.published import PublishedBranch
from ..output.state import BranchState, Store
from ..urls import redacted

log = logging.getLogger(__name__)

#: Seconds a look for a stack missing at an immutable ref's publish may take (see
#: :meth:`Planner.missing_back`).
PROBE_SECONDS = 10.0


@dataclass(frozen=True)
class BranchPlan:
    """What to do with one branch, decided from its published folder and state."""

    #: The sources the mirror lists now: the root, and the stacks the filters keep.
    sources: list[Source]
    #: The state this version saved at the branch's last publish (None: none, or another
    #: version's, which the inputs cannot be compared with).
    previous: BranchState | None
    #: What the last publish wrote, whichever version did (after an upgrade too).
    record: BranchState | None
    #: The formats to write.
    formats: list[str]
    #: Stacks that may fail beyond ``publish.max_failed_stacks``: those the output was
    #: published without (it may not fail more than it did).
    excused: frozenset[str] = frozenset()
    #: True for an immutable ref already published, as published: nothing to do.
    skip: bool = False


class Planner:
    """Plans the branches of one run (one mirror, one config, one output folder)."""

    def __init__(self, config: Config, output: Path, store: Store, *, force: bool) -> None:
        self.config = config
        self.output = output
        self.store = store
        self.force = force
        self.mirror = Mirror.parse(config.mirror).base  # as index.json names it
        self._probing = True  # see missing_back

    async def plan(self, branch: str, fetcher: Fetcher, discovery: Discovery) -> BranchPlan:
        """The plan for ``branch`` as ``discovery`` lists it."""
        if branch in discovery.problems:  # asked for by name (--all skips it, see Syncer.run)
            raise BranchError(branch, discovery.problems[branch])
        filters = self.config.filters
        sources = [s for s in discovery.refs[branch] if s.is_root or filters.keeps_stack(s.label)]
        immutable = discovery.is_immutable(branch, self.config)  # held still once published
        switched = other_mirror(self.output / branch, self.mirror)
        if switched is not None:
            log.warning("%s: %s", branch, switched)
        previous = self.store.branch(branch)
        record = previous or self.store.branch(branch, any_version=True)
        asked: list[str] = list(self.config.formats)  # normalised by the config
        if record is not None:  # published in: as its state says, else (.crawler/ deleted) as seen
            was = list(record.formats)
        else:
            published = PublishedBranch(self.output, branch)
            was = ["pages"] * published.has_pages() + ["html"] * published.has_site()
        # A branch keeps the formats it was published in (a manual run without the pages
        # must not remove a site's pages): only prune_formats drops them, and never for an
        # immutable ref, which stays put.
        kept = normal_formats([*asked, *was])
        if not immutable and self.config.prune_formats:
            if kept != asked:
                log.info("%s: removing %s, as prune_formats asks", branch, _others(kept, asked))
            kept = asked
        elif kept != asked and not immutable:
            log.info(
                "%s: writing %s too, as published before (prune_formats drops them)",
                branch,
                _others(kept, asked),
            )
        plan = BranchPlan(sources, previous, record, kept)
        if not immutable or not (self.output / branch / "index.json").is_file():
            return plan
        return await self._published_immutable(branch, fetcher, plan)

    async def _published_immutable(
        self, branch: str, fetcher: Fetcher, plan: BranchPlan
    ) -> BranchPlan:
        """The plan for an immutable ref with a published ``index.json``."""
        published = PublishedBranch(self.output, branch)
        without = published.published_without(plan.previous)
        asked: list[str] = list(self.config.formats)
        record = plan.record
        damaged = not (
            published.intact(record, asked, exact=False)
            if record is not None
            else published.whole(asked)
        )
        if damaged:
            log.info("%s: immutable, but its output is not as published: syncing it", branch)
        if without is not None:  # with --force too: it may not fail more than it did
            log.info("%s: immutable, but published without some stacks: syncing it", branch)
            return replace(plan, excused=without)
        if damaged or self.force:
            return plan
        back = await self.missing_back(fetcher, plan.sources, record)
        if not back:
            return replace(plan, skip=True)
        log.info(
            "%s: immutable, but the mirror now has %s, missing when it was published: syncing it",
            branch,
            ", ".join(back),
        )
        return replace(plan, excused=frozenset(back))  # failing now leaves it partial at worst

    async def missing_back(
        self, fetcher: Fetcher, sources: Sequence[Source], published: BranchState | None
    ) -> list[str]:
        """The labels of the stacks that were missing (404) when an immutable ref was published
        and that the mirror now has (a ``HEAD`` answers 200; a local file is there).

        One request per such stack, at once, each given :data:`PROBE_SECONDS`, not retried.
        An answer that proves nothing (a server that does not allow ``HEAD``, an error, no
        answer in time) leaves the ref skipped, and stops these looks for the rest of the run:
        a run over hundreds of refs must not wait on each.
        """
        if published is None or not self._probing:
            return []
        missing = {source.label for source in published.sources if source.status == "missing"}
        probed = [source for source in sources if source.label in missing]
        found = await asyncio.gather(
            *(fetcher.present(source.location, PROBE_SECONDS) for source in probed)
        )
        pairs = list(zip(probed, found, strict=True))
        unknown = [source.location for source, there in pairs if there is None]
        if unknown:
            self._probing = False
            log.info(
                "%s: a HEAD request does not tell whether it is there now; stacks missing when "
                "their ref was published are not looked for again in this run",
                redacted(unknown[0]),
            )
        return [source.label for source, there in pairs if there]


class _Published(msgspec.Struct):
    """What :func:`other_mirror` reads of a published ``index.json``."""

    mirror: object = None


_PUBLISHED = msgspec.json.Decoder(_Published)
#: How an index.json this crawler wrote starts (its keys sorted): the mirror is read from its
#: first bytes.
_HEAD = re.compile(rb'\{"branch":"(?:[^"\\]|\\.)*","mirror":("(?:[^"\\]|\\.)*")')


def other_mirror(folder: Path, mirror: str) -> str | None:
    """What to warn of when the branch ``folder`` was last published from another mirror
    than ``mirror`` (its ``index.json``'s ``mirror``), or None: the output is being switched
    to another mirror, whose specs may all differ, and only the publish gate would say so
    (``crawler diff`` refuses to compare two such publishes). The mirror is read from the
    index's first bytes, as this crawler writes them (a warm run of a develop-sized branch
    would spend 35 ms, a twentieth of it, scanning the whole index), else from the whole
    index; one that cannot be read names no mirror."""
    try:
        index = map_regular(folder / "index.json")
        head = _HEAD.match(index)
        published = msgspec.json.decode(head[1]) if head else _PUBLISHED.decode(index).mirror
    except (OSError, ValueError, RecursionError):  # none yet, or damaged: nothing to compare
        return None
    if not isinstance(published, str) or not published or published == mirror:
        return None
    return (
        f"switching mirrors: published from {redacted(published)}, now synced from "
        f"{redacted(mirror)} (its specs may all change; the publish gate checks the drop)"
    )


def _others(formats: list[str], asked: list[str]) -> str:
    return ", ".join(f for f in formats if f not in asked)
