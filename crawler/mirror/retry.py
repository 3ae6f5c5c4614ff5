"""The retry policy: which failures are transient, how long to wait, and the per-source bound.

Only transient failures are retried (connection errors, timeouts, bodies cut short, answers
that do not parse as HTTP, 429 and 5xx), with exponential backoff and full jitter capped by
``retry.max_wait``; a ``Retry-After`` header replaces the backoff for that wait (capped the same
way). Everything else is final at once. Cancellation is never retried.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aiohttp
from tenacity import AsyncRetrying, RetryCallState, stop_after_attempt, wait_random_exponential

from ..config import Config
from ..errors import FetchError, HTTPStatusError
from ..text import shown

log = logging.getLogger(__name__)

T = TypeVar("T")
#: How a wait between attempts is waited (a test passes one that does not).
Sleep = Callable[[float], Awaitable[None]]


def retry_after(value: str | None) -> float | None:
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


class RetryPolicy:
    """Runs an attempt until it succeeds, fails for good, runs out of tries (``retry``) or of
    time (``timeouts.source``), and counts the retries of each location."""

    def __init__(self, config: Config, sleep: Sleep = asyncio.sleep) -> None:
        self.config = config
        self._sleep = sleep
        #: Retries done, by location (for the run report).
        self.retries: dict[str, int] = {}

    async def bounded(self, location: str, attempt: Callable[[], Awaitable[T]]) -> tuple[T, int]:
        """:meth:`_retrying` under the per-source time limit ``timeouts.source``; the result
        and the number of attempts made."""
        limit = self.config.timeouts.source
        try:
            async with asyncio.timeout(limit):
                return await self._retrying(location, attempt)
        except TimeoutError:
            raise FetchError(location, f"took longer than timeouts.source ({limit:g}s)") from None

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
                extra={"event": "retry", "url": location, "attempt": state.attempt_number},
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
