"""Fetch: read documents and index files from an HTTP(S) mirror or a local folder.

One :class:`Fetcher` serves a whole run: one ``aiohttp.ClientSession`` with an explicit timeout, a
``User-Agent`` naming the tool and a connector limit. Index files are streamed to disk while their
SHA-256 is computed, so a large index never sits in this process's memory; local mirrors are read
in place. Only transient failures are retried (connection errors, timeouts, bodies cut short,
answers that do not parse as HTTP, 429 and 5xx), with exponential backoff and full jitter capped by
``retry.max_wait``; a ``Retry-After`` header replaces the backoff for that wait (capped the same
way). A 404 or any other 4xx is final at once, and so are a body that does not decode as its
``Content-Encoding`` says and one larger than its limit (``max_index_mb`` for an index,
:data:`DOCUMENT_LIMIT` for the discovery document, :data:`SIDECAR_LIMIT` for a sidecar).
Cancellation is never retried.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import email.utils
import hashlib
import ipaddress
import logging
import math
import os
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, TypeVar
from urllib.parse import urlsplit

import aiofiles
import aiohttp
from aiohttp.http_exceptions import (
    ContentLengthError,
    PayloadEncodingError,
    TransferEncodingError,
)
from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, wait_random_exponential

from .. import __version__
from ..config import Config, check_http_url
from ..errors import (
    ConfigError,
    FetchError,
    HTTPStatusError,
    NotFoundError,
    OutputError,
    SourceChanged,
    shown,
)
from ..files import open_regular
from .urls import credentials, credentials_for, file_path, redacted

log = logging.getLogger(__name__)

USER_AGENT = f"spack-cache-crawler/{__version__}"
_WRITE_BATCH = 2 << 20
#: The largest discovery document or sidecar read (both are a few KB): :meth:`Fetcher.read`
#: holds the whole body in memory.
DOCUMENT_LIMIT = 64 << 20
#: The largest v2 ``index.json.hash`` read: it holds 64 hex digits. A larger limit would let a
#: hostile server make each of the run's concurrent sidecar reads hold that much memory.
SIDECAR_LIMIT = 4 << 10
T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
#: Told how many bytes of a download are on disk (0 when an attempt starts over).
Progress = Callable[[int], None]


@dataclass(frozen=True)
class Fetched:
    """A downloaded (or local) index file and what was learnt fetching it."""

    location: str
    path: Path | None  # None when the server answered 304 Not Modified
    size: int
    sha256: str | None
    attempts: int
    seconds: float
    etag: str | None = None
    #: The ``Content-Encoding`` the body was sent with (undone, unless downloaded ``stored``),
    #: if any.
    encoding: str | None = None
    #: A local file is used in place: device, inode, size, mtime and ctime when it was hashed
    #: (ctime too: a tool may write a file and set its mtime back, never its ctime).
    identity: tuple[int, ...] | None = None

    @property
    def not_modified(self) -> bool:
        """True when a conditional request said the cached copy is current."""
        return self.path is None

    def check_unchanged(self) -> None:
        """Raise :class:`SourceChanged` when a local file is no longer the one that was hashed
        (replaced, or written to): what was read from it may not be the bytes of ``sha256``."""
        if self.identity is None or self.path is None:
            return  # a download is the crawler's own file
        try:
            now = _identity(os.stat(self.path))
        except OSError:
            now = None
        if now != self.identity:
            raise SourceChanged(self.location, "changed while it was being read")


def _retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # isdigit() alone takes "²", which float() refuses
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def is_transient(exc: BaseException) -> bool:
    """Whether a failed attempt is worth another try.

    Besides 429, 5xx, connection errors, bodies cut short and timeouts: an answer whose status
    line aiohttp could not parse. Those come from bytes a previous answer left on a kept-alive
    connection (a ``HEAD`` answered with a body, a body longer than its ``Content-Length``), and
    the retry gets a new connection. Other answers it cannot parse (an unknown
    ``Content-Encoding``, a header line too long, bad chunk sizes) would come back the same.
    aiohttp tells them apart only by their text; the session never raises
    ``ClientResponseError`` for a status.
    """
    if isinstance(exc, HTTPStatusError | aiohttp.ClientHttpProxyError):  # the proxy's answer
        return exc.status == 429 or exc.status >= 500
    if isinstance(exc, aiohttp.ClientResponseError):
        return str(exc.message).startswith("Bad status line")
    return isinstance(
        exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError | TimeoutError
    )


def describe(exc: BaseException) -> str:
    """A one-line reason for an aiohttp or timeout failure."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"body cut short ({exc})"
    if isinstance(exc, aiohttp.ClientHttpProxyError):  # its text holds the proxy's credentials
        return f"the proxy answered HTTP {exc.status} {shown(str(exc.message))}".rstrip()
    text = shown(str(exc)) or type(exc).__name__  # aiohttp may quote what the server sent
    return f"{type(exc).__name__}: {text}" if text != type(exc).__name__ else text


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


