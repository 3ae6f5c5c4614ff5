"""The JSON Schemas shipped in crawler/schema: real documents of syncs of the sample mirror match
them, they know every field of the structs the documents are written from, and ``crawler
verify`` reports a companion that breaks its schema."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema_rs
import msgspec
import pytest

import crawler.documents as documents
import crawler.linkfile as linkfile
from crawler.cli.command import main
from crawler.ops.schemas import SCHEMAS, compiled, part_validator, schema
from crawler.ops.verify import verify_branch

from .conftest import REPO, SAMPLE_MIRROR
from .schema import assert_valid

#: Each struct of crawler/documents.py and crawler/linkfile.py, and where its object is in
#: which schema (the resolved links: where a links.json of schema 1 has them).
WHERE: dict[type[msgspec.Struct], tuple[str, str]] = {
    documents.Index: ("index.json", ""),
    documents.IndexFilters: ("index.json", "/properties/filters"),
    documents.IndexSource: ("index.json", "/$defs/source"),
    documents.IndexStats: ("index.json", "/$defs/stats"),
    documents.PackageSummary: ("index.json", "/$defs/package"),
    documents.PackageMeta: ("index.json", "/$defs/meta"),
    documents.SpecDetail: ("index.json", "/$defs/specDetail"),
    linkfile.PackedLinks: ("links.json", ""),
    linkfile.PackedSpecLinks: ("links.json", "/$defs/packedSpecLinks"),
    linkfile.PackedDependency: ("links.json", "/$defs/packedDependency"),
    linkfile.PackedTarball: ("links.json", "/$defs/packedSpecLinks/properties/tarball"),
    documents.Links: ("links.json", "/$defs/links1"),
    documents.SpecLinks: ("links.json", "/$defs/specLinks"),
    documents.SpecDependency: ("links.json", "/$defs/dependency"),
    documents.Changes: ("changes.json", ""),
    documents.StackChanges: ("changes.json", "/properties/by_stack/additionalProperties"),
    documents.RemovedSpec: ("changes.json", "/$defs/removedSpec"),
    documents.ChangeTotals: ("changes.json", "/$defs/totals"),
    documents.History: ("history.json", ""),
    documents.HistoryEntry: ("history.json", "/$defs/publish"),
    documents.Report: ("report.json", ""),
    documents.ReportSource: ("report.json", "/$defs/source"),
    documents.InvalidRecord: ("report.json", "/$defs/invalidRecord"),
    documents.Conflict: ("report.json", "/$defs/conflict"),
    documents.MissingBinary: ("report.json", "/$defs/missingBinary"),
    documents.BinaryFinding: ("report.json", "/$defs/binaryFinding"),
}
#: Structs that are no document's object of their own.
NOT_WRITTEN = {documents.Companion}  # what a sync checks of a companion: its branch only


def sync(output: Path, *extra: str) -> None:
    """``crawler sync --branch develop`` of the sample mirror into ``output``, in this process."""
    argv = ["sync", "--branch", "develop", "--mirror", str(SAMPLE_MIRROR), "--output", str(output)]
    assert main([*argv, "-q", *extra]) == 0


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """develop of the sample mirror published twice: whole, then without two packages (so
    that its changes remove specs, and its history holds two publishes)."""
    output = tmp_path_factory.mktemp("schemas") / "output"
    sync(output, "--format", "json,pages")
    sync(output, "--exclude-package", "zlib*", "--exclude-package", "hdf5")
    return output


_DOCUMENT = {file: name for name, file in SCHEMAS.items()}


def _at(document: dict[str, Any], pointer: str) -> dict[str, Any]:
    """The object at a JSON pointer of a schema, through a ``$ref`` within it."""
    node: Any = document
    for part in filter(None, pointer.split("/")):
        node = node[part]
    if "$ref" in node and "properties" not in node:
        file, _, within = node["$ref"].partition("#")
        return _at(schema(_DOCUMENT[file]) if file else document, within)
    result: dict[str, Any] = node
    return result


def test_real_documents_match_their_schemas(published: Path) -> None:
    branch = published / "develop"
    for name in SCHEMAS:
        assert_valid(branch / name)
    kept = published / ".crawler" / "reports" / "develop.json"  # named as its folder's is
    assert_valid(kept.rename(kept.with_name("report.json")))
    changes = json.loads((branch / "changes.json").read_bytes())
    assert changes["removed_specs"] and changes["removed"]  # the removed specs were checked
    history = json.loads((branch / "history.json").read_bytes())
    assert len(history["publishes"]) == 2 and history["publishes"][1]["changes"]["first_publish"]


def test_the_schemas_know_every_field_of_the_structs() -> None:
    """A field added to a struct of crawler/documents.py or crawler/linkfile.py without its
    schema fails here (and a new struct until it is placed in WHERE)."""
    structs = {
        value
        for module in (documents, linkfile)
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, msgspec.Struct)
        and value.__module__ == module.__name__
    }
    assert structs - NOT_WRITTEN == set(WHERE)
    for struct, (name, pointer) in WHERE.items():
        node = _at(schema(name), pointer)
        fields = {f.encode_name for f in msgspec.structs.fields(struct)}
        assert set(node["properties"]) == fields, f"{struct.__name__}: {name}#{pointer}"
        assert set(node.get("required", ())) <= fields, struct.__name__


@pytest.mark.damages_output
def test_verify_checks_the_companions_schemas(published: Path, tmp_path: Path) -> None:
    branch = tmp_path / "develop"
    shutil.copytree(published / "develop", branch)
    report = json.loads((branch / "report.json").read_bytes())
    report["status"] = "ok"
    report["started_at"] = "now"  # verify checks formats too
    (branch / "report.json").write_text(json.dumps(report))
    history = json.loads((branch / "history.json").read_bytes())
    history["publishes"][0]["changes"]["totals"]["added"] = -1
    (branch / "history.json").write_text(json.dumps(history))
    assert verify_branch(branch) == [
        'report.json: schema: $.started_at: "now" is not a "date-time"',
        'report.json: schema: $.status: "ok" is not one of ["published","partial","unchanged",'
        '"skipped","refused","failed"]',
        "history.json: schema: $.publishes[0].changes.totals.added: -1 is less than the "
        "minimum of 0",
    ]
    assert verify_branch(branch, schema=False) == []


def test_the_schemas_are_read_offline() -> None:
    """A reference the shipped schemas do not resolve is an error, never a download."""
    with pytest.raises(jsonschema_rs.ValidationError, match="Retrieval is disabled"):
        compiled({"$ref": "https://example.invalid/elsewhere.schema.json"})
    with pytest.raises(jsonschema_rs.ValidationError, match="does not exist"):
        part_validator("index.json", "/$defs/no-such-part")


def test_the_documented_validation_runs(published: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example of docs/output-format.md's JSON Schemas section, as written."""
    page = (REPO / "docs" / "output-format.md").read_text()
    section = page[page.index("### JSON Schemas") :]
    [example] = re.findall(r"```python\n(.*?)```", section, re.S)[:1]
    monkeypatch.chdir(published.parent)  # it reads output/develop/history.json
    exec(compile(example, "docs/output-format.md: JSON Schemas", "exec"), {})
    history = json.loads((published / "develop" / "history.json").read_bytes())
    history["branch"] = "not a/branch"
    (published.parent / "bad").mkdir()
    bad = example.replace("output/develop/history.json", "bad/history.json")
    (published.parent / "bad" / "history.json").write_text(json.dumps(history))
    with pytest.raises(jsonschema_rs.ValidationError):
        exec(compile(bad, "docs/output-format.md: JSON Schemas", "exec"), {})
