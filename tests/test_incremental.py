"""Incremental syncs: what a second run downloads, decodes and writes (README "Incremental syncs").

A source is not downloaded again when the mirror proves it unchanged (a v3 blob's name, a 304
answer to ``If-None-Match``, a v2 sidecar from a server that sends no ETag); a missing or changed
validator means a fresh download, but bytes whose SHA-256 has a cached summary are not decoded
again. Whatever the path taken, the output must be byte-identical to a cold sync of the same
mirror into a fresh folder. Each test syncs a small synthetic mirror (served on loopback, or read
from a folder) in-process, changes the mirror, the server or ``<output>/.crawler/``, and checks
what a user sees: exit code, per-source ``status`` and ``decoded`` in the report, the requests
the server received, and the published bytes.

Every run that decodes starts a decoding process (about 0.2 s), so the cold sync compared with
is made once per mirror content and layout (the first sync of a test is one) and kept, see
:meth:`Site.cold`; files are compared with the mirror's base URL (the one value of
``index.json`` that names the server, which differs from test to test) replaced by a
placeholder. All of them use the config's formats, ``json`` and ``pages``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

import crawler.build.consolidate
import crawler.decode.records
import crawler.output.state
import crawler.sync.decoding
import crawler.sync.sources
from bench.synth import SynthRef, SynthSpec, build_mirror, index_document
from crawler.cli.command import main_async
from crawler.decode.pool import DecodePool
from crawler.mirror.http import usable_etag
from crawler.mirror.local import LocalFolder
from crawler.ops.verify import verify_branch
from crawler.output.kept import WRITTEN
from crawler.output.state import Store

from .conftest import Fault, MirrorServer, fast_config, tree_bytes, undated_bytes

BRANCH = "develop"  # mutable by default: re-synced on every run
DISCOVERY = "/cache_spack_io_index.json"
LABELS = ("root", "s1", "s2")

Specs = tuple[SynthSpec, ...]
Published = dict[str, bytes]
Outcomes = dict[str, tuple[str, bool]]

SPECS: Specs = (
    SynthSpec("zlib", "1.3.1", stacks=("s1",)),
    SynthSpec("hdf5", "1.14.3", variants=(("mpi", True),), stacks=("s1", "s2")),
    SynthSpec("py-numpy", "2.0.0", compiler=None, stacks=("s2",)),
)
#: The mirror after one more spec was built in stack ``s2``: root and s2 change, s1 does not.
MORE_SPECS: Specs = (*SPECS, SynthSpec("cmake", "3.30.5", stacks=("s2",)))

UNCHANGED: Outcomes = {label: ("unchanged", False) for label in LABELS}
FETCHED_NOT_DECODED: Outcomes = {label: ("fetched", False) for label in LABELS}
FETCHED_AND_DECODED: Outcomes = {label: ("fetched", True) for label in LABELS}


def only_s2_changed(s1: tuple[str, bool]) -> Outcomes:
    """What a sync after :data:`MORE_SPECS` reports: root and s2 read anew, s1 as ``s1``."""
    return {"root": ("fetched", True), "s1": s1, "s2": ("fetched", True)}


def index_path(layout: str, label: str, specs: Specs) -> str:
    """The URL path (relative to the mirror) of one index of ``develop`` built from ``specs``."""
    prefix = BRANCH if label == "root" else f"{BRANCH}/{label}"
    if layout == "v2":
        return f"{prefix}/build_cache/index.json"
    data = index_document(specs, 8, stack=None if label == "root" else label)
    checksum = hashlib.sha256(data).hexdigest()
    return f"{prefix}/blobs/sha256/{checksum[:2]}/{checksum}"


def server_etag(data: bytes) -> str:
    """The ETag the loopback server (tests/conftest.py) sends for a body."""
    return '"' + hashlib.sha256(data).hexdigest()[:32] + '"'


def neutral(files: Published, base: str) -> Published:
    """``files`` with the mirror's base URL replaced by a placeholder: the ``mirror`` of
    ``index.json``, and the locations of ``links.json``."""
    field = b'"mirror":' + json.dumps(base).encode()
    assert files["index.json"].count(field) == 1, f"{field!r} not in index.json"
    url = json.dumps(base)[1:-1].encode()
    named = {name: files[name].replace(url, b"<mirror>") for name in ("index.json", "links.json")}
    return {**files, **named}


@dataclass
class Mirror(MirrorServer):
    """The loopback server of tests/conftest.py, which also answers ``HEAD`` (a crawler may
    check that a blob exists without downloading it) and records each request's method."""

    calls: list[tuple[str, str, str | None]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Record (method, path, If-None-Match), then serve like the conftest server."""
        self.calls.append((request.method, request.path, request.headers.get("If-None-Match")))
        return await super().handle(request)

    def gets(self) -> list[tuple[str, str | None]]:
        """(path, If-None-Match) of every GET (every download), sorted."""
        got = [(p, inm) for method, p, inm in self.calls if method == "GET"]
        return sorted(got, key=lambda r: (r[0], r[1] or ""))

    def forget(self) -> None:
        """Start recording afresh."""
        self.requests.clear()
        self.calls.clear()


Serve = Callable[[Path], Awaitable[Mirror]]


@pytest.fixture
def serve(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> Iterator[Serve]:
    """Start a :class:`Mirror` for a mirror folder: ``server = await serve(path)``."""

    async def start(root: Path) -> Mirror:
        mirror = Mirror(root.resolve())
        app = web.Application()
        app.router.add_get("/{tail:.*}", mirror.handle)  # HEAD too
        mirror.server = await aiohttp_server(app)
        return mirror

    yield start


#: Cold-sync outputs by (layout, specs), mirror-neutral (see the module docstring).
_COLD: dict[tuple[str, Specs], Published] = {}


@dataclass
class Site:
    """A mirror folder (served on loopback, or read in place), a config and an output folder."""

    tmp: Path
    mirror: Path
    layout: str
    config: Path
    out: Path
    base: str  # the mirror's base URL as index.json names it
    server: Mirror | None = None
    specs: Specs = SPECS
    colds: int = 0

    @property
    def http(self) -> Mirror:
        """The loopback server (the site must be served)."""
        assert self.server is not None
        return self.server

    async def sync(self, *flags: str, out: Path | None = None) -> int:
        """``crawler sync -q --branch develop``; returns the exit code."""
        argv = ["sync", "--config", str(self.config), "-q", f"--branch={BRANCH}", *flags]
        if out is not None:
            argv.append(f"--output={out}")
        return await main_async(argv)

    def rebuild(self, specs: Specs) -> None:
        """Replace the mirror's content, and forget the requests seen so far."""
        shutil.rmtree(self.mirror)
        build_mirror(self.mirror, (SynthRef(BRANCH, specs, layout=self.layout),))
        self.specs = specs
        self.forget_requests()

    def forget_requests(self) -> None:
        """Start counting requests afresh."""
        if self.server is not None:
            self.server.forget()

    def report(self) -> dict[str, Any]:
        """The report of the latest attempt at ``develop``."""
        path = self.out / ".crawler" / "reports" / f"{BRANCH}.json"
        data: dict[str, Any] = json.loads(path.read_bytes())
        return data

    def outcomes(self) -> Outcomes:
        """Label -> (status, decoded) of each source in the latest report."""
        return {s["label"]: (s["status"], s["decoded"]) for s in self.report()["sources"]}

    def source(self, label: str) -> dict[str, Any]:
        """One source's entry in the latest report."""
        entry: dict[str, Any] = next(s for s in self.report()["sources"] if s["label"] == label)
        return entry

    def published(self, out: Path | None = None) -> Published:
        """The published files that depend only on the mirror: index.json and the pages
        (``report.json`` has times, ``changes.json`` compares with the previous publish,
        ``history.json`` lists the publishes), mirror-neutral."""
        files = tree_bytes((out or self.out) / BRANCH)
        dated = ("report.json", "changes.json", "history.json")
        kept = {k: v for k, v in files.items() if k not in dated}
        return neutral(kept, self.base)

    async def start(self) -> Published:
        """The first sync, into an empty output folder: a cold one. Returns what it published
        (and keeps it as the cold output of this mirror content)."""
        assert await self.sync() == 0
        published = self.published()
        _COLD.setdefault((self.layout, self.specs), published)
        return published

    async def cold(self, *, fresh: bool = False) -> Published:
        """What a cold sync of the mirror as it is now publishes into a fresh output folder
        (made now if ``fresh``, else possibly kept from another test), mirror-neutral."""
        key = (self.layout, self.specs)
        if fresh or key not in _COLD:
            self.colds += 1
            output = self.tmp / f"cold-{self.colds}"
            calls = list(self.server.calls) if self.server is not None else []
            assert await self.sync(out=output) == 0
            if self.server is not None:
                self.server.calls[:] = calls  # the cold run's requests are not the test's
            _COLD[key] = self.published(output)
        return _COLD[key]

    def downloads(self) -> list[str]:
        """Paths of the index files (not sidecars, spec manifests, the discovery document)
        requested with GET since the last reset, sorted."""
        gets = self.http.gets()
        index = (p for p, _ in gets if p != DISCOVERY and not p.endswith(".hash"))
        return sorted(p for p in index if not p.endswith(".spec.manifest.json"))

    def sent(self, label: str) -> list[str | None]:
        """The If-None-Match of each GET of one index of the mirror as it is now."""
        return [inm for p, inm in self.http.gets() if p == "/" + self.path(label)]

    def path(self, label: str) -> str:
        """The URL path of one index of the mirror as it is now."""
        return index_path(self.layout, label, self.specs)

    def paths(self, *labels: str) -> list[str]:
        """Sorted request paths of these indexes of the mirror as it is now."""
        return sorted("/" + self.path(label) for label in labels)

    def file(self, label: str) -> Path:
        """The mirror file of one index."""
        return self.mirror / self.path(label)

    def sidecar(self, label: str) -> Path:
        """The v2 ``index.json.hash`` of one index."""
        return self.mirror / (self.path(label) + ".hash")


async def make_site(
    tmp_path: Path,
    serve: Serve | None,
    *,
    layout: str = "v2",
    etags: bool = True,
) -> Site:
    """Build ``develop`` in ``layout``; serve it (unless ``serve`` is None: read the folder)."""
    root = tmp_path / "mirror"
    build_mirror(root, (SynthRef(BRANCH, SPECS, layout=layout),))
    server = None
    mirror, base = str(root), "file://" + str(root.resolve())
    if serve is not None:
        server = await serve(root)
        server.etags = etags
        mirror = base = server.url
    out = tmp_path / "out"
    config = tmp_path / "crawler.yaml"
    config.write_text(yaml.safe_dump(fast_config(mirror, out)))
    return Site(tmp_path, root, layout, config, out, base, server)


# --- unchanged v3 blobs: nothing but the discovery document ---------------------------------------


async def test_unchanged_v3_blobs_are_not_requested_again(tmp_path: Path, serve: Serve) -> None:
    site = await make_site(tmp_path, serve, layout="v3")
    await site.start()
    assert site.outcomes() == FETCHED_AND_DECODED
    first = tree_bytes(site.out / BRANCH)
    site.forget_requests()

    assert await site.sync() == 6

    assert site.http.gets() == [(DISCOVERY, None)]  # no blob downloaded
    checked = {method for method, path, _ in site.http.calls if path != DISCOVERY}
    assert checked <= {"HEAD"}  # at most whether a blob is still there
    assert site.report()["status"] == "unchanged"
    assert site.outcomes() == UNCHANGED
    assert tree_bytes(site.out / BRANCH) == first  # nothing rewritten, report.json included


# --- unchanged v2 indexes over HTTP with ETags: If-None-Match, 304 --------------------------------


async def test_unchanged_v2_indexes_are_revalidated_with_their_etag(
    tmp_path: Path, serve: Serve
) -> None:
    site = await make_site(tmp_path, serve)
    await site.start()
    assert all(inm is None for _, inm in site.http.gets())  # nothing to revalidate yet
    first = tree_bytes(site.out / BRANCH)
    site.forget_requests()

    assert await site.sync() == 6

    etags = [("/" + site.path(x), server_etag(site.file(x).read_bytes())) for x in LABELS]
    sidecars = [("/" + site.path(x) + ".hash", None) for x in LABELS]
    assert site.http.gets() == sorted([(DISCOVERY, None), *etags, *sidecars])
    assert site.outcomes() == UNCHANGED  # 304 each time: nothing downloaded, nothing decoded
    assert site.report()["status"] == "unchanged"
    assert tree_bytes(site.out / BRANCH) == first


# --- one changed stack: only it (and the root) is downloaded and decoded --------------------------


@pytest.mark.parametrize("layout", ["v2", "v3"])
async def test_a_changed_stack_alone_is_read_again_and_matches_a_cold_sync(
    tmp_path: Path, serve: Serve, layout: str
) -> None:
    site = await make_site(tmp_path, serve, layout=layout)
    before = await site.start()
    site.rebuild(MORE_SPECS)

    assert await site.sync() == 0

    assert site.report()["status"] == "published"
    assert site.outcomes() == only_s2_changed(("unchanged", False))
    if layout == "v2":  # s1 is revalidated (304); root and s2 answer with their new bytes
        assert site.downloads() == site.paths(*LABELS)
        assert site.sent("s1") == [server_etag(site.file("s1").read_bytes())]
    else:  # s1's blob name vouches for it: not downloaded at all
        assert site.downloads() == site.paths("root", "s2")
    after = site.published()
    assert after != before
    assert b'"cmake"' in after["index.json"]
    assert after == await site.cold(fresh=True)


# --- a server that does not honour If-None-Match --------------------------------------------------


async def test_a_server_ignoring_if_none_match_costs_downloads_but_never_gives_stale_data(
    tmp_path: Path, serve: Serve
) -> None:
    site = await make_site(tmp_path, serve)
    before = await site.start()
    site.forget_requests()
    site.http.etags = False  # never answers 304 (nor sends an ETag) from now on

    assert await site.sync() == 6

    sent = [inm for p, inm in site.http.gets() if p in site.paths(*LABELS)]
    assert len(sent) == 3 and None not in sent  # asked conditionally, answered in full
    assert site.outcomes() == FETCHED_NOT_DECODED
    assert site.published() == before

    site.rebuild(MORE_SPECS)
    assert await site.sync() == 0

    # s1: the last run learnt this server sends no ETag, so its unchanged sidecar is trusted
    assert site.outcomes() == only_s2_changed(("unchanged", False))
    after = site.published()
    assert b'"cmake"' in after["index.json"]
    assert after == await site.cold()


async def test_a_new_etag_for_the_same_bytes_is_the_one_sent_next(
    tmp_path: Path, serve: Serve
) -> None:
    """README: "over HTTP with an ETag from the last download: If-None-Match". s1 is answered
    in full once (same bytes, new ETag: re-uploaded, or moved behind another CDN): nothing is
    decoded or written. The next run must revalidate with the new ETag; sending the old one
    again means a full download of s1 on every run from then on."""
    site = await make_site(tmp_path, serve)
    await site.start()
    before = tree_bytes(site.out / BRANCH)
    data = site.file("s1").read_bytes()
    site.http.script(site.path("s1"), Fault(body=data, headers={"ETag": '"reuploaded"'}))

    assert await site.sync() == 6

    assert site.outcomes() == {**UNCHANGED, "s1": ("fetched", False)}
    assert tree_bytes(site.out / BRANCH) == before
    site.forget_requests()

    assert await site.sync() == 6

    assert site.sent("s1") == ['"reuploaded"']


def test_only_etags_that_can_be_sent_back_are_usable() -> None:
    assert usable_etag('W/"5f-abc"') == 'W/"5f-abc"'
    assert usable_etag('"a\x1bb"') is None  # a control character
    assert usable_etag('"caf\udce9"') is None  # a byte that was not UTF-8 (JSON cannot hold it)
    assert usable_etag('"caf\u00e9"') == '"caf\u00e9"'  # UTF-8: aiohttp sends it back as is
    assert usable_etag('"' + "x" * 2000 + '"') is None
    assert usable_etag("") is None


async def test_a_blob_that_failed_its_checksum_is_not_revalidated_next_time(
    tmp_path: Path, serve: Serve
) -> None:
    """A v3 blob whose bytes are not what its name says fails (here within the budget of
    failed stacks). Its ETag is that of the wrong bytes, which the cache knows as another
    stack's: the next run must download it again and fail it again, as a cold sync does."""
    site = await make_site(tmp_path, serve, layout="v3")
    settings = yaml.safe_load(site.config.read_text())
    site.config.write_text(yaml.safe_dump({**settings, "publish": {"max_failed_stacks": 1}}))
    site.file("s2").write_bytes(site.file("s1").read_bytes())
    assert await site.sync() == 5
    first = site.published()
    site.forget_requests()

    assert await site.sync() == 5

    assert site.sent("s2") == [None]
    assert site.outcomes()["s2"] == ("failed", False)
    assert "sha256 is" in site.source("s2")["error"]
    assert site.published() == first


# --- a stale sidecar is not trusted where ETags exist ---------------------------------------------


async def test_a_stale_sidecar_does_not_hide_a_changed_index_when_the_server_sends_etags(
    tmp_path: Path, serve: Serve
) -> None:
    site = await make_site(tmp_path, serve)
    await site.start()
    stale = {x: site.sidecar(x).read_bytes() for x in LABELS}
    site.rebuild(MORE_SPECS)
    for label, old in stale.items():  # the new index.json files are up, their .hash not yet
        site.sidecar(label).write_bytes(old)

    assert await site.sync() == 0

    assert site.outcomes() == only_s2_changed(("unchanged", False))
    new = hashlib.sha256(site.file("root").read_bytes()).hexdigest()
    root = site.source("root")
    assert (root["sha256"], root["sidecar_matches"]) == (new, False)
    after = site.published()
    assert b'"cmake"' in after["index.json"]
    assert after == await site.cold()


async def test_what_a_local_mirror_taught_does_not_carry_over_to_a_server(
    tmp_path: Path, serve: Serve
) -> None:
    """A local read sends no ETag: that says nothing about a server's ETags. The same folder,
    then served with ETags and stale sidecars (its indexes changed, their .hash not yet), must
    not pass as unchanged on the sidecars' word."""
    site = await make_site(tmp_path, None)
    await site.start()
    stale = {x: site.sidecar(x).read_bytes() for x in LABELS}
    site.rebuild(MORE_SPECS)
    for label, old in stale.items():
        site.sidecar(label).write_bytes(old)
    cold = await site.cold()  # read from the folder
    server = await serve(site.mirror)

    assert await site.sync(f"--mirror={server.url}") == 0

    assert site.outcomes() == only_s2_changed(("fetched", False))
    site.base = server.url
    assert site.published() == cold


# --- no ETags: sidecars trusted once downloaded; no validator at all: download, no decode ---------


async def test_without_etags_unchanged_sidecars_spare_the_download_and_changed_ones_do_not(
    tmp_path: Path, serve: Serve
) -> None:
    site = await make_site(tmp_path, serve, etags=False)
    before = await site.start()
    assert site.downloads() == site.paths(*LABELS)
    site.forget_requests()

    assert await site.sync() == 6

    assert site.downloads() == []  # only the discovery document and the sidecars
    assert site.http.hits(".hash") == 3
    assert site.outcomes() == UNCHANGED
    assert site.published() == before

    site.rebuild(MORE_SPECS)  # index.json and .hash of root and s2 change, s1's stay
    assert await site.sync() == 0

    assert site.downloads() == site.paths("root", "s2")
    assert site.outcomes() == only_s2_changed(("unchanged", False))
    after = site.published()
    assert b'"cmake"' in after["index.json"]
    assert after == await site.cold()

    for label in LABELS:  # no validator at all now: downloaded again, not decoded again
        site.sidecar(label).unlink()
    site.forget_requests()
    assert await site.sync() == 6

    assert site.downloads() == site.paths(*LABELS)
    assert all(inm is None for _, inm in site.http.gets())
    assert site.outcomes() == FETCHED_NOT_DECODED
    assert site.report()["status"] == "unchanged"
    assert site.published() == after


async def test_a_sidecar_left_behind_does_not_hide_that_its_index_is_gone(
    tmp_path: Path, serve: Serve
) -> None:
    """A sidecar vouches for the bytes of its index, not for the index being there: a stack
    whose index.json was deleted (its .hash left) is missing, as in a cold sync."""
    site = await make_site(tmp_path, serve, etags=False)
    await site.start()
    site.file("s1").unlink()

    assert await site.sync() == 0

    assert site.outcomes()["s1"] == ("missing", False)
    assert await site.sync(out=tmp_path / "cold") == 0
    assert site.published() == site.published(tmp_path / "cold")


@pytest.mark.parametrize("status", [400, 403, 404, 405, 501, 503])
async def test_a_blob_the_server_will_not_head_is_asked_for(
    tmp_path: Path, serve: Serve, status: int
) -> None:
    """A HEAD answered with anything but 200 is no proof either way: a server that forbids or
    does not allow HEAD (a presigned URL is signed for GET alone), or one whose HEAD disagrees
    with its GET (404 or 503 here, the blob served all the same), is asked for the blob, here
    with its ETag. Were a HEAD 404 taken as "missing", runs would publish it and drop it in
    turn; were a HEAD 503 retried until it fails the source, a warm run would fail where a cold
    one succeeds."""
    site = await make_site(tmp_path, serve, layout="v3")
    before = await site.start()
    site.http.script(site.path("s1"), Fault(status=status))  # the next request: the HEAD
    site.forget_requests()

    assert await site.sync() == 6

    assert site.outcomes()["s1"] == ("unchanged", False)
    assert site.sent("s1") == [server_etag(site.file("s1").read_bytes())]
    assert site.published() == before


async def test_a_sidecar_trusted_index_whose_head_says_404_is_downloaded(
    tmp_path: Path, serve: Serve
) -> None:
    """Without ETags a sidecar vouches for the bytes and HEAD for the index being there: a HEAD
    404 while GET serves the index leaves it to the download, and the run publishes what a
    cold sync does (the stack is not reported missing)."""
    site = await make_site(tmp_path, serve, etags=False)
    before = await site.start()
    site.http.script(site.path("s1"), Fault(status=404))  # the next request: the HEAD
    site.forget_requests()

    assert await site.sync() == 6

    assert site.outcomes()["s1"] == ("fetched", False)
    assert site.downloads() == site.paths("s1")
    assert site.published() == before


# --- a local mirror is always hashed --------------------------------------------------------------


async def test_a_local_mirror_is_hashed_every_time_and_decoded_only_when_changed(
    tmp_path: Path,
) -> None:
    site = await make_site(tmp_path, None)
    before = await site.start()

    assert await site.sync() == 6
    assert site.outcomes() == FETCHED_NOT_DECODED  # hashed, not trusted on the sidecar's word
    assert site.published() == before

    stale = {x: site.sidecar(x).read_bytes() for x in LABELS}
    site.rebuild(MORE_SPECS)
    for label, old in stale.items():  # even a stale sidecar cannot hide the change
        site.sidecar(label).write_bytes(old)

    assert await site.sync() == 0
    assert site.outcomes() == only_s2_changed(("fetched", False))
    after = site.published()
    assert b'"cmake"' in after["index.json"]
    assert after == await site.cold()


def write_after_hashing(
    monkeypatch: pytest.MonkeyPatch, target: Path, content: bytes, times: int
) -> None:
    """Have a writer replace ``target`` (a local index) with ``content`` just after the crawler
    hashed it, the first ``times`` times: the bytes then decoded are not the bytes hashed.
    (The n-th time, ``content`` ends with n - 1 more spaces: other bytes, the same index.)"""
    real = LocalFolder.hash_file
    done: list[Path] = []

    def hash_then_write(location: str, path: Path, limit: int) -> object:
        hashed = real(location, path, limit)
        if path == target.resolve() and len(done) < times:
            new = path.with_name("index.json.new")
            new.write_bytes(content + b" " * len(done))
            done.append(new.replace(path))  # as rsync does: a new file renamed over the old
        return hashed

    monkeypatch.setattr(LocalFolder, "hash_file", staticmethod(hash_then_write))


async def test_a_local_index_replaced_while_read_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary of what was decoded is cached under the SHA-256 of what was hashed: if
    the file was replaced in between, that cache entry would lie, to this branch and to any
    other whose index has those bytes. The file is read again; the output is a cold sync's."""
    root = tmp_path / "mirror"
    build_mirror(root, (SynthRef("aaa", SPECS), SynthRef("bbb", SPECS)))
    s1, s2 = (root / f"aaa/{label}/build_cache/index.json" for label in ("s1", "s2"))
    assert s1.read_bytes() == (root / "bbb/s1/build_cache/index.json").read_bytes()
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(root), tmp_path / "out")))
    sync = ["sync", "--config", str(config), "-q"]
    write_after_hashing(monkeypatch, s1, s2.read_bytes(), times=1)

    assert await main_async([*sync, "--branch=aaa"]) == 0

    monkeypatch.undo()
    for branch, code in (("aaa", 6), ("bbb", 0)):  # bbb's s1 has the bytes aaa's had
        assert await main_async([*sync, f"--branch={branch}"]) == code
        assert await main_async([*sync, f"--branch={branch}", f"--output={tmp_path}/cold"]) == 0
        published = tree_bytes(tmp_path / "out" / branch)
        assert published.keys() == tree_bytes(tmp_path / "cold" / branch).keys()
        cold = undated_bytes(tmp_path / "cold" / branch)
        assert all(published[k] == cold[k] for k in cold)


