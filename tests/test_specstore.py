"""The spec store (crawler.decode.specstore): a root's records summarised once per output
folder, by DAG hash, and read back in later runs and other refs, with output byte-identical
to a cold sync into an empty folder. Real syncs through the CLI's main on synthetic mirrors."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
from pathlib import Path

import msgspec
import pytest
import yaml

from bench.synth import SynthRef, SynthSpec, build_mirror, generate_specs
from crawler.cli.command import main
from crawler.decode.records import made_by
from crawler.decode.root import load_root_shard, merge_root, summarize_root_shard
from crawler.decode.specsave import updated_store
from crawler.decode.specstore import (
    DIGEST_BYTES,
    KEEP_DAYS,
    SpecStore,
    encode_store,
    read_store,
    store_path,
    today,
)
from crawler.decode.validate import SourceSummary
from crawler.output.kept import WRITTEN
from tests.conftest import fast_config, undated_bytes

SPECS = generate_specs(27, 60, stacks=["e4s", "ml"], specs_per_package=(1, 4))
KNOWN = re.compile(
    r"root: fetched [\d,]+ bytes, ([\d,]+) records \(([\d,]+) known from the spec store\)"
)


def _mirror(folder: Path, *refs: tuple[str, list[SynthSpec]]) -> Path:
    build_mirror(folder, [SynthRef(name, tuple(specs)) for name, specs in refs])
    return folder


def _sync(
    mirror: Path, output: Path, branch: str, capsys: pytest.CaptureFixture[str], code: int = 0
) -> str:
    """Sync ``branch`` of ``mirror`` into ``output``; its log (stderr)."""
    config = output.parent / f"{output.name}.yaml"
    config.write_text(yaml.safe_dump(fast_config(str(mirror), output)))
    capsys.readouterr()
    assert main(["sync", "--branch", branch, "--config", str(config), "-v"]) == code
    return capsys.readouterr().err


def _known(log: str) -> tuple[int, int]:
    """(records known from the store, records) of the one root read in ``log``."""
    (found,) = KNOWN.findall(log)
    return int(found[1].replace(",", "")), int(found[0].replace(",", ""))


def _store(output: Path) -> SpecStore:
    store = read_store(store_path(str(output / ".crawler" / "specs"), "8"), "8")
    assert store is not None
    return store


def _same_as_cold(
    mirror: Path, output: Path, branch: str, tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``output``'s branch is byte for byte what a cold sync into an empty folder gives (but
    for changes.json, which tells what changed since the folder's last publish)."""
    cold = tmp / f"cold-{branch}"
    log = _sync(mirror, cold, branch, capsys)
    assert _known(log)[0] == 0
    ours, theirs = undated_bytes(output / branch), undated_bytes(cold / branch)
    ours.pop("changes.json"), theirs.pop("changes.json")
    assert ours == theirs


def test_a_second_ref_reads_the_specs_it_shares_from_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = SPECS[: len(SPECS) * 9 // 10]
    fresh = generate_specs(28, 6, stacks=["e4s"])
    mirror = _mirror(tmp_path / "mirror", ("develop", SPECS), ("snap", shared + fresh))
    output = tmp_path / "out"
    known, records = _known(_sync(mirror, output, "develop", capsys))
    assert known == 0 and records > len(SPECS)  # cold: dependencies are records too
    assert len(_store(output).keys) == len(SPECS)  # records in the build cache
    known, records = _known(_sync(mirror, output, "snap", capsys))
    assert known == len(shared)  # the new specs and the dependencies are decoded
    assert set(_store(output).keys) == {s.dag_hash for s in SPECS + fresh}  # both refs kept
    _same_as_cold(mirror, output, "snap", tmp_path, capsys)


def _published_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """An output folder where develop of SPECS was published (and its store written)."""
    output = tmp_path / "out"
    _sync(_mirror(tmp_path / "before", ("develop", SPECS)), output, "develop", capsys)
    return output


def _same_mirror_a_night_later(tmp_path: Path, specs: list[SynthSpec]) -> Path:
    """The mirror of :func:`_published_before`, at the same place, now holding ``specs``."""
    before, after = tmp_path / "before", _mirror(tmp_path / "after", ("develop", specs))
    shutil.rmtree(before)
    return after.rename(before)


def _night(specs: list[SynthSpec], seed: int) -> list[SynthSpec]:
    """The specs a night later: two replaced by new builds (the root changes)."""
    return specs[2:] + generate_specs(seed, 1, specs_per_package=(2, 2))


@pytest.mark.parametrize("damage", ["deleted", "cut short", "garbage", "inconsistent"])
def test_a_deleted_or_damaged_store_gives_a_cold_reading_and_the_same_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    output = _published_before(tmp_path, capsys)
    path = store_path(str(output / ".crawler" / "specs"), "8")
    data = path.read_bytes()
    if damage == "deleted":
        path.unlink()
    elif damage == "cut short":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(b"\x93not a store")
    else:  # its checksum holds, but its columns disagree (a crawler with a bug wrote it)
        store = _decoded(data)
        path.write_bytes(encode_store(msgspec.structs.replace(store, keys=store.keys[1:])))
    after = _mirror(tmp_path / "after", ("develop", _night(SPECS, 29)))
    assert _known(_sync(after, output, "develop", capsys))[0] == 0
    assert len(_store(output).keys) == len(SPECS)  # written anew, whole
    _same_as_cold(after, output, "develop", tmp_path, capsys)


@pytest.mark.parametrize("blocked", ["its folder is a file", "its file is a folder"])
def test_a_store_that_cannot_be_kept_leaves_the_run_cold_and_its_output_the_same(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], blocked: str
) -> None:
    """Only a cache: a file where its folder goes (removed, as at the other folders of
    ``.crawler``), or a store it cannot replace, is a warning, the root is decoded whole and the
    branch is published as a cold sync would."""
    output = _published_before(tmp_path, capsys)
    folder = output / ".crawler" / "specs"
    path = store_path(str(folder), "8")
    if blocked == "its folder is a file":
        shutil.rmtree(folder)
        folder.write_text("not a folder")
        told = f"removed {folder}, which was not a folder"
        read = [0]  # read through an empty store
    else:
        path.unlink()
        path.mkdir()
        told = "cannot update the spec store (the next run decodes more)"
        read = [0]  # read through an empty store
    after = _mirror(tmp_path / "after", ("develop", _night(SPECS, 29)))
    log = _sync(after, output, "develop", capsys)
    assert told in log and "WARNING" in log
    assert [int(known) for _, known in KNOWN.findall(log)] == read
    _same_as_cold(after, output, "develop", tmp_path, capsys)


