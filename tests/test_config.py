"""Unit tests of crawler.config: defaults, path resolution, and messages naming key and file."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import yaml

from crawler.config import (
    PUBLIC_MIRROR,
    Config,
    Retry,
    Rewrite,
    Timeouts,
    build_config,
    load_config,
    with_overrides,
)
from crawler.errors import ConfigError
from crawler.mirror.discovery import Mirror

from .conftest import REPO, SAMPLE_MIRROR

BUNDLED = REPO / "config" / "crawler.yaml"
SAMPLE = REPO / "config" / "sample.yaml"


def write(path: Path, text: str) -> Path:
    """Write a config file (creating its folder) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def config_error(path: Path) -> ConfigError:
    """The ConfigError that loading ``path`` raises."""
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    return caught.value


# --- defaults -------------------------------------------------------------------------------


def test_built_in_defaults_equal_the_bundled_config() -> None:
    bundled = load_config(BUNDLED)
    defaults = Config()
    # The bundled file publishes next to the repository (../output from config/).
    assert bundled.output == str(REPO / "output")
    assert defaults.output == "output"
    assert bundled.origin == str(BUNDLED)
    same = msgspec.structs.replace(bundled, output=defaults.output, origin=defaults.origin)
    assert same == defaults
    assert defaults.mirror == PUBLIC_MIRROR == bundled.mirror


def test_defaults_match_the_readme_table() -> None:
    defaults = Config()
    assert (defaults.formats, defaults.concurrency, defaults.decode_workers) == (("json",), 8, 0)
    assert defaults.timeouts == Timeouts(connect=10, read=60, source=1800)
    assert defaults.retry == Retry(attempts=5, backoff=1.0, max_wait=60)
    assert defaults.rewrites == ()


def test_every_key_of_the_bundled_config_is_documented_there() -> None:
    text = BUNDLED.read_text()
    for key in msgspec.structs.fields(Config):
        if key.name not in ("origin", "flags"):  # not keys of the file
            assert f"\n{key.name}:" in text, key.name
    for sub in ("connect", "read", "source", "attempts", "backoff", "max_wait"):
        assert f"\n  {sub}:" in text, sub


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n", "---\n"])
def test_empty_file_gives_defaults(tmp_path: Path, text: str) -> None:
    path = write(tmp_path / "conf" / "empty.yaml", text)
    config = load_config(path)
    assert config.output == str(tmp_path / "conf" / "output")
    assert msgspec.structs.replace(config, output="output", origin="<defaults>") == Config()
    assert config.origin == str(path)


def test_the_environment_names_the_config_before_the_default_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``CRAWLER_CONFIG`` names the config of a command given no ``--config`` (sync's, and
    find's for its output folder), before ``./config/crawler.yaml``; empty, it is unset."""
    write(tmp_path / "config" / "crawler.yaml", "concurrency: 3\n")
    write(tmp_path / "etc" / "crawler.yaml", "concurrency: 5\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CRAWLER_CONFIG", str(tmp_path / "etc" / "crawler.yaml"))
    assert load_config(None).concurrency == 5
    assert load_config(Path("config/crawler.yaml")).concurrency == 3  # --config first
    monkeypatch.setenv("CRAWLER_CONFIG", "")
    assert load_config(None).concurrency == 3
    monkeypatch.setenv("CRAWLER_CONFIG", "etc/none.yaml")
    with pytest.raises(ConfigError) as caught:
        load_config(None)
    assert str(caught.value) == (
        "config error in etc/none.yaml: file not found (named by CRAWLER_CONFIG)"
    )


def test_no_config_file_and_no_default_file_gives_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config(None) == Config()


def test_default_file_is_read_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "config" / "crawler.yaml", "concurrency: 3\noutput: ../published\n")
    monkeypatch.chdir(tmp_path)
    config = load_config(None)
    assert config.concurrency == 3
    assert config.output == str(tmp_path / "published")
    assert config.origin == str(Path("config") / "crawler.yaml")


