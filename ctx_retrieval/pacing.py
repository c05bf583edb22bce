"""Pacing, below everything that calls a provider: the retry policy, client-side rate limits, the mirror of the
server's buckets, run-wide pauses after 429s and 529s, priority slots, and the clock all of them read.

The context engine (``contextualize._run``: its requests also hold slots, leases and a budget), the reranker
and token counting pace through these; ``paced_call`` is the whole loop for a caller that needs nothing more (the
reranker). A request that waits to retry gives its slot back first, so one slow chunk never stalls a run, and a
429's ``retry-after`` pauses new requests run-wide instead of letting every worker bounce off the same limit. Time
comes from a ``Clock`` (tests pass one that moves only when slept on). The SDK's own retries are switched off.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import heapq
import itertools
import logging
import math
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ctx_retrieval.errors import ConfigurationError, ProviderRequestError
from ctx_retrieval.types import ErrorDecision, ServerLimit, ServerLimits

__all__ = ["NO_HOOKS", "SYSTEM_CLOCK", "Clock", "ConcurrencyTuner", "Hooks", "Limiter", "Pacer", "PrioritySlots",
           "RateLimit", "RetriesSpentError", "RetryPolicy", "Send", "SharedBudget", "TokenBucket", "Tries", "departing",
           "failure_detail", "paced_call", "server_message"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_ATTEMPTS = 6
DEFAULT_INITIAL_DELAY_S = 1.0
DEFAULT_MAX_DELAY_S = 60.0
DEFAULT_MAX_RATE_LIMIT_WAIT_S = 900.0
DEFAULT_MAX_OUTAGE_S = 300.0


_MAX_BACKOFF_EXPONENT = 60


@dataclass(frozen=True)
class RetryPolicy:
    """How failed requests are retried.

    Transient errors (5xx, 529 overloaded, timeouts, dropped connections, truncated answers) are retried up
    to ``max_attempts`` requests per chunk with exponential backoff and jitter. Rate-limit answers (429) do
    not use up attempts: they wait (``retry-after`` when given) until ``max_rate_limit_wait_s`` of waiting
    has accumulated for the chunk, so a sustained limit slows a run down instead of failing it. A server that
    refuses connections (stopped, restarting) pauses the whole run as a 429 does, one probe request at a time,
    using no attempts, for up to ``max_outage_s`` from its first refusal; then the run stops.
    """

    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    initial_delay_s: float = DEFAULT_INITIAL_DELAY_S
    max_delay_s: float = DEFAULT_MAX_DELAY_S
    max_rate_limit_wait_s: float = DEFAULT_MAX_RATE_LIMIT_WAIT_S
    max_outage_s: float = DEFAULT_MAX_OUTAGE_S

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError("RetryPolicy.max_attempts must be >= 1", setting="retry")
        if min(self.initial_delay_s, self.max_delay_s, self.max_rate_limit_wait_s, self.max_outage_s) < 0:
            raise ConfigurationError("RetryPolicy delays must be >= 0", setting="retry")

    def backoff(self, failures: int, rng: random.Random) -> float:
        """Delay before the next attempt after ``failures`` consecutive failures (jitter in [0.5x, 1x])."""
        # The exponent is capped: run-wide counts (429s without retry-after) reach the thousands, and 2.0 ** 1024
        # overflows; 2 ** 60 times any sane initial delay is already past any max_delay_s.
        base = min(self.max_delay_s, self.initial_delay_s * 2.0 ** min(max(0, failures - 1), _MAX_BACKOFF_EXPONENT))
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


# Headroom kept below the server's reported level: our token estimate of a request differs from the server's count
# by a few percent, and a large request sent on an exact refill would earn a 429 (measured: 1% removes all of
# them in benchmarks/ingestion_throughput.py at no cost in wall time).
_SYNC_MARGIN = 0.01
_TOKEN_ROUNDING = 500.0  # Anthropic reports input tokens remaining rounded to the nearest thousand
_RATE_DECAY = 0.9  # weight of earlier reports in the refill-rate estimate
_SENDS_KEPT_S = 900.0  # how long sends are remembered for syncing with the server's reports (> any timeout)
_SENDS_KEPT = 4096
# Two requests that leave a few milliseconds apart may reach the server in the other order (its own threads pick
# them up), so a report cannot be trusted to include the sends that left just before its own. A large request is
# counted later still: its body takes longer to arrive and be counted. Measured against the benchmark's twin
# (benchmarks/ingestion_throughput.py, requests of 250-20,000 tokens): requests of 2,000-20,000 tokens reached the
# count 10-43 ms after ones that left after them; with 10 ms for all, the mirror was optimistic beyond its headroom
# in 0-9 reports a run (by up to 37,000 tokens, the source of the last 429s); with 5 ms more per 1,000 tokens, in
# none in 11 of 12 runs (5 reports in the other, each by under 1,000 tokens), at the same wall time.
_REORDER_S = 0.01
_REORDER_S_PER_TOKEN = 5e-6
_REORDER_MAX_S = 0.5
# How far back from a report's own departure the later-sends scan looks, at least: a request handed to the provider
# earlier may leave later (its thread waits for a core), and one not yet left is in no report.
_SCAN_S = 1.0
_RECHECK_S = 0.25
_NO_WAIT_S = 1e-6


class Clock:
    """Time for the limiter: ``monotonic()`` and ``sleep()``. The system's by default; tests pass one that moves
    only when slept on, so their assertions are exact instead of wall-clock bounds on a loaded machine."""

    monotonic = staticmethod(time.monotonic)  # read on every request and store: the C function itself, no wrapper

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = Clock()


class Send:
    """One request the limiter let through: when it was handed to the provider (``at``), when its bytes left
    (``left``: stamped by the provider through ``departing``, from whichever thread sends it; None until then or
    with a provider that does not stamp), and what it reserved on the server's buckets."""

    __slots__ = ("at", "clock", "left", "output", "tokens")

    def __init__(self, at: float, tokens: float, output: float, clock: Clock) -> None:
        self.at, self.tokens, self.output, self.clock = at, tokens, output, clock
        self.left: float | None = None


