"""Rate limiter, retry backoff, priority slots and how many requests a run keeps in flight."""

from __future__ import annotations

import asyncio
import contextvars
import datetime
import random

import pytest

from ctx_retrieval import ConfigurationError, RateLimit, RetryPolicy
from ctx_retrieval.contextualize._scheduling import AUTO_MAX_CONCURRENCY, AUTO_START_CONCURRENCY
from ctx_retrieval.pacing import Limiter, PrioritySlots, departing
from ctx_retrieval.providers.anthropic import AnthropicProvider, server_limits
from ctx_retrieval.testing.clock import VirtualClock
from ctx_retrieval.testing.instant import InstantProvider
from ctx_retrieval.types import ContextRequest, ProviderResponse, ServerLimit, ServerLimits
from tests.helpers import SteppedClock


def test_the_limiter_waits_on_its_clock_not_the_wall() -> None:
    clock = SteppedClock()

    async def scenario() -> float:
        limiter = Limiter(None, clock=clock)
        limiter.pause(3600.0)  # an hour on the limiter's clock
        await limiter.acquire(1)
        return clock.now - 1000.0

    # Every second of the hour was slept on its clock (a wall-clock sleep anywhere would hold the test an hour).
    assert asyncio.run(scenario()) == pytest.approx(3600.0) and sum(clock.slept) == pytest.approx(3600.0)


def test_token_limit_waits_once_the_bucket_is_empty() -> None:
    async def scenario() -> float:
        clock = SteppedClock()
        limiter = Limiter(RateLimit(input_tokens_per_minute=6000), clock=clock)  # 100 tokens/s
        await limiter.acquire(6000)  # a full minute's worth is available at once
        started = clock.now
        await limiter.acquire(50)  # then it refills at 100 tokens/s
        return clock.now - started

    assert asyncio.run(scenario()) == pytest.approx(0.5)


def test_request_limit_spaces_requests() -> None:
    async def scenario() -> float:
        clock = SteppedClock()
        limiter = Limiter(RateLimit(requests_per_minute=600), clock=clock)  # 10/s
        for _ in range(600):
            await limiter.acquire(0)
        started = clock.now
        for _ in range(3):
            await limiter.acquire(0)
        return clock.now - started

    assert asyncio.run(scenario()) == pytest.approx(0.3)


def test_pause_holds_new_requests() -> None:
    async def scenario() -> float:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        limiter.pause(0.3)
        started = clock.now
        await limiter.acquire(1)
        return clock.now - started

    assert asyncio.run(scenario()) == pytest.approx(0.3)


def test_reported_limits_make_requests_wait_for_the_refill() -> None:
    async def scenario() -> tuple[float, float]:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        await limiter.acquire(1000)
        sent_at = limiter.sent(1000)
        # 10,000 of 100,000 tokens left after that request, full again in 1 s: 90,000 tokens/s.
        limiter.observe(ServerLimits(input_tokens=ServerLimit(100_000, 10_000, 1.0)), sent_at)
        started = clock.now
        await limiter.acquire(5000)  # within what is left (less the headroom): no wait
        first = clock.now - started
        limiter.sent(5000)
        started = clock.now
        await limiter.acquire(55_000)  # ~4,000 left now: waits ~51,000/90,000 s for the refill
        return first, clock.now - started

    first, second = asyncio.run(scenario())
    assert first == 0.0 and 51_000 / 90_000 <= second <= 53_000 / 90_000


def test_reported_limits_subtract_what_was_sent_or_let_through_since() -> None:
    async def scenario() -> float:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        await limiter.acquire(100)
        sent_at = limiter.sent(100)
        clock.now += 0.001  # a later send: outside the first request's report
        await limiter.acquire(30_000)
        limiter.sent(30_000)  # sent after the first request: its report cannot include it
        await limiter.acquire(30_000)  # let through, not sent yet
        # 60,000 of 100,000 left after the first request, refilling 100,000/s: 60,000 - 30,000 - 30,000 - the
        # headroom = a little below 0 left for us, so 30,000 more waits about 0.3 s.
        limiter.observe(ServerLimits(input_tokens=ServerLimit(100_000, 60_000, 0.4)), sent_at)
        started = clock.now
        await limiter.acquire(30_000)
        return clock.now - started

    assert 0.30 <= asyncio.run(scenario()) <= 0.32


