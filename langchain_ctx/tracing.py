"""Each context request as a LangChain chat-model run: what LangSmith, Langfuse's and Phoenix's LangChain handlers
and any ``BaseCallbackHandler`` see for a model call (``ctx_retrieval.contextualize.tracing``).

The run's prompt is the chunk block with the document named by id and size (the document is the cached block of
every chunk's request, so it is not repeated in each trace); its result carries ``usage_metadata`` as LangChain's
chat models report it (``input_tokens`` the whole prompt, with ``input_token_details`` ``cache_read`` and
``cache_creation``), the model, the stop reason and the request's list price (``cost_usd``).
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import CallbackManager
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, LLMResult

from ctx_retrieval.contextualize.tracing import TracedAnswer, TracedRequest


class LangChainRequestTracer:
    """A ``RequestTracer`` reporting to LangChain callbacks: ``callbacks`` as LangChain takes them (handlers or a
    manager), plus whatever LangChain configures from the environment (``LANGSMITH_TRACING``)."""

    def __init__(self, callbacks: Any = None, *, tags: list[str] | None = None,
                 metadata: dict[str, Any] | None = None) -> None:
        self.manager = CallbackManager.configure(inheritable_callbacks=callbacks, inheritable_tags=tags,
                                                 inheritable_metadata=metadata)

    def __bool__(self) -> bool:
        return bool(self.manager.handlers)

    def start(self, request: TracedRequest) -> Any:
        serialized = {"lc": 1, "type": "not_implemented", "id": ["ctx_retrieval", request.provider],
                      "name": f"ctx-retrieval context ({request.provider})"}
        manager = self.manager.copy()  # this request's metadata, on top of the caller's
        manager.add_metadata({"ls_provider": request.provider, "ls_model_name": request.model, "ls_model_type": "chat",
                              "document_id": request.document_id, "chunk_id": request.chunk_id,
                              "prompt_version": request.prompt_version}, inherit=False)
        runs = manager.on_chat_model_start(
            serialized, [[HumanMessage(content=request.prompt)]],
            invocation_params={"model": request.model, "max_tokens": request.max_tokens, "batch": request.batch},
            name="ctx-retrieval context")
        return runs[0] if runs else None

    def end(self, run: Any, answer: TracedAnswer) -> None:
        if run is None:
            return
        usage = answer.usage
        message = AIMessage(content=answer.shown, usage_metadata={
            "input_tokens": usage.prompt_tokens, "output_tokens": usage.output_tokens,
            "total_tokens": usage.prompt_tokens + usage.output_tokens,
            "input_token_details": {"cache_read": usage.cache_read_input_tokens,
                                    "cache_creation": usage.cache_creation_input_tokens}},
            response_metadata={"model_name": answer.model, "stop_reason": answer.stop_reason,
                               "cost_usd": answer.cost_usd})
        token_usage = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens,
                       "cache_read_input_tokens": usage.cache_read_input_tokens,
                       "cache_creation_input_tokens": usage.cache_creation_input_tokens}
        run.on_llm_end(LLMResult(generations=[[ChatGeneration(message=message)]],
                                 llm_output={"token_usage": token_usage, "model_name": answer.model,
                                             "cost_usd": answer.cost_usd}))

    def error(self, run: Any, error: BaseException) -> None:
        if run is not None:
            run.on_llm_error(error)
