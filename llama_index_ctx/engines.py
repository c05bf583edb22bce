"""Contextual hybrid inside one engine for LlamaIndex: the core ``MilvusStore`` (one collection: the contextualized
text, its vector, and Milvus's BM25 over our analysis) and ``PostgresStore`` (one table: pgvector beside BM25 in SQL
over our analysis) as LlamaIndex vector stores, ``ContextualMilvusVectorStore`` and ``ContextualPostgresVectorStore``.

There is nothing to pair: each node is one row that both engine sides read, so LlamaIndex's own calls
(``VectorStoreIndex`` builds, ``insert_nodes``, ``delete_ref_doc``, ``IngestionPipeline(vector_store=..., docstore=...,
docstore_strategy=UPSERTS_AND_DELETE)``) keep both sides true at once, in every process that opens the collection.
Nodes are stored whole (as the docstore serializes them) and come back as they went in. Queries: the index's own
retriever with ``vector_store_query_mode="hybrid"`` (both engine sides fused, each node with its ranks),
``"text_search"`` (contextual BM25 alone) or the default (vectors alone); ``ContextualHybridRetriever`` over such an
index does the same with its weights and post-processors. Why not ``llama-index-vector-stores-milvus``: its BM25 is
the engine's analyzer over the node's text, which on Milvus Lite keeps identifiers whole and folds nothing
(measured: contextual BM25 12.3% against 7.9% failure@20 on the cookbook dev half, ``benchmarks/milvus_ablation.py``).
Why not ``llama-index-vector-stores-postgres``: its ``hybrid_search`` is PostgreSQL's full-text ``ts_rank``, not BM25,
over a text-search configuration that neither stems our way nor splits identifiers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.utils import json_to_doc
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from pydantic import PrivateAttr

from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.retrieval.engine_store import EngineStore, Stored
from ctx_retrieval.retrieval.hybrid import Hit
from ctx_retrieval.retrieval.milvus import MilvusStore

from .sides import annotated
from .store import record, where_of

DEFAULT_COLLECTION = "ctx_retrieval"
_MODES = {VectorStoreQueryMode.DEFAULT: "vector", VectorStoreQueryMode.HYBRID: "hybrid",
          VectorStoreQueryMode.TEXT_SEARCH: "bm25", VectorStoreQueryMode.SPARSE: "bm25"}


def _node(stored: Stored) -> BaseNode:
    node: BaseNode = json_to_doc(json.loads(stored.payload.decode("utf-8", "surrogatepass"))["node"])
    return node


def where_for(filters: Any) -> Mapping[str, Any] | None:
    """``MetadataFilters`` (or a where dict) as the where dict the engine applies."""
    if filters is None or isinstance(filters, Mapping):
        return filters
    if isinstance(filters, MetadataFilters):
        if not filters.filters:
            return None
        where = where_of(filters)
        if where is not None:
            return where
    raise InvalidInputError("these filters cannot reach the engine: use MetadataFilters with EQ, NE, GT, GTE, LT, LTE, "
                            "IN or NIN joined by AND/OR (the engine applies them on both sides)")


class EngineVectorStore(BasePydanticVectorStore):
    """A core ``EngineStore`` (both sides of each node in one engine row) as a LlamaIndex vector store: what
    ``ContextualMilvusVectorStore`` and ``ContextualPostgresVectorStore`` share (``client``: the core store)."""

    stores_text: bool = True
    is_embedding_query: bool = True
    _store: EngineStore = PrivateAttr()

    def __init__(self, store: EngineStore) -> None:
        super().__init__(stores_text=True, is_embedding_query=True)
        self._store = store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._store!r})"

    @classmethod
    def class_name(cls) -> str:
        return cls.__name__

    @property
    def client(self) -> EngineStore:
        """The core store (``MilvusStore``, ``PostgresStore``)."""
        return self._store

    # -- writes: one row per node -----------------------------------------------------------------------------

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        """Add (or replace, by node id) nodes, with the vectors they carry (all or none: else embedded here)."""
        vectors = [n.embedding for n in nodes]
        given = [list(v) for v in vectors if v is not None]
        return self._store.add_records([record(n) for n in nodes],
                                       given if len(given) == len(nodes) else None)

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        """Delete a source document's nodes, from both sides at once."""
        self._store.delete_documents([ref_doc_id])

    def delete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
                     **kwargs: Any) -> None:
        if filters is not None and filters.filters:
            raise InvalidInputError("delete nodes by id (node_ids=) or by document (delete_ref_doc) here")
        self._store.delete([str(i) for i in node_ids or []])

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        """The nodes stored under ``node_ids``."""
        if node_ids is None:
            raise InvalidInputError("name the nodes to read (node_ids=): an engine's collection is not read whole here")
        return [_node(s) for s in self._store.get(node_ids)]

    # -- queries ---------------------------------------------------------------------------------------------

    def hybrid(self, vector: Sequence[float] | None, *, candidates: int, weights: Any, rrf_k: int,
               trace: Any = None) -> Any:
        """What ``ContextualHybridRetriever`` queries (``EngineStore.hybrid``): our fusion over the two engine
        sides, or Milvus's own (``engine_fusion=True``); ``vector``: the query's; give it ``where_for(filters)``."""
        return self._store.hybrid(self._load, vector=vector, candidates=candidates, weights=weights, rrf_k=rrf_k,
                                  trace=trace)

    def _load(self, ids: list[str]) -> list[BaseNode]:
        return [_node(s) for s in self._store.get(ids)]

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The index's retriever's query: ``query.mode`` picks the sides (default: vectors; ``hybrid``; ``text_search``
        or ``sparse``: BM25), ``query.filters`` reach the engine, each node carries its ranks."""
        mode = _MODES.get(query.mode)
        if mode is None:
            raise InvalidInputError(f"query mode {query.mode!r} is not served here: use default, hybrid or "
                                    "text_search")
        if mode != "vector" and not query.query_str:
            raise InvalidInputError(f"a {mode} query needs the query's text (QueryBundle.query_str)")
        k = query.similarity_top_k or 20
        found = self._store.search_stored(query.query_str or "", k=k, mode=mode, where=where_for(query.filters),
                                          vector=query.query_embedding)
        nodes = [annotated(node, Hit(node, 0, h.score, h.vector_rank, h.bm25_rank))
                 for node, h in zip((_node(h.item) for h in found), found, strict=True)]
        return VectorStoreQueryResult(nodes=nodes, similarities=[h.score for h in found],
                                      ids=[h.item.chunk.chunk_id for h in found])


class ContextualMilvusVectorStore(EngineVectorStore):
    """Contextualized nodes in one Milvus collection: vectors and contextual BM25 side by side, nothing to pair.

    Setup:
        pip install "ctx-retrieval[llama-index,milvus,local]"

    Key init args:
        uri: ``"./chunks.db"`` (Milvus Lite, one process) or ``"http://host:19530"`` (a server: several processes).
        embed_model: the index's embedding model (its name and dimension are recorded with the collection; nodes
            come embedded by the pipeline or the index, and the model embeds only what comes without a vector).
        collection_name: the collection (``"ctx_retrieval"``); token: for a server that asks for one.
        tokenizer: our BM25 analysis (``"identifiers"``), or ``"engine"`` with ``analyzer_params`` (see
            ``ctx_retrieval.retrieval.milvus.MilvusStore``).
        engine_fusion: hybrid queries fused in the engine (one ``hybrid_search``) instead of by our fusion.

    Instantiate:
        .. code-block:: python

            store = ContextualMilvusVectorStore("http://127.0.0.1:19530", embed_model=MiniLMEmbedding())

    Use:
        .. code-block:: python

            pipeline = IngestionPipeline(transformations=[splitter, ContextualNodeTransform(...), embed_model],
                                         vector_store=store, docstore=docstore,
                                         docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
            index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
            index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=20).retrieve("ACME's revenue?")
    """

    def __init__(self, uri: str, *, embed_model: Any, collection_name: str = DEFAULT_COLLECTION,
                 tokenizer: str = "identifiers", analyzer_params: Mapping[str, Any] | None = None,
                 engine_fusion: bool = False, token: str | None = None) -> None:
        from ctx_retrieval.evaluation.models import as_embedder

        super().__init__(MilvusStore(uri, embedder=as_embedder(embed_model), collection=collection_name,
                                     tokenizer=tokenizer, analyzer_params=analyzer_params, engine_fusion=engine_fusion,
                                     token=token))


class ContextualPostgresVectorStore(EngineVectorStore):
    """Contextualized nodes in one PostgreSQL table: pgvector and contextual BM25 side by side, written in one
    transaction (the core ``PostgresStore``), so nothing to pair.

    Setup:
        pip install "ctx-retrieval[llama-index,postgres,local]"  (a server with pgvector >= 0.8)

    Key init args:
        url: a libpq connection string (``postgresql://user@host:5432/db``).
        embed_model: the index's embedding model (recorded with the table; nodes come embedded by the pipeline or
            the index, and the model embeds only what comes without a vector).
        table: the collection's table (``"ctx_chunks"``); tokenizer / language: our BM25 analysis, as
            ``BM25Store``'s.

    Instantiate:
        .. code-block:: python

            store = ContextualPostgresVectorStore("postgresql://rag@db.internal/rag", embed_model=MiniLMEmbedding())

    Use: as ``ContextualMilvusVectorStore``.
    """

    def __init__(self, url: str, *, embed_model: Any, table: str = "ctx_chunks", tokenizer: str = "identifiers",
                 language: str | Sequence[str] | None = "auto") -> None:
        from ctx_retrieval.evaluation.models import as_embedder
        from ctx_retrieval.retrieval.postgres import PostgresStore

        super().__init__(PostgresStore(url, embedder=as_embedder(embed_model), table=table, tokenizer=tokenizer,
                                       language=language))
