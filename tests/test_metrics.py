"""The node_exporter textfile: exact format, escaping, and a round trip through real parsers."""

from __future__ import annotations

import json
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror
from crawler.cli.command import main_async
from crawler.documents import Report
from crawler.ops.metrics import load_last_success, render_metrics, write_metrics
from crawler.output.lock import RunLock

from .conftest import SAMPLE_MIRROR, fast_config

NOW = 1_745_116_200.5
EARLIER = 1_745_029_800.0


def source(label: str, status: str, size: int | None, retries: int = 0) -> dict[str, Any]:
    """A source entry as report.json holds it (only some of its keys matter here; the others
    have their defaults)."""
    return {
        "label": label,
        "status": status,
        "bytes": size,
        "retries": retries,
        "attempts": retries + 1,
        "location": f"https://mirror/{label}",
    }


PUBLISHED: dict[str, Any] = {
    "branch": "develop",
    "status": "published",
    "duration_seconds": 12.5,
    "stats": {"specs": 60021, "packages": 2101, "sources": 4, "sources_missing": 1},
    "changes": {"specs_before": 60012, "specs_after": 60021, "added": 12, "removed": 3},
    "missing_binaries_total": 7,
    "binary_findings_total": 0,
    "sources": [
        source("root", "fetched", 300_000_000, retries=2),
        source("e4s", "unchanged", 4_000_000),
        source("ml", "fetched", 1_000, retries=1),
        source("gone", "missing", None),
    ],
}
PARTIAL: dict[str, Any] = {
    "branch": "develop-2025-04-20",
    "status": "partial",
    "duration_seconds": 0.25,
    "stats": {"specs": 58, "packages": 30, "sources": 2, "sources_missing": 0},
    "changes": {"specs_before": 0, "specs_after": 58, "added": 58, "removed": 0},
    "sources": [source("root", "unchanged", 59305), source("e4s", "failed", None, retries=2)],
}
UNCHANGED: dict[str, Any] = {
    "branch": "v0.22.0",
    "status": "unchanged",
    "duration_seconds": 0.125,
    "sources": [source("root", "unchanged", 1000)],
}
FAILED: dict[str, Any] = {
    "branch": "v0.23.1",
    "status": "failed",
    "duration_seconds": 3.0,
    "error": "branch v0.23.1 failed: 1 source(s) failed",
    "sources": [source("root", "failed", None, retries=4), source("e4s", "fetched", 10)],
}


def report(document: dict[str, Any]) -> Report:
    """A run's report from a report.json document (what a sync writes first, added)."""
    first = {"tool": "spack-cache-crawler 0", "mirror": "https://mirror", "started_at": "now"}
    return msgspec.convert({**first, **document}, Report)


def render(reports: list[dict[str, Any]], last: dict[str, float] | None = None) -> str:
    return render_metrics(
        [report(r) for r in reports],
        exit_code=5,
        run_seconds=15.75,
        now=NOW,
        last_success=last or {},
    )


