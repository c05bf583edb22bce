"""Local models as context writers (issue 15): llama.cpp, llama-cpp-python and vLLM as the OpenAI twin's profiles
(each profile's rules cite the server's docs or source in ctx_retrieval.providers.servers)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import (
    ContextGenerator,
    ProviderUnavailableError,
    RetryPolicy,
    UnknownModelError,
)
from ctx_retrieval.providers import OpenAICompatibleProvider
from ctx_retrieval.testing import FakeOpenAIServer
from tests.helpers import SteppedClock, make_document

pytest.importorskip("openai")

FAST = RetryPolicy(initial_delay_s=0.01, max_delay_s=0.05)


def generator(server: FakeOpenAIServer, model: str = "local-model", *, cache: Any = False,
              retry: RetryPolicy = FAST, **kwargs: Any) -> ContextGenerator:
    provider = OpenAICompatibleProvider(model, base_url=server.base_url, **kwargs.pop("provider", {}))
    return ContextGenerator(provider, cache=cache, retry=retry, **kwargs)


def test_per_slot_servers_get_one_document_per_slot_and_read_each_document_once() -> None:
    documents = [make_document(f"slot{i}", paragraphs=8) for i in range(4)]
    # Each answer takes 10 ms, as on a real server: answered at once, a document starting could land in the slot
    # another document had just freed between two of its chunks (llama.cpp picks the least recently used free slot),
    # which under a loaded CI machine made that document be read again (1.19x the minimum once in five runs).
    with FakeOpenAIServer(profile="llama.cpp", slots=2, latency_s=0.01) as server:
        gen = generator(server, max_concurrency=8)
        run = gen.contextualize_many(documents)
        assert run.report.failed == 0 and server.max_in_flight <= 2  # /props said 2 slots
        assert gen.provider.slots == 2 and gen.provider.prefix_cache == "per_slot"  # type: ignore[attr-defined]
        assert server.prompt_tokens_processed <= 1.15 * server.minimum_prompt_tokens()
        per_slot = server.prompt_tokens_processed
    # The same run with the prefix-cache rule hidden (what the generator did before): documents interleave in
    # the slots and the server reads them again (each answer takes a little time, so requests overlap as on a real
    # server; answered at once, how much they interleave is left to chance).
    with FakeOpenAIServer(profile="llama.cpp", slots=2, latency_s=0.01) as server:
        gen = generator(server, max_concurrency=8)

        async def unknown() -> list[str]:
            return []

        gen.provider.aprepare = unknown  # type: ignore[attr-defined]
        gen.contextualize_many(documents)
        assert server.prompt_tokens_processed > 1.25 * per_slot


def test_cached_tokens_are_used_where_reported_and_said_to_be_unreported_elsewhere(
        caplog: pytest.LogCaptureFixture) -> None:
    document, chunks = make_document("rep", paragraphs=6)
    with FakeOpenAIServer(profile="llama-cpp-python") as server, caplog.at_level(logging.WARNING):
        run = generator(server).contextualize(document, chunks)
    report = run.report
    assert not report.cache_reads_reported and report.uncacheable_documents == []
    assert "not reported" in report.format() and "minimum cacheable" not in caplog.text
    assert report.to_dict()["cache_read_share"] is None
    with FakeOpenAIServer(profile="llama.cpp") as server, caplog.at_level(logging.WARNING):
        run = generator(server).contextualize(document, chunks)
    assert run.report.cache_reads_reported and run.report.usage.cache_read_input_tokens > 0
    assert run.report.usage.cache_read_input_tokens == sum(r["usage"]["prompt_tokens_details"]["cached_tokens"]
                                                          for r in server.requests)


def test_a_wrong_model_name_is_refused_before_any_chunk_request() -> None:
    document, chunks = make_document("wm", paragraphs=3)
    for profile in ("llama.cpp", "llama-cpp-python", "vllm"):
        with FakeOpenAIServer(profile=profile, model_id="qwen2.5-coder-0.5b") as server:
            with pytest.raises(UnknownModelError, match=r"serves 'qwen2\.5-coder-0\.5b', not 'gpt-4o-does-not-exist'"):
                generator(server, "gpt-4o-does-not-exist").contextualize(document, chunks)
            assert server.requests == []
            run = generator(server, "qwen2.5-coder-0.5b").contextualize(document, chunks)
            assert run.report.failed == 0


def test_slots_and_context_size_come_from_the_server_or_a_warning_names_the_setting(
        caplog: pytest.LogCaptureFixture) -> None:
    small, small_chunks = make_document("small", paragraphs=3)
    large, large_chunks = make_document("large", paragraphs=40)  # ~3,600 estimated tokens
    with FakeOpenAIServer(profile="llama.cpp", slots=1, n_ctx=2048) as server:
        run = generator(server, max_concurrency=8).contextualize_many([(small, small_chunks), (large, large_chunks)])
        assert run.report.failed == 0 and run.report.windowed_documents == 1  # fits the server's 2,048 tokens
        assert server.max_in_flight == 1 and all(r["status"] == 200 for r in server.requests)
    with FakeOpenAIServer(profile="llama-cpp-python") as server:  # one request at a time, by its source
        gen = generator(server, max_concurrency=8)
        gen.contextualize(small, small_chunks)
        assert gen.provider.slots == 1 and server.max_in_flight == 1  # type: ignore[attr-defined]
    with FakeOpenAIServer(profile="generic") as server, caplog.at_level(logging.WARNING):
        run = generator(server).contextualize(small, small_chunks)
    assert any("OpenAICompatibleProvider(slots=N)" in w for w in run.report.warnings)
    with FakeOpenAIServer(profile="generic") as server, caplog.at_level(logging.WARNING):
        run = generator(server, provider={"slots": 2}).contextualize(small, small_chunks)
        assert not any("slots=N" in w for w in run.report.warnings) and server.max_in_flight <= 2


def test_the_servers_reason_for_a_400_is_kept_once() -> None:
    document, chunks = make_document("big", paragraphs=40)
    with FakeOpenAIServer(profile="llama-cpp-python", n_ctx=1024) as server:  # says nothing of its context
        run = generator(server, on_error="skip").contextualize(document, chunks)
    assert run.report.failed == len(chunks)
    message = run.report.failures[0].message
    assert "maximum context length is 1024 tokens" in message and message.count("maximum context length") == 1
    assert "bad_request: bad_request" not in message
    with FakeOpenAIServer(profile="llama-cpp-python", n_ctx=1024) as server:  # the remedy the message points to
        run = generator(server, provider={"context_tokens": 1024}).contextualize(document, chunks)
    assert run.report.failed == 0 and run.report.windowed_documents == 1


def test_finish_reason_length_is_never_accepted_as_a_context() -> None:
    document, chunks = make_document("len", paragraphs=2)
    with FakeOpenAIServer(profile="llama.cpp") as server:
        server.script_faults(["length"])
        run = generator(server).contextualize(document, chunks)
        assert run.report.failed == 0 and run.report.retries == 1
        asked = [r["body"]["max_tokens"] for r in server.requests]
        assert asked[1] == 4 * asked[0]  # asked again with room
        server.script_faults(["length", "length"])
        cut = generator(server, on_error="skip").contextualize(document, chunks[:1])
        assert cut.report.failed == 1 and cut[0].context is None and "max_tokens" in (cut[0].error or "")
        assert cut[0].error_kind == "max_tokens" and cut.report.failures[0].error_kind == "max_tokens"


def test_a_stopped_server_pauses_the_run_and_a_restarted_one_finishes_it(caplog: pytest.LogCaptureFixture) -> None:
    documents = [make_document(f"out{i}", paragraphs=5) for i in range(3)]
    server = FakeOpenAIServer(profile="llama.cpp", slots=1, seconds_per_prompt_token=0.0002).start()
    port = server.port
    gen = generator(server, retry=RetryPolicy(initial_delay_s=0.05, max_delay_s=0.2, max_outage_s=30))
    restarted: list[FakeOpenAIServer] = []

    def outage() -> None:
        deadline = time.monotonic() + 60
        while len(server.requests) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.stop()
        time.sleep(1.0)
        restarted.append(FakeOpenAIServer(profile="llama.cpp", slots=1, port=port).start())

    thread = threading.Thread(target=outage)
    thread.start()
    try:
        with caplog.at_level(logging.INFO, logger="ctx_retrieval"):
            run = gen.contextualize_many(documents)
    finally:
        thread.join()
        for s in restarted:
            s.stop()
    assert run.report.failed == 0 and run.report.not_attempted == 0
    assert all(r.context for r in run)
    refused = run.report.errors_by_type.get("unreachable", 0)
    assert 1 <= refused <= 12  # the outage happened mid-run; paused and probed, not 5 tries per chunk
    # The pause is said when it starts (a warning), on each probe (info, for -v) and when it ends.
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "refuses connections" in r.getMessage()
            or "answers again" in r.getMessage()]
    assert said[0][0] == logging.WARNING and "refuses connections" in said[0][1]
    assert said[-1][0] == logging.WARNING and "answers again" in said[-1][1]


def test_a_server_that_stays_down_stops_the_run_with_the_counts_right() -> None:
    documents = [make_document(f"down{i}", paragraphs=4) for i in range(3)]
    with FakeOpenAIServer(profile="llama.cpp") as server:
        clock = SteppedClock()  # outage time is the run's: it passes only while the run waits
        gen = generator(server, on_error="skip", retry=RetryPolicy(initial_delay_s=0.05, max_delay_s=0.2,
                                                                   max_outage_s=0.6), clock=clock)
        gen.contextualize(*documents[0])  # learns the server, then it goes away
    with pytest.raises(ProviderUnavailableError, match="max_outage_s") as caught:
        gen.contextualize_many(documents[1:])
    assert 0.6 <= sum(clock.slept) < 1.0  # gave up once the outage had lasted max_outage_s, not later
    report = caught.value.report
    assert report is not None
    total = sum(len(c) for _, c in documents[1:])
    assert report.failed + report.not_attempted == total
    assert all("unreachable" in f.message and f.error_kind == "unreachable" for f in report.failures)  # with why
    assert report.failed <= 3  # one probe at a time, not every chunk
    assert report.errors_by_type["unreachable"] <= 12


def test_cli_provider_openai_compatible(tmp_path: Path) -> None:
    import json

    from ctx_retrieval.cli import main

    doc = tmp_path / "a.md"
    doc.write_text("# A\n\n" + "Alpha beta gamma delta. " * 40 + "\n\nSecond paragraph here.\n", encoding="utf-8")
    out = tmp_path / "out.jsonl"
    with FakeOpenAIServer(profile="llama.cpp", model_id="qwen") as server:
        assert main(["contextualize", str(doc), "--provider", "openai-compatible", "--base-url", server.base_url,
                     "--model", "qwen", "--out", str(out), "--cache", str(tmp_path / "c.sqlite")]) == 0
        assert main(["contextualize", str(doc), "--provider", "openai-compatible", "--base-url", server.base_url,
                     "--model", "wrong", "--out", str(out), "--cache", str(tmp_path / "c.sqlite")]) == 2
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["context"] and r["model"] == "qwen" for r in rows)


def test_ollama_context_from_api_show_or_its_smallest_default() -> None:
    small, small_chunks = make_document("o-small", paragraphs=3)
    large, large_chunks = make_document("o-large", paragraphs=40)  # ~3,600 estimated tokens
    with FakeOpenAIServer(profile="ollama", n_ctx=2048, model_id="qwen2.5-coder:1.5b") as server:
        gen = generator(server, "qwen2.5-coder:1.5b", max_concurrency=8)
        run = gen.contextualize_many([(small, small_chunks), (large, large_chunks)])
        assert gen.provider.context_tokens == 2048 and gen.provider.slots == 1  # type: ignore[attr-defined]
        assert run.report.windowed_documents == 1 and server.truncated == 0  # nothing cut silently
        assert not run.report.cache_reads_reported and server.max_in_flight == 1
        assert any("OLLAMA_NUM_PARALLEL" in w for w in run.report.warnings)
        with pytest.raises(UnknownModelError, match=r"qwen2\.5-coder:1\.5b"):
            generator(server, "qwen2.5-coder:7b").contextualize(small, small_chunks)
    with FakeOpenAIServer(profile="ollama", n_ctx=4096, states_num_ctx=False, model_id="m") as server:
        gen = generator(server, "m")
        run = gen.contextualize(large, large_chunks)
        assert gen.provider.context_tokens == 4096 and server.truncated == 0  # type: ignore[attr-defined]
        assert any("OLLAMA_CONTEXT_LENGTH" in w for w in run.report.warnings)
