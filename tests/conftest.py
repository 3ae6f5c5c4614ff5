"""Shared fixtures: a real HTTP server on loopback serving mirror trees, with scripted faults.

``mirror_server(root)`` starts an aiohttp server (pytest-aiohttp's ``aiohttp_server``) that serves
the files under ``root``. ``server.script(path, fault, ...)`` queues faults for one URL path; each
request to that path consumes the next fault, and once the queue is empty the file is served
normally. Every request is recorded in ``server.requests`` (path, If-None-Match header).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from crawler.configfile import CONFIG_ENV

# Session fixtures shared by several modules are defined (or imported) here: imported into each
# module instead, each module would make its own (a server started, keys generated, per module).
from .signing import signing_keys

__all__ = ["signing_keys"]

REPO = Path(__file__).resolve().parent.parent
SAMPLE_MIRROR = REPO / "sample" / "mirror"
REFERENCE_PAGES = REPO / "sample" / "reference"


@dataclass(frozen=True)
class Fault:
    """One scripted answer. Exactly one kind applies, checked in this order:

    * ``stall``: send headers (and ``truncate`` bytes of the body if set), then hang ``stall`` s;
    * ``truncate``: announce the full Content-Length (and ``headers``), send only ``truncate``
      bytes, then close;
    * ``reset``: close the connection without an answer;
    * ``body``: answer 200 with these bytes instead of the file (and ``headers``), closing the
      connection after it when ``close`` is set;
    * otherwise answer ``status`` with ``headers``.
    """

    status: int = 503
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    truncate: int | None = None
    stall: float | None = None
    reset: bool = False
    close: bool = False


class SleepRecorder:
    """An async ``sleep`` that records what it was asked to wait and returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@dataclass
class MirrorServer:
    """A running loopback server for one mirror tree."""

    root: Path
    server: TestServer | None = None
    faults: dict[str, deque[Fault]] = field(default_factory=lambda: defaultdict(deque))
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    #: The ``Accept-Encoding`` of each request, by path, in order.
    encodings: dict[str, list[str | None]] = field(default_factory=lambda: defaultdict(list))
    etags: bool = True

    @property
    def url(self) -> str:
        """Base URL of the mirror."""
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    def script(self, path: str, *faults: Fault) -> None:
        """Queue faults for a URL path relative to the mirror root (no leading slash)."""
        self.faults["/" + path.lstrip("/")].extend(faults)

    def hits(self, suffix: str) -> int:
        """How many requests asked for a path ending in ``suffix``."""
        return sum(1 for path, _ in self.requests if path.endswith(suffix))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Serve one request: a scripted fault, else the file, else 404."""
        path = request.path
        self.requests.append((path, request.headers.get("If-None-Match")))
        self.encodings[path].append(request.headers.get("Accept-Encoding"))
        queue = self.faults.get(path)
        file = (self.root / path.lstrip("/")).resolve()
        data = file.read_bytes() if file.is_file() and self.root in file.parents else None
        if queue:
            return await self._fault(request, queue.popleft(), data)
        if data is None:
            return web.Response(status=404, text="not found")
        etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
        if self.etags and request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        headers = {"ETag": etag} if self.etags else {}
        return web.Response(body=data, headers=headers, content_type="application/json")

    async def _fault(
        self, request: web.Request, fault: Fault, data: bytes | None
    ) -> web.StreamResponse:
        body = fault.body if fault.body is not None else (data or b"")
        if fault.stall is not None or fault.truncate is not None:
            headers = {"Content-Length": str(len(body)), **fault.headers}
            response = web.StreamResponse(status=200, headers=headers)
            await response.prepare(request)
            if fault.truncate:
                await response.write(body[: fault.truncate])
            if fault.stall is not None:
                await asyncio.sleep(fault.stall)
            assert request.transport is not None
            request.transport.close()
            return response
        if fault.reset:
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=500)
        if fault.body is not None:
            answer = web.Response(body=fault.body, headers=fault.headers)
            if fault.close:
                answer.force_close()
            return answer
        return web.Response(status=fault.status, headers=fault.headers, text=f"{fault.status}")


#: ``await mirror_server(root)``; ``head=True`` also answers HEAD (a look for a tarball), which
#: the plain server does not allow (405), as some mirrors do not.
ServeMirror = Callable[..., Awaitable[MirrorServer]]


@pytest.fixture
def mirror_server(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> Iterator[ServeMirror]:
    """Start a loopback server for a mirror folder: ``server = await mirror_server(path)``."""

    async def start(root: Path, *, head: bool = False) -> MirrorServer:
        mirror = MirrorServer(root.resolve())
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", mirror.handle)
        if head:
            app.router.add_route("HEAD", "/{tail:.*}", mirror.handle)
        mirror.server = await aiohttp_server(app)
        return mirror

    yield start


def fast_config(mirror: str, output: Path, **extra: object) -> dict[str, object]:
    """Config settings for tests: no retry waits, short timeouts."""
    settings: dict[str, object] = {
        "mirror": mirror,
        "output": str(output),
        "formats": ["json", "pages"],
        "decode_workers": 1,
        "timeouts": {"connect": 2, "read": 2, "source": 20},
        "retry": {"attempts": 3, "backoff": 0, "max_wait": 0},
    }
    settings.update(extra)
    return settings


@pytest.fixture(scope="session")
def sample_develop(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``develop`` of the sample mirror, synced once for the session in this process: read it
    only (copy it to change it)."""
    from crawler.cli.command import main_async  # the whole sync, as in_process

    root = tmp_path_factory.mktemp("sample-develop")
    config = root / "crawler.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(SAMPLE_MIRROR), root / "out")))
    argv = ["sync", "--branch", "develop", "--config", str(config), "-q"]
    assert asyncio.run(main_async(argv)) == 0
    return root / "out" / "develop"


