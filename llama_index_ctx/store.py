"""The vector store that keeps contextual BM25 beside any LlamaIndex vector store: every write goes to both.

``ContextualVectorStore`` wraps the store you already use (Chroma, ``SimpleVectorStore``, Qdrant...) and a core
``BM25Store``; it is a ``BasePydanticVectorStore``, so LlamaIndex's own calls write through it: ``VectorStoreIndex``
builds, ``insert_nodes`` / ``delete_nodes`` / ``delete_ref_doc``, and ``IngestionPipeline(vector_store=...,
docstore=..., docstore_strategy=UPSERTS | UPSERTS_AND_DELETE)``. The writes to both sides are the core pairing's
(``ctx_retrieval.retrieval.pairing``: the order, the journal, the windows); this module converts nodes to its records
and does LlamaIndex's I/O. Vector queries go to the wrapped store.

``ContextualBM25Retriever`` is the BM25 side alone, as a LlamaIndex retriever.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

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
from llama_index.core.vector_stores.simple import SimpleVectorStore
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

from ctx_retrieval._optional import require
from ctx_retrieval.adapting import counting_embedder, file_name, stable_id, warn_truncated
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.keys import CONTEXT_KEY
from ctx_retrieval.retrieval.bm25_store import BM25Store, StoredEntry
from ctx_retrieval.retrieval.dense import cosine_collection
from ctx_retrieval.retrieval.hybrid import BM25Side
from ctx_retrieval.retrieval.pairing import (
    BM25Fill,
    Pairing,
    Record,
    Row,
    StoreFacts,
    SyncReport,
    chunk_of,
    row_id,
    window_of,
)
from ctx_retrieval.tokens import estimate_tokens

_OWNER = "llama_index_ctx.Node/1"
_PAGE = 5000
_MAX_WINDOWS = 64  # windows asked for when a chunk is read back from a store (a 256-token input cut at 48 each: 6)


def parent_id(node: BaseNode) -> str:
    """The whole node a stored node belongs to: its ``PARENT`` (a window, ``<id>#w<n>``), else itself."""
    parent = node.relationships.get(NodeRelationship.PARENT)
    return str(getattr(parent, "node_id", None) or node.node_id)


def record(node: BaseNode) -> Record:
    """A whole node as the pairing's record: the text the embedding side sees, its metadata, the node (no vector)
    as the payload."""
    bare = node.model_copy(update={"embedding": None})
    payload = json.dumps({"node": doc_to_json(bare)}, ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")
    context = node.metadata.get(CONTEXT_KEY)
    return Record(node.node_id, node.get_content(metadata_mode=MetadataMode.EMBED),
                  node.get_content(metadata_mode=MetadataMode.NONE), context if isinstance(context, str) else None,
                  node.ref_doc_id, node.metadata, payload, node)


def decode(entry: StoredEntry) -> BaseNode:
    return json_to_doc(json.loads(entry.payload.decode("utf-8", "surrogatepass"))["node"])


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


def _grouped(nodes: Sequence[BaseNode]) -> tuple[list[Record], list[Row]]:
    """A write's records (whole nodes: a window child ``<id>#w<n>``, ``PARENT`` set, joined with its siblings on
    the spaces the text was cut at) and its rows (the nodes as given, embedded by the framework)."""
    groups: dict[str, list[BaseNode]] = {}
    for node in nodes:
        groups.setdefault(parent_id(node), []).append(node)
    records, rows = [], []
    for whole_id, members in groups.items():
        if len(members) == 1 and members[0].node_id == whole_id:
            records.append(record(members[0]))
            rows.append(Row(whole_id, records[-1].text, records[-1], item=members[0]))
            continue
        members.sort(key=lambda c: window_of(c.node_id))
        relationships = {k: v for k, v in members[0].relationships.items() if k != NodeRelationship.PARENT}
        text = " ".join(m.get_content(metadata_mode=MetadataMode.NONE) for m in members)
        records.append(record(members[0].model_copy(update={"id_": whole_id, "text": text,
                                                            "relationships": relationships, "embedding": None})))
        rows.extend(Row(m.node_id, m.get_content(metadata_mode=MetadataMode.EMBED), records[-1], window_of(m.node_id),
                        len(members), m) for m in members)
    return records, rows


class _Rows:
    """A LlamaIndex vector store as the pairing writes it: rows are the nodes the framework embedded; a source
    document's nodes go with the store's own ``delete(ref_doc_id)``."""

    def __init__(self, store: BasePydanticVectorStore, docstore: Any = None) -> None:
        self.store = store
        self.docstore = docstore

    def facts(self) -> StoreFacts:
        collection = _chroma_collection(self.store)
        if collection is not None:
            from ctx_retrieval.retrieval.chroma import chroma_facts

            return chroma_facts(collection)
        return StoreFacts("memory") if isinstance(self.store, SimpleVectorStore) else StoreFacts("unknown")

    def add_rows(self, rows: Sequence[Row]) -> None:
        self.store.add([_row_node(r) for r in rows])

    def delete_rows(self, ids: Sequence[str]) -> None:
        self.store.delete_nodes(node_ids=list(ids))

    def delete_refs(self, refs: Sequence[str]) -> None:
        for ref in refs:
            self.store.delete(ref)

    async def aadd_rows(self, rows: Sequence[Row]) -> None:
        await self.store.async_add([_row_node(r) for r in rows])

    async def adelete_rows(self, ids: Sequence[str]) -> None:
        await self.store.adelete_nodes(node_ids=list(ids))

    async def adelete_refs(self, refs: Sequence[str]) -> None:
        for ref in refs:
            await self.store.adelete(ref)


class _ListedRows(_Rows):
    """A store that reads nodes back and lists them: Chroma (a page at a time: its ``get_nodes`` reads all in one
    call, which fails at 100k), or a store without text whose nodes an index's docstore holds."""

    def _nodes(self, ids: list[str] | None = None, *, offset: int = 0) -> list[BaseNode]:
        if self.docstore is not None and not self.store.stores_text:
            wanted = ids if ids is not None else list(self.docstore.docs)[offset:offset + _PAGE]
            return list(self.docstore.get_nodes(wanted, raise_error=False))
        if ids is not None:
            return list(self.store.get_nodes(node_ids=ids)) if ids else []
        return list(self.store._get(_PAGE, {}, offset=offset).nodes)  # type: ignore[attr-defined]

    def records(self, chunk_ids: Sequence[str]) -> dict[str, Record]:
        wanted = [*chunk_ids, *(row_id(c, n) for c in chunk_ids for n in range(_MAX_WINDOWS))] if chunk_ids else []
        records, _ = _grouped(self._nodes(wanted))
        return {r.id: r for r in records if r.id in set(chunk_ids)}

    def iter_records(self) -> Iterator[Record]:
        offset = 0
        while True:
            page = self._nodes(offset=offset)
            yield from _grouped(page)[0]
            if len(page) < _PAGE:
                return
            offset += _PAGE

    def searchable(self, ids: Sequence[str]) -> bool:
        from ctx_retrieval.retrieval.chroma import chroma_searchable

        collection = _chroma_collection(self.store)
        return collection is None or chroma_searchable(collection, ids)

    def count_rows(self) -> int:
        if self.docstore is not None and not self.store.stores_text:
            return len(self.docstore.docs)
        collection = _chroma_collection(self.store)
        return int(collection.count()) if collection is not None else 0


def _row_node(row: Row) -> BaseNode:
    node: BaseNode = row.item if row.item is not None else row.record.item
    return node


def _chroma_collection(store: Any) -> Any:
    import sys

    module = sys.modules.get("llama_index.vector_stores.chroma")
    return store._collection if module is not None and isinstance(store, module.ChromaVectorStore) else None


def rows_for(store: BasePydanticVectorStore, docstore: Any = None) -> _Rows:
    listed = _chroma_collection(store) is not None or (docstore is not None and not store.stores_text)
    return _ListedRows(store, docstore) if listed else _Rows(store, docstore)


class Codec:
    """How the query guard reads a vector-side node: its chunk id, and the record BM25 would hold for it."""

    def chunk_id(self, item: BaseNode) -> str:
        return parent_id(item)

    def record(self, item: BaseNode) -> Record:
        return record(item)


class ContextualVectorStore(BasePydanticVectorStore):
    """Any LlamaIndex vector store plus contextual BM25 beside it, written together (the core pairing).

    Key init args:
        inner: the vector store the vectors go to (queried as it is).
        bm25: a ``BM25Store`` or a folder for one; by default the rule of
            ``ctx_retrieval.retrieval.pairing.bm25_beside`` (beside a persistent Chroma, under the cache folder for
            a Chroma server, in memory beside an in-memory store).
        tokenizer: the BM25 tokenizer (``"identifiers"`` default, ``"folded"``, ``"thai"``, ``"parts"``, a callable).
        embed_layout: ``"windows"`` when nodes are written as window children (``ContextualHybridRetriever`` with
            ``embed_layout="windows"`` writes them so).
        follow: others write to ``inner`` directly: queries heal BM25 from it (set by the retriever when it wraps
            a plain store); docstore: where a store without text (``SimpleVectorStore``) finds its nodes.
        bm25_fill: when BM25 is empty beside a store that holds rows (a service on a second machine, with its own
            BM25 folder), it is filled from them once: ``"wait"`` (default) before the constructor returns, with a
            progress line a 10,000 rows; ``"background"`` on a thread, queries meanwhile answered by the vectors
            alone (said once) and writes waiting for it (``store.pairing.wait_filled()`` waits too).

    Use:
        .. code-block:: python

            store = ContextualVectorStore(chroma_vector_store(persist_directory="db"))   # BM25 in db/ctx_bm25/...
            IngestionPipeline(transformations=[...], vector_store=store, docstore=docstore,
                              docstore_strategy=DocstoreStrategy.UPSERTS).run(documents=documents)
            ContextualHybridRetriever.from_vector_store(store, embed_model=...).retrieve("...")
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    inner: Any
    _pairing: Pairing = PrivateAttr()

    def __init__(self, inner: BasePydanticVectorStore, bm25: BM25Store | str | Path | None = None, *,
                 tokenizer: str | Callable[[str], list[str]] = "identifiers",
                 embed_layout: Literal["whole", "windows"] = "whole", follow: bool = False, docstore: Any = None,
                 count_tokens: Callable[[str], int] | None = None, bm25_fill: BM25Fill = "wait") -> None:
        if isinstance(inner, ContextualVectorStore):
            raise ConfigurationError("this store is already a ContextualVectorStore: use it as it is", setting="inner")
        super().__init__(inner=inner, stores_text=inner.stores_text,  # type: ignore[call-arg]
                         is_embedding_query=inner.is_embedding_query)
        self._pairing = Pairing.beside(rows_for(inner, docstore), bm25, tokenizer=tokenizer, owner={"items": _OWNER},
                                       layout=embed_layout, count_tokens=count_tokens or estimate_tokens,
                                       follow=follow, fill=bm25_fill)

    def __repr__(self) -> str:
        return f"ContextualVectorStore({type(self.inner).__name__}, {self.bm25!r})"

    @classmethod
    def class_name(cls) -> str:
        return "ContextualVectorStore"

    @property
    def bm25(self) -> BM25Store:
        return self._pairing.bm25

    @property
    def pairing(self) -> Pairing:
        return self._pairing

    @property
    def client(self) -> Any:
        return self.inner.client

    def add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        records, rows = _grouped(nodes)
        self._pairing.add(records, rows)
        return [n.node_id for n in nodes]

    async def async_add(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[str]:
        records, rows = _grouped(nodes)
        await self._pairing.aadd(records, rows)
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        """Delete a source document's nodes from BM25, then from the vector store."""
        self._pairing.delete_refs([ref_doc_id])

    async def adelete(self, ref_doc_id: str, **kwargs: Any) -> None:
        await self._pairing.adelete_refs([ref_doc_id])

    def delete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
                     **kwargs: Any) -> None:
        """Delete nodes by id (whole nodes: their windows go too) or by filters, from both."""
        if filters is not None:
            wanted = [n.node_id for n in self.get_nodes(node_ids=node_ids, filters=filters)]
        else:
            wanted = list(dict.fromkeys(chunk_of(i) for i in node_ids or []))
        if wanted:
            self._pairing.delete(wanted)

    async def adelete_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None,
                            **kwargs: Any) -> None:
        if filters is not None:
            wanted = [n.node_id for n in self.get_nodes(node_ids=node_ids, filters=filters)]
        else:
            wanted = list(dict.fromkeys(chunk_of(i) for i in node_ids or []))
        if wanted:
            await self._pairing.adelete(wanted)

    def clear(self) -> None:
        self._pairing.delete(self.bm25.ids())
        self.inner.clear()  # rows BM25 never held (written to the store directly) go too

    async def aclear(self) -> None:
        await self._pairing.adelete(self.bm25.ids())
        await self.inner.aclear()

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        result: VectorStoreQueryResult = self.inner.query(query, **kwargs)
        return result

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        result: VectorStoreQueryResult = await self.inner.aquery(query, **kwargs)
        return result

    def get_nodes(self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None) -> list[BaseNode]:
        """Whole nodes, read from BM25 (which holds every node the store holds, without vectors)."""
        entries = self.bm25.iter_entries() if node_ids is None else self.bm25.get(node_ids).values()
        nodes = [decode(e) for e in entries]
        if filters is not None and filters.filters:
            by_id = {n.node_id: n for n in nodes}
            keep = build_metadata_filter_fn(lambda i: by_id[i].metadata, filters)
            nodes = [n for n in nodes if keep(n.node_id)]
        return nodes

    def persist(self, persist_path: str, fs: Any = None) -> None:
        self.inner.persist(persist_path, fs=fs)

    def sync(self) -> SyncReport:
        """Reconcile BM25 with the vector store both ways (nodes written to or deleted from it directly, a write
        interrupted between the two): what was added and removed."""
        return self._pairing.sync()