#: The longest ETag kept (RFC 9110 sets none; real ones are a few dozen characters).
_ETAG_LIMIT = 1024


def usable_etag(etag: str | None) -> str | None:
    """An ETag the crawler can send back in ``If-None-Match`` (aiohttp sends it as UTF-8, byte
    for byte) and keep in its state, else None, as if the server had sent none. Control
    characters cannot be sent in a header, and bytes that were not UTF-8 (decoded as
    surrogates, which ``isprintable`` refuses too) cannot be saved as JSON: kept, either would
    fail every later run of the branch."""
    if etag and len(etag) <= _ETAG_LIMIT and etag.isprintable():
        return etag
    return None


def _answered(resp: aiohttp.ClientResponse, etag: str | None = None) -> None:
    """Log an answer (``-v``): method, URL, status, and the ETag a conditional request sent."""
    sent = f" (If-None-Match: {etag})" if etag else ""
    log.debug("%s %s%s: HTTP %d", resp.method, resp.url, sent, resp.status)


def _limit(seconds: float) -> float | None:
    """A time limit as aiohttp takes it: None for none (``.inf`` in the config)."""
    return None if math.isinf(seconds) else seconds


def local_path(location: str) -> Path:
    """The filesystem path of a ``file://`` location."""
    return Path(file_path(location))


def environment_proxies(urls: Iterable[str]) -> dict[str, str]:
    """The proxies the environment names for requests to ``urls`` (the mirror's, the
    rewrites'), as curl and pip read them: ``https_proxy`` for https URLs, ``http_proxy`` for
    http ones, else ``all_proxy`` (either case; the lower-case name wins), and ``no_proxy`` for
    the hosts reached directly (names, domains, IP addresses and CIDR ranges, ``*``). A proxy
    without a scheme is an http one (``proxy:3128``). Only the schemes the URLs use are looked
    at (a local mirror uses none); a proxy for one of them that is no http(s) URL with a host
    raises :class:`ConfigError`. ``~/.netrc`` is not read: credentials go in the URLs."""
    schemes = {_scheme(url) for url in urls} & {"http", "https"}
    if not schemes:
        return {}
    found = urllib.request.getproxies_environment()
    proxies = {"no": found["no"]} if found.get("no") else {}
    for scheme in sorted(schemes):
        name = scheme if found.get(scheme) else "all"
        value = found.get(name)
        if not value:
            continue
        url = value if "://" in value else f"http://{value}"
        key = f"{name}_proxy"
        if _scheme(url) not in ("http", "https"):
            reason = f"{shown(redacted(value))!r} is not an http(s) proxy URL (http://host:port)"
            raise ConfigError("environment", reason, key)
        check_http_url("environment", url, key, proxy=True)
        proxies[scheme] = url
    return proxies


def _scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def _proxy_for(location: str, proxies: dict[str, str]) -> str | None:
    """The proxy of a request to ``location``, if the environment names one for it."""
    parts = urlsplit(location)
    proxy = proxies.get(parts.scheme)
    if proxy is None:
        return None
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:  # refused by the request itself
        port = None
    host_port = f"{host}:{port}" if port is not None else host
    return None if _bypassed(host, host_port, proxies) else proxy


