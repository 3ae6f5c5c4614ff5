"""What a person sees: ``crawler sync`` on a real terminal (a pseudo-terminal, read through a
terminal emulator, pyte), and ``--log-format json`` for log collectors (issue 26).

A generated mirror of three indexes (about 12 MB) is served on loopback by ``bench/server.py``
at 1.5 MB/s a connection, so that a cold sync downloads for a few seconds: long enough to see
the display while bytes come, and to type Ctrl-C in the middle of it (a test that needs no run
to last reads the same mirror at full speed).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyte
import pytest
import yaml
from rich.console import Console
from rich.filesize import decimal

from bench.generate import MirrorParams, generate_mirror
from bench.server import ServerProcess
from crawler.cli.command import main
from crawler.cli.display import LiveReporter
from crawler.mirror.discovery import Source
from crawler.sync.outcome import SourceOutcome

from .conftest import CLI_TIMEOUT, REPO, as_from_a_terminal, cli_env

pytestmark = pytest.mark.slow

ROWS, COLUMNS = 50, 150
#: A line of the display while bytes come: sources, bytes of the total known, rate, time left.
DOWNLOADING = re.compile(
    r"^develop +\S+ \d:\d\d:\d\d downloading (\d)/3 sources  ([\d.]+ (?:bytes|kB|MB)) of "
    r"([\d.]+)\+? (?:bytes|kB|MB)  [\d.]+ (?:bytes|kB|MB)/s  \d:\d\d:\d\d\+? left"
)


class Terminal:
    """``python -m crawler ARGS`` on a pseudo-terminal of its own, as run from a shell: the
    terminal is its controlling terminal and its process group the foreground one, so that
    Ctrl-C typed there is SIGINT to the crawler and every process it started. What it writes
    is read through a terminal emulator; echo is off (the ``^C`` a terminal echoes is not the
    crawler's)."""

    def __init__(self, *args: str, cwd: Path) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        modes = termios.tcgetattr(slave)
        modes[3] &= ~termios.ECHO
        termios.tcsetattr(slave, termios.TCSANOW, modes)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "crawler", *args],
            cwd=cwd,
            env={**cli_env(), "TERM": "xterm-256color"},
            stdin=slave,
            stdout=slave,
            stderr=slave,
            start_new_session=True,
            preexec_fn=_controlling_terminal,
        )
        os.close(slave)
        self.raw = bytearray()
        self.screen = pyte.HistoryScreen(COLUMNS, ROWS, history=10_000)
        self.stream = pyte.ByteStream(self.screen)
        self.closed = False

    def _read(self, seconds: float) -> None:
        if self.closed or not select.select([self.master], [], [], seconds)[0]:
            return
        try:
            data = os.read(self.master, 1 << 16)
        except OSError:  # EIO: every process holding the terminal has ended
            data = b""
        if not data:
            self.closed = True
            return
        self.raw += data
        self.stream.feed(data)

    def rows(self) -> list[str]:
        """Every row written so far: scrolled off the top, then on the screen."""
        history = [
            "".join(line[x].data for x in range(COLUMNS)).rstrip()
            for line in self.screen.history.top
        ]
        return [*history, *(row.rstrip() for row in self.screen.display)]

    def wait_for(self, found: Callable[[list[str]], bool], seconds: float = CLI_TIMEOUT) -> None:
        """Read until the rows satisfy ``found``."""
        deadline = time.monotonic() + seconds
        while not found(self.rows()):
            assert not self.closed, "the run ended first:\n" + "\n".join(self.rows())
            assert time.monotonic() < deadline, "not seen:\n" + "\n".join(self.rows())
            self._read(0.05)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def finish(self) -> int:
        """Read until every process holding the terminal has closed it, then the exit code:
        the forkserver and the decoding workers hold it too, so a run that left one alive
        fails here."""
        deadline = time.monotonic() + CLI_TIMEOUT
        while not self.closed:
            assert time.monotonic() < deadline, "still open:\n" + "\n".join(self.rows())
            self._read(0.1)
        os.close(self.master)
        return self.process.wait(CLI_TIMEOUT)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _controlling_terminal() -> None:
    """``preexec_fn``: the new session's controlling terminal is its standard input, and
    SIGHUP and SIGINT are back to their default (see ``as_from_a_terminal`` in conftest: run
    in the background of a script, the suite ignores SIGINT, and so would the crawler)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    as_from_a_terminal()


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The generated mirror's folder."""
    root = tmp_path_factory.mktemp("display") / "mirror"
    generate_mirror(root, MirrorParams(records=2000, stacks=2, seed=26))
    return root


@pytest.fixture(scope="module")
def served(mirror: Path) -> Iterator[str]:
    """The generated mirror on loopback, at 1.5 MB/s a connection: its URL."""
    server = ServerProcess.start(mirror, bandwidth_mbps=1.5)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def served_fast(mirror: Path) -> Iterator[str]:
    """The same mirror on loopback at full speed, for a test that needs no run to last."""
    server = ServerProcess.start(mirror)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    started: list[Terminal] = []
    yield started
    for terminal in started:
        terminal.kill()


