"""Contextual hybrid retrieval for LlamaIndex: the core ``HybridRetriever`` over a ``VectorStoreIndex`` whose
store is a ``ContextualVectorStore``.

The vector side is the index's own retriever (``as_retriever``: your store, your ``MetadataFilters``, your callback
manager); the BM25 side is the ``BM25Store`` the wrapper's pairing keeps beside the vector store, and every query is
screened by that pairing (nodes being deleted dropped, nodes BM25 does not know yet added to it). Fusion, per-side
ranks, the windows layout and the filters on both sides are the core's, rather than ``QueryFusionRetriever``: the
same ranking without an LLM to configure (it wants one even with ``num_queries=1``), with each result's ranks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters

from ctx_retrieval._names import former_keywords
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.retrieval.bm25_store import BM25Store
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K
from ctx_retrieval.retrieval.hybrid import DEFAULT_CANDIDATES, Hit, HybridRetriever, Side, check_depths, vector_sides
from ctx_retrieval.retrieval.hybrid import all_weights as check_weights
from ctx_retrieval.retrieval.pairing import bm25_place

from .engines import EngineVectorStore, where_for
from .sides import IndexSide, RetrieverSide, TracedSide, annotated, index_side, unembedded
from .store import (
    Codec,
    ContextualBM25Retriever,
    ContextualVectorStore,
    bm25_side,
    indexable,
    parent_id,
    token_counter,
    with_stable_id,
    wrap_index,
)

_CODEC = Codec()


class ContextualHybridRetriever(BaseRetriever):
    """Contextual embeddings + contextual BM25, fused, optionally post-processed (reranked), cut to
    ``similarity_top_k``.

    Setup:
        pip install "ctx-retrieval[llama-index,local]"        # add llama-index-chroma for Chroma

    Key init args:
        index: a ``VectorStoreIndex`` over contextualized nodes; a store that is not a ``ContextualVectorStore`` is
            wrapped (BM25 where the rule puts it: beside a persistent Chroma, ``bm25=`` a folder, else in memory,
            filled from the stored nodes) and followed: nodes written to it directly are added to BM25 at the next
            query.
        similarity_top_k: results returned (20); candidates: results taken from each side before fusion (150).
        weights: fusion weights, ``(vector, bm25)`` or ``{"vector": .., "bm25": ..}`` (one per side, BM25's last,
            with ``also``); rrf_k: the RRF constant.
        also: more ``VectorStoreIndex`` over the same nodes, each with its own embedding model (a second
            embedder): every index's ranking is fused with BM25, and ``insert_nodes`` / ``delete_nodes`` /
            ``delete_ref_doc`` write them too. Not with the windows layout.
        filters: ``MetadataFilters`` applied to both sides.
        node_postprocessors: applied to the fused candidates before the cut (``ClaudeRerankPostprocessor``...).
        bm25: where BM25 lives for a plain store wrapped here (a folder or a ``BM25Store``, as
            ``ContextualVectorStore``'s ``bm25=``), or another keyword retriever (then it is yours to filter and keep
            in sync). ``bm25_path=`` is its former name.
        embed_layout: ``"whole"`` or ``"windows"`` (nodes that overflow the embedder are stored as window
            children ``<id>#w<n>``; results are whole nodes).

    Instantiate:
        .. code-block:: python

            retriever = ContextualHybridRetriever.from_defaults(nodes=nodes, embed_model=MiniLMEmbedding())
            retriever = ContextualHybridRetriever.from_vector_store(store, embed_model=MiniLMEmbedding())

    Use:
        .. code-block:: python

            results = retriever.retrieve("How did ACME's revenue change in Q2 2023?")   # NodeWithScore list
            results[0].score                         # fused, in (0, 1]: 1.0 = first on both sides
            results[0].node.metadata["vector_rank"], results[0].node.metadata["bm25_rank"]

    ``NodeWithScore.score`` is the RRF score divided by its maximum: 1.0 for a node ranked first on both sides,
    0.5 for a node first on one side and absent from the other (equal weights), 0.37
    at rank 20 on both sides (``rrf_k=10``).
    """

    @former_keywords({"bm25_path": "bm25"})
    def __init__(self, index: VectorStoreIndex, *, similarity_top_k: int = 20, candidates: int = DEFAULT_CANDIDATES,
                 weights: Sequence[float] | Mapping[str, float] = (1.0, 1.0), rrf_k: int = DEFAULT_RRF_K,
                 filters: MetadataFilters | None = None, node_postprocessors: Sequence[BaseNodePostprocessor] = (),
                 bm25: BaseRetriever | str | Path | BM25Store | None = None,
                 callback_manager: CallbackManager | None = None, verbose: bool = False,
                 bm25_tokenizer: str | Callable[[str], list[str]] = "identifiers",
                 embed_layout: Literal["whole", "windows"] = "whole",
                 also: Sequence[VectorStoreIndex] = ()) -> None:
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        if also and embed_layout == "windows":
            raise ConfigurationError("also= (more indexes) and the windows layout do not go together: each embedder "
                                     "would cut its own windows", setting="also")
        check_depths(similarity_top_k, candidates, rrf_k)
        if filters is not None and not isinstance(filters, MetadataFilters):
            raise TypeError(f"filters must be llama_index MetadataFilters, not {type(filters).__name__}: "
                            "MetadataFilters.from_dicts([{'key': 'tenant', 'value': 'a'}])")
        self.index, self.also = index, list(also)
        self.similarity_top_k, self.filters = similarity_top_k, filters
        self.node_postprocessors = list(node_postprocessors)
        self.candidates, self.weights, self.rrf_k = candidates, check_weights(weights, 1 + len(self.also)), rrf_k
        engine = index.vector_store
        has_bm25 = isinstance(engine, ContextualVectorStore | EngineVectorStore)
        place, mine = bm25_place(bm25, engine if has_bm25 else None)  # where BM25 lives, or a retriever to ask
        self._fixed_bm25 = mine is not None
        self.engine = engine if isinstance(engine, EngineVectorStore) else None
        if self.engine is not None:  # both sides in one engine: nothing to pair or wrap
            if mine is not None or also or embed_layout != "whole":
                raise ConfigurationError(f"a {type(engine).__name__} holds its own BM25 side, each node whole: drop "
                                         "bm25=, also= and embed_layout=", setting="index")
            self.embed_layout, self.bm25 = "whole", None
            return
        self.store = wrap_index(index, place, bm25_tokenizer, embed_layout)
        self.embed_layout = self.store.pairing.layout
        self.bm25 = mine or ContextualBM25Retriever(store=self.store.bm25, similarity_top_k=candidates, filters=filters,
                                               callback_manager=self.callback_manager)

    @classmethod
    def from_defaults(cls, *, index: VectorStoreIndex | None = None, nodes: Sequence[BaseNode] | None = None,
                      vector_store: Any = None, embed_model: Any = None, show_progress: bool = False,
                      **kwargs: Any) -> ContextualHybridRetriever:
        """Over an existing ``index``, or a new one holding ``nodes`` (in memory unless ``vector_store`` is
        given), as LlamaIndex's retrievers are made; ``show_progress`` draws the embedding bar."""
        if (index is None) == (nodes is None):
            raise ConfigurationError("pass exactly one of index= (an existing VectorStoreIndex) or nodes= (to index "
                                     "them)", setting="index")
        if index is not None:
            if vector_store is not None:
                raise ConfigurationError("vector_store= is for new indexes (with nodes=); an index has its store",
                                         setting="vector_store")
            return cls(index, **kwargs)
        return cls.from_nodes(nodes or [], vector_store=vector_store, embed_model=embed_model,
                              show_progress=show_progress, **kwargs)

    @classmethod
    @former_keywords({"bm25_path": "bm25"})
    def from_nodes(cls, nodes: Sequence[BaseNode], *, vector_store: Any = None, embed_model: Any = None,
                   show_progress: bool = False, also_embed_models: Sequence[Any] = (),
                   **kwargs: Any) -> ContextualHybridRetriever:
        """Index contextualized nodes into ``vector_store`` (LlamaIndex's in-memory ``SimpleVectorStore`` by
        default, as ``VectorStoreIndex(nodes)``) and BM25 beside it, under stable ids (source, offset and text
        digest), so indexing the same nodes into a persistent store again replaces them. ``also_embed_models``:
        more embedders, each indexing the nodes in memory (``also=`` takes your own indexes)."""
        if vector_store is None:
            from llama_index.core.vector_stores.simple import SimpleVectorStore

            vector_store = SimpleVectorStore()
        if not isinstance(vector_store, ContextualVectorStore):
            place, kwargs["bm25"] = bm25_place(kwargs.get("bm25"))
            vector_store = ContextualVectorStore(vector_store, place,
                                                 tokenizer=kwargs.pop("bm25_tokenizer", "identifiers"),
                                                 embed_layout=kwargs.get("embed_layout", "whole"),
                                                 count_tokens=token_counter(embed_model))
        indexed = indexable(vector_store, nodes, embed_model)
        storage = StorageContext.from_defaults(vector_store=vector_store)
        index = VectorStoreIndex(indexed, storage_context=storage, embed_model=embed_model, show_progress=show_progress,
                                 insert_batch_size=max(2048, len(indexed)))  # a node's windows in one write
        if also_embed_models:
            kwargs["also"] = [*kwargs.get("also", ()), *(
                VectorStoreIndex(unembedded(indexed), embed_model=model, show_progress=show_progress)
                for model in also_embed_models)]
        return cls(index, **kwargs)

    @classmethod
    def from_vector_store(cls, vector_store: Any, *, embed_model: Any = None,
                          **kwargs: Any) -> ContextualHybridRetriever:
        """Over an existing store (after a restart, in a query process): its BM25 is opened beside it."""
        return cls(VectorStoreIndex.from_vector_store(vector_store, embed_model=embed_model), **kwargs)

    def stored_nodes(self) -> list[BaseNode]:
        """Every whole node both sides hold (read from BM25; not in an engine, which is read by node id)."""
        return (self.engine or self.store).get_nodes()

    def insert_nodes(self, nodes: Sequence[BaseNode]) -> None:
        """Add (or replace, by stable id) nodes on both sides (through the index: it embeds them)."""
        if self.engine is not None:
            self.index.insert_nodes([with_stable_id(n) for n in nodes])
            return
        indexed = indexable(self.store, nodes, getattr(self.index, "_embed_model", None))
        self.index.insert_nodes(indexed)
        for other in self.also:
            other.insert_nodes(unembedded(indexed))

    def delete_nodes(self, node_ids: Sequence[str]) -> None:
        """Delete nodes (by node id; in the windows layout, their windows too) from both sides."""
        rows = list(node_ids) if self.engine is not None else self.store.pairing.row_ids(list(node_ids))
        for index in (self.index, *self.also):
            index.delete_nodes(rows, delete_from_docstore=True)

    def delete_ref_doc(self, ref_doc_id: str) -> None:
        """Delete a source document's nodes from both sides."""
        for index in (self.index, *self.also):
            index.delete_ref_doc(ref_doc_id, delete_from_docstore=True)

    def _core(self, query_bundle: QueryBundle) -> tuple[Any, int, Any]:
        """The fusion for this query, how many fused hits to read, and the filters as it takes them."""
        depth = self.candidates if self.node_postprocessors else self.similarity_top_k
        if self.engine is not None:
            embedded = query_bundle.embedding or self.index._embed_model.get_query_embedding(query_bundle.query_str)
            return self.engine.hybrid(embedded, candidates=self.candidates, weights=self.weights, rrf_k=self.rrf_k,
                                      trace=lambda side: TracedSide(side, self.callback_manager)
                                      ), depth, where_for(self.filters)
        # each index embeds the query with its own model (a retriever writes its vector on the bundle)
        windows = self.embed_layout == "windows"  # a window's id is not its node's: the index's own retriever

        def side(index: VectorStoreIndex, bundle: QueryBundle) -> Side[BaseNode]:
            if windows:
                return IndexSide(index, bundle, self.callback_manager)
            return index_side(index, bundle, self.callback_manager, self.filters)

        vector = vector_sides(side(self.index, query_bundle),
                              [side(other, dataclasses.replace(query_bundle, embedding=None)) for other in self.also],
                              self._wholes if windows else None)
        screen = None
        if isinstance(self.bm25, ContextualBM25Retriever):
            bm25: Side[BaseNode] = TracedSide(bm25_side(self.bm25.store), self.callback_manager)
            screen = self.store.pairing.guard(_CODEC) if self.bm25.store is self.store.bm25 else None
        else:
            assert self.bm25 is not None
            bm25 = RetrieverSide(self.bm25, query_bundle)
        # a hit both sides found is read from the store's own BM25 (its payload is the node as written)
        core = HybridRetriever(vector, bm25, candidates=self.candidates, weights=self.weights, rrf_k=self.rrf_k,
                               screen=screen, items_from="bm25" if screen is not None else "vector")
        return core, depth, self.filters

    def _wholes(self, children: Sequence[BaseNode]) -> list[BaseNode]:
        ids = [parent_id(c) for c in children]
        found = {n.node_id: n for n in self.store.get_nodes(ids)}
        return [found.get(i, c) for i, c in zip(ids, children, strict=True)]

    def _finish(self, query_bundle: QueryBundle, hits: list[Hit[BaseNode]]) -> list[NodeWithScore]:
        results = [NodeWithScore(node=annotated(h.item, h), score=h.score) for h in hits]
        for postprocessor in self.node_postprocessors:
            results = postprocessor.postprocess_nodes(results, query_bundle=query_bundle)
        return results[: self.similarity_top_k]

    def warm_up(self) -> None:
        """Pay a fresh process's first-query costs now, before a query service's first request: one query through
        both sides (no postprocessor) loads the embedding model, opens BM25 and the vector index."""
        core, _, where = self._core(QueryBundle("warm-up"))
        core.retrieve("warm-up", 1, where)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        core, depth, where = self._core(query_bundle)
        return self._finish(query_bundle, core.retrieve(query_bundle.query_str, depth, where))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        core, depth, where = self._core(query_bundle)
        return self._finish(query_bundle, await core.aretrieve(query_bundle.query_str, depth, where))