def _half(target: Path) -> None:
    with target.open("r+b") as file:  # in place: the same file, half of it (``cp``)
        file.truncate(target.stat().st_size // 2)


def _pipe(target: Path) -> None:
    pipe = target.with_name("pipe")
    os.mkfifo(pipe)
    pipe.replace(target)  # by a rename: another file, that no reader may wait on


@pytest.mark.parametrize("spoil", [_half, _pipe], ids=["half-written", "a-named-pipe"])
async def test_a_local_index_spoilt_when_decoded_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: Callable[[Path], None]
) -> None:
    """Spoilt after its hashing, an index may not even decode, or (a named pipe) would make
    the decoding process wait for a writer for ever: that is no reason to fail it, nor to hang.
    Read again, it is whole."""
    site = await make_site(tmp_path, None)
    await site.start()
    site.rebuild(MORE_SPECS)  # s2 changes: it must be decoded
    target = site.file("s2").resolve()
    whole = target.read_bytes()
    real = LocalFolder.hash_file
    hashed: list[Path] = []

    def hash_then_spoil(location: str, path: Path, limit: int) -> object:
        if path == target and hashed:
            target.unlink()
            target.write_bytes(whole)  # the writer is done by the next read
        result = real(location, path, limit)
        if path == target and not hashed:
            hashed.append(path)
            spoil(target)
        return result

    monkeypatch.setattr(LocalFolder, "hash_file", staticmethod(hash_then_spoil))

    assert await site.sync() == 0

    assert len(hashed) == 1 and target.is_file()
    assert site.outcomes()["s2"] == ("fetched", True)
    assert site.published() == await site.cold()


