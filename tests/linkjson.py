"""A spec's links read from a published ``links.json`` as plain JSON, the way
docs/output-format.md tells a consumer to, apart from the crawler's readers: what they must
agree with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_links(branch: Path) -> dict[str, Any]:
    """The ``links.json`` of the published branch folder ``branch``, parsed."""
    document: dict[str, Any] = json.loads((branch / "links.json").read_bytes())
    return document


def resolved_entry(document: dict[str, Any], key: str) -> dict[str, Any]:
    """The entry of the spec ``key`` as a ``links.json`` of schema 1 gives it (full URLs, every
    dependency in full and named), from a document of schema 2 or 1."""
    entry: dict[str, Any] = document["specs"][key]
    if "schema_version" not in document:
        return entry
    caches, names, edges = document["caches"], document["names"], document["edges"]
    used = [edges[i] for i in entry.get("dependencies", [])]
    out: dict[str, Any] = {
        "dependencies": [{"name": names[d["hash"]], **d} for d in used],
        "locations": {
            stack: f"{caches[stack]}/{path}"
            for path, stacks in entry.get("paths", {}).items()
            for stack in stacks
        },
    }
    if "tarball" in entry:
        tarball = entry["tarball"]
        out["tarball"] = f"{caches[tarball['stack']]}/{tarball['path']}"
    if "signer" in entry:
        out["signer"] = entry["signer"]
    return out


def resolved_specs(branch: Path) -> dict[str, dict[str, Any]]:
    """Every spec's entry of the branch's ``links.json``, resolved (:func:`resolved_entry`)."""
    document = read_links(branch)
    return {key: resolved_entry(document, key) for key in document["specs"]}
