"""The hybrid query's sides over LlamaIndex objects: the index's own vector retriever, the BM25 side as a RETRIEVE
event, a keyword retriever of the user's; and results as nodes carrying their ranks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from ctx_retrieval.keys import RETRIEVAL_KEYS
from ctx_retrieval.retrieval.dense import ChromaSide
from ctx_retrieval.retrieval.fusion import chunk_key
from ctx_retrieval.retrieval.hybrid import Hit, Ranked, Side

from .store import ContextualVectorStore, _chroma_collection, parent_id


def _ranked(found: Sequence[NodeWithScore]) -> Ranked[BaseNode]:
    ids = [parent_id(n.node) for n in found]
    return Ranked([chunk_key(i) for i in ids], [n.node for n in found], ids)


class IndexSide:
    """The index's own vector retriever (its store, the filters, the callback manager) for one query bundle."""

    def __init__(self, index: VectorStoreIndex, bundle: QueryBundle, callback_manager: CallbackManager) -> None:
        self.index, self.bundle, self.callback_manager = index, bundle, callback_manager

    def _retriever(self, k: int, where: Any) -> BaseRetriever:
        retriever = self.index.as_retriever(similarity_top_k=k, filters=where)
        retriever.callback_manager = self.callback_manager  # as_retriever passes the index's own
        return retriever

    def search(self, query: str, k: int, where: Any = None) -> Ranked[BaseNode]:
        return _ranked(self._retriever(k, where).retrieve(self.bundle))

    async def asearch(self, query: str, k: int, where: Any = None) -> Ranked[BaseNode]:
        return _ranked(await self._retriever(k, where).aretrieve(self.bundle))


def index_side(index: VectorStoreIndex, bundle: QueryBundle, callback_manager: CallbackManager,
               filters: Any) -> Side[BaseNode]:
    """The index's vector side. An index on a ``ChromaVectorStore`` queried without filters, with no callback
    handler listening, is searched on its collection directly for ids alone (nodes read only for the hits that need
    them): its own retriever builds all 150 candidates' nodes. The ranking is the same (the same query embedding,
    the same Chroma query); anything else goes through the index's own retriever."""
    store = index.vector_store
    store = store.inner if isinstance(store, ContextualVectorStore) else store  # its queries go to the inner store
    collection = _chroma_collection(store)
    if filters is None and not callback_manager.handlers and collection is not None:
        model = index._embed_model

        def embed(query: str) -> Any:
            return bundle.embedding or model.get_query_embedding(query)

        return ChromaSide(collection, embed, resolve=lambda ids: _by_ids(store, ids))
    return IndexSide(index, bundle, callback_manager)


def _by_ids(store: Any, ids: list[str]) -> list[BaseNode]:
    found = {n.node_id: n for n in store.get_nodes(node_ids=ids)}
    return [found[i] for i in ids]


class RetrieverSide:
    """A keyword retriever of the user's (LlamaIndex's ``BM25Retriever``...), asked for its own top k."""

    def __init__(self, retriever: BaseRetriever, bundle: QueryBundle) -> None:
        self.retriever, self.bundle = retriever, bundle

    def search(self, query: str, k: int, where: Any = None) -> Ranked[BaseNode]:
        return _ranked(self.retriever.retrieve(self.bundle))

    async def asearch(self, query: str, k: int, where: Any = None) -> Ranked[BaseNode]:
        return _ranked(await self.retriever.aretrieve(self.bundle))


class TracedSide:
    """The store's BM25 side as a RETRIEVE event of the query's callback manager (as ``ContextualBM25Retriever``
    reports it); the nodes are decoded for the event only when a handler listens."""

    def __init__(self, inner: Side[BaseNode], callback_manager: CallbackManager) -> None:
        self.inner, self.callback_manager = inner, callback_manager

    def search(self, query: str, k: int, where: Any = None) -> Any:
        if not self.callback_manager.handlers:
            return self.inner.search(query, k, where)
        with self.callback_manager.event(CBEventType.RETRIEVE, payload={EventPayload.QUERY_STR: query}) as event:
            ranking = self.inner.search(query, k, where)
            nodes = [NodeWithScore(node=n) for n in ranking.items(range(len(ranking.keys)))]
            event.on_end(payload={EventPayload.NODES: nodes})
        return ranking


def unembedded(nodes: Sequence[BaseNode]) -> list[BaseNode]:
    """Copies without the vector a pipeline or the first index put on them: another index embeds them itself."""
    return [n.model_copy(update={"embedding": None}) if n.embedding is not None else n for n in nodes]


def annotated(node: BaseNode, hit: Hit[BaseNode]) -> BaseNode:
    """A copy of ``node`` carrying its fused score and per-side ranks in metadata, hidden from the embedding and
    the answering LLM (the stored node is not changed)."""
    hidden = [k for k in RETRIEVAL_KEYS if k not in node.excluded_embed_metadata_keys]
    hidden_llm = [k for k in RETRIEVAL_KEYS if k not in node.excluded_llm_metadata_keys]
    return node.model_copy(update={
        "metadata": {**node.metadata, **hit.metadata()},
        "excluded_embed_metadata_keys": [*node.excluded_embed_metadata_keys, *hidden],
        "excluded_llm_metadata_keys": [*node.excluded_llm_metadata_keys, *hidden_llm],
    })