def test_rate_limit_headers_are_parsed_and_bad_values_ignored() -> None:
    soon = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=2)).isoformat(
        timespec="milliseconds").replace("+00:00", "Z")
    limits = server_limits({
        "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": soon,
        "anthropic-ratelimit-input-tokens-limit": "40000", "anthropic-ratelimit-input-tokens-remaining": "x1",
    })
    assert limits is not None and limits.input_tokens is None  # malformed: ignored, never guessed
    assert limits.requests is not None and (limits.requests.limit, limits.requests.remaining) == (50, 49)
    assert limits.requests.full_in_s is not None and 1.5 < limits.requests.full_in_s <= 2.0
    skewed = server_limits({"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "0",
                            "anthropic-ratelimit-requests-reset": "2001-01-01T00:00:00Z"})
    assert skewed is not None and skewed.requests == ServerLimit(50, 0, None)  # a reset in the past: clock skew
    assert server_limits({"content-type": "application/json"}) is None and server_limits(None) is None
    for value in ("nan", "inf", "1e-300", "0.5", "-1"):  # not limits a bucket can hold: ignored, not a stall
        odd = server_limits({"anthropic-ratelimit-requests-limit": value, "anthropic-ratelimit-requests-remaining": "0",
                             "anthropic-ratelimit-requests-reset": soon})
        assert odd is None, value
    assert server_limits({"anthropic-ratelimit-requests-limit": "50",
                          "anthropic-ratelimit-requests-remaining": "nan"}) is None


def _fast_refill_answer() -> tuple[datetime.datetime, dict[str, str]]:
    """A request sent 2 s ago (the answer's latency) and its answer's headers from a server whose 1,500 requests
    "per minute" refill in 6 s (250/s): 50 used when it was admitted, full again 0.2 s after it was sent."""
    sent = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=2)
    full = (sent + datetime.timedelta(seconds=0.2)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return sent, {"anthropic-ratelimit-requests-limit": "1500", "anthropic-ratelimit-requests-remaining": "1450",
                  "anthropic-ratelimit-requests-reset": full}


def test_a_reset_is_measured_from_when_the_request_was_sent_not_when_its_answer_is_read() -> None:
    sent, headers = _fast_refill_answer()
    limits = server_limits(headers, at=sent)
    assert limits is not None and limits.requests is not None
    assert limits.requests.full_in_s == pytest.approx(0.2, abs=0.001)
    # read against the time the answer arrived, the bucket would look full already and its refill rate unknown
    late = server_limits(headers)
    assert late is not None and late.requests is not None and late.requests.full_in_s is None


def test_the_limiter_learns_a_refill_ten_times_faster_than_the_per_minute_limit() -> None:
    """A server whose 1,500 requests "per minute" refill in 6 s (250/s), answering after 2 s: the headers of one
    answer, read against the request's send time, teach the limiter that rate, so 2,000 more requests take about
    2 s of its clock; read against the answer's arrival they teach nothing and the run crawls at 25/s."""
    sent, headers = _fast_refill_answer()

    async def scenario(limits: ServerLimits | None) -> float:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        await limiter.acquire(1)
        sent_at = limiter.sent(1)
        clock.now += 2.0  # the answer's latency
        assert limits is not None
        limiter.observe(limits, sent_at)
        started = clock.now
        for _ in range(2000):
            await limiter.acquire(0)
        return clock.now - started

    learned = asyncio.run(scenario(server_limits(headers, at=sent)))
    assert 2.0 <= learned <= 3.0  # (2,000 - what is left + the headroom) / 250 per s
    assert asyncio.run(scenario(server_limits(headers))) >= 20.0  # the per-minute figure: 25/s


def test_backoff_grows_with_jitter_and_a_cap() -> None:
    policy = RetryPolicy(initial_delay_s=1.0, max_delay_s=8.0)
    rng = random.Random(0)
    delays = [policy.backoff(n, rng) for n in range(1, 7)]
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0
    assert all(4.0 <= d <= 8.0 for d in delays[3:])


def test_priority_slots_serve_lower_priority_values_first() -> None:
    async def scenario() -> list[str]:
        slots = PrioritySlots(1)
        order: list[str] = []
        await slots.acquire(0)

        async def waiter(name: str, priority: int) -> None:
            await slots.acquire(priority)
            order.append(name)
            slots.release()

        tasks = [asyncio.ensure_future(waiter("new-doc", 1)), asyncio.ensure_future(waiter("follow-up", 0))]
        await asyncio.sleep(0)
        slots.release()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(scenario()) == ["follow-up", "new-doc"]


def test_invalid_settings() -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ConfigurationError):
        RateLimit(requests_per_minute=0)


