"""Each context request as an OpenTelemetry span with the GenAI semantic conventions' attribute names (extra
``[otel]``: ``opentelemetry-api``; spans go wherever your SDK exports them).

The span is ``chat <model>`` (kind ``CLIENT``), a child of the span current where the run was started, with
``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``, ``gen_ai.request.max_tokens``,
``gen_ai.response.model``, ``gen_ai.response.finish_reasons``, ``gen_ai.usage.input_tokens`` (the whole prompt:
the conventions say it includes cached tokens), ``gen_ai.usage.output_tokens``,
``gen_ai.usage.cache_read.input_tokens`` and ``gen_ai.usage.cache_creation.input_tokens``, ``error.type`` on a
failure; and, under ``ctx_retrieval.*``, the document and chunk ids, the prompt version, batch or not, and the
request's list price. No prompt or answer text is recorded (the conventions make content opt-in).

    from ctx_retrieval.contextualize.otel import OpenTelemetryRequestTracer
    generator = ContextGenerator(tracers=[OpenTelemetryRequestTracer()])
"""

from __future__ import annotations

import pickle
from typing import Any

from ctx_retrieval._optional import require
from ctx_retrieval.contextualize.tracing import TracedAnswer, TracedRequest


class OpenTelemetryRequestTracer:
    """A ``RequestTracer`` that opens one span per context request (``tracer_provider``: the global one by
    default)."""

    def __init__(self, tracer_provider: Any = None) -> None:
        trace = require("opentelemetry.trace", "otel")
        self._trace = trace
        self._provider = tracer_provider
        self._tracer = trace.get_tracer("ctx_retrieval", tracer_provider=tracer_provider)

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        """Re-created where it is unpickled (a pipeline's worker process): with the same ``tracer_provider`` when
        that pickles, else with that process's global provider (set it up there, as OpenTelemetry's own
        ``opentelemetry-instrument`` does)."""
        provider = self._provider
        try:
            pickle.dumps(provider)
        except Exception:  # an exporter with a socket or a lock: the worker's own global provider
            provider = None
        return OpenTelemetryRequestTracer, (provider,)

    def start(self, request: TracedRequest) -> Any:
        return self._tracer.start_span(f"chat {request.model}", kind=self._trace.SpanKind.CLIENT, attributes={
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": request.provider,
            "gen_ai.request.model": request.model, "gen_ai.request.max_tokens": request.max_tokens,
            "ctx_retrieval.document_id": request.document_id, "ctx_retrieval.chunk_id": request.chunk_id,
            "ctx_retrieval.prompt_version": request.prompt_version, "ctx_retrieval.batch": request.batch})

    def end(self, span: Any, answer: TracedAnswer) -> None:
        usage = answer.usage
        span.set_attributes({
            "gen_ai.response.model": answer.model, "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
            **({"gen_ai.response.finish_reasons": [answer.stop_reason]} if answer.stop_reason else {}),
            **({"ctx_retrieval.cost_usd": answer.cost_usd} if answer.cost_usd is not None else {})})
        span.end()

    def error(self, span: Any, error: BaseException) -> None:
        span.set_attribute("error.type", type(error).__name__)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)[:200]))
        span.end()
