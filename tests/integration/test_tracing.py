"""Every context request in the frameworks' own tracing (issue 26, part 5): a real LangChain callback handler and
real LlamaIndex event and callback handlers see one LLM call per request, with its usage (cache reads and writes),
model and cost; the core's tracers see errors and batch results, and a tracer that raises never fails a run."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from ctx_retrieval.contextualize.tracing import TracedAnswer, TracedRequest, tracing
from ctx_retrieval.types import TokenUsage
from tests.helpers import make_document


class Recorder:
    """A core tracer that keeps what it saw."""

    def __init__(self) -> None:
        self.started: list[TracedRequest] = []
        self.ended: list[TracedAnswer] = []
        self.errors: list[BaseException] = []

    def start(self, request: TracedRequest) -> int:
        self.started.append(request)
        return len(self.started)

    def end(self, handle: int, answer: TracedAnswer) -> None:
        self.ended.append(answer)

    def error(self, handle: int, error: BaseException) -> None:
        self.errors.append(error)


def _total(usages: list[TokenUsage]) -> TokenUsage:
    total = TokenUsage()
    for usage in usages:
        total = total + usage
    return total


def test_every_request_is_traced_with_its_usage_and_cost(fake_server: Any, make_generator: Any) -> None:
    document, chunks = make_document("traced", paragraphs=8)
    recorder = Recorder()
    fake_server.script_faults(["server_error"])  # the first request fails once, then is retried
    generator = make_generator(tracers=[recorder])
    run = generator.contextualize(document, chunks)
    report = run.report
    assert len(recorder.started) == report.requests == len(recorder.ended) + len(recorder.errors)
    assert len(recorder.errors) == 1 and len(recorder.ended) == len(chunks)
    assert _total([a.usage for a in recorder.ended]) == report.usage
    assert sum(a.cost_usd or 0 for a in recorder.ended) == pytest.approx(report.cost_usd)
    assert {r.chunk_id for r in recorder.started} == {c.id for c in chunks}
    first = recorder.started[0]
    assert first.model == "claude-haiku-5-5" and first.document_id == "traced" and first.prompt_version == "ctx-v1"
    assert document.text not in first.prompt and "<chunk>" in first.prompt  # the document is named, not repeated
    assert sum(a.usage.cache_read_input_tokens > 0 for a in recorder.ended) == len(chunks) - 1


def test_a_tracer_that_raises_is_dropped_and_the_run_goes_on(fake_server: Any, make_generator: Any,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Recorder):
        def end(self, handle: int, answer: TracedAnswer) -> None:
            raise RuntimeError("the tracing backend is down")

    broken, kept = Broken(), Recorder()
    document, chunks = make_document("broken", paragraphs=4)
    with caplog.at_level(logging.WARNING, logger="ctx_retrieval.contextualize.tracing"):
        run = make_generator(tracers=[broken, kept]).contextualize(document, chunks)
    assert all(r.status == "generated" for r in run)
    assert len(broken.started) == 1 and len(kept.ended) == len(chunks)  # dropped after its first failure
    assert "left out of the rest of this run" in caplog.text


def test_tracing_blocks_reach_a_synchronous_call_made_inside_an_event_loop(fake_server: Any,
                                                                          make_generator: Any) -> None:
    document, chunks = make_document("in-loop", paragraphs=3)
    recorder = Recorder()
    generator = make_generator()

    async def notebook_cell() -> Any:  # a running loop: the sync call runs on a helper thread
        with tracing(recorder):
            return generator.contextualize(document, chunks)

    asyncio.run(notebook_cell())
    assert len(recorder.ended) == len(chunks)
    generator.contextualize(*make_document("outside", paragraphs=2))
    assert len(recorder.ended) == len(chunks)  # outside the block: not traced


def test_batch_results_are_traced_as_batch_requests(fake_server: Any, make_generator: Any) -> None:
    items = [make_document(f"batched-{n}", paragraphs=3) for n in range(2)]
    recorder = Recorder()
    run = make_generator(tracers=[recorder]).contextualize_many_batched(items, poll_interval_s=0.01)
    assert all(r.status == "generated" for r in run)
    assert len(recorder.ended) == 6 and all(r.batch for r in recorder.started)
    assert sum(a.cost_usd or 0 for a in recorder.ended) == pytest.approx(run.report.cost_usd)


def test_langchain_callbacks_see_a_chat_model_run_per_request(fake_server: Any, make_generator: Any) -> None:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.documents import Document

    from langchain_ctx import ContextualDocumentTransformer

    class Handler(BaseCallbackHandler):
        def __init__(self) -> None:
            self.starts: list[Any] = []
            self.ends: list[Any] = []

        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            self.starts.append((messages, kwargs))

        def on_llm_end(self, response: Any, **kwargs: Any) -> None:
            self.ends.append(response)

    _, chunks = make_document("lc", paragraphs=5)
    docs = [Document(page_content=c.text, metadata={"source": "lc", "start_index": c.start_char}) for c in chunks]
    transformer = ContextualDocumentTransformer(make_generator())
    handler = Handler()
    transformer.transform_documents(docs, callbacks=[handler])
    report = transformer.last_report
    assert report is not None and len(handler.starts) == len(handler.ends) == report.requests == len(chunks)
    _, kwargs = handler.starts[0]
    assert kwargs["metadata"]["ls_model_name"] == "claude-haiku-5-5" and kwargs["metadata"]["document_id"] == "lc"
    usage = [r.generations[0][0].message.usage_metadata for r in handler.ends]
    assert sum(u["input_token_details"]["cache_read"] for u in usage) == report.usage.cache_read_input_tokens
    assert sum(u["input_tokens"] for u in usage) == report.usage.prompt_tokens
    assert sum(u["output_tokens"] for u in usage) == report.usage.output_tokens
    assert sum(r.llm_output["cost_usd"] for r in handler.ends) == pytest.approx(report.cost_usd)
    # async too; no handler, no tracing work
    again = Handler()
    asyncio.run(transformer.atransform_documents(
        [Document(page_content=c.text, metadata={"source": "lc2"}) for c in make_document("lc2", 3)[1]],
        callbacks=[again]))
    assert len(again.ends) == 3 and len(handler.ends) == len(chunks)


def test_llama_index_handlers_see_an_llm_call_per_request(fake_server: Any, make_generator: Any) -> None:
    from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
    from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
    from llama_index.core.instrumentation.event_handlers import BaseEventHandler
    from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatStartEvent
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

    from llama_index_ctx import ContextualNodeTransform

    seen: list[Any] = []

    class Events(BaseEventHandler):

        @classmethod
        def class_name(cls) -> str:
            return "Events"

        def handle(self, event: Any, **kwargs: Any) -> None:
            if isinstance(event, (LLMChatStartEvent, LLMChatEndEvent)):
                seen.append(event)

    _, chunks = make_document("li", paragraphs=5)
    nodes = [TextNode(text=c.text, id_=c.id, start_char_idx=c.start_char,
                      relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="li")}) for c in chunks]
    events, debug = Events(), LlamaDebugHandler()
    root = get_dispatcher()
    root.add_event_handler(events)
    try:
        transform = ContextualNodeTransform(contextualizer=make_generator())
        transform(nodes, callback_manager=CallbackManager([debug]))
    finally:
        root.event_handlers.remove(events)
    report = transform.last_report
    starts = [e for e in seen if isinstance(e, LLMChatStartEvent)]
    ends = [e for e in seen if isinstance(e, LLMChatEndEvent)]
    assert report is not None and len(starts) == len(ends) == report.requests == len(chunks)
    assert starts[0].model_dict["model"] == "claude-haiku-5-5" and starts[0].model_dict["document_id"] == "li"
    raw = [e.response.raw for e in ends]
    assert sum(r["usage"]["cache_read_input_tokens"] for r in raw) == report.usage.cache_read_input_tokens
    assert sum(r["usage"]["prompt_tokens"] for r in raw) == report.usage.prompt_tokens
    assert sum(r["cost_usd"] for r in raw) == pytest.approx(report.cost_usd)
    assert len(debug.get_event_pairs(CBEventType.LLM)) == len(chunks)


def test_opentelemetry_spans_carry_the_genai_attributes(fake_server: Any, make_generator: Any) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ctx_retrieval.contextualize.otel import OpenTelemetryRequestTracer

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = OpenTelemetryRequestTracer(provider)
    document, chunks = make_document("otel", paragraphs=4)
    fake_server.script_faults(["server_error"])
    outer = provider.get_tracer("the caller")
    with outer.start_as_current_span("nightly ingestion") as parent:
        run = make_generator(tracers=[tracer]).contextualize(document, chunks)
    spans = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    ok = [s for s in spans if s.status.is_ok or s.status.status_code.name == "UNSET"]
    failed = [s for s in spans if s.status.status_code.name == "ERROR"]
    assert len(ok) == len(chunks) and len(failed) == 1 and failed[0].attributes["error.type"]
    assert all(s.parent is not None and s.parent.span_id == parent.get_span_context().span_id for s in spans)
    first = ok[0].attributes
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.provider.name"] == "anthropic"
    assert first["gen_ai.request.model"] == "claude-haiku-5-5" and first["ctx_retrieval.document_id"] == "otel"
    usage = run.report.usage
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in ok) == usage.prompt_tokens
    assert sum(s.attributes["gen_ai.usage.cache_read.input_tokens"] for s in ok) == usage.cache_read_input_tokens
    assert sum(s.attributes["gen_ai.usage.cache_creation.input_tokens"] for s in ok) == \
        usage.cache_creation_input_tokens
    assert sum(s.attributes["ctx_retrieval.cost_usd"] for s in ok) == pytest.approx(run.report.cost_usd)


def test_an_opentelemetry_tracer_survives_the_trip_to_a_worker(fake_server: Any, make_generator: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ctx_retrieval.contextualize.otel import OpenTelemetryRequestTracer
    from tests.helpers import TEST_KEY

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    generator = make_generator(cache=False, tracers=[OpenTelemetryRequestTracer(provider)])
    copy = pickle.loads(pickle.dumps(generator))  # what IngestionPipeline(num_workers=N) and Ray do
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)  # a key never travels: the worker reads its own
    document, chunks = make_document("otel", paragraphs=2)
    assert all(r.context for r in copy.contextualize(document, chunks))


def test_a_huge_chunk_makes_bounded_events_in_both_frameworks() -> None:
    from langchain_core.callbacks import BaseCallbackHandler
    from llama_index.core.callbacks import CallbackManager, LlamaDebugHandler

    from ctx_retrieval.contextualize.tracing import TRACED_TEXT_CHARS
    from langchain_ctx.tracing import LangChainRequestTracer
    from llama_index_ctx.tracing import LlamaIndexRequestTracer

    request = TracedRequest("big", "big:0", "anthropic", "claude-haiku-5-5", "ctx-v1",
                            "<chunk>\n" + "x" * 1_000_000 + "\n</chunk>", 3_000_000, 200)
    answer = TracedAnswer("y" * 50_000, TokenUsage(input_tokens=10, output_tokens=5), "end_turn", "m", 0.001)
    seen: list[int] = []

    class Sizes(BaseCallbackHandler):
        def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
            seen.append(sum(len(str(m.content)) for batch in messages for m in batch))

        def on_llm_end(self, response: Any, **kwargs: Any) -> None:
            seen.append(sum(len(g.text) for gs in response.generations for g in gs))

    langchain = LangChainRequestTracer([Sizes()])
    langchain.end(langchain.start(request), answer)
    debug = LlamaDebugHandler()
    llama = LlamaIndexRequestTracer(CallbackManager([debug]))
    llama.end(llama.start(request), answer)
    for start, end in debug.get_event_pairs():
        seen.append(len(str(start.payload)) + len(str(end.payload)))
    assert len(seen) == 3 and max(seen) < 5 * TRACED_TEXT_CHARS  # a few kilobytes (start + end), not megabytes
    assert "more characters]" in request.prompt and request.prompt.startswith("[document big: 3,000,000 characters]")
