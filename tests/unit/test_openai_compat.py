"""The OpenAI-compatible provider against a local fake chat-completions server."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from ctx_retrieval import ContextGenerator, RetryPolicy, UnknownModelError
from ctx_retrieval.providers import OpenAICompatibleProvider
from ctx_retrieval.testing import FakeOpenAIServer
from tests.helpers import make_document

pytest.importorskip("openai")


def generator(server: FakeOpenAIServer, tmp_path: Path, **kwargs: object) -> ContextGenerator:
    provider = OpenAICompatibleProvider("local-model", base_url=server.base_url)
    return ContextGenerator(provider, cache=tmp_path / "c.sqlite",
                            retry=RetryPolicy(initial_delay_s=0.01, max_delay_s=0.05), **kwargs)  # type: ignore[arg-type]


def test_document_first_one_message_and_prefix_cache_usage(tmp_path: Path) -> None:
    document, chunks = make_document("oa", paragraphs=6)
    with FakeOpenAIServer() as server:
        run = generator(server, tmp_path).contextualize(document, chunks)
        first = server.requests[0]["body"]
    assert all(r.context and r.context.startswith("situates the chunk") for r in run)  # "Context:" cleaned off
    (message,) = first["messages"]
    assert message["content"].startswith("Here is the original source document:\n<document>\n" + document.text[:40])
    assert message["content"].rstrip().endswith("Answer only with the succinct context and nothing else.")
    assert run.report.usage.cache_read_input_tokens > 0  # the warm-up request filled the prefix cache
    assert run[0].usage.cache_read_input_tokens == 0 and run[1].usage.cache_read_input_tokens > 0
    assert run.report.cost_usd is None  # a local model: no price unless model_info is given


def test_retries_order_and_resume(tmp_path: Path) -> None:
    documents = [make_document(f"o{i}", paragraphs=4) for i in range(3)]
    with FakeOpenAIServer() as server:
        server.script_faults(["rate_limit", "server_error", "drop"])
        run = generator(server, tmp_path).contextualize_many(documents)
        assert run.report.retries == 3 and run.report.failed == 0
        assert [r.chunk_id for r in run] == [c.id for _, cs in documents for c in cs]
        before = len(server.requests)
        again = generator(server, tmp_path).contextualize_many(documents)
        assert len(server.requests) == before and again.report.cached == len(run)


def test_insufficient_quota_stops_the_run_at_once_instead_of_waiting(tmp_path: Path) -> None:
    from ctx_retrieval import ProviderBillingError

    documents = [make_document(f"q{i}", paragraphs=4) for i in range(2)]
    with FakeOpenAIServer() as server:
        server.script_faults(["insufficient_quota"])
        with pytest.raises(ProviderBillingError, match="insufficient_quota") as caught:
            generator(server, tmp_path).contextualize_many(documents)
        assert len(server.requests) == 1  # not waited on as a rate limit (it was, for 15 minutes)
    assert caught.value.report is not None and caught.value.report.rate_limited == 0


def test_unknown_model_stops_the_run(tmp_path: Path) -> None:
    document, chunks = make_document("nf", paragraphs=3)
    with FakeOpenAIServer(known_models=["other"]) as server:
        with pytest.raises(UnknownModelError, match="serves 'other', not 'local-model'"):
            generator(server, tmp_path).contextualize(document, chunks)
        assert server.requests == []  # refused from GET /v1/models, before any chunk request
        unchecked = OpenAICompatibleProvider("local-model", base_url=server.base_url, check_model=False)
        with pytest.raises(UnknownModelError, match="/v1/models"):  # the server's own 404 still stops the run
            ContextGenerator(unchecked, cache=False).contextualize(document, chunks)
        assert len(server.requests) == 1


def test_servers_that_report_no_cache_usage_get_no_false_warning(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    document, chunks = make_document("nw", paragraphs=2)
    with FakeOpenAIServer() as server, caplog.at_level(logging.WARNING):
        provider = OpenAICompatibleProvider("local-model", base_url=server.base_url, reports_cache_usage=False)
        run = ContextGenerator(provider, cache=False).contextualize(document, chunks)
    assert run.report.uncacheable_documents == [] and "caching did nothing" not in caplog.text
