"""The API key never appears in logs, reprs, exceptions, pickles or the context cache."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import (
    AnthropicProvider,
    ContextGenerationError,
    ContextGenerator,
    ProviderAuthenticationError,
    RetryPolicy,
)
from ctx_retrieval.testing import FakeAnthropicServer
from tests.helpers import TEST_KEY, make_document


def test_key_is_not_in_reprs_pickles_or_errors(fake_server: Any) -> None:
    provider = AnthropicProvider(api_key=TEST_KEY, base_url=fake_server.base_url)
    generator = ContextGenerator(provider, cache=False)
    assert TEST_KEY not in repr(provider) and "api_key=<set>" in repr(provider)
    assert TEST_KEY not in repr(generator)
    restored = pickle.loads(pickle.dumps(provider))
    assert TEST_KEY.encode() not in pickle.dumps(provider)
    assert "api_key=<unset>" in repr(restored)  # the key is re-read from the environment, never pickled


def test_key_is_not_in_logs_cache_or_exceptions(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache_path = tmp_path / "contexts.sqlite"
    documents = [make_document(f"d{i}", paragraphs=6) for i in range(2)]
    messages: list[str] = []
    with caplog.at_level(logging.DEBUG), FakeAnthropicServer(retry_after_s=0.01) as server:
        server.set_fault_rate(0.3, {"rate_limit": 1, "server_error": 1, "drop": 1})
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        run = ContextGenerator(provider, cache=cache_path, on_error="skip",
                               retry=RetryPolicy(initial_delay_s=0.01, max_delay_s=0.05)).contextualize_many(documents)
        messages.append(run.report.format())
        messages.append(repr(run.report.to_dict()))
    with FakeAnthropicServer(api_key="sk-ant-another-key-0000") as server:
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        with pytest.raises(ProviderAuthenticationError) as info:
            ContextGenerator(provider, cache=cache_path).contextualize_many(documents)
        messages += [str(info.value), repr(info.value)]
        assert all(not r.headers.get("x-api-key") for r in server.requests)
    with pytest.raises(ContextGenerationError) as failed, FakeAnthropicServer() as server:
        server.fail_all_for(10, "server_error")
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        ContextGenerator(provider, cache=False, retry=RetryPolicy(max_attempts=1)).contextualize_many(
            [make_document("other", paragraphs=2)])
    messages += [str(failed.value), repr(failed.value.report.to_dict())]
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.args!r}" for r in caplog.records)
    assert caplog.records, "the run logged nothing at DEBUG: the check would be vacuous"
    assert TEST_KEY not in logged
    assert all(TEST_KEY not in m for m in messages)
    for path in tmp_path.glob("contexts.sqlite*"):
        assert TEST_KEY.encode() not in path.read_bytes()


def test_key_is_not_in_benchmark_output_or_cli_output(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ctx_retrieval.cli import main
    from ctx_retrieval.testing.faults import run_faulty_ingestion

    with caplog.at_level(logging.DEBUG):
        figures = run_faulty_ingestion(40, fault_rate=0.3, api_key=TEST_KEY, timeout_s=0.5)
        monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
        assert main(["demo", "--sample-document", "--contextualizer", "fake"], twin=FakeAnthropicServer) == 0
    captured = capsys.readouterr()
    assert figures.done == 40
    assert TEST_KEY not in figures.format() + captured.out + captured.err + caplog.text
