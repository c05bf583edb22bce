"""Batch mode against the fake Message Batches API: half price, warm-ups, retries, and resume without paying twice."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import MODELS, AnthropicProvider, ConfigurationError, ContextCache, ContextGenerator
from ctx_retrieval.models import cost_usd
from ctx_retrieval.testing import FakeAnthropicServer
from tests.helpers import TEST_KEY, make_document


def generator(server: FakeAnthropicServer, tmp_path: Path, **kwargs: Any) -> ContextGenerator:
    provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, cache_ttl="1h")
    return ContextGenerator(provider, cache=tmp_path / "c.sqlite", **kwargs)


@pytest.mark.parametrize("warm_up", ["batch", "ordinary"])
def test_batch_mode_warms_each_cache_then_batches_the_rest_at_half_price(tmp_path: Path, warm_up: str) -> None:
    documents = [make_document(f"b{i}") for i in range(3)]
    total = sum(len(c) for _, c in documents)
    with FakeAnthropicServer(batch_delay_s=0.2) as server:
        run = generator(server, tmp_path).contextualize_many_batched(documents, poll_interval_s=0.05,
                                                                     warm_up=warm_up)  # type: ignore[arg-type]
        ordinary = [r for r in server.successful() if r.path == "/v1/messages"]
        batched = [r for r in server.successful() if r.path == "/v1/messages/batches" and r.usage]
        sizes = [len(b["requests"]) for b in server.batches.values()]
        totals = server.totals()
    assert all(r.context for r in run) and [r.chunk_id for r in run] == [c.id for _, cs in documents for c in cs]
    warm_ups = 3  # one per document: its cache is written before the others are sent
    if warm_up == "batch":  # a first batch of the warm-ups, at half price too; then the rest
        assert ordinary == [] and sizes == [warm_ups, total - warm_ups] and run.report.batch_requests == total
        readers = batched[warm_ups:]
    else:
        assert len(ordinary) == warm_ups and sizes == [total - warm_ups]
        readers = batched
    assert totals["cache_writes"] == warm_ups  # the warm-ups wrote; every other request read
    assert len(readers) == total - warm_ups and all(r.usage and r.usage["cache_read_input_tokens"] for r in readers)
    haiku = MODELS["claude-haiku-5-5"]
    expected = cost_usd(run.report.usage, haiku, cache_ttl="1h") + cost_usd(run.report.batch_usage, haiku,
                                                                             cache_ttl="1h", batch=True)
    assert run.report.cost_usd == pytest.approx(expected)
    assert "half price" in run.report.format()


def test_errored_and_expired_batch_requests_are_retried_as_ordinary_requests(tmp_path: Path) -> None:
    document, chunks = make_document("be")
    bad = {chunks[2].text, chunks[4].text}
    with FakeAnthropicServer(batch_delay_s=0.1) as server:
        server.fail_in_batches(lambda p: chunks[2].text in p["messages"][0]["content"][-1]["text"], "errored")
        server.fail_in_batches(lambda p: chunks[4].text in p["messages"][0]["content"][-1]["text"], "expired")
        run = generator(server, tmp_path).contextualize_many_batched([(document, chunks)], poll_interval_s=0.05)
        ordinary = [r.chunk_text for r in server.successful() if r.path == "/v1/messages"]
    assert all(r.context for r in run)
    assert sorted(" ".join(t.split()) for t in ordinary) == sorted(" ".join(t.split()) for t in bad)


def test_a_crash_while_waiting_collects_the_batch_instead_of_resubmitting(tmp_path: Path) -> None:
    documents = [make_document(f"bc{i}") for i in range(2)]
    with FakeAnthropicServer(batch_delay_s=0.5) as server:
        first = generator(server, tmp_path)

        async def crash_while_polling() -> None:
            task = asyncio.ensure_future(first.acontextualize_many_batched(documents, poll_interval_s=0.05))
            cache = ContextCache(tmp_path / "c.sqlite")
            deadline = time.monotonic() + 60
            while not cache.batches_in_flight():
                assert time.monotonic() < deadline, "no batch was recorded"
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(crash_while_polling())
        assert server.batch_requests() == 2  # the warm-up batch, one request per document
        assert ContextCache(tmp_path / "c.sqlite").batches_in_flight()
        run = generator(server, tmp_path).contextualize_many_batched(documents, poll_interval_s=0.05)
        submitted = [item["custom_id"] for b in server.batches.values() for item in b["requests"]]
        assert len(submitted) == len(set(submitted)) == sum(len(c) for _, c in documents)  # none sent twice
        assert server.totals()["cache_writes"] == 2  # the collected warm-ups' caches served the rest
        assert not ContextCache(tmp_path / "c.sqlite").batches_in_flight()
    assert all(r.context for r in run)


def test_batch_mode_needs_the_context_cache_and_a_batch_api(tmp_path: Path) -> None:
    document, chunks = make_document("bn", paragraphs=2)
    with FakeAnthropicServer() as server:
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        with pytest.raises(ConfigurationError, match="context cache"):
            ContextGenerator(provider, cache=False).contextualize_many_batched([(document, chunks)])
        with pytest.raises(ConfigurationError, match="budget_usd"):
            ContextGenerator(provider, cache=tmp_path / "c.sqlite", budget_usd=1.0).contextualize_many_batched(
                [(document, chunks)])
