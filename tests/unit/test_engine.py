"""The context engine's rules on its own (issue 53): a provider is one function (``InstantProvider(handler)``, the
engine's test seam), time is a virtual clock, no twin and no network. What the engine does with an answer, a
transient refusal, a refusal that fails one chunk and one that stops the run."""

from __future__ import annotations

import itertools

import pytest

from ctx_retrieval import ContextGenerator, ProviderRequestError, RetryPolicy
from ctx_retrieval.testing.clock import VirtualClock
from ctx_retrieval.testing.instant import InstantProvider, RefusedError, situating
from ctx_retrieval.types import ContextRequest, ProviderResponse
from tests.helpers import make_document


def run_with(handler: object, **settings: object) -> tuple[object, InstantProvider, VirtualClock]:
    clock = VirtualClock()
    provider = InstantProvider(handler)  # type: ignore[arg-type]
    document, chunks = make_document("d", paragraphs=3)
    generator = ContextGenerator(provider, cache=False, clock=clock, seed=1, max_concurrency=1,
                                 **settings)  # type: ignore[arg-type]
    return generator.contextualize(document, chunks), provider, clock


def test_each_chunk_is_sent_once_and_gets_the_handlers_answer() -> None:
    run, provider, _ = run_with(situating)
    assert [r.status for r in run] == ["generated"] * 3  # type: ignore[attr-defined]
    assert all(r.context.startswith("Situates:") for r in run) and provider.requests == 3  # type: ignore[attr-defined]


class _Top:
    """A random source at the top of every range: the backoff without its jitter."""

    def uniform(self, low: float, high: float) -> float:
        return high


def test_a_transient_refusal_is_retried_after_a_jittered_backoff_within_max_attempts() -> None:
    sent: list[float] = []

    def overloaded(request: ContextRequest) -> ProviderResponse:
        sent.append(clock.now)
        raise RefusedError("overloaded", status_code=529)

    clock = VirtualClock()
    provider = InstantProvider(overloaded)
    document, chunks = make_document("d", paragraphs=1)
    policy = RetryPolicy(max_attempts=4, initial_delay_s=1.0, max_delay_s=30.0)
    run = ContextGenerator(provider, cache=False, clock=clock, seed=1, max_concurrency=1, retry=policy,
                           on_error="skip").contextualize(document, chunks)
    assert provider.requests == policy.max_attempts  # not one more
    assert run[0].status == "failed" and run[0].error_kind == "overloaded"
    waits = [b - a for a, b in itertools.pairwise(sent)]
    bases = [policy.backoff(n, _Top()) for n in range(1, policy.max_attempts)]  # the waits without jitter
    assert all(0.5 * b <= w <= b for w, b in zip(waits, bases, strict=True)), (waits, bases)
    assert any(w < b for w, b in zip(waits, bases, strict=True))  # jittered


def test_a_rate_limit_waits_its_retry_after_and_uses_no_attempt() -> None:
    left = [3]

    def limited(request: ContextRequest) -> ProviderResponse:
        if left[0]:
            left[0] -= 1
            raise RefusedError("rate_limited", retry_after_s=7.0, status_code=429)
        return situating(request)

    run, provider, clock = run_with(limited, retry=RetryPolicy(max_attempts=2))
    assert [r.status for r in run] == ["generated"] * 3  # type: ignore[attr-defined]
    assert run.report.rate_limited == 3 and provider.requests == 6  # type: ignore[attr-defined]
    assert clock.now >= 3 * 7.0  # each 429's retry-after waited on the run's clock


def test_a_chunk_refusal_fails_that_chunk_and_the_run_goes_on() -> None:
    document, chunks = make_document("d", paragraphs=3)
    second = chunks[1].text

    def handler(request: ContextRequest) -> ProviderResponse:
        if second in request.chunk_block:
            raise RefusedError("bad_request", action="fail_chunk", status_code=400)
        return situating(request)

    provider = InstantProvider(handler)
    run = ContextGenerator(provider, cache=False, clock=VirtualClock(), max_concurrency=1,
                           on_error="skip").contextualize(document, chunks)
    assert [r.status for r in run] == ["generated", "failed", "generated"]
    assert run[1].error_kind == "bad_request" and provider.requests == 3  # a chunk refusal is not retried


def test_a_run_refusal_stops_the_run_with_the_providers_typed_error() -> None:
    def unauthorised(request: ContextRequest) -> ProviderResponse:
        raise RefusedError("authentication", action="fail_run", status_code=401)

    with pytest.raises(ProviderRequestError, match="authentication") as raised:
        run_with(unauthorised, on_error="skip")
    assert raised.value.status_code == 401
