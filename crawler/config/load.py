"""Where the settings come from: a YAML file, read strictly, and command-line flags on top.

One piece because both end in :func:`~.checks.build_config`: this module only finds the mapping
(YAML 1.2's numbers, no key given twice, errors naming the file and line) and where it came from.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import yaml

from ..configfile import CONFIG_ENV, DEFAULT_CONFIG, config_file
from ..errors import ConfigError
from ..files import read_regular
from .checks import NO_WORKING_FOLDER, _resolve, build_config
from .model import Config

__all__ = ["DEFAULT_CONFIG", "MAX_CONFIG_BYTES", "load_config", "with_overrides"]


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last:
    a second ``publish:`` block would silently replace the first). Keys merged in with ``<<``
    may be overridden, as YAML intends."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: refused later as not a string
                continue
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
        return super().construct_mapping(node, deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A value, or a :class:`yaml.constructor.ConstructorError` naming its line where an
        explicit tag does not fit it (``!!int abc``, ``!!float x``), not a bare ValueError."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError, KeyError) as err:  # KeyError: !!bool x
            what = repr(node.value) if isinstance(node, yaml.ScalarNode) else "this value"
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {what} as {node.tag}: {err}", node.start_mark
            ) from None


_INT, _FLOAT = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
_INT_12 = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
_FLOAT_12 = re.compile(
    r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    """An integer of YAML 1.2's core schema: decimal (leading zeros included), ``0o`` octal or
    ``0x`` hexadecimal (see the resolvers below), also when tagged ``!!int``."""
    text = str(loader.construct_scalar(node))
    if not _INT_12.fullmatch(text):  # int() would take 1_000 and other scripts' digits
        raise ValueError("not an integer as YAML 1.2 writes one")
    return int(text, 0) if text.startswith(("0o", "0x")) else int(text, 10)  # base 0: 010 fails


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    """A float of YAML 1.2's core schema, also when tagged ``!!float`` (``!!float 1:30`` is no
    number; YAML 1.1 made it 90.0)."""
    text = str(loader.construct_scalar(node))
    if not _FLOAT_12.fullmatch(text):  # `10` matches too
        raise ValueError("not a number as YAML 1.2 writes one")
    return float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))  # YAML's, Python's


# Numbers as YAML 1.2's core schema reads them. PyYAML follows YAML 1.1, which reads ``010`` as
# octal 8, ``1:30`` as 90 and ``1_000`` as 1000, and ``1e3`` as a string (it wants a dot and a
# signed exponent): a config saying ``concurrency: 0400`` would run with 256. Its int and float
# resolvers are replaced by 1.2's for this loader alone; booleans and nulls stay as they are.
_UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in (_INT, _FLOAT)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_UniqueKeyLoader.add_implicit_resolver(_INT, _INT_12, list("-+0123456789"))
_UniqueKeyLoader.add_implicit_resolver(_FLOAT, _FLOAT_12, list("-+.0123456789"))  # after int
_UniqueKeyLoader.add_constructor(_INT, _construct_int)
_UniqueKeyLoader.add_constructor(_FLOAT, _construct_float)


class _Named(io.StringIO):
    """Text that YAML's reader names in its errors' marks (``name``), not "<unicode string>"."""

    def __init__(self, text: str, name: str) -> None:
        super().__init__(text)
        self.name = name


def _load_yaml(text: str, origin: str) -> object:
    """The document in ``text``; its errors' marks name ``origin``."""
    loader = _UniqueKeyLoader(_Named(text, origin))  # a SafeLoader
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


#: The most bytes a config file may hold: the built-in one is under 4 KB, a config listing
#: hundreds of refs a few tens of KB.
MAX_CONFIG_BYTES = 1 << 20


def load_config(path: Path | None) -> Config:
    """Read a YAML config file.

    With ``path`` None, the file the environment's ``CRAWLER_CONFIG`` names is read, else
    ``config/crawler.yaml`` under the working directory when it exists; otherwise the
    built-in defaults (identical to that file) apply (:func:`crawler.configfile.config_file`).
    """
    found = config_file(path)
    if found.path is None:
        return Config()
    path = found.path
    origin = str(path)
    try:
        path = path.expanduser()  # `--config ~/crawler.yaml`, quoted
        folder = path.resolve().parent  # relative paths in it are relative to its folder
    except FileNotFoundError:
        raise ConfigError(origin, NO_WORKING_FOLDER) from None
    except (RuntimeError, OSError) as err:  # `~unknown-user/`, a symbolic link loop
        raise ConfigError(origin, f"cannot resolve the path: {err}") from None
    try:
        # Opened without waiting and refused unless a regular file of a bounded size: a named
        # pipe would wait for a writer, /dev/zero never ends (both hung the run).
        text = read_regular(path, MAX_CONFIG_BYTES).decode("utf-8")
    except FileNotFoundError:
        if path.is_symlink():
            target = os.readlink(path)
            reason = f"file not found (a symbolic link to {target}, which does not exist)"
            raise ConfigError(origin, reason) from None
        named = f" (named by {found.named_by})" if found.named_by == CONFIG_ENV else ""
        raise ConfigError(origin, f"file not found{named}") from None
    except OSError as err:  # the message names the file already: not its path again
        raise ConfigError(origin, f"cannot read file: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(origin, f"cannot read file: {err}") from None
    try:
        data = _load_yaml(text, origin)
    except yaml.YAMLError as err:
        raise ConfigError(origin, f"not valid YAML: {err}") from None
    except RecursionError:
        raise ConfigError(origin, "not valid YAML: nested too deeply") from None
    return build_config(data, origin, base=folder)


def with_overrides(config: Config, **flags: object) -> Config:
    """Apply command-line flags (``None`` means "not given") on top of a config.

    The result keeps the file as its origin; errors about a value a flag gave name the command
    line instead (see :meth:`Config.where`).
    """
    given = {key: value for key, value in flags.items() if value is not None}
    if not given:
        return config
    data = msgspec.to_builtins(config)
    data.pop("origin")
    data.pop("flags")
    for key in ("mirror", "output", "metrics"):
        if key in given:
            given[key] = _resolve(None, str(given[key]), "command line", key)
    data.update(given)
    try:
        built = build_config(data, config.origin)
    except ConfigError as err:
        top = re.split(r"[.\[]", err.key or "", maxsplit=1)[0]
        if top in given:
            raise ConfigError("command line", err.reason, err.key) from None
        raise
    return msgspec.structs.replace(built, flags=tuple(sorted({*config.flags, *given})))