def test_sample_config_loads() -> None:
    config = load_config(SAMPLE)
    assert config.mirror == str(SAMPLE_MIRROR)
    assert config.output == str(REPO / "output")
    assert config.formats == ("html", "json", "pages")
    assert Mirror.parse(config.mirror).is_local


def test_config_is_frozen() -> None:
    config = Config()
    with pytest.raises(AttributeError):
        config.concurrency = 3  # type: ignore[misc]
    assert hash(Config()) == hash(Config())


# --- paths ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["http:stuff", "./https:/x", "file:", "https:"])
def test_folders_named_like_a_scheme_are_folders(tmp_path: Path, name: str) -> None:
    """Only what looks like a mistyped URL (``https:/host``, ``https//host``) is refused."""
    config = load_config(write(tmp_path / "c.yaml", f"mirror: '{name}'\n"))
    assert config.mirror == str(tmp_path / name)


def test_relative_paths_resolve_against_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path / "etc" / "crawler" / "c.yaml",
        "mirror: mirror\noutput: ../../out\nmetrics: crawler.prom\n",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(Path("..") / "etc" / "crawler" / "c.yaml")
    assert config.mirror == str(path.parent / "mirror")
    assert config.output == str(tmp_path / "out")
    assert config.metrics == str(path.parent / "crawler.prom")


def test_absolute_paths_and_urls_are_kept(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.yaml",
        f"mirror: http://127.0.0.1:9/base/\noutput: {tmp_path / 'abs'}\n",
    )
    config = load_config(path)
    assert config.mirror == "http://127.0.0.1:9/base/"
    assert config.output == str(tmp_path / "abs")
    assert load_config(write(tmp_path / "f.yaml", "mirror: file:///srv/m\n")).mirror == (
        "file:///srv/m"
    )


def test_only_a_url_must_encode_its_spaces(tmp_path: Path) -> None:
    """A folder may be named with spaces; an http(s) URL must percent-encode them."""
    config = load_config(write(tmp_path / "c.yaml", "mirror: my mirror\n"))
    assert config.mirror == str(tmp_path / "my mirror")
    for url in ("https://[::1]:8443/spack%20mirror/", "http://h/my mirror", "HTTP://u:p@h:+80/"):
        assert load_config(write(tmp_path / "u.yaml", f"mirror: '{url}'\n")).mirror == url


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = load_config(write(tmp_path / "c.yaml", "mirror: ~/mirror\noutput: ~/out\n"))
    assert (config.mirror, config.output) == (
        str(tmp_path / "home" / "mirror"),
        str(tmp_path / "home" / "out"),
    )


def test_flags_resolve_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = load_config(write(tmp_path / "conf" / "c.yaml", "mirror: m\noutput: o\n"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    config = with_overrides(
        loaded, mirror="flag-mirror", output="../flag-out", metrics="m/crawler.prom"
    )
    assert config.mirror == str(work / "flag-mirror")
    assert config.output == str(tmp_path / "flag-out")
    assert config.metrics == str(work / "m" / "crawler.prom")
    assert with_overrides(loaded, mirror="https://example.org/").mirror == "https://example.org/"


def test_flags_not_given_change_nothing(tmp_path: Path) -> None:
    loaded = load_config(write(tmp_path / "c.yaml", "concurrency: 3\n"))
    assert with_overrides(loaded, mirror=None, output=None, concurrency=None) is loaded
    changed = with_overrides(loaded, concurrency=5, formats=("json", "pages"))
    assert (changed.concurrency, changed.formats) == (5, ("json", "pages"))
    assert (changed.timeouts, changed.retry, changed.output) == (
        loaded.timeouts,
        loaded.retry,
        loaded.output,
    )


def test_bad_flag_values_are_config_errors_of_the_command_line() -> None:
    with pytest.raises(ConfigError) as caught:
        with_overrides(Config(), concurrency=0)
    assert caught.value.key == "concurrency"
    assert str(caught.value).startswith("config error in command line: key 'concurrency': ")
    with pytest.raises(ConfigError) as caught:
        with_overrides(Config(), mirror="ftp://example.org")
    assert caught.value.key == "mirror"


# --- errors name the key and the file -------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    err = config_error(tmp_path / "nope.yaml")
    assert str(err) == f"config error in {tmp_path / 'nope.yaml'}: file not found"


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"mirror: caf\xe9\n")
    assert str(config_error(path)).startswith(f"config error in {path}: cannot read file")
    assert str(config_error(tmp_path)).startswith(f"config error in {tmp_path}: cannot read file")


def test_yaml_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "timeouts:\n  read: 5\n connect: [\n")
    err = config_error(path)
    assert str(err).startswith(f"config error in {path}: not valid YAML")
    assert f'in "{path}", line 3, column 2' in str(err)
    assert "<unicode string>" not in str(err)


