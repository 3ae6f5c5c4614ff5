"""Reading an index in pieces gives exactly what reading it whole gives.

:mod:`crawler.decode.chunks` cuts an uncompressed index into runs of whole records without parsing
it, and :mod:`crawler.decode.read` decodes each run on its own. When a cut cannot be trusted (a
piece that does not decode, a key repeated across pieces) the file is read whole; when records point
at a hash that no shard holds, the shards run again with that hash marked missing. These tests
hold both readings to the same answer:

* ``pieces()`` covers every record exactly once, whatever the split and the JSON's whitespace;
* ``layout()`` refuses any other envelope, and such files still give the right summary or error;
* root and stack summaries read in pieces (tiny ``PIECE_BYTES``, 1 to 3 shards) equal whole reads;
* the fallbacks: a boundary-like pattern inside a record, a record of the wrong shape, a
  dependency absent from the index or held by another shard, a key repeated in two pieces;
* :class:`SourceReader` reading a local file, its decoding jobs run in this process (so that
  a patched ``PIECE_BYTES`` applies), which also shows the rounds its retry loop ran;
* a real sync over loopback HTTP with three decoding workers. Those workers are started by
  forkserver and keep the default ``PIECE_BYTES``: only the fallbacks can be made to reach them.

A boundary-like text inside a JSON string cannot fool the cut in a valid file (its quotes are
escaped); the false boundaries of a valid file are objects keyed by hash-like strings inside a
record, and a string with unescaped quotes makes the file invalid JSON, which must then fail as
a whole read fails.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import itertools
import json
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror, generate_specs, index_document
from bench.synth import make_hash as _hash
from crawler.cli.command import main_async
from crawler.config import Config
from crawler.decode import chunks
from crawler.decode.pool import DecodePool
from crawler.decode.records import mend_surrogates
from crawler.decode.root import (
    load_root_shard,
    merge_root,
    root_gaps,
    summarize_root_part,
    summarize_root_shard,
)
from crawler.decode.shard import RootShard
from crawler.decode.stack import load_summary, summarize_stack
from crawler.decode.validate import InvalidRecord, SourceSummary
from crawler.errors import IndexFormatError, UnsupportedVersionError
from crawler.mirror.discovery import Source
from crawler.mirror.fetch import Fetcher
from crawler.output.state import Store
from crawler.sync import decoding
from crawler.sync.outcome import SourceOutcome
from crawler.sync.reporting import LogReporter
from crawler.sync.sources import SourceReader

from .conftest import ServeMirror, fast_config
from .schema import assert_valid_index

URL = "https://mirror.test/build_cache/index.json"
BUCKET = "s3://spack-binaries/"
Installs = dict[str, Any]
#: What a summary tells a user, independent of the order in which shards listed the records.
Facts = dict[str, object]
#: One round of SourceReader's loop: the ``missing`` and ``whole`` its shards were given.
Round = tuple[tuple[str, ...], bool]

#: How the JSON is laid out (``json.dumps`` arguments); "tabs-crlf" also ends lines with \r\n.
STYLES: dict[str, dict[str, Any]] = {
    "compact": {"separators": (",", ":")},
    "spaced": {},
    "indented": {"indent": 2},
    "tabs-crlf": {"indent": "\t"},
}


# --- building documents ------------------------------------------------------------------------


def _synthetic(db: int, packages: int = 100, seed: int = 5) -> Installs:
    """The records of a synthetic root index (a few hundred for 100 packages)."""
    specs = generate_specs(seed, packages, stacks=("s1", "s2"), annotation_fraction=0.3)
    installs: Installs = json.loads(index_document(specs, db))["database"]["installs"]
    return installs


def _envelope(installs: Installs, version: object = "8", *, version_last: bool = False) -> Any:
    """Spack's envelope around ``installs`` (or, with ``version_last``, its keys swapped)."""
    if version_last:
        return {"database": {"installs": installs, "version": version}}
    return {"database": {"version": version, "installs": installs}}


def _dump(document: object, style: str = "spaced") -> bytes:
    text = json.dumps(document, **STYLES[style])
    if style == "tabs-crlf":
        text = text.replace("\n", "\r\n")  # json.dumps escapes newlines inside strings
    return text.encode()


def _index(installs: Installs, version: object = "8", style: str = "spaced") -> bytes:
    return _dump(_envelope(installs, version), style)


def _rename(data: bytes, alias: str, key: str) -> bytes:
    """Give the record written under ``alias`` the key ``key`` (which may then occur twice)."""
    quoted = f'"{alias}"'.encode()
    assert data.count(quoted) == 1
    return data.replace(quoted, f'"{key}"'.encode())


def _edge(db: int, name: str, target: str, virtuals: Sequence[str] = ()) -> dict[str, Any]:
    """A dependency edge as DB ``db`` writes it."""
    if db == 6:
        return {"name": name, "hash": target, "type": ["link"]}
    return {
        "name": name,
        "hash": target,
        "parameters": {"deptypes": ["link"], "virtuals": list(virtuals)},
    }


def _depend(installs: Installs, key: str, edge: dict[str, Any], *, first: bool = False) -> None:
    edges = installs[key]["spec"].setdefault("dependencies", [])
    edges.insert(0 if first else len(edges), edge)


def _built(installs: Installs) -> list[str]:
    """Keys of the records in the build cache, in the document's order."""
    return [k for k, r in installs.items() if r["in_buildcache"]]


def _spoil(installs: Installs, db: int) -> dict[str, str]:
    """Make some records invalid in every way a root index can; returns key -> reason fragment."""
    keys = _built(installs)
    ghost = _hash("ghost")
    bad_key = "Z" * 32
    installs[bad_key] = copy.deepcopy(installs[keys[0]])
    installs[bad_key]["spec"]["hash"] = bad_key
    installs[keys[10]]["spec"]["hash"] = _hash("another record")
    installs[keys[20]]["spec"]["name"] = "../evil"
    installs[keys[30]]["spec"]["version"] = 5
    del installs[keys[40]]["spec"]["arch"]
    _depend(installs, keys[50], _edge(db, "ghost", ghost))
    installs[keys[60]]["spec"]["version"] = "1.0\x07"
    installs[keys[70]]["spec"]["parameters"]["languages"] = {"c": True}
    reasons = {
        bad_key: "key is not a 32-character base32 DAG hash",
        keys[10]: "differs from its key",
        keys[20]: "'../evil' is not a safe folder name",
        keys[30]: "bad record: Expected `str`, got `int` - at `$.spec.version`",
        keys[40]: "bad record: Object missing required field `arch` - at `$.spec`",
        keys[50]: f"dependency ghost/{ghost} is not in this index",
        keys[60]: "control characters",
        keys[70]: "bad record: Expected `bool | int | float | str | array`, got `object` - at "
        "`$.spec.parameters[...]`",
    }
    if db == 8:  # the compiler edge comes first and points at a record of the wrong shape
        _depend(installs, keys[80], _edge(db, "odd", keys[30], ["c"]), first=True)
        reasons[keys[80]] = f"compiler dependency odd/{keys[30]} is not a valid record"
    return reasons


