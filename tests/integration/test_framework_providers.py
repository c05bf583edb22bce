"""Any LangChain chat model or LlamaIndex LLM as the context writer, through the generator."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ctx_retrieval import ContextGenerator, ProviderAuthenticationError, RetryPolicy
from tests.helpers import make_document


class StatusError(Exception):
    """What SDKs raise: an HTTP status on the exception and on its response."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.response = SimpleNamespace(status_code=status, headers={"retry-after": "0.01"})


def chunk_of(text: str) -> str:
    return text.split("<chunk>\n", 1)[1].split("\n</chunk>", 1)[0]


def test_langchain_chat_model_writes_contexts_with_retries_and_usage() -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from pydantic import Field

    from langchain_ctx import LangChainChatProvider

    class RecordingChat(BaseChatModel):
        calls: list[Any] = Field(default_factory=list)
        failures: list[int] = Field(default_factory=list)
        model: str = "claude-haiku-5-5"

        @property
        def _llm_type(self) -> str:
            return "recording"

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
            self.calls.append((messages, kwargs))
            if self.failures:
                raise StatusError(self.failures.pop(0))
            content = messages[0].content
            text = content if isinstance(content, str) else "".join(b["text"] for b in content)
            usage = {"input_tokens": 1000, "output_tokens": 20, "total_tokens": 1020,
                     "input_token_details": {"cache_read": 800, "cache_creation": 0}}
            message = AIMessage(content=f"Here is the context: about {chunk_of(text)[:20]}", usage_metadata=usage)
            return ChatResult(generations=[ChatGeneration(message=message)])

    document, chunks = make_document("lc", paragraphs=4)
    model = RecordingChat(failures=[429, 503])
    provider = LangChainChatProvider(model)
    run = ContextGenerator(provider, cache=False, retry=RetryPolicy(initial_delay_s=0.01)).contextualize(
        document, chunks)
    assert [r.context for r in run] == [" ".join(f"about {c.text[:20]}".split()) for c in chunks]
    assert run.report.retries == 2 and run.report.errors_by_type == {"rate_limited": 1, "server_error": 1}
    first_message, kwargs = model.calls[-1][0][0], model.calls[-1][1]
    assert first_message.content[0]["cache_control"] == {"type": "ephemeral"}  # a Claude model: explicit caching
    assert first_message.content[0]["text"].endswith(document.text + "\n</document>")
    assert kwargs["max_tokens"] == 150
    assert run.report.usage.cache_read_input_tokens == 800 * len(chunks)
    assert run.report.usage.input_tokens == 200 * len(chunks) and run.report.cost_usd is not None

    hour = LangChainChatProvider(model, cache_ttl="1h")  # the document block asks for the 1-hour cache
    ContextGenerator(hour, cache=False).contextualize(document, chunks[:1])
    assert model.calls[-1][0][0].content[0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert hour.cache_ttl == "1h"

    model.failures[:] = [401]
    with pytest.raises(ProviderAuthenticationError):
        ContextGenerator(provider, cache=False).contextualize(document, chunks)


def test_llama_index_llm_writes_contexts_with_openai_style_usage() -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse, CompletionResponse, LLMMetadata
    from llama_index.core.llms import CustomLLM

    from llama_index_ctx import LlamaIndexLLMProvider

    calls: list[Any] = []

    class RecordingLLM(CustomLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name="local-qwen")

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
            raise AssertionError("the provider uses achat")

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
            raise AssertionError("the provider uses achat")

        async def achat(self, messages: Any, **kwargs: Any) -> ChatResponse:
            calls.append((messages, kwargs))
            if len(calls) == 1:
                raise TimeoutError  # a transport fault: retried
            usage = {"prompt_tokens": 900, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 600}}
            return ChatResponse(message=ChatMessage(role="assistant", content="Situates " + chunk_of(
                messages[-1].content)[:15]), raw={"usage": usage})

    document, chunks = make_document("li", paragraphs=3)
    provider = LlamaIndexLLMProvider(RecordingLLM(), model_name="local-qwen")
    run = ContextGenerator(provider, cache=False, retry=RetryPolicy(initial_delay_s=0.01)).contextualize(
        document, chunks)
    assert all(r.context and r.context.startswith("Situates") for r in run)
    assert run.report.errors_by_type == {"timeout": 1}
    messages, _ = calls[-1]
    assert messages[0].content.startswith("Here is the original source document:") and len(messages) == 2
    assert "cache_control" not in messages[0].additional_kwargs  # not an Anthropic model
    assert run.report.usage.cache_read_input_tokens == 600 * len(chunks)
    assert run.report.usage.input_tokens == 300 * len(chunks) and run.report.cost_usd is None
