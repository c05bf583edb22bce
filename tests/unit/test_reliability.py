"""Defects an adversarial pass found (issue 13): each test failed before its fix."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import (
    AnthropicProvider,
    Chunk,
    ConfigurationError,
    ContextCache,
    ContextGenerator,
    InvalidInputError,
    RetryPolicy,
    SourceDocument,
    split_into_chunks,
)
from ctx_retrieval.contextualize.cache import CachedContext
from ctx_retrieval.testing import FakeAnthropicServer
from ctx_retrieval.testing.faults import synthetic_corpus
from ctx_retrieval.testing.instant import InstantProvider, RefusedError, situating
from ctx_retrieval.types import ContextRequest, ErrorDecision, ProviderResponse, TokenUsage
from tests.helpers import TEST_KEY, SteppedClock, make_document


def _rate_limited(refusals: int) -> InstantProvider:
    """Answers the first ``refusals`` requests with a header-less 429 (as OpenAI-compatible servers and proxies
    send them), then normally."""
    left = [refusals]

    def handler(request: ContextRequest) -> ProviderResponse:
        if left[0] > 0:
            left[0] -= 1
            raise RefusedError("rate_limited", status_code=429)
        return situating(request)

    return InstantProvider(handler)


def test_thousands_of_429s_without_retry_after_do_not_overflow_the_backoff() -> None:
    # The run-wide pause grows with the run's 429 count; 2.0 ** 1024 used to raise OverflowError.
    provider = _rate_limited(refusals=5000)
    generator = ContextGenerator(provider, cache=False, max_concurrency=4, seed=1,
                                 retry=RetryPolicy(initial_delay_s=0.0, max_delay_s=0.0))
    run = generator.contextualize_many(synthetic_corpus(20, per_document=10))
    assert all(r.context for r in run) and run.report.rate_limited == 5000
    assert RetryPolicy().backoff(10**6, __import__("random").Random(0)) <= RetryPolicy().max_delay_s


@pytest.mark.parametrize("kind", ["malformed_no_usage", "malformed_null_text", "malformed_error_200",
                                  "malformed_array"])
def test_a_200_that_is_not_a_message_is_retried_then_fails_invalid_response(kind: str) -> None:
    document, chunks = make_document("m", paragraphs=3)
    with FakeAnthropicServer() as server:
        server.script_faults([kind])  # once: retried and answered
        run = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), cache=False,
                               on_error="skip", exact_token_counts=False).contextualize(document, chunks)
        assert all(r.context for r in run) and run.report.errors_by_type == {"invalid_response": 1}
        server.fail_chunk(chunks[1].text, kind)  # always: the chunk fails with that reason, the run goes on
        run = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), cache=False,
                               on_error="skip", exact_token_counts=False,
                               retry=RetryPolicy(max_attempts=2, initial_delay_s=0.01)).contextualize(document, chunks)
    assert [r.status for r in run] == ["generated", "failed", "generated"]
    assert run[1].error is not None and run[1].error_kind == "invalid_response"


def test_a_wait_the_run_will_not_make_does_not_pause_the_run() -> None:
    documents = [make_document(f"w{i}", paragraphs=3) for i in range(3)]
    with FakeAnthropicServer(retry_after_s=3600) as server:
        server.fail_chunk(documents[0][1][0].text, "rate_limit")  # retry-after: an hour
        clock = SteppedClock()  # the run's time: it moves only when the run waits
        generator = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), cache=False,
                                     on_error="skip", exact_token_counts=False, max_concurrency=2, clock=clock)
        run = generator.contextualize_many(documents)
    assert sum(clock.slept) < 5  # the run never waited the hour, nor held the others back for it
    failed = [r for r in run if r.status == "failed"]
    assert [r.chunk_id for r in failed] == [documents[0][1][0].id] and failed[0].error is not None
    assert "3600 s" in failed[0].error and "max_rate_limit_wait_s" in failed[0].error
    assert run.report.to_retry and sum(r.status == "generated" for r in run) == len(run) - 1


def test_a_529_storm_backs_the_whole_run_off() -> None:
    documents = [make_document(f"s{i}", paragraphs=6) for i in range(8)]
    from ctx_retrieval.testing.clock import SharedClock

    clock = SharedClock()  # the storm lasts 2 s of the run's time, however loaded the machine
    with FakeAnthropicServer(clock=clock) as server:
        server.fail_all_for(2.0, "overloaded")
        generator = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), cache=False,
                                     exact_token_counts=False, max_concurrency=16, clock=clock,
                                     retry=RetryPolicy(max_attempts=20, initial_delay_s=0.05, max_delay_s=0.5))
        run = generator.contextualize_many(documents)
        during = [r for r in server.requests if r.status == 529]
    assert all(r.context for r in run)
    assert len(during) <= 15  # measured: 9-10 (before the fix, each chunk on its own backoff: 40)


def test_an_empty_cached_answer_is_not_a_hit(tmp_path: Path) -> None:
    document, chunks = make_document("e", paragraphs=3)
    with FakeAnthropicServer() as server:
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        generator = ContextGenerator(provider, cache=tmp_path / "c.sqlite", exact_token_counts=False)
        generator.contextualize(document, chunks)
        key = generator._planner.plan([(document, chunks)])[0].keys[1]
        assert key is not None
        cache = ContextCache(tmp_path / "c.sqlite")
        cache.delete([key])
        cache.put(key, CachedContext("   ", "anthropic", "claude-haiku-5-5", "ctx-v1", TokenUsage()))
        server.reset()
        run = ContextGenerator(provider, cache=tmp_path / "c.sqlite", exact_token_counts=False).contextualize(
            document, chunks)
    assert run[1].status == "generated" and run[1].context
    assert [r.chunk_text for r in server.successful()] == [chunks[1].text.strip()]


def test_the_cache_key_follows_the_endpoint_however_it_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = AnthropicProvider(api_key=TEST_KEY, base_url="http://127.0.0.1:9001")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9001")
    from_env = AnthropicProvider(api_key=TEST_KEY)
    assert from_env.cache_namespace == explicit.cache_namespace
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9002")
    assert from_env.cache_namespace != explicit.cache_namespace
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    assert from_env.cache_namespace == "anthropic"
    with_credentials = AnthropicProvider(api_key=TEST_KEY, base_url="https://user:s3cret@proxy.example/v1?k=x")
    assert "s3cret" not in with_credentials.cache_namespace and "k=x" not in with_credentials.cache_namespace
    pinned = [AnthropicProvider(api_key=TEST_KEY, base_url=f"http://127.0.0.1:{port}", endpoint_id="twin")
              for port in (9001, 9002)]
    assert pinned[0].cache_namespace == pinned[1].cache_namespace


def test_a_wrapped_models_endpoint_is_in_the_key_and_survives_pickling() -> None:
    import pickle

    from ctx_retrieval.providers.wrapped import WrappedModelProvider

    class Model:
        def __init__(self, base_url: str) -> None:
            self.model, self.base_url = "llama3", base_url

    one, other = (WrappedModelProvider(Model(url)) for url in ("http://127.0.0.1:11434", "http://127.0.0.1:8080"))
    assert one.cache_namespace != other.cache_namespace and "11434" in one.cache_namespace
    assert pickle.loads(pickle.dumps(one)).cache_namespace == one.cache_namespace


def test_the_cli_twin_reruns_from_the_cache(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctx_retrieval.cli import main

    args = ["demo", "--sample-document", "--contextualizer", "fake", "--cache", str(tmp_path / "c.sqlite")]
    assert "ANTHROPIC_API_KEY" not in os.environ  # the fake contextualizer, not Claude
    assert main(args, twin=FakeAnthropicServer) == 0
    first = "".join(capsys.readouterr())
    assert main(args, twin=FakeAnthropicServer) == 0
    second = "".join(capsys.readouterr())
    assert "requests 14 " in first and "requests 0 " in second and "from context cache 14" in second


@pytest.mark.parametrize(("make", "setting"), [
    (lambda: ContextGenerator(InstantProvider(), cache=False, max_concurrency="4"), "max_concurrency"),  # type: ignore[arg-type]
    (lambda: ContextGenerator(InstantProvider(), cache=False, max_documents_in_flight=-1), "max_documents_in_flight"),
    (lambda: ContextGenerator(InstantProvider(), cache=False, budget_usd=float("nan")), "budget_usd"),
    (lambda: AnthropicProvider(api_key=TEST_KEY, timeout_s=0), "timeout_s"),
    (lambda: ContextGenerator(AnthropicProvider("claude-haiku-4-5", api_key=TEST_KEY), cache=False,
                              max_context_tokens=50_000), "max_context_tokens"),
])
def test_bad_settings_are_typed_errors_naming_the_setting(make: Any, setting: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make()
    assert caught.value.setting == setting and isinstance(caught.value, ValueError)


def test_bad_ids_and_chunk_lists_are_typed_errors_before_any_request() -> None:
    generator = ContextGenerator(InstantProvider(), cache=False)
    document = SourceDocument("d", "alpha beta gamma")
    chunks = split_into_chunks(document, ["alpha beta", "gamma"])
    with pytest.raises(InvalidInputError, match="non-empty str"):
        generator.contextualize(SourceDocument(7, "alpha"), [Chunk("c", "alpha", 0)])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="non-empty str"):
        generator.contextualize(SourceDocument(None, "alpha"), [Chunk("c", "alpha", 0)])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="non-empty str"):
        generator.contextualize(document, [Chunk(1, "alpha", 0)])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"pass \[chunk\]"):
        generator.contextualize(document, chunks[0])  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not one string"):
        split_into_chunks(document, "alpha")
    with pytest.raises(InvalidInputError, match="position"):
        generator.contextualize(document, [Chunk("c", "alpha", -1)])
    assert generator.provider.requests == 0  # type: ignore[attr-defined]


def test_negative_usage_from_a_server_is_an_invalid_response() -> None:
    from ctx_retrieval.providers.generic import MalformedAnswer

    usage = {"input_tokens": 5, "output_tokens": -3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = {"type": "message", "content": [], "usage": usage, "stop_reason": "end_turn"}
    with pytest.raises(MalformedAnswer, match="negative"):
        AnthropicProvider(api_key=TEST_KEY)._response(message)


@pytest.mark.parametrize("content", [b"", b"garbage that is not a database" * 10,
                                     b"SQLite format 3\x00" + b"\x00" * 40])
def test_a_damaged_cache_file_is_a_cache_error_naming_it(tmp_path: Path, content: bytes) -> None:
    from ctx_retrieval import CacheError, EmbeddingCache

    for opener in (ContextCache, EmbeddingCache):
        path = tmp_path / f"{opener.__name__}.sqlite"
        path.write_bytes(content)
        if not content:  # an empty file is a new database: fine
            opener(path).close()
            continue
        with pytest.raises(CacheError) as caught:
            opener(path)
        assert caught.value.path == str(path) and "move" in str(caught.value) and "cache=False" in str(caught.value)


def test_a_cache_file_from_something_else_is_a_cache_error(tmp_path: Path) -> None:
    import sqlite3

    from ctx_retrieval import CacheError

    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE contexts (id INTEGER, note TEXT)")
    with pytest.raises(CacheError, match="not a ctx-retrieval context cache"):
        ContextCache(path)


def test_a_read_only_cache_serves_hits_and_stores_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    from ctx_retrieval import _sqlite

    path = tmp_path / "c.sqlite"
    with ContextCache(path) as cache:
        cache.put("k", CachedContext("a context", "p", "m", "v", TokenUsage()))
    monkeypatch.setattr(_sqlite.os, "access", lambda *args: False)  # as a file the user may not write
    with ContextCache(path) as read_only:
        assert read_only.read_only and read_only.get("k") is not None
        read_only.put("k2", CachedContext("another", "p", "m", "v", TokenUsage()))
        read_only.put("k3", CachedContext("another", "p", "m", "v", TokenUsage()))
        assert read_only.get("k2") is None
    assert sum("read-only" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(("row", "message"), [
    ({"id": "a", "text": 5}, "'text' must be a string"),
    ({"id": "a", "text": None}, "'text' must be a string"),
    ({"id": 7, "text": "x"}, "'id' must be a non-empty string"),
    ({"id": "a", "text": "x", "chunks": 5}, "'chunks' must be a list"),
    ({"id": "a", "text": "x", "chunks": [{"id": "c"}]}, "chunk 0 needs a string 'text'"),
    ({"id": "a", "text": "x", "metadata": [1, 2]}, "'metadata' must be a JSON object"),
    ([1, 2], "expected a JSON object"),
])
def test_cli_bad_document_rows_are_one_error_line_naming_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], row: Any, message: str) -> None:
    from ctx_retrieval.cli import main

    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"id": "ok", "text": "fine text"}) + "\n\n" + json.dumps(row) + "\n")
    assert main(["contextualize", str(path), "--dry-run", "--contextualizer", "heuristic"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"{path}:3" in err and message in err and "Traceback" not in err


def test_cli_checks_arguments_and_outputs_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctx_retrieval.cli import main

    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "d", "text": "alpha\n\nbeta"}) + "\n")
    for bad in (["contextualize", str(docs), "--chunk-chars", "0"], ["query", "store", "q", "-k", "-1"],
                ["contextualize", str(docs), "--max-concurrency", "zero"]):
        with pytest.raises(SystemExit) as caught:
            main(bad)
        err = capsys.readouterr().err
        assert caught.value.code == 2 and ("must be at least 1" in err or "not a whole number" in err)
    assert main(["contextualize", str(docs), "--contextualizer", "heuristic",
                 "--out", str(tmp_path / "missing" / "out.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    cache = tmp_path / "never.sqlite"
    assert main(["contextualize", str(docs), "--dry-run", "--contextualizer", "heuristic", "--cache", str(cache)]) == 0
    assert "0 requests" in capsys.readouterr().out and not cache.exists()
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "d", "text": "alpha\n\nbeta", "chunks": ["alpha", "beta"]}) + "\n")
    queries = tmp_path / "queries.jsonl"
    queries.write_text("")
    assert main(["eval", "--documents", str(corpus), "--queries", str(queries), "--contextualizer", "none"]) == 2
    assert "no queries" in capsys.readouterr().err


def test_an_error_from_the_sync_path_is_not_chained_to_the_event_loop_check() -> None:
    from ctx_retrieval import OpenAICompatibleProvider, ProviderAuthenticationError

    assert OpenAICompatibleProvider.__module__ == "ctx_retrieval.providers.openai_compat"  # exported at the top
    document, chunks = make_document("s", paragraphs=2)
    with FakeAnthropicServer(api_key="sk-ant-the-right-key-000") as server:
        generator = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), cache=False)
        with pytest.raises(ProviderAuthenticationError) as caught:
            generator.contextualize(document, chunks)
    chain, error = [], caught.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert not any("no running event loop" in text for text in chain)


def test_a_closed_generator_stays_closed(tmp_path: Path) -> None:
    from ctx_retrieval import ConfigurationError, ContextGenerator
    from tests.helpers import make_document

    document, chunks = make_document("closed", paragraphs=2)
    with ContextGenerator(cache=tmp_path / "c.sqlite") as generator:
        assert generator.cache is not None
    generator.close()  # twice is fine
    with pytest.raises(ConfigurationError, match="closed"):
        generator.contextualize(document, chunks)
    with pytest.raises(ConfigurationError, match="closed"):
        _ = generator.cache  # it used to reopen the cache file silently


def test_the_servers_x_should_retry_header_overrides_the_status_as_in_the_sdks() -> None:
    from ctx_retrieval.providers.generic import decision_for_status

    assert decision_for_status(500, {}).action == "retry"
    assert decision_for_status(500, {"x-should-retry": "false"}).action == "fail_chunk"
    assert decision_for_status(400, {}).action == "fail_chunk"
    assert decision_for_status(400, {"x-should-retry": "true"}).action == "retry"
    assert decision_for_status(429, {"x-should-retry": "false"}).action == "fail_chunk"
    for fatal in (401, 402, 403, 404):  # a rejected key, billing, permission, an unknown model: never retried
        assert decision_for_status(fatal, {"x-should-retry": "true"}).action == "fail_run"


def test_each_retry_decision_is_logged_at_debug(make_generator: Any, fake_server: Any,
                                                caplog: pytest.LogCaptureFixture) -> None:
    from tests.helpers import make_document

    document, chunks = make_document("dbg", paragraphs=3)
    fake_server.script_faults(["server_error"])
    with caplog.at_level(logging.DEBUG, logger="ctx_retrieval.contextualize._run"):
        run = make_generator().contextualize(document, chunks)
    assert run.report.retries >= 1
    assert any("-> retry" in r.getMessage() and "HTTP 500" in r.getMessage() for r in caplog.records)


def test_provider_errors_keep_the_servers_type_and_message() -> None:
    from ctx_retrieval.pacing import server_message
    from ctx_retrieval.providers.generic import server_error_type

    class RefusedError(Exception):
        def __init__(self) -> None:
            super().__init__("refused")
            self.body = {"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long"}}

    assert server_error_type(RefusedError()) == "invalid_request_error"
    assert server_message(RefusedError()) == "prompt is too long"
    pytest.importorskip("openai")
    from ctx_retrieval.providers import OpenAICompatibleProvider

    error = OpenAICompatibleProvider("m", base_url="http://127.0.0.1:9/v1").run_error(
        ErrorDecision("fail_run", "bad_request", status_code=400), RefusedError())
    assert error.error_type == "invalid_request_error" and "prompt is too long" in str(error)  # type: ignore[attr-defined]


# Requests sent from threads of their own (the default) and from the event loop (request_threads=0).
SENDING = pytest.mark.parametrize("request_threads", [256, 0], ids=["threads", "loop"])


@SENDING
def test_a_server_dripping_a_byte_at_a_time_is_cut_at_the_requests_deadline(request_threads: int) -> None:
    import time

    from ctx_retrieval import AnthropicProvider, ContextGenerator, RetryPolicy

    document, chunks = make_document("drip", paragraphs=1)
    with FakeAnthropicServer() as server:
        server.script_faults(["drip"])  # the whole answer would take ~40 s; each byte resets a read timeout
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, timeout_s=0.5,
                                     request_threads=request_threads)
        run = ContextGenerator(provider, cache=False, retry=RetryPolicy(initial_delay_s=0.0)).contextualize(
            document, chunks)
        first, second = sorted(server.messages, key=lambda r: r.started)[:2]
        deadline = time.monotonic() + 30  # a liveness bound: the drip would go on for ~40 s
        while server.answering and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.answering  # the reader hung up: no thread of ours is left reading the drip
    assert provider.request_threads == request_threads
    assert all(r.context for r in run) and run.report.errors_by_type == {"timeout": 1}
    assert second.started - first.started < 5  # given up at the deadline, not when the drip ended
    assert provider.deadline_s() == 1.0  # a server that ran past it gets twice the time next


@SENDING
@pytest.mark.parametrize("fault", ["endless", "gzip_bomb"])
def test_an_endless_body_or_a_gzip_bomb_is_cut_off_by_size(fault: str, request_threads: int) -> None:
    from ctx_retrieval import AnthropicProvider, ContextGenerator, RetryPolicy

    document, chunks = make_document(fault, paragraphs=1)
    with FakeAnthropicServer() as server:
        server.script_faults([fault])
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, timeout_s=30.0,
                                     request_threads=request_threads)
        run = ContextGenerator(provider, cache=False, retry=RetryPolicy(initial_delay_s=0.0)).contextualize(
            document, chunks)
    assert all(r.context for r in run) and run.report.errors_by_type == {"invalid_response": 1}


def test_requests_go_out_from_threads_unless_told_otherwise() -> None:
    # The SDK says which of its clients sent a request (x-stainless-async): the synchronous one in the request
    # threads by default, the async one on the event loop with request_threads=0 or with a client passed in.
    import pickle

    import anthropic

    from ctx_retrieval import AnthropicProvider, ConfigurationError, ContextGenerator

    document, chunks = make_document("sender", paragraphs=2)
    with FakeAnthropicServer() as server:
        sent_by = {}
        for name, provider in (
                ("threads", AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)),
                ("loop", AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, request_threads=0)),
                ("client", AnthropicProvider(client=anthropic.AsyncAnthropic(
                    api_key=TEST_KEY, base_url=server.base_url, max_retries=0)))):
            server.reset()
            run = ContextGenerator(provider, cache=False).contextualize(document, chunks)
            assert all(r.context for r in run)
            sent_by[name] = {r.headers.get("x-stainless-async") for r in server.messages}
            if name == "threads":
                assert provider.request_threads and provider._pool is None  # closed with the run
                assert pickle.loads(pickle.dumps(provider)).request_threads  # no thread or client travels
    assert sent_by == {"threads": {"false"}, "loop": {"async:asyncio"}, "client": {"async:asyncio"}}
    with pytest.raises(ConfigurationError, match="request_threads") as info:
        AnthropicProvider(api_key=TEST_KEY, request_threads=-1)
    assert info.value.setting == "request_threads"