def _nested_keys(count: int) -> dict[str, Any]:
    """An object keyed by hash-like strings with object values: the text between two of its
    entries is exactly what separates two records."""
    return {_hash(f"nested {i}"): {"i": i} for i in range(count)}


def _write(tmp_path: Path, data: bytes, name: str = "index.json") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


# --- reading them ------------------------------------------------------------------------------


def _shards(
    path: str, shards: int, missing: tuple[str, ...] = (), *, whole: bool = False
) -> list[RootShard]:
    return [
        load_root_shard(summarize_root_shard(path, URL, i, shards, missing, whole))
        for i in range(shards)
    ]


def _whole(path: str, shards: int = 1) -> SourceSummary:
    """A root index read whole by every shard."""
    return merge_root(_shards(path, shards, whole=True))


def _in_pieces(path: str, shards: int) -> SourceSummary:
    """A root index read in pieces, rerun with the missing hashes as SourceReader does."""
    first = _shards(path, shards)
    gaps = root_gaps(first)
    assert gaps is not None, "a key occurs in two pieces"
    if not gaps:
        return merge_root(first)
    again = _shards(path, shards, tuple(gaps))
    assert root_gaps(again) == []
    return merge_root(again)


def _attempt(path: str, shards: int) -> list[RootShard] | None:
    """Every shard read in pieces, or None when one of them raises BadCut."""
    try:
        return _shards(path, shards)
    except chunks.BadCut:
        return None


def _stack(path: str) -> SourceSummary:
    return load_summary(summarize_stack(path, URL))


def _facts(summary: SourceSummary) -> Facts:
    """What a summary says, whatever the shards it was merged from: each spec's edges are
    numbered in the order the shards were merged, so they are compared as the edges."""
    table = summary.dependencies
    return {
        "db_version": summary.db_version,
        "records": summary.records,
        "in_buildcache": summary.in_buildcache,
        "hashes": sorted(summary.hashes),
        "specs": [
            (msgspec.structs.replace(row, dependencies=()), [table[i] for i in row.dependencies])
            for row in sorted(summary.specs, key=lambda row: row.hash)
        ],
        "identities": (  # stacks only
            sorted(zip(summary.hashes, summary.identities, strict=True))
            if summary.identities
            else []
        ),
        "identity_count": len(summary.identities),
        "invalid": summary.invalid,
    }


def _span(path: str) -> chunks.Layout | None:
    with open(path, "rb") as file:
        return chunks.layout(file.fileno())


def _split(path: str, parts: int) -> list[list[tuple[int, int]]]:
    """The pieces of each part."""
    with open(path, "rb") as file:
        span = chunks.layout(file.fileno())
        assert span is not None
        return [chunks.pieces(file.fileno(), span, part, parts) for part in range(parts)]


def _piece(data: bytes, start: int, stop: int) -> Any:
    """A piece as a JSON object (read from the file's bytes, not by the code under test)."""
    return json.loads(b"{" + data[start:stop] + b"}")


def _piece_keys(path: str, parts: int) -> list[list[list[str]]]:
    """The keys of each piece of each part."""
    data = Path(path).read_bytes()
    return [[list(_piece(data, a, b)) for a, b in part] for part in _split(path, parts)]


def _cut_within(path: str, parts: int, start: int, stop: int) -> bool:
    """True when a piece ends strictly inside the bytes ``[start, stop)``."""
    return any(start < end < stop for part in _split(path, parts) for _, end in part)


def _where(data: bytes, text: bytes) -> tuple[int, int]:
    """The bytes of the only occurrence of ``text``."""
    assert data.count(text) == 1
    start = data.index(text)
    return start, start + len(text)


class _InProcess(DecodePool):
    """Runs decoding jobs in the test process (where a patched PIECE_BYTES applies), in order,
    and records their arguments."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.jobs: list[tuple[object, ...]] = []

    def start(self) -> None:
        """No processes to start."""

    async def run(self, fn: Callable[..., bytes], *args: object) -> bytes:
        self.jobs.append(args)
        return fn(*args)

    def close(self) -> None:
        """No processes to stop."""


class _DownloadsRemoved(_InProcess):
    """Removes each file before its job runs, as someone emptying ``.crawler/tmp`` would."""

    async def run(self, fn: Callable[..., bytes], *args: object) -> bytes:
        Path(str(args[0])).unlink(missing_ok=True)
        return await super().run(fn, *args)


@pytest.mark.parametrize("label", ["root", "s1"])
async def test_a_download_removed_before_it_is_decoded_is_an_output_error(
    tmp_path: Path, mirror_server: ServeMirror, label: str
) -> None:
    """It failed as an internal error, with a worker's traceback in the log: a bug, it said."""
    index = tmp_path / "mirror" / "index.json"
    index.parent.mkdir()
    index.write_bytes(index_document([], 8))
    server = await mirror_server(index.parent)
    config = Config(output=str(tmp_path / "out"), decode_workers=1)
    source = Source("develop", label, URL, f"{server.url}/index.json", "v2", None)
    dest = tmp_path / "tmp" / "develop-0.json"
    dest.parent.mkdir()
    async with Fetcher(config) as fetcher:
        store = Store(tmp_path / "out")
        reader = SourceReader(config, fetcher, store, LogReporter(), _DownloadsRemoved(1))
        outcome = await reader.read("develop", source, dest, None)
    assert outcome.status == "failed"
    assert outcome.error == f"cannot read {dest}: No such file or directory"


async def _read(tmp_path: Path, path: str, shards: int) -> tuple[SourceOutcome, list[Round]]:
    """What SourceReader makes of a root index at ``path`` (read as a local mirror's file, with
    a fresh cache), and the rounds its loop ran."""
    config = Config(output=str(tmp_path / "out"), decode_workers=shards)
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    source = Source("develop", "root", URL, Path(path).as_uri(), "v3", None)
    decoder = _InProcess(shards)
    async with Fetcher(config) as fetcher:
        reader = SourceReader(config, fetcher, Store(work / "out"), LogReporter(), decoder)
        outcome = await reader.read("develop", source, work / "index.json", None)
    rounds: list[Round] = []
    for key, jobs in itertools.groupby(decoder.jobs, key=lambda args: (args[4], args[5])):
        missing, whole = key
        assert isinstance(missing, tuple) and isinstance(whole, bool)
        assert len(list(jobs)) == shards
        rounds.append((missing, whole))
    return outcome, rounds


