"""The JSON Schemas of the documents a publish writes (``crawler/schema/``), as validators:
``index.json``'s, and those of its companions, whose schemas refer to it (and to each other)
by relative URI, resolved here from the files shipped beside them, never over the network."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]
from referencing import Registry, Resource

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
#: Each published document, and the file of its schema.
SCHEMAS = {
    "index.json": "index.schema.json",
    "report.json": "report.schema.json",
    "changes.json": "changes.schema.json",
    "history.json": "history.schema.json",
    "links.json": "links.schema.json",
}


def schema(document: str) -> dict[str, Any]:
    """The schema of the published document ``document`` (``index.json``...), parsed."""
    loaded: dict[str, Any] = json.loads((SCHEMA_DIR / SCHEMAS[document]).read_text("utf-8"))
    return loaded


@cache
def registry() -> Registry[Any]:
    """Every shipped schema, under its ``$id``."""
    resources = [Resource.from_contents(schema(name)) for name in SCHEMAS]
    return Registry().with_resources((r.id(), r) for r in resources)  # type: ignore[misc]


@cache
def validator(document: str, *, formats: bool = False) -> Any:
    """The validator of the published document ``document``; ``formats`` also checks
    ``format`` (``date-time``), where the libraries for it are installed."""
    checker = Draft202012Validator.FORMAT_CHECKER if formats else None
    return Draft202012Validator(schema(document), registry=registry(), format_checker=checker)


@cache
def part_validator(document: str, pointer: str) -> Any:
    """The validator of the part at the JSON pointer ``pointer`` (``/properties/packages``) of
    the schema of ``document``, its references resolved as in the whole schema: a document
    checked a part at a time (a package of ``index.json``) is never a tree whole."""
    part = {"$ref": f"{schema(document)['$id']}#{pointer}"}
    return Draft202012Validator(part, registry=registry())
