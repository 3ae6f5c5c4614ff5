"""spack-cache-crawler: crawl Spack binary build-cache mirrors into consolidated JSON indexes.

The public API is what ``__all__`` names; everything else is internal and may move. Names are
imported when first used, so that ``import crawler`` (and every decoding process, which
imports a module of this package) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.4.0"

#: Each public name, and the module that defines it.
_PUBLIC = {
    "main": "crawler.cli.command",
    "Config": "crawler.config",
    "load_config": "crawler.config",
    "verify_branch": "crawler.ops.verify",
    "CrawlerError": "crawler.errors",
    "ConfigError": "crawler.errors",
    "ExitCode": "crawler.errors",
    # a consumer's: reading a published branch, and querying it
    "load_index": "crawler.consume.load",
    "load_report": "crawler.consume.load",
    "load_changes": "crawler.consume.load",
    "load_history": "crawler.consume.load",
    "load_links": "crawler.consume.load",
    "find_specs": "crawler.consume.query",
    "parse_spec": "crawler.consume.specsyntax",
    "SpecQuery": "crawler.consume.specsyntax",
    "VariantTerm": "crawler.consume.specsyntax",
    "SpecSyntaxError": "crawler.consumer_errors",
    "diff_indexes": "crawler.consume.diff",
    "IndexDiff": "crawler.consume.diff",
    "PackageDiff": "crawler.consume.diff",
    "SpecDiff": "crawler.consume.diff",
    "Change": "crawler.consume.diff",
    "DiffTotals": "crawler.consume.diff",
    "Query": "crawler.consume.query",
    "Match": "crawler.consume.query",
    "Found": "crawler.consume.query",
    "Index": "crawler.documents",
    "Links": "crawler.documents",
    "PackageSummary": "crawler.documents",
    "SpecDetail": "crawler.documents",
    "SpecLinks": "crawler.documents",
    "SpecDependency": "crawler.documents",
    "Report": "crawler.documents",
    "Changes": "crawler.documents",
    "History": "crawler.documents",
    "NotABranchError": "crawler.consumer_errors",
    "SchemaVersionError": "crawler.consumer_errors",
    "QueryError": "crawler.consumer_errors",
    "UnknownTargetError": "crawler.consumer_errors",
    "MirrorsDifferError": "crawler.consumer_errors",
}

__all__ = [
    "Change",
    "Changes",
    "Config",
    "ConfigError",
    "CrawlerError",
    "DiffTotals",
    "ExitCode",
    "Found",
    "History",
    "Index",
    "IndexDiff",
    "Links",
    "Match",
    "MirrorsDifferError",
    "NotABranchError",
    "PackageDiff",
    "PackageSummary",
    "Query",
    "QueryError",
    "Report",
    "SchemaVersionError",
    "SpecDependency",
    "SpecDetail",
    "SpecDiff",
    "SpecLinks",
    "SpecQuery",
    "SpecSyntaxError",
    "UnknownTargetError",
    "VariantTerm",
    "__version__",
    "diff_indexes",
    "find_specs",
    "load_changes",
    "load_config",
    "load_history",
    "load_index",
    "load_links",
    "load_report",
    "main",
    "parse_spec",
    "verify_branch",
]

if TYPE_CHECKING:
    from .cli.command import main
    from .config import Config, load_config
    from .consume.diff import Change, DiffTotals, IndexDiff, PackageDiff, SpecDiff, diff_indexes
    from .consume.load import load_changes, load_history, load_index, load_links, load_report
    from .consume.query import Found, Match, Query, find_specs
    from .consume.specsyntax import SpecQuery, VariantTerm, parse_spec
    from .consumer_errors import (
        MirrorsDifferError,
        NotABranchError,
        QueryError,
        SchemaVersionError,
        SpecSyntaxError,
        UnknownTargetError,
    )
    from .documents import (
        Changes,
        History,
        Index,
        Links,
        PackageSummary,
        Report,
        SpecDependency,
        SpecDetail,
        SpecLinks,
    )
    from .errors import ConfigError, CrawlerError, ExitCode
    from .ops.verify import verify_branch


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'crawler' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