_SENDING: contextvars.ContextVar[Send | None] = contextvars.ContextVar("ctx_retrieval_sending", default=None)


def departing() -> None:
    """A provider calls this as a request's bytes are about to leave, in the thread or task that sends them (the
    context of the ``Limiter.sent`` call travels with the request: ``SDKProvider.in_thread`` carries it into the
    thread). The report the answer brings describes the server from then on, not from when the run handed the
    request over: on a machine short of CPU the request thread may start tenths of a second later, and the limiter
    would credit that much refill the server never gave (and take requests handed over earlier but sent later as
    counted already). Outside a paced send it does nothing."""
    send = _SENDING.get()
    if send is not None and send.left is None:
        send.left = send.clock.monotonic()


class TokenBucket:
    """A token bucket refilled continuously at ``per_minute``, holding at most ``burst_s`` seconds' worth (a
    minute's by default)."""

    def __init__(self, per_minute: float, now: float, *, burst_s: float = 60.0) -> None:
        self.rate = per_minute / 60.0
        self.capacity = per_minute * min(1.0, burst_s / 60.0)
        self.level = self.capacity
        self.stamp = now
        self._deficits = self._full_in = 0.0  # decaying sums behind a server-reported refill rate

    def _refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def wait_time(self, amount: float, now: float) -> float:
        self._refill(now)
        amount = min(amount, self.capacity)
        return 0.0 if self.level >= amount else (amount - self.level) / self.rate

    def take(self, amount: float) -> None:
        self.level -= min(amount, self.capacity)

    def reserve(self, amount: float, now: float) -> float:
        """Take ``amount`` now, into debt if need be; the seconds until the debt is paid back (the queue ahead)."""
        self._refill(now)
        self.take(amount)
        return max(0.0, -self.level / self.rate)

    def sync(self, reported: ServerLimit, elapsed_s: float, sent_since: float, now: float, *,
             rounding: float = 0.0) -> None:
        """Set the bucket to what the server reported for a request that left ``elapsed_s`` ago, refilled since (no
        further than its reset allows), less our later sends. ``rounding``: how far the reported remainder may be off
        (Anthropic rounds tokens to the thousand)."""
        deficit = reported.limit - reported.remaining
        if reported.full_in_s and deficit > 0:
            # The refill rate is deficit / time-to-full. Reports are rounded (the remainder to the thousand, the
            # reset to the second), so the rate is a ratio of decaying sums: large deficits weigh most and the
            # rounding averages out. Limits are per minute: never slower than that, never absurdly fast.
            self._deficits = _RATE_DECAY * self._deficits + deficit
            self._full_in = _RATE_DECAY * self._full_in + reported.full_in_s
            self.rate = min(max(self._deficits / self._full_in, reported.limit / 60.0), reported.limit)
        self.capacity = reported.limit
        refilled = min(reported.limit, reported.remaining + elapsed_s * self.rate)
        if reported.full_in_s is not None:
            # The reset is an absolute time: the bucket is that far from full now, however long the request waited
            # at the server before the remainder was counted (refill credited from when it left was not all given).
            refilled = min(refilled, reported.limit - self.rate * max(0.0, reported.full_in_s - elapsed_s))
        self.level = refilled - sent_since - max(_SYNC_MARGIN * reported.limit, 2 * rounding)
        self.stamp = now


