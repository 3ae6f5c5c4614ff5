"""The fetcher: reads documents and index files from a mirror, over HTTP(S), from a local
folder or from S3, through the transport each location needs (:mod:`.http`, :mod:`.local`,
:mod:`.s3`: for a mirror given as ``s3://`` alone, so that botocore is imported for it alone).

One :class:`Fetcher` serves a whole run. It picks the transport of each location, sets the
limit of each kind of body (``max_index_mb`` for an index, :data:`DOCUMENT_LIMIT` for the
discovery document, :data:`SIDECAR_LIMIT` for a sidecar), holds the retry policy
(:mod:`.retry`) that the HTTP transport applies, and times and logs each index read.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config
from ..errors import FetchError
from .http import HTTPTransport
from .local import LocalFolder
from .retry import RetryPolicy, Sleep
from .transport import Announced, Fetched, Probed, Progress, Transport

if TYPE_CHECKING:
    from .s3 import S3Transport

log = logging.getLogger(__name__)

#: The largest discovery document or sidecar read (both are a few KB): :meth:`Fetcher.read`
#: holds the whole body in memory.
DOCUMENT_LIMIT = 64 << 20
#: The largest v2 ``index.json.hash`` read: it holds 64 hex digits. A larger limit would let a
#: hostile server make each of the run's concurrent sidecar reads hold that much memory.
SIDECAR_LIMIT = 4 << 10
_DOCUMENT = "the limit for a discovery document"
_SIDECAR = "the limit for a sidecar"


class Fetcher:
    """Fetches mirror files with retries; use as ``async with Fetcher(config) as fetcher``.

    HTTP requests go through the proxy the environment names for them, if any
    (:func:`~crawler.mirror.proxies.environment_proxies`); ``sleep`` waits between attempts."""

    def __init__(self, config: Config, *, sleep: Sleep = asyncio.sleep) -> None:
        self.config = config
        self.policy = RetryPolicy(config, sleep)
        self._http = HTTPTransport(config, self.policy)
        self._local = LocalFolder()
        self._s3: S3Transport | None = None
        if config.mirror.lower().startswith("s3://"):
            from .s3 import S3Transport

            self._s3 = S3Transport(config, self.policy)

    @property
    def retries(self) -> dict[str, int]:
        """Retries done by this fetcher, by location (for the run report)."""
        return self.policy.retries

    async def __aenter__(self) -> Fetcher:
        self._http.open()
        if self._s3 is not None:
            try:
                await self._s3.open()  # credentials as the config says, or a ConfigError
            except BaseException:
                await self._http.close()
                raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.close()
        if self._s3 is not None:
            await self._s3.close()

    def transport(self, location: str) -> Transport:
        """The transport that reaches ``location``: a local folder for ``file://``, S3 for
        ``s3://`` (a mirror in S3: other mirrors map ``s3://`` source URLs onto their own
        base), else HTTP."""
        if location.startswith("s3://"):
            if self._s3 is None:
                raise FetchError(location, "s3:// is read for a mirror given as s3:// alone")
            return self._s3
        return self._local if location.startswith("file://") else self._http

    async def confirmed(self, location: str) -> bool:
        """Whether a ``HEAD`` request (for a local file, a look at it) confirms that a file is
        on the mirror: an answer of 200.

        Any other answer leaves it to a download (``GET``, with its own retries), which then
        says whether the file is there: a ``HEAD`` answering 404, 400 or 403 (a presigned URL is
        signed for ``GET`` alone), not allowed (405, 501), or failing (429, 5xx) is no proof
        that a ``GET`` would not find the file. Connection errors and timeouts are retried.
        """
        return await self.transport(location).confirmed(location)

    async def exists(self, location: str) -> bool:
        """Whether a file is on the mirror: a ``HEAD`` request (``HeadObject``, a look at a
        local file) answered 200 (True) or 404 (False), retried as a download is; any other
        answer raises the :class:`~crawler.errors.FetchError` a download would."""
        return await self.transport(location).exists(location)

    async def present(self, location: str, seconds: float) -> bool | None:
        """Whether one ``HEAD`` request, given ``seconds`` at most, finds a file (200: True) or
        not (404: False); None when its answer proves nothing (another status, an error, no
        answer in time). Not retried: a look that may spare a sync, not a download. A local
        file is looked at."""
        return await self.transport(location).present(location, seconds)

    async def read(self, location: str, sidecar: bool = False) -> bytes:
        """The whole body of a small document: the discovery document, or a ``sidecar``.

        One larger than :data:`DOCUMENT_LIMIT` (:data:`SIDECAR_LIMIT` for a sidecar) fails,
        unread, as far as its size is known.
        """
        limit, what = (SIDECAR_LIMIT, _SIDECAR) if sidecar else (DOCUMENT_LIMIT, _DOCUMENT)
        return await self.transport(location).read(location, limit, what)

    async def read_bounded(self, location: str, limit: int, what: str) -> bytes:
        """The whole body of a small file of at most ``limit`` bytes (a spec or key manifest,
        a key); ``what`` names the limit in the error of one larger, which fails unread as far
        as its size is known."""
        return await self.transport(location).read(location, limit, what)

    async def listdir(self, location: str) -> list[str] | None:
        """The names of the entries directly under the folder URL ``location`` (index views,
        say); None when its transport cannot list (HTTP). A folder not there lists nothing."""
        return await self.transport(location).listdir(location)

    async def download(
        self,
        location: str,
        dest: Path,
        etag: str | None = None,
        progress: Progress | None = None,
        *,
        stored: bool = False,
        announced: Announced | None = None,
    ) -> Fetched:
        """Stream an index file to ``dest`` (local files are used in place), hashing it.

        With ``etag``, the request is conditional; a 304 answer gives a result whose
        :attr:`Fetched.not_modified` is true and nothing is written. ``progress`` is called
        with 0 as each attempt starts writing ``dest``, then with how many bytes are on disk
        after each write (not for local files: they are complete from the start), and
        ``announced`` with the size an answer announces, as it comes (see :data:`Announced`).

        A ``Content-Encoding`` is undone as the body arrives, unless ``stored``: then the body
        is asked for without one (``Accept-Encoding: identity``), and one that comes anyway is
        kept as sent: the bytes as stored, which is what a v3 blob's name is the checksum of.
        """
        started = time.monotonic()
        transport = self.transport(location)
        fetched = await transport.download(
            location,
            dest,
            self.config.max_index_bytes,
            etag=etag,
            progress=progress,
            stored=stored,
            announced=announced,
        )
        seconds = time.monotonic() - started
        if not fetched.not_modified:
            _log_read(location, fetched.size, seconds, fetched.sha256)
        return dataclasses.replace(fetched, seconds=seconds)

    async def probe(self, location: str, etag: str | None = None) -> Probed:
        """What a :meth:`download` of an index would first be told, nothing written (``crawler
        sync --dry-run``): the same request (conditional with ``etag``), retried alike, its
        body left unread; a local file is hashed in place. A 404 raises
        :class:`~crawler.errors.NotFoundError`, and a status or an announced size a download
        would fail on raises as it would."""
        limit = self.config.max_index_bytes
        return await self.transport(location).probe(location, limit, etag=etag)


def _log_read(location: str, size: int, seconds: float, sha256: str | None) -> None:
    """``-v``: an index read, downloaded or local (hashed in place)."""
    log.debug("%s: %d bytes in %.2fs, sha256 %s", location, size, seconds, sha256)
