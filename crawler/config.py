"""The crawler's settings: one frozen, validated value built from a YAML file and flags.

Every key, its default and its meaning (``config/crawler.yaml`` repeats them with comments):

=====================  =========================  ==============================================
key                    default                    meaning
=====================  =========================  ==============================================
mirror                 https://binaries.spack.io  base of the mirror: http(s)://, file:// or a path
output                 output                     folder that receives ``<branch>/`` folders
formats                [json]                     ``json`` (always written) and/or ``pages``
concurrency            8                          sources of a branch downloaded at once (1-256)
decode_workers         0                          processes decoding indexes (0: one per CPU)
timeouts.connect       10                         seconds to open a connection
timeouts.read          60                         seconds without a byte before a read fails
timeouts.source        1800                       seconds one request may take, retries included
retry.attempts         5                          tries per request before giving up (1-20)
retry.backoff          1.0                        first backoff in seconds, doubled each try
retry.max_wait         60                         cap on one wait, ``Retry-After`` included
rewrites               []                         list of ``{prefix, replacement}`` URL rewrites
publish.max_drop       0.5                        refuse a publish losing more than this fraction
                                                  of the last published spec count (0-1)
publish.max_failed_stacks  0                      failed (not missing) stacks a branch may have and
                                                  still be published, as "partial"
immutable_refs         ["*"]                      fnmatch patterns of refs that never change once
                                                  published: skipped unless ``--force``
mutable_refs           ["develop"]                patterns always re-checked (win over immutable)
lock_wait              0                          seconds to wait for another run's lock
deadline               14400                      seconds a run may take in all (at most a week):
                                                  then it stops as if interrupted (exit 9)
metrics                null                       OpenMetrics file written after each run
max_index_mb           2048                       largest index a source may have, in MiB, as
                                                  served and once gunzipped (a bigger one fails
                                                  that source: a runaway or hostile body cannot
                                                  fill the disk or the memory)
=====================  =========================  ==============================================

Relative paths in a config file (``mirror``, ``output``, ``metrics``) are resolved against the
folder that holds the file, so a config works from any working directory; relative paths given as
flags are resolved against the working directory. ``.inf`` is taken for ``timeouts.*``,
``retry.max_wait`` and ``lock_wait``, and means no limit but the run's ``deadline``, which must
be finite: every wait of a run ends with it. ``s3://<bucket>/<path>`` source URLs map onto
``<mirror>/<path>`` unless a rewrite's ``prefix`` matches first. Numbers are read as YAML 1.2
reads them: ``1e3`` is 1000.0, not the string "1e3" (YAML 1.1, PyYAML's, wants ``1.0e+3``).
"""

from __future__ import annotations

import fnmatch
import io
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec
import yaml
from yarl import URL

from .decode.records import DEFAULT_MAX_INDEX_MB
from .errors import ConfigError
from .files import as_given, read_regular
from .mirror.urls import file_path, redacted, without_credentials

PUBLIC_MIRROR = "https://binaries.spack.io"
DEFAULT_CONFIG = Path("config") / "crawler.yaml"
#: Why a relative path cannot be used: the folder the run was started in has been deleted.
NO_WORKING_FOLDER = "relative, and the working folder is gone"

Format = Literal["json", "pages"]
#: Seconds a run may take by default: a nightly job that hangs is stopped well before the next.
DEFAULT_DEADLINE = 4 * 3600.0
#: The longest deadline (a week): a run must end, so ``.inf`` is refused.
MAX_DEADLINE = 7 * 24 * 3600.0


