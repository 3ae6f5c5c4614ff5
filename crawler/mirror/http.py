"""The HTTP(S) transport: one ``aiohttp.ClientSession`` for a whole run, with an explicit
timeout, a ``User-Agent`` naming the tool and a connector limit; basic auth for the origins the
user gave credentials for, a bearer token (the config's ``http.access_token_variable``) for the
mirror's origin alone, the ``http`` section's certificate checks, and the environment's proxies.

An index is streamed to disk while its SHA-256 is computed, so a large one never sits in this
process's memory. A 404 or any other 4xx is final at once, and so are a redirect, a body that
does not decode as its ``Content-Encoding`` says and one larger than its limit; the rest is the
retry policy's (:mod:`.retry`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import logging
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
from aiohttp.http_exceptions import (
    ContentLengthError,
    PayloadEncodingError,
    TransferEncodingError,
)

from .. import __version__
from ..config import Config
from ..config.checks import from_environment
from ..errors import ConfigError, FetchError, HTTPStatusError, NotFoundError
from ..text import shown
from ..urls import Origin, credentials, credentials_for, origin_of, redacted
from .proxies import environment_proxies, proxy_for
from .retry import RetryPolicy, describe, retry_after
from .stream import stream_to, time_limit
from .transport import MAX_INDEX, Announced, Fetched, Probed, Progress, check_size

log = logging.getLogger(__name__)

USER_AGENT = f"spack-cache-crawler/{__version__}"
#: The longest ETag kept (RFC 9110 sets none; real ones are a few dozen characters).
_ETAG_LIMIT = 1024


class HTTPTransport:
    """The :class:`~crawler.mirror.transport.Transport` of http(s) locations. Its session
    lives between :meth:`open` and :meth:`close`; requests go through the proxy the
    environment names for them, if any (:func:`~crawler.mirror.proxies.environment_proxies`)."""

    #: About how many bytes of a download are hashed and written at a time (a test makes
    #: it small, to see a download's progress many times).
    write_batch = 2 << 20

    def __init__(self, config: Config, policy: RetryPolicy) -> None:
        self.config = config
        self.policy = policy
        self._session: aiohttp.ClientSession | None = None
        #: Basic auth for the URLs the user gave credentials in (the mirror's, a rewrite's),
        #: sent to their origin alone.
        given = credentials(config.urls)
        self._credentials = given if any(secret for _, secret in given) else []
        self._proxies = environment_proxies(config.urls)
        #: The mirror's origin and the bearer token sent there, once open.
        self._token: tuple[Origin, str] | None = None

    def open(self) -> None:
        """Start the run's session (a ConfigError when the token's variable is not set, or the
        CA certificates cannot be read)."""
        config = self.config
        token = from_environment(
            config.where("http"), config.http.access_token_variable, "http.access_token_variable"
        )
        if token and not (token.isascii() and token.isprintable() and " " not in token):
            reason = f"the environment variable {config.http.access_token_variable} holds a "
            reason += "character a token cannot (a space, a control or non-ASCII character)"
            raise ConfigError(config.where("http"), reason, "http.access_token_variable")
        mirror = origin_of(config.mirror)
        self._token = (mirror, f"Bearer {token}") if token and mirror else None
        t = config.timeouts
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(
                total=None, connect=time_limit(t.connect), sock_read=time_limit(t.read)
            ),
            # Twice the download bound: a source's small sidecar request runs beside its index.
            connector=aiohttp.TCPConnector(limit=2 * config.concurrency, ssl=_checks(config)),
            headers={"User-Agent": USER_AGENT},
            raise_for_status=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("Fetcher used outside 'async with'")
        return self._session

    def _headers(self, location: str, headers: dict[str, str] | None = None) -> dict[str, str]:
        """The headers of a request to ``location``: ``headers``, and the credentials for its
        origin if the user gave some (the token: to the mirror's origin alone; redirects are
        not followed, so it goes nowhere else)."""
        headers = headers or {}
        secret = credentials_for(location, self._credentials) if self._credentials else None
        if secret:
            return {**headers, "Authorization": _basic_auth(*secret)}
        if self._token is not None and origin_of(location) == self._token[0]:
            return {**headers, "Authorization": self._token[1]}
        return headers

    def _proxy(self, location: str) -> str | None:
        return proxy_for(location, self._proxies) if self._proxies else None

    def _check_status(self, location: str, resp: aiohttp.ClientResponse) -> None:
        if resp.status == 404:
            raise NotFoundError(location)
        if 300 <= resp.status < 400 and "Location" in resp.headers:
            # Not followed: a redirect could send the crawler to any host (README, "Mirrors
            # and sources"). Not retried either: it would say the same again.
            raise FetchError(
                location,
                f"HTTP {resp.status} redirect to {shown(redacted(resp.headers['Location']))} not "
                "followed (use the final URL as the mirror, or a rewrite)",
            )
        if resp.status != 200:
            raise HTTPStatusError(
                location, resp.status, retry_after=retry_after(resp.headers.get("Retry-After"))
            )

    async def confirmed(self, location: str) -> bool:
        """Whether a ``HEAD`` request, retried as a download is, is answered 200."""

        async def attempt() -> bool:
            return await self._head(location) == 200

        found, _ = await self.policy.bounded(location, attempt)
        return found

    async def exists(self, location: str) -> bool:
        """Whether a ``HEAD`` request, retried as a download is, is answered 200 (True) or 404
        (False); any other answer fails, as a download's would. A server that allows no
        ``HEAD`` is asked with a ``GET`` whose body is left unread (the connection closed)."""

        async def attempt() -> bool:
            status = await self._head(location)
            if status in (405, 501):  # HEAD not allowed: a GET's status, its body not read
                status = await self._head(location, "GET")
            if status not in (200, 404):
                raise HTTPStatusError(location, status)
            return status == 200

        found, _ = await self.policy.bounded(location, attempt)
        return found

    async def present(self, location: str, seconds: float) -> bool | None:
        """One ``HEAD`` request, given ``seconds`` at most: 200 is True, 404 False, anything
        else (another status, an error, no answer in time) None."""
        try:
            async with asyncio.timeout(seconds):
                status = await self._head(location)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            log.debug("HEAD %s: %s", redacted(location), describe(err))
            return None
        return {200: True, 404: False}.get(status)

    async def _head(self, location: str, method: str = "HEAD") -> int:
        """The status a ``HEAD`` request for ``location`` is answered with (one attempt; with
        ``method`` GET, the body is not read)."""
        async with self.session.request(
            method,
            location,
            headers=self._headers(location),
            proxy=self._proxy(location),
            allow_redirects=False,
        ) as resp:
            _answered(resp)
            if method != "HEAD":
                resp.close()  # the body is not wanted: the connection is not reused
            return resp.status

    async def read(self, location: str, limit: int, what: str) -> bytes:
        """The whole body, held in memory, of at most ``limit`` bytes (``what`` names the
        limit); one announced larger fails unread."""

        async def attempt() -> bytes:
            async with self.session.get(
                location,
                headers=self._headers(location),
                allow_redirects=False,
                proxy=self._proxy(location),
            ) as resp:
                _answered(resp)
                self._check_status(location, resp)
                check_size(location, resp.content_length, limit, what)
                body = bytearray()
                with _decoding(location, resp):
                    async for chunk, _ in resp.content.iter_chunks():
                        body += chunk
                        check_size(location, len(body), limit, what, "read")
                return bytes(body)

        body, _ = await self.policy.bounded(location, attempt)
        return body

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
        """Stream an index to ``dest``, hashing it: a conditional ``GET`` with ``etag``; with
        ``stored``, the body as stored (``Accept-Encoding: identity``, any encoding kept).
        ``announced`` is told its ``Content-Length`` when that is the size written: not for a
        body whose ``Content-Encoding`` is undone as it comes."""
        etag = usable_etag(etag)  # one kept by an earlier version may not be

        async def attempt() -> Fetched:
            async with self._index_get(location, limit, etag, stored) as resp:
                if resp is None:
                    return Fetched(location, None, 0, None, 0, 0.0, etag)
                # A body decoded as it comes is not the size its Content-Length says.
                decoded = resp.headers.get("Content-Encoding", "identity") != "identity"
                length = resp.content_length
                if announced is not None and length is not None and (stored or not decoded):
                    announced(length)
                with _decoding(location, resp):
                    size, digest = await stream_to(
                        _blocks(resp), dest, location, limit, progress, self.write_batch
                    )
                encoding = resp.headers.get("Content-Encoding")
                etag_sent = usable_etag(resp.headers.get("ETag"))
                return Fetched(location, dest, size, digest, 0, 0.0, etag_sent, encoding)

        fetched, tries = await self.policy.bounded(location, attempt)
        return dataclasses.replace(fetched, attempts=tries)

    async def probe(self, location: str, limit: int, *, etag: str | None) -> Probed:
        """The conditional ``GET`` a download makes, its body left unread (``--dry-run``)."""
        etag = usable_etag(etag)

        async def attempt() -> Probed:
            async with self._index_get(location, limit, etag, stored=False) as resp:
                if resp is None:
                    return Probed(location, True, None, etag)
                sent = usable_etag(resp.headers.get("ETag"))
                found = Probed(location, False, resp.content_length, sent)
                resp.close()  # the body is not wanted: drop the connection rather than read it
                return found

        probed, _ = await self.policy.bounded(location, attempt)
        return probed

    @contextlib.asynccontextmanager
    async def _index_get(
        self, location: str, limit: int, etag: str | None, stored: bool
    ) -> AsyncIterator[aiohttp.ClientResponse | None]:
        """One ``GET`` of an index (conditional with ``etag``): its response, its status and
        announced size checked; None for a 304 answer to ``etag``."""
        asked = {"If-None-Match": etag} if etag else {}
        if stored:
            asked["Accept-Encoding"] = "identity"
        async with self.session.get(
            location,
            headers=self._headers(location, asked),
            allow_redirects=False,
            auto_decompress=not stored,
            proxy=self._proxy(location),
        ) as resp:
            _answered(resp, etag)
            if etag and resp.status == 304:
                yield None
                return
            self._check_status(location, resp)
            check_size(location, resp.content_length, limit, MAX_INDEX)
            yield resp

    async def listdir(self, location: str) -> list[str] | None:
        return None  # HTTP has no listing: an index page is a server's choice, not a format


def usable_etag(etag: str | None) -> str | None:
    """An ETag the crawler can send back in ``If-None-Match`` (aiohttp sends it as UTF-8, byte
    for byte) and keep in its state, else None, as if the server had sent none. Control
    characters cannot be sent in a header, and bytes that were not UTF-8 (decoded as
    surrogates, which ``isprintable`` refuses too) cannot be saved as JSON: kept, either would
    fail every later run of the branch."""
    if etag and len(etag) <= _ETAG_LIMIT and etag.isprintable():
        return etag
    return None


@contextlib.contextmanager
def _decoding(location: str, resp: aiohttp.ClientResponse) -> Iterator[None]:
    """Name a body that does not decode as its ``Content-Encoding`` says (aiohttp undoes it as
    the body arrives), and make that final: the server would send the same bytes again.

    aiohttp reports it as a payload error caused by a ``PayloadEncodingError``: a
    ``ContentEncodingError``, or a bare one when the server closed the connection before the
    body was read. A body cut short is caused by its subclasses for a missing length, and
    stays a transient failure.
    """
    try:
        yield
    except aiohttp.ClientPayloadError as err:
        encoding = resp.headers.get("Content-Encoding")
        cause = err.__cause__
        cut_short = isinstance(cause, ContentLengthError | TransferEncodingError)
        if encoding and isinstance(cause, PayloadEncodingError) and not cut_short:
            reason = f"body does not decode as its Content-Encoding ({encoding}) says"
            raise FetchError(location, reason) from err
        raise


def _answered(resp: aiohttp.ClientResponse, etag: str | None = None) -> None:
    """Log an answer (``-v``): method, URL, status, and the ETag a conditional request sent."""
    sent = f" (If-None-Match: {etag})" if etag else ""
    log.debug("%s %s%s: HTTP %d", resp.method, resp.url, sent, resp.status)


def _checks(config: Config) -> ssl.SSLContext | bool:
    """The certificate checks of HTTPS requests: aiohttp's (the system's CAs), none, or
    against the CA certificates of ``http.ssl_certs`` (a PEM file, or a folder of them)."""
    http = config.http
    if not http.verify_ssl:
        return False
    if http.ssl_certs is None:
        return True
    folder = Path(http.ssl_certs).is_dir()
    try:
        return ssl.create_default_context(
            cafile=None if folder else http.ssl_certs, capath=http.ssl_certs if folder else None
        )
    except (OSError, ssl.SSLError) as err:
        reason = f"cannot read CA certificates from {http.ssl_certs!r}: {err.strerror or err}"
        raise ConfigError(config.where("http"), reason, "http.ssl_certs") from None


def _basic_auth(user: str, password: str) -> str:
    """An ``Authorization`` header's value for HTTP basic auth (RFC 7617, in UTF-8)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


async def _blocks(resp: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """A response body's blocks, each as received (iter_any would join what is buffered)."""
    async for chunk, _ in resp.content.iter_chunks():
        yield chunk
