"""The vector store that keeps contextual BM25 beside any LlamaIndex vector store: every write goes to both.

``ContextualVectorStore`` wraps the store you already use (Chroma, ``SimpleVectorStore``, Qdrant...) and a core
``BM25Store`` (a folder, shared by every process that opens it). It is a ``BasePydanticVectorStore``, so
LlamaIndex's own calls write through it: ``VectorStoreIndex`` builds, ``insert_nodes`` / ``delete_nodes`` /
``delete_ref_doc``, and ``IngestionPipeline(vector_store=..., docstore=..., docstore_strategy=UPSERTS |
UPSERTS_AND_DELETE)``. BM25 holds exactly the nodes the vector store holds (whole nodes, the text the embedding
side sees), under the same ids; vector queries go to the wrapped store.

``BM25IndexRetriever`` is the BM25 side alone, as a LlamaIndex retriever.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import (
    BaseNode,
    MetadataMode,
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
)
from llama_index.core.storage.docstore.utils import doc_to_json, json_to_doc
from llama_index.core.vector_stores.simple import DEFAULT_VECTOR_STORE
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import build_metadata_filter_fn
from pydantic import PrivateAttr

from ctx_retrieval._names import in_memory_collection
from ctx_retrieval._optional import require
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store, StoredEntry
from ctx_retrieval.retrieval.dense import cosine_collection
from ctx_retrieval.retrieval.hybrid import BM25Side
from ctx_retrieval.types import make_chunk_id

__all__ = ["BM25IndexRetriever", "ContextualVectorStore", "bm25_side", "chroma_vector_store", "decode", "parent_id"]


def parent_id(node: BaseNode) -> str:
    """The whole node a stored node belongs to: its ``PARENT`` (a window, ``<id>#w<n>``), else itself."""
    parent = node.relationships.get(NodeRelationship.PARENT)
    return str(getattr(parent, "node_id", None) or node.node_id)


def encode(node: BaseNode, windows: int = 1) -> BM25Entry:
    """A node as a BM25 entry: the text the embedding side sees, its metadata, the node (no vector) as payload."""
    bare = node.model_copy(update={"embedding": None})
    payload = json.dumps({"node": doc_to_json(bare), "windows": windows}, ensure_ascii=False, default=str).encode()
    return BM25Entry(node.node_id, node.get_content(metadata_mode=MetadataMode.EMBED), ref=node.ref_doc_id,
                     metadata=node.metadata, payload=payload)


def decode(entry: StoredEntry) -> BaseNode:
    return json_to_doc(json.loads(entry.payload)["node"])


_WHERE = {FilterOperator.EQ: "$eq", FilterOperator.NE: "$ne", FilterOperator.GT: "$gt", FilterOperator.GTE: "$gte",
          FilterOperator.LT: "$lt", FilterOperator.LTE: "$lte", FilterOperator.IN: "$in", FilterOperator.NIN: "$nin"}


def where_of(filters: MetadataFilters) -> dict[str, Any] | None:
    """``MetadataFilters`` as a ``where`` dict the BM25 engine applies, or ``None`` when they use what it cannot
    (``NOT``, ``CONTAINS``, text match...): those are evaluated with LlamaIndex's own filter function."""
    parts: list[dict[str, Any]] = []
    for item in filters.filters:
        if isinstance(item, MetadataFilters):
            inner = where_of(item)
            if inner is None:
                return None
            parts.append(inner)
        elif isinstance(item, MetadataFilter) and item.operator in _WHERE:
            value: Any = item.value
            if item.operator in (FilterOperator.IN, FilterOperator.NIN):
                value = list(value) if isinstance(value, (list, tuple)) else [value]
            parts.append({item.key: {_WHERE[item.operator]: value}})
        else:
            return None
    condition = filters.condition or FilterCondition.AND
    if condition not in (FilterCondition.AND, FilterCondition.OR) or not parts:
        return None
    return parts[0] if len(parts) == 1 else {"$and" if condition == FilterCondition.AND else "$or": parts}


def _translate(filters: Any) -> tuple[Mapping[str, Any] | None, Callable[[StoredEntry], bool] | None]:
    if not isinstance(filters, MetadataFilters):
        raise TypeError(f"filters must be llama_index MetadataFilters, not {type(filters).__name__}: "
                        "MetadataFilters.from_dicts([{'key': 'tenant', 'value': 'a'}])")
    if not filters.filters:
        return None, None
    where = where_of(filters)
    if where is not None:
        return where, None
    keep = build_metadata_filter_fn(lambda metadata: metadata, filters)  # type: ignore[arg-type, return-value]
    return None, lambda entry: keep(decode(entry).metadata)  # type: ignore[arg-type]


def bm25_side(store: BM25Store) -> BM25Side[BaseNode]:
    """The BM25 store as a core hybrid side answering with nodes, filtered by ``MetadataFilters``."""
    return BM25Side(store, decode, translate=_translate)


def _wholes(nodes: Sequence[BaseNode]) -> list[tuple[BaseNode, int]]:
    """Each whole node of a write with its window count: a window child (``<id>#w<n>``, ``PARENT`` set) is grouped
    with its siblings and joined back into its whole node, on the spaces the text was split at."""
    groups: dict[str, list[BaseNode]] = {}
    for node in nodes:
        groups.setdefault(parent_id(node), []).append(node)
    out = []
    for whole_id, members in groups.items():
        if len(members) == 1 and members[0].node_id == whole_id:
            out.append((members[0], 1))
            continue
        members.sort(key=lambda c: int(c.node_id.rsplit("#w", 1)[-1]) if "#w" in c.node_id else 0)
        relationships = {k: v for k, v in members[0].relationships.items() if k != NodeRelationship.PARENT}
        text = " ".join(m.get_content(metadata_mode=MetadataMode.NONE) for m in members)
        out.append((members[0].model_copy(update={"id_": whole_id, "text": text, "relationships": relationships,
                                                  "embedding": None}), len(members)))
    return out


class ContextualVectorStore(BasePydanticVectorStore):
    """Any LlamaIndex vector store plus contextual BM25 beside it, written together.

    Key init args:
        inner: the vector store the vectors go to (queried as it is).
        bm25: a ``BM25Store``, a folder for one (every process opening it sees the same index), or ``None`` for
            one in memory.
        tokenizer: the BM25 tokenizer (``"identifiers"`` default, ``"parts"``, or a callable).

    Use:
        .. code-block:: python

            store = ContextualVectorStore(chroma_vector_store(persist_directory="db"), bm25="db/ctx_bm25/chunks")
            IngestionPipeline(transformations=[...], vector_store=store, docstore=docstore,
                              docstore_strategy=DocstoreStrategy.UPSERTS).run(documents=documents)
            ContextualHybridRetriever.from_vector_store(store, embed_model=...).retrieve("...")
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    inner: Any
    _bm25: BM25Store = PrivateAttr()

    def __init__(self, inner: BasePydanticVectorStore, bm25: BM25Store | str | Path | None = None, *,
                 tokenizer: str | Callable[[str], list[str]] = "identifiers") -> None:
        if isinstance(inner, ContextualVectorStore):
            raise ConfigurationError("this store is already a ContextualVectorStore: use it as it is", setting="inner")
        super().__init__(inner=inner, stores_text=inner.stores_text,  # type: ignore[call-arg]
                         is_embedding_query=inner.is_embedding_query)
        self._bm25 = bm25 if isinstance(bm25, BM25Store) else BM25Store(bm25, tokenizer=tokenizer)

    def __repr__(self) -> str:
        return f"ContextualVectorStore({type(self.inner).__name__}, {self._bm25!r})"

    @classmethod
    def class_name(cls) -> str:
        return "ContextualVectorStore"

    @property
    def bm25(self) -> BM25Store:
        return self._bm25

    @property
    def client(self) -> Any:
        return self.inner.client

    # -- writing both ------------------------------------------------------------------------------------

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        ids = self.inner.add(nodes, **kwargs)
        self._bm25.upsert(encode(node, windows) for node, windows in _wholes(nodes))
        return list(ids)

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        ids = await self.inner.async_add(nodes, **kwargs)
        await asyncio.to_thread(self._bm25.upsert, [encode(node, windows) for node, windows in _wholes(nodes)])
        return list(ids)

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        """Delete a source document's nodes from both."""
        self.inner.delete(ref_doc_id, **kwargs)
        self._bm25.delete_refs([ref_doc_id])

    async def adelete(self, ref_doc_id: str, **kwargs: Any) -> None:
        await self.inner.adelete(ref_doc_id, **kwargs)
        await asyncio.to_thread(self._bm25.delete_refs, [ref_doc_id])

    def rows(self, node_ids: Sequence[str]) -> list[str]:
        """The ids the wrapped store holds for these whole nodes (their windows, in the windows layout)."""
        stored = self._bm25.get(node_ids)
        rows = []
        for node_id in node_ids:
            windows = int(json.loads(stored[node_id].payload).get("windows", 1)) if node_id in stored else 1
            rows.extend([node_id] if windows == 1 else [f"{node_id}#w{n}" for n in range(windows)])
        return rows

    def delete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
                     **kwargs: Any) -> None:
        """Delete nodes by id (whole nodes: their windows go too) or by filters, from both."""
        if filters is not None:
            doomed = [n.node_id for n in self.get_nodes(node_ids=node_ids, filters=filters)]
            self.inner.delete_nodes(node_ids=node_ids, filters=filters, **kwargs)
            self._bm25.delete(doomed)
            return
        wanted = list(node_ids or [])
        if wanted:  # a window child's whole node goes from BM25 with it
            wholes = list(dict.fromkeys(re.sub(r"#w\d+$", "", i) for i in wanted))
            self.inner.delete_nodes(node_ids=list(dict.fromkeys([*wanted, *self.rows(wholes)])), **kwargs)
            self._bm25.delete(wholes)

    async def adelete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
                            **kwargs: Any) -> None:
        await asyncio.to_thread(self.delete_nodes, node_ids, filters, **kwargs)

    def clear(self) -> None:
        self.inner.clear()
        self._bm25.clear()

    async def aclear(self) -> None:
        await self.inner.aclear()
        await asyncio.to_thread(self._bm25.clear)

    # -- reading: vectors from the wrapped store, whole nodes from BM25 -----------------------------------------

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        result: VectorStoreQueryResult = self.inner.query(query, **kwargs)
        return result

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        result: VectorStoreQueryResult = await self.inner.aquery(query, **kwargs)
        return result

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        """Whole nodes, read from BM25 (which holds every node the store holds, without vectors)."""
        entries = self._bm25.entries() if node_ids is None else self._bm25.get(node_ids).values()
        nodes = [decode(e) for e in entries]
        if filters is not None and filters.filters:
            by_id = {n.node_id: n for n in nodes}
            keep = build_metadata_filter_fn(lambda i: by_id[i].metadata, filters)
            nodes = [n for n in nodes if keep(n.node_id)]
        return nodes

    def persist(self, persist_path: str, fs: Any = None) -> None:
        self.inner.persist(persist_path, fs=fs)

    def sync(self, nodes: Sequence[BaseNode]) -> int:
        """Backfill BM25 with the nodes of a store indexed before BM25 lived beside it (``nodes``: from the
        docstore or the store's ``get_nodes``); returns how many were missing."""
        have = set(self._bm25.ids())
        missing = [(n, w) for n, w in _wholes(nodes) if n.node_id not in have]
        self._bm25.upsert(encode(n, w) for n, w in missing)
        return len(missing)