def drained(leader: int) -> bytes:
    """Everything written on the terminal whose leader end is ``leader`` (of ``pty.openpty``)
    until the process on its other end closed it."""
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), to prove nothing changed."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".crawler" not in p.relative_to(root).parts
    }


def mirror_neutral(index: Path, mirror: str) -> dict[str, Any]:
    """An ``index.json`` with its mirror's URL made ``<mirror>``, in its ``mirror`` and in
    the locations of its specs: what two mirrors of the same content publish alike."""
    data: dict[str, Any] = json.loads(index.read_text("utf-8").replace(mirror, "<mirror>"))
    assert data["mirror"] == "<mirror>", f"{index} names another mirror than {mirror}"
    return data


#: The published documents that carry the time of their publish.
DATED = ("report.json", "history.json")


def undated_bytes(folder: Path) -> dict[str, bytes]:
    """:func:`tree_bytes` of a published branch folder without its :data:`DATED` documents:
    what two syncs of one mirror publish alike, whenever they run."""
    return {k: v for k, v in tree_bytes(folder).items() if k not in DATED}


@dataclass
class SlowMirrorServer(MirrorServer):
    """A :class:`MirrorServer` that can hold answers back, for tests that need a run to last.

    ``server.delay(suffix, seconds)`` makes every request whose path ends in ``suffix`` wait that
    long, then be answered as usual (a scripted fault or the file). The wait ends early when the
    client hangs up, so a killed or interrupted crawler never leaves a handler sleeping.
    ``server.arrived`` lists request paths as they arrive, before any wait.
    """

    delays: dict[str, float] = field(default_factory=dict)
    arrived: list[str] = field(default_factory=list)

    def delay(self, suffix: str, seconds: float) -> None:
        """Hold back the answers to paths ending in ``suffix`` by ``seconds``."""
        self.delays[suffix] = seconds

    def arrivals(self, suffix: str) -> int:
        """How many requests for paths ending in ``suffix`` have arrived (answered or not)."""
        return sum(1 for path in self.arrived if path.endswith(suffix))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Wait as :meth:`delay` asked, then serve the request like :class:`MirrorServer`."""
        self.arrived.append(request.path)
        wait = max(
            (s for suffix, s in self.delays.items() if request.path.endswith(suffix)), default=0
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while (remaining := deadline - loop.time()) > 0:
            transport = request.transport
            if transport is None or transport.is_closing():
                return web.Response(status=503, text="client went away")
            await asyncio.sleep(min(0.02, remaining))
        return await super().handle(request)


ServeSlowMirror = Callable[[Path], Awaitable[SlowMirrorServer]]


@pytest.fixture
def slow_mirror_server(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> Iterator[ServeSlowMirror]:
    """Like ``mirror_server``, but the server is a :class:`SlowMirrorServer`."""

    async def start(root: Path) -> SlowMirrorServer:
        mirror = SlowMirrorServer(root.resolve())
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", mirror.handle)
        mirror.server = await aiohttp_server(app)
        return mirror

    yield start


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto S3 server on loopback for the whole session (its buckets are per test), shared
    by every module that reads S3: each one used to start its own (a second or two)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


#: A tmpfs, where the tests' temporary folders go unless the runner says where, if it has
#: :data:`IN_MEMORY_FREE` bytes free (a container's is often 64 MB: the suite needs more).
IN_MEMORY = Path("/dev/shm")
IN_MEMORY_FREE = 4 << 30


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker of tests that damage published output on purpose, and put the
    temporary folders in memory."""
    config.addinivalue_line(
        "markers", "damages_output: the test corrupts published files on purpose (not validated)"
    )
    _temporary_folders_in_memory(config)