async def test_a_local_index_that_keeps_changing_fails_its_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = await make_site(tmp_path, None)
    before = await site.start()
    site.rebuild(MORE_SPECS)  # s2 changes: it must be decoded
    write_after_hashing(monkeypatch, site.file("s2"), site.file("s2").read_bytes(), times=3)

    assert await site.sync() == 4

    s2 = site.source("s2")
    assert s2["status"] == "failed"
    assert s2["error"].endswith(": changed while it was being read after 3 attempts")
    assert site.published() == before


async def test_a_local_v3_blob_is_hashed_too(tmp_path: Path) -> None:
    """README: "a local mirror is always hashed". A blob rewritten in place (same name, other
    bytes) fails its source on a cold sync (the name is its checksum), so it must on a warm one:
    trusting the name would report "nothing changed" (exit 6) for a mirror that is broken."""
    site = await make_site(tmp_path, None, layout="v3")
    before = await site.start()
    blob = site.file("s1")
    checksum = blob.name
    blob.write_bytes(site.file("s2").read_bytes())
    assert await site.sync(out=tmp_path / "cold") == 4  # what a cold sync says

    assert await site.sync() == 4

    s1 = site.source("s1")
    assert s1["status"] == "failed"
    assert f"expected {checksum}" in s1["error"]
    assert site.published() == before


