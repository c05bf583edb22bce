"""The send-and-retry loop every caller of a provider shares (``pacing.paced_call``) and its backoff, on a virtual
clock: the rules issue 53's mutants changed unnoticed (backoff without jitter, one attempt more than allowed)."""

from __future__ import annotations

import asyncio
import random

import pytest

from ctx_retrieval.errors import ProviderRequestError
from ctx_retrieval.pacing import Limiter, Pacer, RetryPolicy, paced_call
from ctx_retrieval.testing.clock import VirtualClock
from ctx_retrieval.types import ErrorDecision


class TransientError(Exception):
    pass


def _classify(exc: Exception) -> ErrorDecision | None:
    if isinstance(exc, TransientError):
        return ErrorDecision("retry", "server_error", status_code=500)
    return None


def test_backoff_doubles_up_to_its_cap_with_jitter_between_half_and_all_of_it() -> None:
    policy = RetryPolicy(initial_delay_s=1.0, max_delay_s=8.0)
    rng = random.Random(7)
    for failures, base in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0), (5000, 8.0)):
        delays = [policy.backoff(failures, rng) for _ in range(200)]
        assert all(0.5 * base <= d <= base for d in delays)
        assert min(delays) < 0.6 * base and max(delays) > 0.9 * base  # spread over the whole band, not one value


def _run(policy: RetryPolicy, fail_times: int) -> tuple[int, float, BaseException | None]:
    clock = VirtualClock()
    calls = 0

    async def call() -> str:
        nonlocal calls
        calls += 1
        if calls <= fail_times:
            raise TransientError("500")
        return "ok"

    async def go() -> BaseException | None:
        try:
            await paced_call(call, pacer=Pacer(Limiter(None, clock=clock), policy, random.Random(0)),
                             classify=_classify, run_error=lambda decision, exc: RuntimeError(decision.kind),
                             limits_of=lambda answer: None, input_tokens=10, output_tokens=0, what="a rerank",
                             provider="test")
        except ProviderRequestError as exc:
            return exc
        return None

    start = clock.now
    error = asyncio.run(go())
    return calls, clock.now - start, error


def test_paced_call_makes_exactly_max_attempts_requests_then_raises_typed() -> None:
    policy = RetryPolicy(max_attempts=3, initial_delay_s=1.0, max_delay_s=10.0)
    calls, waited, error = _run(policy, fail_times=100)
    assert calls == 3 and isinstance(error, ProviderRequestError) and "failed 3 attempts" in str(error)
    assert 0.5 + 1.0 <= waited <= 1.0 + 2.0  # two backoffs between three attempts, on the clock
    calls, _, error = _run(policy, fail_times=2)  # the third attempt answers
    assert calls == 3 and error is None
    calls, _, error = _run(RetryPolicy(max_attempts=1), fail_times=100)
    assert calls == 1 and isinstance(error, ProviderRequestError)


def test_an_error_the_classifier_does_not_know_is_raised_at_once() -> None:
    async def go() -> None:
        async def call() -> str:
            raise KeyError("not a provider error")

        await paced_call(call, pacer=Pacer(Limiter(None, clock=VirtualClock()), RetryPolicy(), random.Random(0)),
                         classify=_classify, run_error=lambda decision, exc: RuntimeError(decision.kind),
                         limits_of=lambda a: None, input_tokens=1, output_tokens=0, what="x", provider="test")

    with pytest.raises(KeyError):
        asyncio.run(go())
