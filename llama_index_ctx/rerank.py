"""Claude as a LlamaIndex node postprocessor: reorders retrieved nodes by relevance to the query."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from pydantic import PrivateAttr

from ctx_retrieval.providers.base import Provider
from ctx_retrieval.retrieval.rerank import ClaudeReranker


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


def eval_reranker(postprocessor: BaseNodePostprocessor, *, candidates: int = 40
                  ) -> Callable[[list[str], list[list[str]], dict[str, str]], list[list[str]]]:
    """Any LlamaIndex node postprocessor (``SentenceTransformerRerank``, ``CohereRerank``, ``LLMRerank``,
    ``ClaudeRerankPostprocessor``) as an evaluation reranker (``run_ablation(other_rerankers={"label": eval_reranker(
    postprocessor)})``): each query's first ``candidates`` chunks go in as nodes and come back in its order; nodes
    it drops follow the ones it kept, then the rest of the ranking, so every row ranks the same candidates."""

    def rerank(queries: list[str], rankings: list[list[str]], texts: dict[str, str]) -> list[list[str]]:
        out = []
        for query, ranking in zip(queries, rankings, strict=True):
            head = ranking[:candidates]
            nodes = [NodeWithScore(node=TextNode(text=texts[i], id_=i), score=1.0 / (n + 1))
                     for n, i in enumerate(head)]
            kept = [n.node.node_id for n in postprocessor.postprocess_nodes(nodes, query_str=query)]
            out.append(kept + [i for i in head if i not in set(kept)] + ranking[candidates:])
        return out

    return rerank