@pytest.mark.parametrize(
    ("text", "where", "reason"),
    [
        ("concurrency: !!int abc\n", "line 1, column 14", "cannot read 'abc' as tag:yaml.org,"),
        ("lock_wait: 1\ntimeouts:\n  read: !!float x\n", "line 3, column 9", "cannot read 'x'"),
        ("retry: !!timestamp 2020-13-45\n", "line 1", "month must be in 1..12"),
        ("metrics: !!bool maybe\n", "line 1, column 10", "cannot read 'maybe' as tag:yaml"),
        ("concurrency: !!int 1_000\n", "line 1", "not an integer as YAML 1.2 writes one"),
        ("lock_wait: !!float 1:30\n", "line 1", "not a number as YAML 1.2 writes one"),
    ],
)
def test_an_explicit_tag_that_does_not_fit_its_value_is_a_yaml_error(
    tmp_path: Path, text: str, where: str, reason: str
) -> None:
    """``!!int abc`` used to end in an internal error (a ValueError, exit 1)."""
    path = write(tmp_path / "c.yaml", text)
    err = str(config_error(path))
    assert err.startswith(f"config error in {path}: not valid YAML: "), err
    assert reason in err
    assert f'in "{path}", {where}' in err


@pytest.mark.parametrize(
    ("text", "kind"),
    [("- mirror: x\n", "list"), ("just a string\n", "str"), ("42\n", "int")],
)
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    path = write(tmp_path / "c.yaml", text)
    assert str(config_error(path)) == (
        f"config error in {path}: expected a mapping of settings, got {kind}"
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("bogus: 1\n", "bogus"),
        ("origin: here\n", "origin"),
        ("flags: [output]\n", "flags"),
        ("timeouts:\n  bogus: 1\n", "timeouts.bogus"),
        ("retry:\n  tries: 3\n", "retry.tries"),
        ("rewrites:\n  - prefix: a\n    replacement: b\n    extra: c\n", "rewrites[0].extra"),
    ],
)
def test_unknown_key(tmp_path: Path, text: str, key: str) -> None:
    path = write(tmp_path / "c.yaml", text)
    err = config_error(path)
    assert (err.key, err.path, err.reason) == (key, str(path), "unknown key")
    assert str(err) == f"config error in {path}: key '{key}': unknown key"


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("concurrency: 0\n", "concurrency", "must be a whole number, from 1 to 256"),
        ("concurrency: 257\n", "concurrency", "must be a whole number, from 1 to 256"),
        ("concurrency: '8'\n", "concurrency", "expected a whole number, got text"),
        (
            "concurrency: true\n",
            "concurrency",
            "expected a whole number, got a boolean (true or false)",
        ),
        ("decode_workers: -1\n", "decode_workers", "must be a whole number, from 0 to 64"),
        ("timeouts:\n  read: -1\n", "timeouts.read", "must be a number, greater than 0"),
        ("timeouts:\n  connect: 0\n", "timeouts.connect", "must be a number, greater than 0"),
        ("timeouts: 5\n", "timeouts", "expected a mapping, got a whole number"),
        ("retry:\n  attempts: 0\n", "retry.attempts", "must be a whole number, from 1 to 20"),
        ("retry:\n  attempts: 21\n", "retry.attempts", "must be a whole number, from 1 to 20"),
        ("retry:\n  backoff: -0.5\n", "retry.backoff", "must be a number, 0 or more"),
        ("retry:\n  max_wait: soon\n", "retry.max_wait", "expected a number, got text"),
        (
            "formats: [xml]\n",
            "formats[0]",
            "'xml' is not one of the valid values: html, json, pages",
        ),
        (
            "formats: [json, xml]\n",
            "formats[1]",
            "'xml' is not one of the valid values: html, json, pages",
        ),
        ("formats: []\n", "formats", "must not be empty (valid values: html, json, pages)"),
        (
            "formats: json\n",
            "formats",
            "expected a list, got text (valid values: html, json, pages)",
        ),
        ("mirror: ''\n", "mirror", "must not be empty"),
        ("mirror: 42\n", "mirror", "expected text, got a whole number"),
        ("mirror: ftp://x\n", "mirror", "unsupported URL scheme 'ftp'"),
        ("mirror: gs://spack-binaries\n", "mirror", "unsupported URL scheme 'gs'"),
        ("mirror: 'http://[bad'\n", "mirror", "'http://[bad' is not a valid URL: Invalid IPv6"),
        ("mirror: 'http://h:99999/'\n", "mirror", "'http://h:99999/' is not a valid URL: Port"),
        ("mirror: 'https://'\n", "mirror", "'https://' names no host"),
        ("mirror: 'https://:80/x'\n", "mirror", "'https://:80/x' is not a valid URL: Invalid"),
        ("mirror: 'http://h:0/'\n", "mirror", "'http://h:0/' names port 0"),
        ("mirror: 'http://h/?x=1'\n", "mirror", "'http://h/?…' has a query or fragment: a"),
        ("mirror: 'https://h/m#top'\n", "mirror", "'https://h/m#…' has a query or fragment"),
        ("mirror: 'https://h/m?'\n", "mirror", "'https://h/m?…' has a query or fragment"),
        ("mirror: 'https://a b.org'\n", "mirror", "'https://a b.org' holds a space in its host"),
        ('mirror: "https://a\\tb"\n', "mirror", "'https://a\\tb' holds a control character"),
        ("mirror: 'http://[::1]]/'\n", "mirror", "'http://[::1]]/' is not a valid URL"),
        ("mirror: 'http://xn--/'\n", "mirror", "'http://xn--/' is not a valid URL: decoding"),
        ("mirror: 'http://a..b/'\n", "mirror", "'http://a..b/' is not a valid URL: encoding"),
        (
            "mirror: 'https:/binaries.spack.io'\n",
            "mirror",
            "'https:/binaries.spack.io' looks like a mistyped URL: 'https://binaries.spack.io'? "
            "(write ./https:/binaries.spack.io for a folder)",
        ),
        ("mirror: 'HTTP//h/x'\n", "mirror", "'HTTP//h/x' looks like a mistyped URL: 'HTTP://h/x'?"),
        ("mirror: 'file:/srv/m'\n", "mirror", "'file:/srv/m' looks like a mistyped URL: 'file:///"),
        (
            "mirror: 'https:/u:s3cret@h/x'\n",
            "mirror",
            "'…@h/x' looks like a mistyped URL: 'https://…@h/x'? (write ./…@h/x for a folder)",
        ),
        ("output: ''\n", "output", "must not be empty"),
        ("publish:\n  max_drop: 1.5\n", "publish.max_drop", "must be a number, from 0 to 1"),
        ("publish:\n  max_drop: -0.1\n", "publish.max_drop", "must be a number, from 0 to 1"),
        (
            "publish:\n  max_failed_stacks: -1\n",
            "publish.max_failed_stacks",
            "must be a whole number, from 0 to 10000",
        ),
        (
            "publish:\n  max_failed_stacks: 10001\n",
            "publish.max_failed_stacks",
            "must be a whole number, from 0 to 10000",
        ),
        ("publish:\n  bogus: 1\n", "publish.bogus", "unknown key"),
        ("immutable_refs: develop\n", "immutable_refs", "expected a list, got text"),
        ("mutable_refs: [1]\n", "mutable_refs[0]", "expected text, got a whole number"),
        ("lock_wait: -1\n", "lock_wait", "must be a number, 0 or more"),
        ("metrics: [a]\n", "metrics", "expected text or null, got a list"),
        ("metrics: ''\n", "metrics", "must not be empty"),
        ("output: ' '\n", "output", "must not be empty or blank"),
        ('metrics: "\\t"\n', "metrics", "must not be empty or blank"),
        ("mirror: 'file://'\n", "mirror", "'file://' names no folder"),
        ("max_index_mb: 0\n", "max_index_mb", "must be a whole number, from 1 to 1048576"),
        ("history: -1\n", "history", "must be a whole number, from 0 to 1000"),
        ("history: 1001\n", "history", "must be a whole number, from 0 to 1000"),
        ("prune_formats: maybe\n", "prune_formats", "expected true or false, got text"),
        ("filters:\n  refs: [1]\n", "filters.refs[0]", "expected text, got a whole number"),
        (
            "max_index_mb: 1.5\n",
            "max_index_mb",
            "expected a whole number, got a number with a fraction",
        ),
        (
            "http:\n  access_token_variable: 1x\n",
            "http.access_token_variable",
            "must be the name of an environment variable (letters, digits and _, not starting "
            "with a digit, at most 128 characters)",
        ),
        (
            "s3:\n  region: US EAST\n",
            "s3.region",
            "must be a region name (lowercase letters, digits and -, at most 64)",
        ),
        ("http:\n  verify_ssl: 'no'\n", "http.verify_ssl", "expected true or false, got text"),
    ],
)
def test_bad_value(tmp_path: Path, text: str, key: str, reason: str) -> None:
    path = write(tmp_path / "c.yaml", text)
    err = config_error(path)
    assert err.key == key
    assert str(err).startswith(f"config error in {path}: key '{key}': {reason}"), str(err)