class Timeouts(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Time limits, in seconds, applied to every request."""

    connect: Annotated[float, msgspec.Meta(gt=0)] = 10.0
    read: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    source: Annotated[float, msgspec.Meta(gt=0)] = 1800.0


class Retry(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """How transient failures (connection errors, timeouts, 429, 5xx) are retried."""

    attempts: Annotated[int, msgspec.Meta(ge=1, le=20)] = 5
    backoff: Annotated[float, msgspec.Meta(ge=0)] = 1.0
    max_wait: Annotated[float, msgspec.Meta(ge=0)] = 60.0


class Rewrite(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Replace ``prefix`` at the start of a source URL with ``replacement``."""

    prefix: Annotated[str, msgspec.Meta(min_length=1)]
    replacement: str


class Publish(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """When a branch's new output may replace the last published one."""

    max_drop: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    max_failed_stacks: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 0  # as the flag


def normal_formats(formats: Iterable[str]) -> list[str]:
    """One spelling of each choice of formats: json (always written) among them, each once,
    sorted. What a branch was published in (its state) then compares equal however the formats
    were given, by a config, a flag, or an older version's state."""
    return sorted({"json", *formats})


class Config(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """All settings of one run: build it with :func:`load_config` and :func:`with_overrides`.

    Unknown keys are errors and the value is immutable.
    """

    mirror: Annotated[str, msgspec.Meta(min_length=1)] = PUBLIC_MIRROR
    output: Annotated[str, msgspec.Meta(min_length=1)] = "output"
    formats: Annotated[tuple[Format, ...], msgspec.Meta(min_length=1)] = ("json",)
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=256)] = 8
    decode_workers: Annotated[int, msgspec.Meta(ge=0, le=64)] = 0
    timeouts: Timeouts = Timeouts()
    retry: Retry = Retry()
    rewrites: tuple[Rewrite, ...] = ()
    publish: Publish = Publish()
    immutable_refs: tuple[str, ...] = ("*",)
    mutable_refs: tuple[str, ...] = ("develop",)
    lock_wait: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    deadline: Annotated[float, msgspec.Meta(gt=0, le=MAX_DEADLINE)] = DEFAULT_DEADLINE
    metrics: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    max_index_mb: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] = DEFAULT_MAX_INDEX_MB
    #: The file the settings came from, for messages; not a key of the file.
    origin: str = "<defaults>"
    #: The keys that command-line flags set (see :meth:`where`); not a key of the file.
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        msgspec.structs.force_setattr(self, "formats", tuple(normal_formats(self.formats)))

    def where(self, key: str) -> str:
        """Where the value of ``key`` came from, for messages: the command line or a file."""
        return "command line" if key in self.flags else self.origin

    @property
    def urls(self) -> tuple[str, ...]:
        """The URLs the user gave: the mirror and the rewrites' replacements."""
        return (self.mirror, *(r.replacement for r in self.rewrites))

    @property
    def output_dir(self) -> Path:
        """The output folder as a path."""
        return Path(self.output)

    @property
    def max_index_bytes(self) -> int:
        """``max_index_mb`` in bytes."""
        return self.max_index_mb << 20

    def is_immutable(self, ref: str) -> bool:
        """True for a ref that, once published, is not synced again without ``--force``."""
        if any(fnmatch.fnmatchcase(ref, p) for p in self.mutable_refs):
            return False
        return any(fnmatch.fnmatchcase(ref, p) for p in self.immutable_refs)


