"""Older spellings of a database 6 node, as :mod:`bench.synth` writes them on request.

synth writes a DB 6 node as Spack v0.18 to v0.20 do (spec-file v3: ``hash``, ``package_hash``,
edges ``{"name", "hash", "type"}``). Older writers spelled the same node otherwise, and Spack's
readers still take each spelling (see :class:`crawler.decode.records.LegacyNode`):

``v0.17``
    Spack v0.17 (spec-file v2, ``node_dict_with_hashes``): no ``package_hash``; the node's
    ``full_hash`` beside its ``hash``.
``legacy_yaml``
    the DB 6 index of Spack's own test mirror ``lib/spack/spack/test/data/mirrors/legacy_yaml``:
    the node's hashes under ``_hash`` and ``_full_hash``, no ``hash`` (Spack's database reader
    gives a node its record's key).
``spec-file-v1``
    the spec-file v1 spellings that Spack v0.17's database reader accepted: ``dependencies`` an
    object keyed by name, ``{"zlib": {"hash", "type"}}``, and ``variants`` for ``parameters``
    (the compiler flags left out, as the writers of ``variants`` had none).
``edge-hash-names``
    each edge's hash under another of Spack's hash names (``full_hash``), no ``hash``: Spack's
    spec-file v2/v3 reader takes the first of ``ht.HASHES`` that an edge has.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

#: Every spelling :func:`respell` knows ("" is synth's own).
SPELLINGS = ("", "v0.17", "legacy_yaml", "spec-file-v1", "edge-hash-names")
_FLAGS = frozenset({"cflags", "cppflags", "cxxflags", "fflags", "ldflags", "ldlibs"})


def _full_hash(dag_hash: str) -> str:
    digest = hashlib.sha256(f"full:{dag_hash}".encode()).digest()
    return base64.b32encode(digest).decode("ascii").lower()[:32]


def check_spelling(spelling: str, db_version: int) -> None:
    """Raise ValueError unless ``spelling`` is one of :data:`SPELLINGS`, and "" for DB 7+."""
    if spelling not in SPELLINGS:
        raise ValueError(f"unknown spelling {spelling!r} (one of {', '.join(SPELLINGS[1:])})")
    if spelling and db_version != 6:
        raise ValueError(f"spelling {spelling!r} is of database 6, not {db_version}")


def respell(node: dict[str, Any], spelling: str) -> dict[str, Any]:
    """``node`` (a DB 6 node as synth writes it) as ``spelling`` writes it, a new dict."""
    if not spelling:
        return node
    node = dict(node)
    if spelling in ("v0.17", "legacy_yaml"):
        del node["package_hash"]
        node["full_hash"] = _full_hash(node["hash"])
    if spelling == "legacy_yaml":
        node["_hash"], node["_full_hash"] = node.pop("hash"), node.pop("full_hash")
    edges = node.get("dependencies")
    if spelling == "spec-file-v1":
        node["variants"] = {k: v for k, v in node.pop("parameters").items() if k not in _FLAGS}
        if edges:
            node["dependencies"] = {
                e["name"]: {"hash": e["hash"], "type": e["type"]} for e in edges
            }
    if spelling == "edge-hash-names" and edges:
        node["dependencies"] = [
            {"name": e["name"], "full_hash": e["hash"], "type": e["type"]} for e in edges
        ]
    return node