@pytest.mark.parametrize(
    ("text", "key", "reason"),
    [
        ("rewrites:\n  - replacement: https://x/\n", "rewrites[0].prefix", "missing required key"),
        (
            "rewrites:\n  - prefix: s3://a/\n    replacement: https://a/\n  - prefix: s3://b/\n",
            "rewrites[1].replacement",
            "missing required key",
        ),
        (
            "rewrites:\n  - prefix: ''\n    replacement: https://x/\n",
            "rewrites[0].prefix",
            "must not be empty",
        ),
        ("rewrites:\n  prefix: s3://a/\n", "rewrites", "expected a list, got a mapping"),
        ("rewrites:\n  - s3://a/\n", "rewrites[0]", "expected a mapping, got text"),
        (
            "rewrites:\n  - prefix: s3://a/\n    replacement: notaurl\n",
            "rewrites[0].replacement",
            "'notaurl' is not a URL (use an http, https or file URL)",
        ),
        (
            "rewrites:\n  - prefix: s3://a/\n    replacement: ftp://x/\n",
            "rewrites[0].replacement",
            "unsupported URL scheme 'ftp' (use an http, https or file URL)",
        ),
        (
            "rewrites:\n  - prefix: s3://a/\n    replacement: https://a b/\n",
            "rewrites[0].replacement",
            "'https://a b/' holds a space in its host",
        ),
        (
            "rewrites:\n  - prefix: s3://a/\n    replacement: https://h/?v=1\n",
            "rewrites[0].replacement",
            "'https://h/?…' has a query or fragment",
        ),
    ],
)
def test_rewrites_are_validated(tmp_path: Path, text: str, key: str, reason: str) -> None:
    path = write(tmp_path / "c.yaml", text)
    err = config_error(path)
    assert err.key == key
    assert str(err).startswith(f"config error in {path}: key '{key}': {reason}"), str(err)


