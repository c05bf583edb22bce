"""Rate limiter, retry backoff and priority slots."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from ctx_retrieval import ConfigurationError, RateLimit, RetryPolicy
from ctx_retrieval.scheduling import Limiter, PrioritySlots


def test_token_limit_waits_once_the_bucket_is_empty() -> None:
    async def scenario() -> float:
        limiter = Limiter(RateLimit(input_tokens_per_minute=6000))  # 100 tokens/s
        await limiter.acquire(6000)  # a full minute's worth is available at once
        started = time.monotonic()
        await limiter.acquire(50)  # then it refills at 100 tokens/s
        return time.monotonic() - started

    assert 0.4 <= asyncio.run(scenario()) <= 0.8


def test_request_limit_spaces_requests() -> None:
    async def scenario() -> float:
        limiter = Limiter(RateLimit(requests_per_minute=600))  # 10/s
        for _ in range(600):
            await limiter.acquire(0)
        started = time.monotonic()
        for _ in range(3):
            await limiter.acquire(0)
        return time.monotonic() - started

    assert 0.25 <= asyncio.run(scenario()) <= 0.6


def test_pause_holds_new_requests() -> None:
    async def scenario() -> float:
        limiter = Limiter(None)
        limiter.pause(0.3)
        started = time.monotonic()
        await limiter.acquire(1)
        return time.monotonic() - started

    assert 0.28 <= asyncio.run(scenario()) <= 0.6


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
        limiter = Limiter(None)
        limiter.pause(0.01)
        assert await limiter.acquire(1) is True
        started = time.monotonic()
        waiter = asyncio.ensure_future(limiter.acquire(1))
        await asyncio.sleep(0.02)
        limiter.pause(0.2)  # the probe was refused: a new, longer pause
        limiter.answered(rate_limited=True)
        assert await waiter is True  # the next one is a probe again
        return time.monotonic() - started

    assert asyncio.run(scenario()) >= 0.19