# --- damage to .crawler/ or to the published index ------------------------------------------------


def delete(path: Path) -> None:
    """Remove a file or a folder."""
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def truncate(path: Path) -> None:
    """Cut a file, or every file of a folder, to half its size."""
    for file in [path] if path.is_file() else sorted(path.rglob("*")):
        if file.is_file():
            data = file.read_bytes()
            file.write_bytes(data[: len(data) // 2])


DAMAGE: dict[str, Callable[[Path], None]] = {"deleted": delete, "truncated": truncate}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "what", "how", "code", "outcomes"),
    [
        # summaries lost: the validators prove nothing any more, the indexes are read again
        ("v2", "cache", "deleted", 6, FETCHED_AND_DECODED),
        # summaries unreadable, but not needed yet (the branch state has their counts)
        ("v2", "cache", "truncated", 6, UNCHANGED),
        ("v3", "cache", "truncated", 6, UNCHANGED),
        # the last publish is forgotten: rebuilt from the cached summaries (v2 indexes are
        # downloaded to learn their checksum, v3 blobs name theirs), to the very bytes
        # published: nothing is swapped in, only the state is saved again
        ("v2", "state", "truncated", 6, FETCHED_NOT_DECODED),
        ("v3", "state", "deleted", 6, UNCHANGED),
    ],
)
async def test_damaged_crawler_files_are_survived_and_the_output_stays_a_cold_syncs(
    tmp_path: Path,
    serve: Serve,
    layout: str,
    what: str,
    how: str,
    code: int,
    outcomes: Outcomes,
) -> None:
    """Damage ``.crawler/<what>`` before a sync of the same mirror, then again before a sync of
    a changed one: that one rebuilds the branch, so it needs every summary, including s1's
    (unchanged on the mirror and proven so by its validator)."""
    site = await make_site(tmp_path, serve, layout=layout)
    before = await site.start()
    damaged = site.out / ".crawler" / what
    DAMAGE[how](damaged)

    assert (await site.sync(), site.outcomes()) == (code, outcomes)
    assert site.published() == before

    DAMAGE[how](damaged)
    site.rebuild(MORE_SPECS)

    assert (await site.sync(), site.report()["error"]) == (0, None)
    after = site.published()
    assert b'"cmake"' in after["index.json"]
    assert after == await site.cold()

    assert (await site.sync(), site.outcomes()) == (6, UNCHANGED)  # and warm again