def test_rewrites_load(tmp_path: Path) -> None:
    path = write(
        tmp_path / "c.yaml",
        "rewrites:\n  - prefix: s3://spack-binaries/\n    replacement: https://mirror.example/\n",
    )
    assert load_config(path).rewrites == (
        Rewrite(prefix="s3://spack-binaries/", replacement="https://mirror.example/"),
    )


@pytest.mark.parametrize(("text", "key"), [("1: 2\n", "1"), ("timeouts:\n  7: 1\n", "timeouts.7")])
def test_non_string_key_is_named(tmp_path: Path, text: str, key: str) -> None:
    """YAML allows keys that are not strings; the message must still name the key."""
    path = write(tmp_path / "c.yaml", text)
    err = config_error(path)
    assert str(err) == f"config error in {path}: key '{key}': unknown key"


def test_mirror_url_scheme_is_case_insensitive(tmp_path: Path) -> None:
    """A mirror the config accepts as an https URL must not be read as a local folder."""
    config = load_config(write(tmp_path / "c.yaml", "mirror: HTTPS://binaries.spack.io\n"))
    mirror = Mirror.parse(config.mirror)
    assert not mirror.is_local, mirror.base
    assert mirror.base.lower() == "https://binaries.spack.io"


def test_build_config_accepts_a_plain_mapping() -> None:
    config = build_config({"concurrency": 2, "formats": ["pages", "json"]})
    assert (config.concurrency, config.formats, config.origin) == (
        2,
        ("json", "pages"),
        "<defaults>",
    )
    assert config.output_dir == Path("output")


