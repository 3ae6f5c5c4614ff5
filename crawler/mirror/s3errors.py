"""What each failure of an S3 request becomes in the crawler's error tree (:mod:`crawler.errors`),
so that the retry policy (:mod:`.retry`) and the sync read it as they read HTTP's: a missing
key is a 404 (``NoSuchKey``: a stack without an index is "missing"), throttling and 5xx are
transient, refused credentials are final and say what to check, no answer at all is a
connection error. Messages name the ``s3://`` URL and the S3 error code, never a secret.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import aiohttp
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    IncompleteReadError,
    NoCredentialsError,
    PartialCredentialsError,
)

from ..errors import FetchError, HTTPStatusError, NotFoundError
from ..text import shown

#: Codes S3 (and compatible stores) answer when asked to slow down, or for a passing fault:
#: retried, whatever the status that came with them.
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "RequestThrottled",
        "RequestTimeout",
        "InternalError",
        "ServiceUnavailable",
    }
)
#: Codes that say the credentials (or their absence) are the problem.
_DENIED = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "InvalidSecurity",
    }
)
_CHECK_CREDENTIALS = (
    "check the credentials the config's s3 section names, or s3.anonymous for a public bucket"
)


class S3ConnectionError(aiohttp.ClientConnectionError):
    """A request that reached no answer (connection refused or closed, a timeout, a body cut
    short), as botocore reports it. aiobotocore runs on aiohttp, and the retry policy knows
    aiohttp's connection errors as transient: this is one, named by its endpoint."""


def split_location(location: str) -> tuple[str, str]:
    """The bucket and key of an ``s3://<bucket>/<key>`` location."""
    if not location.lower().startswith("s3://"):
        raise ValueError(f"not an s3:// location: {location!r}")
    bucket, _, key = location[5:].partition("/")
    return bucket, key


def s3_failure(location: str, err: Exception) -> Exception:
    """The crawler's error for a failed S3 request to ``location``: a :class:`NotFoundError`
    for a missing key, an :class:`HTTPStatusError` for another answer (transient for 5xx and
    throttling, as the retry policy reads it), an :class:`S3ConnectionError` for no answer,
    a :class:`FetchError` for the rest (no credentials, say)."""
    if isinstance(err, ClientError):
        return _answered(location, err)
    if isinstance(err, HTTPClientError | ConnectionError | IncompleteReadError):
        return S3ConnectionError(shown(str(err)))
    if isinstance(err, NoCredentialsError | PartialCredentialsError):
        return FetchError(location, f"no usable AWS credentials ({err}): {_CHECK_CREDENTIALS}")
    if isinstance(err, BotoCoreError):
        return FetchError(location, shown(str(err)))
    return err


def _answered(location: str, err: ClientError) -> HTTPStatusError:
    error = err.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(err.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if code in ("NoSuchKey", "404", "NotFound"):
        missing = NotFoundError(location)
        missing.reason = "NoSuchKey: no such key"
        return missing
    said = shown(str(error.get("Message") or ""), 200)
    named = f" {shown(code, 80)}" if code and code != str(status) else ""  # HEAD has no code
    reason = f"HTTP {status}{named}" + (f": {said}" if said else "")
    if code == "NoSuchBucket":
        bucket = split_location(location)[0]
        reason += f" (no bucket {bucket!r} at this endpoint: check the mirror and s3.endpoint_url)"
    elif code in _DENIED or status in (401, 403):
        reason += f" ({_CHECK_CREDENTIALS})"
    # The policy retries 429 and 5xx: a throttling code is retried whatever came with it.
    effective = status if status == 429 or status >= 500 or code not in TRANSIENT_CODES else 503
    failed = HTTPStatusError(location, effective or 400)
    failed.reason = reason
    return failed


@contextlib.contextmanager
def translated(location: str) -> Iterator[None]:
    """botocore's errors as the crawler's (see :func:`s3_failure`)."""
    try:
        yield
    except (BotoCoreError, ClientError) as err:
        raise s3_failure(location, err) from err