def _temporary_folders_in_memory(config: pytest.Config) -> None:
    """``tmp_path`` and every ``tempfile`` folder of the run in :data:`IN_MEMORY`, unless the
    runner chose a place (``--basetemp``, ``TMPDIR``) or there is none large enough. Every
    sync stages, flushes and swaps its output: on the shared disk of the 2-core machine the
    suite is run on, the fast loop took 70 s, in memory 49 s (one sitting), and
    test_behaviour, test_incremental, test_faults and test_verify 26-33 s, in memory 12-14 s.
    The writes and their fsyncs are the same; only the device differs."""
    # A pytest-xdist worker is given a --basetemp under the controller's (workerinput is how
    # xdist tells a worker): that is no choice of the runner's.
    chosen = config.option.basetemp and not hasattr(config, "workerinput")
    if chosen or os.environ.get("TMPDIR"):
        return
    if not (IN_MEMORY.is_dir() and os.access(IN_MEMORY, os.W_OK | os.X_OK)):
        return
    if shutil.disk_usage(IN_MEMORY).free >= IN_MEMORY_FREE:
        tempfile.tempdir = str(IN_MEMORY)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--release",
        action="store_true",
        help="also run the tests marked release (the sdist installed and self-tested)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``release`` take minutes and check the package as shipped, not the code:
    left out (deselected) unless ``--release`` is given, as ``.ci/release-check`` does."""
    if config.getoption("release"):
        return
    left = [item for item in items if item.get_closest_marker("release")]
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = [item for item in items if not item.get_closest_marker("release")]


@pytest.fixture(autouse=True)
def _no_config_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads the config that the environment of the one running the suite names
    (``CRAWLER_CONFIG``), nor does a ``crawler`` process it starts (:func:`cli_env`)."""
    monkeypatch.delenv(CONFIG_ENV, raising=False)


