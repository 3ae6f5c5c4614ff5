"""Validate ``index.json`` files against the published JSON Schema (crawler/schema)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "crawler" / "schema" / "index.schema.json"


@cache
def validator() -> Any:
    """The schema's validator (the schema itself is checked against the draft once)."""
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def schema_errors(document: object) -> list[str]:
    """Every schema violation of ``document``, as ``path: message`` lines (empty when valid)."""
    errors = sorted(validator().iter_errors(document), key=lambda e: list(e.absolute_path))
    return [f"{'/'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}" for e in errors]


def assert_valid_index(path: Path) -> dict[str, Any]:
    """Assert that the file at ``path`` is a valid ``index.json``; return its parsed content."""
    document: dict[str, Any] = json.loads(path.read_bytes())
    errors = schema_errors(document)
    assert not errors, f"{path} does not match the schema:\n" + "\n".join(errors)
    return document
