"""Contextual hybrid retrieval for LlamaIndex: any ``VectorStoreIndex`` and a BM25 retriever over the same
contextualized nodes, fused by reciprocal rank fusion.

The BM25 side is ``BM25IndexRetriever``, the core index as a LlamaIndex retriever (identifier-aware tokens, the
configuration the evaluation measures, 3x faster per hybrid query than LlamaIndex's bm25s ``BM25Retriever`` at
100k nodes); pass ``bm25=`` for any other retriever, LlamaIndex's included. It is built from the index's nodes:
from the docstore for stores that keep only vectors (``SimpleVectorStore``, the default), from the store itself
for stores that keep text (Chroma and others with ``get_nodes``), so it survives a restart without pickle and
follows inserts and deletes.

Fusion is the core's ``fuse`` (reciprocal rank fusion, ``rrf_k=60``, dedupe by node id) rather than
``QueryFusionRetriever``: the same ranking, without an LLM to configure (``QueryFusionRetriever`` wants one even
with ``num_queries=1``), with each result's per-side ranks, and with metadata filters applied to both sides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
)
from llama_index.core.vector_stores.types import MetadataFilters

from ctx_retrieval._names import in_memory_collection
from ctx_retrieval._optional import require
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.keys import BM25_RANK_KEY, FUSED_SCORE_KEY, RETRIEVAL_KEYS, VECTOR_RANK_KEY
from ctx_retrieval.retrieval.bm25 import resolve_tokenizer
from ctx_retrieval.retrieval.dense import cosine_collection
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K, fuse, side_weights
from ctx_retrieval.types import make_chunk_id

from .bm25 import BM25IndexRetriever

__all__ = ["ContextualHybridRetriever", "chroma_vector_store"]

DEFAULT_COLLECTION = "ctx_retrieval"


def chroma_vector_store(*, client: Any = None, persist_directory: str | Path | None = None,
                        collection_name: str = DEFAULT_COLLECTION) -> Any:
    """A ``ChromaVectorStore`` on ``client`` (any Chroma client: persistent, HTTP, ephemeral), on an embedded
    ``PersistentClient`` under ``persist_directory``, or in memory: nothing is written to disk unless you pass a
    folder or a client. Needs ``ctx-retrieval[llama-index-chroma]``."""
    require("llama_index.vector_stores.chroma", "llama-index-chroma")
    from llama_index.vector_stores.chroma import ChromaVectorStore

    if client is None and persist_directory is not None:
        from ctx_retrieval.retrieval.chroma import persistent_client

        client = persistent_client(persist_directory)
    elif client is None:
        chromadb = require("chromadb", "chroma")
        client = chromadb.EphemeralClient()
        collection_name = in_memory_collection(collection_name)  # in-memory clients share one process store
    collection = cosine_collection(client, collection_name)
    return ChromaVectorStore(chroma_collection=collection)


class ContextualHybridRetriever(BaseRetriever):
    """Contextual embeddings + contextual BM25, fused, optionally post-processed (reranked), cut to
    ``similarity_top_k``.

    Setup:
        pip install "ctx-retrieval[llama-index,local]"        # add llama-index-chroma for Chroma

    Key init args:
        index: a ``VectorStoreIndex`` over contextualized nodes, on any vector store.
        similarity_top_k: results returned (20); candidates: results taken from each side before fusion (150).
        weights: fusion weights, ``(vector, bm25)`` or ``{"vector": .., "bm25": ..}``; rrf_k: the RRF constant.
        filters: ``MetadataFilters`` applied to both sides.
        node_postprocessors: applied to the fused candidates before the cut (``ClaudeRerankPostprocessor``...).
        bm25: another keyword retriever (then it is yours to filter and keep in sync).

    Instantiate:
        .. code-block:: python

            retriever = ContextualHybridRetriever.from_defaults(nodes=nodes, embed_model=MiniLMEmbedding())
            retriever = ContextualHybridRetriever.from_defaults(index=index, similarity_top_k=5,
                                                                filters=MetadataFilters.from_dicts([...]))

    Use:
        .. code-block:: python

            results = retriever.retrieve("How did ACME's revenue change in Q2 2023?")   # NodeWithScore list
            results[0].score                         # fused, in (0, 1]: 1.0 = first on both sides
            results[0].node.metadata["vector_rank"], results[0].node.metadata["bm25_rank"]
            engine = RetrieverQueryEngine.from_args(retriever, llm=...)                # answering

    ``NodeWithScore.score`` is the RRF score divided by its maximum: 1.0 for a node ranked first on both sides,
    0.5 for a node first on one side and absent from the other (equal weights), falling slowly with rank (0.38
    at rank 100 on both sides), so ``SimilarityPostprocessor(similarity_cutoff=0.3)`` keeps the nodes both sides
    rank in their top 143 and those one side alone ranks in its top 41 (``rrf_k=60``).
    """

    def __init__(
        self,
        index: VectorStoreIndex,
        *,
        similarity_top_k: int = 20,
        candidates: int = 150,
        weights: Sequence[float] | Mapping[str, float] = (1.0, 1.0),
        rrf_k: int = DEFAULT_RRF_K,
        filters: MetadataFilters | None = None,
        node_postprocessors: Sequence[BaseNodePostprocessor] = (),
        bm25: BaseRetriever | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        bm25_tokenizer: str | Callable[[str], list[str]] = "identifiers",
        embed_layout: Literal["whole", "windows"] = "whole",
    ) -> None:
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        if embed_layout not in ("whole", "windows"):
            raise ConfigurationError(f"embed_layout must be 'whole' or 'windows', not {embed_layout!r}",
                                     setting="embed_layout")
        self.embed_layout = embed_layout
        self._parents: dict[str, BaseNode] = {}
        self.bm25_tokenizer = resolve_tokenizer(bm25_tokenizer)
        if similarity_top_k < 1 or candidates < 1:
            raise ConfigurationError(f"similarity_top_k and candidates must be >= 1 (got {similarity_top_k}, "
                                     f"{candidates})", setting="similarity_top_k")
        if filters is not None and not isinstance(filters, MetadataFilters):
            raise TypeError(f"filters must be llama_index MetadataFilters, not {type(filters).__name__}: "
                            "MetadataFilters.from_dicts([{'key': 'tenant', 'value': 'a'}])")
        self.index = index
        self.similarity_top_k = similarity_top_k
        self.candidates = candidates
        self.weights = side_weights(weights)
        self.rrf_k = rrf_k
        self.filters = filters
        self.node_postprocessors = list(node_postprocessors)
        self._fixed_bm25 = bm25 is not None
        self._given_nodes: dict[str, BaseNode] = {}
        self.bm25 = bm25
        self._wholes: dict[str, BaseNode] = {}  # windows layout: whole nodes by id, read at the last change
        self._refresh()

    # -- construction ------------------------------------------------------------------------------------

    @classmethod
    def from_defaults(
        cls,
        *,
        index: VectorStoreIndex | None = None,
        nodes: Sequence[BaseNode] | None = None,
        vector_store: Any = None,
        embed_model: Any = None,
        **kwargs: Any,
    ) -> ContextualHybridRetriever:
        """Over an existing ``index``, or a new one holding ``nodes`` (in memory unless ``vector_store`` is
        given), as LlamaIndex's retrievers are made."""
        if (index is None) == (nodes is None):
            raise ConfigurationError("pass exactly one of index= (an existing VectorStoreIndex) or nodes= (to index "
                                     "them)", setting="index")
        if index is not None:
            if vector_store is not None:
                raise ConfigurationError("vector_store= is for new indexes (with nodes=); an index has its store",
                                         setting="vector_store")
            return cls(index, **kwargs)
        return cls.from_nodes(nodes or [], vector_store=vector_store, embed_model=embed_model, **kwargs)

    @classmethod
    def from_nodes(cls, nodes: Sequence[BaseNode], *, vector_store: Any = None, embed_model: Any = None,
                   **kwargs: Any) -> ContextualHybridRetriever:
        """Index contextualized nodes into ``vector_store`` (LlamaIndex's in-memory ``SimpleVectorStore`` by
        default, as ``VectorStoreIndex(nodes)``) and BM25. Nodes are stored under a stable id (source, offset
        and text digest), so indexing the same nodes into a persistent store again replaces them instead of
        adding copies."""
        stable = [_with_stable_id(n) for n in nodes]
        windows = kwargs.get("embed_layout", "whole") == "windows"
        indexed = _children(stable, embed_model) if windows else stable
        if not windows:
            _warn_truncation(embed_model, stable)
        storage = StorageContext.from_defaults(vector_store=vector_store)
        index = VectorStoreIndex(indexed, storage_context=storage, embed_model=embed_model)
        retriever = cls(index, **kwargs)
        retriever._parents.update((n.node_id, n) for n in stable)
        if retriever._needs_given_nodes():
            retriever._given_nodes.update((n.node_id, n) for n in indexed)
        retriever._refresh()
        return retriever

    @classmethod
    def from_vector_store(cls, vector_store: Any, *, embed_model: Any = None,
                          **kwargs: Any) -> ContextualHybridRetriever:
        """Over an existing store that keeps its nodes' text (after a restart): BM25 is rebuilt from them."""
        return cls(VectorStoreIndex.from_vector_store(vector_store, embed_model=embed_model), **kwargs)

    # -- the nodes both sides hold -----------------------------------------------------------------------

    def _needs_given_nodes(self) -> bool:
        store = self.index.vector_store
        return bool(store.stores_text) and not hasattr(store, "get_nodes") and not self._fixed_bm25

    def stored_nodes(self) -> list[BaseNode]:
        """The index's nodes: from the docstore when the vector store keeps only vectors, from the store when it
        keeps text, otherwise the nodes given to this retriever; with ``embed_layout="windows"``, the whole nodes
        the stored children belong to."""
        rows = self._stored_rows()
        return _parents_of(rows, self._parents) if self.embed_layout == "windows" else rows

    def _stored_rows(self) -> list[BaseNode]:
        store = self.index.vector_store
        if not store.stores_text:
            node_ids = list(self.index.index_struct.nodes_dict.values())
            return list(self.index.docstore.get_nodes(node_ids, raise_error=False)) if node_ids else []
        if hasattr(store, "get_nodes"):
            try:
                return list(store.get_nodes(node_ids=None))
            except NotImplementedError:
                pass
        return list(self._given_nodes.values())

    def _build_bm25(self, nodes: Sequence[BaseNode]) -> BaseRetriever | None:
        if not nodes:
            return None
        return BM25IndexRetriever(nodes, similarity_top_k=self.candidates, filters=self.filters,
                                  tokenizer=self.bm25_tokenizer, callback_manager=self.callback_manager)

    # -- keeping both sides in sync ----------------------------------------------------------------------

    def insert_nodes(self, nodes: Sequence[BaseNode]) -> None:
        """Add (or replace, by stable id) nodes on both sides."""
        stable = [_with_stable_id(n) for n in nodes]
        embed_model = getattr(self.index, "_embed_model", None)
        indexed = _children(stable, embed_model) if self.embed_layout == "windows" else stable
        _warn_truncation(embed_model, indexed)
        self.index.insert_nodes(indexed)
        self._parents.update((n.node_id, n) for n in stable)
        if self._needs_given_nodes():
            self._given_nodes.update((n.node_id, n) for n in indexed)
        self._refresh()

    def delete_nodes(self, node_ids: Sequence[str]) -> None:
        """Delete nodes (by node id) from both sides."""
        wanted = list(node_ids)
        if self.embed_layout == "windows":
            parents = set(node_ids)
            wanted = [n.node_id for n in self._stored_rows() if _parent_id(n) in parents]
            for node_id in node_ids:
                self._parents.pop(node_id, None)
        self.index.delete_nodes(wanted, delete_from_docstore=True)
        for node_id in wanted:
            self._given_nodes.pop(node_id, None)
        self._refresh()

    def delete_ref_doc(self, ref_doc_id: str) -> None:
        """Delete a source document's nodes from both sides."""
        self.index.delete_ref_doc(ref_doc_id, delete_from_docstore=True)
        self._given_nodes = {i: n for i, n in self._given_nodes.items() if n.ref_doc_id != ref_doc_id}
        self._refresh()

    def _refresh(self) -> None:
        """Read the stored nodes once after a change: the built-in BM25 side, and the whole nodes the windows
        layout answers with."""
        if self._fixed_bm25 and self.embed_layout != "windows":
            return
        nodes = self.stored_nodes()
        if not self._fixed_bm25:
            self.bm25 = self._build_bm25(nodes)
        if self.embed_layout == "windows":
            self._wholes = {n.node_id: n for n in nodes}

    # -- retrieval ---------------------------------------------------------------------------------------

    def _vector_retriever(self) -> BaseRetriever:
        per_node = _WINDOWS_PER_NODE if self.embed_layout == "windows" else 1
        retriever = self.index.as_retriever(similarity_top_k=self.candidates * per_node, filters=self.filters)
        retriever.callback_manager = self.callback_manager  # as_retriever passes the index's own
        return retriever

    def _fuse(self, query_bundle: QueryBundle, dense: list[NodeWithScore],
              sparse: list[NodeWithScore]) -> list[NodeWithScore]:
        if self.embed_layout == "windows":  # children found: answer with their whole nodes
            dense = [NodeWithScore(node=self._wholes.get(_parent_id(n.node), n.node), score=n.score) for n in dense]
        nodes = {n.node.node_id: n.node for n in [*sparse, *dense]}  # the vector side's copy wins
        hits = fuse([[n.node.node_id for n in dense], [n.node.node_id for n in sparse]], rrf_k=self.rrf_k,
                    weights=self.weights, limit=self.candidates)
        results = [NodeWithScore(node=_annotated(nodes[hit.id], hit.score, *hit.ranks), score=hit.score)
                   for hit in hits]
        for postprocessor in self.node_postprocessors:
            results = postprocessor.postprocess_nodes(results, query_bundle=query_bundle)
        return results[: self.similarity_top_k]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        dense = self._vector_retriever().retrieve(query_bundle)
        sparse = self.bm25.retrieve(query_bundle) if self.bm25 is not None else []
        return self._fuse(query_bundle, dense, sparse)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        dense_task = self._vector_retriever().aretrieve(query_bundle)
        if self.bm25 is not None:
            dense, sparse = await asyncio.gather(dense_task, self.bm25.aretrieve(query_bundle))
        else:
            dense, sparse = await dense_task, []
        return self._fuse(query_bundle, dense, sparse)