EXPECTED = """\
# HELP spack_cache_crawler_last_success_timestamp_seconds Unix time the branch's output was \
last made or found current.
# TYPE spack_cache_crawler_last_success_timestamp_seconds gauge
spack_cache_crawler_last_success_timestamp_seconds{branch="develop"} 1745116200.5
spack_cache_crawler_last_success_timestamp_seconds{branch="develop-2025-04-20"} 1745116200.5
spack_cache_crawler_last_success_timestamp_seconds{branch="v0.22.0"} 1745116200.5
spack_cache_crawler_last_success_timestamp_seconds{branch="v0.23.1"} 1745029800.0
# HELP spack_cache_crawler_last_run_timestamp_seconds Unix time the last run ended.
# TYPE spack_cache_crawler_last_run_timestamp_seconds gauge
spack_cache_crawler_last_run_timestamp_seconds 1745116200.5
# HELP spack_cache_crawler_run_duration_seconds Duration of the last run in seconds.
# TYPE spack_cache_crawler_run_duration_seconds gauge
spack_cache_crawler_run_duration_seconds 15.75
# HELP spack_cache_crawler_run_exit_code Exit code of the last run of crawler sync.
# TYPE spack_cache_crawler_run_exit_code gauge
spack_cache_crawler_run_exit_code 5
# HELP spack_cache_crawler_branch_duration_seconds Time the branch took in the last run, in \
seconds.
# TYPE spack_cache_crawler_branch_duration_seconds gauge
spack_cache_crawler_branch_duration_seconds{branch="develop"} 12.5
spack_cache_crawler_branch_duration_seconds{branch="develop-2025-04-20"} 0.25
spack_cache_crawler_branch_duration_seconds{branch="v0.22.0"} 0.125
spack_cache_crawler_branch_duration_seconds{branch="v0.23.1"} 3.0
# HELP spack_cache_crawler_branch_status 1 for the branch's status in the last run, 0 for \
the other statuses.
# TYPE spack_cache_crawler_branch_status gauge
spack_cache_crawler_branch_status{branch="develop",status="published"} 1
spack_cache_crawler_branch_status{branch="develop",status="partial"} 0
spack_cache_crawler_branch_status{branch="develop",status="unchanged"} 0
spack_cache_crawler_branch_status{branch="develop",status="skipped"} 0
spack_cache_crawler_branch_status{branch="develop",status="refused"} 0
spack_cache_crawler_branch_status{branch="develop",status="failed"} 0
spack_cache_crawler_branch_status{branch="develop-2025-04-20",status="published"} 0
spack_cache_crawler_branch_status{branch="develop-2025-04-20",status="partial"} 1
spack_cache_crawler_branch_status{branch="develop-2025-04-20",status="unchanged"} 0
spack_cache_crawler_branch_status{branch="develop-2025-04-20",status="skipped"} 0
spack_cache_crawler_branch_status{branch="develop-2025-04-20",status="refused"} 0
spack_cache_crawler_branch_status{branch="develop-2025-04-20",status="failed"} 0
spack_cache_crawler_branch_status{branch="v0.22.0",status="published"} 0
spack_cache_crawler_branch_status{branch="v0.22.0",status="partial"} 0
spack_cache_crawler_branch_status{branch="v0.22.0",status="unchanged"} 1
spack_cache_crawler_branch_status{branch="v0.22.0",status="skipped"} 0
spack_cache_crawler_branch_status{branch="v0.22.0",status="refused"} 0
spack_cache_crawler_branch_status{branch="v0.22.0",status="failed"} 0
spack_cache_crawler_branch_status{branch="v0.23.1",status="published"} 0
spack_cache_crawler_branch_status{branch="v0.23.1",status="partial"} 0
spack_cache_crawler_branch_status{branch="v0.23.1",status="unchanged"} 0
spack_cache_crawler_branch_status{branch="v0.23.1",status="skipped"} 0
spack_cache_crawler_branch_status{branch="v0.23.1",status="refused"} 0
spack_cache_crawler_branch_status{branch="v0.23.1",status="failed"} 1
# HELP spack_cache_crawler_specs Specs in the branch's index.
# TYPE spack_cache_crawler_specs gauge
spack_cache_crawler_specs{branch="develop"} 60021
spack_cache_crawler_specs{branch="develop-2025-04-20"} 58
# HELP spack_cache_crawler_packages Packages in the branch's index.
# TYPE spack_cache_crawler_packages gauge
spack_cache_crawler_packages{branch="develop"} 2101
spack_cache_crawler_packages{branch="develop-2025-04-20"} 30
# HELP spack_cache_crawler_specs_added Specs the branch gained in the last run's publish.
# TYPE spack_cache_crawler_specs_added gauge
spack_cache_crawler_specs_added{branch="develop"} 12
spack_cache_crawler_specs_added{branch="develop-2025-04-20"} 58
# HELP spack_cache_crawler_specs_removed Specs the branch lost in the last run's publish.
# TYPE spack_cache_crawler_specs_removed gauge
spack_cache_crawler_specs_removed{branch="develop"} 3
spack_cache_crawler_specs_removed{branch="develop-2025-04-20"} 0
# HELP spack_cache_crawler_missing_binaries Specs whose binary is missing (last rebuild).
# TYPE spack_cache_crawler_missing_binaries gauge
spack_cache_crawler_missing_binaries{branch="develop"} 7
# HELP spack_cache_crawler_binary_findings Specs whose binary is not sound (last rebuild).
# TYPE spack_cache_crawler_binary_findings gauge
spack_cache_crawler_binary_findings{branch="develop"} 0
# HELP spack_cache_crawler_sources Sources of the branch by outcome in the last run.
# TYPE spack_cache_crawler_sources gauge
spack_cache_crawler_sources{branch="develop",outcome="fetched"} 2
spack_cache_crawler_sources{branch="develop",outcome="unchanged"} 1
spack_cache_crawler_sources{branch="develop",outcome="missing"} 1
spack_cache_crawler_sources{branch="develop",outcome="failed"} 0
spack_cache_crawler_sources{branch="develop",outcome="not_read"} 0
spack_cache_crawler_sources{branch="develop-2025-04-20",outcome="fetched"} 0
spack_cache_crawler_sources{branch="develop-2025-04-20",outcome="unchanged"} 1
spack_cache_crawler_sources{branch="develop-2025-04-20",outcome="missing"} 0
spack_cache_crawler_sources{branch="develop-2025-04-20",outcome="failed"} 1
spack_cache_crawler_sources{branch="develop-2025-04-20",outcome="not_read"} 0
spack_cache_crawler_sources{branch="v0.22.0",outcome="fetched"} 0
spack_cache_crawler_sources{branch="v0.22.0",outcome="unchanged"} 1
spack_cache_crawler_sources{branch="v0.22.0",outcome="missing"} 0
spack_cache_crawler_sources{branch="v0.22.0",outcome="failed"} 0
spack_cache_crawler_sources{branch="v0.22.0",outcome="not_read"} 0
spack_cache_crawler_sources{branch="v0.23.1",outcome="fetched"} 1
spack_cache_crawler_sources{branch="v0.23.1",outcome="unchanged"} 0
spack_cache_crawler_sources{branch="v0.23.1",outcome="missing"} 0
spack_cache_crawler_sources{branch="v0.23.1",outcome="failed"} 1
spack_cache_crawler_sources{branch="v0.23.1",outcome="not_read"} 0
# HELP spack_cache_crawler_downloaded_bytes Bytes of the branch's indexes downloaded in the \
last run.
# TYPE spack_cache_crawler_downloaded_bytes gauge
spack_cache_crawler_downloaded_bytes{branch="develop"} 300001000
spack_cache_crawler_downloaded_bytes{branch="develop-2025-04-20"} 0
spack_cache_crawler_downloaded_bytes{branch="v0.22.0"} 0
spack_cache_crawler_downloaded_bytes{branch="v0.23.1"} 10
# HELP spack_cache_crawler_retries Requests retried for the branch in the last run.
# TYPE spack_cache_crawler_retries gauge
spack_cache_crawler_retries{branch="develop"} 3
spack_cache_crawler_retries{branch="develop-2025-04-20"} 2
spack_cache_crawler_retries{branch="v0.22.0"} 0
spack_cache_crawler_retries{branch="v0.23.1"} 4
# EOF
"""


