"""Any LlamaIndex LLM as the context writer (``achat``), with the generator's scheduling and reports."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import CacheControl, CachePoint, ChatMessage, MessageRole, TextBlock

from ctx_retrieval.providers.messages import cache_control, field, usage_from_fields
from ctx_retrieval.providers.wrapped import WrappedModelProvider
from ctx_retrieval.types import ContextRequest, ProviderResponse


class LlamaIndexLLMProvider(WrappedModelProvider):
    """Writes contexts with a LlamaIndex LLM (``OpenAI``, ``Bedrock``, ``Ollama``, ``Vertex``, ...).

    Instantiate:
        .. code-block:: python

            generator = ContextGenerator(LlamaIndexLLMProvider(Ollama(model="qwen2.5")))

    The document goes first, as its own message; for Claude models it carries ``cache_control`` (with a
    ``CachePoint`` block after it for the Bedrock integrations, ``BedrockConverse``). Usage is read from
    ``ChatResponse.raw`` (``usage`` with Anthropic, OpenAI or Converse field names) when the LLM returns it.
    """

    name = "llama-index"

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        extra = {"cache_control": cache_control(self.cache_ttl)} if self.cache_control else {}
        blocks: list[Any] = [TextBlock(text=request.document_prefix)]
        if self.cache_control and "Bedrock" in self._wrapped_type:
            # LlamaIndex's own breakpoint block, which its Bedrock integrations turn into the Converse API's
            # cachePoint (they do not read cache_control from additional_kwargs, as its Anthropic LLM does)
            blocks.append(CachePoint(cache_control=CacheControl(type="ephemeral", ttl=self.cache_ttl)))
        document = ChatMessage(role=MessageRole.USER, blocks=blocks, additional_kwargs=extra)
        rest = request.document_rest + "\n\n" + request.chunk_block if request.document_rest else request.chunk_block
        messages = [document, ChatMessage(role=MessageRole.USER, blocks=[TextBlock(text=rest)])]
        response = await self.wrapped.achat(messages, max_tokens=request.max_tokens)
        usage = usage_from_fields(field(response.raw, "usage"))  # Anthropic's or OpenAI's field names
        return ProviderResponse(text=response.message.content or "", usage=usage)