async def _read_root(tmp_path: Path, path: str, shards: int) -> tuple[SourceSummary, list[Round]]:
    """SourceReader's summary of a root index, and the rounds its loop ran."""
    outcome, rounds = await _read(tmp_path, path, shards)
    assert outcome.status == "fetched" and outcome.decoded, outcome.error
    assert outcome.summary is not None
    return outcome.summary, rounds


@pytest.fixture
def piece_bytes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """Set ``chunks.PIECE_BYTES`` for this test (in this process only)."""

    def set_to(size: int) -> None:
        monkeypatch.setattr(chunks, "PIECE_BYTES", size)

    yield set_to


# --- pieces(): every record once ---------------------------------------------------------------


def _assert_cover(path: str, installs: Installs, parts: int, size: int) -> int:
    """Check that the pieces of ``parts`` parts are the records, each once, in file order, and
    that none is much larger than ``size``; returns how many pieces there are."""
    data = Path(path).read_bytes()
    span = _span(path)
    assert span is not None
    split = _split(path, parts)
    flat = [piece for part in split for piece in part]
    assert flat, "even an empty installs is one (empty) piece"
    assert flat[0][0] == span.start and flat[-1][1] == span.end
    for (_, stop), (start, _) in itertools.pairwise(flat):
        assert start == stop + 1 and data[stop:start] == b","  # cut at a comma, nothing lost
    records = [item for a, b in flat for item in _piece(data, a, b).items()]
    assert records == list(installs.items())
    longest = max((len(_dump(r, "indented")) for r in installs.values()), default=0)
    assert all(stop - start <= size + 2 * longest + 64 for start, stop in flat)
    return len(flat)


@pytest.mark.slow
@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("size", [200, 1500, 6000, 4 << 20])
def test_pieces_cover_every_record_exactly_once(
    tmp_path: Path, piece_bytes: Callable[[int], None], style: str, size: int
) -> None:
    installs = _synthetic(8, packages=30)
    path = _write(tmp_path, _index(installs, style=style))
    piece_bytes(size)

    for parts in (1, 2, 3, 4, 7):
        count = _assert_cover(path, installs, parts, size)
        span = _span(path)
        assert span is not None
        if size == 4 << 20:
            assert count == parts  # a small file: one piece per part
        else:  # pieces of about PIECE_BYTES, not a few big ones
            assert count >= (span.end - span.start) // (size + 2000)


@pytest.mark.slow
@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("records", [0, 1, 4])
def test_pieces_of_an_empty_or_tiny_installs(
    tmp_path: Path, piece_bytes: Callable[[int], None], style: str, records: int
) -> None:
    installs = dict(itertools.islice(_synthetic(7, packages=3).items(), records))
    path = _write(tmp_path, _index(installs, "7", style))
    whole = _facts(_whole(path))
    assert whole["records"] == records

    for size, parts in itertools.product([1, 10, 4 << 20], [1, 2, 3, 5]):
        piece_bytes(size)
        _assert_cover(path, installs, parts, size)
        if size == 1:  # every boundary is a cut: a piece per record
            keys = [k for part in _piece_keys(path, parts) for k in part]
            assert keys == ([[k] for k in installs] or [[]])
        assert _facts(_in_pieces(path, parts)) == whole


# --- layout(): Spack's envelope, and nothing else ----------------------------------------------


@pytest.mark.parametrize("style", list(STYLES))
@pytest.mark.parametrize("version", ["6", "7", "8"])
def test_layout_finds_the_records_of_spacks_envelope(
    tmp_path: Path, style: str, version: str
) -> None:
    installs = dict(itertools.islice(_synthetic(int(version), packages=4).items(), 6))
    for tail in (b"", b"\n", b" \r\n\t"):
        path = _write(tmp_path, _index(installs, version, style) + tail)
        span = _span(path)

        assert span is not None
        data = Path(path).read_bytes()
        assert (span.version, span.size) == (version, len(data))
        assert json.loads(b"{" + data[span.start : span.end] + b"}") == installs


def _plain() -> Installs:
    return _synthetic(8, packages=20)


ENVELOPES: dict[str, Callable[[Installs], bytes]] = {
    "gzip data": lambda i: gzip.compress(_index(i)),
    "version after installs": lambda i: _dump(_envelope(i, version_last=True)),
    "extra key before version": lambda i: _dump(
        {"database": {"extra": {}, "version": "8", "installs": i}}
    ),
    "extra key between version and installs": lambda i: _dump(
        {"database": {"version": "8", "extra": 1, "installs": i}}
    ),
    "extra scalar key after installs": lambda i: _dump(
        {"database": {"version": "8", "installs": i, "extra": 1}}
    ),
    "extra key after database": lambda i: _dump(
        {"database": {"version": "8", "installs": i}, "x": 1}
    ),
    "compact, version after installs": lambda i: _dump(_envelope(i, version_last=True), "compact"),
}


@pytest.mark.parametrize("envelope", list(ENVELOPES))
def test_other_envelopes_have_no_layout_and_are_read_whole(
    tmp_path: Path, piece_bytes: Callable[[int], None], envelope: str
) -> None:
    installs = _plain()
    expected_root = _facts(_whole(_write(tmp_path, _index(installs), "plain.json")))
    expected_stack = _facts(_stack(_write(tmp_path, _index(installs), "plain.json")))
    path = _write(tmp_path, ENVELOPES[envelope](installs))
    piece_bytes(300)

    assert _span(path) is None
    for shards in (1, 3):
        parts = _shards(path, shards)
        assert root_gaps(parts) == []
        assert _facts(merge_root(parts)) == expected_root
    assert _facts(_stack(path)) == expected_stack