class ContextualBM25Retriever(BaseRetriever):
    """Contextual BM25 alone (the core ``BM25Store``: identifier-splitting tokens), best first.

    Nodes are indexed as ``node.get_content(metadata_mode=MetadataMode.EMBED)``, the text the embedding side
    sees, so a context stored in ``metadata["context"]`` by ``ContextualNodeTransform`` is searchable.
    ``filters`` (LlamaIndex ``MetadataFilters``) restrict the search to matching nodes with the same rules as
    LlamaIndex's ``SimpleVectorStore``: the best ``similarity_top_k`` among them.

    Use:
        .. code-block:: python

            bm25 = ContextualBM25Retriever(nodes, similarity_top_k=150)             # in memory
            bm25 = ContextualBM25Retriever(store=BM25Store("db/ctx_bm25/chunks"))     # an index on disk
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
            records, _ = _grouped(list(nodes))
            self.store.upsert(r.entry() for r in records)
        self.similarity_top_k = similarity_top_k
        self.filters = filters

    def __repr__(self) -> str:
        return f"ContextualBM25Retriever({self.store!r}, similarity_top_k={self.similarity_top_k})"

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

    from ctx_retrieval.retrieval.chroma import client_for

    return ChromaVectorStore(chroma_collection=cosine_collection(*client_for(client, persist_directory,
                                                                             collection_name)))


def wrap_index(index: VectorStoreIndex, bm25: BM25Store | str | Path | None,
               tokenizer: str | Callable[[str], list[str]],
               embed_layout: Literal["whole", "windows"]) -> ContextualVectorStore:
    """The index's store as a ``ContextualVectorStore``: a plain one is wrapped and followed (its BM25 filled from
    the stored nodes when empty, healed from what others write to it), and the index made to write through it."""
    from llama_index.core.vector_stores.simple import DEFAULT_VECTOR_STORE

    store = index.vector_store
    if isinstance(store, ContextualVectorStore):
        return store
    wrapped = ContextualVectorStore(store, bm25, tokenizer=tokenizer, embed_layout=embed_layout, follow=True,
                                    docstore=index.docstore, count_tokens=token_counter(index._embed_model))
    index.storage_context.add_vector_store(wrapped, namespace=DEFAULT_VECTOR_STORE)
    index._vector_store = wrapped  # the index writes through the wrapper from now on
    return wrapped


def window_children(store: ContextualVectorStore, nodes: Sequence[BaseNode]) -> list[BaseNode]:
    """Each node as the rows the pairing lays out for it: itself, or in the windows layout child nodes
    ``<id>#w<n>`` (the same context, one window of the text each, the node as ``PARENT``)."""
    children: list[BaseNode] = []
    for row in store.pairing.rows([record(n) for n in nodes]):
        node: BaseNode = row.record.item
        if row.window is None:
            children.append(node)
            continue
        relationships = {**node.relationships, NodeRelationship.PARENT: RelatedNodeInfo(node_id=node.node_id)}
        children.append(node.model_copy(update={"id_": row.id, "text": row.part, "relationships": relationships,
                                                "embedding": None}))
    return children


