"""The checks of an ``s3://`` mirror URL and of the ``s3`` section: what botocore would only
refuse at the first request, or not at all (credentials half given, or given twice over).

Messages name keys and environment variables, never a value that could be a secret.
"""

from __future__ import annotations

import re

from ..errors import ConfigError
from ..urls import redacted
from .model import S3

#: A bucket name as S3 and the compatible stores take it (AWS wants 3-63 lowercase letters,
#: digits, dots and hyphens; older buckets and other stores also use capitals and ``_``).
_BUCKET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_WHERE = (
    "credentials go in the config's s3 section, as the names of environment variables, or a profile"
)


def check_s3_url(origin: str, url: str, key: str) -> None:
    """Refuse an ``s3://<bucket>/<prefix>`` mirror that names no bucket, holds credentials, a
    query, a fragment or a control character."""
    shown = redacted(url)
    if not url.isprintable():
        raise ConfigError(origin, f"{shown!r} holds a control character", key)
    bucket, _, _ = url.split("://", 1)[1].partition("/")
    if "@" in bucket:
        raise ConfigError(origin, f"{shown!r} holds credentials: {_WHERE}", key)
    if "?" in url or "#" in url:
        raise ConfigError(
            origin, f"{shown!r} has a query or fragment: a mirror is a bucket and a prefix", key
        )
    if not bucket:
        raise ConfigError(origin, f"{shown!r} names no bucket (s3://<bucket>/<prefix>)", key)
    if not _BUCKET.fullmatch(bucket):
        raise ConfigError(origin, f"{shown!r}: {bucket!r} is not a bucket name", key)


def check_endpoint(origin: str, url: str) -> None:
    """Refuse an ``endpoint_url`` that is no http(s) URL, or holds credentials (the store
    is signed for with the s3 section's credentials, not basic auth)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise ConfigError(
            origin, f"{redacted(url)!r} is not an http or https URL", "s3.endpoint_url"
        )
    if "@" in rest.partition("/")[0]:
        raise ConfigError(
            origin, f"{redacted(url)!r} holds credentials: {_WHERE}", "s3.endpoint_url"
        )


def check_s3_section(origin: str, s3: S3) -> None:
    """Refuse credentials given by halves or twice over: a secret without its key id (or the
    other way round), a session token alone, a profile and variables at once, or credentials
    with ``anonymous``. (``endpoint_url`` is checked as an http(s) URL by the caller.)"""
    pair = (s3.access_key_id_variable, s3.secret_access_key_variable)
    if (pair[0] is None) != (pair[1] is None):
        names = ("access_key_id_variable", "secret_access_key_variable")
        given, missing = names if pair[1] is None else names[::-1]
        raise ConfigError(origin, f"given without s3.{missing}", f"s3.{given}")
    if s3.session_token_variable is not None and pair[0] is None:
        raise ConfigError(
            origin,
            "a session token goes with s3.access_key_id_variable and s3.secret_access_key_variable",
            "s3.session_token_variable",
        )
    if s3.profile is not None and pair[0] is not None:
        raise ConfigError(
            origin, "give a profile or credentials in variables, not both", "s3.profile"
        )
    if s3.anonymous and (s3.profile is not None or pair[0] is not None):
        raise ConfigError(
            origin, "anonymous access sends no credentials: remove them or this", "s3.anonymous"
        )
