"""Claude as a LangChain document compressor: reorders retrieved chunks by relevance to the query."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import ConfigDict, PrivateAttr

from ctx_retrieval._aio import run_sync
from ctx_retrieval.keys import CHUNK_ID_KEY
from ctx_retrieval.providers.base import Provider
from ctx_retrieval.retrieval.rerank import ClaudeReranker


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


def eval_reranker(compressor: BaseDocumentCompressor, *, candidates: int = 40
                  ) -> Callable[[list[str], list[list[str]], dict[str, str]], list[list[str]]]:
    """Any LangChain document compressor (Cohere, FlashRank, a cross-encoder, ``ClaudeRerankCompressor``) as an
    evaluation reranker (``run_ablation(other_rerankers={"label": eval_reranker(compressor)})``): each query's first
    ``candidates`` chunks are passed as documents and come back in the compressor's order; the documents it drops
    go after the ones it kept, then the rest of the ranking, so every row ranks the same candidates."""

    def rerank(queries: list[str], rankings: list[list[str]], texts: dict[str, str]) -> list[list[str]]:
        out = []
        for query, ranking in zip(queries, rankings, strict=True):
            head = ranking[:candidates]
            documents = [Document(page_content=texts[i], metadata={CHUNK_ID_KEY: i}) for i in head]
            kept = [str(d.metadata[CHUNK_ID_KEY]) for d in compressor.compress_documents(documents, query)]
            out.append(kept + [i for i in head if i not in set(kept)] + ranking[candidates:])
        return out

    return rerank