async def test_an_object_after_installs_is_read_whole(
    tmp_path: Path, piece_bytes: Callable[[int], None]
) -> None:
    """``"installs": {...}, "extra": {}`` ends in three braces like Spack's envelope: whether or
    not layout() accepts it, no piece read as records may include the extra key."""
    installs = _plain()
    expected_root = _facts(_whole(_write(tmp_path, _index(installs), "plain.json")))
    expected_stack = _facts(_stack(_write(tmp_path, _index(installs), "plain.json")))
    document = {"database": {"version": "8", "installs": installs, "extra": {}}}
    piece_bytes(300)

    for style in STYLES:
        path = _write(tmp_path, _dump(document, style))
        for shards in (1, 3):
            parts = _attempt(path, shards)
            assert parts is None or _span(path) is None
            assert _facts(_whole(path, shards)) == expected_root
        assert _facts(_stack(path)) == expected_stack
        summary, _ = await _read_root(tmp_path, path, 3)
        assert _facts(summary) == expected_root


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


BROKEN: dict[str, tuple[Callable[[bytes], bytes], type[IndexFormatError], str]] = {
    "numeric version": (
        lambda d: d.replace(b'"version": "8"', b'"version": 8'),
        UnsupportedVersionError,
        "unsupported database version 8",
    ),
    "unknown version": (
        lambda d: d.replace(b'"version": "8"', b'"version": "5"'),
        UnsupportedVersionError,
        "unsupported database version '5'",
    ),
    "unknown version, gzip data": (
        lambda d: gzip.compress(d.replace(b'"version": "8"', b'"version": "5"')),
        UnsupportedVersionError,
        "unsupported database version '5'",
    ),
    "trailing garbage": (lambda d: d + b"x", IndexFormatError, "not valid JSON"),
    "a fourth brace": (lambda d: d + b"}", IndexFormatError, "not valid JSON"),
    "truncated": (_truncated, IndexFormatError, "truncated JSON"),
    "truncated in the trailer": (lambda d: d[:-1], IndexFormatError, "truncated JSON"),
    "empty": (lambda d: b"", IndexFormatError, "empty body"),
    "bad gzip data": (lambda d: gzip.compress(d)[:-20], IndexFormatError, "bad gzip data"),
    "not a database": (lambda d: b'{"installs": {}}', IndexFormatError, "not a Spack database"),
}


#: Files that must have no layout (the others end in three braces: their pieces fail to decode).
NO_LAYOUT = ("numeric version", "trailing garbage", "truncated", "empty", "not a database")


@pytest.mark.parametrize("case", list(BROKEN))
async def test_broken_files_raise_the_error_a_whole_read_raises(
    tmp_path: Path, piece_bytes: Callable[[int], None], case: str
) -> None:
    """Whether or not such a file has a layout, the user sees the same error as for a whole
    read, never a summary of part of it."""
    breaks, error, message = BROKEN[case]
    path = _write(tmp_path, breaks(_index(_plain())))
    piece_bytes(300)

    if case in NO_LAYOUT:
        assert _span(path) is None
    runs: list[Callable[[], object]] = [
        lambda: _shards(path, 3, whole=True),
        lambda: _in_pieces(path, 1),
        lambda: _in_pieces(path, 3),
        lambda: _stack(path),
    ]
    for run in runs:
        with pytest.raises(error) as raised:
            try:
                run()
            except chunks.BadCut:  # a piece that does not decode: the caller reads it whole
                _shards(path, 3, whole=True)
        assert type(raised.value) is error
        assert message in str(raised.value)
    outcome, _ = await _read(tmp_path, path, 3)
    assert outcome.status == "failed" and outcome.summary is None
    assert outcome.error is not None and message in outcome.error


# --- pieces or whole: the same summaries -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("db", [6, 7, 8])
@pytest.mark.parametrize("size", [300, 2500, 4 << 20])
def test_a_root_read_in_pieces_equals_a_whole_read(
    tmp_path: Path, piece_bytes: Callable[[int], None], db: int, size: int
) -> None:
    installs = _synthetic(db)
    reasons = _spoil(installs, db)
    path = _write(tmp_path, _index(installs, str(db)))
    whole = _facts(_whole(path))
    piece_bytes(size)

    for shards in (1, 2, 3):
        if size == 300:
            assert sum(map(len, _split(path, shards))) > 100  # really many pieces
        assert _facts(_in_pieces(path, shards)) == whole
        assert _facts(_whole(path, shards)) == whole

    # And the whole read is right: every record counted, exactly the spoilt ones left out.
    assert whole["db_version"] == str(db)
    assert whole["records"] == len(installs)
    invalid = {r.hash: r.reason for r in _whole(path).invalid}
    assert sorted(invalid) == sorted(reasons)
    for key, fragment in reasons.items():
        assert fragment in invalid[key], (key, invalid[key])
    # A record whose compiler record is invalid is invalid too: out of the specs and the hashes.
    assert whole["hashes"] == sorted(set(installs) - set(reasons))
    built = [k for k in _built(installs) if k not in reasons]
    assert [row.hash for row in _whole(path).specs] == built  # one shard: in file order
    assert whole["in_buildcache"] == len(built)


@pytest.mark.slow
@pytest.mark.parametrize("db", [6, 8])
@pytest.mark.parametrize("size", [300, 2500, 4 << 20])
def test_a_stack_read_in_pieces_equals_a_whole_read(
    tmp_path: Path, piece_bytes: Callable[[int], None], db: int, size: int
) -> None:
    installs = _synthetic(db)
    clean = _write(tmp_path, _index(installs, str(db)), "clean.json")
    reasons = _spoil(installs, db)
    spoilt = _index(installs, str(db))
    path = _write(tmp_path, spoilt)
    whole = _write(tmp_path, _dump(_envelope(installs, str(db), version_last=True)), "whole.json")
    assert _span(whole) is None
    piece_bytes(size)

    summary = _stack(path)
    assert _facts(summary) == _facts(_stack(whole))
    # What a stack states about each hash, straight from the JSON.
    clean_installs: Installs = json.loads(Path(clean).read_bytes())["database"]["installs"]
    expected = sorted((k, "\x1f".join(_identity(r["spec"]))) for k, r in clean_installs.items())
    assert _facts(_stack(clean))["identities"] == expected
    # A stack reads neither edges nor variants: those do not make a stack record invalid.
    own = {k for k, f in reasons.items() if "dependency" not in f and "parameters" not in f}
    assert sorted(r.hash for r in summary.invalid) == sorted(own)
    assert summary.records == len(installs)