def _bypassed(host: str, host_port: str, proxies: dict[str, str]) -> bool:
    """Whether ``no_proxy`` names ``host``: as urllib reads it (``*``, names, domains, with a
    port or not), or by an IP range (``10.0.0.0/8``), which urllib does not read."""
    no_proxy = proxies.get("no", "")
    if not no_proxy:
        return False
    with contextlib.suppress(ValueError):  # not an IP address
        address = ipaddress.ip_address(host)
        for entry in no_proxy.replace(",", " ").split():
            with contextlib.suppress(ValueError):  # not a range
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
    # typeshed does not list this function, public in urllib.request since Python 3.x.
    return bool(urllib.request.proxy_bypass_environment(host_port, proxies))  # type: ignore[attr-defined]


class Fetcher:
    """Fetches mirror files with retries; use as ``async with Fetcher(config) as fetcher``.

    Requests go through the proxy the environment names for them, if any
    (:func:`environment_proxies`)."""

    def __init__(self, config: Config, *, sleep: Sleep = asyncio.sleep) -> None:
        self.config = config
        self._sleep = sleep
        self._session: aiohttp.ClientSession | None = None
        #: Retries done by this fetcher, by location (for the run report).
        self.retries: dict[str, int] = {}
        #: Basic auth for the URLs the user gave credentials in (the mirror's, a rewrite's),
        #: sent to their origin alone.
        given = credentials(config.urls)
        self._credentials = given if any(secret for _, secret in given) else []
        self._proxies = environment_proxies(config.urls)

    async def __aenter__(self) -> Fetcher:
        t = self.config.timeouts
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(
                total=None, connect=_limit(t.connect), sock_read=_limit(t.read)
            ),
            # Twice the download bound: a source's small sidecar request runs beside its index.
            connector=aiohttp.TCPConnector(limit=2 * self.config.concurrency),
            headers={"User-Agent": USER_AGENT},
            raise_for_status=False,
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _headers(self, location: str, headers: dict[str, str] | None = None) -> dict[str, str]:
        """The headers of a request to ``location``: ``headers``, and the credentials for its
        origin if the user gave some."""
        headers = headers or {}
        secret = credentials_for(location, self._credentials) if self._credentials else None
        return {**headers, "Authorization": _basic_auth(*secret)} if secret else headers

    def _proxy(self, location: str) -> str | None:
        return _proxy_for(location, self._proxies) if self._proxies else None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The run's HTTP session."""
        if self._session is None:
            raise RuntimeError("Fetcher used outside 'async with'")
        return self._session

    def _wait(self, state: RetryCallState) -> float:
        retry = self.config.retry
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, HTTPStatusError) and exc.retry_after is not None:
            return min(exc.retry_after, retry.max_wait)
        backoff = wait_random_exponential(multiplier=retry.backoff, max=retry.max_wait)
        return float(backoff(state))

    def _before_sleep(self, location: str) -> Callable[[RetryCallState], None]:
        def note(state: RetryCallState) -> None:
            self.retries[location] = self.retries.get(location, 0) + 1
            exc = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            reason = str(exc) if isinstance(exc, FetchError) else describe(exc or Exception())
            log.info(
                "retrying %s in %.1fs (attempt %d: %s)",
                location,
                wait,
                state.attempt_number,
                reason,
            )

        return note

    async def _retrying(self, location: str, attempt: Callable[[], Awaitable[T]]) -> tuple[T, int]:
        """Run ``attempt`` until it succeeds, fails for good, or runs out of tries."""
        tries = 0
        try:
            async for state in AsyncRetrying(
                stop=stop_after_attempt(self.config.retry.attempts),
                wait=self._wait,
                retry=lambda s: (
                    s.outcome is not None and is_transient(s.outcome.exception() or Exception())
                ),
                before_sleep=self._before_sleep(location),
                sleep=self._sleep,
                reraise=True,
            ):
                with state:
                    tries = state.retry_state.attempt_number
                    return await attempt(), tries
        except HTTPStatusError as err:
            err.attempts = tries
            raise
        except (aiohttp.ClientError, TimeoutError) as err:
            raise FetchError(location, describe(err), tries) from err
        raise AssertionError("unreachable: tenacity either returns or raises")

    def _check_status(self, location: str, resp: aiohttp.ClientResponse) -> None:
        if resp.status == 404:
            raise NotFoundError(location)
        if 300 <= resp.status < 400 and "Location" in resp.headers:
            # Not followed: a redirect could send the crawler to any host (README, "Mirrors
            # and sources"). Not retried either: it would say the same again.
            raise FetchError(
                location,
                f"HTTP {resp.status} redirect to {shown(resp.headers['Location'])} not "
                "followed (use the final URL as the mirror, or a rewrite)",
            )
        if resp.status != 200:
            raise HTTPStatusError(
                location, resp.status, retry_after=_retry_after(resp.headers.get("Retry-After"))
            )

    async def _bounded(self, location: str, attempt: Callable[[], Awaitable[T]]) -> tuple[T, int]:
        """:meth:`_retrying` under the per-source time limit ``timeouts.source``."""
        limit = self.config.timeouts.source
        try:
            async with asyncio.timeout(limit):
                return await self._retrying(location, attempt)
        except TimeoutError:
            raise FetchError(location, f"took longer than timeouts.source ({limit:g}s)") from None

    async def confirmed(self, location: str) -> bool:
        """Whether a ``HEAD`` request (for a local file, a look at it) confirms that a file is
        on the mirror: an answer of 200.

        Any other answer leaves it to a download (``GET``, with its own retries), which then
        says whether the file is there: a ``HEAD`` answering 404, 400 or 403 (a presigned URL is
        signed for ``GET`` alone), not allowed (405, 501), or failing (429, 5xx) is no proof
        that a ``GET`` would not find the file. Connection errors and timeouts are retried.
        """
        if location.startswith("file://"):
            return local_path(location).is_file()

        async def attempt() -> bool:
            return await self._head(location) == 200

        found, _ = await self._bounded(location, attempt)
        return found

    async def present(self, location: str, seconds: float) -> bool | None:
        """Whether one ``HEAD`` request, given ``seconds`` at most, finds a file (200: True) or
        not (404: False); None when its answer proves nothing (another status, an error, no
        answer in time). Not retried: a look that may spare a sync, not a download. A local
        file is looked at."""
        if location.startswith("file://"):
            return local_path(location).is_file()
        try:
            async with asyncio.timeout(seconds):
                status = await self._head(location)
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            log.debug("HEAD %s: %s", redacted(location), describe(err))
            return None
        return {200: True, 404: False}.get(status)

    async def _head(self, location: str) -> int:
        """The status a ``HEAD`` request for ``location`` is answered with (one attempt)."""
        async with self.session.head(
            location, headers=self._headers(location), proxy=self._proxy(location)
        ) as resp:
            _answered(resp)
            return resp.status

    async def read(self, location: str, sidecar: bool = False) -> bytes:
        """The whole body of a small document: the discovery document, or a ``sidecar``.

        One larger than :data:`DOCUMENT_LIMIT` (:data:`SIDECAR_LIMIT` for a sidecar) fails,
        unread, as far as its size is known.
        """
        limit, what = (SIDECAR_LIMIT, _SIDECAR) if sidecar else (DOCUMENT_LIMIT, _DOCUMENT)
        if location.startswith("file://"):
            return await _read_local(location, limit, what)

        async def attempt() -> bytes:
            async with self.session.get(
                location,
                headers=self._headers(location),
                allow_redirects=False,
                proxy=self._proxy(location),
            ) as resp:
                _answered(resp)
                self._check_status(location, resp)
                _check_size(location, resp.content_length, limit, what)
                body = bytearray()
                with _decoding(location, resp):
                    async for chunk, _ in resp.content.iter_chunks():
                        body += chunk
                        _check_size(location, len(body), limit, what, "read")
                return bytes(body)

        body, _ = await self._bounded(location, attempt)
        return body

    async def download(
        self,
        location: str,
        dest: Path,
        etag: str | None = None,
        progress: Progress | None = None,
        *,
        stored: bool = False,
    ) -> Fetched:
        """Stream an index file to ``dest`` (local files are used in place), hashing it.

        With ``etag``, the request is conditional; a 304 answer gives a result whose
        :attr:`Fetched.not_modified` is true and nothing is written. ``progress`` is called
        with 0 as each attempt starts writing ``dest``, then with how many bytes are on disk
        after each write (not for local files: they are complete from the start).

        A ``Content-Encoding`` is undone as the body arrives, unless ``stored``: then the body
        is asked for without one (``Accept-Encoding: identity``), and one that comes anyway is
        kept as sent: the bytes as stored, which is what a v3 blob's name is the checksum of.
        """
        started = time.monotonic()
        limit = self.config.max_index_bytes
        if location.startswith("file://"):
            path = local_path(location)
            size, digest, identity = await asyncio.to_thread(_hash_file, location, path, limit)
            seconds = time.monotonic() - started
            _log_read(location, size, seconds, digest)
            return Fetched(location, path, size, digest, 1, seconds, identity=identity)

        etag = usable_etag(etag)  # one kept by an earlier version may not be

        async def attempt() -> Fetched:
            asked = {"If-None-Match": etag} if etag else {}
            if stored:
                asked["Accept-Encoding"] = "identity"
            headers = self._headers(location, asked)
            async with self.session.get(
                location,
                headers=headers,
                allow_redirects=False,
                auto_decompress=not stored,
                proxy=self._proxy(location),
            ) as resp:
                _answered(resp, etag)
                if etag and resp.status == 304:
                    return Fetched(location, None, 0, None, 0, 0.0, etag)
                self._check_status(location, resp)
                _check_size(location, resp.content_length, limit, _INDEX)
                with _decoding(location, resp):
                    size, digest = await _stream_to(resp, dest, location, limit, progress)
                etag_now = usable_etag(resp.headers.get("ETag"))
                encoding = resp.headers.get("Content-Encoding")
                return Fetched(location, dest, size, digest, 0, 0.0, etag_now, encoding)

        fetched, tries = await self._bounded(location, attempt)
        seconds = time.monotonic() - started
        if not fetched.not_modified:
            _log_read(location, fetched.size, seconds, fetched.sha256)
        return dataclasses.replace(fetched, attempts=tries, seconds=seconds)


