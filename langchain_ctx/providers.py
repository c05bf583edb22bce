"""Any LangChain chat model as the context writer (``ainvoke``), with the generator's scheduling and reports."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage

from ctx_retrieval.providers.base import ContextRequest, ProviderResponse
from ctx_retrieval.providers.wrapped import WrappedModelProvider
from ctx_retrieval.usage import TokenUsage

__all__ = ["LangChainChatProvider"]


class LangChainChatProvider(WrappedModelProvider):
    """Writes contexts with a LangChain chat model (``ChatOpenAI``, ``ChatBedrock``, ``ChatOllama``, ...).

    Instantiate:
        .. code-block:: python

            generator = ContextGenerator(LangChainChatProvider(ChatOllama(model="qwen2.5")))

    The document goes first. For Anthropic models (``ChatAnthropic``, or ``cache_control=True``) its block
    carries ``cache_control``; usage comes from ``AIMessage.usage_metadata`` when the model reports it.
    """

    name = "langchain"

    def _content(self, request: ContextRequest) -> Any:
        if not self.cache_control:
            return request.document_prefix + request.document_rest + "\n\n" + request.chunk_block
        blocks: list[dict[str, Any]] = [{"type": "text", "text": request.document_prefix,
                                         "cache_control": {"type": "ephemeral"}}]
        if request.document_rest:
            blocks.append({"type": "text", "text": request.document_rest})
        blocks.append({"type": "text", "text": request.chunk_block})
        return blocks

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        message = await self.wrapped.ainvoke([HumanMessage(content=self._content(request))],
                                             max_tokens=request.max_tokens)
        content = message.content
        text = content if isinstance(content, str) else "".join(
            block.get("text", "") if isinstance(block, dict) else str(block) for block in content)
        usage = getattr(message, "usage_metadata", None) or {}
        details = usage.get("input_token_details") or {}
        read, write = int(details.get("cache_read") or 0), int(details.get("cache_creation") or 0)
        return ProviderResponse(text=text, usage=TokenUsage(
            input_tokens=max(0, int(usage.get("input_tokens") or 0) - read - write),
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_creation_input_tokens=write, cache_read_input_tokens=read))
