"""The crawler's settings: one frozen, validated value built from a YAML file and flags.

:mod:`.model` is the value (every key, its default and bounds), :mod:`.checks` builds it from a
mapping, checking keys, URLs and paths, and :mod:`.load` reads that mapping from YAML and flags.
The model's names are imported here at once; the others when first used, so that a decoding
process, which reads a default of the model, does not import YAML and URL parsing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .model import (
    DEFAULT_DEADLINE,
    DEFAULT_MAX_INDEX_MB,
    MAX_DEADLINE,
    PUBLIC_MIRROR,
    Config,
    Filters,
    Format,
    Publish,
    Retry,
    Rewrite,
    Timeouts,
    normal_formats,
)

#: The names defined in :mod:`.checks` and :mod:`.load`, and the module of each.
_LAZY = {
    "NO_WORKING_FOLDER": "checks",
    "build_config": "checks",
    "check_http_url": "checks",
    "DEFAULT_CONFIG": "load",
    "MAX_CONFIG_BYTES": "load",
    "load_config": "load",
    "with_overrides": "load",
}

__all__ = [
    "DEFAULT_CONFIG",
    "DEFAULT_DEADLINE",
    "DEFAULT_MAX_INDEX_MB",
    "MAX_CONFIG_BYTES",
    "MAX_DEADLINE",
    "NO_WORKING_FOLDER",
    "PUBLIC_MIRROR",
    "Config",
    "Filters",
    "Format",
    "Publish",
    "Retry",
    "Rewrite",
    "Timeouts",
    "build_config",
    "check_http_url",
    "load_config",
    "normal_formats",
    "with_overrides",
]

if TYPE_CHECKING:
    from .checks import NO_WORKING_FOLDER, build_config, check_http_url
    from .load import DEFAULT_CONFIG, MAX_CONFIG_BYTES, load_config, with_overrides


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'crawler.config' has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
