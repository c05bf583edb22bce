"""The Claude reranker against the fake API."""

from __future__ import annotations

from typing import Any

import pytest

from ctx_retrieval import AnthropicProvider, ClaudeReranker, ProviderAuthenticationError, RetryPolicy
from ctx_retrieval.testing import FakeAnthropicServer
from tests.helpers import TEST_KEY, passage_numbers


def reverse_responder(body: dict[str, Any]) -> str:
    numbers = passage_numbers(body)
    return "Most relevant: " + ", ".join(reversed(numbers[1:])) + ", 99"  # leaves one out, invents one


def test_reranker_reorders_and_keeps_every_candidate() -> None:
    texts = {f"id{i}": f"passage {i} text" for i in range(6)}
    rankings = [list(texts), list(reversed(list(texts)))]
    with FakeAnthropicServer(responder=reverse_responder) as server:
        reranker = ClaudeReranker(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), candidates=6)
        reranked = reranker.rerank_ids(["q one", "q two"], rankings, texts)
        first = server.successful()[0].body["messages"][0]["content"]
    assert reranked[0] == ["id5", "id4", "id3", "id2", "id1", "id0"]  # model's order, then the one it left out
    assert reranked[1] == ["id0", "id1", "id2", "id3", "id4", "id5"]
    assert "cache_control" not in first[0]  # a one-off prompt: no cache write surcharge
    assert "<query>\nq one\n</query>" in first[-1]["text"] or "<query>\nq two\n</query>" in first[-1]["text"]


def test_only_the_first_candidates_are_judged() -> None:
    texts = {f"id{i}": f"passage {i}" for i in range(10)}
    with FakeAnthropicServer(responder=reverse_responder) as server:
        reranker = ClaudeReranker(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), candidates=4)
        (reranked,) = reranker.rerank_ids(["q"], [list(texts)], texts)
    assert reranked[:4] == ["id3", "id2", "id1", "id0"] and reranked[4:] == [f"id{i}" for i in range(4, 10)]


def test_transient_faults_are_retried_and_a_bad_key_is_not() -> None:
    texts = {"a": "alpha", "b": "beta"}
    with FakeAnthropicServer(responder=reverse_responder, retry_after_s=0.05) as server:
        server.script_faults(["overloaded", "rate_limit"])
        reranker = ClaudeReranker(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url),
                                  retry=RetryPolicy(initial_delay_s=0.01))
        assert reranker.rerank_ids(["q"], [["a", "b"]], texts) == [["b", "a"]]
    with FakeAnthropicServer(api_key="sk-ant-other-key-000000") as server:
        reranker = ClaudeReranker(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url))
        with pytest.raises(ProviderAuthenticationError):
            reranker.rerank_ids(["q"], [["a", "b"]], texts)


def test_a_sustained_429_is_bounded_and_paced_run_wide() -> None:
    from ctx_retrieval import ProviderRequestError

    texts = {f"id{i}": f"passage {i}" for i in range(4)}
    from ctx_retrieval.testing.clock import SharedClock

    clock = SharedClock()  # the outage and the waits on one time, whatever the machine's speed
    with FakeAnthropicServer(responder=reverse_responder, retry_after_s=0.1, clock=clock) as server:
        server.fail_all_for(60.0, "rate_limit")
        reranker = ClaudeReranker(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url),
                                  retry=RetryPolicy(max_rate_limit_wait_s=0.5), max_concurrency=4, clock=clock)
        with pytest.raises(ProviderRequestError, match="max_rate_limit_wait_s"):
            reranker.rerank_ids([f"q{n}" for n in range(4)], [list(texts)] * 4, texts)
        refused = len(server.requests)
    # Before: each query retried a 429 forever (here until the 60 s outage ended). Now the queries share the
    # run-wide pauses (one probe after each) and each gives up after 0.5 s of waiting (0.1 s per 429).
    assert refused <= 4 * (0.5 / 0.1 + 2)


def test_waits_are_taken_on_the_injected_clock_and_the_limit_counts_the_passages_sent() -> None:
    from ctx_retrieval import RateLimit
    from ctx_retrieval.tokens import estimate_tokens
    from tests.helpers import SteppedClock

    texts = {f"id{i}": f"passage {i} " + "word " * 40 for i in range(8)}
    with FakeAnthropicServer(responder=reverse_responder) as server:
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        server.script_faults(["server_error"])
        clock = SteppedClock()
        reranker = ClaudeReranker(provider, candidates=8, retry=RetryPolicy(initial_delay_s=7.0), clock=clock)
        assert len(reranker.rerank_ids(["q"], [list(texts)], texts)[0]) == 8
        assert len(clock.slept) == 1 and 3.5 <= clock.slept[0] <= 7.0  # the backoff, on the clock (jitter 0.5-1x)
        # 600 input tokens a minute and prompts of ~540: the second query waits for the bucket to refill what it
        # sends; a limit fed the answer's cap (~176 tokens) as before would have let both through at once
        clock = SteppedClock()
        reranker = ClaudeReranker(provider, candidates=8, clock=clock, max_concurrency=1,
                                  rate_limit=RateLimit(input_tokens_per_minute=600))
        reranker.rerank_ids(["q1", "q2"], [list(texts)] * 2, texts)
        prompt = server.successful()[-1].body["messages"][0]["content"]
    sent = estimate_tokens(prompt[0]["text"] + prompt[-1]["text"])
    assert 500 < sent < 600
    assert sum(clock.slept) >= 60 * (2 * sent - 600) / 600 - 1  # about 48 s, slept on the injected clock