def test_render_exact_text() -> None:
    reports = [FAILED, PUBLISHED, PARTIAL, UNCHANGED]
    text = render(reports, {"v0.23.1": EARLIER, "develop": EARLIER})
    assert text == EXPECTED


def test_structure_line_by_line() -> None:
    text = render([PUBLISHED, PARTIAL, UNCHANGED, FAILED])
    assert text.endswith("\n# EOF\n")
    lines = text.splitlines()
    assert lines[-1] == "# EOF"
    assert "" not in lines  # OpenMetrics allows no blank lines
    declared: list[str] = []
    current: str | None = None
    for i, line in enumerate(lines[:-1]):
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name.startswith("spack_cache_crawler_")
            assert name not in declared, f"family {name} declared twice"
            assert lines[i + 1] == f"# TYPE {name} gauge"
            declared.append(name)
            current = None
        elif line.startswith("# TYPE "):
            current = line.split(" ")[2]
            assert current == declared[-1]
        else:
            assert current is not None, f"sample before its HELP/TYPE: {line}"
            match = re.fullmatch(r"([a-z_]+)(\{[^}]*\})? (\S+)", line)
            assert match is not None, line
            assert match.group(1) == current, "samples of a family must follow its TYPE"
            float(match.group(3))
    assert len(declared) == 15


