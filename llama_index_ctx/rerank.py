"""Claude as a LlamaIndex node postprocessor: reorders retrieved nodes by relevance to the query."""

from __future__ import annotations

from typing import Any

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle
from pydantic import PrivateAttr

from ctx_retrieval.providers.base import Provider
from ctx_retrieval.retrieval.rerank import ClaudeReranker

__all__ = ["ClaudeRerankPostprocessor"]


class ClaudeRerankPostprocessor(BaseNodePostprocessor):
    """Reranks nodes with the core's provider (Claude reads the query and the candidates, context included).

    Instantiate:
        .. code-block:: python

            rerank = ClaudeRerankPostprocessor.from_provider(AnthropicProvider("claude-haiku-5-5"))
    """

    candidates: int = 40
    top_n: int = 20
    _reranker: ClaudeReranker = PrivateAttr()

    def __init__(self, provider: Provider | None = None, **data: Any) -> None:
        """``provider``: who reranks (Claude, ``AnthropicProvider()``, when omitted); ``candidates`` / ``top_n`` as
        fields. Built directly or with ``from_provider``, it is ready to use."""
        super().__init__(**data)
        self._reranker = ClaudeReranker(provider, candidates=self.candidates, top_n=self.top_n)

    @classmethod
    def from_provider(cls, provider: Provider, **kwargs: Any) -> ClaudeRerankPostprocessor:
        return cls(provider, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "ClaudeRerankPostprocessor"

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        if query_bundle is None or len(nodes) <= 1:
            return nodes
        texts = [n.node.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        order = self._reranker.rerank_query(query_bundle.query_str, texts)
        return [NodeWithScore(node=nodes[i].node, score=1.0 / (rank + 1)) for rank, i in enumerate(order)]
