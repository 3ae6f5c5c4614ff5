"""From a mapping of settings to a :class:`~.model.Config`, every value checked.

One piece because building the value is checking it: the keys (named as the file spells them),
the URLs a request will be sent to, and the paths, made absolute where they were given.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import msgspec
from yarl import URL

from ..errors import ConfigError
from ..files import as_given, branch_name_problem, is_safe_name
from ..urls import file_path, origin_of, redacted, without_credentials
from .keys import closest_key
from .model import Config, DeclaredRef, RefEntry
from .s3 import check_endpoint, check_s3_section, check_s3_url
from .wording import plain

#: Why a relative path cannot be used: the folder the run was started in has been deleted.
NO_WORKING_FOLDER = "relative, and the working folder is gone"

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
        meant = closest_key(path, unknown["field"])  # concurency: concurrency
        hint = f" (did you mean '{meant}'?)" if meant else ""
        return ConfigError(origin, f"unknown key{hint}", key=key)
    if message.startswith("Object missing required field"):
        field = message.split("`")[1]
        return ConfigError(origin, "missing required key", key=f"{path}.{field}" if path else field)
    return ConfigError(origin, plain(message, path), key=path or None)


_SECTIONS = ("timeouts", "retry", "publish", "rewrites", "s3", "http", "refs", "views")


#: The keys whose values are paths: they may hold bytes that are not UTF-8 (given on the
#: command line, which Python decodes with ``surrogateescape``), as file names may.
_PATH_KEYS = frozenset({"mirror", "output", "metrics", "cache_dir"})
_NOT_TEXT = "not UTF-8 text (a byte that is not UTF-8, or a lone surrogate escape such as \\ud800)"


def _check_keys(origin: str, data: object, path: str, seen: set[int] | None = None) -> None:
    """YAML allows keys that are not strings (``1: 2``); name them as unknown keys. Every key
    and text is UTF-8 text too (a path's bytes apart, :data:`_PATH_KEYS`): JSON documents
    and messages hold them.

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
            if not _is_text(key):
                raise ConfigError(origin, f"a key that is {_NOT_TEXT}", key=where)
            _check_keys(origin, value, where, seen)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            _check_keys(origin, item, f"{path}[{i}]", seen)
    elif isinstance(data, str) and not _is_text(data, path_ok=path in _PATH_KEYS):
        raise ConfigError(origin, _NOT_TEXT, key=path)


def _is_text(text: str, *, path_ok: bool = False) -> bool:
    try:
        os.fsencode(text) if path_ok else text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: A path that starts like a URL with a slash or the colon missing: ``https:/binaries.spack.io``,
#: ``https//binaries.spack.io``, ``file:/srv/mirror`` (a folder could be named ``http:stuff``).
_SCHEME_TYPO = re.compile(r"(?i)(https?|file|s3)(?::/(?!/)|//)")


def _check_mirror(origin: str, mirror: str, key: str = "mirror") -> None:
    """Refuse a mirror (or a rewrite's replacement, ``key``; that one must be a URL, as it
    replaces the start of one) that no request could be sent to."""
    scheme = mirror.split("://", 1)[0].lower() if "://" in mirror else ""
    allowed = ("http", "https", "file") if key != "mirror" else ("", "http", "https", "file", "s3")
    if scheme not in allowed:
        use = "http, https, file, s3 or a path" if "" in allowed else "an http, https or file URL"
        what = (
            f"unsupported URL scheme {scheme!r}" if scheme else f"{redacted(mirror)!r} is not a URL"
        )
        raise ConfigError(origin, f"{what} (use {use})", key)
    if scheme in ("http", "https"):
        check_http_url(origin, mirror, key)
    if scheme == "file":
        _check_file_url(origin, mirror, key)
    if scheme == "s3":
        check_s3_url(origin, mirror, key)


def _check_file_url(origin: str, given: str, key: str) -> None:
    """Refuse a ``file://`` URL that does not name a folder of this machine as written: one
    with a host (``file://srv/mirror`` reads ``/mirror``), a query or a fragment (dropped), a
    NUL once percent-decoded, or a path that cannot be resolved. Messages show it without a
    query or a fragment (:func:`crawler.urls.redacted`)."""
    url = redacted(given)
    parts = urlsplit(given)
    if not parts.path.strip() and not parts.netloc:  # `file://$UNSET`
        raise ConfigError(origin, f"{url!r} names no folder", key)
    if parts.netloc.lower() not in ("", "localhost"):
        raise ConfigError(
            origin,
            f"{url!r} names the host {parts.netloc!r}: a file URL names a folder of this "
            "machine, as file:///path (three slashes)",
            key,
        )
    if "?" in given or "#" in given:
        raise ConfigError(
            origin, f"{url!r} has a query or fragment (percent-encode ? and # as %3F, %23)", key
        )
    path = file_path(given)
    if "\0" in path:
        raise ConfigError(origin, f"{url!r} holds a NUL character (%00)", key)
    _check_resolvable(origin, path, url, key)


def _check_resolvable(origin: str, path: str, given: str, key: str) -> None:
    """Refuse a local ``path`` (written ``given``) that cannot be resolved as a run resolves
    it (:meth:`crawler.mirror.discovery.Mirror.parse`): ``~nobody-here/x``, a symbolic link
    loop."""
    try:
        Path(path).expanduser().resolve()
    except (RuntimeError, OSError) as err:
        raise ConfigError(origin, f"cannot resolve {given!r}: {err}", key) from None


def check_http_url(origin: str, url: str, key: str, *, proxy: bool = False) -> None:
    """Refuse an http(s) mirror URL that no request could be sent to, as parsed by yarl (what
    aiohttp sends requests with): a space in its path is encoded, one in its host is not. A
    query or a fragment is refused too: the paths of the mirror's files are added to the URL,
    after it (a ``proxy`` is named by its scheme, host and port alone).

    Messages show the URL without the credentials it may hold (:mod:`crawler.urls`).
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
    # A mirror reached through a link stays as given (crawler.mirror.discovery.Mirror); a
    # metrics file that is a link too, for the run to refuse it (crawler.cli.checks).
    if key in ("mirror", "metrics"):
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
        if isinstance(data.get("refs"), dict):  # as a file writes it (a list: as built)
            data = {**data, "refs": _convert_refs(origin, data["refs"])}
        # A section whose keys are all commented out reads as null: it means "the defaults".
        data = {k: v for k, v in data.items() if not (v is None and k in _SECTIONS)}
        config = msgspec.convert({**data, "origin": origin}, Config)
    except msgspec.ValidationError as err:
        raise _config_error(origin, err) from None
    except RecursionError:  # a YAML alias inside its own value: `a: &x [*x]`
        raise ConfigError(origin, "a value contains itself (a recursive YAML alias)") from None
    _check_mirror(origin, config.mirror)
    if config.s3.endpoint_url is not None:
        check_endpoint(origin, config.s3.endpoint_url)
        check_http_url(origin, config.s3.endpoint_url, "s3.endpoint_url")
    check_s3_section(origin, config.s3)
    _check_http_section(origin, config)
    for i, rewrite in enumerate(config.rewrites):
        _check_mirror(origin, rewrite.replacement, f"rewrites[{i}].replacement")
    _check_refs(origin, config)
    if config.cache_dir is not None and "://" in config.cache_dir:
        raise ConfigError(origin, "must name a folder, not a URL", "cache_dir")
    if base is not None:

        def optional(path: str | None, key: str) -> str | None:
            return None if path is None else _resolve(base, path, origin, key)

        certs = optional(config.http.ssl_certs, "http.ssl_certs")
        config = msgspec.structs.replace(
            config,
            mirror=_resolve(base, config.mirror, origin, "mirror"),
            output=_resolve(base, config.output, origin, "output"),
            metrics=optional(config.metrics, "metrics"),
            cache_dir=optional(config.cache_dir, "cache_dir"),
            http=msgspec.structs.replace(config.http, ssl_certs=certs),
        )
    return config


def _check_http_section(origin: str, config: Config) -> None:
    """A token is for an http(s) mirror given without credentials of its own; CA certificates
    are for a check that is made."""
    http = config.http
    if http.access_token_variable is not None:
        key = "http.access_token_variable"
        if origin_of(config.mirror) is None:
            raise ConfigError(origin, "a token is sent to an http(s) mirror only", key)
        if without_credentials(config.mirror)[1] is not None:
            raise ConfigError(origin, "give the mirror's URL credentials or a token, not both", key)
    if http.ssl_certs is not None and not http.verify_ssl:
        raise ConfigError(
            origin,
            "CA certificates are for checking certificates: verify_ssl is false",
            "http.ssl_certs",
        )


def from_environment(origin: str, variable: str | None, key: str) -> str | None:
    """The value of the environment variable the config key ``key`` names; the key and the
    variable, never the value, in the message when it is not set."""
    if variable is None:
        return None
    value = os.environ.get(variable)
    if not value:
        raise ConfigError(origin, f"the environment variable {variable} is not set", key)
    return value


def _check_refs(origin: str, config: Config) -> None:
    """Refuse declared refs (and views) that no run could use: names that cannot be a branch's
    (:func:`~crawler.files.branch_name_problem`; a declared place's view only names a folder of
    the mirror, so it need only be a safe name), a stack labelled ``root``, a place that names
    nothing a request could be sent to."""
    if config.refs and config.views:
        raise ConfigError(
            origin,
            "names views of the mirror, but refs are declared: declare each view as a "
            "ref ({url: <cache>, view: <name>})",
            "views",
        )
    for i, view in enumerate(config.views):
        if refused := branch_name_problem(view, "view"):
            raise ConfigError(origin, refused, f"views[{i}]")
    for ref in config.refs:
        name = ref.name
        if refused := branch_name_problem(name, "ref"):
            raise ConfigError(origin, refused, f"refs.{name}")
        labels = [label for label, _ in ref.stacks]
        if "root" in labels:
            where = f"refs.{name}.stacks.root"
            raise ConfigError(origin, "'root' is the ref's own index (key root), no stack", where)
        for label in labels:
            if not _LABEL.fullmatch(label) or not label.isprintable():
                raise ConfigError(origin, f"bad stack label {label!r}", f"refs.{name}.stacks")
        for label, place in ref.places:
            key = f"refs.{name}.root" if label == "root" else f"refs.{name}.stacks.{label}"
            if isinstance(place, str):
                _check_place(origin, place, key)
                continue
            _check_place(origin, place.url, f"{key}.url")
            if place.view is not None and not is_safe_name(place.view):
                raise ConfigError(
                    origin, f"view name {place.view!r} is not a safe folder name", f"{key}.view"
                )


def _convert_refs(origin: str, refs: dict[object, object]) -> list[DeclaredRef]:
    """The ``refs`` mapping as :class:`DeclaredRef` values, each ref converted on its own so
    that an error names it (``refs.develop.root``; msgspec would say ``refs[...]``)."""
    declared = []
    for name, ref in refs.items():
        try:
            entry = msgspec.convert(ref, RefEntry)
        except msgspec.ValidationError as err:
            found = _config_error(origin, err)
            key = f"refs.{name}.{found.key}" if found.key else f"refs.{name}"
            raise ConfigError(origin, found.reason, key) from None
        stacks = tuple(entry.stacks.items())
        declared.append(DeclaredRef(name=str(name), root=entry.root, stacks=stacks))
    return declared


#: A stack label: printed and logged, so no control characters (as the discovery document's).
_LABEL = re.compile(r"[^\x00-\x1f\x7f]{1,200}")


def _check_place(origin: str, value: str, key: str) -> None:
    """A declared index: a URL as a mirror's, or a path (a relative one is under the mirror)."""
    if "\0" in value or not value.strip():
        raise ConfigError(origin, "must name an index, a cache or a folder (no NUL)", key)
    if "://" in value:
        _check_mirror(origin, value, key)
    elif _SCHEME_TYPO.match(value):
        raise ConfigError(origin, f"{redacted(value)!r} looks like a mistyped URL", key)
    elif value.startswith(("/", "~")):  # a folder, as the run locates it (a path is relative)
        _check_resolvable(origin, value, value, key)


def _working_dir(key: str) -> Path:
    try:
        return Path.cwd()
    except FileNotFoundError:  # the folder the run was started in has been deleted
        raise ConfigError("command line", NO_WORKING_FOLDER, key) from None