class BM25IndexRetriever(BaseRetriever):
    """Contextual BM25 alone (the core ``BM25Store``: identifier-splitting tokens), best first.

    Nodes are indexed as ``node.get_content(metadata_mode=MetadataMode.EMBED)``, the text the embedding side
    sees, so a context stored in ``metadata["context"]`` by ``ContextualNodeTransform`` is searchable.
    ``filters`` (LlamaIndex ``MetadataFilters``) restrict the search to matching nodes with the same rules as
    LlamaIndex's ``SimpleVectorStore``: the best ``similarity_top_k`` among them.

    Use:
        .. code-block:: python

            bm25 = BM25IndexRetriever(nodes, similarity_top_k=150)             # in memory
            bm25 = BM25IndexRetriever(store=BM25Store("db/ctx_bm25/chunks"))     # an index on disk
            bm25.retrieve("DiffExecutor run_target")   # [NodeWithScore, ...]
    """

    def __init__(self, nodes: Sequence[BaseNode] = (), *, store: BM25Store | None = None, similarity_top_k: int = 10,
                 filters: MetadataFilters | None = None, tokenizer: str | Callable[[str], list[str]] = "identifiers",
                 callback_manager: CallbackManager | None = None, verbose: bool = False) -> None:
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        if similarity_top_k < 1:
            raise ConfigurationError("similarity_top_k must be >= 1", setting="similarity_top_k")
        if filters is not None:
            _translate(filters)
        self.store = store if store is not None else BM25Store(tokenizer=tokenizer)
        if nodes:
            self.store.upsert(encode(n, w) for n, w in _wholes(list(nodes)))
        self.similarity_top_k = similarity_top_k
        self.filters = filters

    def __repr__(self) -> str:
        return f"BM25IndexRetriever({self.store!r}, similarity_top_k={self.similarity_top_k})"

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        ranking = bm25_side(self.store).search(query_bundle.query_str, self.similarity_top_k, self.filters)
        nodes = ranking.items(range(len(ranking.keys)))
        return [NodeWithScore(node=n, score=s) for n, s in zip(nodes, ranking.results.scores, strict=True)]


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


