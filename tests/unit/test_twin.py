"""The Anthropic API twin, spoken to with the real SDK: the documented rules it holds the package to."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from ctx_retrieval.testing import FakeAnthropicServer
from ctx_retrieval.testing.clock import SharedClock
from ctx_retrieval.tokens import estimate_tokens

KEY = "sk-ant-test-0000000000000000"
DOCUMENT = "Quarterly report of ACME Corp. Revenue grew 3% over the previous quarter. " * 60


@pytest.fixture
def twin() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as server:
        yield server


def client(server: FakeAnthropicServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=KEY, base_url=server.base_url, max_retries=0)


def user(text: str, **control: Any) -> list[dict[str, Any]]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if control:
        block["cache_control"] = control
    return [{"role": "user", "content": [block]}]


def test_retired_and_unknown_ids_answer_404_with_a_request_id(twin: FakeAnthropicServer) -> None:
    for model in ("claude-3-haiku-20240307", "claude-3-5-haiku-20241022", "claude-does-not-exist"):
        with pytest.raises(anthropic.NotFoundError) as caught:
            client(twin).messages.create(model=model, max_tokens=50, messages=user("hi"))
        assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
        assert str(caught.value.body["request_id"]).startswith("req_")  # type: ignore[index]
    answer = client(twin).messages.create(model="claude-haiku-5-5", max_tokens=50, messages=user("hi"),
                                          thinking={"type": "disabled"})
    assert answer.stop_reason == "end_turn"


def test_thinking_models_think_unless_disabled_and_thinking_counts_in_max_tokens() -> None:
    with FakeAnthropicServer(thinking_tokens=40) as twin:
        sdk = client(twin)
        thinking = sdk.messages.create(model="claude-haiku-5-5", max_tokens=400, messages=user(DOCUMENT))
        assert [b.type for b in thinking.content] == ["thinking", "text"]
        off = sdk.messages.create(model="claude-haiku-5-5", max_tokens=400, messages=user(DOCUMENT),
                                  thinking={"type": "disabled"})
        assert [b.type for b in off.content] == ["text"]
        assert thinking.usage.output_tokens == off.usage.output_tokens + 40
        starved = sdk.messages.create(model="claude-haiku-5-5", max_tokens=30, messages=user(DOCUMENT))
        assert [b.type for b in starved.content] == ["thinking"] and starved.stop_reason == "max_tokens"
        older = sdk.messages.create(model="claude-haiku-4-5", max_tokens=400, messages=user(DOCUMENT))
        assert [b.type for b in older.content] == ["text"]  # Claude Haiku 4.5 does not think unless asked


@pytest.mark.parametrize(("model", "extra", "message"), [
    ("claude-haiku-5-5", {"temperature": 0.0}, "sampling parameters"),
    ("claude-haiku-5-5", {"top_p": 0.9}, "sampling parameters"),
    ("claude-haiku-4-5", {"temperature": 0.5, "top_p": 0.9}, "cannot both"),
    ("claude-opus-5-5", {"thinking": {"type": "disabled"}}, "always thinks"),
    ("claude-haiku-5-5", {"thinking": {"type": "disabled"}, "output_config": {"effort": "max"}}, "low, medium or high"),
    ("claude-haiku-5-5", {"thinking": {"type": "enabled", "budget_tokens": 1024}}, "adaptive"),
    ("claude-opus-4-7", {"thinking": {"type": "enabled", "budget_tokens": 1024}}, "adaptive"),
    ("claude-opus-4-8", {"thinking": {"type": "enabled", "budget_tokens": 1024}}, "adaptive"),
    ("claude-sonnet-5-5", {"thinking": {"type": "disabled"}}, "always thinks"),
])
def test_settings_a_model_rejects_answer_400(twin: FakeAnthropicServer, model: str, extra: dict[str, Any],
                                             message: str) -> None:
    with pytest.raises(anthropic.BadRequestError, match=message):
        client(twin).messages.create(model=model, max_tokens=50, messages=user("hi"), extra_body=extra)
    client(twin).messages.create(model="claude-haiku-4-5", max_tokens=50, messages=user("hi"),
                                 extra_body={"temperature": 0.0})  # one sampling parameter is fine there


def test_cache_breakpoints_at_most_four_and_ttls_in_order(twin: FakeAnthropicServer) -> None:
    blocks = [{"type": "text", "text": f"part {i} " * 50, "cache_control": {"type": "ephemeral"}} for i in range(5)]
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4"):
        client(twin).messages.create(model="claude-haiku-4-5", max_tokens=50,
                                     messages=[{"role": "user", "content": blocks}])
    mixed = [{"type": "text", "text": "a " * 50, "cache_control": {"type": "ephemeral"}},
             {"type": "text", "text": "b " * 50, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    with pytest.raises(anthropic.BadRequestError, match="1h TTL"):
        client(twin).messages.create(model="claude-haiku-4-5", max_tokens=50,
                                     messages=[{"role": "user", "content": mixed}])


def test_cache_minimum_counted_with_the_models_tokenizer_and_usage_split_by_ttl(twin: FakeAnthropicServer) -> None:
    sdk = client(twin)
    # ~1,500 base tokens: under Claude Haiku 4.5's 4,096 minimum, over Claude Haiku 5.5's 512.
    text = DOCUMENT[:6000]
    for model, extra, cached in (("claude-haiku-4-5", {}, False),
                                 ("claude-haiku-5-5", {"thinking": {"type": "disabled"}}, True)):
        first = sdk.messages.create(model=model, max_tokens=50, messages=user(text, type="ephemeral", ttl="1h"),
                                    extra_body=extra)
        second = sdk.messages.create(model=model, max_tokens=50, messages=user(text, type="ephemeral", ttl="1h"),
                                     extra_body=extra)
        assert bool(first.usage.cache_creation_input_tokens) is cached
        assert bool(second.usage.cache_read_input_tokens) is cached
        if cached:
            split = first.usage.cache_creation
            assert split is not None and split.ephemeral_1h_input_tokens == first.usage.cache_creation_input_tokens
            assert split.ephemeral_5m_input_tokens == 0


def test_count_tokens_is_the_twins_tokenizer_not_the_packages_estimate(twin: FakeAnthropicServer) -> None:
    sdk = client(twin)
    old = sdk.messages.count_tokens(model="claude-haiku-4-5", messages=user(DOCUMENT)).input_tokens
    new = sdk.messages.count_tokens(model="claude-haiku-5-5", messages=user(DOCUMENT)).input_tokens
    assert new == pytest.approx(1.3 * old, rel=0.02)  # the newer tokenizer: ~30% more tokens
    assert abs(old - estimate_tokens(DOCUMENT)) > 0.05 * old  # the package's estimate is only an estimate
    with pytest.raises(anthropic.NotFoundError):
        sdk.messages.count_tokens(model="claude-3-haiku-20240307", messages=user("hi"))


def test_error_faults_carry_their_documented_status_type_and_request_id(twin: FakeAnthropicServer) -> None:
    expected = {"billing": (402, "billing_error"), "permission": (403, "permission_error"),
                "too_large": (413, "request_too_large"), "gateway_timeout": (504, "timeout_error"),
                "overloaded": (529, "overloaded_error"), "spend_limit": (429, "rate_limit_error")}
    twin.script_faults(expected)
    for kind, (status, error_type) in expected.items():
        with pytest.raises(anthropic.APIStatusError) as caught:
            client(twin).messages.create(model="claude-haiku-5-5", max_tokens=50, messages=user("hi"))
        body: Any = caught.value.body
        assert caught.value.status_code == status and body["error"]["type"] == error_type, kind
        assert body["request_id"].startswith("req_")
        if kind == "spend_limit":
            assert body["error"]["details"]["error_code"] == "enforced_spend_limit_reached"
            assert caught.value.response.headers.get("retry-after") is None


def test_output_tokens_are_limited_from_max_tokens_and_reported_in_headers() -> None:
    with FakeAnthropicServer(rate_limit_otpm=1000, clock=SharedClock()) as twin:  # no refill between requests
        raw = client(twin).messages.with_raw_response.create(
            model="claude-haiku-5-5", max_tokens=600, messages=user("hi"), thinking={"type": "disabled"})
        assert raw.headers["anthropic-ratelimit-output-tokens-limit"] == "1000"
        # 600 reserved at the start, the unused part given back at the end: another 600 fits at once...
        client(twin).messages.create(model="claude-haiku-5-5", max_tokens=600, messages=user("hi"),
                                     thinking={"type": "disabled"})
        twin.limits.set_left("output-tokens", 100)
        # ...but not when the bucket holds less than the request's max_tokens.
        with pytest.raises(anthropic.RateLimitError) as caught:
            client(twin).messages.create(model="claude-haiku-5-5", max_tokens=600, messages=user("hi"),
                                         thinking={"type": "disabled"})
        assert float(caught.value.response.headers["retry-after"]) > 0


def _batch_request(custom_id: str, **params: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "params": {"model": "claude-haiku-5-5", "max_tokens": 50,
                                               "thinking": {"type": "disabled"}, "messages": user(custom_id),
                                               **params}}


def test_batches_limits_expiry_shuffled_results_and_errored_invalid_requests() -> None:
    clock = SharedClock()
    with FakeAnthropicServer(batch_delay_s=0.05, max_batch_requests=40, clock=clock) as twin:
        sdk = client(twin)
        with pytest.raises(anthropic.APIStatusError) as caught:
            sdk.messages.batches.create(requests=[_batch_request(f"r{i}") for i in range(41)])  # type: ignore[misc]
        assert caught.value.status_code == 413
        requests = [_batch_request(f"r{i}") for i in range(30)]
        requests.append(_batch_request("bad", temperature=0.2))
        batch = sdk.messages.batches.create(requests=requests)  # type: ignore[arg-type]
        assert batch.expires_at - batch.created_at == datetime.timedelta(hours=24)
        assert batch.processing_status == "in_progress"
        clock.advance(0.04)
        assert sdk.messages.batches.retrieve(batch.id).processing_status == "in_progress"
        clock.advance(0.02)
        ended = sdk.messages.batches.retrieve(batch.id)
        assert ended.processing_status == "ended" and ended.ended_at is not None
        results = list(sdk.messages.batches.results(batch.id))
        ids = [r.custom_id for r in results]
        assert sorted(ids) == sorted(r["custom_id"] for r in requests) and ids != [r["custom_id"] for r in requests]
        bad = next(r for r in results if r.custom_id == "bad")
        assert bad.result.type == "errored" and bad.result.error.error.type == "invalid_request_error"


def test_a_canceled_batch_goes_through_canceling_and_ends_canceled() -> None:
    clock = SharedClock()
    with FakeAnthropicServer(batch_delay_s=30.0, clock=clock) as twin:
        sdk = client(twin)
        batch = sdk.messages.batches.create(requests=[_batch_request("a")])  # type: ignore[list-item]
        canceling = sdk.messages.batches.cancel(batch.id)
        assert canceling.processing_status == "canceling" and canceling.cancel_initiated_at is not None
        clock.advance(0.06)
        assert sdk.messages.batches.retrieve(batch.id).processing_status == "ended"
        assert [r.result.type for r in sdk.messages.batches.results(batch.id)] == ["canceled"]


def test_batch_cache_hits_are_best_effort() -> None:
    document = DOCUMENT[:4000]
    params = {"messages": user(document, type="ephemeral")}
    with FakeAnthropicServer(batch_delay_s=0.0, batch_cache_hit_rate=0.5, seed=3) as twin:
        sdk = client(twin)
        sdk.messages.create(model="claude-haiku-5-5", max_tokens=50, thinking={"type": "disabled"}, **params)
        batch = sdk.messages.batches.create(  # type: ignore[misc]
            requests=[{**_batch_request(f"r{i}"), "params": {**_batch_request(f"r{i}")["params"], **params}}
                      for i in range(40)])
        sdk.messages.batches.retrieve(batch.id)
        hits = sum(bool(r.result.message.usage.cache_read_input_tokens)  # type: ignore[union-attr]
                   for r in sdk.messages.batches.results(batch.id))
    assert 8 < hits < 32  # about half read the cache; the others paid the document again


def test_a_cache_entry_is_readable_once_the_writing_response_has_begun() -> None:
    import threading

    text = DOCUMENT
    clock = SharedClock(manual=True)  # each answer is held until the test moves time on
    with FakeAnthropicServer(latency_s=0.4, latency_per_output_token_s=0.01, clock=clock) as twin:
        sdk = client(twin)
        usages: dict[str, Any] = {}

        def ask(name: str) -> None:
            usages[name] = sdk.messages.create(model="claude-haiku-5-5", max_tokens=50, thinking={"type": "disabled"},
                                               messages=user(text, type="ephemeral")).usage

        asking = [threading.Thread(target=ask, args=(name,)) for name in ("writer", "racer")]
        asking[0].start()
        clock.wait_for_holds(1)  # the writer's prompt is being read
        asking[1].start()  # sent meanwhile: no entry to read yet
        clock.wait_for_holds(2)
        clock.advance(10.0)
        for thread in asking:
            thread.join()
        finisher = threading.Thread(target=ask, args=("after",))  # the writer's answer has begun (and ended)
        finisher.start()
        clock.wait_for_holds(1)
        clock.advance(10.0)
        finisher.join()
    assert usages["writer"].cache_creation_input_tokens and usages["racer"].cache_creation_input_tokens
    assert usages["after"].cache_read_input_tokens == usages["writer"].cache_creation_input_tokens


def test_ttl_counts_from_the_writing_request_start() -> None:
    text = DOCUMENT
    clock = SharedClock()
    # 5 minutes scaled to 0.6 s; the writing answer takes 0.5 s: its entry has 0.1 s left when it ends.
    with FakeAnthropicServer(cache_ttl_scale=0.002, latency_s=0.5, clock=clock) as twin:
        sdk = client(twin)
        sdk.messages.create(model="claude-haiku-5-5", max_tokens=50, thinking={"type": "disabled"},
                            messages=user(text, type="ephemeral"))
        clock.advance(0.3)  # 0.8 s after the write started (0.3 s after it ended): expired
        late = sdk.messages.create(model="claude-haiku-5-5", max_tokens=50, thinking={"type": "disabled"},
                                   messages=user(text, type="ephemeral"))
    assert late.usage.cache_read_input_tokens == 0 and late.usage.cache_creation_input_tokens > 0


def test_limits_can_be_enforced_over_a_shorter_interval() -> None:
    def burst(burst_s: float | None) -> int:
        with FakeAnthropicServer(rate_limit_rpm=600, rate_burst_s=burst_s, clock=SharedClock()) as twin:
            sdk = client(twin)
            refused = 0
            for _ in range(20):
                try:
                    sdk.messages.create(model="claude-haiku-5-5", max_tokens=20, messages=user("hi"),
                                        thinking={"type": "disabled"})
                except anthropic.RateLimitError:
                    refused += 1
            return refused

    assert burst(None) == 0  # a minute's worth (600) in the bucket
    assert burst(1.0) == 10  # 600 a minute enforced per second: 10 at once (no time passes between requests)


def test_a_batch_that_outlasts_the_ttl_misses_the_cache() -> None:
    params = {"messages": user(DOCUMENT[:4000], type="ephemeral")}
    clock = SharedClock()
    with FakeAnthropicServer(batch_delay_s=0.3, cache_ttl_scale=0.0005, clock=clock) as twin:  # 5 min -> 0.15 s
        sdk = client(twin)
        sdk.messages.create(model="claude-haiku-5-5", max_tokens=50, thinking={"type": "disabled"}, **params)
        batch = sdk.messages.batches.create(  # type: ignore[misc]
            requests=[{**_batch_request("r"), "params": {**_batch_request("r")["params"], **params}}])
        clock.advance(0.35)
        sdk.messages.batches.retrieve(batch.id)
        (result,) = list(sdk.messages.batches.results(batch.id))
    usage = result.result.message.usage  # type: ignore[union-attr]
    assert usage.cache_read_input_tokens == 0 and usage.cache_creation_input_tokens > 0


def test_sonnet_5_turns_thinking_off_and_opus_4_7_thinks_adaptively_on_request(twin: FakeAnthropicServer) -> None:
    sdk = client(twin)
    off = sdk.messages.create(model="claude-sonnet-5", max_tokens=400, messages=user(DOCUMENT),
                              thinking={"type": "disabled"})
    on = sdk.messages.create(model="claude-sonnet-5", max_tokens=400, messages=user(DOCUMENT))
    assert [b.type for b in off.content] == ["text"] and [b.type for b in on.content] == ["thinking", "text"]
    plain = sdk.messages.create(model="claude-opus-4-7", max_tokens=400, messages=user(DOCUMENT))
    asked = sdk.messages.create(model="claude-opus-4-7", max_tokens=400, messages=user(DOCUMENT),
                                extra_body={"thinking": {"type": "adaptive"}})
    assert [b.type for b in plain.content] == ["text"] and [b.type for b in asked.content] == ["thinking", "text"]


def test_the_context_window_refuses_long_prompts_and_stops_answers_that_fill_it() -> None:
    with FakeAnthropicServer() as twin:
        sdk = client(twin)
        too_long = "word " * 180_000  # 225k tokens for the twin's tokenizer: over Claude Haiku 4.5's 200k window
        with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
            sdk.messages.create(model="claude-haiku-4-5", max_tokens=50, messages=user(too_long))
        nearly = "word " * 159_990  # 199,988 tokens with the overhead: 50 more do not fit
        cut = sdk.messages.create(model="claude-haiku-4-5", max_tokens=400, messages=user(nearly))
        assert cut.stop_reason == "model_context_window_exceeded"
        assert cut.usage.input_tokens + cut.usage.output_tokens <= 200_000
        fits = sdk.messages.create(model="claude-haiku-5-5", max_tokens=400, messages=user(nearly),
                                   thinking={"type": "disabled"})  # a 1M window
        assert fits.stop_reason == "end_turn"


def test_the_models_api_lists_served_models_with_limits() -> None:
    with FakeAnthropicServer(today=datetime.date(2026, 12, 1)) as twin:
        listing = {m.id: m for m in client(twin).models.list()}
    assert "claude-fable-5-2" in listing and "claude-sonnet-4-5" not in listing
    assert "claude-sonnet-4-20250514" not in listing
    fable = listing["claude-fable-5-2"]
    assert (fable.max_input_tokens, fable.max_tokens) == (1_000_000, 128_000)  # type: ignore[attr-defined]


def test_a_client_that_hangs_up_leaves_no_traceback_but_a_fault_of_the_fake_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    # A CLI test reads its run's stderr for tracebacks; the twin runs in that process, and a run quitting at a second
    # Ctrl-C hangs up on answers being written (BrokenPipeError in the twin's thread) under load.
    from ctx_retrieval.testing.loopback import LoopbackHandler, _Server

    server = _Server(("127.0.0.1", 0), LoopbackHandler)
    try:
        for error in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset"), ValueError("a bug")):
            try:
                raise error
            except Exception:
                server.handle_error(None, ("127.0.0.1", 1))
    finally:
        server.server_close()
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1 and "ValueError: a bug" in err and "Broken pipe" not in err


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--port", "-1", "from 0 to 65535"), ("--port", "70000", "from 0 to 65535"), ("--port", "x", "not an integer"),
    ("--rpm", "nan", "above 0"), ("--rpm", "-5", "above 0"), ("--latency", "inf", "from 0"),
    ("--fault-rate", "2", "from 0 to 1")])
def test_the_twins_server_refuses_options_it_cannot_serve_by_before_it_starts(
        option: str, value: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    from ctx_retrieval.testing.__main__ import serve

    with pytest.raises(SystemExit) as exit_:
        serve([option, value])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"argument {option}: " in err and says in err and "Traceback" not in err