def test_a_name_found_unsafe_in_one_piece_is_refused_in_every_later_one(
    tmp_path: Path, piece_bytes: Callable[[int], None]
) -> None:
    """Each piece is checked in bulk, and the names found safe before are set aside: one found
    unsafe must not be, or a second record of it in a later piece would pass."""
    installs = _synthetic(8, packages=20)
    evil = _built(installs)[:2]
    for key in evil:
        installs[key]["spec"]["name"] = "../evil"
    path = _write(tmp_path, _index(installs))
    piece_bytes(500)  # a record or so per piece
    (pieces,) = _piece_keys(path, 1)
    assert [i for i, keys in enumerate(pieces) for key in evil if key in keys] == [0, 1]

    summary = _stack(path)

    assert sorted(r.hash for r in summary.invalid) == sorted(evil)
    assert {r.reason for r in summary.invalid} == {
        "package name '../evil' is not a safe folder name"
    }
    assert len(summary.hashes) == len(installs) - 2


def _identity(spec: dict[str, Any]) -> tuple[str, str, str, str, str]:
    arch = spec["arch"]
    target = arch["target"] if isinstance(arch["target"], str) else arch["target"]["name"]
    return (spec["name"], spec["version"], arch["platform"], arch["platform_os"], target)


# --- a boundary-like pattern inside a record ---------------------------------------------------


@pytest.mark.slow
async def test_a_cut_inside_a_record_is_never_trusted(
    tmp_path: Path, piece_bytes: Callable[[int], None]
) -> None:
    """An object keyed by hashes, inside a record, holds what separates two records: a cut
    there makes the piece before it fail to decode, and the file is read whole."""
    installs = _synthetic(8, packages=30)
    expected_root = _facts(_whole(_write(tmp_path, _index(installs), "plain.json")))
    expected_stack = _facts(_stack(_write(tmp_path, _index(installs), "plain.json")))
    nested = _nested_keys(40)
    installs[_built(installs)[15]]["extra"] = nested  # a field the decoder skips
    data = _index(installs)
    path = _write(tmp_path, data)
    start, stop = _where(data, json.dumps(nested).encode())

    inside = outside = 0
    sizes = [*range(150, 1600, 50), 5000, 10_000, 20_000, 4 << 20]
    for size, shards in itertools.product(sizes, (1, 2, 3)):
        piece_bytes(size)
        cut = _cut_within(path, shards, start, stop)
        parts = _attempt(path, shards)
        assert (parts is None) == cut, (size, shards)  # a bad cut never goes unnoticed
        if parts is not None:
            gaps = root_gaps(parts)
            assert gaps is not None
            if gaps:
                parts = _shards(path, shards, tuple(gaps))
            assert _facts(merge_root(parts)) == expected_root
            outside += 1
        else:
            inside += 1
        assert _facts(_whole(path, shards)) == expected_root
        if shards == 1:
            assert _facts(_stack(path)) == expected_stack
    assert inside > 10 and outside > 3  # both cases happened

    piece_bytes(300)
    assert _cut_within(path, 3, start, stop)
    summary, rounds = await _read_root(tmp_path, path, 3)
    assert _facts(summary) == expected_root
    assert rounds == [((), False), ((), True)]


@pytest.mark.slow
def test_a_string_cannot_hold_a_record_boundary(
    tmp_path: Path, piece_bytes: Callable[[int], None]
) -> None:
    """In valid JSON the quotes of a boundary-like text inside a string are escaped, so no cut
    lands in it, and the variant is shown exactly as written."""
    installs = _synthetic(8, packages=30)
    key = _built(installs)[12]
    tricky = 'x}, "' + _hash("inside a string") + '": {'
    installs[key]["spec"]["parameters"]["tricky"] = tricky
    installs[key]["spec"]["parameters"]["list"] = [tricky, tricky]
    escaped = json.dumps(tricky).encode()
    for style in ("compact", "spaced", "indented"):
        data = _index(installs, style=style)
        path = _write(tmp_path, data)
        at = [m.start() for m in re.finditer(re.escape(escaped), data)]
        assert len(at) == 3
        whole = _whole(path)
        (row,) = [r for r in whole.specs if r.hash == key]
        assert f"tricky={tricky}" in row.variants
        assert f"list={tricky},{tricky}" in row.variants
        for size, shards in itertools.product(range(100, 1200, 50), (1, 3)):
            piece_bytes(size)
            assert not any(_cut_within(path, shards, i, i + len(escaped)) for i in at)
            assert _facts(_in_pieces(path, shards)) == _facts(whole)


async def test_a_cut_in_an_unescaped_string_gives_the_whole_read_error(
    tmp_path: Path, piece_bytes: Callable[[int], None]
) -> None:
    """A file whose string holds a raw boundary (quotes not escaped) is not JSON: a cut lands
    in the string, the piece before it does not decode, and the whole read names the error."""
    installs = _synthetic(8, packages=30)
    installs[_built(installs)[12]]["spec"]["parameters"]["tricky"] = "PLACEHOLDER"
    raw = b'"x}, "' + _hash("raw").encode() + b'": {"'
    data = _index(installs).replace(b'"PLACEHOLDER"', raw)
    path = _write(tmp_path, data)
    start, stop = _where(data, raw)
    assert _span(path) is not None

    landed = 0
    for size, shards in itertools.product(range(100, 1200, 20), (1, 2, 3)):
        piece_bytes(size)
        landed += _cut_within(path, shards, start + 1, stop - 1)
        assert _attempt(path, shards) is None  # some piece never decodes
    assert landed > 0
    reads: list[Callable[[], object]] = [lambda: _whole(path, 3), lambda: _stack(path)]
    for read in reads:
        with pytest.raises(IndexFormatError, match="not valid JSON"):
            read()
    outcome, rounds = await _read(tmp_path, path, 3)
    assert outcome.status == "failed" and outcome.summary is None
    assert outcome.error is not None and "not valid JSON" in outcome.error
    assert rounds == [((), False), ((), True)]


# --- records of the wrong shape ----------------------------------------------------------------


def test_a_record_of_the_wrong_shape_is_left_out_alone(
    tmp_path: Path, piece_bytes: Callable[[int], None]
) -> None:
    """The piece holding it is decoded again record by record: only that record is listed."""
    installs = _synthetic(8, packages=20)
    order = list(installs)
    numeric = _built(installs)[5]
    armless = order[order.index(numeric) + 1]
    installs[numeric]["spec"]["version"] = 5
    del installs[armless]["spec"]["arch"]
    path = _write(tmp_path, _index(installs))
    whole = _facts(_whole(path))
    expected = [
        InvalidRecord(numeric, "bad record: Expected `str`, got `int` - at `$.spec.version`"),
        InvalidRecord(armless, "bad record: Object missing required field `arch` - at `$.spec`"),
    ]
    expected.sort(key=lambda r: r.hash)
    assert whole["invalid"] == expected

    shared = 0
    for size in [*range(2000, 6000, 250), 4 << 20]:
        piece_bytes(size)
        (piece,) = [p for part in _piece_keys(path, 1) for p in part if numeric in p]
        if armless not in piece or len(piece) < 3:
            continue
        shared += 1  # both share a piece with good records
        good = set(piece) - {numeric, armless}
        for shards in (1, 2):
            summary = _in_pieces(path, shards)
            assert summary.invalid == expected
            assert good <= set(summary.hashes)
            assert summary.records == len(installs)
            assert _facts(summary) == whole
        stack = _stack(path)
        assert stack.invalid == expected
        assert good <= set(stack.hashes)
        assert len(stack.hashes) == len(installs) - 2
    assert shared >= 3