def test_after_a_pause_one_probe_goes_first_and_the_rest_wait_for_its_answer() -> None:
    async def scenario() -> list[str]:
        limiter = Limiter(None)
        events: list[str] = []
        assert await limiter.acquire(1) is False  # no pause: no probe
        limiter.pause(0.05)

        async def request(name: str) -> None:
            probe = await limiter.acquire(1)
            events.append(f"{name} sent{' (probe)' if probe else ''}")
            if probe:
                await asyncio.sleep(0.05)
                events.append("probe answered")
                limiter.answered(rate_limited=False)

        await asyncio.gather(request("a"), request("b"), request("c"))
        return events

    assert asyncio.run(scenario()) == ["a sent (probe)", "probe answered", "b sent", "c sent"]


def test_a_refused_probe_keeps_the_others_waiting_for_the_next_pause() -> None:
    async def scenario() -> float:
        clock = VirtualClock()
        limiter = Limiter(None, clock=clock)
        limiter.pause(0.01)
        assert await limiter.acquire(1) is True
        waiter = asyncio.ensure_future(limiter.acquire(1))
        await clock.sleep(0.02)
        assert not waiter.done()  # the probe is out: the others wait for its answer
        paused = clock.now
        limiter.pause(0.2)  # the probe was refused: a new, longer pause
        limiter.answered(rate_limited=True)
        assert await waiter is True  # the next one is a probe again
        return clock.now - paused

    assert asyncio.run(scenario()) == pytest.approx(0.2, abs=0.01)


class ServerOnTheClock(InstantProvider):
    """Answers after ``latency_s`` of the run's clock, each answer then taking ``cpu_s`` of one shared processor
    (this client's CPU, one answer at a time): throughput is ``in flight / latency`` until it reaches
    ``1 / cpu_s``, where more in flight only lengthens the queue."""

    def __init__(self, clock: VirtualClock, *, latency_s: float, cpu_s: float) -> None:
        super().__init__()
        self.clock, self.latency_s, self.cpu_s = clock, latency_s, cpu_s
        self.in_flight = self.peak = 0
        self._processor: asyncio.Lock | None = None

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await self.clock.sleep(self.latency_s)
            if self.cpu_s:
                self._processor = self._processor or asyncio.Lock()
                async with self._processor:
                    await self.clock.sleep(self.cpu_s)
            return await super().agenerate(request)
        finally:
            self.in_flight -= 1


def _tuned_run(latency_s: float, cpu_s: float, chunks: int = 4000) -> tuple[ServerOnTheClock, float]:
    from ctx_retrieval import ContextGenerator
    from ctx_retrieval.testing.faults import synthetic_corpus

    clock = VirtualClock()
    provider = ServerOnTheClock(clock, latency_s=latency_s, cpu_s=cpu_s)
    generator = ContextGenerator(provider, cache=False, clock=clock)  # max_concurrency=None: the tuner's
    started = clock.now
    run = generator.contextualize_many(synthetic_corpus(chunks, per_document=20))
    assert run.report.generated == chunks and run.report.peak_concurrency == provider.peak
    return provider, chunks / (clock.now - started)