@runtime_checkable
class SharedBudget(Protocol):
    """A rate limit shared by several workers (``ctx_retrieval.distributed``: a Ray actor owns it): each request
    reserves its share and waits the seconds returned, so N workers together stay under the one limit instead of
    each assuming all of it."""

    async def reserve(self, input_tokens: int, output_tokens: int) -> float: ...


class Limiter:
    """Run-wide gate: the client-side rate limit, the server's reported limits, and a pause set by 429s.

    Answers that report the account's rate-limit state (``observe``) set a mirror of the server's buckets, so
    a request that the server would refuse waits on our side instead. After a pause, one request goes first
    (a probe) and the others wait for its answer: the server's retry-after covers that one request, so
    releasing every waiter at once would only earn a 429 each.
    """

    def __init__(self, limit: RateLimit | None, *, clock: Clock = SYSTEM_CLOCK,
                 shared: SharedBudget | None = None) -> None:
        self.clock = clock
        self.shared = shared
        now = clock.monotonic()
        requests, tokens = (limit.requests_per_minute, limit.input_tokens_per_minute) if limit else (None, None)
        self._requests = TokenBucket(requests, now) if requests else None
        self._tokens = TokenBucket(tokens, now) if tokens else None
        self._server_requests: TokenBucket | None = None
        self._server_tokens: TokenBucket | None = None
        self._server_output: TokenBucket | None = None
        # Recent sends, in the order they were handed over; only those after the oldest request still in flight
        # are ever needed, so a bound far above any concurrency keeps memory flat.
        self._sent: deque[Send] = deque(maxlen=_SENDS_KEPT)
        self._departures = False  # the provider stamps when requests leave (``departing``)
        self._lag = 0.0  # a decaying maximum of how long requests waited between hand-over and leaving
        self._reserved_requests, self._reserved_tokens = 0, 0.0  # passed acquire, not sent yet
        self._reserved_output = 0.0
        self._paused_until = 0.0
        self._lock = asyncio.Lock()
        self._probing = False  # set by a pause: the next request is a probe
        self._probe_answered: asyncio.Event | None = None  # set while a probe is in flight

    def pause(self, seconds: float) -> None:
        """Hold every new request for ``seconds`` (a 429 applies to the whole account, not one request)."""
        self._paused_until = max(self._paused_until, self.clock.monotonic() + seconds)
        self._probing = True

    def answered(self, *, rate_limited: bool) -> None:
        """Report the answer to the probe (the request ``acquire`` returned True for), whatever its outcome."""
        if self._probe_answered is not None:
            if not rate_limited:
                self._probing = False  # the limit has room again: everyone may go
            event, self._probe_answered = self._probe_answered, None
            event.set()

    def sent(self, input_tokens: int, output_tokens: int = 0) -> Send:
        """Record that a request ``acquire`` let through is handed to the provider now; its ``Send``, which the
        provider's ``departing`` stamps when the bytes leave (the current context carries it there)."""
        now = self.clock.monotonic()
        self._reserved_requests -= 1
        self._reserved_tokens -= input_tokens
        self._reserved_output -= output_tokens
        send = Send(now, float(input_tokens), float(output_tokens), self.clock)
        self._sent.append(send)
        while self._sent[0].at < now - _SENDS_KEPT_S:
            self._sent.popleft()
        _SENDING.set(send)
        return send

    def unsent(self, input_tokens: int, output_tokens: int = 0) -> None:
        """A request ``acquire`` let through will not be sent after all."""
        self._reserved_requests -= 1
        self._reserved_tokens -= input_tokens
        self._reserved_output -= output_tokens

    def observe(self, limits: ServerLimits, send: Send) -> None:
        """Mirror the server's buckets as reported by the answer to ``send``: what the server had left when the
        request reached it (when it left, ``Send.left``, or else when it was handed over), refilled since, less
        what we sent after it or have let through unsent."""
        now = self.clock.monotonic()
        if send.left is not None:
            self._departures = True
        moment = send.at if send.left is None else send.left
        self._lag = max(moment - send.at, self._lag * _RATE_DECAY)
        later_requests, later_tokens = self._reserved_requests, self._reserved_tokens
        later_output = self._reserved_output
        horizon = moment - _REORDER_MAX_S - max(_SCAN_S, 2 * self._lag)  # nothing handed over before it left later
        for other in reversed(self._sent):  # sends the report may not include yet
            if other.at <= horizon:
                break
            if other is send:  # the reporting request's own send is in its report
                continue
            left = other.left
            if left is None:
                left = math.inf if self._departures else other.at  # not left yet: in no report
            if left <= moment - min(_REORDER_MAX_S, _REORDER_S + other.tokens * _REORDER_S_PER_TOKEN):
                continue  # left long enough before the reporting request to be in its report
            later_requests += 1
            later_tokens += other.tokens
            later_output += other.output
        elapsed = max(0.0, now - moment)
        if limits.requests is not None:
            self._server_requests = self._server_requests or TokenBucket(limits.requests.limit, now)
            self._server_requests.sync(limits.requests, elapsed, later_requests, now)
        if limits.input_tokens is not None:
            self._server_tokens = self._server_tokens or TokenBucket(limits.input_tokens.limit, now)
            self._server_tokens.sync(limits.input_tokens, elapsed, later_tokens, now, rounding=_TOKEN_ROUNDING)
        if limits.output_tokens is not None:
            # The server reserves a request's max_tokens when it starts and gives back the unused part when it
            # ends: our later sends count at their max_tokens, as the server counts them.
            self._server_output = self._server_output or TokenBucket(limits.output_tokens.limit, now)
            self._server_output.sync(limits.output_tokens, elapsed, later_output, now, rounding=_TOKEN_ROUNDING)

    def _buckets(self) -> list[tuple[TokenBucket, str]]:
        """(bucket, what it counts: "requests", "input" or "output") for every bucket in force."""
        out = [(b, "requests") for b in (self._requests, self._server_requests) if b is not None]
        out += [(b, "input") for b in (self._tokens, self._server_tokens) if b is not None]
        return out + [(b, "output") for b in (self._server_output,) if b is not None]

    async def acquire(self, input_tokens: int, output_tokens: int = 0) -> bool:
        """Wait until a request may be sent (``output_tokens``: its ``max_tokens``, which the server reserves
        at the start); True when it is the probe after a pause."""
        need = {"requests": 1.0, "input": float(input_tokens), "output": float(output_tokens)}
        async with self._lock:  # FIFO: waiters are served in arrival order
            while True:
                if self._probe_answered is not None:
                    await self._probe_answered.wait()
                    continue
                now = self.clock.monotonic()
                wait = max(0.0, self._paused_until - now)
                buckets = self._buckets()
                for bucket, kind in buckets:
                    wait = max(wait, bucket.wait_time(need[kind], now))
                if wait <= _NO_WAIT_S:  # a rounding error's worth of waiting is none
                    for bucket, kind in buckets:
                        bucket.take(need[kind])
                    if self.shared is not None:  # the fleet's limit: reserved now, waited here, in arrival order
                        await self.clock.sleep(await self.shared.reserve(input_tokens, output_tokens))
                    self._reserved_requests += 1
                    self._reserved_tokens += input_tokens
                    self._reserved_output += output_tokens
                    if self._probing:
                        self._probe_answered = asyncio.Event()
                        return True
                    return False
                # Re-check at least every _RECHECK_S: an answer arriving meanwhile may update the server's mirror.
                await self.clock.sleep(min(wait, _RECHECK_S))