# --- dependencies ------------------------------------------------------------------------------


@pytest.mark.parametrize("db", [6, 8])
async def test_a_dependency_absent_from_the_index_is_found_on_a_second_run(
    tmp_path: Path, piece_bytes: Callable[[int], None], db: int
) -> None:
    installs = _synthetic(db, packages=30)
    keys = _built(installs)
    ghost, other_ghost = _hash("ghost"), _hash("other ghost")
    _depend(installs, keys[2], _edge(db, "ghost", ghost))
    _depend(installs, keys[40], _edge(db, "ghost", ghost))
    _depend(installs, keys[41], _edge(db, "other", other_ghost))
    _depend(installs, keys[41], _edge(db, "ghost", ghost))  # the first absent edge is named
    path = _write(tmp_path, _index(installs, str(db)))
    whole = _whole(path)
    expected = sorted(
        [
            InvalidRecord(keys[2], f"dependency ghost/{ghost} is not in this index"),
            InvalidRecord(keys[40], f"dependency ghost/{ghost} is not in this index"),
            InvalidRecord(keys[41], f"dependency other/{other_ghost} is not in this index"),
        ],
        key=lambda r: r.hash,
    )
    assert whole.invalid == expected
    piece_bytes(1000)

    for shards in (1, 2, 3):
        first = _shards(path, shards)
        assert root_gaps(first) == sorted([ghost, other_ghost])
        again = _shards(path, shards, (ghost, other_ghost))
        assert root_gaps(again) == []
        assert merge_root(again).invalid == expected
        assert _facts(merge_root(again)) == _facts(whole)
        assert _facts(_in_pieces(path, shards)) == _facts(whole)

    summary, rounds = await _read_root(tmp_path, path, 3)
    assert _facts(summary) == _facts(whole)
    assert rounds == [((), False), (tuple(sorted([ghost, other_ghost])), False)]


class _Watched(DecodePool):
    """The real pool and processes; records the jobs handed to it and the times the workers
    are stopped, in order."""

    def __init__(self, workers: int, events: list[str]) -> None:
        super().__init__(workers)
        self.events = events

    async def run(self, fn: Callable[..., bytes], path: str, url: str, /, *args: object) -> bytes:
        self.events.append("job")
        return await super().run(fn, path, url, *args)

    def close(self) -> None:
        if self.started:
            self.events.append("stop")
        super().close()