def test_failed_branch_has_no_specs_and_keeps_previous_success() -> None:
    text = render([FAILED], {"v0.23.1": EARLIER})
    assert 'spack_cache_crawler_last_success_timestamp_seconds{branch="v0.23.1"} 1745029800.0' in (
        text
    )
    assert "spack_cache_crawler_specs{" not in text
    assert "spack_cache_crawler_specs_added{" not in text
    assert "# TYPE spack_cache_crawler_specs gauge" in text  # the family is still declared
    assert 'spack_cache_crawler_branch_status{branch="v0.23.1",status="failed"} 1' in text


def test_never_succeeded_branch_has_no_success_sample() -> None:
    text = render([FAILED, dict(FAILED, branch="v2", status="refused")])
    assert "spack_cache_crawler_last_success_timestamp_seconds{" not in text
    assert 'spack_cache_crawler_branch_status{branch="v2",status="refused"} 1' in text


@pytest.mark.parametrize("status", ["published", "partial", "unchanged", "skipped"])
def test_current_output_counts_as_success(status: str) -> None:
    text = render([dict(UNCHANGED, status=status)], {"v0.22.0": EARLIER})
    line = f'spack_cache_crawler_last_success_timestamp_seconds{{branch="v0.22.0"}} {NOW!r}\n'
    assert line in text


def test_label_values_are_escaped() -> None:
    nasty = 'we"ird\\name\nline'
    report = dict(UNCHANGED, branch=nasty)
    text = render([report], {"a\\b": 1.0})
    assert 'branch="we\\"ird\\\\name\\nline"' in text
    assert 'spack_cache_crawler_last_success_timestamp_seconds{branch="a\\\\b"} 1.0' in text
    assert "\nline" not in text  # the newline never reaches the file unescaped


def test_load_last_success_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "textfile" / "spack_cache_crawler.prom"
    path.parent.mkdir()
    nasty = 'we"ird\\name\nline'
    last = {"v0.23.1": EARLIER, "a\\b": 1.0, nasty: 2.5}
    write_metrics(path, render([PUBLISHED, FAILED], last))
    assert load_last_success(path) == {**last, "develop": NOW}
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in path.parent.iterdir()] == ["spack_cache_crawler.prom"]


def test_a_link_put_in_place_of_the_metrics_file_is_replaced_not_followed(
    tmp_path: Path,
) -> None:
    """A run refuses a metrics path that is a link; one planted after that check (in a
    group-writable collector folder) had the file it points to replaced with metrics, mode
    0644. Now the link itself is replaced: what it points to stays as it was."""
    victim = tmp_path / "etc" / "shadow"
    victim.parent.mkdir()
    victim.write_text("root's file\n")
    link = tmp_path / "crawler.prom"
    link.symlink_to(victim)
    write_metrics(link, render([PUBLISHED]))
    assert not link.is_symlink() and load_last_success(link) == {"develop": NOW}
    assert victim.read_text() == "root's file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crawler.prom", "etc"]


