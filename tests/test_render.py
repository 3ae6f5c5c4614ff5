"""Rendering: variants exactly as written, whatever the split of a root over workers; index.json
the same bytes when written in chunks."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

import crawler
from bench.synth import SynthSpec, index_document
from crawler.decode.root import load_root_shard, merge_root, summarize_root_shard
from crawler.linkfile import packed
from crawler.output.render import ENTRIES_PER_CHUNK, encode_chunked, encode_json

from .test_query import sync_sample


def _root(tmp_path: Path, parameters: list[dict[str, object]]) -> str:
    """A DB 7 root index whose specs carry the given parameters."""
    specs = [SynthSpec(f"pkg{i}", "1.0") for i in range(len(parameters))]
    document = json.loads(index_document(specs, 7))
    records = [r for r in document["database"]["installs"].values() if r["in_buildcache"]]
    for record, params in zip(
        sorted(records, key=lambda r: r["spec"]["name"]), parameters, strict=True
    ):
        record["spec"]["parameters"] = params
    path = tmp_path / "index.json"
    path.write_text(json.dumps(document))
    return str(path)


def _variants(path: str, shards: int) -> dict[str, tuple[str, ...]]:
    parts = [load_root_shard(summarize_root_shard(path, "u", i, shards)) for i in range(shards)]
    return {row.name: row.variants for row in merge_root(parts).specs}


def test_values_python_deems_equal_render_as_written(tmp_path: Path) -> None:
    """True == 1 == 1.0 and 0.0 == -0.0 in Python; the pages must still show each as written."""
    path = _root(
        tmp_path,
        [
            {"a": True, "b": 1, "c": 1.0, "d": 0.0, "cflags": []},
            {"a": 1, "b": True, "c": -0.0, "d": [True, 1, 1.0]},
            {"a": False, "b": 0, "c": 0.0, "d": [-0.0, 0.0]},
        ],
    )

    assert _variants(path, 1) == {
        "pkg0": ("+a", "b=1", "c=1.0", "d=0.0"),
        "pkg1": ("a=1", "+b", "c=-0.0", "d=true,1,1.0"),
        "pkg2": ("~a", "b=0", "c=0.0", "d=-0.0,0.0"),
    }


def test_the_number_of_shards_does_not_change_the_summary(tmp_path: Path) -> None:
    parameters: list[dict[str, object]] = [
        {"x": v, "patches": ["abcdef1234" + "0" * 54]} for v in (0.0, -0.0, 1, True, "1", [1, "1"])
    ]
    path = _root(tmp_path, parameters)

    one = _variants(path, 1)
    assert _variants(path, 2) == one
    assert _variants(path, 3) == one
    assert one["pkg1"] == ("x=-0.0", "patches=abcdef1")


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output folder where the sample mirror was synced."""
    folder = tmp_path_factory.mktemp("render") / "output"
    sync_sample(folder)
    return folder


@pytest.mark.parametrize("entries", [0, 1, ENTRIES_PER_CHUNK, ENTRIES_PER_CHUNK * 2 + 3])
def test_documents_encoded_in_chunks_are_the_same_bytes(published: Path, entries: int) -> None:
    """index.json and links.json are written a few packages or specs at a time: the bytes are
    those of one encoding, also when a string spells the key of the map they are put in."""
    index = crawler.load_index(published / "develop")
    template = next(iter(index.packages.values()))
    many = {f"pkg-{i:04}": template for i in range(entries)}
    sources = [msgspec.structs.replace(index.sources[0], url='s3://b/"packages":{}')]
    index = msgspec.structs.replace(index, packages=many, sources=sources)
    assert b"".join(encode_chunked(index, "packages")) == encode_json(index)

    links = crawler.load_links(published / "develop")
    entry = next(iter(links.specs.values()))
    specs = {f"{i:032}": entry for i in range(entries)}
    links = msgspec.structs.replace(links, branch='"specs":{}', specs=specs)
    assert b"".join(encode_chunked(packed(links), "specs")) == encode_json(packed(links))