_WINDOWS_PER_NODE = 4  # vector hits asked per candidate node in the windows layout, before deduplication


def _parent_id(node: BaseNode) -> str:
    parent = node.relationships.get(NodeRelationship.PARENT)
    return str(getattr(parent, "node_id", None) or node.node_id)


def _children(nodes: Sequence[BaseNode], embed_model: Any) -> list[BaseNode]:
    """Each node as the child nodes the vector store holds in the windows layout: ``<id>#w<n>``, each the same
    context (metadata) with one window of the text, pointing at the node as ``PARENT``."""
    from ctx_retrieval.keys import CONTEXT_KEY
    from ctx_retrieval.retrieval.layout import chunk_windows
    from ctx_retrieval.tokens import estimate_tokens

    counter = getattr(getattr(embed_model, "_embedder", None), "count_tokens", None) or estimate_tokens
    children: list[BaseNode] = []
    for node in nodes:
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        for n, part in enumerate(chunk_windows(text, node.metadata.get(CONTEXT_KEY), counter)):
            relationships = {**node.relationships, NodeRelationship.PARENT: RelatedNodeInfo(node_id=node.node_id)}
            children.append(node.model_copy(update={"id_": f"{node.node_id}#w{n}", "text": part,
                                                    "relationships": relationships, "embedding": None}))
    return children