_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<field>[^`]+)`")


def _config_error(origin: str, err: msgspec.ValidationError) -> ConfigError:
    """Turn msgspec's message into one that names the key the way the YAML file spells it."""
    match = _AT.match(str(err))
    assert match is not None  # the pattern matches any string
    message, path = match["msg"], (match["path"] or "").lstrip(".")
    path = re.sub(r"\[(\d+)\]", r"[\1]", path)
    unknown = _UNKNOWN.match(message)
    if unknown:
        key = f"{path}.{unknown['field']}" if path else unknown["field"]
        return ConfigError(origin, "unknown key", key=key)
    if message.startswith("Object missing required field"):
        field = message.split("`")[1]
        return ConfigError(origin, "missing required key", key=f"{path}.{field}" if path else field)
    return ConfigError(origin, message.replace("`", "'"), key=path or None)


_SECTIONS = ("timeouts", "retry", "publish", "rewrites")


def _check_keys(origin: str, data: object, path: str, seen: set[int] | None = None) -> None:
    """YAML allows keys that are not strings (``1: 2``); name them as unknown keys.

    Each value is walked once: YAML aliases share values, and nested ones (``b: [*a, *a]``,
    ``c: [*b, *b]``, ...) would otherwise be walked exponentially often.
    """
    seen = set() if seen is None else seen
    if isinstance(data, dict | list):
        if id(data) in seen:
            return
        seen.add(id(data))
    if isinstance(data, dict):
        for key, value in data.items():
            where = f"{path}.{key}" if path else str(key)
            if not isinstance(key, str):
                raise ConfigError(origin, "unknown key", key=where)
            _check_keys(origin, value, where, seen)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            _check_keys(origin, item, f"{path}[{i}]", seen)


#: A path that starts like a URL with a slash or the colon missing: ``https:/binaries.spack.io``,
#: ``https//binaries.spack.io``, ``file:/srv/mirror`` (a folder could be named ``http:stuff``).
_SCHEME_TYPO = re.compile(r"(?i)(https?|file)(?::/(?!/)|//)")


def _check_mirror(origin: str, mirror: str, key: str = "mirror") -> None:
    """Refuse a mirror (or a rewrite's replacement, ``key``; that one must be a URL, as it
    replaces the start of one) that no request could be sent to."""
    scheme = mirror.split("://", 1)[0].lower() if "://" in mirror else ""
    allowed = ("http", "https", "file") if key != "mirror" else ("", "http", "https", "file")
    if scheme not in allowed:
        use = "http, https, file or a path" if "" in allowed else "an http, https or file URL"
        what = f"unsupported URL scheme {scheme!r}" if scheme else f"{mirror!r} is not a URL"
        raise ConfigError(origin, f"{what} (use {use})", key)
    if scheme in ("http", "https"):
        check_http_url(origin, mirror, key)
    if scheme == "file":
        _check_file_url(origin, mirror, key)


def _check_file_url(origin: str, url: str, key: str) -> None:
    """Refuse a ``file://`` URL that does not name a folder of this machine as written: one
    with a host (``file://srv/mirror`` reads ``/mirror``), a query or a fragment (dropped), a
    NUL once percent-decoded, or a path that cannot be resolved."""
    parts = urlsplit(url)
    if not parts.path.strip() and not parts.netloc:  # `file://$UNSET`
        raise ConfigError(origin, f"{url!r} names no folder", key)
    if parts.netloc.lower() not in ("", "localhost"):
        raise ConfigError(
            origin,
            f"{url!r} names the host {parts.netloc!r}: a file URL names a folder of this "
            "machine, as file:///path (three slashes)",
            key,
        )
    if "?" in url or "#" in url:
        raise ConfigError(
            origin, f"{url!r} has a query or fragment (percent-encode ? and # as %3F, %23)", key
        )
    path = file_path(url)
    if "\0" in path:
        raise ConfigError(origin, f"{url!r} holds a NUL character (%00)", key)
    try:
        Path(path).resolve()
    except (RuntimeError, OSError) as err:  # a symbolic link loop
        raise ConfigError(origin, f"cannot resolve {url!r}: {err}", key) from None


def check_http_url(origin: str, url: str, key: str, *, proxy: bool = False) -> None:
    """Refuse an http(s) mirror URL that no request could be sent to, as parsed by yarl (what
    aiohttp sends requests with): a space in its path is encoded, one in its host is not. A
    query or a fragment is refused too: the paths of the mirror's files are added to the URL,
    after it (a ``proxy`` is named by its scheme, host and port alone).

    Messages show the URL without the credentials it may hold (:mod:`crawler.mirror.urls`).
    """
    given = url
    url = redacted(given)
    plain, secret = without_credentials(given)
    if not given.isprintable():
        raise ConfigError(origin, f"{url!r} holds a control character", key)
    if secret is not None and ":" in secret[0]:  # basic auth cannot send it
        raise ConfigError(origin, f"{url!r}: the user name of its credentials holds a ':'", key)
    try:
        parsed = URL(plain)
        host = parsed.host  # IDNA errors (a UnicodeError, a ValueError) come here
        if host:
            host.encode("idna")  # as the request will: an empty or overlong label fails
    except ValueError as err:
        # An "@" not found as ending credentials: a password with a "/", "?" or "#" in it.
        hint = " (in credentials, percent-encode @ : / ? # %)" if "@" in plain else ""
        raise ConfigError(origin, f"{url!r} is not a valid URL: {err}{hint}", key) from None
    if "@" in plain:  # not where credentials end: part of a password, or of a path
        raise ConfigError(
            origin,
            f"{url!r} holds an '@' that does not end credentials (percent-encode @ : / ? # % in "
            "them, and an @ in a path as %40)",
            key,
        )
    if not host:
        raise ConfigError(origin, f"{url!r} names no host", key)
    if "?" in plain or "#" in plain:  # paths are added to a mirror: a query would end up first
        why = (
            "a proxy is named by its scheme, host and port"
            if proxy
            else "a mirror is a base URL that paths are added to (in a path, percent-encode ? "
            "and # as %3F, %23)"
        )
        raise ConfigError(origin, f"{url!r} has a query or fragment: {why}", key)
    if " " in host:
        raise ConfigError(origin, f"{url!r} holds a space in its host", key)
    if parsed.port == 0:
        raise ConfigError(origin, f"{url!r} names port 0", key)


def _resolve(base: Path | None, value: str, origin: str, key: str) -> str:
    """Make a relative filesystem path absolute against ``base`` (None: the working folder);
    leave URLs alone."""
    if "\0" in value:  # no file name or URL can hold one (and the OS refuses it)
        raise ConfigError(origin, "contains a NUL character", key)
    if not value.strip():  # `--output "$UNSET"` must not mean the working directory
        raise ConfigError(origin, "must not be empty or blank", key)
    if "://" in value:
        return value
    typo = _SCHEME_TYPO.match(value) if key == "mirror" else None
    if typo:  # else a folder named "https:", failing later as an unreachable mirror
        scheme, rest = typo[1], value[typo.end() :]
        meant = f"{scheme}:///{rest}" if scheme.lower() == "file" else f"{scheme}://{rest}"
        shown, meant = redacted(value), redacted(meant)  # user:password@ stays out of logs
        raise ConfigError(
            origin,
            f"{shown!r} looks like a mistyped URL: {meant!r}? (write ./{shown} for a folder)",
            key,
        )
    try:
        path = Path(value).expanduser()
        given = path.is_absolute()
        if not given:
            path = (base or _working_dir(key)) / path
        resolved = path.resolve()  # a symbolic link loop fails here, named
    except (RuntimeError, OSError) as err:  # `~nobody-here/x`; a symbolic link loop
        raise ConfigError(origin, f"cannot resolve {value!r}: {err}", key) from None
    if (
        key == "mirror"
    ):  # one reached through a link stays as given (crawler.mirror.discovery.Mirror)
        return str(as_given(path))
    return str(path) if given else str(resolved)


def build_config(data: object, origin: str = "<defaults>", base: Path | None = None) -> Config:
    """Validate a mapping of settings (as read from YAML) into a :class:`Config`."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(origin, f"expected a mapping of settings, got {type(data).__name__}")
    for internal in ("origin", "flags"):
        if internal in data:
            raise ConfigError(origin, "unknown key", key=internal)
    try:
        _check_keys(origin, data, "")
        # A section whose keys are all commented out reads as null: it means "the defaults".
        data = {k: v for k, v in data.items() if not (v is None and k in _SECTIONS)}
        config = msgspec.convert({**data, "origin": origin}, Config)
    except msgspec.ValidationError as err:
        raise _config_error(origin, err) from None
    except RecursionError:  # a YAML alias inside its own value: `a: &x [*x]`
        raise ConfigError(origin, "a value contains itself (a recursive YAML alias)") from None
    _check_mirror(origin, config.mirror)
    for i, rewrite in enumerate(config.rewrites):
        _check_mirror(origin, rewrite.replacement, f"rewrites[{i}].replacement")
    if base is not None:
        metrics = _resolve(base, config.metrics, origin, "metrics") if config.metrics else None
        config = msgspec.structs.replace(
            config,
            mirror=_resolve(base, config.mirror, origin, "mirror"),
            output=_resolve(base, config.output, origin, "output"),
            metrics=metrics,
        )
    return config


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
    if text.startswith("0o"):
        return int(text[2:], 8)
    if text.startswith("0x"):
        return int(text[2:], 16)
    return int(text, 10)


def _construct_float(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> float:
    """A float of YAML 1.2's core schema, also when tagged ``!!float`` (``!!float 1:30`` is no
    number; YAML 1.1 made it 90.0)."""
    text = str(loader.construct_scalar(node))
    if not _FLOAT_12.fullmatch(text):  # `10` matches too
        raise ValueError("not a number as YAML 1.2 writes one")
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return -math.inf if lowered.startswith("-") else math.inf
    if lowered == ".nan":
        return math.nan
    return float(text)


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

    With ``path`` None, ``config/crawler.yaml`` under the working directory is read when it
    exists; otherwise the built-in defaults (identical to that file) apply.
    """
    if path is None:
        # A folder or a dangling link there is a broken config, not an absent one: running on
        # the defaults (the public mirror, ./output) instead would be a surprise.
        if not os.path.lexists(DEFAULT_CONFIG):
            return Config()
        path = DEFAULT_CONFIG
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
        raise ConfigError(origin, "file not found") from None
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


def _working_dir(key: str) -> Path:
    try:
        return Path.cwd()
    except FileNotFoundError:  # the folder the run was started in has been deleted
        raise ConfigError("command line", NO_WORKING_FOLDER, key) from None