async def test_a_deleted_or_damaged_published_index_is_republished(
    tmp_path: Path, serve: Serve
) -> None:
    site = await make_site(tmp_path, serve)
    before = await site.start()
    index = site.out / BRANCH / "index.json"

    for how, damage in DAMAGE.items():
        damage(index)

        assert (how, await site.sync()) == (how, 0)

        assert site.report()["status"] == "published"
        assert site.outcomes() == UNCHANGED  # the inputs were proven current: no download
        assert site.published() == before

    assert await site.sync() == 6


def _altered(path: Path) -> None:
    """The same size, one byte other: what only its SHA-256 tells."""
    data = bytearray(path.read_bytes())
    data[-3] = ord("0") if data[-3] != ord("0") else ord("1")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", sorted(DAMAGE))
async def test_a_deleted_or_damaged_links_json_is_republished(
    tmp_path: Path, serve: Serve, how: str
) -> None:
    """links.json was not among the files a sync checks: deleted or cut, the branch stayed
    "current" (exit 6, also with --force) while verify failed it and find --links could not
    read it. A warm run checks its size; a rebuild (the state gone) its bytes."""
    site = await make_site(tmp_path, serve)
    before = await site.start()
    links = site.out / BRANCH / "links.json"
    DAMAGE[how](links)

    assert await site.sync() == 0
    assert site.report()["status"] == "published"
    assert site.outcomes() == UNCHANGED  # proven current: no download
    assert site.published() == before
    assert verify_branch(site.out / BRANCH, schema=False) == []

    state = site.out / ".crawler" / "state" / f"{BRANCH}.json"
    older = {k: v for k, v in json.loads(state.read_bytes()).items() if "links" not in k}
    state.write_text(json.dumps(older))  # as 0.4.0 wrote it before links were recorded
    DAMAGE[how](links)
    assert await site.sync() == 0
    assert site.published() == before

    shutil.rmtree(site.out / ".crawler" / "state")
    _altered(links)
    assert await site.sync() == 0  # rebuilt: its bytes are not those it would write
    assert site.published() == before
    assert await site.sync() == 6