def _parents_of(children: Sequence[BaseNode], known: dict[str, BaseNode]) -> list[BaseNode]:
    """The whole nodes of stored children: as given when this retriever indexed them, else rebuilt (after a
    restart) from the children's texts in order, joined on the spaces they were split at."""
    groups: dict[str, list[BaseNode]] = {}
    for child in children:
        groups.setdefault(_parent_id(child), []).append(child)
    parents = []
    for parent_id, members in groups.items():
        if parent_id in known:
            parents.append(known[parent_id])
            continue
        members.sort(key=lambda c: int(c.node_id.rsplit("#w", 1)[-1]) if "#w" in c.node_id else 0)
        relationships = {k: v for k, v in members[0].relationships.items() if k != NodeRelationship.PARENT}
        text = " ".join(m.get_content(metadata_mode=MetadataMode.NONE) for m in members)
        parents.append(members[0].model_copy(update={"id_": parent_id, "text": text, "relationships": relationships,
                                                     "embedding": None}))
    return parents


def _annotated(node: BaseNode, score: float, vector_rank: int | None, bm25_rank: int | None) -> BaseNode:
    """A copy of ``node`` carrying its fused score and per-side ranks in metadata, hidden from the embedding and
    the answering LLM (the stored node is not changed)."""
    metadata = {**node.metadata, FUSED_SCORE_KEY: score, VECTOR_RANK_KEY: vector_rank, BM25_RANK_KEY: bm25_rank}
    hidden = [k for k in RETRIEVAL_KEYS if k not in node.excluded_embed_metadata_keys]
    hidden_llm = [k for k in RETRIEVAL_KEYS if k not in node.excluded_llm_metadata_keys]
    return node.model_copy(update={
        "metadata": metadata,
        "excluded_embed_metadata_keys": [*node.excluded_embed_metadata_keys, *hidden],
        "excluded_llm_metadata_keys": [*node.excluded_llm_metadata_keys, *hidden_llm],
    })


def _warn_truncation(embed_model: Any, nodes: Sequence[BaseNode]) -> None:
    """One warning per indexing call, naming documents by file name, when the offline embedder truncates."""
    embedder = getattr(embed_model, "_embedder", None)
    if embedder is None or not hasattr(embedder, "warn_if_corpus_truncated") or not nodes:
        return
    embedder.warn_if_corpus_truncated([n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes],
                                      [_document_name(n) for n in nodes])


def _document_name(node: BaseNode) -> str:
    for key in ("file_name", "file_path", "source"):
        if node.metadata.get(key):
            return Path(str(node.metadata[key])).name
    return str(node.ref_doc_id or node.node_id)


def _with_stable_id(node: BaseNode) -> BaseNode:
    """A copy of ``node`` whose id derives from its source, offset and text (node parsers draw random ids, so the
    same chunk indexed twice would be two entries); nodes without a source keep their id."""
    source = node.ref_doc_id
    if source is None:
        return node
    start = getattr(node, "start_char_idx", None)
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    return node.model_copy(update={"id_": make_chunk_id(source, start if isinstance(start, int) else -1, text)})
