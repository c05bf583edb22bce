"""Retry policy, client-side rate limiting and request slots for the generator.

Retries are owned here and only here (the SDK's own retries are switched off): a request that waits to retry
gives its concurrency slot back first, so one slow chunk never stalls the run, and a 429's ``retry-after``
pauses new requests run-wide instead of letting every worker bounce off the same limit.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import time
from dataclasses import dataclass

from .errors import ConfigurationError

__all__ = ["RateLimit", "RetryPolicy"]

DEFAULT_MAX_ATTEMPTS = 6
DEFAULT_INITIAL_DELAY_S = 1.0
DEFAULT_MAX_DELAY_S = 60.0
DEFAULT_MAX_RATE_LIMIT_WAIT_S = 900.0


@dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried.

    Transient errors (5xx, 529 overloaded, timeouts, dropped connections, truncated answers) are retried up
    to ``max_attempts`` requests per chunk with exponential backoff and jitter. Rate-limit answers (429) do
    not use up attempts: they wait (``retry-after`` when given) until ``max_rate_limit_wait_s`` of waiting
    has accumulated for the chunk, so a sustained limit slows a run down instead of failing it.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_delay_s: float = DEFAULT_INITIAL_DELAY_S
    max_delay_s: float = DEFAULT_MAX_DELAY_S
    max_rate_limit_wait_s: float = DEFAULT_MAX_RATE_LIMIT_WAIT_S

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("RetryPolicy.max_attempts must be >= 1", setting="retry")
        if self.initial_delay_s < 0 or self.max_delay_s < 0 or self.max_rate_limit_wait_s < 0:
            raise ConfigurationError("RetryPolicy delays must be >= 0", setting="retry")

    def backoff(self, failures: int, rng: random.Random) -> float:
        """Delay before the next attempt after ``failures`` consecutive failures (jitter in [0.5x, 1x])."""
        base = min(self.max_delay_s, self.initial_delay_s * 2.0 ** max(0, failures - 1))
        return base * rng.uniform(0.5, 1.0)


@dataclass(frozen=True)
class RateLimit:
    """A client-side limit that keeps a run under the account's limits instead of bouncing off them."""

    requests_per_minute: float | None = None
    input_tokens_per_minute: float | None = None

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "input_tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ConfigurationError(f"RateLimit.{name} must be positive or None", setting="rate_limit")


class _Bucket:
    """A token bucket refilled continuously at ``per_minute``, holding at most one minute's worth."""

    def __init__(self, per_minute: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = per_minute
        self.level = per_minute
        self.stamp = time.monotonic()

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_time(self, amount: float, now: float) -> float:
        self._refill(now)
        amount = min(amount, self.capacity)
        return 0.0 if self.level >= amount else (amount - self.level) / self.rate

    def take(self, amount: float) -> None:
        self.level -= min(amount, self.capacity)


class Limiter:
    """Run-wide gate: the client-side rate limit plus a pause set by rate-limit answers.

    After a pause, one request goes first (a probe) and the others wait for its answer: the server's
    retry-after covers that one request, so releasing every waiter at once would only earn a 429 each.
    """

    def __init__(self, limit: RateLimit | None) -> None:
        self._requests = _Bucket(limit.requests_per_minute) if limit and limit.requests_per_minute else None
        self._tokens = _Bucket(limit.input_tokens_per_minute) if limit and limit.input_tokens_per_minute else None
        self._paused_until = 0.0
        self._lock = asyncio.Lock()
        self._probing = False  # set by a pause: the next request is a probe
        self._probe_answered: asyncio.Event | None = None  # set while a probe is in flight

    def pause(self, seconds: float) -> None:
        """Hold every new request for ``seconds`` (a 429 applies to the whole account, not one request)."""
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)
        self._probing = True

    def answered(self, *, rate_limited: bool) -> None:
        """Report the answer to the probe (the request ``acquire`` returned True for), whatever its outcome."""
        if self._probe_answered is not None:
            if not rate_limited:
                self._probing = False  # the limit has room again: everyone may go
            event, self._probe_answered = self._probe_answered, None
            event.set()

    async def acquire(self, input_tokens: int) -> bool:
        """Wait until a request may be sent; True when it is the probe after a pause."""
        async with self._lock:  # FIFO: waiters are served in arrival order
            while True:
                if self._probe_answered is not None:
                    await self._probe_answered.wait()
                    continue
                now = time.monotonic()
                wait = max(0.0, self._paused_until - now)
                if self._requests is not None:
                    wait = max(wait, self._requests.wait_time(1, now))
                if self._tokens is not None:
                    wait = max(wait, self._tokens.wait_time(input_tokens, now))
                if wait <= 0:
                    if self._requests is not None:
                        self._requests.take(1)
                    if self._tokens is not None:
                        self._tokens.take(input_tokens)
                    if self._probing:
                        self._probe_answered = asyncio.Event()
                        return True
                    return False
                await asyncio.sleep(wait)


class PrioritySlots:
    """A semaphore whose waiters are served lowest priority value first, then first come first served.

    The generator gives follow-up requests of documents whose prompt cache is already written priority over
    the first request of a new document, so documents finish while their cache entry is warm.
    """

    def __init__(self, slots: int) -> None:
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    async def acquire(self, priority: int) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._seq), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()  # the slot was handed over just as we were cancelled
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._free += 1