def test_concurrency_grows_while_throughput_grows_with_it() -> None:
    # Latency alone holds the run back (no other bottleneck): every step pays, up to the cap.
    provider, rate = _tuned_run(latency_s=1.0, cpu_s=0.0)
    assert provider.peak == AUTO_MAX_CONCURRENCY
    assert rate > 12 * AUTO_START_CONCURRENCY  # answers per second of the clock, ramp-up and the last ones included


def test_concurrency_stops_growing_where_the_client_becomes_the_bottleneck() -> None:
    # One answer takes 25 ms of this client's CPU: 40 answers a second at most, reached at 40 in flight. Growing on
    # to the cap (as before the tuner: 256 in flight) gains nothing and costs the client's work.
    provider, rate = _tuned_run(latency_s=1.0, cpu_s=0.025)
    assert provider.peak <= 80
    assert rate >= 0.85 * 40


def test_a_send_just_before_the_reporting_one_is_not_taken_as_in_its_report() -> None:
    # Requests go out from threads: one handed over 5 ms before another may reach the server after it, so the later
    # one's report need not include it. The reporting request's own send is in it.
    async def scenario() -> float:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        await limiter.acquire(30_000)
        limiter.sent(30_000)
        clock.now += 0.005
        await limiter.acquire(30_000)
        reporting = limiter.sent(30_000)
        # 40,000 of 100,000 left, refilling at the per-minute rate (1,667/s): less the other send (30,000) and the
        # headroom (1,000), 9,000 are left, so 20,000 more waits (20,000 - 9,000) / 1,667 s.
        limiter.observe(ServerLimits(input_tokens=ServerLimit(100_000, 40_000, None)), reporting)
        started = clock.now
        await limiter.acquire(20_000)
        return clock.now - started

    assert asyncio.run(scenario()) == pytest.approx(11_000 / (100_000 / 60), rel=0.01)


def test_a_large_send_is_taken_as_outside_a_report_for_longer_than_a_small_one() -> None:
    # A document-sized request reaches the server's count later than a small one that leaves with it (its body takes
    # longer to arrive and be counted): 40 ms after both left, another request's report may include the small one
    # but not yet the large one (against the benchmark's twin: up to 43 ms, the source of its last 429s).
    async def scenario() -> float:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        for tokens in (300, 20_000):
            await limiter.acquire(tokens)
            limiter.sent(tokens)
            departing()
        clock.now += 0.04
        await limiter.acquire(300)
        reporting = limiter.sent(300)
        departing()
        # 40,000 of 100,000 left, less the large send (20,000) and the headroom (1,000): 19,000 are left, so 30,000
        # more waits (30,000 - 19,000) / 1,667 s. The small send is in the report.
        limiter.observe(ServerLimits(input_tokens=ServerLimit(100_000, 40_000, None)), reporting)
        started = clock.now
        await limiter.acquire(30_000)
        return clock.now - started

    assert asyncio.run(scenario()) == pytest.approx(11_000 / (100_000 / 60), rel=0.01)


def test_a_report_describes_the_server_from_when_the_request_left_not_when_it_was_handed_over() -> None:
    # The request's thread waited 3 s for a core before the bytes left, then the answer took 1 s: the server's
    # report is 1 s old, not 4. Credited from the hand-over, the mirror would hold 4 s of refill the server never gave.
    async def scenario() -> float:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        await limiter.acquire(1000)
        send = limiter.sent(1000)
        clock.now += 3.0
        departing()  # the provider, as the bytes leave
        assert send.left == clock.now
        clock.now += 1.0
        # 10,000 of 100,000 left, refilling at the per-minute rate (1,667/s): after 1 s, 10,000 + 1,667 less the
        # headroom (1,000) are there, so 20,000 waits (20,000 - 10,667) / 1,667 s.
        limiter.observe(ServerLimits(input_tokens=ServerLimit(100_000, 10_000, None)), send)
        started = clock.now
        await limiter.acquire(20_000)
        return clock.now - started

    assert asyncio.run(scenario()) == pytest.approx((20_000 - 10_000 - 100_000 / 60 + 1_000) / (100_000 / 60),
                                                    rel=0.001)


