"""Which config file a command reads: the one its ``--config`` names, else the one the
environment names (:data:`CONFIG_ENV`), else ``./config/crawler.yaml`` if it exists, else
none (the built-in defaults). Apart from :mod:`crawler.config`, so that the consumer's
commands can ask without importing YAML and the config's checks (about 50 ms) when there is
no config to read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

#: The environment variable naming the config file of a command given no ``--config``.
CONFIG_ENV = "CRAWLER_CONFIG"
#: The config file read when neither ``--config`` nor :data:`CONFIG_ENV` names one, if it
#: exists (relative to the working folder).
DEFAULT_CONFIG = Path("config") / "crawler.yaml"


class ConfigFile(NamedTuple):
    """The config file a command reads (``path``; None: none, the built-in defaults), and
    what named it (``named_by``: ``--config``, :data:`CONFIG_ENV`, or ``""`` for the default
    file or none)."""

    path: Path | None
    named_by: str

    def describe(self) -> str:
        """The config in a message: ``the config /etc/crawler.yaml (named by CRAWLER_CONFIG)``,
        or why there is none."""
        if self.path is None:
            return f"no config was read (no --config, {CONFIG_ENV} unset, no ./{DEFAULT_CONFIG})"
        how = f" (named by {self.named_by})" if self.named_by else " (found in this folder)"
        return f"the config {self.path}{how}"


def config_file(given: Path | None) -> ConfigFile:
    """The config file to read when ``--config`` gave ``given`` (None: not given). An empty
    :data:`CONFIG_ENV` is unset. A folder or a dangling link at :data:`DEFAULT_CONFIG` is a
    broken config, not an absent one: running on the defaults (the public mirror, ./output)
    instead would be a surprise."""
    if given is not None:
        return ConfigFile(given, "--config")
    named = os.environ.get(CONFIG_ENV, "")
    if named:
        return ConfigFile(Path(named), CONFIG_ENV)
    if os.path.lexists(DEFAULT_CONFIG):
        return ConfigFile(DEFAULT_CONFIG, "")
    return ConfigFile(None, "")
