"""What the package sends to today's models and what it does with their answers, checked against the twin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import (
    MODELS,
    AnthropicProvider,
    ConfigurationError,
    ContextGenerator,
    ProviderBillingError,
    ProviderPermissionError,
    SourceDocument,
    UnsupportedSettingError,
    WindowConfig,
    split_into_chunks,
)
from ctx_retrieval.contextualize.cache import text_digest
from ctx_retrieval.models import ModelInfo, cost_usd, request_cost_usd
from ctx_retrieval.testing import FakeAnthropicServer
from ctx_retrieval.types import TokenUsage
from tests.helpers import TEST_KEY, make_document


def provider(server: FakeAnthropicServer, **kwargs: Any) -> AnthropicProvider:
    return AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, timeout_s=10.0, **kwargs)


def test_default_requests_disable_thinking_and_send_no_sampling_parameters(tmp_path: Path) -> None:
    document, chunks = make_document("d", paragraphs=4)
    with FakeAnthropicServer() as server:
        generator = ContextGenerator(provider(server), cache=False)
        run = generator.contextualize(document, chunks)
        bodies = [r.body for r in server.successful()]
    assert all(r.context for r in run) and len(bodies) == len(chunks)
    for body in bodies:
        assert body["model"] == "claude-haiku-5-5" and body["thinking"] == {"type": "disabled"}
        assert not {"temperature", "top_p", "top_k"} & set(body)
        assert body["max_tokens"] == generator.request_max_tokens


def test_models_that_always_think_get_low_effort_and_room_for_thinking() -> None:
    document, chunks = make_document("o", paragraphs=3)
    with FakeAnthropicServer(thinking_tokens=300) as server:
        generator = ContextGenerator(provider(server, model="claude-opus-5-5"), cache=False)
        run = generator.contextualize(document, chunks)
        bodies = [r.body for r in server.successful()]
    assert all(r.context for r in run)  # 300 thinking tokens did not starve the answer
    for body in bodies:
        assert "thinking" not in body and body["output_config"] == {"effort": "low"}
        assert body["max_tokens"] > generator.request_max_tokens + 300


@pytest.mark.parametrize(("model", "extra", "setting"), [
    ("claude-haiku-5-5", {"temperature": 0}, "extra_body['temperature']"),
    ("claude-sonnet-5-5", {"thinking": {"type": "disabled"}}, "extra_body['thinking']"),
    ("claude-haiku-5-5", {"thinking": {"type": "disabled"}, "output_config": {"effort": "xhigh"}},
     "extra_body['output_config']"),
    ("claude-opus-4-7", {"thinking": {"type": "enabled", "budget_tokens": 2048}}, "extra_body['thinking']"),
    ("claude-opus-4-8", {"thinking": {"type": "enabled", "budget_tokens": 2048}}, "extra_body['thinking']"),
])
def test_settings_the_model_rejects_fail_before_any_request(model: str, extra: dict[str, Any], setting: str) -> None:
    with FakeAnthropicServer() as server:
        with pytest.raises(UnsupportedSettingError) as caught:
            provider(server, model=model, extra_body=extra)
        assert caught.value.setting == setting and isinstance(caught.value, ValueError)
        assert server.requests == []
    # The same setting on a model that accepts it is sent as given.
    AnthropicProvider("claude-haiku-4-5", api_key=TEST_KEY, extra_body={"temperature": 0})


def test_sonnet_5_gets_thinking_disabled_not_paid_for() -> None:
    document, chunks = make_document("s5", paragraphs=3)
    with FakeAnthropicServer(thinking_tokens=300) as server:
        generator = ContextGenerator(provider(server, model="claude-sonnet-5"), cache=False)
        run = generator.contextualize(document, chunks)
        bodies = [r.body for r in server.successful()]
    assert all(r.context for r in run) and bodies
    assert all(b["thinking"] == {"type": "disabled"} and b["max_tokens"] == generator.request_max_tokens
               for b in bodies)
    assert run.report.usage.output_tokens < 300 * len(bodies)  # no thinking was billed


def test_an_answer_stopped_at_the_context_window_is_never_stored(tmp_path: Path) -> None:
    document, chunks = make_document("cw", paragraphs=4)
    cache = tmp_path / "c.sqlite"
    with FakeAnthropicServer() as server:
        server.fail_chunk(chunks[1].text, "context_window", times=1)
        run = ContextGenerator(provider(server), cache=cache, on_error="skip").contextualize(document, chunks)
        assert run[1].status == "failed" and run[1].error_kind == "context_window" and run[1].context is None
        asked = [r for r in server.requests if r.chunk_text == chunks[1].text.strip()]
        assert len(asked) == 1  # a larger max_tokens cannot help: not asked again in the run
        server.reset()
        again = ContextGenerator(provider(server), cache=cache).contextualize(document, chunks)
        assert again[1].context and [r.chunk_text for r in server.successful()] == [chunks[1].text.strip()]


def test_a_refusal_fails_the_chunk_and_is_never_cached(tmp_path: Path) -> None:
    document, chunks = make_document("r", paragraphs=4)
    cache = tmp_path / "c.sqlite"
    with FakeAnthropicServer() as server:
        server.fail_chunk(chunks[2].text, "refusal", times=1)
        run = ContextGenerator(provider(server), cache=cache, on_error="skip").contextualize(document, chunks)
        assert run[2].context is None and run[2].status == "failed" and run[2].error is not None
        assert run[2].error_kind == "refusal" and not run[2].error.startswith("refusal")
        assert [f.error_kind for f in run.report.failures] == ["refusal"]
        before = len(server.requests)
        again = ContextGenerator(provider(server), cache=cache).contextualize(document, chunks)
        assert len(server.requests) == before + 1 and again[2].context  # only the refused chunk is asked again


def test_an_answer_cut_at_max_tokens_is_retried_once_with_room_then_failed(tmp_path: Path) -> None:
    document, chunks = make_document("m", paragraphs=4)
    with FakeAnthropicServer() as server:
        server.fail_chunk(chunks[1].text, "max_tokens", times=1)
        generator = ContextGenerator(provider(server), cache=tmp_path / "a.sqlite")
        run = generator.contextualize(document, chunks)
        asked = [r.body["max_tokens"] for r in server.requests if r.chunk_text == chunks[1].text.strip()]
    assert run[1].context and asked == [generator.request_max_tokens, 4 * generator.request_max_tokens]
    with FakeAnthropicServer() as server:
        server.fail_chunk(chunks[1].text, "max_tokens")
        run = ContextGenerator(provider(server), cache=tmp_path / "b.sqlite", on_error="skip").contextualize(
            document, chunks)
        assert run[1].context is None and run[1].error is not None and run[1].error_kind == "max_tokens"
        server.reset()  # nothing cut off was stored: a rerun asks for that chunk again, and only for it
        ContextGenerator(provider(server), cache=tmp_path / "b.sqlite").contextualize(document, chunks)
        assert [r.chunk_text for r in server.successful()] == [chunks[1].text.strip()]


def test_an_answer_with_only_thinking_fails_empty_response() -> None:
    document, chunks = make_document("t", paragraphs=3)
    # A table entry that says the model does not think: the request leaves thinking on, and the twin's model
    # spends the answer on it. The package must not store the empty text as a context.
    thinks_silently = ModelInfo.from_input_price("claude-haiku-5-5", input_per_mtok=0.1, output_per_mtok=0.5,
                                                 min_cacheable_tokens=512, context_window=1_000_000)
    with FakeAnthropicServer(responder=lambda body: "", thinking_tokens=60) as server:
        run = ContextGenerator(provider(server, model_info=thinks_silently), cache=False,
                               on_error="skip").contextualize(document, chunks)
        bodies = [r.body for r in server.successful()]
    assert all(r.status == "failed" and r.error and r.error_kind == "empty_response" for r in run)
    assert bodies and all("thinking" not in body for body in bodies)
    assert run.report.usage.output_tokens >= 60 * len(bodies)  # the thinking was billed all the same


@pytest.mark.parametrize(("fault", "error", "status"), [
    ("billing", ProviderBillingError, 402), ("spend_limit", ProviderBillingError, 429),
    ("permission", ProviderPermissionError, 403),
])
def test_billing_permission_and_spend_limit_stop_the_run(fault: str, error: type[Exception], status: int) -> None:
    documents = [make_document(f"s{i}", paragraphs=4) for i in range(3)]
    with FakeAnthropicServer() as server:
        server.script_faults([fault])
        with pytest.raises(error) as caught:
            ContextGenerator(provider(server), cache=False, on_error="skip").contextualize_many(documents)
        messages = [r for r in server.requests if r.path == "/v1/messages"]
        assert len(messages) == 1  # one request, then the run stopped: retrying cannot help
    assert caught.value.status_code == status  # type: ignore[attr-defined]
    report = caught.value.report  # type: ignore[attr-defined]
    assert report.failed == 1 and report.not_attempted == sum(len(c) for _, c in documents) - 1


def test_windowing_keeps_prompts_in_the_cheaper_price_tier_by_default() -> None:
    # ~135k tokens for the twin's Claude Haiku 5.5 tokenizer: over the 100k threshold of its dearer tier.
    paragraphs = [f"Part {i}. " + " ".join(f"term{i}x{j}" for j in range(9000)) for i in range(4)]
    document = SourceDocument("long", "\n\n".join(paragraphs))
    chunks = split_into_chunks(document, paragraphs)
    haiku = MODELS["claude-haiku-5-5"]
    with FakeAnthropicServer() as server:
        run = ContextGenerator(provider(server), cache=False).contextualize(document, chunks)
        assert all(r.windowed for r in run) and run.report.long_prompt_requests == 0
        assert max(r.usage["input_tokens"] + r.usage["cache_creation_input_tokens"]
                   + r.usage["cache_read_input_tokens"] for r in server.successful() if r.usage) <= 100_000
    with FakeAnthropicServer() as server:
        whole = ContextGenerator(provider(server), cache=False,
                                 window=WindowConfig(stay_in_price_tier=False)).contextualize(document, chunks)
        usages = [r.usage for r in server.successful() if r.usage]
    assert not any(r.windowed for r in whole) and whole.report.long_prompt_requests == len(chunks)
    assert "dearer long-prompt tier: 4" in whole.report.format()
    billed = sum(request_cost_usd(TokenUsage.from_dict(u), haiku) for u in usages)
    at_base_price = sum(cost_usd(TokenUsage.from_dict(u), haiku) for u in usages)
    assert whole.report.cost_usd == pytest.approx(billed) and billed == pytest.approx(5 * at_base_price)


def test_estimate_counts_with_the_models_tokenizer_ratio() -> None:
    text = "x" * 3600  # 1,000 tokens by the base estimate
    new = ContextGenerator(AnthropicProvider("claude-haiku-5-5", api_key=TEST_KEY), cache=False)
    old = new.with_options(provider=AnthropicProvider("claude-haiku-4-5", api_key=TEST_KEY))  # its model's counter
    assert (new.settings.counter(text), old.settings.counter(text)) == (1300, 1000)


def test_batches_split_by_size_and_invalid_requests_are_failed_not_retried(tmp_path: Path) -> None:
    documents = [make_document(f"b{i}", paragraphs=6) for i in range(2)]
    with FakeAnthropicServer(batch_delay_s=0.05) as server:
        server.fail_in_batches(lambda p: documents[0][1][3].text in p["messages"][0]["content"][-1]["text"],
                               "invalid")
        generator = ContextGenerator(provider(server, cache_ttl="1h"), cache=tmp_path / "c.sqlite",
                                     on_error="skip")
        run = generator.contextualize_many_batched(documents, poll_interval_s=0.02, max_batch_bytes=30_000)
        sizes = [len(b["requests"]) for b in server.batches.values()]
        ordinary = [r for r in server.successful() if r.path == "/v1/messages"]
    # The warm-up batch (one per document), then the other 10 requests split under the 30,000-byte cap.
    assert sizes[0] == 2 and len(sizes) > 2 and sum(sizes) == sum(len(c) for _, c in documents)
    assert all(sum(len(json.dumps(item)) for item in b["requests"]) <= 30_000 for b in server.batches.values())
    failed = [r for r in run if r.status == "failed"]
    assert [r.chunk_id for r in failed] == [documents[0][1][3].id] and failed[0].error
    assert failed[0].error_kind == "bad_request"
    assert ordinary == []  # the invalid request was not sent again
    with pytest.raises(ConfigurationError, match="max_batch_requests"):
        generator.contextualize_many_batched([], max_batch_requests=0)


def test_documents_near_a_decision_boundary_are_counted_by_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    near, _ = make_document("near", paragraphs=6, words=40)  # ~800 estimated tokens: near the 512 minimum
    far, _ = make_document("far", paragraphs=60)  # ~8,000: no decision changes within the estimate's error
    items = [(near, split_into_chunks(near, near.text.split("\n\n"))),
             (far, split_into_chunks(far, far.text.split("\n\n")))]
    with FakeAnthropicServer() as server:
        generator = ContextGenerator(provider(server), cache=False)
        first = generator.estimate(items)
        counted = server.token_counts()
        assert len(counted) == 1 and near.text in counted[0].body["messages"][0]["content"]
        assert not [r for r in server.requests if r.path == "/v1/messages"]  # a dry run writes no context
        generator.estimate(items)
        assert len(server.requests) == 1  # counts are kept per model and text
        exact = generator._planner.exact_counts[("claude-haiku-5-5", text_digest(near.text))]
        assert exact != generator.settings.counter(near.text)  # the twin's tokenizer is not our estimate
        assert first.documents == 2
        server.reset()
        ContextGenerator(provider(server), cache=False, exact_token_counts=False).estimate(items)
        assert server.requests == []
        ContextGenerator(provider(server), cache=False, exact_token_counts=True).estimate(items)
        assert len(server.token_counts()) == 2
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    offline = ContextGenerator(AnthropicProvider("claude-haiku-5-5", base_url="http://127.0.0.1:9"), cache=False)
    assert offline.estimate(items).documents == 2  # no key: the estimate alone (port 9 would refuse a count)


def test_exact_counts_are_kept_in_the_context_cache_for_the_next_run(tmp_path: Path) -> None:
    near, _ = make_document("near", paragraphs=6, words=40)
    items = [(near, split_into_chunks(near, near.text.split("\n\n")))]
    with FakeAnthropicServer() as server:
        ContextGenerator(provider(server), cache=tmp_path / "c.sqlite").contextualize_many(items)
        assert len(server.token_counts()) == 1
        server.reset()
        ContextGenerator(provider(server), cache=tmp_path / "c.sqlite").contextualize_many(items)
        assert server.requests == []  # contexts and the count both come from the cache


def test_the_estimate_of_a_windowed_document_prices_what_the_run_caches() -> None:
    # 30 paragraphs of ~120 tokens, windowed at 1,500: the cached block is the first two chunks (~250 tokens),
    # below Claude Haiku 5.5's 512-token minimum, so nothing is cached; the estimate must not promise reads.
    document, chunks = make_document("w", paragraphs=30, words=80)
    window = WindowConfig(max_document_tokens=1500)
    with FakeAnthropicServer() as server:
        generator = ContextGenerator(provider(server), cache=False, window=window, exact_token_counts=False)
        estimate = generator.estimate([(document, chunks)])
        run = generator.contextualize(document, chunks)
    assert all(r.windowed for r in run)
    assert run.report.usage.cache_read_input_tokens == 0 and estimate.usage.cache_read_input_tokens == 0
    assert estimate.uncacheable_documents == ["w"] == run.report.uncacheable_documents
    assert any("window's fixed part (the first 2 chunks" in w for w in run.report.warnings)
    # A document whose whole text goes in each prompt is cached, by the estimate and by the run.
    whole, whole_chunks = make_document("whole", paragraphs=12)
    with FakeAnthropicServer() as server:
        generator = ContextGenerator(provider(server), cache=False, exact_token_counts=False)
        estimate = generator.estimate([(whole, whole_chunks)])
        run = generator.contextualize(whole, whole_chunks)
    assert estimate.usage.cache_read_input_tokens > 0 and run.report.usage.cache_read_input_tokens > 0


def test_dollars_per_million_document_tokens_count_only_what_was_paid(tmp_path: Path) -> None:
    first, second = make_document("a", paragraphs=12), make_document("b", paragraphs=12)
    cache = tmp_path / "c.sqlite"
    with FakeAnthropicServer() as server:
        ContextGenerator(provider(server), cache=cache).contextualize_many([first])
        run = ContextGenerator(provider(server), cache=cache).contextualize_many([first, second])
    report = run.report
    assert report.cached == len(first[1]) and report.generated == len(second[1])
    assert report.paid_document_tokens == pytest.approx(report.document_tokens / 2, rel=0.05)  # only "b" was paid
    assert report.cost_per_million_document_tokens == pytest.approx(
        report.cost_usd / report.paid_document_tokens * 1e6)  # type: ignore[operator]


def test_requests_that_never_reached_the_server_are_not_counted() -> None:
    from ctx_retrieval import ProviderUnavailableError, RetryPolicy

    document, chunks = make_document("down", paragraphs=3)
    closed = AnthropicProvider(api_key=TEST_KEY, base_url="http://127.0.0.1:9", timeout_s=2.0)  # nothing listens
    generator = ContextGenerator(closed, cache=False, exact_token_counts=False,
                                 retry=RetryPolicy(initial_delay_s=0.01, max_delay_s=0.02, max_outage_s=0.2))
    with pytest.raises(ProviderUnavailableError) as caught:
        generator.contextualize(document, chunks)
    report = caught.value.report
    assert report is not None and report.requests == 0 and report.retries > 0  # probes were made, none reached it


@pytest.mark.parametrize(("status", "body"), [(200, {}), (200, {"input_tokens": None}), (200, {"type": "error"}),
                                              (404, {"type": "error", "error": {"type": "not_found_error"}})])
def test_a_token_count_a_gateway_cannot_give_leaves_the_estimate_and_the_run_going(
        status: int, body: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    import anthropic
    import httpx2 as httpx

    counts: list[str] = []

    def gateway(request: httpx.Request) -> httpx.Response:  # serves messages, not counts
        counts.append(request.url.path)
        return httpx.Response(status, json=body)

    client = anthropic.AsyncAnthropic(api_key=TEST_KEY, base_url="http://gateway.invalid", max_retries=0,
                                      http_client=httpx.AsyncClient(transport=httpx.MockTransport(gateway)))
    items = [make_document(f"d{n}", paragraphs=6, words=40) for n in range(3)]
    generator = ContextGenerator(AnthropicProvider("claude-haiku-5-5", client=client), cache=False,
                                 exact_token_counts=True)
    with caplog.at_level("WARNING"):
        estimate = generator.estimate(items)  # no TypeError, no UnknownModelError
    assert estimate.documents == 3 and counts and set(counts) == {"/v1/messages/count_tokens"}
    if status == 404:
        assert len(counts) <= 3 and caplog.text.count("answered 404 to a token count") == 1


def test_exact_counts_against_an_endpoint_that_is_down_are_tried_once_and_said(
        caplog: pytest.LogCaptureFixture) -> None:
    import anthropic
    import httpx2 as httpx

    tried: list[str] = []

    def down(request: httpx.Request) -> httpx.Response:
        tried.append(request.url.path)
        raise httpx.ConnectError("connection refused", request=request)

    client = anthropic.AsyncAnthropic(api_key=TEST_KEY, base_url="http://down.invalid",
                                      http_client=httpx.AsyncClient(transport=httpx.MockTransport(down)))
    items = [make_document(f"d{n}", paragraphs=6, words=40) for n in range(3)]
    generator = ContextGenerator(AnthropicProvider("claude-haiku-5-5", client=client), cache=False)
    with caplog.at_level("WARNING"):
        estimate = generator.estimate(items, exact=True)
    assert estimate.documents == 3 and len(tried) == 3  # one attempt a document: no SDK retries and backoff
    assert "3 of 3 exact token counts failed (unreachable)" in caplog.text


def test_exact_counts_pace_through_the_runs_own_limiter_and_the_fleets_shared_limit() -> None:
    """Issue 53: the planner's counts had a limiter of their own, without the fleet's shared limit or the run's
    clock; a count now reserves its share of the fleet's limit as the context requests do."""
    reserved: list[tuple[int, int]] = []

    class Fleet:
        async def reserve(self, input_tokens: int, output_tokens: int) -> float:
            reserved.append((input_tokens, output_tokens))
            return 0.0

    items = [make_document(f"d{n}", paragraphs=3, words=20) for n in range(2)]
    with FakeAnthropicServer() as server:
        generator = ContextGenerator(provider(server), cache=False, exact_token_counts=True,
                                     shared_rate_limit=Fleet())
        generator.estimate(items)
        assert len(server.token_counts()) == 2 and reserved == [(0, 0), (0, 0)]
        reserved.clear()
        generator = ContextGenerator(provider(server), cache=False, exact_token_counts=True,
                                     shared_rate_limit=Fleet())
        generator.contextualize_many(items)
        counts = [r for r in reserved if r == (0, 0)]
        assert len(counts) == 2 and len(reserved) == 2 + sum(len(chunks) for _, chunks in items)