@pytest.mark.parametrize(
    "formats", [["pages"], ["pages", "json"], ["json", "pages", "pages"]], ids=str
)
def test_formats_have_one_spelling(formats: list[str]) -> None:
    """json is always written: however the formats are given, they compare equal (a branch's
    state records them, and other spellings made immutable refs be republished)."""
    assert build_config({"formats": formats}).formats == ("json", "pages")
    assert with_overrides(build_config({}), formats=tuple(formats)).formats == ("json", "pages")


@pytest.mark.parametrize(
    ("text", "reason", "key"),
    [
        ('output: "out\\0put"\n', "contains a NUL character", "output"),
        ('mirror: "/srv/mir\\0ror"\n', "contains a NUL character", "mirror"),
        ("rewrites: &loop [*loop]\n", "expected a mapping, got a list", "rewrites[0]"),
        ("publish: &loop {x: *loop}\n", "unknown key", "publish.x"),
        ("immutable_refs: &loop [[*loop]]\n", "expected text, got a list", "immutable_refs[0]"),
    ],
)
def test_values_no_path_can_hold_are_config_errors(
    tmp_path: Path, text: str, reason: str, key: str | None
) -> None:
    error = config_error(write(tmp_path / "crawler.yaml", text))
    assert reason in error.reason
    assert error.key == key


@pytest.mark.parametrize("broken", ["folder", "dangling-link"])
def test_a_broken_default_config_is_an_error_not_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """``config/crawler.yaml`` that is there but cannot be read: running on the built-in
    defaults instead would crawl the public mirror into ``./output``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config").mkdir()
    path = tmp_path / "config" / "crawler.yaml"
    if broken == "folder":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "moved.yaml")
    with pytest.raises(ConfigError) as caught:
        load_config(None)
    assert caught.value.path == "config/crawler.yaml"
    assert caught.value.reason == (
        "cannot read file: Is a directory"
        if broken == "folder"
        else f"file not found (a symbolic link to {tmp_path / 'moved.yaml'}, which does not exist)"
    )


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("publish:\n  max_drop: 0.1\nlock_wait: 4\npublish:\n  max_failed_stacks: 2\n", "publish"),
        ("output: a\noutput: b\n", "output"),
        ("timeouts:\n  read: 5\n  read: 50\n", "read"),
    ],
)
def test_a_key_given_twice_is_an_error(tmp_path: Path, text: str, key: str) -> None:
    """PyYAML keeps the last: a second ``publish:`` block silently replaced the first."""
    error = config_error(write(tmp_path / "c.yaml", text))
    assert error.reason.startswith(f"not valid YAML: key {key!r} is given twice")


def test_keys_merged_in_may_be_overridden(tmp_path: Path) -> None:
    """YAML's ``<<`` merges keys that the mapping may then set again: no duplicate."""
    path = write(tmp_path / "c.yaml", "timeouts:\n  <<: {read: 5, connect: 3}\n  read: 50\n")
    config = load_config(path)
    assert (config.timeouts.read, config.timeouts.connect) == (50, 3)


