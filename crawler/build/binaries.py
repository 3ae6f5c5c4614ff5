"""The binaries' facts folded into a branch's output (issue 41): pure, from what the sync's
binaries step (:mod:`crawler.sync.binaries`) read.

Each spec whose manifest was read gets its tarball's byte count as ``size`` and the tarball's
URL in its links; one whose manifest or tarball is not there is a missing binary of the report,
one whose manifest cannot be read or trusted (or is signed by no published key) a binary
finding. Neither is a failure: the publish gate does not look at them. A spec of no v3 cache
has no facts and keeps ``size: "-"``.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from ..documents import BinaryFinding, MissingBinary, PackageSummary, Report
from ..linkfile import PackedLinks, PackedSpecLinks, packed_tarball
from ..mirror.binaries import BinaryFacts
from ..mirror.signing import SIGNED

#: Missing binaries and binary findings a report lists, at most (the totals count them all).
BINARIES_SHOWN = 1000

#: A spec's facts: the stack whose cache's manifest was read, and what it said.
Facts = Mapping[str, tuple[str, BinaryFacts]]


def with_sizes(packages: dict[str, PackageSummary], facts: Facts) -> dict[str, PackageSummary]:
    """``packages`` with each spec's ``size`` its tarball's byte count where it is known."""
    if not facts:
        return packages
    sized = {}
    for name, package in packages.items():
        details = [
            msgspec.structs.replace(d, size=str(f[1].size))
            if (f := facts.get(d.hash)) is not None and f[1].size is not None
            else d
            for d in package.spec_details
        ]
        sized[name] = msgspec.structs.replace(package, spec_details=details)
    return sized


def with_tarballs(links: PackedLinks, facts: Facts) -> PackedLinks:
    """``links`` with each spec's tarball beside its manifests' where it is known and there
    (under the cache of one of its stacks: a ``ValueError`` if none holds it; one the sync found
    missing is in the report's ``missing_binaries``, not linked), and the fingerprint of
    the key that signed its manifest where that was verified."""
    if not facts:
        return links
    under = {stack: f"{url}/" for stack, url in links.caches.items()}
    specs = {
        spec: _linked(entry, found[1], under) if (found := facts.get(spec)) is not None else entry
        for spec, entry in links.specs.items()
    }
    return msgspec.structs.replace(links, specs=specs)


def _linked(entry: PackedSpecLinks, fact: BinaryFacts, under: dict[str, str]) -> PackedSpecLinks:
    if fact.tarball is None:
        return entry
    signer = fact.signer if fact.signature == SIGNED and fact.signer else msgspec.UNSET
    if fact.missing:  # named by its manifest but not there: nothing to link to
        return msgspec.structs.replace(entry, signer=signer)
    stacks = [stack for labels in entry.paths.values() for stack in labels]
    tarball = packed_tarball(fact.tarball, sorted(stacks), under)
    return msgspec.structs.replace(entry, tarball=tarball, signer=signer)


def record_binaries(report: Report, packages: Mapping[str, PackageSummary], facts: Facts) -> None:
    """Set the report's missing binaries and binary findings (the first of each, sorted by
    package, version and hash) and their totals."""
    missing: list[MissingBinary] = []
    findings: list[BinaryFinding] = []
    for name, package in sorted(packages.items()):
        for d in package.spec_details:
            found = facts.get(d.hash)
            if found is None:
                continue
            stack, fact = found
            if fact.missing:
                missing.append(MissingBinary(d.hash, name, d.versions[0], stack, fact.missing))
            elif fact.finding:
                findings.append(BinaryFinding(d.hash, name, d.versions[0], stack, fact.finding))
    report.missing_binaries = missing[:BINARIES_SHOWN]
    report.missing_binaries_total = len(missing)
    report.binary_findings = findings[:BINARIES_SHOWN]
    report.binary_findings_total = len(findings)