class PrioritySlots:
    """A semaphore whose waiters are served lowest priority value first, then first come first served; it can
    grow (``grow``) when the run finds it needs more requests in flight.

    The generator gives follow-up requests of documents whose prompt cache is already written priority over
    the first request of a new document, so documents finish while their cache entry is warm.
    """

    def __init__(self, slots: int) -> None:
        self.capacity = slots
        self._free = slots
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def would_wait(self) -> bool:
        """Whether an ``acquire`` now would wait (every slot taken, or others waiting already)."""
        return self._free <= 0 or bool(self._waiters)

    def grow(self) -> None:
        """One more slot, given at once to the first waiter if any."""
        self.capacity += 1
        self.release()

    def shrink(self, slots: int) -> None:
        """``slots`` fewer: requests in flight finish, and that many of the slots they give back are retired."""
        slots = min(slots, self.capacity - 1)
        self.capacity -= slots
        self._free -= slots

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
        if self._free < 0:  # a slot shrink() retired: not handed on
            self._free += 1
            return
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._free += 1


# A step of growth is kept when it brought at least this much more throughput than the level before it.
TUNER_GAIN = 0.05
# Slots double while a doubling brings at least this much more throughput (latency still flat), then grow by 25%.
TUNER_DOUBLING_GAIN = 0.75
# After a step that did not pay, growth is tried again only after this many levels' worth of answers.
TUNER_HOLD = 4