def test_a_root_whose_summary_cannot_be_cached_still_updates_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store is updated from the root's summary as cached (held in memory until the
    branch is done, it added 20-odd MB to a develop branch's peak); a summary that cannot be
    cached is held instead: the two caches do not depend on each other."""
    output = _published_before(tmp_path, capsys)
    night = _night(SPECS, 29)
    after = _mirror(tmp_path / "after", ("develop", night))
    root = hashlib.sha256((after / "develop" / "build_cache" / "index.json").read_bytes())
    # A folder where the root's summary would be cached: it cannot be replaced.
    (output / ".crawler" / "cache" / f"root-{root.hexdigest()}.{made_by()}.parts.msgpack").mkdir()
    log = _sync(after, output, "develop", capsys)
    assert "WARNING cannot cache a summary" in log
    assert _known(log)[0] == len(SPECS) - 2
    assert set(_store(output).keys) == {s.dag_hash for s in SPECS + night}
    _same_as_cold(after, output, "develop", tmp_path, capsys)


def test_a_night_decodes_only_its_new_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = _published_before(tmp_path, capsys)
    after = _mirror(tmp_path / "after", ("develop", _night(SPECS, 29)))
    known, _ = _known(_sync(after, output, "develop", capsys))
    assert known == len(SPECS) - 2
    _same_as_cold(after, output, "develop", tmp_path, capsys)


def _rewrite_record(mirror: Path, key: str, old: bytes, new: bytes) -> None:
    """Change the bytes of one record of the root index, and its sidecar."""
    index = mirror / "develop" / "build_cache" / "index.json"
    data = index.read_bytes()
    start = data.index(b'"%s":{' % key.encode())
    stop = data.index(b'"in_buildcache"', start + 40)  # where the next record starts
    record = data[start:stop]
    assert record.count(old) == 1, record
    index.write_bytes(data[:start] + record.replace(old, new) + data[stop:])
    sidecar = index.with_name("index.json.hash")
    sidecar.write_text(hashlib.sha256(index.read_bytes()).hexdigest())


def test_a_record_rewritten_with_the_same_content_is_summarised_again_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = _published_before(tmp_path, capsys)
    after = _same_mirror_a_night_later(tmp_path, _night(SPECS, 29))  # no warning of a switch
    spec = SPECS[10]
    # A field the crawler does not read: another writer's spelling of the same spec.
    _rewrite_record(after, spec.dag_hash, b'"spec":{', b'"spec":{"written_by":"spack 2",')
    log = _sync(after, output, "develop", capsys)
    assert _known(log)[0] == len(SPECS) - 3  # the rewritten one was decoded again
    assert "1 record(s) rewritten with the same content" in log
    assert "WARNING" not in log
    _same_as_cold(after, output, "develop", tmp_path, capsys)


def test_a_record_whose_content_changed_under_a_known_hash_is_used_and_warned_of(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = _published_before(tmp_path, capsys)
    spec = SPECS[10]
    changed = dataclasses.replace(
        spec, variants=(*spec.variants, ("rewritten", True)), hash=spec.dag_hash
    )
    night = _night(SPECS, 29)
    after = _mirror(tmp_path / "after", ("develop", [changed if s is spec else s for s in night]))
    log = _sync(after, output, "develop", capsys)
    assert "WARNING" in log
    assert f"1 record(s) changed content under a DAG hash seen before ({spec.dag_hash})" in log
    _same_as_cold(after, output, "develop", tmp_path, capsys)
    page = (output / "develop" / "index.json").read_text()
    assert "+rewritten" in page  # the new content, not the stored summary


def test_a_store_of_another_crawler_version_is_not_read_and_is_pruned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = _published_before(tmp_path, capsys)
    folder = output / ".crawler" / "specs"
    path = store_path(str(folder), "8")
    store = msgspec.msgpack.decode(path.read_bytes()[DIGEST_BYTES:], type=SpecStore)
    # What an upgrade finds: the last version's file, and one named as ours but written by it.
    older = folder / "0.3.9-db8.msgpack"
    older.write_bytes(path.read_bytes())
    path.write_bytes(encode_store(msgspec.structs.replace(store, crawler="0.3.9")))
    left = folder / f".{path.name}.0badc0de.tmp"  # what a run killed while writing leaves
    left.write_bytes(b"x")
    with (folder / WRITTEN).open("a") as written:  # as that version recorded them
        written.write(f"{older.name}\n{left.name}\n")
    # Named as the crawler names its files, but not recorded as written: left alone.
    foreign = [folder / "notes.msgpack", folder / "0.3.8-db8.msgpack", folder / ".x.0badc0de.tmp"]
    for file in foreign:
        file.write_bytes(b"x")
    after = _mirror(tmp_path / "after", ("develop", _night(SPECS, 29)))
    assert _known(_sync(after, output, "develop", capsys))[0] == 0
    assert _store(output).crawler == made_by()
    assert not older.exists() and not left.exists()
    assert [file.read_bytes() for file in foreign] == [b"x"] * 3
    _same_as_cold(after, output, "develop", tmp_path, capsys)


def _decoded(data: bytes | bytearray) -> SpecStore:
    return msgspec.msgpack.decode(data[DIGEST_BYTES:], type=SpecStore)


def test_the_store_drops_entries_unseen_for_too_long(tmp_path: Path) -> None:
    mirror = _mirror(tmp_path / "mirror", ("develop", SPECS))
    index = str(mirror / "develop" / "build_cache" / "index.json")
    folder = tmp_path / "specs"
    folder.mkdir()
    shard = summarize_root_shard(index, "u", store=str(folder))
    day = today()
    store_path(str(folder), "8").write_bytes(updated_store(str(folder), "8", [shard], day))
    # A later reading of a root holding none of them keeps them while they are recent.
    empty = _mirror(tmp_path / "empty", ("develop", SPECS[:1]))
    other = summarize_root_shard(
        str(empty / "develop" / "build_cache" / "index.json"), "u", store=str(folder)
    )
    kept = _decoded(updated_store(str(folder), "8", [other], day + 1))
    assert len(kept.keys) == len(SPECS)
    kept = _decoded(updated_store(str(folder), "8", [other], day + KEEP_DAYS + 1))
    assert kept.keys == [SPECS[0].dag_hash]


def _rows(summary: SourceSummary) -> dict[str, tuple[object, ...]]:
    """A summary's specs, their edges as values (each reading numbers them its own way)."""
    table = summary.dependencies
    return {
        row.hash: (*msgspec.structs.astuple(row)[:-1], [table[i] for i in row.dependencies])
        for row in summary.specs
    }


