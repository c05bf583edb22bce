"""The generator against the fake Anthropic API: request shape, usage, order, caching, resume, policies."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import (
    AnthropicProvider,
    BudgetExceededError,
    Chunk,
    ChunkNotInDocumentError,
    ConfigurationError,
    ContextCache,
    ContextGenerationError,
    ContextGenerator,
    DuplicateChunkIdError,
    InvalidTextError,
    ProviderAuthenticationError,
    SourceDocument,
    UnknownModelError,
    WindowConfig,
    split_into_chunks,
)
from ctx_retrieval.testing import FakeAnthropicServer
from ctx_retrieval.testing.clock import SharedClock
from tests.helpers import TEST_KEY, make_document, peak_concurrency


def corpus(n_docs: int, paragraphs: int = 24) -> list[tuple[SourceDocument, list[Chunk]]]:
    return [make_document(f"doc-{i}", paragraphs=paragraphs) for i in range(n_docs)]


def test_request_shape_document_block_first_and_cached(fake_server: Any, make_generator: Any) -> None:
    document, chunks = make_document("shape")
    make_generator().contextualize(document, chunks[:3])
    request = fake_server.successful()[0]
    body = request.body
    assert request.path == "/v1/messages"
    assert request.api_key_present and "anthropic-version" in request.headers
    assert body["model"] == "claude-haiku-5-5"
    assert body["max_tokens"] == 150
    (message,) = body["messages"]
    assert message["role"] == "user"
    first, last = message["content"][0], message["content"][-1]
    assert len(message["content"]) == 2
    assert first["cache_control"] == {"type": "ephemeral"}
    assert first["text"] == f"Here is the original source document:\n<document>\n{document.text}\n</document>"
    assert "cache_control" not in last
    assert f"<chunk>\n{chunks[0].text}\n</chunk>" in last["text"]
    assert last["text"].endswith("Answer only with the succinct context and nothing else.")


def test_one_hour_ttl_is_sent(fake_server: Any, make_generator: Any) -> None:
    document, chunks = make_document("ttl")
    make_generator(provider_kwargs={"cache_ttl": "1h"}).contextualize(document, chunks[:2])
    first_block = fake_server.successful()[0].body["messages"][0]["content"][0]
    assert first_block["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_usage_is_parsed_and_summed(fake_server: Any, make_generator: Any) -> None:
    documents = corpus(3)
    run = make_generator().contextualize_many(documents)
    totals = fake_server.totals()
    usage = run.report.usage
    assert usage.input_tokens == totals["input_tokens"] > 0
    assert usage.output_tokens == totals["output_tokens"] > 0
    assert usage.cache_creation_input_tokens == totals["cache_creation_input_tokens"] > 0
    assert usage.cache_read_input_tokens == totals["cache_read_input_tokens"] > 0
    per_chunk = sum((r.usage for r in run), start=type(usage)())
    assert per_chunk == usage
    assert run.report.requests == totals["requests"] == sum(len(c) for _, c in documents)
    assert run.report.cost_usd is not None and run.report.cost_usd > 0


def test_results_keep_input_order_under_random_latency(tmp_path: Path, make_generator: Any) -> None:
    rng = random.Random(3)

    def slow_responder(body: dict[str, Any]) -> str:
        import time

        time.sleep(rng.uniform(0, 0.03))
        text = body["messages"][0]["content"][-1]["text"]
        return "context for " + text.split("<chunk>\n", 1)[1].split("\n</chunk>", 1)[0][:40]

    with FakeAnthropicServer(responder=slow_responder) as server:
        documents = corpus(4, paragraphs=10)
        run = make_generator(server=server, max_concurrency=8).contextualize_many(documents)
    expected = [(d.id, c.id) for d, chunks in documents for c in chunks]
    assert [(r.document_id, r.chunk_id) for r in run] == expected
    for (_, chunks), offset in zip(documents, range(0, len(run), 10), strict=True):
        for i, chunk in enumerate(chunks):
            assert run[offset + i].context == "context for " + " ".join(chunk.text[:40].split())


def test_exactly_one_cache_write_per_document_at_concurrency_16(make_generator: Any) -> None:
    # With latency, requests that race the first one would each write the cache; the warm-up prevents it.
    with FakeAnthropicServer(latency_s=0.05) as server:
        documents = corpus(6)
        run = make_generator(server=server, max_concurrency=16).contextualize_many(documents)
        totals = server.totals()
    assert run.report.failed == 0
    writes = [r for r in server.successful() if r.usage and r.usage["cache_creation_input_tokens"]]
    assert sorted(r.body["messages"][0]["content"][0]["text"] for r in writes) == sorted(
        f"Here is the original source document:\n<document>\n{d.text}\n</document>" for d, _ in documents)
    assert totals["cache_writes"] == totals["cache_entries_written"] == len(documents)
    assert totals["max_writes_per_entry"] == 1
    reads = sum(1 for r in server.successful() if r.usage and r.usage["cache_read_input_tokens"])
    assert reads == totals["requests"] - len(documents)


def test_racing_requests_without_warm_up_would_write_more_than_once() -> None:
    """The control for the test above: the fake really bills concurrent first requests as writes."""
    import concurrent.futures

    import anthropic

    document, chunks = make_document("race")
    with FakeAnthropicServer(latency_s=0.05) as server:
        client = anthropic.Anthropic(api_key=TEST_KEY, base_url=server.base_url, max_retries=0)
        block = {"type": "text", "text": document.text, "cache_control": {"type": "ephemeral"}}

        def send(chunk: Chunk) -> None:
            client.messages.create(model="claude-haiku-5-5", max_tokens=50, messages=[
                {"role": "user", "content": [block, {"type": "text", "text": chunk.text}]}])

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(send, chunks[:8]))
        totals = server.totals()
        assert totals["cache_writes"] > 1 and totals["max_writes_per_entry"] == totals["cache_writes"]
        assert totals["cache_entries_written"] == 1


def test_second_run_makes_zero_requests(fake_server: Any, make_generator: Any) -> None:
    documents = corpus(2)
    first = make_generator().contextualize_many(documents)
    before = len(fake_server.requests)
    second = make_generator().contextualize_many(documents)
    assert len(fake_server.requests) == before
    assert second.report.requests == 0 and second.report.cached == len(second)
    assert [r.context for r in second] == [r.context for r in first]
    assert all(r.cached and r.usage.prompt_tokens == 0 for r in second)


@pytest.mark.parametrize(
    "change",
    ["model", "prompt_version", "window", "document_text", "chunk_text", "endpoint", "max_context_tokens"],
)
def test_cache_key_changes_with_each_part(change: str, fake_server: Any, make_generator: Any) -> None:
    from dataclasses import replace

    from ctx_retrieval import DEFAULT_PROMPT

    document, chunks = make_document("key")
    chunks = chunks[:3]
    make_generator().contextualize(document, chunks)
    requests_before = len(fake_server.messages)
    kwargs: dict[str, Any] = {}
    if change == "model":
        kwargs["provider_kwargs"] = {"model": "claude-haiku-4-5"}
    elif change == "prompt_version":
        kwargs["prompt"] = replace(DEFAULT_PROMPT, version="ctx-v1-test")
    elif change == "window":
        kwargs["window"] = WindowConfig(num_start_chunks=3)
    elif change == "document_text":
        document = SourceDocument(document.id, document.text + "\nAppendix.")
        chunks = split_into_chunks(document, [c.text for c in chunks])
    elif change == "chunk_text":
        chunks = [chunks[0], chunks[1], Chunk(chunks[2].id, chunks[2].text[:-5], 2)]
    elif change == "max_context_tokens":
        kwargs["max_context_tokens"] = 60
    expected = 1 if change == "chunk_text" else 3  # only the changed chunk is requested again
    if change == "endpoint":
        with FakeAnthropicServer() as other:
            run = make_generator(server=other).contextualize(document, chunks)
            assert len(other.messages) == expected
    else:
        run = make_generator(**kwargs).contextualize(document, chunks)
        assert len(fake_server.messages) - requests_before == expected
    assert run.report.generated == expected and run.report.cached == 3 - expected


def test_unchanged_key_parts_do_not_invalidate(fake_server: Any, make_generator: Any) -> None:
    document, chunks = make_document("stable")
    make_generator().contextualize(document, chunks[:3])
    before = len(fake_server.requests)
    # Metadata, chunk ids and concurrency are not part of the key.
    relabelled = SourceDocument(document.id, document.text, {"source": "elsewhere"})
    renamed = [Chunk(f"new-{c.id}", c.text, c.position) for c in chunks[:3]]
    run = make_generator(max_concurrency=2).contextualize(relabelled, renamed)
    assert len(fake_server.requests) == before and run.report.cached == 3


def test_resume_after_a_crash_requests_only_missing_chunks(tmp_path: Path, make_generator: Any) -> None:
    documents = corpus(4)
    total = sum(len(c) for _, c in documents)
    with FakeAnthropicServer(latency_s=0.01) as server:
        generator = make_generator(server=server, max_concurrency=4)

        async def crash_midway() -> None:
            task = asyncio.ensure_future(generator.acontextualize_many(documents))
            deadline = time.monotonic() + 60
            while len(server.successful()) < total // 3:
                assert time.monotonic() < deadline, "the run made no progress"
                await asyncio.sleep(0.005)
            task.cancel()  # the process "dies": nothing after this point is recorded by the run
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(crash_midway())
        paid_before = len(server.successful())
        stored = len(ContextCache(tmp_path / "contexts.sqlite"))
        assert 0 < stored < total
        assert stored >= paid_before - 4  # at most the requests in flight were lost
        resumed = make_generator(server=server, max_concurrency=4).contextualize_many(documents)
        assert resumed.report.requests == total - stored
        assert resumed.report.cached == stored and resumed.report.generated == total - stored
        assert len(server.successful()) <= total + 4
    assert all(r.context for r in resumed)


def test_on_error_raise_stops_and_retry_failed_finishes(fake_server: Any, make_generator: Any) -> None:
    from ctx_retrieval import RetryPolicy

    documents = corpus(3, paragraphs=8)
    bad_chunk = documents[0][1][2]
    fake_server.fail_chunk(bad_chunk.text, "server_error", times=2)
    generator = make_generator(max_concurrency=1, max_documents_in_flight=1,
                               retry=RetryPolicy(max_attempts=2, initial_delay_s=0.0))
    with pytest.raises(ContextGenerationError) as info:
        generator.contextualize_many(documents)
    report = info.value.report
    assert report.failed == 1 and [f.chunk.id for f in report.failures] == [bad_chunk.id]
    assert report.failures[0].error_kind == "server_error"
    assert report.generated >= 2 and report.generated + 1 + report.not_attempted == report.chunks
    assert report.not_attempted > 0
    assert "retry_failed" in str(info.value)
    before = len(fake_server.requests)
    run = generator.retry_failed(report)
    # Only the chunks without a context are requested; the documents' other chunks come from the cache.
    assert len(fake_server.requests) - before == report.chunks - report.generated
    assert all(r.context for r in run) and run.report.cached == report.generated


def test_on_error_skip_records_failures_and_invents_nothing(fake_server: Any, make_generator: Any) -> None:
    from ctx_retrieval import RetryPolicy

    documents = corpus(2, paragraphs=6)
    fake_server.fail_chunk(documents[1][1][3].text, "server_error")
    run = make_generator(on_error="skip",
                         retry=RetryPolicy(max_attempts=2, initial_delay_s=0.0)).contextualize_many(documents)
    assert run.report.failed == 1 and run.report.generated == len(run) - 1
    (bad,) = [r for r in run if r.status == "failed"]
    assert bad.chunk_id == documents[1][1][3].id
    assert bad.context is None and bad.error and bad.error_kind == "server_error"
    assert run.report.failures[0].chunk.id == bad.chunk_id
    line = next(line for line in run.report.format().splitlines() if "no context:" in line)
    assert line.count("server_error") == 1 and "InternalServerError (HTTP 500)" in line  # the kind once, then why


@pytest.mark.parametrize("fault", ["rate_limit", "overloaded", "server_error", "drop", "truncated"])
def test_transient_faults_are_retried(fault: str, fake_server: Any, make_generator: Any) -> None:
    document, chunks = make_document("faults", paragraphs=4)
    fake_server.script_faults([fault, fault])
    run = make_generator(max_concurrency=1).contextualize(document, chunks)
    assert all(r.context for r in run)
    assert run.report.retries == 2
    kinds = {"rate_limit": "rate_limited", "overloaded": "overloaded", "server_error": "server_error",
             "drop": "connection", "truncated": None}
    if kinds[fault]:
        assert run.report.errors_by_type == {kinds[fault]: 2}
    assert run.report.requests == len(chunks) + 2


def test_timeout_is_retried() -> None:
    from ctx_retrieval import RetryPolicy

    document, chunks = make_document("slow", paragraphs=2)
    with FakeAnthropicServer(slow_s=2.0) as server:
        server.script_faults(["slow"])
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, timeout_s=0.3)
        run = ContextGenerator(provider, cache=False, retry=RetryPolicy(initial_delay_s=0.0)).contextualize(
            document, chunks)
    assert all(r.context for r in run)
    assert run.report.errors_by_type == {"timeout": 1}


def test_retry_after_is_honoured_run_wide(make_generator: Any) -> None:
    document, chunks = make_document("pause", paragraphs=3)
    clock = SharedClock()  # the run's and the server's: a request's start is when the run let it go
    with FakeAnthropicServer(retry_after_s=0.4, clock=clock) as server:
        server.script_faults(["rate_limit"])
        make_generator(server=server, max_concurrency=4, clock=clock).contextualize(document, chunks)
        records = sorted(server.messages, key=lambda r: r.started)
    limited = records[0]
    assert limited.status == 429 and len(records) == len(chunks) + 1
    assert all(r.started - limited.started >= 0.4 - 1e-9 for r in records[1:])


def test_sustained_rate_limit_slows_the_run_but_fails_nothing(make_generator: Any) -> None:
    documents = corpus(2, paragraphs=5)
    clock = SharedClock()
    with FakeAnthropicServer(retry_after_s=0.1, clock=clock) as server:
        server.fail_all_for(0.8, "rate_limit")
        run = make_generator(server=server, clock=clock).contextualize_many(documents)
    assert run.report.failed == 0 and all(r.context for r in run)
    assert run.report.rate_limited >= 3
    assert clock.now - 1000.0 >= 0.8  # the run waited the outage out


def test_outage_longer_than_the_retry_budget_fails_cleanly(make_generator: Any) -> None:
    from ctx_retrieval import RetryPolicy

    documents = corpus(2, paragraphs=4)
    with FakeAnthropicServer() as server:
        server.fail_all_for(30, "overloaded")
        generator = make_generator(server=server, on_error="skip",
                                   retry=RetryPolicy(max_attempts=3, initial_delay_s=0.0))
        run = generator.contextualize_many(documents)
        assert run.report.failed == len(run) and all(r.context is None for r in run)
        assert {f.chunk.id for f in run.report.failures} == {c.id for _, cs in documents for c in cs}
        server.reset()
        retried = generator.retry_failed(run.report)
    assert retried.report.generated == len(run) and all(r.context for r in retried)


def test_missing_and_malformed_keys_fail_before_any_request(fake_server: Any) -> None:
    document, chunks = make_document("keys", paragraphs=2)
    for key in (None, "", " sk-ant-padded-key-000000 ", "sk-ant-has space-0000000", "sk-ant-x"):
        provider = AnthropicProvider(api_key=key, base_url=fake_server.base_url)
        with pytest.raises(ProviderAuthenticationError) as info:
            ContextGenerator(provider, cache=False).contextualize(document, chunks)
        if key:
            assert key.strip() not in str(info.value)
    assert fake_server.requests == []


def test_rejected_key_stops_the_run_with_one_request(make_generator: Any) -> None:
    document, chunks = make_document("rejected", paragraphs=6)
    with FakeAnthropicServer(api_key="sk-ant-the-right-key-000") as server:
        with pytest.raises(ProviderAuthenticationError) as info:
            make_generator(server=server).contextualize(document, chunks)
        assert len(server.requests) == 1  # the document's token count (or its first message) found it
    assert TEST_KEY not in str(info.value)
    report = info.value.report
    assert report is not None and report.failed + report.not_attempted == len(chunks) and report.generated == 0


def test_unknown_model_stops_the_run(make_generator: Any) -> None:
    document, chunks = make_document("model", paragraphs=4)
    with FakeAnthropicServer(known_models=["claude-haiku-5-5"]) as server:
        with pytest.raises(UnknownModelError, match="claude-9-imaginary"):
            make_generator(server=server, provider_kwargs={"model": "claude-9-imaginary"}).contextualize(
                document, chunks)
        # a 404 to the free token count may be a gateway's: the first request stops the run
        assert [r.path for r in server.requests] == ["/v1/messages/count_tokens", "/v1/messages"]


def test_budget_cap_stops_cleanly_and_resumes(fake_server: Any, make_generator: Any) -> None:
    documents = corpus(3)
    full = make_generator(cache=False).estimate(documents).cost_usd
    assert full is not None
    generator = make_generator(budget_usd=full / 3)
    with pytest.raises(BudgetExceededError) as info:
        generator.contextualize_many(documents)
    error = info.value
    assert error.spent_usd <= error.budget_usd
    assert error.report.generated > 0 and error.report.not_attempted > 0
    assert error.report.generated + error.report.not_attempted == error.report.chunks
    before = len(fake_server.requests)
    run = generator.with_options(budget_usd=None).retry_failed(error.report)
    assert len(fake_server.requests) - before == error.report.not_attempted
    assert all(r.context for r in run)


def test_settings_are_frozen_and_with_options_changes_a_copy_that_shares_the_cache(fake_server: Any,
                                                                                 make_generator: Any) -> None:
    generator = make_generator(max_concurrency=4, on_error="skip")
    with pytest.raises(AttributeError):
        generator.settings.max_concurrency = 8  # type: ignore[misc]
    documents = corpus(2)
    generator.contextualize_many(documents[:1])
    other = generator.with_options(max_concurrency=2, max_context_tokens=60)
    assert (generator.settings.max_concurrency, other.settings.max_concurrency) == (4, 2)
    assert other.settings.on_error == "skip" and generator.settings.max_context_tokens == 100
    assert other.identity != generator.identity  # the context length is part of what a context is
    same = generator.with_options(on_error="raise")
    other.close()  # the copy's close leaves the shared cache open
    before = len(fake_server.requests)
    run = same.contextualize_many(documents)  # the first document is a hit in the one cache
    assert len(fake_server.requests) - before == len(documents[1][1])  # the second document only
    assert run.report.cached == len(documents[0][1])
    with pytest.raises(ConfigurationError, match="with_options takes the generator's settings") as refused:
        generator.with_options(cache=False)
    assert refused.value.setting == "cache"
    with pytest.raises(ConfigurationError, match="max_concurrency must be an int >= 1"):
        generator.with_options(max_concurrency=0)
    with pytest.raises(ConfigurationError, match="retry takes a RetryPolicy"):
        generator.with_options(retry=None)


def test_the_progress_bar_counts_only_chunks_done(fake_server: Any, make_generator: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from ctx_retrieval.contextualize import _run as run_state

    class Bar:
        def __init__(self) -> None:
            self.n = 0

        def update(self, n: int = 1) -> None:
            self.n += n

        def close(self) -> None: ...

    bars: list[Bar] = []
    monkeypatch.setattr(run_state, "make_bar", lambda total, desc, enabled=True: bars.append(Bar()) or bars[-1])
    documents = corpus(3)
    full = make_generator(cache=False).estimate(documents).cost_usd
    assert full is not None
    with pytest.raises(BudgetExceededError) as info:
        make_generator(budget_usd=full / 3).contextualize_many(documents, progress=True)
    report = info.value.report
    assert report.not_attempted > 0 and bars[-1].n == report.chunks - report.not_attempted


def test_estimate_is_close_to_the_real_run(fake_server: Any, make_generator: Any) -> None:
    documents = corpus(3)
    generator = make_generator()
    estimate = generator.estimate(documents)
    run = generator.contextualize_many(documents)
    assert estimate.requests == run.report.requests
    assert estimate.cost_usd == pytest.approx(run.report.cost_usd, rel=0.3)
    assert generator.estimate(documents).requests == 0  # now all cached


def test_document_below_minimum_cacheable_length_warns_once(
    fake_server: Any, make_generator: Any, caplog: pytest.LogCaptureFixture
) -> None:
    small = [make_document(f"small-{i}", paragraphs=3) for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="ctx_retrieval"):
        generator = make_generator()
        run = generator.contextualize_many(small)
        generator.contextualize_many([make_document("small-x", paragraphs=3)])
    assert sorted(run.report.uncacheable_documents) == ["small-0", "small-1", "small-2"]
    warnings = [r for r in caplog.records if "minimum cacheable length" in r.getMessage()]
    assert len(warnings) == 1
    assert fake_server.totals()["cache_writes"] == 0


def test_empty_chunks_get_no_request_and_no_context(fake_server: Any, make_generator: Any) -> None:
    document, chunks = make_document("empty", paragraphs=3)
    with_empty = [chunks[0], Chunk("blank", "   \n", 1), chunks[1], Chunk("nothing", "", 2)]
    run = make_generator().contextualize(document, with_empty)
    assert [r.status for r in run] == ["generated", "empty", "generated", "empty"]
    assert run[1].context is None and run[3].context is None
    assert len(fake_server.messages) == 2 and run.report.empty == 2


def test_duplicate_chunk_texts_share_one_request(fake_server: Any, make_generator: Any) -> None:
    document, chunks = make_document("dups", paragraphs=3)
    twice = [chunks[0], chunks[1], Chunk("again", chunks[1].text, 2)]
    run = make_generator().contextualize(document, twice)
    assert len(fake_server.messages) == 2
    assert run[2].context == run[1].context and run[2].status == "cached"


def test_bad_input_raises_typed_errors_before_any_request(fake_server: Any, make_generator: Any) -> None:
    document, chunks = make_document("bad", paragraphs=3)
    generator = make_generator()
    with pytest.raises(ChunkNotInDocumentError, match="check_chunks_in_document"):
        generator.contextualize(document, [chunks[0], Chunk("x", "text from another document", 1)])
    with pytest.raises(DuplicateChunkIdError):
        generator.contextualize(document, [chunks[0], Chunk(chunks[0].id, chunks[1].text, 1)])
    with pytest.raises(InvalidTextError, match="errors='replace'"):
        generator.contextualize(SourceDocument("s", "bad \udcff text"), [Chunk("c", "bad", 0)])
    with pytest.raises(InvalidTextError, match="NUL"):
        generator.contextualize(SourceDocument("n", "bin\x00ary"), [Chunk("c", "bin", 0)])
    with pytest.raises(ChunkNotInDocumentError, match="empty"):
        generator.contextualize(SourceDocument("e", ""), [Chunk("c", "something", 0)])
    assert fake_server.requests == []


def test_windowed_document_shares_one_cached_prefix(fake_server: Any, make_generator: Any) -> None:
    # Chunks of ~1,400 tokens (claude-haiku-5-5's tokenizer): the first two (the stable prefix) pass its 512-token
    # minimum; five chunks (two first, two previous, the target) fit the 8,000-token limit, the whole does not.
    paragraphs = [f"Section {i}. " + " ".join(f"word{i}x{j}" for j in range(700)) for i in range(8)]
    text = "\n\n".join(paragraphs)
    document = SourceDocument("big", text)
    chunks = split_into_chunks(document, paragraphs)
    run = make_generator(window=WindowConfig(max_document_tokens=8000)).contextualize(document, chunks)
    assert all(r.windowed and r.context for r in run)
    prefixes = {r.body["messages"][0]["content"][0]["text"] for r in fake_server.successful()}
    assert len(prefixes) == 1
    (prefix,) = prefixes
    assert paragraphs[0] in prefix and paragraphs[1] in prefix and paragraphs[2] not in prefix
    assert fake_server.totals()["cache_writes"] == 1
    last = fake_server.successful()[-1].body["messages"][0]["content"]
    assert len(last) == 3 and "[...]" in last[1]["text"]


def test_concurrency_never_exceeds_the_limit(make_generator: Any) -> None:
    with FakeAnthropicServer(latency_s=0.02) as server:
        make_generator(server=server, max_concurrency=3).contextualize_many(corpus(3, paragraphs=8))
        peak = peak_concurrency(server.successful())
    assert 2 <= peak <= 3


def test_sync_call_inside_a_running_event_loop(fake_server: Any, make_generator: Any) -> None:
    document, chunks = make_document("loop", paragraphs=2)
    generator = make_generator()

    async def inside() -> Any:
        return generator.contextualize(document, chunks)  # as from a notebook cell

    run = asyncio.run(inside())
    assert all(r.context for r in run)


def test_async_and_sync_give_the_same_results(fake_server: Any, make_generator: Any, tmp_path: Path) -> None:
    documents = corpus(2, paragraphs=5)
    sync = make_generator(cache=tmp_path / "a.sqlite").contextualize_many(documents)
    asynchronous = asyncio.run(make_generator(cache=tmp_path / "b.sqlite").acontextualize_many(documents))
    assert [(r.chunk_id, r.context) for r in sync] == [(r.chunk_id, r.context) for r in asynchronous]


def test_progress_bar_counts_every_chunk(
    fake_server: Any, make_generator: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = corpus(2, paragraphs=4)
    make_generator().contextualize_many(documents[:1])  # one document already cached
    with make_generator(progress=True) as generator:
        generator.contextualize_many(documents)
    err = capsys.readouterr().err
    assert "contextualizing" in err and "8/8" in err


def _near_empty_request_bucket(make_generator: Any, *, headers: bool) -> tuple[Any, list[Any]]:
    documents = corpus(2, paragraphs=6)
    clock = SharedClock()  # the bucket refills only while the run waits, however loaded the machine
    with FakeAnthropicServer(rate_limit_rpm=300, rate_limit_itpm=None, rate_limit_headers=headers,
                             clock=clock) as server:
        generator = make_generator(server=server, max_concurrency=4, clock=clock)
        server.limits.set_left("requests", 2)  # a nearly empty bucket, 5/s refill
        run = generator.contextualize_many(documents)
        return run, [r for r in server.requests if r.status == 429]


def test_server_side_rate_limit_is_survived_with_retry_after(make_generator: Any) -> None:
    # Without rate-limit headers (a proxy that strips them) only the 429s' retry-after paces the run.
    run, limited = _near_empty_request_bucket(make_generator, headers=False)
    assert run.report.failed == 0 and all(r.context for r in run)
    assert limited and run.report.rate_limited == len(limited)


def test_rate_limit_headers_pace_the_run_without_429s(make_generator: Any) -> None:
    # The same limit, with the anthropic-ratelimit-* headers the real API sends: requests wait on our side.
    run, limited = _near_empty_request_bucket(make_generator, headers=True)
    assert run.report.failed == 0 and all(r.context for r in run)
    assert len(limited) <= 1 and run.report.rate_limited == len(limited)
    _, without_headers = _near_empty_request_bucket(make_generator, headers=False)
    assert len(without_headers) > 5 * max(1, len(limited))


def test_an_answers_rate_limit_reset_counts_from_when_the_request_was_sent() -> None:
    # The twin takes a request's rate-limit state when it admits it and answers 0.3 s later. Its request bucket
    # (1,500 per 6 s: 250/s) is full again 4 ms after one request, so against the answer's arrival that reset lies
    # in the past and the refill rate is lost; against the send time it is the 4 ms the server meant.
    from ctx_retrieval import AnthropicProvider
    from ctx_retrieval.types import ContextRequest

    request = ContextRequest(document_id="d", chunk_id="c", document_prefix="<document>text</document>",
                             document_rest="", chunk_block="<chunk>x</chunk>", max_tokens=50)

    async def ask(url: str) -> Any:
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=url)
        try:
            return await provider.agenerate(request)
        finally:
            await provider.aclose()

    with FakeAnthropicServer(latency_s=0.3, rate_limit_rpm=1500, rate_window_s=6.0) as server:
        response = asyncio.run(ask(server.base_url))
    limit = response.limits.requests if response.limits is not None else None
    assert limit is not None and (limit.limit, limit.remaining) == (1500, 1499)
    assert limit.full_in_s is not None and limit.full_in_s >= 0.003


def _paced_and_bounced(make_generator: Any, *, empty_bucket: str | None = None,
                       **limits: Any) -> tuple[Any, int, int]:
    """The same run with and without the rate-limit headers: (the paced run, its 429s, the header-less 429s)."""
    def run(headers: bool) -> tuple[Any, int]:
        clock = SharedClock()  # the buckets refill only while the run waits or the server answers
        with FakeAnthropicServer(rate_limit_headers=headers, clock=clock, **limits) as server:
            generator = make_generator(server=server, max_concurrency=8, cache=False, clock=clock)
            if empty_bucket:
                server.limits.set_left(empty_bucket, 600)
            result = generator.contextualize_many(corpus(3, paragraphs=6))
            return result, server.totals()["rate_limited"]

    paced, limited = run(headers=True)
    _, bounced = run(headers=False)
    assert paced.report.failed == 0 and all(r.context for r in paced)
    return paced, limited, bounced


def test_rate_limit_headers_pace_an_input_token_limit(make_generator: Any) -> None:
    # A token bucket of 4,000 uncached input tokens per second against 18 requests of ~880 tokens: with the
    # headers (tokens remaining rounded to the thousand, as the API does) the run waits on our side; without
    # them it bounces off the limit.
    _, limited, bounced = _paced_and_bounced(make_generator, rate_limit_itpm=4000, rate_window_s=1.0)
    assert limited <= 1 and bounced > 10 * max(1, limited)


def test_rate_limit_headers_pace_an_output_token_limit(make_generator: Any) -> None:
    # The server reserves each request's max_tokens (150) from a nearly empty output-token bucket (600 of 30,000
    # a minute, 500/s refill) when the request starts and refunds the unused part at its end. With the
    # anthropic-ratelimit-output-tokens-* headers the run waits on our side; without them it bounces off (0 and
    # 19-23 measured: the server's time is the run's, so a loaded machine refills nothing meanwhile).
    _, limited, bounced = _paced_and_bounced(make_generator, empty_bucket="output-tokens", rate_limit_otpm=30_000,
                                             latency_s=0.02)
    assert limited <= 1 and bounced > 5 * max(1, limited)


def test_iter_contextualize_streams_in_waves_with_the_same_results() -> None:
    from ctx_retrieval.testing.faults import synthetic_corpus
    from ctx_retrieval.testing.instant import InstantProvider

    items = synthetic_corpus(130, per_document=10)  # 13 documents
    read: list[str] = []

    def lazily() -> Any:
        for item in items:
            read.append(item[0].id)
            yield item

    generator = ContextGenerator(InstantProvider(), cache=False)
    waves = generator.iter_contextualize(lazily(), documents_per_wave=5)
    first = next(waves)
    assert len(read) == 5 and len(first) == 50  # the stream is read one wave ahead at most
    rest = list(waves)
    assert [len(w) for w in rest] == [50, 30]
    streamed = [(r.chunk_id, r.context) for w in (first, *rest) for r in w]
    whole = ContextGenerator(InstantProvider(), cache=False).contextualize_many(items)
    assert streamed == [(r.chunk_id, r.context) for r in whole]

    async def collect() -> list[int]:
        return [len(w) async for w in generator.aiter_contextualize(items, documents_per_wave=6)]

    assert asyncio.run(collect()) == [60, 60, 10]


def test_a_finished_wave_is_freed_at_once_not_by_the_garbage_collector() -> None:
    # The run cache held its engine, which holds it: every wave's plans and results stayed alive in that cycle until
    # the collector's next pass (engine_overhead's peak: 15.1 MB instead of 6.0 over 10,000 chunks).
    import gc

    from ctx_retrieval.testing.faults import synthetic_corpus
    from ctx_retrieval.testing.instant import InstantProvider

    generator = ContextGenerator(InstantProvider(), cache=False)
    waves = generator.iter_contextualize(synthetic_corpus(120, per_document=10), documents_per_wave=4)
    next(waves)
    gc.collect()
    gc.disable()
    try:
        assert len(next(waves)) == 40
        assert gc.collect() == 0  # nothing of that wave was left in a reference cycle
    finally:
        gc.enable()


def test_a_stop_while_the_run_is_planning_stops_it_before_any_request(fake_server: Any, make_generator: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from ctx_retrieval import ContextGenerationError
    from ctx_retrieval.contextualize._planning import Planner

    generator = make_generator(cache=False)
    plan_run = Planner.plan_run

    async def plan_then_ctrl_c(planner: Planner, items: Any, limiter: Any) -> Any:  # Ctrl-C lands while planning
        planned = await plan_run(planner, items, limiter)
        generator.stop()
        return planned

    monkeypatch.setattr(Planner, "plan_run", plan_then_ctrl_c)
    document, chunks = make_document("early-stop", paragraphs=6)
    with pytest.raises(ContextGenerationError) as info:
        generator.contextualize(document, chunks)
    assert info.value.report.not_attempted == len(chunks) and not fake_server.successful()
    monkeypatch.setattr(Planner, "plan_run", plan_run)
    assert all(r.context for r in generator.contextualize(document, chunks))  # the stop was for that run only


def test_documents_prompt_caching_cannot_help_are_counted_in_one_warning(
        make_generator: Any, caplog: pytest.LogCaptureFixture) -> None:
    items = [make_document(f"note-{n}", paragraphs=2, words=8) for n in range(3)]  # far below 512 tokens each
    with FakeAnthropicServer() as server, caplog.at_level("WARNING"):
        run = make_generator(server=server).contextualize_many(items)
    said = [r.getMessage() for r in caplog.records if "prompt caching did nothing" in r.getMessage()]
    assert len(said) == 1 and "for 3 of 3 documents (e.g. note-0)" in said[0], said
    assert run.report.uncacheable_documents == ["note-0", "note-1", "note-2"]  # in input order
