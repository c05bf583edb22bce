"""Claude as a LangChain document compressor: reorders retrieved chunks by relevance to the query."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, PrivateAttr

from ctx_retrieval._aio import run_sync
from ctx_retrieval.providers.base import Provider
from ctx_retrieval.retrieval.rerank import ClaudeReranker

__all__ = ["ClaudeRerankCompressor"]


class ClaudeRerankCompressor(BaseDocumentCompressor):
    """Reranks documents with the core's provider (Claude reads the query and the candidates).

    Setup:
        pip install "ctx-retrieval[langchain,anthropic]" and set ``ANTHROPIC_API_KEY``.

    Instantiate:
        .. code-block:: python

            compressor = ClaudeRerankCompressor.from_provider(AnthropicProvider("claude-haiku-5-5"))
            retriever = ContextualHybridRetriever(..., compressor=compressor)

    Returns all documents, the ``candidates`` first ones reordered; the retriever cuts to its ``k``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    candidates: int = 40
    top_n: int = 20
    _reranker: ClaudeReranker = PrivateAttr()

    def __init__(self, provider: Provider | None = None, **data: Any) -> None:
        """``provider``: who reranks (Claude, ``AnthropicProvider()``, when omitted); ``candidates`` / ``top_n`` as
        fields. Built directly or with ``from_provider``, it is ready to use."""
        super().__init__(**data)
        self._reranker = ClaudeReranker(provider, candidates=self.candidates, top_n=self.top_n)

    @classmethod
    def from_provider(cls, provider: Provider, **kwargs: Any) -> ClaudeRerankCompressor:
        return cls(provider, **kwargs)

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks | None = None) -> Sequence[Document]:
        return run_sync(self.acompress_documents(documents, query, callbacks))

    async def acompress_documents(self, documents: Sequence[Document], query: str,
                                  callbacks: Callbacks | None = None) -> Sequence[Document]:
        order = await self._reranker.arerank_query(query, [d.page_content for d in documents])
        return [documents[i] for i in order]
