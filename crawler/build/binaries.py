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

from ..documents import BinaryFinding, MissingBinary, PackageSummary, Report, SpecLinks
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


def with_tarballs(links: dict[str, SpecLinks], facts: Facts) -> dict[str, SpecLinks]:
    """``links`` with each spec's tarball URL beside its manifests' where it is known, and the
    fingerprint of the key that signed its manifest where that was verified."""
    if not facts:
        return links
    return {
        spec: _linked(link, found[1]) if (found := facts.get(spec)) is not None else link
        for spec, link in links.items()
    }


def _linked(link: SpecLinks, fact: BinaryFacts) -> SpecLinks:
    if fact.tarball is None:
        return link
    signer = fact.signer if fact.signature == SIGNED and fact.signer else msgspec.UNSET
    return msgspec.structs.replace(link, tarball=fact.tarball, signer=signer)


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