async def test_an_index_json_replaced_by_a_link_is_not_taken_for_the_published_one(
    tmp_path: Path, serve: Serve
) -> None:
    """index.json as a link to the very bytes published: the sync said "current" (exit 6),
    while verify failed the folder and the next change stopped on it. The link's content is
    another file's to change: the branch is rebuilt, and its publish refuses to delete what
    it did not write (exit 4), as verify says; nothing is deleted."""
    site = await make_site(tmp_path, serve)
    await site.start()
    index = site.out / BRANCH / "index.json"
    copy = tmp_path / "index-copy.json"
    published = index.read_bytes()
    shutil.copyfile(index, copy)
    index.unlink()
    index.symlink_to(copy)
    assert verify_branch(site.out / BRANCH, schema=False) != []

    assert await site.sync() == 4
    assert "holds index.json, which the crawler did not write" in site.report()["error"]
    assert index.is_symlink() and copy.read_bytes() == published


async def test_deleted_damaged_or_extra_published_pages_are_republished(
    tmp_path: Path, serve: Serve
) -> None:
    """The pages are published files as much as index.json: one deleted or altered, or one
    more, and the branch is published again (from the cache: nothing is downloaded)."""
    site = await make_site(tmp_path, serve)
    before = await site.start()
    pages = site.out / BRANCH / "pages"
    damages: dict[str, Callable[[], object]] = {
        "deleted": (pages / "zlib" / "specs.md").unlink,
        "altered": lambda: (pages / "zlib" / "specs.md").write_text("---\n---"),
        "a folder deleted": lambda: shutil.rmtree(pages / "hdf5"),
        "one more": lambda: shutil.copytree(pages / "zlib", pages / "zlib2"),
    }
    for how, damage in damages.items():
        damage()

        assert (how, await site.sync()) == (how, 0)

        assert site.report()["status"] == "published"
        assert site.outcomes() == UNCHANGED
        assert site.published() == before

    assert await site.sync() == 6
    # What is not a page does not count: Finder's litter, a note, a folder without a page
    (pages / ".DS_Store").write_bytes(b"")
    (pages / "zlib" / ".DS_Store").write_bytes(b"")
    (pages / "notes.txt").write_text("mine")
    (pages / "photos").mkdir()
    assert await site.sync() == 6


async def test_pages_added_to_a_branch_published_without_them_are_removed(
    tmp_path: Path, serve: Serve
) -> None:
    """A branch published as json alone holds no page: one added to it since, and the branch
    is published again as a cold sync would publish it (from the cache: nothing is
    downloaded). A pages folder without a page is not minded, as within published pages."""
    site = await make_site(tmp_path, serve)
    assert await site.sync("--format=json") == 0
    cold = site.published()
    pages = site.out / BRANCH / "pages"
    (pages / "zz-extra").mkdir(parents=True)
    (pages / "zz-extra" / "specs.md").write_text("---\n---")

    assert await site.sync("--format=json") == 0

    assert site.report()["status"] == "published"
    assert site.outcomes() == UNCHANGED
    assert not pages.exists()
    assert site.published() == cold

    pages.mkdir()
    (pages / "notes.txt").write_text("mine")
    assert await site.sync("--format=json") == 6


async def test_a_branch_without_packages_stays_unchanged(tmp_path: Path, serve: Serve) -> None:
    """Published with --force (an empty root is refused otherwise), a branch has no pages
    folder at all: that is its pages as published, and the next run finds it unchanged."""
    site = await make_site(tmp_path, serve)
    site.rebuild(())
    assert await site.sync("--force") == 0
    assert not (site.out / BRANCH / "pages").exists()

    assert await site.sync() == 6


# --- the output formats and the mirror are inputs too ---------------------------------------------


async def test_adding_pages_to_an_unchanged_mirror_rebuilds_the_branch(
    tmp_path: Path, serve: Serve
) -> None:
    site = await make_site(tmp_path, serve)
    assert await site.sync("--format=json") == 0
    index = (site.out / BRANCH / "index.json").read_bytes()
    assert not (site.out / BRANCH / "pages").exists()
    assert await site.sync("--format=json") == 6

    assert await site.sync("--format=json,pages") == 0

    assert site.report()["status"] == "published"
    assert site.outcomes() == UNCHANGED
    pages = sorted(p.parent.name for p in (site.out / BRANCH / "pages").glob("*/specs.md"))
    assert pages == ["hdf5", "py-numpy", "zlib"]
    assert (site.out / BRANCH / "index.json").read_bytes() == index
    assert site.published() == await site.cold()

    assert await site.sync("--format=json") == 6  # a branch keeps its formats
    assert await site.sync("--format=json", "--prune-formats") == 0  # unless pruned
    assert not (site.out / BRANCH / "pages").exists()


async def test_the_same_content_from_another_mirror_is_published_under_its_name(
    tmp_path: Path, serve: Serve
) -> None:
    """``index.json`` names the mirror (``"mirror"``), so a cold sync from another mirror
    serving the same files writes other bytes, and so must an incremental one."""
    site = await make_site(tmp_path, serve)
    await site.start()
    other = await serve(site.mirror)

    code = await site.sync(f"--mirror={other.url}")

    index = json.loads((site.out / BRANCH / "index.json").read_bytes())
    assert (code, index["mirror"]) == (0, other.url)