def test_a_link_put_in_place_of_the_metrics_file_is_not_read(tmp_path: Path) -> None:
    """The previous successes were read through a link planted after the run's check: from
    another file. A link now gives nothing."""
    elsewhere = tmp_path / "other.prom"
    write_metrics(elsewhere, render([PUBLISHED]))
    link = tmp_path / "crawler.prom"
    link.symlink_to(elsewhere)
    assert load_last_success(elsewhere) == {"develop": NOW}
    assert load_last_success(link) == {}


def test_a_failed_run_keeps_the_previous_success_across_runs(tmp_path: Path) -> None:
    path = tmp_path / "crawler.prom"
    write_metrics(path, render([PUBLISHED]))
    first = load_last_success(path)
    assert first == {"develop": NOW}
    failed = dict(FAILED, branch="develop")
    later = render_metrics(
        [report(failed)], exit_code=4, run_seconds=1.0, now=NOW + 86400, last_success=first
    )
    write_metrics(path, later)
    assert load_last_success(path) == {"develop": NOW}
    assert "spack_cache_crawler_last_run_timestamp_seconds 1745202600.5" in later


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"\x00\xff\xfe\x80 not text at all",
        b'spack_cache_crawler_last_success_timestamp_seconds{branch="x"} soon\n',
        b'spack_cache_crawler_last_success_timestamp_seconds{branch="x"} NaN\n',
        b'spack_cache_crawler_last_success_timestamp_seconds{branch="x} 1\n',
        b'spack_cache_crawler_last_success_timestamp_seconds{status="x"} 1\n',
        b'other_last_success_timestamp_seconds{branch="x"} 1\n',
    ],
)
def test_load_last_success_ignores_garbage(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.prom"
    path.write_bytes(content)
    assert load_last_success(path) == {}


def test_load_last_success_of_missing_file(tmp_path: Path) -> None:
    assert load_last_success(tmp_path / "nope.prom") == {}
    assert load_last_success(tmp_path) == {}  # a folder: unreadable as a file


def test_load_keeps_good_lines_among_bad_ones(tmp_path: Path) -> None:
    path = tmp_path / "mixed.prom"
    path.write_text(
        "garbage\n"
        'spack_cache_crawler_last_success_timestamp_seconds{branch="develop"} 17.5\n'
        'spack_cache_crawler_last_success_timestamp_seconds{branch="x"} nope\n'
        'spack_cache_crawler_last_success_timestamp_seconds{branch="v1"} 1e9 123\n'
    )
    assert load_last_success(path) == {"develop": 17.5, "v1": 1e9}


def test_empty_run_still_renders_a_valid_file() -> None:
    text = render_metrics([], exit_code=3, run_seconds=0.5, now=NOW, last_success={})
    assert "spack_cache_crawler_run_exit_code 3\n" in text
    assert text.endswith("# EOF\n")


def test_parsed_by_prometheus_client() -> None:
    openmetrics = pytest.importorskip("prometheus_client.openmetrics.parser")
    classic = pytest.importorskip("prometheus_client.parser")
    nasty = 'we"ird\\name\nline'
    reports = [PUBLISHED, PARTIAL, UNCHANGED, FAILED, dict(PARTIAL, branch=nasty)]
    text = render(reports, {"old": 1.0})
    for parser in (openmetrics, classic):  # OpenMetrics, and node_exporter's text format
        families = {f.name: f for f in parser.text_string_to_metric_families(text)}
        assert all(f.type == "gauge" for f in families.values())
        specs = {s.labels["branch"]: s.value for s in families["spack_cache_crawler_specs"].samples}
        assert specs == {"develop": 60021, "develop-2025-04-20": 58, nasty: 58}
        status = families["spack_cache_crawler_branch_status"].samples
        assert {(s.labels["branch"], s.labels["status"]) for s in status if s.value == 1} == {
            ("develop", "published"),
            ("develop-2025-04-20", "partial"),
            ("v0.22.0", "unchanged"),
            ("v0.23.1", "failed"),
            (nasty, "partial"),
        }
        last = families["spack_cache_crawler_last_success_timestamp_seconds"].samples
        assert {s.labels["branch"]: s.value for s in last} == {
            "develop": NOW,
            "develop-2025-04-20": NOW,
            "v0.22.0": NOW,
            "old": 1.0,
            nasty: NOW,
        }
        assert families["spack_cache_crawler_run_exit_code"].samples[0].value == 5


async def test_an_unwritable_metrics_file_does_not_fail_the_sync(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Monitoring is a side output: the sync publishes, and says why there are no metrics
    (a folder that cannot be written, /proc/self even for root, found so only at the end)."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(SAMPLE_MIRROR), tmp_path / "out")))
    metrics = Path("/proc/self/crawler.prom")

    argv = ["sync", "--branch", "develop", "--config", str(config), "--metrics", str(metrics)]
    assert await main_async([*argv, "-q"]) == 0

    err = capsys.readouterr().err
    assert f"metrics not written: cannot write {metrics}: " in err
    assert (tmp_path / "out" / "develop" / "index.json").is_file()


async def test_a_metrics_file_in_a_missing_folder_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped metrics folder let the sync run and exit 0 with ``ERROR metrics not
    written``: cron users alert on that file, so alerting was silently off. It is refused
    before anything is read (exit 2), as a missing output parent is; no folder is made."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(SAMPLE_MIRROR), tmp_path / "out")))
    metrics = tmp_path / "textfile-colector" / "crawler.prom"  # sic

    argv = ["sync", "--branch", "develop", "--config", str(config), "--metrics", str(metrics)]
    assert await main_async([*argv, "-q"]) == 2

    err = capsys.readouterr().err
    assert err == (
        f"error: config error in command line: key 'metrics': {metrics.parent} does not exist "
        "(the crawler makes the metrics file, not its folder)\n"
    )
    assert not metrics.parent.exists()
    assert not (tmp_path / "out").exists()


async def test_a_run_that_finds_the_output_locked_leaves_the_metrics_alone(
    tmp_path: Path,
) -> None:
    """The metrics file describes the run holding the lock, which writes it when it ends."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(SAMPLE_MIRROR), tmp_path / "out")))
    metrics = tmp_path / "crawler.prom"
    metrics.write_text("# the lock holder's last run\n")
    argv = ["sync", "--branch", "develop", "--config", str(config), "--metrics", str(metrics)]

    async with RunLock(tmp_path / "out", wait=0):
        assert await main_async([*argv, "-q"]) == 7

    assert metrics.read_text() == "# the lock holder's last run\n"


async def test_refs_the_mirror_lists_as_unusable_are_not_in_the_metrics(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under --all, a ref whose discovery entries are unusable (or whose name is unsafe) is
    skipped with a warning. It is no result of the run: counted as a success, it would keep an
    alert on its age quiet forever, and its name would reach the metrics file as given."""
    mirror = tmp_path / "mirror"
    discovery = build_mirror(mirror, [SynthRef("develop", (SynthSpec("zlib", "1.3.1"),))])
    discovery["no-root"] = []
    discovery["evil\x1b[31m"] = discovery["develop"]
    (mirror / "cache_spack_io_index.json").write_text(json.dumps(discovery))
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(mirror), tmp_path / "out")))
    metrics = tmp_path / "crawler.prom"

    argv = ["sync", "--all", "--config", str(config), "--metrics", str(metrics), "-q"]
    assert await main_async(argv) == 0

    text = metrics.read_text()
    assert 'branch="develop"' in text
    assert "no-root" not in text and "evil" not in text
    err = capsys.readouterr().err
    assert "WARNING no-root: unusable ref of " in err and ": no 'root' index listed" in err
    assert "WARNING evil\\x1b[31m: unusable ref of " in err
    assert "\x1b" not in err


