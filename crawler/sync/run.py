"""Sync: the branches of a mirror, each fetched, consolidated, checked and published whole.

A run holds the output folder's lock (:mod:`crawler.output.lock`) from start to end, finds the
mirror's refs (:mod:`crawler.mirror.refs`), then syncs the requested branches one after the other
(:mod:`crawler.sync.branch`) with one HTTP session and one pool of decoding processes
(:mod:`crawler.sync.sources`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..build.consolidate import thawed_gc
from ..config import Config
from ..errors import IndexFormatError, UsageError
from ..files import branch_name_problem
from ..mirror.discovery import Discovery, Mirror
from ..mirror.fetch import Fetcher
from ..mirror.refs import find_refs
from ..mirror.retry import Sleep
from ..output.lock import RunLock
from ..output.site.listing import write_listing
from ..output.state import Store
from ..output.workdir import check_work_folders, recover, run_workspace
from ..text import counted, shown
from .branch import BranchResult, BranchSync, RunContext
from .forecast import BranchForecast, Forecaster
from .plan import Planner
from .publish import after_publish
from .reporting import Reporter
from .sources import SourceReader

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """The outcome of a whole run."""

    branches: list[BranchResult]
    seconds: float = 0.0

    @property
    def failed(self) -> list[BranchResult]:
        """Branches whose new output was not published."""
        return [b for b in self.branches if not b.ok]


class Syncer:
    """Runs syncs against one mirror with one config."""

    def __init__(
        self,
        config: Config,
        reporter: Reporter,
        *,
        sleep: Sleep = asyncio.sleep,
        force: bool = False,
    ):
        self.config = config
        self.reporter = reporter
        self.mirror = Mirror.parse(config.mirror)
        self.output = config.output_dir.resolve()
        self._sleep = sleep
        #: Branches finished so far (also readable after the run was cancelled).
        self.results: list[BranchResult] = []
        self.store = Store(self.output, config.cache_folder)
        planner = Planner(config, self.output, self.store, force=force)
        self.context = RunContext(
            config, reporter, self.mirror, self.output, self.store, planner, force
        )

    async def branches(self) -> Discovery:
        """The mirror's refs alone (for ``crawler branches``)."""
        async with Fetcher(self.config, sleep=self._sleep) as fetcher:
            return await find_refs(fetcher, self.mirror, self.config, ())

    async def run(self, branches: Sequence[str] | None) -> RunResult:
        """Sync the named branches (None: every ref of the mirror) under the output's lock."""
        started = time.monotonic()
        _check_names(branches)
        async with RunLock(self.output, wait=self.config.lock_wait) as lock:
            if lock.broken:
                log.warning("%s", lock.broken)
            kept = [self.store.kept]  # the cache, wherever it is
            for line in [*recover(self.output, kept), *check_work_folders(self.output, kept)]:
                log.warning("%s", line)
            async with Fetcher(self.config, sleep=self._sleep) as fetcher:
                discovery = await find_refs(fetcher, self.mirror, self.config, branches or ())
                wanted = self._wanted(discovery, branches)
                reader = SourceReader(self.config, fetcher, self.store, self.reporter)
                with self._workspace(reader) as work:
                    for branch in wanted:
                        with thawed_gc():  # what the branch froze is collectable once it is done
                            one = BranchSync(self.context, reader, branch, work)
                            self.results.append(await one.sync(discovery))
                            # Once the branch is freed (a develop branch's links alone are
                            # 70-odd MB), for the spec store's update to reuse its memory.
                            del one
                            await reader.settle()
                after_publish(lambda: write_listing(self.output), "synced")
        return RunResult(self.results, time.monotonic() - started)

    async def forecast(self, branches: Sequence[str] | None) -> list[BranchForecast]:
        """What :meth:`run` would do with the named branches, found out without writing
        anything and without the lock (``crawler sync --dry-run``, see :mod:`.forecast`)."""
        _check_names(branches)
        async with Fetcher(self.config, sleep=self._sleep) as fetcher:
            discovery = await find_refs(fetcher, self.mirror, self.config, branches or ())
            wanted = self._wanted(discovery, branches)
            forecaster = Forecaster(self.context, fetcher)
            found = [await forecaster.branch(branch, discovery) for branch in wanted]
        return found

    def _wanted(self, discovery: Discovery, branches: Sequence[str] | None) -> list[str]:
        """The branches named, or with ``--all`` every ref the filters keep that is usable
        (:func:`_usable`; a branch named is synced whatever ``filters.refs`` says)."""
        known = sorted({*discovery.refs, *discovery.problems})
        if branches is None:
            filters = self.config.filters
            kept = [ref for ref in known if filters.keeps_ref(ref)]
            if known and not kept:
                globs = f"refs {list(filters.refs)}, exclude_refs {list(filters.exclude_refs)}"
                raise UsageError(
                    f"no ref of {discovery.url} matches the filters ({globs}; "
                    f"known: {', '.join(known)})"
                )
            return _usable(discovery, kept, self.output)
        wanted = list(dict.fromkeys(branches))
        unknown = [b for b in wanted if b not in known]
        if unknown:
            raise UsageError(
                f"unknown branch {', '.join(unknown)} in {discovery.url} "
                f"(known: {', '.join(known) or 'none'})"
            )
        return wanted

    @contextlib.contextmanager
    def _workspace(self, reader: SourceReader) -> Iterator[Path]:
        try:
            with run_workspace(self.output) as work:
                try:
                    yield work
                finally:
                    reader.close()
        finally:
            # Also when the run fails or is stopped (a time limit killing it every night
            # would otherwise let the cache grow); what this run read is kept.
            self.store.prune(reader.read_sha256)


def _check_names(branches: Sequence[str] | None) -> None:
    for name in branches or ():
        refused = branch_name_problem(name)
        if refused is not None:
            raise UsageError(refused)


def _usable(discovery: Discovery, wanted: list[str], output: Path) -> list[str]:
    """The ``wanted`` refs of ``--all`` that a run syncs: not those the mirror gives as
    unusable, unless published in ``output`` before. Nobody asked for the others: neither a
    failure to alert on forever, nor a success in metrics; a warning says why each is left
    out. A published one fails as if named (exit 4, ``failed`` in the metrics): its output,
    which consumers read, would go stale with every run passing.

    No usable ref at all is no "nothing changed" (exit 6) either: the mirror is unusable
    (exit 3), before any branch is synced."""
    problems = discovery.problems
    skipped = [
        b for b in wanted if b in problems and (not discovery.refs or not _published(output, b))
    ]
    for branch in skipped:
        log.warning("%s: unusable ref of %s: %s", shown(branch), discovery.url, problems[branch])
    if not discovery.refs:
        raise IndexFormatError(
            discovery.url,
            f"no usable ref ({counted(len(problems), 'unusable ref')}: see the warnings)",
        )
    return [b for b in wanted if b not in skipped]


def _published(output: Path, branch: str) -> bool:
    """Whether ``branch`` has an index published in ``output`` (a name no folder may have has
    none)."""
    return branch_name_problem(branch) is None and os.path.isfile(output / branch / "index.json")
