"""links.json's schema 2 (crawler/linkfile.py): each cache URL, dependency edge and name stated
once, and every reader (load_links, find --links, verify) giving the same resolved links for a
branch published with it as for one published before it (schema 1)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest

import crawler
from crawler.cli import find
from crawler.consumer_errors import NotABranchError, SchemaVersionError
from crawler.documents import Links, SpecDependency, SpecLinks
from crawler.linkfile import LINKS_VERSION, packed
from crawler.ops.schemas import part_validator
from crawler.ops.verify import verify_branch
from crawler.output.render import encode_chunked, encode_json

from .conftest import REPO
from .linkjson import resolved_specs

MIRROR = "https://mirror.example/develop"
H = [f"{c}" * 32 for c in "abcdefgh"]


def manifest(cache: str, name: str, key: str) -> str:
    return f"{cache}/v3/manifests/spec/{name}/{name}-1.0-{key}.spec.manifest.json"


def resolved_links() -> Links:
    """Links as a build makes them: the root's cache, and a stack's inside its folder (as on
    the public mirror); a spec in a v2 stack too; a signed tarball in the stack's cache; a
    dependency that is no spec (a compiler), and an edge naming a hash another edge names
    otherwise."""
    e4s, old = f"{MIRROR}/e4s", "https://old.example/cache"
    gcc = SpecDependency(H[5], "gcc", ("build",), ("c", "cxx"))
    return Links(
        branch="develop",
        specs={
            H[0]: SpecLinks(
                (gcc, SpecDependency(H[1], "zlib", ("build", "link"))),
                {"e4s": manifest(e4s, "curl", H[0]), "root": manifest(MIRROR, "curl", H[0])},
                f"{e4s}/blobs/sha256/ab/{'ab' * 32}",
                "0123456789ABCDEF",
            ),
            H[1]: SpecLinks(
                (gcc,),
                {
                    "old": f"{old}/build_cache/linux-x-y-gcc-13-zlib-1.0-{H[1]}.spec.json.sig",
                    "root": manifest(MIRROR, "zlib", H[1]),
                },
                f"{MIRROR}/blobs/sha256/cd/{'cd' * 32}",
            ),
            H[2]: SpecLinks(
                (SpecDependency(H[1], "zlib-ng", ("link",)),),
                {"root": manifest(MIRROR, "a", H[2])},
            ),
            H[3]: SpecLinks(),
        },
    )


def write_links(folder: Path, document: msgspec.Struct) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "links.json"
    path.write_bytes(encode_json(document))
    return path


def test_packed_links_state_each_cache_and_name_once_and_read_back_the_same(
    tmp_path: Path,
) -> None:
    links = resolved_links()
    document = packed(links)
    assert document.schema_version == LINKS_VERSION
    assert document.caches == {
        "e4s": f"{MIRROR}/e4s",
        "old": "https://old.example/cache",
        "root": MIRROR,
    }
    assert document.names == {H[1]: "zlib", H[5]: "gcc"}  # the first edge to a hash names it
    raw = json.loads(encode_json(document))
    curl, zlib, other = (raw["specs"][key] for key in H[:3])
    # The same path in two caches of one layout, once; the tarball in the deepest cache.
    assert curl["paths"] == {
        f"v3/manifests/spec/curl/curl-1.0-{H[0]}.spec.manifest.json": ["e4s", "root"]
    }
    assert curl["tarball"] == {"stack": "e4s", "path": f"blobs/sha256/ab/{'ab' * 32}"}
    # Each distinct edge once, numbered as first used; gcc's edge shared by curl and zlib.
    assert raw["edges"] == [
        {"hash": H[5], "type": ["build"], "virtuals": ["c", "cxx"]},
        {"hash": H[1], "type": ["build", "link"]},
        {"hash": H[1], "name": "zlib-ng", "type": ["link"]},
    ]
    assert curl["dependencies"] == [0, 1] and zlib["dependencies"] == [0]
    assert len(zlib["paths"]) == 2 and zlib["tarball"]["stack"] == "root"
    assert other["dependencies"] == [2]
    assert raw["specs"][H[3]] == {}
    assert MIRROR not in json.dumps(raw["specs"])  # no URL repeated in the entries
    # Read back: the very links packed; and a publish writes these bytes.
    path = write_links(tmp_path, document)
    assert crawler.load_links(path) == links
    assert b"".join(encode_chunked(packed(links), "specs")) == path.read_bytes()


def test_links_of_one_stack_under_two_caches_are_not_packed() -> None:
    links = resolved_links()
    odd = SpecLinks(locations={"root": manifest("https://elsewhere.example", "b", H[4])})
    with pytest.raises(ValueError, match=f"stack root: .* is not in its cache, {MIRROR}$"):
        packed(msgspec.structs.replace(links, specs={**links.specs, H[4]: odd}))


def test_a_packed_links_json_that_does_not_resolve_names_what_it_lacks(tmp_path: Path) -> None:
    raw = json.loads(encode_json(packed(resolved_links())))
    del raw["names"][H[5]]
    path = tmp_path / "links.json"
    path.write_bytes(encode_json(raw))
    with pytest.raises(NotABranchError, match=f"spec {H[0]}: dependency {H[5]} has no name"):
        crawler.load_links(path)
    raw["names"][H[5]] = "gcc"
    raw["specs"][H[2]]["dependencies"] = [3]
    path.write_bytes(encode_json(raw))
    with pytest.raises(NotABranchError, match=f"spec {H[2]}: dependency 3 is no number of edges"):
        crawler.load_links(path)
    raw["schema_version"] = 3
    path.write_bytes(encode_json(raw))
    with pytest.raises(SchemaVersionError, match="schema_version 3 is newer than this crawler"):
        crawler.load_links(path)


@pytest.fixture
def published(sample_develop: Path) -> Path:
    """``develop`` of the sample mirror, synced once for the session (conftest's)."""
    return sample_develop


@pytest.fixture
def before(published: Path, tmp_path: Path) -> Path:
    """The branch as the version before wrote it: its links.json resolved (schema 1)."""
    folder = tmp_path / "before" / "develop"
    shutil.copytree(published, folder)
    write_links(folder, crawler.load_links(published))
    return folder


def find_links(capsys: pytest.CaptureFixture[str], folder: Path) -> list[Any]:
    assert find.main(["--json", "--links", "--in", str(folder)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


# The schema-1 file is written by the test, as the version before wrote it: checked against
# its own schema here, not the one a publish now writes.
@pytest.mark.damages_output
def test_every_reader_gives_the_same_links_for_both_schemas(
    published: Path, before: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = json.loads((before / "links.json").read_bytes())
    assert "schema_version" not in old and not list(
        part_validator("links.json", "/$defs/links1").iter_errors(old)
    )
    new = json.loads((published / "links.json").read_bytes())
    assert new["schema_version"] == 2
    assert (published / "links.json").stat().st_size < (before / "links.json").stat().st_size
    links = crawler.load_links(published)
    assert crawler.load_links(before) == links
    # The build made the packed form itself: the very bytes packing its resolved links gives,
    # in the index's order of specs (which numbers the edges).
    index = crawler.load_index(published)
    order = [d.hash for p in index.packages.values() for d in p.spec_details]
    in_order = Links(branch=links.branch, specs={key: links.specs[key] for key in order})
    assert (
        b"".join(encode_chunked(packed(in_order), "specs"))
        == (published / "links.json").read_bytes()
    )
    assert (
        resolved_specs(published)
        == resolved_specs(before)
        == json.loads(encode_json(links))["specs"]
    )
    lines = find_links(capsys, published)
    assert lines and find_links(capsys, before) == lines
    assert all(line["locations"] for line in lines)
    assert all("name" in d for line in lines for d in line["dependencies"])
    assert verify_branch(published) == [] and verify_branch(before) == []


@pytest.mark.damages_output
def test_verify_names_a_packed_entry_that_does_not_resolve(published: Path, tmp_path: Path) -> None:
    branch = tmp_path / "develop"
    shutil.copytree(published, branch)
    raw = json.loads((branch / "links.json").read_bytes())
    first = next(key for key, entry in raw["specs"].items() if entry.get("dependencies"))
    second, third = [key for key in raw["specs"] if key != first][:2]
    dependency = raw["edges"][raw["specs"][first]["dependencies"][0]]["hash"]
    del raw["names"][dependency]
    raw["specs"][second]["paths"] = {"somewhere": ["nowhere"]}
    path = next(iter(raw["specs"][third]["paths"]))
    raw["specs"][third]["paths"]["again"] = raw["specs"][third]["paths"][path]
    (branch / "links.json").write_bytes(encode_json(raw))
    problems = verify_branch(branch)
    unnamed = {i for i, d in enumerate(raw["edges"]) if d["hash"] == dependency and "name" not in d}
    users = [
        key for key, entry in raw["specs"].items() if unnamed & set(entry.get("dependencies", []))
    ]
    stack = raw["specs"][third]["paths"][path][0]
    assert problems == sorted(
        [f"links.json: spec {key}: dependency {dependency} has no name in names" for key in users]
        + [
            f"links.json: spec {second}: stack nowhere has no cache in caches",
            f"links.json: spec {third}: stack {stack} is given two paths",
        ]
    )
    raw["schema_version"] = 3
    (branch / "links.json").write_bytes(encode_json(raw))
    assert verify_branch(branch) == ["links.json: schema_version 3, not one this version reads"]


def test_the_documented_plain_json_reading_runs(
    published: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/output-format.md's example of reading links.json as plain JSON, as written, gives
    what load_links gives."""
    page = (REPO / "docs" / "output-format.md").read_text()
    section = page[page.index("### `links.json`") : page.index("### `report.json`")]
    [example] = re.findall(r"```python\n(.*?)```", section, re.S)
    shutil.copytree(published, tmp_path / "output" / "develop")
    monkeypatch.chdir(tmp_path)
    found: dict[str, Any] = {}
    exec(compile(example, "docs/output-format.md: links.json", "exec"), found)
    [key] = re.findall(r'links\["specs"\]\["(\w+)"\]', example)
    link = crawler.load_links(published).specs[key]
    assert found["locations"] == link.locations
    assert found["needs"] == [d.name for d in link.dependencies]
    assert found["tarball"] == link.tarball