def test_a_request_handed_over_first_but_left_after_the_reporting_one_is_not_in_its_report() -> None:
    async def scenario() -> float:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        await limiter.acquire(30_000)
        limiter.sent(30_000)  # handed over first; its thread waits for a core
        first = contextvars.copy_context()
        clock.now += 0.05
        await limiter.acquire(30_000)
        reporting = limiter.sent(30_000)
        departing()  # the second leaves at once
        clock.now += 0.15
        first.run(departing)  # the first leaves 0.1 s after the second: the second's report cannot include it
        clock.now += 0.1
        # 40,000 of 100,000 left, refilling at 1,667/s for the 0.25 s since the report: less the first request (30,000)
        # and the headroom (1,000), 9,417 are left, so 20,000 more waits (20,000 - 9,417) / 1,667 s.
        limiter.observe(ServerLimits(input_tokens=ServerLimit(100_000, 40_000, None)), reporting)
        started = clock.now
        await limiter.acquire(20_000)
        return clock.now - started

    rate = 100_000 / 60
    assert asyncio.run(scenario()) == pytest.approx((20_000 - (40_000 + 0.25 * rate - 30_000 - 1_000)) / rate,
                                                    rel=0.001)


def test_the_request_threads_carry_the_send_to_where_the_bytes_leave() -> None:
    async def scenario() -> tuple[float | None, float]:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        provider = AnthropicProvider(api_key="sk-ant-test-threads-0000", request_threads=1)
        await limiter.acquire(1)
        send = limiter.sent(1)
        clock.now += 0.5
        await provider.in_thread(departing)  # what the provider's thread calls before it sends
        await provider.aclose()
        return send.left, clock.now

    left, now = asyncio.run(scenario())
    assert left == now
    departing()  # outside a paced send: nothing to stamp, no error


def test_refill_since_a_report_is_credited_no_further_than_the_servers_own_reset_allows() -> None:
    # The first report teaches 100,000 tokens/s (10,000 used, full 0.1 s after the request left). The second
    # request waited 0.2 s at the server before it was admitted: 40,000 left then, full 0.6 s later, so 0.8 s
    # after it left; its answer comes 0.3 s after it left. From the remainder, the refill since it left (0.3 s)
    # would be credited although the server counted only 0.1 s of it; the reset, an absolute time, says how far
    # from full the bucket is now whenever the request was admitted.
    async def scenario() -> float:
        clock = SteppedClock()
        limiter = Limiter(None, clock=clock)
        await limiter.acquire(10_000)
        first = limiter.sent(10_000)
        departing()
        clock.now += 0.1
        limiter.observe(ServerLimits(input_tokens=ServerLimit(100_000, 90_000, 0.1)), first)
        await limiter.acquire(50_000)
        second = limiter.sent(50_000)
        departing()
        clock.now += 0.3
        limiter.observe(ServerLimits(input_tokens=ServerLimit(100_000, 40_000, 0.8)), second)
        started = clock.now
        await limiter.acquire(80_000)
        return clock.now - started

    rate = (0.9 * 10_000 + 60_000) / (0.9 * 0.1 + 0.8)  # the decaying ratio of deficits to times-to-full
    from_reset = 100_000 - rate * (0.8 - 0.3)  # what the reset allows now
    from_remainder = 40_000 + rate * 0.3  # the remainder refilled since the request left: 2,000 more
    assert from_remainder - from_reset > 1_000
    assert asyncio.run(scenario()) == pytest.approx((80_000 - from_reset + 1_000) / rate, rel=0.001)
