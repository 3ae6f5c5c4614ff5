"""Metrics: a textfile for node_exporter's textfile collector, describing the last run.

``crawler sync --metrics FILE`` writes, at the end of every run (failed ones included, but not
one that found the output locked: the file is the lock holder's), a file
such as ``/var/lib/node_exporter/textfile_collector/spack_cache_crawler.prom``. node_exporter
serves it on its next scrape, so Prometheus can alert on a branch that stopped being published.

Every metric is a gauge named ``spack_cache_crawler_<name>``: :func:`render_metrics` and the
table of the branches' families below list them in the file's order, each with its HELP
text. Per-branch ones carry a ``branch`` label; ``branch_status`` a ``status`` and
``sources`` an ``outcome`` too, every one of :data:`BRANCH_STATUSES` and
:data:`SOURCE_OUTCOMES` listed (most of them 0).

Useful alerts: ``time() - spack_cache_crawler_last_success_timestamp_seconds > 2 * 86400``
(a branch not published for two days), ``spack_cache_crawler_branch_status{status=~"failed|
refused|partial"} == 1``, and node_exporter's own ``node_textfile_mtime_seconds`` for a crawler
that stopped running at all.

Choices:

* "Success" means the branch's output is current after the run: ``published``, ``partial``
  (published without some failed stacks: alert on its status, not on its age), ``unchanged``
  or ``skipped``. :func:`render_metrics` sets ``last_success[branch]`` to ``now`` for those and
  keeps the other entries as given; the caller passes what :func:`load_last_success` read from
  the previous file, so a failed run keeps the previous success time, and branches synced by
  other runs writing the same file keep theirs.
* A metric is left out for a branch when its report lacks the fact (no ``stats`` in a failed
  report, no ``changes`` unless published), rather than reported as 0.
* The file is OpenMetrics text (it ends with ``# EOF``), restricted to what the Prometheus text
  format 0.0.4 read by node_exporter also accepts: gauges only (no ``_total`` counters, which the
  two formats name differently), no ``# UNIT`` lines, no timestamps. node_exporter reads
  ``# EOF`` as a comment.
* Label values escape ``\\``, ``"`` and newlines; HELP texts escape ``\\`` and newlines.
* :func:`write_metrics` replaces the file atomically (temporary file in the same folder, then a
  rename): node_exporter never reads half a file, and the temporary name does not end in
  ``.prom``, so it is never collected. The file is made readable by everyone (mode 0644),
  since node_exporter usually runs as another user. prometheus_client's ``write_to_textfile``
  does neither (a link at its predictable temporary name is followed, the mode is the umask's):
  docs/operations.md says what was observed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from ..documents import Report
from ..files import read_regular
from ..output.atomic import atomic_write

PREFIX = "spack_cache_crawler_"
BRANCH_STATUSES = ("published", "partial", "unchanged", "skipped", "refused", "failed")
SOURCE_OUTCOMES = ("fetched", "unchanged", "missing", "failed", "not_read")
SUCCESS_STATUSES = frozenset({"published", "partial", "unchanged", "skipped"})
LAST_SUCCESS = f"{PREFIX}last_success_timestamp_seconds"

Labels = tuple[tuple[str, str], ...]
Sample = tuple[Labels, float]


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _unescape_label(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def _family(name: str, help: str, samples: Iterable[Sample]) -> list[str]:
    full = PREFIX + name
    help_text = help.replace("\\", "\\\\").replace("\n", "\\n")
    lines = [f"# HELP {full} {help_text}", f"# TYPE {full} gauge"]
    for labels, value in samples:
        rendered = ",".join(f'{key}="{_escape_label(val)}"' for key, val in labels)
        lines.append(
            f"{full}{{{rendered}}} {_number(value)}" if labels else f"{full} {_number(value)}"
        )
    return lines


#: What a family's samples are made of: the reports of the branches synced, by name.
Samples = Callable[[Sequence[Report]], list[Sample]]


def _each(value: Callable[[Report], float | None]) -> Samples:
    """A sample for each branch whose report has the fact (None: left out)."""

    def samples(runs: Sequence[Report]) -> list[Sample]:
        found = ((r.branch, value(r)) for r in runs)
        return [((("branch", b),), v) for b, v in found if v is not None]

    return samples


def _by(label: str, values: Sequence[str], value: Callable[[Report, str], float]) -> Samples:
    """A sample for each branch and each of ``values`` (all listed, most of them 0)."""

    def samples(runs: Sequence[Report]) -> list[Sample]:
        return [((("branch", r.branch), (label, v)), value(r, v)) for r in runs for v in values]

    return samples


def _total(total: object) -> int | None:
    return total if isinstance(total, int) else None


#: The branches' metrics, in the file's order: name, HELP, samples.
_BRANCH_FAMILIES: tuple[tuple[str, str, Samples], ...] = (
    (
        "branch_duration_seconds",
        "Time the branch took in the last run, in seconds.",
        _each(lambda r: r.duration_seconds),
    ),
    (
        "branch_status",
        "1 for the branch's status in the last run, 0 for the other statuses.",
        _by("status", BRANCH_STATUSES, lambda r, status: int(r.status == status)),
    ),
    ("specs", "Specs in the branch's index.", _each(lambda r: r.stats.specs if r.stats else None)),
    (
        "packages",
        "Packages in the branch's index.",
        _each(lambda r: r.stats.packages if r.stats else None),
    ),
    (
        "specs_added",
        "Specs the branch gained in the last run's publish.",
        _each(lambda r: r.changes.added if r.changes else None),
    ),
    (
        "specs_removed",
        "Specs the branch lost in the last run's publish.",
        _each(lambda r: r.changes.removed if r.changes else None),
    ),
    (
        "missing_binaries",
        "Specs whose binary is missing (last rebuild).",
        _each(lambda r: _total(r.missing_binaries_total)),
    ),
    (
        "binary_findings",
        "Specs whose binary is not sound (last rebuild).",
        _each(lambda r: _total(r.binary_findings_total)),
    ),
    (
        "sources",
        "Sources of the branch by outcome in the last run.",
        _by("outcome", SOURCE_OUTCOMES, lambda r, o: sum(s.status == o for s in r.sources or ())),
    ),
    (
        "downloaded_bytes",
        "Bytes of the branch's indexes downloaded in the last run.",
        _each(lambda r: sum(s.bytes or 0 for s in r.sources or () if s.status == "fetched")),
    ),
    (
        "retries",
        "Requests retried for the branch in the last run.",
        _each(lambda r: sum(s.retries for s in r.sources or ())),
    ),
)


def render_metrics(
    reports: Sequence[Report],
    *,
    exit_code: int,
    run_seconds: float,
    now: float,
    last_success: Mapping[str, float],
) -> str:
    """The metrics file for a run: one report per branch synced."""
    runs = sorted(reports, key=lambda r: r.branch)
    success = dict(last_success)
    for run in runs:
        if run.status in SUCCESS_STATUSES:
            success[run.branch] = now
    families: list[tuple[str, str, list[Sample]]] = [
        (
            "last_success_timestamp_seconds",
            "Unix time the branch's output was last made or found current.",
            [((("branch", b),), v) for b, v in sorted(success.items())],
        ),
        ("last_run_timestamp_seconds", "Unix time the last run ended.", [((), now)]),
        ("run_duration_seconds", "Duration of the last run in seconds.", [((), run_seconds)]),
        ("run_exit_code", "Exit code of the last run of crawler sync.", [((), exit_code)]),
        *((name, help, samples(runs)) for name, help, samples in _BRANCH_FAMILIES),
    ]
    lines = [line for family in families for line in _family(*family)]
    return "\n".join([*lines, "# EOF"]) + "\n"


def write_metrics(path: Path, text: str) -> None:
    """Replace the metrics file atomically, readable by everyone (node_exporter's user). Its
    folder must exist: one made for a mistyped path would hold metrics nobody collects. A
    symbolic link is never followed (a run refuses one, see :func:`crawler.cli.checks.
    check_metrics`): one put there since is replaced by the file, what it points to untouched."""
    atomic_write(path, text.encode("utf-8"), make_folder=False)


_LAST_SUCCESS_LINE = re.compile(
    rf'^{LAST_SUCCESS}\{{branch="((?:[^"\\\n]|\\.)*)"\}} (\S+)(?: \S+)?$'
)


#: The most bytes a metrics file may hold: the crawler writes about 2 KB per branch; a larger
#: file is something else, named by mistake (refused before a run, see crawler.cli.checks).
MAX_METRICS_BYTES = 16 << 20


def load_last_success(path: Path) -> dict[str, float]:
    """The ``last_success_timestamp_seconds`` of each branch in a previous metrics file.

    A missing or unreadable file, or lines that are not such samples, give nothing: the worst
    outcome of a damaged file is that branches look never synced until their next success.
    A link is not followed (one planted after ``crawler.cli.checks.check_metrics`` would make
    the run read another file): it gives nothing, and :func:`write_metrics` replaces it.
    """
    try:
        text = read_regular(path, MAX_METRICS_BYTES, follow=False).decode("utf-8", errors="replace")
    except OSError:
        return {}
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _LAST_SUCCESS_LINE.match(line)
        if match is None:
            continue
        try:
            value = float(match.group(2))
        except ValueError:
            continue
        if math.isfinite(value):
            found[_unescape_label(match.group(1))] = value
    return found