async def test_a_published_ref_turned_unusable_fails_its_branch_under_all(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under --all, a ref published before whose entry turned unusable was skipped with a
    warning: with the others unchanged the run exited 6, "nothing changed", while its output
    went stale. It fails its branch as if named (exit 4, ``failed`` in the metrics); its
    published output stays as it was."""
    mirror = tmp_path / "mirror"
    refs = [SynthRef(name, (SynthSpec("zlib", "1.3.1"),)) for name in ("develop", "v1")]
    discovery = build_mirror(mirror, refs)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(mirror), tmp_path / "out")))
    metrics = tmp_path / "crawler.prom"
    argv = ["sync", "--all", "--config", str(config), "--metrics", str(metrics), "-q"]
    assert await main_async(argv) == 0
    published = (tmp_path / "out" / "v1" / "index.json").read_bytes()

    discovery["v1"] = []
    discovery_file = mirror / "cache_spack_io_index.json"
    discovery_file.write_text(json.dumps(discovery))
    assert await main_async([*argv, "--dry-run"]) == 4  # as the sync will
    capsys.readouterr()
    assert await main_async(argv) == 4

    err = capsys.readouterr().err
    assert "no 'root' index listed" in err and "error: 1 branch(es) failed: v1" in err
    text = metrics.read_text()
    assert 'branch_status{branch="v1",status="failed"} 1' in text
    assert 'branch_status{branch="develop",status="unchanged"} 1' in text
    assert "crawler_run_exit_code 4" in text
    assert (tmp_path / "out" / "v1" / "index.json").read_bytes() == published


async def test_all_with_no_usable_ref_is_an_unusable_mirror(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under --all, a mirror whose every ref is unusable (here its URLs moved off the mirror)
    has nothing to sync: that is exit 3, and a failure in the metrics, not "nothing changed"
    (exit 6), under which the refs published before would go stale with every run passing."""
    mirror = tmp_path / "mirror"
    discovery = build_mirror(mirror, [SynthRef("develop", (SynthSpec("zlib", "1.3.1"),))])
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(mirror), tmp_path / "out")))
    metrics = tmp_path / "crawler.prom"
    argv = ["sync", "--all", "--config", str(config), "--metrics", str(metrics), "-q"]
    assert await main_async(argv) == 0
    published = (tmp_path / "out" / "develop" / "index.json").read_bytes()

    moved = json.dumps(discovery).replace("s3://spack-binaries/", "https://cdn.example.org/")
    discovery_file = mirror / "cache_spack_io_index.json"
    discovery_file.write_text(moved)
    capsys.readouterr()
    assert await main_async(argv) == 3
    err = capsys.readouterr().err
    assert f"WARNING develop: unusable ref of {discovery_file.as_uri()}:" in err
    assert (
        f"error: mirror unusable: bad document at {discovery_file.as_uri()}: no usable ref "
        "(1 unusable ref: see the warnings)" in err
    )
    assert "crawler_run_exit_code 3" in metrics.read_text()
    assert (tmp_path / "out" / "develop" / "index.json").read_bytes() == published


def test_why_not_prometheus_clients_writer(tmp_path: Path) -> None:
    """docs/operations.md says why the file is not written by prometheus_client's
    ``write_to_textfile``, as observed: should this change, the choice is worth revisiting."""
    client = pytest.importorskip("prometheus_client")
    registry = client.CollectorRegistry()
    client.Gauge("spack_cache_crawler_run_exit_code", "Exit code.", registry=registry).set(6)
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    theirs, ours = tmp_path / "theirs.prom", tmp_path / "ours.prom"
    (tmp_path / f"theirs.prom.{os.getpid()}.{threading.get_ident()}").symlink_to(victim)
    old = os.umask(0o077)
    try:
        client.write_to_textfile(str(theirs), registry)  # through the planted link
        client.write_to_textfile(str(theirs), registry)
        write_metrics(ours, render([PUBLISHED]))
    finally:
        os.umask(old)
    assert victim.read_text().startswith("# HELP spack_cache_crawler_run_exit_code")
    assert stat.S_IMODE(theirs.stat().st_mode) == 0o600
    assert stat.S_IMODE(ours.stat().st_mode) == 0o644
    text = theirs.read_text()
    assert "spack_cache_crawler_run_exit_code 6.0\n" in text and "# EOF" not in text