def indexable(store: ContextualVectorStore, nodes: Sequence[BaseNode], embed_model: Any) -> list[BaseNode]:
    """``nodes`` as an index writes them into ``store``: under stable ids, as the rows the pairing lays out (window
    children in the windows layout), with one warning if the embedder would truncate a row."""
    rows = window_children(store, [with_stable_id(n) for n in nodes])
    warn_truncation(embed_model, rows)
    return rows


def warn_truncation(embed_model: Any, nodes: Sequence[BaseNode]) -> None:
    """One warning per indexing call, naming documents by file name, when the offline embedder truncates."""
    warn_truncated(embed_model, [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes],
                   [file_name(n.metadata, str(n.ref_doc_id or n.node_id)) for n in nodes])


def with_stable_id(node: BaseNode) -> BaseNode:
    """A copy of ``node`` whose id derives from its source, offset and text when a node parser drew a random UUID
    (``ctx_retrieval.adapting.stable_id``)."""
    start = getattr(node, "start_char_idx", None)
    chosen = stable_id(node.node_id, node.ref_doc_id, start if isinstance(start, int) else None,
                       node.get_content(metadata_mode=MetadataMode.NONE))
    return node if chosen == node.node_id else node.model_copy(update={"id_": chosen})


def token_counter(embed_model: Any) -> Callable[[str], int] | None:
    """The embedding model's own token counter (the offline embedders'), for the windows layout."""
    embedder = counting_embedder(embed_model)
    return embedder.count_tokens if embedder is not None else None