async def test_a_branch_that_keeps_being_refused_does_not_grow_the_cache(
    tmp_path: Path,
) -> None:
    """The cache keeps what branch states refer to and what the latest run read. A branch
    refused night after night (or failing) used to keep every summary it ever decoded, since
    the cache was pruned only when a branch was published."""
    site = await make_site(tmp_path, None)
    await site.start()
    cache = site.out / ".crawler" / "cache"
    counts = []
    for night in range(3):
        site.rebuild((SynthSpec(f"tool{night}", "1.0", stacks=("s1", "s2")),))
        assert await site.sync() == 4  # refused by the gate: 1 spec against 3
        cached = {p.name.split("-", 1)[1].split(".", 1)[0] for p in cache.glob("*-*")}
        assert {s["sha256"] for s in site.report()["sources"]} <= cached  # for the next try
        counts.append(len(cached))
    assert counts[0] == counts[1] == counts[2], counts


async def test_a_cache_that_cannot_be_written_or_read_costs_no_publish(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cache is expendable: when it cannot be written (a full disk) or read (here
    ``cache_dir`` names a folder that is not there), the run goes on without it. It used to
    fail the branch, blaming the mirror ("root index unusable: cannot write .../cache/..."), or
    to end in an internal error when an unreadable summary could not be deleted either."""
    site = await make_site(tmp_path, None)
    await site.start()
    settings = yaml.safe_load(site.config.read_text())
    settings["cache_dir"] = str(tmp_path / "not-mounted" / "cache")
    site.config.write_text(yaml.safe_dump(settings))
    site.rebuild(MORE_SPECS)
    capsys.readouterr()

    assert await site.sync() == 0

    assert site.published() == await site.cold()
    err = capsys.readouterr().err
    assert "cannot cache summaries (the next run decodes them again)" in err
    assert "internal error" not in err


def test_a_cache_that_cannot_be_looked_at_has_nothing(tmp_path: Path) -> None:
    """``Path.is_file`` ignores only some errors (a missing file, a file for a folder): any
    other (a folder this user may not search, a name too long) made a source fail."""
    store = Store(tmp_path / "out")
    store.cache.mkdir(parents=True)
    assert store.has("stack", "x" * 300) is False  # ENAMETOOLONG
    assert store.has("stack", None) is False


async def test_cache_files_of_another_version_are_neither_read_nor_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.1 cached a summary as ``<kind>-<sha256>.msgpack``; later versions cache the workers'
    bytes as ``<kind>-<sha256>.<version>.parts.msgpack``. An old file for the very bytes the
    mirror serves is not read (no warning, nothing dropped), and the next prune deletes it with
    a temporary file a crash left, when recorded as written; a file the crawler did not record
    writing is not its to delete, however it is named."""
    site = await make_site(tmp_path, None)
    await site.start()
    cache = site.out / ".crawler" / "cache"
    current = sorted(p.name for p in cache.glob("*-*"))
    assert current and all(name.endswith(".parts.msgpack") for name in current)
    (s1_sha,) = [s["sha256"] for s in site.report()["sources"] if s["label"] == "s1"]
    old = cache / f"stack-{s1_sha}.msgpack"  # s1 stays unchanged: its summary is needed
    old.write_bytes(b"\x82\xa4size\x01\xa7summary\xc0")  # a 0.1-style map
    stray = cache / f".root-{s1_sha}.0.3.0.parts.msgpack.0badc0de.tmp"
    stray.write_bytes(b"")
    with (cache / WRITTEN).open("a") as written:
        written.write(f"{old.name}\n{stray.name}\n")
    foreign = cache / "notes.txt"
    foreign.write_text("mine")
    unrecorded = cache / f"stack-{'0' * 64}.0.1.0.parts.msgpack"
    unrecorded.write_text("mine")

    site.rebuild(MORE_SPECS)
    assert await site.sync() == 0
    assert site.outcomes() == only_s2_changed(("fetched", False))
    assert "dropping unreadable cached summary" not in capsys.readouterr().err
    assert not old.exists() and not stray.exists()
    assert foreign.read_text() == unrecorded.read_text() == "mine"
    kept = [p for p in cache.iterdir() if p not in (foreign, cache / WRITTEN)]
    assert all(p.name.endswith(".parts.msgpack") for p in kept)


@pytest.mark.parametrize("upgrade", ["version", "rules"])
async def test_summaries_cached_by_another_version_are_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upgrade: str
) -> None:
    """Another version, or a build whose rules summarise a record otherwise (``SUMMARY_RULES``),
    may check or render records differently: after an upgrade, a summary cached for the same
    bytes is not reused (nor is the state), and the next prune deletes it. The upgrade is
    played here by changing the version the crawler says, or its rules."""
    site = await make_site(tmp_path, None)
    await site.start()
    cache = site.out / ".crawler" / "cache"
    older = sorted(cache.glob("*-*"))
    if upgrade == "version":
        monkeypatch.setattr(crawler, "__version__", "99.0")
        monkeypatch.setattr(crawler.output.state, "__version__", "99.0")
    else:
        monkeypatch.setattr(crawler.decode.records, "SUMMARY_RULES", 99)

    site.rebuild(MORE_SPECS)
    assert await site.sync() == 0

    assert site.outcomes() == FETCHED_AND_DECODED  # s1 too, although its bytes are cached
    assert not any(path.exists() for path in older)
    made = crawler.decode.records.made_by()
    rules = crawler.decode.records.SUMMARY_RULES
    assert made == (
        f"99.0+rules{rules}" if upgrade == "version" else f"{crawler.__version__}+rules99"
    )
    assert all(p.name.endswith(f".{made}.parts.msgpack") for p in cache.glob("*-*"))


class _WriterBetweenShards(DecodePool):
    """A decoding pool that runs the jobs in this process, one after another, and rewrites the
    root index in place after the first job of each of its first rounds: the race of a mirror
    being updated while its root is read, made certain. (The jobs are the real ones; only where
    they run differs.)"""

    def __init__(self, path: Path, versions: list[bytes]) -> None:
        super().__init__(2)
        self.path, self.versions, self.jobs = path, versions, 0

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    async def run(self, job: Callable[..., bytes], *args: object) -> bytes:
        result = job(*args)
        if Path(str(args[0])).samefile(self.path):
            self.jobs += 1
            if self.jobs % self.workers == 1 and self.versions:
                with self.path.open("r+b") as file:  # in place, as `cp` does
                    file.truncate(0)
                    file.write(self.versions.pop(0))
        return result