def wrap_index(index: VectorStoreIndex, bm25_path: str | Path | None,
                tokenizer: str | Callable[[str], list[str]]) -> ContextualVectorStore:
    """The index's store as a ``ContextualVectorStore``: a plain one is wrapped (and the index made to write
    through the wrapper), its BM25 filled from the stored nodes if it is empty."""
    store = index.vector_store
    if isinstance(store, ContextualVectorStore):
        return store
    wrapped = ContextualVectorStore(store, bm25_path or beside(store), tokenizer=tokenizer)
    if not len(wrapped.bm25):
        wrapped.sync(stored_nodes_of(index, store))
    index.storage_context.add_vector_store(wrapped, namespace=DEFAULT_VECTOR_STORE)
    index._vector_store = wrapped  # the index writes through the wrapper from now on
    return wrapped


def stored_nodes_of(index: VectorStoreIndex, store: Any) -> list[BaseNode]:
    """The nodes of an index built before BM25 lived beside it: from the docstore when the store keeps only
    vectors, from the store when it can list them (Chroma...), else none."""
    if not store.stores_text:
        node_ids = list(index.index_struct.nodes_dict.values())
        return list(index.docstore.get_nodes(node_ids, raise_error=False)) if node_ids else []
    collection: Any = getattr(store, "client", None)
    if callable(getattr(store, "_get", None)) and callable(getattr(collection, "count", None)):
        # ChromaVectorStore: a page at a time (its get_nodes reads all in one call, which fails at 100k)
        total = int(collection.count())
        return [n for start in range(0, total, _PAGE) for n in store._get(_PAGE, {}, offset=start).nodes]
    try:
        return list(store.get_nodes(node_ids=None))
    except NotImplementedError:
        return []


def beside(store: Any) -> Path | None:
    """Where BM25 lives for a plain store: beside a persistent Chroma collection, else in memory."""
    collection = getattr(store, "client", None)
    client = getattr(collection, "_client", None)
    settings = getattr(client, "get_settings", None)
    name = getattr(collection, "name", None)
    if name and callable(settings) and settings().is_persistent and settings().persist_directory:
        return Path(settings().persist_directory) / "ctx_bm25" / str(name)
    return None


def window_children(nodes: Sequence[BaseNode], embed_model: Any) -> list[BaseNode]:
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


def warn_truncation(embed_model: Any, nodes: Sequence[BaseNode]) -> None:
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


def with_stable_id(node: BaseNode) -> BaseNode:
    """A copy of ``node`` whose id derives from its source, offset and text (node parsers draw random UUIDs, so the
    same chunk indexed twice would be two entries); nodes without a source, and ids that are not UUIDs (chosen
    by you), are kept."""
    source = node.ref_doc_id
    if source is None or not _is_uuid(node.node_id):
        return node
    start = getattr(node, "start_char_idx", None)
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    return node.model_copy(update={"id_": make_chunk_id(source, start if isinstance(start, int) else -1, text)})


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


_PAGE = 5000
