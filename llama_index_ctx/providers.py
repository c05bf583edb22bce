"""Any LlamaIndex LLM as the context writer (``achat``), with the generator's scheduling and reports."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock

from ctx_retrieval.providers.base import ContextRequest, ProviderResponse
from ctx_retrieval.providers.wrapped import WrappedModelProvider
from ctx_retrieval.usage import TokenUsage

__all__ = ["LlamaIndexLLMProvider"]


def _get(source: Any, name: str) -> Any:
    return source.get(name) if isinstance(source, dict) else getattr(source, name, None)


class LlamaIndexLLMProvider(WrappedModelProvider):
    """Writes contexts with a LlamaIndex LLM (``OpenAI``, ``Bedrock``, ``Ollama``, ``Vertex``, ...).

    Instantiate:
        .. code-block:: python

            generator = ContextGenerator(LlamaIndexLLMProvider(Ollama(model="qwen2.5")))

    The document goes first, as its own message; for Anthropic models it carries ``cache_control``. Usage is
    read from ``ChatResponse.raw`` (``usage`` with Anthropic or OpenAI field names) when the LLM returns it.
    """

    name = "llama-index"

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        extra = {"cache_control": {"type": "ephemeral"}} if self.cache_control else {}
        document = ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text=request.document_prefix)],
                               additional_kwargs=extra)
        rest = request.document_rest + "\n\n" + request.chunk_block if request.document_rest else request.chunk_block
        messages = [document, ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text=rest)])]
        response = await self.wrapped.achat(messages, max_tokens=request.max_tokens)
        usage = _get(response.raw, "usage") if response.raw is not None else None
        read = int(_get(usage, "cache_read_input_tokens") or 0)
        write = int(_get(usage, "cache_creation_input_tokens") or 0)
        details = _get(usage, "prompt_tokens_details")
        read = read or int(_get(details, "cached_tokens") or 0)
        prompt = _get(usage, "prompt_tokens")
        uncached = int(prompt) - read if prompt is not None else int(_get(usage, "input_tokens") or 0)
        output = int(_get(usage, "completion_tokens") or _get(usage, "output_tokens") or 0)
        return ProviderResponse(text=response.message.content or "", usage=TokenUsage(
            input_tokens=max(0, uncached), output_tokens=output, cache_creation_input_tokens=write,
            cache_read_input_tokens=read))