def _sync(served: str, tmp_path: Path, *extra: str) -> tuple[str, ...]:
    config = tmp_path / "crawler.yaml"
    config.write_text(yaml.safe_dump({"decode_workers": 2, "formats": ["json"]}))
    return (
        *("sync", "--branch", "develop", "--config", str(config), "--mirror", served),
        *("--output", str(tmp_path / "out"), "--metrics", str(tmp_path / "m.prom"), *extra),
    )


def _downloaded(metrics: Path) -> int:
    """The metrics' ``downloaded_bytes`` of develop."""
    found = re.search(r'downloaded_bytes\{branch="develop"\} (\d+)', metrics.read_text())
    assert found is not None
    return int(found[1])


def _display(rows: list[str]) -> list[str]:
    return [row for row in rows if row.startswith("develop ")]


def test_the_display_shows_bytes_of_the_known_total_rate_and_time_left(
    served: str, tmp_path: Path, terminals: list[Terminal]
) -> None:
    """It sat at ``0/3`` with bytes alone while the indexes downloaded, and said the bytes of
    every index on a warm run, where nothing was downloaded."""
    sync = _sync(served, tmp_path)
    terminal = Terminal(*sync, cwd=tmp_path)
    terminals.append(terminal)
    seen: list[re.Match[str]] = []

    def downloading(rows: list[str]) -> bool:
        seen.extend(m for row in _display(rows) if (m := DOWNLOADING.match(row)))
        return any(m[2] != "0 bytes" for m in seen)

    terminal.wait_for(downloading)
    assert terminal.finish() == 0
    downloaded = _downloaded(tmp_path / "m.prom")
    assert downloaded > 10_000_000
    final = r"develop ━{16} 0:00:\d\d done 3/3 sources  3 fetched  " + re.escape(
        decimal(downloaded)
    )
    assert re.fullmatch(final + " downloaded", _display(terminal.rows())[-1])

    warm = Terminal(*sync, cwd=tmp_path)
    terminals.append(warm)
    assert warm.finish() == 6
    assert _downloaded(tmp_path / "m.prom") == 0
    assert "done 3/3 sources  3 unchanged  0 bytes downloaded" in _display(warm.rows())[-1]
    assert "develop: unchanged: output is current" in "\n".join(warm.rows())


def test_log_records_are_printed_above_the_display(
    served_fast: str, tmp_path: Path, terminals: list[Terminal]
) -> None:
    """Each record was written where the cursor was, after the display's line: ``develop
    ━━━━ 0/3 ... 0:00:01[DEBUG] GET ...``, and the display drew itself over what followed."""
    terminal = Terminal(*_sync(served_fast, tmp_path, "-v"), cwd=tmp_path)
    terminals.append(terminal)
    assert terminal.finish() == 0
    rows = terminal.rows()
    for row in rows:  # no row holds both the display and a record
        assert "━" not in row or not re.search(r"DEBUG|INFO|WARNING|HTTP", row), row
    records = [row for row in rows if re.match(r"^\[\d\d:\d\d:\d\d\] (DEBUG|INFO) ", row)]
    assert sum(" HTTP 200" in row for row in records) >= 3  # the index requests, logged
    assert len(_display(rows)) == 1  # the display, drawn once at the bottom


@pytest.mark.parametrize("moment", ["starting", "downloading", "decoding"])
def test_ctrl_c_on_a_terminal_ends_with_one_line_and_130(
    served: str, tmp_path: Path, terminals: list[Terminal], moment: str
) -> None:
    """Ctrl-C signals the whole foreground process group: the decoding processes printed
    ``Process ForkServerProcess-2: Traceback ... KeyboardInterrupt``, and Ctrl-C while the
    crawler's modules loaded ended it with a traceback and a death by SIGINT."""
    terminal = Terminal(*_sync(served, tmp_path), cwd=tmp_path)
    terminals.append(terminal)
    if moment == "starting":
        time.sleep(0.5)  # after Python's own start, while the crawler's modules load
    else:
        done = 0 if moment == "downloading" else 1
        terminal.wait_for(
            lambda rows: any(
                (m := DOWNLOADING.match(row)) and int(m[1]) >= done and m[2] != "0 bytes"
                for row in _display(rows)
            )
        )
    terminal.type(b"\x03")
    code = terminal.finish()
    text = "\n".join(terminal.rows())
    assert code == 130, text
    assert [row for row in terminal.rows() if "interrupted" in row] == [
        row for row in terminal.rows() if row.startswith("interrupted")
    ]
    assert text.count("interrupted") == 1, text
    for word in ("Traceback", "KeyboardInterrupt", "Error"):
        assert word not in terminal.raw.decode(errors="replace"), text


