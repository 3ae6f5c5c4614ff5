"""``crawler audit``: is every binary a published branch lists still on the mirror?

For each spec of the branch and each stack that lists it (``links.json``'s locations), the spec
manifest is read and its tarball looked for (:func:`crawler.mirror.binaries.look_up`), at most
``concurrency`` at once, with the run's retries and deadline. Unlike a sync, which reads one
cache's manifest once per hash, every stack's copy is checked: a mirror operator prunes each
stack's blobs on their own.

Only v3 caches have manifests; a spec's location in a v2 cache (a spec file) is counted as not
checked. A finding is a missing manifest or tarball, a manifest that cannot be read or
trusted, or in a cache that publishes keys a signature that is not one of them.
"""

from __future__ import annotations

import asyncio
import fnmatch
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from ..consume.load import load_index, load_links
from ..mirror.binaries import Keyrings, cache_of, look_up
from ..mirror.fetch import Fetcher

#: Told how many locations are checked so far, of how many.
Progress = Callable[[int, int], None]


class AuditFinding(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A binary of one stack that is not as the branch lists it."""

    hash: str
    name: str
    version: str
    stack: str
    finding: str
    manifest: str
    tarball: str | None = None


class Audit(msgspec.Struct, kw_only=True, gc=False):
    """What an audit found: how many locations were checked, how many could not be (v2), and
    the findings, sorted by package, version, hash and stack."""

    path: str
    #: True when every binary checked is there and sound.
    ok: bool
    checked: int
    not_checked: int
    findings: list[AuditFinding]


class _Job(msgspec.Struct, frozen=True, gc=False):
    hash: str
    name: str
    version: str
    stack: str
    manifest: str


async def audit_branch(
    folder: Path,
    fetcher: Fetcher,
    *,
    gpg: str | None,
    stacks: Sequence[str] = (),
    concurrency: int = 8,
    progress: Progress | None = None,
) -> Audit:
    """Audit the published branch at ``folder`` (its index and links read as ``crawler find``
    reads them; a folder that is none raises :class:`~crawler.consumer_errors.NotABranchError`).
    ``stacks``: globs of the stacks to check (all when empty)."""
    jobs, not_checked = _jobs(folder, stacks)
    findings: list[AuditFinding] = []
    done = 0
    pending = iter(jobs)
    async with Keyrings(fetcher, gpg) as keyrings:

        async def worker() -> None:
            nonlocal done
            for job in pending:  # the workers share one iterator: no task per location
                facts = await look_up(fetcher, job.manifest, keyrings)
                if finding := facts.finding:  # job.manifest is the manifest read
                    fields = msgspec.structs.asdict(job)
                    findings.append(AuditFinding(**fields, finding=finding, tarball=facts.tarball))
                done += 1
                if progress:
                    progress(done, len(jobs))

        await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(jobs))))))
    findings.sort(key=lambda f: (f.name, f.version, f.hash, f.stack))
    return Audit(
        path=str(folder),
        ok=not findings,
        checked=len(jobs),
        not_checked=not_checked,
        findings=findings,
    )


def _jobs(folder: Path, stacks: Sequence[str]) -> tuple[list[_Job], int]:
    """Each v3 location to check, and how many of the others (v2) are not checked."""
    jobs: list[_Job] = []
    skipped = 0
    index = load_index(folder)  # first: its errors come before links.json's
    links = load_links(folder).specs
    for name, package in index.packages.items():
        for spec in package.spec_details:
            found = links.get(spec.hash)
            for stack, url in sorted(found.locations.items() if found else ()):
                if stacks and not any(fnmatch.fnmatchcase(stack, glob) for glob in stacks):
                    continue
                if cache_of(url) is None:
                    skipped += 1
                else:
                    jobs.append(_Job(spec.hash, name, spec.versions[0], stack, url))
    return jobs, skipped