def test_nested_yaml_aliases_are_checked_in_linear_time(tmp_path: Path) -> None:
    """Nine levels of nine aliases each stand for 9**9 values: walking them all never ended."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    error = config_error(write(tmp_path / "c.yaml", "\n".join(lines) + "\n"))
    assert (error.key, error.reason) == ("a0", "unknown key")


def test_a_config_path_may_start_with_a_tilde(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--config '~/crawler.yaml'` (quoted, so the shell left it): the home folder, as for the
    other paths; its relative paths are relative to the file's folder there."""
    monkeypatch.setenv("HOME", str(tmp_path))
    write(tmp_path / "crawler.yaml", "output: out\n")
    config = load_config(Path("~/crawler.yaml"))
    assert config.output == str(tmp_path / "out")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("010", 10),  # YAML 1.1: octal 8
        ("0o10", 8),  # YAML 1.1: the string "0o10"
        ("0x1f", 31),
        ("+12", 12),
    ],
)
def test_whole_numbers_are_read_as_yaml_1_2_reads_them(
    tmp_path: Path, text: str, value: int
) -> None:
    assert load_config(write(tmp_path / "c.yaml", f"concurrency: {text}\n")).concurrency == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("concurrency: 0400\n", "must be a whole number, from 1 to 256"),  # YAML 1.1: 256, silently
        ("concurrency: 1_000\n", "expected a whole number, got text"),  # YAML 1.1: 1000
        ("lock_wait: 1:30\n", "expected a number, got text"),  # YAML 1.1: 90 (base 60)
        ("max_index_mb: 0b101\n", "expected a whole number, got text"),  # YAML 1.1: 5
    ],
)
def test_yaml_1_1_numbers_are_not_numbers(tmp_path: Path, text: str, reason: str) -> None:
    error = config_error(write(tmp_path / "c.yaml", text))
    assert error.reason.startswith(reason), error.reason


def test_a_character_yaml_refuses_is_a_yaml_error(tmp_path: Path) -> None:
    """It used to escape as an internal error (exit 1)."""
    path = write(tmp_path / "c.yaml", "output: o\n# a \x01 comment\n")
    err = str(config_error(path))
    assert err.startswith(f"config error in {path}: not valid YAML: unacceptable character #x0001")
    assert f'in "{path}", position 14' in err


@pytest.mark.slow
def test_a_document_nested_too_deeply_is_a_yaml_error(tmp_path: Path) -> None:
    error = config_error(write(tmp_path / "c.yaml", "mirror: " + "[" * 5000 + "\n"))
    assert error.reason == "not valid YAML: nested too deeply"


