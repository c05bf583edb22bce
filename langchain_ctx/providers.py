"""Any LangChain chat model as the context writer (``ainvoke``), with the generator's scheduling and reports."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import HumanMessage

from ctx_retrieval.providers.messages import anthropic_blocks, converse_blocks, plain_prompt, usage_from_fields
from ctx_retrieval.providers.wrapped import WrappedModelProvider
from ctx_retrieval.types import ContextRequest, ProviderResponse


class LangChainChatProvider(WrappedModelProvider):
    """Writes contexts with a LangChain chat model (``ChatOpenAI``, ``ChatBedrock``, ``ChatOllama``, ...).

    Instantiate:
        .. code-block:: python

            generator = ContextGenerator(LangChainChatProvider(ChatOllama(model="qwen2.5")))

    The document goes first. For Claude (``ChatAnthropic``, ``ChatAnthropicVertex``, ``ChatBedrock`` with a Claude
    model id such as ``us.anthropic.claude-haiku-4-5-20251001-v1:0``, or ``cache_control=True``) its block carries
    ``cache_control`` (``ChatBedrockConverse``: a ``cachePoint`` block after it); usage comes from
    ``AIMessage.usage_metadata`` when the model reports it.
    """

    name = "langchain"

    def _content(self, request: ContextRequest) -> Any:
        if not self.cache_control:
            return plain_prompt(request)
        if "Converse" in self._wrapped_type:  # ChatBedrockConverse: the Converse API's cachePoint blocks
            return converse_blocks(request)
        return anthropic_blocks(request, ttl=self.cache_ttl)

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        message = await self.wrapped.ainvoke([HumanMessage(content=self._content(request))],
                                             max_tokens=request.max_tokens)
        content = message.content
        text = content if isinstance(content, str) else "".join(
            block.get("text", "") if isinstance(block, dict) else str(block) for block in content)
        usage = dict(getattr(message, "usage_metadata", None) or {})
        usage.setdefault("input_token_details", {})  # LangChain's convention, also when it names no cache
        return ProviderResponse(text=text, usage=usage_from_fields(usage))