@pytest.mark.slow
async def test_the_workers_stop_after_each_round_of_a_root_and_before_its_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a root's pieces are back, the idle workers are stopped: they would otherwise hold
    their memory through the merge (a nightly run's peak). A round again starts them again."""
    db = 8
    installs = _synthetic(db, packages=30)
    keys = _built(installs)
    _depend(installs, keys[2], _edge(db, "ghost", _hash("ghost")))
    path = _write(tmp_path, _index(installs, str(db)))
    events: list[str] = []
    merge = decoding._merged

    def merged(loaded: list[RootShard]) -> SourceSummary:
        events.append("merge")
        return merge(loaded)

    monkeypatch.setattr(decoding, "_merged", merged)
    config = Config(output=str(tmp_path / "out"), decode_workers=2)
    source = Source("develop", "root", URL, Path(path).as_uri(), "v3", None)
    async with Fetcher(config) as fetcher:
        pool = _Watched(2, events)
        reader = SourceReader(config, fetcher, Store(tmp_path / "out"), LogReporter(), pool)
        outcome = await reader.read("develop", source, tmp_path / "index.json", None)
    assert outcome.status == "fetched" and outcome.decoded, outcome.error
    assert events == ["job", "job", "stop", "job", "job", "stop", "merge"]
    assert not pool.started


async def test_a_dependency_held_by_another_shard_is_not_missing(
    tmp_path: Path, piece_bytes: Callable[[int], None]
) -> None:
    installs = _synthetic(8, packages=30)
    order = list(installs)
    first, last = order[0], order[-1]
    broken = _built(installs)[20]
    installs[broken]["spec"]["hash"] = _hash("not its key")  # invalid, but a key of the index
    _depend(installs, first, _edge(8, "last", last))  # a later piece of a later shard
    _depend(installs, last, _edge(8, "first", first))  # an earlier piece of an earlier shard
    _depend(installs, order[1], _edge(8, "broken", broken))
    _depend(installs, order[1], _edge(8, "next", order[2]))  # the same or the next piece
    path = _write(tmp_path, _index(installs))
    whole = _whole(path)
    assert [r.hash for r in whole.invalid] == [broken]
    piece_bytes(800)

    for shards in (1, 2, 3):
        parts = _shards(path, shards)
        holder = {k: i for i, part in enumerate(_piece_keys(path, shards)) for p in part for k in p}
        if shards > 1:  # records of different shards
            assert holder[first] == 0 and holder[last] == shards - 1
            assert last in parts[0].foreign and first in parts[-1].foreign
        else:  # a later piece of the same shard
            assert parts[0].foreign == []
        assert root_gaps(parts) == []
        assert _facts(merge_root(parts)) == _facts(whole)

    summary, rounds = await _read_root(tmp_path, path, 3)
    assert _facts(summary) == _facts(whole)
    assert rounds == [((), False)]  # read once, in pieces


# --- a key repeated in two pieces --------------------------------------------------------------


def _repeated(installs: Installs, key: str, style: str = "spaced") -> bytes:
    """``installs`` with the record of ``key`` written first, and again last with version 9.9
    (a JSON object keeps the last)."""
    alias = "A" * 32
    later = copy.deepcopy(installs[key])
    later["spec"]["version"] = "9.9"
    rest = {k: v for k, v in installs.items() if k != key}
    return _rename(_index({alias: installs[key], **rest, key: later}, style=style), alias, key)


async def test_a_key_repeated_in_two_pieces_is_read_whole(
    tmp_path: Path, piece_bytes: Callable[[int], None]
) -> None:
    installs = _synthetic(8, packages=30)
    key = _built(installs)[3]
    data = _repeated(installs, key)
    path = _write(tmp_path, data)
    last_wins = dict(installs, **{key: json.loads(data)["database"]["installs"][key]})
    expected_root = _facts(_whole(_write(tmp_path, _index(last_wins), "last.json")))
    expected_stack = _facts(_stack(_write(tmp_path, _index(last_wins), "last.json")))
    assert expected_root["records"] == len(installs)
    (row,) = [r for r in _whole(path).specs if r.hash == key]
    assert row.version == "9.9"
    piece_bytes(1000)

    assert _facts(_whole(path)) == expected_root
    for shards in (1, 2, 3):
        assert root_gaps(_shards(path, shards)) is None
        assert _facts(_whole(path, shards)) == expected_root
    assert _facts(_stack(path)) == expected_stack
    summary, rounds = await _read_root(tmp_path, path, 3)
    assert _facts(summary) == expected_root
    assert rounds == [((), False), ((), True)]


@pytest.mark.parametrize("style", ["compact", "indented"])
def test_a_key_repeated_within_one_piece_keeps_the_last(
    tmp_path: Path, piece_bytes: Callable[[int], None], style: str
) -> None:
    installs = _synthetic(8, packages=2)
    key = _built(installs)[0]
    data = _repeated(installs, key, style)
    path = _write(tmp_path, data)
    last_wins = _write(tmp_path, _index(json.loads(data)["database"]["installs"]), "last.json")
    piece_bytes(4 << 20)
    assert _piece_keys(path, 1) == [[[key, *(k for k in installs if k != key)]]]

    summary = _in_pieces(path, 1)
    assert [r.version for r in summary.specs if r.hash == key] == ["9.9"]
    assert _facts(summary) == _facts(_whole(path)) == _facts(_whole(last_wins))
    assert _facts(_stack(path)) == _facts(_stack(last_wins))


# --- end to end: a sync with three decoding workers --------------------------------------------


SPECS = (
    SynthSpec("alpha", "1.0"),
    SynthSpec("beta", "2.0", stacks=("s1",)),
    SynthSpec("gamma", "3.0", stacks=("s1",), variants=(("shared", True),)),
    SynthSpec("delta", "4.0", compiler="clang@17.0.0", stacks=("s1",)),
    SynthSpec("py-epsilon", "5.0", compiler=None, stacks=("s1",)),
)
SCENARIOS = (
    "plain",
    "cut-inside-a-record",
    "dependency-in-another-shard",
    "version-after-installs",
    "object-after-installs",
    "missing-dependency",
    "repeated-key",
)


def _root_file(mirror: Path, discovery: dict[str, list[dict[str, str]]], ref: str) -> Path:
    (url,) = [e["url"] for e in discovery[ref] if e["label"] == "root"]
    return mirror / url.removeprefix(BUCKET)


def _republish(path: Path, data: bytes) -> str:
    """Replace a v2 index and its sidecar; returns its path."""
    path.write_bytes(data)
    path.with_name("index.json.hash").write_text(hashlib.sha256(data).hexdigest())
    return str(path)


def _key(installs: Installs, name: str) -> str:
    (key,) = [k for k, r in installs.items() if r["spec"]["name"] == name]
    return key


def _make_scenario(path: Path, scenario: str) -> None:
    """Rewrite the root index at ``path`` for ``scenario``, checking that the default pieces of
    three workers meet what the scenario is about."""
    installs: Installs = json.loads(path.read_bytes())["database"]["installs"]
    if scenario == "cut-inside-a-record":
        nested = _nested_keys(300)
        installs[_key(installs, "beta")]["extra"] = nested
        data = _index(installs)
        _republish(path, data)
        assert _cut_within(str(path), 3, *_where(data, json.dumps(nested).encode()))
    elif scenario == "dependency-in-another-shard":
        first, last = next(iter(installs)), list(installs)[-1]
        _depend(installs, first, _edge(8, "last", last))
        _republish(path, _index(installs))
        holder = {k: i for i, part in enumerate(_piece_keys(str(path), 3)) for p in part for k in p}
        assert holder[first] == 0 and holder[last] == 2
    elif scenario == "version-after-installs":
        assert _span(_republish(path, _dump(_envelope(installs, version_last=True)))) is None
    elif scenario == "object-after-installs":
        _republish(path, _dump({"database": {"version": "8", "installs": installs, "x": {}}}))
    elif scenario == "missing-dependency":
        _depend(installs, _key(installs, "alpha"), _edge(8, "ghost", _hash("ghost")))
        _republish(path, _index(installs))
    elif scenario == "repeated-key":
        alpha = _key(installs, "alpha")
        _republish(path, _repeated(installs, alpha))
        pieces = [set(p) for part in _piece_keys(str(path), 3) for p in part]
        assert [alpha in p for p in pieces] == [True, False, True]
    else:
        assert scenario == "plain"


@pytest.mark.slow
async def test_a_sync_with_three_workers_publishes_what_a_whole_read_gives(
    mirror_server: ServeMirror, tmp_path: Path
) -> None:
    mirror = tmp_path / "mirror"
    discovery = build_mirror(mirror, [SynthRef(s, SPECS) for s in SCENARIOS])
    for scenario in SCENARIOS:
        _make_scenario(_root_file(mirror, discovery, scenario), scenario)
    server = await mirror_server(mirror)
    out = tmp_path / "out"
    config = tmp_path / "crawler.yaml"
    config.write_text(yaml.safe_dump(fast_config(server.url, out, decode_workers=3)))

    assert await main_async(["sync", "--all", "--config", str(config), "-q"]) == 0

    indexes = {s: assert_valid_index(out / s / "index.json") for s in SCENARIOS}
    reports = {s: json.loads((out / s / "report.json").read_bytes()) for s in SCENARIOS}
    plain = indexes["plain"]
    expected = {  # compiler, variants, stacks
        "alpha": ("gcc@13.2.0", [], ["root"]),
        "beta": ("gcc@13.2.0", [], ["root", "s1"]),
        "gamma": ("gcc@13.2.0", ["+shared"], ["root", "s1"]),
        "delta": ("clang@17.0.0", [], ["root", "s1"]),
        "py-epsilon": ("none", [], ["root", "s1"]),
    }
    rows = {
        name: [
            (d["hash"], d["versions"], d["compiler"], d["variants"], d["stacks"])
            for d in package["spec_details"]
        ]
        for name, package in plain["packages"].items()
    }
    assert rows == {s.name: [(s.dag_hash, [s.version], *expected[s.name])] for s in SPECS}
    records = plain["sources"][0]["records"]
    for scenario in SCENARIOS:
        index, report = indexes[scenario], reports[scenario]
        assert report["status"] == "published"
        assert index["sources"][0]["records"] == records  # a repeated key counts once
        packages = index["packages"]
        if scenario == "missing-dependency":
            (alpha,) = [s.dag_hash for s in SPECS if s.name == "alpha"]
            assert report["invalid_records"] == [
                {
                    "source": "root",
                    "hash": alpha,
                    "reason": f"dependency ghost/{_hash('ghost')} is not in this index",
                }
            ]
            assert packages == {k: v for k, v in plain["packages"].items() if k != "alpha"}
            continue
        assert report["invalid_records"] == [], scenario
        if scenario == "repeated-key":  # the last occurrence of the key is the record
            assert packages["alpha"]["meta"]["versions"] == ["9.9"]
            assert packages["alpha"]["spec_details"][0]["versions"] == ["9.9"]
            packages = {**packages, "alpha": plain["packages"]["alpha"]}
        assert packages == plain["packages"], scenario


# --- older rules the piece readers must keep -----------------------------------------------------


@pytest.mark.parametrize("whole", [False, True])
def test_a_string_that_is_not_utf8_makes_its_record_invalid(tmp_path: Path, whole: bool) -> None:
    """Invalid UTF-8 inside a record is that record's problem, not the index's."""
    data = index_document([SynthSpec("zlib", "1.3.1"), SynthSpec("xz", "5.4.6")], 8)
    bad = data.replace(b'"name":"zlib"', b'"name":"zl\xffib"')
    assert bad != data
    path = _write(tmp_path, bad)
    root = merge_root(_shards(path, 1, whole=whole))
    stack = _stack(path)
    for summary in (root, stack):
        assert [r.reason for r in summary.invalid] == [
            "bad record: a string is not UTF-8 (invalid start byte)"
        ]
    assert [row.name for row in root.specs] == ["xz"]


def test_a_key_that_is_not_utf8_fails_the_index_as_a_whole_read_does(tmp_path: Path) -> None:
    data = index_document([SynthSpec("zlib", "1.3.1")], 8)
    key = next(iter(json.loads(data)["database"]["installs"]))
    path = _write(tmp_path, data.replace(key.encode(), b"\xff" + key[1:].encode(), 1))
    assert _attempt(path, 1) is None  # the piece does not decode: read whole
    with pytest.raises(IndexFormatError, match="a key or the version is not valid UTF-8"):
        _whole(path)


def test_a_compiler_that_is_invalid_through_its_own_compiler_invalidates_the_spec(
    tmp_path: Path,
) -> None:
    """zlib's compiler is clang, clang's compiler is a record of the wrong shape: clang is
    invalid, so zlib is too, however the index is read."""
    installs = json.loads(index_document([SynthSpec("zlib", "1.3.1", compiler="clang@17.0.0")], 8))
    installs = installs["database"]["installs"]
    clang = _key(installs, "clang")
    bad = _hash("bad gcc")
    installs[bad] = {"spec": {"name": "gcc", "version": 13, "hash": bad}, "in_buildcache": False}
    installs[clang]["spec"]["dependencies"] = [_edge(8, "gcc", bad, ["c"])]
    installs[clang]["in_buildcache"] = True
    path = _write(tmp_path, _index(installs))
    for summary in (_whole(path), _in_pieces(path, 2)):
        assert summary.specs == []
        reasons = {r.hash: r.reason for r in summary.invalid}
        assert reasons[clang] == f"compiler dependency gcc/{bad} is not a valid record"
        assert reasons[_key(installs, "zlib")] == (
            f"compiler dependency clang/{clang} is not a valid record"
        )
        assert clang not in summary.hashes


# --- parts cut while downloading, and files that are not what a part expects -------------------


def test_a_search_for_a_cut_ends_at_the_end_of_a_shorter_file(tmp_path: Path) -> None:
    """A limit past the end of the file (a file replaced or cut short) ends the search."""
    path = Path(_write(tmp_path, b'{"database": {"version": "8", "installs": {' + b" " * 3000))
    with path.open("rb") as file:
        assert chunks.cut_after(file.fileno(), 0, 20 << 20) is None
        assert chunks.cut_after(file.fileno(), 2500, 20 << 20) is None


def test_a_part_refuses_a_file_that_is_not_the_one_it_was_cut_from(tmp_path: Path) -> None:
    data = index_document([SynthSpec("zlib", "1.3.1"), SynthSpec("xz", "5.4.6")], 8)
    path = _write(tmp_path, data)
    span = _span(path)
    assert span is not None
    stat = Path(path).stat()
    same = (stat.st_dev, stat.st_ino)
    part = load_root_shard(summarize_root_part(path, URL, "8", span.start, span.end, (), same))
    assert sorted(part.specs) == sorted(_built(json.loads(data)["database"]["installs"]))
    with pytest.raises(chunks.BadCut, match="was replaced"):
        summarize_root_part(path, URL, "8", span.start, span.end, (), (same[0], same[1] + 1))
    with pytest.raises(chunks.BadCut, match="shorter than its part"):
        summarize_root_part(path, URL, "8", span.start, len(data) + 10, (), same)


@pytest.mark.parametrize(
    ("text", "python", "read"),
    [
        (rb'"a\udcffb"', "a\udcffb", "a\ufffdb"),  # lone low
        (rb'"\ud83d"', "\ud83d", "\ufffd"),  # lone high at the end
        (rb'"\ud800\ud800"', "\ud800\ud800", "\ufffd\ufffd"),  # two highs
        (rb'"\uDC00x"', "\udc00x", "\ufffdx"),  # capitals
        (rb'"\\\udcff"', "\\\udcff", "\\\ufffd"),  # an escaped backslash, then a lone one
        (rb'"\\udcff"', "\\udcff", "\\udcff"),  # an escaped backslash and text
        (rb'"\ud83d\ude00"', "\U0001f600", "\U0001f600"),  # a pair
        (rb'{"\udcff": ["\ud800"]}', {"\udcff": ["\ud800"]}, {"\ufffd": ["\ufffd"]}),
    ],
)
def test_lone_surrogates_are_mended_into_what_python_reads(
    text: bytes, python: object, read: object
) -> None:
    """What Python's json reads, each lone surrogate as U+FFFD; None when nothing is lone."""
    assert json.loads(text) == python
    mended = mend_surrogates(text)
    assert msgspec.json.decode(mended if mended is not None else text) == read
    assert (mended is None) == (python == read)
