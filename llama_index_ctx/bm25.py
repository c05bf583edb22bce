"""The keyword side for LlamaIndex on the core BM25 index.

LlamaIndex's own ``BM25Retriever`` (bm25s) stems English words and splits on ``\\w+``, so ``DiffExecutor.run_target``
stays one token; the core index splits identifiers (``diff executor run target``), which is what code and
technical text need and what the evaluation figures were measured with. It is also faster per query: it hands
back the stored nodes instead of rebuilding each hit from a metadata dict (``benchmarks/query_latency.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters
from llama_index.core.vector_stores.utils import build_metadata_filter_fn

from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.retrieval.bm25 import BM25Index, tokenize

__all__ = ["BM25IndexRetriever"]


class BM25IndexRetriever(BaseRetriever):
    """BM25 over nodes with the core index (numpy; identifier-aware tokenizer), best first.

    Nodes are indexed as ``node.get_content(metadata_mode=MetadataMode.EMBED)``, the text the embedding side
    sees, so a context stored in ``metadata["context"]`` by ``ContextualNodeTransform`` is searchable.
    ``filters`` (LlamaIndex ``MetadataFilters``) restrict the search to matching nodes with the same rules as
    LlamaIndex's ``SimpleVectorStore``: the best ``similarity_top_k`` among them.

    Use:
        .. code-block:: python

            bm25 = BM25IndexRetriever(nodes, similarity_top_k=150)
            bm25.retrieve("DiffExecutor run_target")   # [NodeWithScore, ...]
    """

    def __init__(
        self,
        nodes: Sequence[BaseNode],
        *,
        similarity_top_k: int = 10,
        filters: MetadataFilters | None = None,
        metadata_mode: MetadataMode = MetadataMode.EMBED,
        tokenizer: str | Callable[[str], list[str]] = tokenize,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        if similarity_top_k < 1:
            raise ConfigurationError("similarity_top_k must be >= 1", setting="similarity_top_k")
        self.nodes = list(nodes)
        self.similarity_top_k = similarity_top_k
        self.filters = filters
        self._index = BM25Index([str(n) for n in range(len(self.nodes))],
                                [node.get_content(metadata_mode=metadata_mode) for node in self.nodes],
                                tokenizer=tokenizer)
        self._allowed = self._mask(filters)

    def __repr__(self) -> str:
        return f"BM25IndexRetriever({len(self.nodes)} nodes, similarity_top_k={self.similarity_top_k})"

    def _mask(self, filters: MetadataFilters | None) -> Any:
        if filters is None or not filters.filters:
            return None
        keep = build_metadata_filter_fn(lambda position: self.nodes[int(position)].metadata, filters)
        return [keep(str(n)) for n in range(len(self.nodes))]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        hits = self._index.search(query_bundle.query_str, self.similarity_top_k, allowed=self._allowed)
        return [NodeWithScore(node=self.nodes[int(position)], score=score) for position, score in hits]