def _log_read(location: str, size: int, seconds: float, sha256: str | None) -> None:
    """``-v``: an index read, downloaded or local (hashed in place)."""
    log.debug("%s: %d bytes in %.2fs, sha256 %s", location, size, seconds, sha256)


_INDEX = "max_index_mb"
_DOCUMENT = "the limit for a discovery document"
_SIDECAR = "the limit for a sidecar"


def _basic_auth(user: str, password: str) -> str:
    """An ``Authorization`` header's value for HTTP basic auth (RFC 7617, in UTF-8)."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _check_size(
    location: str, size: int | None, limit: int, what: str, how: str = "announced"
) -> None:
    """Fail a body of ``size`` bytes beyond ``limit``: as ``announced`` (Content-Length), ``on
    disk`` (a local file's size) or ``read`` so far. Not retried: the server would send the same
    again."""
    if size is not None and size > limit:
        told = f"at least {size:,} bytes" if how == "read" else f"{size:,} bytes {how}"
        raise FetchError(location, f"larger than {what} ({_binary(limit)}): {told}")


def _binary(size: int) -> str:
    """A limit in MiB or KiB as the configuration and README give it."""
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


async def _stream_to(
    resp: aiohttp.ClientResponse,
    dest: Path,
    location: str,
    limit: int,
    progress: Progress | None = None,
) -> tuple[int, str]:
    """Write a response body to ``dest`` while hashing it, off the event loop.

    A body longer than ``limit`` bytes (once decoded, for a compressed ``Content-Encoding``)
    fails as soon as it is: a runaway or hostile server cannot fill the disk.

    Chunks are gathered into batches of about ``_WRITE_BATCH`` bytes; each batch is hashed and
    written by one call in a worker thread (``hashlib`` and file writes release the GIL), so the
    event loop only reads sockets: hashing 600 MB on the loop would stall every other download.
    """
    digest = hashlib.sha256()
    size = 0
    batch: list[bytes] = []
    pending = 0
    tell = progress or (lambda _: None)
    tell(0)  # before an earlier attempt's file is replaced
    try:
        # On the loop, not in a thread: a download cancelled meanwhile (the branch's root
        # failed, or SIGTERM) would leave the file the thread opened unclosed.
        out = _create(dest)
    except OSError as err:
        raise OutputError(str(dest), err.strerror or str(err)) from None
    try:
        # iter_chunks hands over each received block as is (iter_any joins what is buffered)
        async for chunk, _ in resp.content.iter_chunks():
            batch.append(chunk)
            pending += len(chunk)
            _check_size(location, size + pending, limit, _INDEX, "read")
            if pending >= _WRITE_BATCH:
                await asyncio.to_thread(_hash_and_write, digest, out, batch)
                size, batch, pending = size + pending, [], 0
                tell(size)
        if batch:
            await asyncio.to_thread(_hash_and_write, digest, out, batch)
            size += pending
            tell(size)
    finally:
        # Not in a thread either: a download cancelled while it waited for a free one (the
        # batches are flushed: closing is one syscall) would leave the file open.
        out.close()
    return size, digest.hexdigest()


def _create(dest: Path) -> BinaryIO:
    """A new, empty file at ``dest``. An earlier attempt's file is unlinked, not truncated: a
    decoding worker may still have it mapped, and a mapping past a file's end faults."""
    dest.unlink(missing_ok=True)
    return dest.open("wb")


def _hash_and_write(digest: hashlib._Hash, out: BinaryIO, chunks: list[bytes]) -> None:
    try:
        for chunk in chunks:
            digest.update(chunk)
            out.write(chunk)
        out.flush()  # what the progress callback is told is on disk must be in the file
    except OSError as err:  # disk full, quota: the output's problem, not the mirror's
        raise OutputError(out.name, err.strerror or str(err)) from None


def _open_local(location: str, path: Path) -> int:
    """A descriptor of a local mirror file, which must be a regular file: a folder is no file
    (``NotFoundError``, as a 404), and a named pipe, a device or a socket fails the read. A
    pipe is never opened for reading as such: that waits, for ever, for a writer."""
    try:
        return open_regular(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise NotFoundError(location) from None
    except OSError as err:
        raise FetchError(location, err.strerror or str(err)) from None


async def _read_local(location: str, limit: int, what: str) -> bytes:
    fd = await asyncio.to_thread(_open_local, location, local_path(location))
    try:
        async with aiofiles.open(fd, "rb") as src:  # closes fd
            data: bytes = await src.read(limit + 1)
            _check_size(location, len(data), limit, what, "read")
            return data
    except OSError as err:
        raise FetchError(location, err.strerror or str(err)) from None


def _identity(found: os.stat_result) -> tuple[int, ...]:
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns


def _hash_file(location: str, path: Path, limit: int) -> tuple[int, str, tuple[int, ...]]:
    """Size, SHA-256 and identity (see :attr:`Fetched.identity`, taken before reading) of a
    local file (runs in a thread; hashlib releases the GIL); one larger than ``limit`` bytes
    fails."""
    digest = hashlib.sha256()
    size = 0
    try:
        with open(_open_local(location, path), "rb") as src:
            found = os.fstat(src.fileno())
            _check_size(location, found.st_size, limit, _INDEX, "on disk")
            while chunk := src.read(_WRITE_BATCH):  # a file may grow as it is read
                digest.update(chunk)
                size += len(chunk)
                _check_size(location, size, limit, _INDEX, "read")
    except OSError as err:
        raise FetchError(location, err.strerror or str(err)) from None
    return size, digest.hexdigest(), _identity(found)