class ConcurrencyTuner:
    """How many requests a run keeps in flight when it finds the number itself (``max_concurrency=None``).

    A request the limiter lets through that must wait for a slot means latency, not the account's limit, holds the
    run back: more in flight brings more answers per second (Little's law: throughput = in flight / latency), until
    the server, or this client's own CPU, is the bottleneck; past that, more in flight only lengthens the latency
    and adds the client's work. So the slots grow in steps (doubling at first, while each doubling brings
    ``TUNER_DOUBLING_GAIN`` more; then a quarter more each), and each step is kept only while
    the throughput it brings, in flight over the mean latency of the requests sent at that level (on the run's
    clock), beats the level before by ``TUNER_GAIN``. A step that does not pay gives its slots back (to the fastest
    level measured) and growth waits ``TUNER_HOLD`` levels' worth of answers before it is tried again, so a run
    that becomes CPU-bound halfway settles where it is fastest."""

    def __init__(self, slots: PrioritySlots, clock: Clock, grow_to: int) -> None:
        self.slots, self.clock, self.grow_to = slots, clock, grow_to
        self.answers = 0
        self._level_since = clock.monotonic()  # when the current level began
        self._latencies: list[float] = []  # of the answers to requests sent at the current level
        self._previous: float | None = None  # throughput at the level before this one
        self._best = (slots.capacity, 0.0)  # (slots, throughput) of the fastest level measured
        self._hold_until = 0  # no growth before this many answers
        self._doubling = True  # slow start: the slots double while throughput nearly doubles with them

    def answered(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` (the clock's time) was answered now."""
        self.answers += 1
        if sent_at >= self._level_since:
            self._latencies.append(self.clock.monotonic() - sent_at)

    def bound(self) -> bool:
        """A request the limiter let through is about to take a slot; True when the slots grew for it."""
        slots = self.slots
        if slots.capacity >= self.grow_to or not slots.would_wait():
            return False
        if len(self._latencies) < slots.capacity or self.answers < self._hold_until:  # too soon to judge
            return False
        throughput = slots.capacity / max(sum(self._latencies) / len(self._latencies), 1e-9)
        if throughput >= self._best[1] * (1 + TUNER_GAIN):  # the fewest slots that reach the most, within the gain
            self._best = (slots.capacity, throughput)
        self._level_since, self._latencies = self.clock.monotonic(), []
        gain = throughput / self._previous - 1 if self._previous else None
        if gain is not None and gain < TUNER_GAIN:
            best = self._best[0]
            if slots.capacity > best:  # the step did not pay: back to the fastest level, and hold there
                slots.shrink(slots.capacity - best)
            self._previous, self._doubling = None, False
            self._hold_until = self.answers + TUNER_HOLD * slots.capacity
            return False
        if gain is not None and gain < TUNER_DOUBLING_GAIN:  # the curve bends: small steps from now
            self._doubling = False
        step = slots.capacity if self._doubling else max(1, slots.capacity // 4)
        for _ in range(min(step, self.grow_to - slots.capacity)):
            slots.grow()
        self._previous = throughput
        return True


class Tries:
    """One request's attempts so far (a chunk's context, a rerank, a token count): what the per-request limits of
    ``RetryPolicy`` are counted against."""

    __slots__ = ("failures", "last_error", "rate_limit_wait")

    def __init__(self) -> None:
        self.failures = 0
        self.rate_limit_wait = 0.0
        self.last_error: tuple[str, str] | None = None  # the latest failed attempt (kind, detail), if any


class RetriesSpentError(ProviderRequestError):
    """A request that is not tried again: its retries are spent (``RetryPolicy``), ``kind`` and ``detail`` say
    what failed last and why no more."""

    def __init__(self, message: str, *, kind: str, detail: str, provider: str = "",
                 status_code: int | None = None) -> None:
        super().__init__(message, provider=provider, status_code=status_code)
        self.kind, self.detail = kind, detail


def server_message(exc: BaseException) -> str | None:
    """The server's own explanation of an HTTP error (``error.message`` in the body), once, or None."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error if isinstance(error, str) else None
        if isinstance(message, str) and message.strip():
            return " ".join(message.split())[:500]
    return None


def failure_detail(exc: BaseException, decision: ErrorDecision) -> str:
    """A failed attempt in a line: its type, HTTP status and the server's own reason (``exceeds the context...``)."""
    said = server_message(exc)
    return (f"{type(exc).__name__}" + (f" (HTTP {decision.status_code})" if decision.status_code else "")
            + (f": {said}" if said else ""))


# A run-wide pause at least this long is logged as a warning (the progress bar stands still meanwhile).
PAUSE_LOGGED_S = 5.0


class Pacer:
    """The pacing one run (or one batch of reranked queries) shares: its limiter and clock, its retry policy and
    random source, the run-wide streaks that decide a pause (429s seen, 529s in a row, refused connections since
    when), and once a context run has them its request slots and their tuner. Every request of the run, a context,
    a token count or a rerank, is sent through ``paced_call`` on it; ``where`` names the server in what is logged."""

    def __init__(self, limiter: Limiter, policy: RetryPolicy, rng: random.Random, *, where: str = "the server"
                 ) -> None:
        self.limiter, self.policy, self.rng, self.where = limiter, policy, rng, where
        self.clock = limiter.clock
        self.rate_limited = 0  # 429s answered this run (paced on when they give no retry-after)
        self.overload_streak = 0  # 529s since the last answer: two or more in a row pause the run
        self.outage_streak = 0
        self.outage_since: float | None = None  # when the server stopped answering (connections refused since)
        self.slots: PrioritySlots | None = None  # requests in flight at once, for those sent with a priority
        self.tuner: ConcurrencyTuner | None = None  # grows the slots while latency holds the run back (None: fixed)

    async def take_slot(self, priority: int) -> bool:
        """One of the slots, lowest ``priority`` first (the tuner may grow them first); False without slots."""
        if self.slots is None:
            return False
        if self.tuner is not None:
            self.tuner.bound()
        await self.slots.acquire(priority)
        return True

    def answered(self, sent_at: float | None = None) -> None:
        """An answer came back (to a request sent at ``sent_at`` in a slot: its latency tunes the slots): the
        streaks end, and an outage is said to be over."""
        if sent_at is not None and self.tuner is not None:
            self.tuner.answered(sent_at)  # the client's own delays count in the latency it tunes by
        if self.outage_since is not None:
            logger.warning("the server answers again after %.0f s; the run goes on",
                           self.clock.monotonic() - self.outage_since)
        self.overload_streak = self.outage_streak = 0
        self.outage_since = None

    def pause_for(self, decision: ErrorDecision) -> tuple[bool, ErrorDecision]:
        """Pause every request of the run before the probe's answer releases the others, where the error says so:
        a 429 (``retry-after`` when given, else backoff on the 429s seen); a 529 storm (overloaded answers with no
        success between them: paced like a 429 without retry-after; a lone 529 is retried by its request alone);
        refused connections (the server is down: one probe at a time finds out when it is back). True when paused;
        the decision comes back with the delay it paused for."""
        policy = self.policy
        if decision.kind == "rate_limited":
            paced = self._pause(decision, self.rate_limited)
            if (paced.retry_after_s or 0.0) >= PAUSE_LOGGED_S:  # a pause a person would notice: why the bar stops
                logger.warning("rate limited (HTTP 429): the run waits %.0f s before its next request",
                               paced.retry_after_s)
            return True, paced
        if decision.kind == "unreachable":
            self.outage_streak += 1
            now = self.clock.monotonic()
            if self.outage_since is None:
                self.outage_since = now
            delay = policy.backoff(self.outage_streak, self.rng)
            logger.log(logging.WARNING if self.outage_streak == 1 else logging.INFO,
                       "the server at %s refuses connections (down %.0f s): the run waits %.1f s and tries one "
                       "request; it gives up after %.0f s (RetryPolicy.max_outage_s)", self.where,
                       now - self.outage_since, delay, policy.max_outage_s)
            self.limiter.pause(delay)
            return True, dataclasses.replace(decision, retry_after_s=delay)
        if decision.kind == "overloaded":
            self.overload_streak += 1
            if self.overload_streak >= 2:
                return True, self._pause(decision, self.overload_streak - 2)
        return False, decision

    def _pause(self, decision: ErrorDecision, seen: int) -> ErrorDecision:
        delay = decision.retry_after_s
        if delay is None:
            delay = self.policy.backoff(seen + 1, self.rng)
            decision = dataclasses.replace(decision, retry_after_s=delay)
        if delay <= self.policy.max_rate_limit_wait_s:
            self.limiter.pause(delay)
        return decision

    def next_try(self, decision: ErrorDecision, tries: Tries, detail: str) -> tuple[float | None, str]:
        """After a failed attempt the run did not stop for: the seconds to wait before the next (0.0: the run is
        paused, the limiter holds it; waiting uses no attempt), or ``None`` and why no more (``detail`` extended)."""
        policy = self.policy
        if decision.action != "retry":
            return None, detail
        if decision.kind == "unreachable":
            now = self.clock.monotonic()
            down = now - (self.outage_since or now)
            if down <= policy.max_outage_s:
                return 0.0, detail
            return None, detail + f", unreachable for {down:.0f} s"
        if decision.kind == "rate_limited":
            self.rate_limited += 1
            delay = decision.retry_after_s or 0.0  # paused for already (pause_for)
            if tries.rate_limit_wait + delay <= policy.max_rate_limit_wait_s:
                tries.rate_limit_wait += delay
                return 0.0, detail
            return None, detail + (f", the server asked for {delay:.0f} s more after {tries.rate_limit_wait:.0f} s "
                                   f"of waiting, over RetryPolicy.max_rate_limit_wait_s "
                                   f"({policy.max_rate_limit_wait_s:.0f} s)")
        tries.failures += 1
        if tries.failures < policy.max_attempts:
            return max(policy.backoff(tries.failures, self.rng), decision.retry_after_s or 0.0), detail
        return None, detail + f", failed {tries.failures} attempts (RetryPolicy.max_attempts)"


class Hooks:
    """What a caller adds around each attempt of ``paced_call``; the defaults add nothing. The context engine's
    (``contextualize._run``) hold its budget, slots, lease and report; the token counts' stop at the first
    failure."""

    async def before(self) -> object | None:
        """Before the limiter: a value to return instead of an attempt (a stopped run, a spent budget); when None,
        ``finished`` follows the attempt, however it ends."""
        return None

    async def admit(self) -> object | None:
        """After the limiter let the request through (and it took its slot, with a priority): a value to return
        instead of sending; None: it goes now."""
        return None

    def answered(self, answer: Any, send: Send) -> None:
        """An answer came back (the limiter has mirrored its report)."""

    def failed(self, error: Exception, decision: ErrorDecision, detail: str) -> None:
        """An attempt failed (classified, the run paused if it must); may raise to end the call."""

    def retrying(self, decision: ErrorDecision) -> None:
        """The failed attempt will be tried again."""

    def finished(self) -> None:
        """The attempt is over, however it ended, before any wait to retry."""


NO_HOOKS = Hooks()


async def paced_call(call: Callable[[], Awaitable[T]], *, pacer: Pacer,
                     classify: Callable[[Exception], ErrorDecision | None],
                     run_error: Callable[[ErrorDecision, Exception], Exception],
                     limits_of: Callable[[T], ServerLimits | None], input_tokens: int, output_tokens: int,
                     what: str, provider: str, tries: Tries | None = None, hooks: Hooks = NO_HOOKS,
                     priority: int | None = None) -> T:
    """The one place a request is sent and retried. Each attempt waits for the limiter (its ``input_tokens`` and
    ``max_tokens`` as ``output_tokens``), is recorded as sent, and mirrors the server's buckets from its answer. A
    failure ``classify`` does not know propagates; one that stops the run is raised typed (``run_error``); a 429,
    a 529 storm or refused connections pause every request of the pacer (``Pacer.pause_for``: no attempt used,
    bounded by ``max_rate_limit_wait_s`` per request and ``max_outage_s`` per outage); other retryable errors back
    off on the pacer's clock, holding nothing, up to ``max_attempts``; then ``RetriesSpentError``. With a
    ``priority`` each attempt holds one of the pacer's slots from the limiter until it ends. ``hooks`` add a caller's
    own steps (``Hooks``); ``tries`` carries a request's count across calls. ``what`` names it in errors."""
    tries = tries if tries is not None else Tries()
    limiter = pacer.limiter
    while True:
        ended = await hooks.before()
        if ended is not None:
            return ended  # type: ignore[return-value]
        probe = reserved = paused = slot = False
        delay: float | None = None
        try:
            probe = await limiter.acquire(input_tokens, output_tokens)
            reserved = True
            slot = priority is not None and await pacer.take_slot(priority)
            ended = await hooks.admit()
            if ended is not None:
                return ended  # type: ignore[return-value]
            try:
                send, reserved = limiter.sent(input_tokens, output_tokens), False
                answer = await call()
            except Exception as exc:  # classified by type; anything unknown propagates
                decision = classify(exc)
                if decision is None:
                    raise
                paused, decision = pacer.pause_for(decision)
                detail = failure_detail(exc, decision)
                tries.last_error = (decision.kind, detail)
                hooks.failed(exc, decision, detail)
                if decision.action == "fail_run":
                    raise run_error(decision, exc) from exc
                delay, why = pacer.next_try(decision, tries, detail)
                if delay is None:
                    raise RetriesSpentError(f"{what}: {why}", kind=decision.kind, detail=why, provider=provider,
                                            status_code=decision.status_code) from exc
                hooks.retrying(decision)
            else:
                pacer.answered(send.at if slot else None)
                limits = limits_of(answer)
                if limits is not None:
                    limiter.observe(limits, send)
                hooks.answered(answer, send)
                return answer
        finally:
            if reserved:  # passed the limiter but never sent (the run stopped, or cancelled)
                limiter.unsent(input_tokens, output_tokens)
            if probe:
                limiter.answered(rate_limited=paused)
            if slot:
                assert pacer.slots is not None
                pacer.slots.release()
            hooks.finished()
        if delay:
            await pacer.clock.sleep(delay)  # holding no slot: the rest of the run goes on
