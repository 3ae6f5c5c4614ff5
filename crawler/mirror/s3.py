"""The S3 transport: a mirror in an S3 bucket or an S3-compatible store (MinIO, Ceph, ...),
``s3://<bucket>/<prefix>``, read with the S3 API through aiobotocore (botocore's signing,
credential chain and error parsing, on the aiohttp stack the crawler already runs on).

What holds for HTTP holds here: the fetcher's limits, an index streamed to disk while hashed,
the retry policy (:mod:`.retry`) for transient failures alone (connection errors, timeouts,
bodies cut short, 5xx, throttling such as ``SlowDown``), an ETag for conditional requests
(``IfNoneMatch``), and a missing key (``NoSuchKey``) reported as a 404 is: a stack without an
index is "missing". botocore's own retries are off: the policy is the crawler's. A body is
read as stored: S3 does not undo a ``Content-Encoding``, so :attr:`Fetched.encoding` is None.

Credentials (the config's ``s3`` section) are botocore's to hold: named environment variables,
a profile, or the default chain; or none (``anonymous``, unsigned requests). Messages name the
``s3://`` URL, the S3 error code and what to check, never a secret.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore import UNSIGNED
from botocore.exceptions import ProfileNotFound
from botocore.loaders import Loader, create_loader

from .. import __version__
from ..config import Config
from ..config.checks import from_environment
from ..errors import ConfigError, FetchError, HTTPStatusError, NotFoundError
from .http import usable_etag
from .retry import RetryPolicy
from .s3errors import S3ConnectionError, split_location, translated
from .stream import stream_to, time_limit
from .transport import MAX_INDEX, Announced, Fetched, Probed, Progress, check_size

if TYPE_CHECKING:
    from types_aiobotocore_s3 import S3Client
    from types_aiobotocore_s3.type_defs import GetObjectOutputTypeDef

log = logging.getLogger(__name__)

T = TypeVar("T")
#: The most entries a listing of one folder gives (a folder of refs, of views): more is no
#: mirror's layout, and would hold the crawler for as long as a hostile store likes.
LIST_LIMIT = 10_000
#: How much of a body is asked of the stream at a time.
_CHUNK = 256 << 10


class S3Transport:
    """The :class:`~crawler.mirror.transport.Transport` of ``s3://`` locations. Its client
    lives between :meth:`open` and :meth:`close`."""

    #: About how many bytes of a download are hashed and written at a time.
    write_batch = 2 << 20
    #: The most entries :meth:`listdir` gives (a hook: a test makes it small).
    list_limit = LIST_LIMIT

    def __init__(self, config: Config, policy: RetryPolicy) -> None:
        self.config = config
        self.policy = policy
        self._client: S3Client | None = None
        self._stack = AsyncExitStack()

    async def open(self) -> None:
        """Create the run's client, its credentials as the config's ``s3`` section says."""
        s3, origin = self.config.s3, self.config.where("s3")
        keys = from_environment(origin, s3.access_key_id_variable, "s3.access_key_id_variable")
        secret = from_environment(
            origin, s3.secret_access_key_variable, "s3.secret_access_key_variable"
        )
        token = from_environment(origin, s3.session_token_variable, "s3.session_token_variable")
        try:
            session = AioSession(profile=s3.profile)
            session.register_component("data_loader", _models())
            if s3.profile:
                session.get_scoped_config()  # a profile not found fails here, named
        except ProfileNotFound as err:
            reason = f"{err} (in ~/.aws/config or credentials)"
            raise ConfigError(origin, reason, "s3.profile") from None
        t = self.config.timeouts
        settings = AioConfig(
            signature_version=UNSIGNED if s3.anonymous else None,
            connect_timeout=time_limit(t.connect),
            read_timeout=time_limit(t.read),
            retries={"total_max_attempts": 1},  # the crawler's policy retries
            max_pool_connections=2 * self.config.concurrency,
            user_agent_appid=f"spack-cache-crawler-{__version__}",
            s3={"addressing_style": s3.addressing_style},
            # The crawler hashes what it reads; the newer checksum headers trip some
            # S3-compatible stores.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        self._client = await self._stack.enter_async_context(
            session.create_client(
                "s3",
                endpoint_url=s3.endpoint_url,
                region_name=s3.region,
                aws_access_key_id=keys,
                aws_secret_access_key=secret,
                aws_session_token=token,
                config=settings,
            )
        )

    async def close(self) -> None:
        await self._stack.aclose()
        self._client = None

    @property
    def client(self) -> S3Client:
        if self._client is None:
            raise RuntimeError("S3 transport used before open()")
        return self._client

    async def _bounded(self, location: str, attempt: Callable[[], Awaitable[T]]) -> tuple[T, int]:
        """The retry policy's :meth:`~.RetryPolicy.bounded`, a connection error's final text
        as botocore gave it, naming the endpoint."""
        try:
            return await self.policy.bounded(location, attempt)
        except FetchError as err:
            if isinstance(err.__cause__, S3ConnectionError):
                raise FetchError(location, str(err.__cause__), err.attempts) from None
            raise

    async def confirmed(self, location: str) -> bool:
        """Whether a ``HeadObject``, retried as a download is, finds the object. Any answer
        but the object leaves it to a download, which says what is wrong."""
        bucket, key = split_location(location)

        async def attempt() -> bool:
            try:
                with translated(location):
                    await self.client.head_object(Bucket=bucket, Key=key)
            except FetchError as err:  # an answer, or no credentials: the download says
                log.debug("HeadObject %s: %s", location, err.reason)
                return False
            return True

        found, _ = await self._bounded(location, attempt)
        return found

    async def exists(self, location: str) -> bool:
        """Whether a ``HeadObject``, retried as a download is, finds the object (True) or
        answers 404 (False); any other answer fails, as a download's would."""
        bucket, key = split_location(location)

        async def attempt() -> bool:
            try:
                with translated(location):
                    await self.client.head_object(Bucket=bucket, Key=key)
            except NotFoundError:
                return False
            return True

        found, _ = await self._bounded(location, attempt)
        return found

    async def present(self, location: str, seconds: float) -> bool | None:
        """One ``HeadObject``, given ``seconds`` at most: found is True, a 404 False, anything
        else (another answer, an error, no answer in time) None."""
        bucket, key = split_location(location)
        try:
            async with asyncio.timeout(seconds):
                with translated(location):
                    await self.client.head_object(Bucket=bucket, Key=key)
        except HTTPStatusError as err:
            return False if err.status == 404 and "NoSuchBucket" not in err.reason else None
        except (FetchError, aiohttp.ClientError, TimeoutError) as err:
            log.debug("HeadObject %s: %s", location, err)
            return None
        return True

    async def read(self, location: str, limit: int, what: str) -> bytes:
        """The whole object, held in memory, of at most ``limit`` bytes (``what`` names the
        limit); one announced larger fails unread."""
        bucket, key = split_location(location)

        async def attempt() -> bytes:
            with translated(location):
                answer = await self.client.get_object(Bucket=bucket, Key=key)
                async with answer["Body"] as body:
                    check_size(location, answer.get("ContentLength"), limit, what)
                    data = bytearray()
                    async for chunk in body.iter_chunks(_CHUNK):
                        data += chunk
                        check_size(location, len(data), limit, what, "read")
            return bytes(data)

        data, _ = await self._bounded(location, attempt)
        return data

    async def download(
        self,
        location: str,
        dest: Path,
        limit: int,
        *,
        etag: str | None,
        progress: Progress | None,
        stored: bool,
        announced: Announced | None = None,
    ) -> Fetched:
        """Stream an object to ``dest``, hashing it: with ``etag``, a conditional
        ``GetObject`` (``IfNoneMatch``), ``announced`` told its ``ContentLength``. The body is
        always as stored (``stored`` changes nothing: S3 undoes no encoding)."""
        etag = usable_etag(etag)

        async def attempt() -> Fetched:
            answer = await self._index_get(location, etag)
            if answer is None:
                return Fetched(location, None, 0, None, 0, 0.0, etag)
            with translated(location):
                async with answer["Body"] as body:
                    length = answer.get("ContentLength")
                    check_size(location, length, limit, MAX_INDEX)
                    if announced is not None and length is not None:
                        announced(length)
                    size, digest = await stream_to(
                        body.iter_chunks(_CHUNK), dest, location, limit, progress, self.write_batch
                    )
            return Fetched(location, dest, size, digest, 0, 0.0, usable_etag(answer.get("ETag")))

        fetched, tries = await self._bounded(location, attempt)
        return dataclasses.replace(fetched, attempts=tries)

    async def probe(self, location: str, limit: int, *, etag: str | None) -> Probed:
        """The conditional ``GetObject`` a download makes, its body closed unread
        (``--dry-run``)."""
        etag = usable_etag(etag)

        async def attempt() -> Probed:
            answer = await self._index_get(location, etag)
            if answer is None:
                return Probed(location, True, None, etag)
            with translated(location):
                async with answer["Body"]:  # closed unread: the body is not wanted
                    size = answer.get("ContentLength")
                    check_size(location, size, limit, MAX_INDEX)
            return Probed(location, False, size, usable_etag(answer.get("ETag")))

        probed, _ = await self._bounded(location, attempt)
        return probed

    async def _index_get(self, location: str, etag: str | None) -> GetObjectOutputTypeDef | None:
        """A ``GetObject`` of an index (``IfNoneMatch`` with ``etag``); None for a 304."""
        bucket, key = split_location(location)
        try:
            with translated(location):
                if etag:
                    return await self.client.get_object(Bucket=bucket, Key=key, IfNoneMatch=etag)
                return await self.client.get_object(Bucket=bucket, Key=key)
        except HTTPStatusError as err:
            if etag and err.status == 304:
                return None
            raise

    async def listdir(self, location: str) -> list[str] | None:
        """The names directly under a folder (keys and common prefixes under ``<key>/``, with
        ``Delimiter="/"``), sorted; none for a folder that is not there. More than
        :attr:`list_limit` fail: no mirror's folder holds that many."""
        bucket, key = split_location(location)
        prefix = key.rstrip("/") + "/" if key.strip("/") else ""

        async def attempt() -> list[str]:
            names: set[str] = set()
            with translated(location):
                pages = self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=bucket, Prefix=prefix, Delimiter="/"
                )
                async for page in pages:
                    found = [p.get("Prefix", "") for p in page.get("CommonPrefixes", [])]
                    found += [o.get("Key", "") for o in page.get("Contents", [])]
                    names.update(n[len(prefix) :].rstrip("/") for n in found)
                    if len(names) > self.list_limit:
                        limit = self.list_limit
                        raise FetchError(location, f"lists more than {limit:,} entries")
            names.discard("")  # the folder's own marker object, if the store keeps one
            return sorted(names)

        names, _ = await self._bounded(location, attempt)
        return names


@functools.cache
def _models() -> Loader:
    """botocore's loader of service models, one per process: each session would read and
    parse S3's model again (a fifth of a second a client)."""
    return create_loader()
