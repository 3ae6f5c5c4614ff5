"""Validate published documents against the JSON Schemas shipped in crawler/schema."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from crawler.ops.schemas import SCHEMAS, schema, validator

__all__ = ["SCHEMAS", "assert_valid", "assert_valid_index", "schema_errors"]


@cache
def checked_validator(name: str) -> Any:
    """The validator of the document ``name`` (``index.json``...), formats checked too; the
    schema itself is checked against the draft once."""
    Draft202012Validator.check_schema(schema(name))
    return validator(name, formats=True)


def schema_errors(document: object, name: str = "index.json") -> list[str]:
    """Every schema violation of ``document``, as ``path: message`` lines (empty when valid)."""
    errors = sorted(
        checked_validator(name).iter_errors(document), key=lambda e: list(map(str, e.absolute_path))
    )
    return [f"{'/'.join(map(str, e.absolute_path)) or '<top>'}: {e.message}" for e in errors]


def sampled(document: dict[str, Any], size: int) -> dict[str, Any]:
    """``document`` with each top-level collection (a map of records or of lists: packages,
    specs, stacks...) and every list of records at any depth (a package's specs, a spec's
    dependencies, the sources...) cut to its first ``size`` entries. Records stay whole (a
    map of scalars such as ``stats``), and so do lists of strings (a spec's stacks must hold
    ``root``); a list's first records stay first (``prefixItems``)."""

    def uniform(values: Any, kind: type) -> bool:
        return all(isinstance(value, kind) for value in values)

    def cut(value: Any) -> Any:
        if isinstance(value, list):
            return [cut(item) for item in (value[:size] if uniform(value, dict) else value)]
        if isinstance(value, dict):
            return {key: cut(item) for key, item in value.items()}
        return value

    def top(value: Any) -> Any:
        if isinstance(value, dict) and (
            uniform(value.values(), dict) or uniform(value.values(), list)
        ):
            return cut(dict(list(value.items())[:size]))
        return cut(value)

    return {key: top(value) for key, value in document.items()}


def assert_valid(path: Path, *, sample: int | None = None) -> dict[str, Any]:
    """Assert that the published document at ``path`` (``index.json``, ``report.json``,
    ``changes.json``, ``history.json``, ``links.json``) matches its schema; return its parsed
    content. With ``sample``, only the first ``sample`` entries of each top-level map and list
    of records are checked (:func:`sampled`): the schemas hold no rule across records."""
    assert path.name in SCHEMAS, f"{path}: no schema for {path.name}"
    document: dict[str, Any] = json.loads(path.read_bytes())
    checked = document if sample is None else sampled(document, sample)
    errors = schema_errors(checked, path.name)
    assert not errors, f"{path} does not match the schema:\n" + "\n".join(errors)
    return document


def assert_valid_index(path: Path) -> dict[str, Any]:
    """Assert that the file at ``path`` is a valid ``index.json``; return its parsed content."""
    assert path.name == "index.json"
    return assert_valid(path)
