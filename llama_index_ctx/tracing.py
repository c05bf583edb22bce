"""Each context request as a LlamaIndex LLM call: an ``LLMChatStartEvent`` / ``LLMChatEndEvent`` pair on the
instrumentation dispatcher (what Arize Phoenix, Langfuse and any ``BaseEventHandler`` read), and an ``LLM`` event
on the legacy callback manager (``LlamaDebugHandler``, ``TokenCountingHandler``); see
``ctx_retrieval.contextualize.tracing``.

The prompt is the chunk block with the document named by id and size (the document is the cached block of every
chunk's request, so it is not repeated per event); the response's ``raw`` holds the usage as Anthropic reports it
(``input_tokens`` uncached, ``cache_read_input_tokens``, ``cache_creation_input_tokens``, ``output_tokens``) and as
OpenAI-style counters (``prompt_tokens`` the whole prompt, ``completion_tokens``), the model, the stop reason and
the request's list price (``cost_usd``).
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatStartEvent

from ctx_retrieval.contextualize.tracing import TracedAnswer, TracedRequest

dispatcher = get_dispatcher(__name__)


class LlamaIndexRequestTracer:
    """A ``RequestTracer`` reporting to LlamaIndex's instrumentation and to ``callback_manager`` (the legacy
    callbacks; ``Settings.callback_manager`` by default)."""

    def __init__(self, callback_manager: CallbackManager | None = None) -> None:
        if callback_manager is None:
            from llama_index.core import Settings

            callback_manager = Settings.callback_manager
        self.callback_manager = callback_manager

    def start(self, request: TracedRequest) -> Any:
        messages = [ChatMessage(role=MessageRole.USER, content=request.prompt)]
        model = {"model": request.model, "provider": request.provider, "prompt_version": request.prompt_version,
                 "document_id": request.document_id, "chunk_id": request.chunk_id, "batch": request.batch}
        dispatcher.event(LLMChatStartEvent(messages=messages, additional_kwargs={"max_tokens": request.max_tokens},
                                           model_dict=model))
        event_id = None
        if self.callback_manager.handlers:
            event_id = self.callback_manager.on_event_start(
                CBEventType.LLM, payload={EventPayload.MESSAGES: messages, EventPayload.SERIALIZED: model,
                                          EventPayload.ADDITIONAL_KWARGS: {"max_tokens": request.max_tokens}})
        return messages, event_id

    def end(self, handle: Any, answer: TracedAnswer) -> None:
        messages, event_id = handle
        usage = answer.usage
        raw = {"model": answer.model, "stop_reason": answer.stop_reason, "cost_usd": answer.cost_usd,
               "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                         "cache_read_input_tokens": usage.cache_read_input_tokens,
                         "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                         "prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.output_tokens,
                         "total_tokens": usage.prompt_tokens + usage.output_tokens}}
        response = ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=answer.shown), raw=raw)
        dispatcher.event(LLMChatEndEvent(messages=messages, response=response))
        if event_id is not None:
            self.callback_manager.on_event_end(
                CBEventType.LLM, payload={EventPayload.MESSAGES: messages, EventPayload.RESPONSE: response},
                event_id=event_id)

    def error(self, handle: Any, error: BaseException) -> None:
        messages, event_id = handle
        dispatcher.event(LLMChatEndEvent(messages=messages, response=None))
        if event_id is not None:
            self.callback_manager.on_event_end(CBEventType.LLM, payload={EventPayload.EXCEPTION: error},
                                               event_id=event_id)
