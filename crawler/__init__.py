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
}

__all__ = [
    "Config",
    "ConfigError",
    "CrawlerError",
    "ExitCode",
    "__version__",
    "load_config",
    "main",
    "verify_branch",
]

if TYPE_CHECKING:
    from .cli.command import main
    from .config import Config, load_config
    from .errors import ConfigError, CrawlerError, ExitCode
    from .ops.verify import verify_branch


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'crawler' has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
