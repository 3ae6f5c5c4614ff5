"""The JSON Schemas of the documents a publish writes (``crawler/schema/``), as validators:
``index.json``'s, and those of its companions, whose schemas refer to it (and to each other)
by relative URI, resolved here from the files shipped beside them, never over the network.

``jsonschema-rs`` validates them (compiled, about 200 times as fast as the pure-Python
``jsonschema`` on the sample's documents: see docs/performance.md), ``format`` (``date-time``)
included."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
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
#: A key jsonschema-rs gives as a number.
_NUMBER = re.compile(r"\+?[0-9]+")
#: A path in a document: keys of objects, indexes of lists.
Steps = list[str | int]


def schema(document: str) -> dict[str, Any]:
    """The schema of the published document ``document`` (``index.json``...), parsed."""
    loaded: dict[str, Any] = json.loads((SCHEMA_DIR / SCHEMAS[document]).read_text("utf-8"))
    return loaded


@cache
def registry() -> jsonschema_rs.Registry:
    """Every shipped schema, under its ``$id``."""
    return jsonschema_rs.Registry([(schema(name)["$id"], schema(name)) for name in SCHEMAS])


def compiled(part: dict[str, Any]) -> jsonschema_rs.Validator:
    """A validator of ``part``, a schema whose references resolve in the shipped schemas alone
    (any other is a :class:`jsonschema_rs.ValidationError`, never a download), formats checked."""
    return jsonschema_rs.Draft202012Validator(
        part, registry=registry(), validate_formats=True, offline=True
    )


@cache
def validator(document: str) -> jsonschema_rs.Validator:
    """The validator of the published document ``document``."""
    return compiled(schema(document))


@cache
def part_validator(document: str, pointer: str) -> jsonschema_rs.Validator:
    """The validator of the part at the JSON pointer ``pointer`` (``/properties/packages``) of
    the schema of ``document``, its references resolved as in the whole schema: a document
    checked a part at a time (a package of ``index.json``) is never a tree whole."""
    return compiled({"$ref": f"{schema(document)['$id']}#{pointer}"})


def schema_problems(
    check: jsonschema_rs.Validator, instance: object
) -> Iterator[tuple[Steps, str]]:
    """Each schema error of ``instance``: where it is (its keys as ``instance`` has them) and
    what is wrong, an ``enum``'s every allowed value named (jsonschema-rs names two)."""
    for error in check.iter_errors(instance):
        message = error.message
        if isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Enum):
            allowed, value = (_compact(x) for x in (error.kind.options, error.instance))
            message = f"{value} is not one of {allowed}"
        yield _keys(instance, error.instance_path), message


def _compact(value: object) -> str:
    """``value`` as jsonschema-rs's messages quote one."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _keys(instance: object, path: Steps) -> Steps:
    """``path`` in ``instance`` with each key of an object as it is there: jsonschema-rs gives a
    key made of digits as a number (``"0123"`` as 123). (It leaves an empty key out of the path
    altogether; such a path names the object above it.)"""
    steps: Steps = []
    node: Any = instance
    for step in path:
        if isinstance(node, dict):
            key = str(step)
            if key not in node:
                key = next((k for k in node if _NUMBER.fullmatch(k) and int(k) == step), key)
            steps.append(key)
            node = node.get(key)
        else:
            steps.append(step)
            fits = isinstance(node, list) and isinstance(step, int) and 0 <= step < len(node)
            node = node[step] if fits else None
    return steps


def json_path(at: Steps) -> str:
    """``at`` as a JSON path: ``$.packages['zlib-ng'].spec_details[0]``."""
    steps = [
        f"[{step}]"
        if isinstance(step, int)
        else f".{step}"
        if _PLAIN_KEY.fullmatch(step)
        else "['" + step.replace("\\", "\\\\").replace("'", "\\'") + "']"
        for step in at
    ]
    return "$" + "".join(steps)