@pytest.fixture(autouse=True)
def _published_indexes_match_the_schema(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[None]:
    """Every ``index.json`` a test leaves published (next to its ``report.json``), and its
    companions, must match the JSON Schemas shipped in crawler/schema, whatever the test
    itself checks."""
    yield
    if request.node.get_closest_marker("damages_output"):
        return
    from .schema import SCHEMAS, assert_valid

    for index in tmp_path.rglob("index.json"):
        if (index.parent / "report.json").is_file() and ".crawler" not in index.parts:
            for name in SCHEMAS:
                if (index.parent / name).is_file():
                    assert_valid(index.parent / name)


_HOLDER_SCRIPT = """
import sys, time
from pathlib import Path
from crawler.output.lock import RunLock

lock = RunLock(Path(sys.argv[1]))
lock.acquire()
Path(sys.argv[2]).write_text("ready")
time.sleep(float(sys.argv[3]))
lock.release()
"""


class LockHolder:
    """Another process that took the lock of ``output`` and keeps it for ``seconds``."""

    def __init__(self, output: Path, seconds: float) -> None:
        ready = output.parent / f"holder-ready-{time.monotonic_ns()}"
        self.process = subprocess.Popen(
            [sys.executable, "-c", _HOLDER_SCRIPT, str(output), str(ready), str(seconds)],
            cwd=REPO,
        )
        deadline = time.monotonic() + 10
        while not ready.exists():
            assert self.process.poll() is None, f"holder exited with {self.process.returncode}"
            assert time.monotonic() < deadline, "the lock holder never signalled readiness"
            time.sleep(0.01)

    @property
    def pid(self) -> int:
        """The holder's process id."""
        return self.process.pid

    def stop(self) -> None:
        """Kill the holder if it still runs, and reap it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def crawler_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """``caplog`` that sees the ``crawler`` logger's records at INFO and above, also after a
    test in this process ran the CLI (whose logging setup stops them reaching the root
    logger, where ``caplog`` listens). For code called directly: a CLI run within the test
    sets the logger up anew (read its stderr with ``capsys`` instead)."""
    logger = logging.getLogger("crawler")
    level, propagate = logger.level, logger.propagate
    logger.addHandler(caplog.handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # else, before any CLI run, caplog gets each record twice
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)
        logger.setLevel(level)
        logger.propagate = propagate


@pytest.fixture
def holders() -> Iterator[list[LockHolder]]:
    """Lock holders started by a test, killed (by pid) at its end if still running."""
    started: list[LockHolder] = []
    yield started
    for holder in started:
        holder.stop()


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


CLI_TIMEOUT = 30.0


@dataclass(frozen=True)
class Done:
    """What a finished ``crawler`` process left: exit code, stdout, stderr."""

    code: int
    out: str
    err: str


InProcess = Callable[..., Done]


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> InProcess:
    """``in_process(*args, cwd=...)``: ``crawler ARGS`` in this process, run from ``cwd``, its
    output captured."""
    from crawler.cli.command import main  # the whole sync: imported by the tests that run it

    def run(*args: str, cwd: Path) -> Done:
        monkeypatch.chdir(cwd)
        code = main(list(args))
        captured = capsys.readouterr()
        return Done(code, captured.out, captured.err)

    return run


def cli_env() -> dict[str, str]:
    """The environment of a ``crawler`` subprocess: no terminal sizing, colour or warnings."""
    env = dict(os.environ)
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "PYTHONWARNINGS", CONFIG_ENV):
        env.pop(name, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def as_from_a_terminal() -> None:
    """``preexec_fn`` of a ``crawler`` subprocess: SIGHUP and SIGINT back to their default, as
    in a process started from a terminal, also when the suite itself runs under ``nohup`` or
    in the background of a script (whose ignored SIGHUP or SIGINT the child would inherit, and
    keep, as the crawler leaves an ignored SIGHUP or SIGINT alone)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def start_cli(
    *args: str, cwd: Path, new_session: bool = False, prefix: Sequence[str] = ()
) -> asyncio.subprocess.Process:
    """Start ``python -m crawler ARGS`` without blocking the event loop (servers run in it);
    ``new_session`` makes it lead a process group of its own; ``prefix`` runs it through
    another command (``nohup``)."""
    return await asyncio.create_subprocess_exec(
        *prefix,
        sys.executable,
        "-m",
        "crawler",
        *args,
        cwd=cwd,
        env=cli_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=new_session,
        preexec_fn=as_from_a_terminal,
    )


async def finish(proc: asyncio.subprocess.Process) -> Done:
    """Wait for a process started by :func:`start_cli` and everything holding its pipes."""
    out, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT)
    assert proc.returncode is not None
    return Done(proc.returncode, out.decode(), err.decode())