@pytest.mark.parametrize("missing", [False, True])
def test_a_reading_through_the_store_summarises_as_a_cold_one(
    tmp_path: Path, missing: bool
) -> None:
    before = _mirror(tmp_path / "before", ("develop", SPECS))
    folder = tmp_path / "specs"
    folder.mkdir()
    shard = summarize_root_shard(
        str(before / "develop/build_cache/index.json"), "u", store=str(folder)
    )
    store_path(str(folder), "8").write_bytes(updated_store(str(folder), "8", [shard], today()))
    after = str(
        _mirror(tmp_path / "after", ("develop", _night(SPECS, 29)))
        / "develop/build_cache/index.json"
    )
    # A dependency known to be absent (the second round of a root whose records point at
    # one): the specs pointing at it are rejected, from the store as when decoded.
    absent = (
        tuple(
            edge.hash
            for edge in merge_root([load_root_shard(summarize_root_shard(after, "u"))]).dependencies
            if edge.name == "gcc-runtime"
        )[:1]
        if missing
        else ()
    )
    cold = merge_root([load_root_shard(summarize_root_shard(after, "u", missing=absent))])
    warm_shard = load_root_shard(
        summarize_root_shard(after, "u", missing=absent, store=str(folder))
    )
    assert warm_shard.known == len(SPECS) - 2  # all but the night's new ones
    warm = merge_root([warm_shard])
    assert _rows(warm) == _rows(cold)
    assert (warm.records, warm.in_buildcache, sorted(warm.hashes)) == (
        cold.records,
        cold.in_buildcache,
        sorted(cold.hashes),
    )
    assert sorted(warm.invalid, key=str) == sorted(cold.invalid, key=str)
    if missing:
        assert cold.invalid and len(cold.specs) < len(SPECS)