def test_explicitly_tagged_numbers_are_yaml_1_2_numbers(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", "concurrency: !!int 0x10\nlock_wait: !!float 10\n")
    config = load_config(path)
    assert (config.concurrency, config.lock_wait) == (16, 10.0)


def test_booleans_are_read_as_yaml_1_1_reads_them(tmp_path: Path) -> None:
    """``metrics: yes`` is refused as a boolean, not taken as a file named ``yes``."""
    error = config_error(write(tmp_path / "c.yaml", "metrics: yes\n"))
    assert (error.key, error.reason.endswith("got a boolean (true or false)")) == ("metrics", True)


def test_numbers_with_an_exponent_are_numbers(tmp_path: Path) -> None:
    # YAML 1.2 numbers: PyYAML alone reads 1e3 (no dot) and 1.5e3 (no sign) as strings, and the
    # error then said a float was expected where the user wrote one.
    path = write(
        tmp_path / "c.yaml",
        "timeouts: {read: 1e3, connect: 2.5E1}\nretry: {max_wait: 12e1}\n"
        "publish: {max_drop: 5e-1}\nlock_wait: .5e1\nmutable_refs: ['1e3', develop]\n",
    )
    config = load_config(path)
    assert (config.timeouts.read, config.timeouts.connect) == (1000.0, 25.0)
    assert (config.retry.max_wait, config.publish.max_drop, config.lock_wait) == (120.0, 0.5, 5.0)
    assert config.mutable_refs == ("1e3", "develop")  # quoted: still a string
    # The resolver belongs to the crawler's loader alone, not to every SafeLoader of the process.
    assert yaml.safe_load("v: 1e3") == {"v": "1e3"}
    error = config_error(write(tmp_path / "d.yaml", "max_index_mb: 1e3\n"))
    assert (error.key, error.reason.endswith("got a number with a fraction")) == (
        "max_index_mb",
        True,
    )


# --- the run's deadline -----------------------------------------------------------------------


@pytest.mark.parametrize("value", [".inf", "0", "-1", ".nan", "604801"])
def test_a_deadline_must_be_a_finite_time_of_at_most_a_week(tmp_path: Path, value: str) -> None:
    err = config_error(write(tmp_path / "c.yaml", f"deadline: {value}\n"))
    assert err.key == "deadline"
    assert err.reason == "must be a number, greater than 0 and 604800 or less"


def test_infinite_waits_are_taken_and_end_with_the_deadline(tmp_path: Path) -> None:
    text = "lock_wait: .inf\nretry: {max_wait: .inf}\ntimeouts: {source: .inf}\ndeadline: 60\n"
    config = load_config(write(tmp_path / "c.yaml", text))
    assert config.lock_wait == config.retry.max_wait == config.timeouts.source == float("inf")
    assert config.deadline == 60


def test_a_deadline_flag_is_checked_as_the_key_is() -> None:
    assert with_overrides(Config(), deadline=30.0).deadline == 30.0
    with pytest.raises(ConfigError) as caught:
        with_overrides(Config(), deadline=float("inf"))
    assert (caught.value.path, caught.value.key) == ("command line", "deadline")


# --- text that is not UTF-8 -------------------------------------------------------------------

NOT_TEXT = "not UTF-8 text (a byte that is not UTF-8, or a lone surrogate escape such as \\ud800)"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('mirror: "\\ud800"', "mirror"),
        ('output: "out\\ud800"', "output"),
        ('metrics: "\\udfff.prom"', "metrics"),
        ('filters: {packages: ["py-\\ud800"]}', "filters.packages[0]"),
        ('refs: {develop: {root: "/srv/\\ud800"}}', "refs.develop.root"),
        ('"\\ud800": 1', "\ud800"),
    ],
)
def test_text_that_is_not_utf8_is_a_config_error(tmp_path: Path, text: str, key: str) -> None:
    """A lone surrogate escape in YAML ended in a traceback (a path resolved, a state's JSON
    encoded): it is a config error naming its key."""
    err = config_error(write(tmp_path / "c.yaml", text))
    assert err.key == key
    assert err.reason == (NOT_TEXT if key.isascii() else f"a key that is {NOT_TEXT}")


def test_a_flag_with_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    """Bytes given on the command line (decoded with surrogateescape) may be a path's, not a
    glob's: a filter that could never match a package, and broke the state's JSON."""
    config = build_config({})
    with pytest.raises(ConfigError) as caught:
        with_overrides(config, filters={"packages": ["py-\udcff"]})
    assert str(caught.value) == (
        f"config error in command line: key 'filters.packages[0]': {NOT_TEXT}"
    )
    output = tmp_path / "out\udcff"
    assert with_overrides(config, output=output).output == str(output)