async def test_a_local_root_rewritten_between_its_shards_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gzip root is read whole by each shard, one after the other. Rewritten in between with
    a record less, the second shard reads records the first one read too; the root is then read
    whole by both again, and rewritten again in between. That is the mirror changing, not a bug
    of the crawler: the root is read again, as any local file that changed while it was read."""
    site = await make_site(tmp_path, None)
    await site.start()
    root = site.file("root").resolve()
    installs = json.loads(index_document(SPECS, 8))["database"]["installs"]
    versions: list[bytes] = []
    while len(versions) < 3:  # the root, then as the writer leaves it twice
        versions.append(
            gzip.compress(
                json.dumps({"database": {"version": "8", "installs": installs}}).encode(),
                mtime=0,
            )
        )
        first = next(iter(installs))  # shard 1 of the file without it holds keys of shard 0
        installs = {k: v for k, v in installs.items() if k != first}
        for record in installs.values():  # still a valid index: no edge to the record dropped
            deps = record["spec"].get("dependencies", [])
            record["spec"]["dependencies"] = [d for d in deps if d["hash"] != first]
    assert len(installs) >= 3
    root.write_bytes(versions.pop(0))
    monkeypatch.setattr(
        crawler.sync.sources, "DecodePool", lambda workers: _WriterBetweenShards(root, versions)
    )

    assert await site.sync() == 0

    assert not versions  # both rewrites happened
    assert site.outcomes()["root"] == ("fetched", True)
    monkeypatch.undo()
    assert site.published() == await site.cold(fresh=True)


@pytest.mark.parametrize("step", ["merge_root", "prepare_root", "finish"])
async def test_running_out_of_memory_in_the_crawler_is_reported_as_such(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    """A MemoryError in the crawler itself (``ulimit -v``) was reported as an "internal
    error", with a traceback, which the README says means a bug. Joining a root's shards, it
    fails that source as out of memory; preparing the root for consolidation (in a thread) or
    building the packages, it fails the branch so. The output published before stays."""
    site = await make_site(tmp_path, None)
    await site.start()
    before = tree_bytes(site.out)
    site.rebuild(MORE_SPECS)

    def no_memory(*args: object) -> None:
        raise MemoryError

    owner = {
        "merge_root": crawler.sync.decoding,
        "prepare_root": crawler.build.consolidate,
        "finish": crawler.build.consolidate.Consolidator,
    }[step]
    monkeypatch.setattr(owner, step, no_memory)
    capsys.readouterr()

    assert await site.sync() == 4

    err = capsys.readouterr().err
    if step == "merge_root":
        assert f"root: failed (out of memory decoding {site.mirror.as_uri()}/" in err, err
    else:
        assert f"branch {BRANCH} failed: out of memory building its output" in err, err
    assert "internal error" not in err and "Traceback" not in err
    assert tree_bytes(site.out) == before


async def test_a_run_stopped_after_its_swap_is_not_published_again(tmp_path: Path) -> None:
    """A run killed (SIGKILL, a power cut, a supervisor's timeout) after swapping its branch in
    but before saving the state leaves the new output with the old state. The next run over
    the same mirror rebuilt the very same index and swapped it in again (exit 0), replacing
    the real changes.json by one listing no change. It now finds the output current (exit 6),
    keeps every published file, and saves the state."""
    site = await make_site(tmp_path, None)
    await site.start()
    state = site.out / ".crawler" / "state" / f"{BRANCH}.json"
    stale = state.read_bytes()
    site.rebuild(MORE_SPECS)
    assert await site.sync() == 0
    published = tree_bytes(site.out / BRANCH)
    changed = json.loads(published["changes.json"])["totals"]
    assert changed["added"] > 0
    state.write_bytes(stale)  # as if the run had stopped just after its swap

    assert await site.sync() == 6

    assert tree_bytes(site.out / BRANCH) == published
    assert site.report()["status"] == "unchanged"
    assert site.report()["error"] is None
    assert state.read_bytes() != stale
    assert await site.sync() == 6  # the state saved: current at once, nothing rebuilt
    assert verify_branch(site.out / BRANCH, schema=False) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["changes.json", "report.json"])
@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda path: path.write_bytes(path.read_bytes()[:20]), id="truncated"),
        pytest.param(lambda path: path.write_text("[]"), id="not-an-object"),
        pytest.param(
            lambda path: path.write_text(path.read_text().replace(BRANCH, "other", 1)),
            id="another-branch",
        ),
        pytest.param(
            lambda path: path.write_bytes(b'{"branch": "develop", "note": "\xff"}'),
            id="not-utf-8",
        ),
        pytest.param(
            lambda path: path.write_text('{"branch": "develop", "x": ' + "[" * 100_000 + "]}"),
            id="nested-too-deeply",
        ),
    ],
)
async def test_a_damaged_companion_of_index_json_is_published_again(
    tmp_path: Path, name: str, damage: Callable[[Path], None]
) -> None:
    """report.json and changes.json are checked like index.json: damaged, sync found the branch
    current for ever (exit 6) while verify failed it on every run."""
    site = await make_site(tmp_path, None)
    await site.start()
    damage(site.out / BRANCH / name)
    assert verify_branch(site.out / BRANCH, schema=False) != []

    assert await site.sync() == 0

    assert site.report()["status"] == "published"
    assert verify_branch(site.out / BRANCH, schema=False) == []
    assert site.published() == await site.cold(fresh=True)
    assert await site.sync() == 6


@pytest.mark.parametrize("damage", sorted(DAMAGE))
async def test_the_changes_of_a_repair_are_those_since_the_last_publish(
    tmp_path: Path, damage: str
) -> None:
    """A branch whose index.json was deleted or damaged is rebuilt; its changes.json claimed a
    first publish, every spec "added". They are now the changes since the last publish, which
    the cached summaries of its sources tell: what a run without the damage writes."""
    site = await make_site(tmp_path, None)
    await site.start()
    clean = tmp_path / "clean"
    assert await site.sync(out=clean) == 0
    site.rebuild(MORE_SPECS)
    assert await site.sync(out=clean) == 0
    DAMAGE[damage](site.out / BRANCH / "index.json")

    assert await site.sync() == 0

    changes = (site.out / BRANCH / "changes.json").read_bytes()
    assert json.loads(changes)["first_publish"] is False
    assert changes == (clean / BRANCH / "changes.json").read_bytes()
    assert site.published() == site.published(clean)