def _ignoring_sigint() -> None:
    """``preexec_fn``: started as a shell script's background job is (``crawler sync ... &``
    without job control): SIGINT ignored."""
    as_from_a_terminal()
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_a_run_started_ignoring_sigint_keeps_ignoring_it(served: str, tmp_path: Path) -> None:
    """Python leaves an inherited ignored SIGINT so while it starts; the crawler then took it
    over: a SIGINT was lost during start-up and stopped the run after it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawler", *_sync(served, tmp_path), "-q"],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_ignoring_sigint,
    )
    try:
        for moment in (0.3, 1.5):  # while its modules load, then while it downloads
            time.sleep(moment)
            assert proc.poll() is None, "the run ended before the signal"
            os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=CLI_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err.decode()
    assert b"interrupted" not in err
    assert (tmp_path / "out" / "develop" / "index.json").is_file()


def _json_lines(text: str) -> list[dict[str, object]]:
    records = [json.loads(line) for line in text.splitlines() if line.strip()]
    for record in records:
        assert list(record)[:4] == ["time", "level", "logger", "message"], record
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d", record["time"])
    return records


def test_json_logs_are_one_object_a_line_with_the_records_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """In this process: the test below reads JSON logs from a real one, on a terminal."""
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "crawler.yaml"
    config.write_text(yaml.safe_dump({"output": str(tmp_path / "out"), "decode_workers": 1}))
    base = ["sync", "--branch", "develop", "--config", str(config), "--log-format", "json"]
    sample = ["--mirror", str(REPO / "sample" / "mirror")]
    runs = [
        (base + sample, 0),
        (base + sample + ["-v"], 6),
        ([*base, "--mirror", str(tmp_path / "nowhere")], 3),
    ]
    done = []
    for argv, code in runs:
        returned = main(argv)
        err = capsys.readouterr().err
        assert returned == code, err
        done.append(_json_lines(err))
    cold, warm, failed = done
    sources = [r for r in cold if r.get("event") == "source_done"]
    assert sorted(str(r["source"]) for r in sources) == [
        "data-vis-sdk",
        "e4s",
        "ml-darwin-aarch64-mps",
        "ml-linux-x86_64-cpu",
        "ml-linux-x86_64-cuda",
        "root",
    ]
    root = next(r for r in sources if r["source"] == "root")
    assert root["branch"] == "develop" and root["status"] == "fetched"
    assert root["bytes"] == 59_305  # the URL it was read from (it said the listed s3:// one)
    assert str(root["url"]).startswith((REPO / "sample" / "mirror").as_uri() + "/")
    assert (
        root["message"]
        == "develop root: fetched 59,305 bytes, 83 records (0 known from the spec store), "
        + str(root["message"]).rsplit(", ", 1)[1]
    )
    assert cold[0]["event"] == "branch_started" and cold[-1]["event"] == "branch_done"
    assert {r["level"] for r in warm} >= {"DEBUG", "INFO"}
    assert failed[-1]["level"] == "ERROR"
    nowhere = (tmp_path / "nowhere").as_uri()
    assert str(failed[-1]["message"]).startswith(
        f"error: mirror unusable: {nowhere}: no such file or folder"
    ), failed[-1]


def test_json_logs_on_a_terminal_have_no_display_and_an_interrupt_is_a_record(
    served: str, tmp_path: Path, terminals: list[Terminal]
) -> None:
    terminal = Terminal(*_sync(served, tmp_path, "--log-format", "json"), cwd=tmp_path)
    terminals.append(terminal)
    terminal.wait_for(lambda rows: any('"event": "branch_started"' in row for row in rows))
    terminal.type(b"\x03")
    assert terminal.finish() == 130
    records = _json_lines(terminal.raw.decode())
    assert records[-1]["level"] == "WARNING"
    assert str(records[-1]["message"]).startswith("interrupted by SIGINT")
    assert sum("interrupted" in str(r["message"]) for r in records) == 1


def _shown(reporter: LiveReporter) -> str:
    """The display's line as drawn on a 150-column terminal."""
    out = io.StringIO()
    console = Console(file=out, width=COLUMNS, color_system=None)
    console.print(reporter.progress.make_tasks_table(reporter.progress.tasks))
    return out.getvalue().strip()


def test_the_clock_runs_and_the_phase_shows_until_the_branch_is_done() -> None:
    """Once the last byte came, ``completed`` reached ``total`` and rich's elapsed column
    stopped: decoding, building and publishing ran under a frozen clock, ``0:00:00 left``."""
    reporter = LiveReporter()
    reporter.branch_started("develop", 1)
    reporter.source_progress("develop", "root", 0, 1000)
    assert "downloading 0/1 sources  0 bytes of 1.0 kB" in _shown(reporter)
    reporter.source_progress("develop", "root", 1000, 1000)
    time.sleep(1.05)  # a rate is measured, and the clock moves on
    decoding = _shown(reporter)
    assert re.search(r"0:00:01 decoding 0/1 sources  1.0 kB of 1.0 kB$", decoding), decoding
    source = Source("develop", "root", "file:///m", "file:///m", "v3", None)
    reporter.source_done("develop", SourceOutcome(source, "fetched", size=1000))
    for phase in ("building", "publishing"):
        reporter.branch_phase("develop", phase)
        assert f"{phase} 1/1 sources  1 fetched  1.0 kB downloaded" in _shown(reporter)
    reporter.branch_done("develop", "published", ok=True)
    assert re.search(r"0:00:01 done 1/1 sources", _shown(reporter))
