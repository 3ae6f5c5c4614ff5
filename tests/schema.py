"""Validate published documents against the JSON Schemas shipped in crawler/schema."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema_rs

from crawler.ops.schemas import SCHEMAS, json_path, schema, schema_problems, validator

__all__ = ["SCHEMAS", "assert_valid", "assert_valid_index", "schema_errors"]


@cache
def checked_validator(name: str) -> jsonschema_rs.Validator:
    """The validator of the document ``name`` (``index.json``...); the schema itself is
    checked against the draft once."""
    jsonschema_rs.meta.validate(schema(name))
    return validator(name)


def schema_errors(document: object, name: str = "index.json") -> list[str]:
    """Every schema violation of ``document``, as ``path: message`` lines (empty when valid)."""
    found = sorted(
        schema_problems(checked_validator(name), document), key=lambda p: list(map(str, p[0]))
    )
    return [f"{json_path(steps)}: {message}" for steps, message in found]


def assert_valid(path: Path) -> dict[str, Any]:
    """Assert that the published document at ``path`` (``index.json``, ``report.json``,
    ``changes.json``, ``history.json``, ``links.json``) matches its schema; return its parsed
    content."""
    assert path.name in SCHEMAS, f"{path}: no schema for {path.name}"
    document: dict[str, Any] = json.loads(path.read_bytes())
    errors = schema_errors(document, path.name)
    assert not errors, f"{path} does not match the schema:\n" + "\n".join(errors)
    return document


def assert_valid_index(path: Path) -> dict[str, Any]:
    """Assert that the file at ``path`` is a valid ``index.json``; return its parsed content."""
    assert path.name == "index.json"
    return assert_valid(path)
