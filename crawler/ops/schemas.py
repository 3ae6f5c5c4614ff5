"""The JSON Schemas of the documents a publish writes (``crawler/schema/``), as validators:
``index.json``'s, and those of its companions, whose schemas refer to it (and to each other)
by relative URI, resolved here from the files shipped beside them, never over the network.

``jsonschema-rs`` validates them (compiled, about 200 times as fast as the pure-Python
``jsonschema`` on the sample's documents: see docs/performance.md), ``format`` (``date-time``)
included."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema_rs

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
#: Each published document, and the file of its schema.
SCHEMAS = {
    "index.json": "index.schema.json",
    "report.json": "report.schema.json",
    "changes.json": "changes.schema.json",
    "history.json": "history.schema.json",
    "links.json": "links.schema.json",
}
#: A key written after a dot in a JSON path (``$.packages.zlib``); any other in brackets.
_PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def schema(document: str) -> dict[str, Any]:
    """The schema of the published document ``document`` (``index.json``...), parsed."""
    loaded: dict[str, Any] = json.loads((SCHEMA_DIR / SCHEMAS[document]).read_text("utf-8"))
    return loaded


@cache
def registry() -> jsonschema_rs.Registry:
    """Every shipped schema, under its ``$id``."""
    return jsonschema_rs.Registry([(schema(name)["$id"], schema(name)) for name in SCHEMAS])


def _compiled(part: dict[str, Any]) -> jsonschema_rs.Validator:
    return jsonschema_rs.Draft202012Validator(
        part, registry=registry(), validate_formats=True, offline=True
    )


@cache
def validator(document: str) -> jsonschema_rs.Validator:
    """The validator of the published document ``document``."""
    return _compiled(schema(document))


@cache
def part_validator(document: str, pointer: str) -> jsonschema_rs.Validator:
    """The validator of the part at the JSON pointer ``pointer`` (``/properties/packages``) of
    the schema of ``document``, its references resolved as in the whole schema: a document
    checked a part at a time (a package of ``index.json``) is never a tree whole."""
    return _compiled({"$ref": f"{schema(document)['$id']}#{pointer}"})


def json_path(at: list[str | int]) -> str:
    """The path of an instance (a :class:`jsonschema_rs.ValidationError`'s ``instance_path``)
    as JSON path: ``$.packages['zlib-ng'].spec_details[0]``."""
    steps = [
        f"[{step}]"
        if isinstance(step, int)
        else f".{step}"
        if _PLAIN_KEY.fullmatch(step)
        else "['" + step.replace("\\", "\\\\").replace("'", "\\'") + "']"
        for step in at
    ]
    return "$" + "".join(steps)
