"""The vector store that keeps contextual BM25 beside any LangChain vector store: every write goes to both.

``ContextualVectorStore`` wraps the store you already use (Chroma, InMemoryVectorStore, pgvector...) and a core
``BM25Store``; it is a ``VectorStore``, so LangChain's own calls write through it: ``add_documents`` / ``add_texts``
/ ``delete`` (and async), and the indexing API, ``index(docs, record_manager, store, cleanup=...)``. The writes to
both sides are the core pairing's (``ctx_retrieval.retrieval.pairing``: the order, the journal, the windows); this
module converts documents to its records and does LangChain's I/O. Searches go to the wrapped store.

``ContextualBM25Retriever`` is the BM25 side alone, as a LangChain retriever.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from pydantic import ConfigDict, Field, field_validator

from ctx_retrieval._optional import require
from ctx_retrieval.adapting import counting_embedder
from ctx_retrieval.errors import ConfigurationError, InvalidInputError
from ctx_retrieval.keys import CHUNK_ID_KEY, CONTEXT_CHARS_KEY, CONTEXT_KEY, ORIGINAL_TEXT_KEY
from ctx_retrieval.retrieval.bm25_store import BM25Store, StoredEntry
from ctx_retrieval.retrieval.filters import compile_where
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
)
from ctx_retrieval.text import indexed_text
from ctx_retrieval.tokens import estimate_tokens

WHOLE_KEY = "ctx_whole_id"
"""On each window stored for a chunk (``embed_layout="windows"``): the id of the whole chunk it belongs to."""
WINDOW_KEY = "window"
WINDOWS_KEY = "ctx_windows"
Filter = Mapping[str, Any] | Callable[[Document], bool]
_OWNER = "langchain_ctx.Document/1"
_PAGE = 5000


def record(document: Document, id_: str | None = None) -> Record:
    """A contextualized document as the pairing's record: its text, metadata, and the document as the payload."""
    chosen = str(id_ or document.id or document.metadata.get(CHUNK_ID_KEY) or uuid.uuid4())
    payload = json.dumps({"page_content": document.page_content, "metadata": document.metadata, "id": chosen},
                         ensure_ascii=False, default=str).encode("utf-8", "surrogatepass")
    source = document.metadata.get("source")
    chunk = (str(document.metadata[ORIGINAL_TEXT_KEY]) if ORIGINAL_TEXT_KEY in document.metadata else
             document.page_content[int(document.metadata.get(CONTEXT_CHARS_KEY) or 0):])
    context = document.metadata.get(CONTEXT_KEY)
    return Record(chosen, document.page_content, chunk, context if isinstance(context, str) else None,
                  str(source) if source is not None else None, document.metadata, payload,
                  document.model_copy(update={"id": chosen}))


def decode(entry: StoredEntry) -> Document:
    data = json.loads(entry.payload.decode("utf-8", "surrogatepass"))
    return Document(page_content=data["page_content"], metadata=data["metadata"], id=data["id"])


def document_filter(chosen: Filter) -> Callable[[Document], bool]:
    """A predicate on documents for a ``where`` dict or a ``Document -> bool`` callable."""
    if callable(chosen):
        return chosen
    where = compile_where(chosen)
    return lambda document: where(document.metadata)


def _translate(chosen: Any) -> tuple[Mapping[str, Any] | None, Callable[[StoredEntry], bool] | None]:
    if isinstance(chosen, Mapping):
        return chosen, None
    if callable(chosen):
        return None, lambda entry: bool(chosen(decode(entry)))
    raise InvalidInputError(f"a filter is a where dict ({{'tenant': 'a'}}) or a Document -> bool callable, not "
                            f"{type(chosen).__name__}")


def bm25_side(store: BM25Store) -> BM25Side[Document]:
    """The BM25 store as a core hybrid side answering with documents, filtered by where dicts or callables."""
    return BM25Side(store, decode, translate=_translate)


def _row_document(row: Row) -> Document:
    document: Document = row.record.item
    if row.window is None:
        return document
    return Document(page_content=row.text, id=row.id, metadata={**document.metadata, WHOLE_KEY: row.record.id,
                                                                 WINDOW_KEY: row.window, WINDOWS_KEY: row.windows})


def _joined(rows: Iterable[Document]) -> dict[str, Record]:
    """Stored rows grouped back into whole chunks (a window's text is the context + one window of the chunk)."""
    groups: dict[str, list[Document]] = {}
    for row in rows:
        groups.setdefault(str(row.metadata.get(WHOLE_KEY) or row.id), []).append(row)
    out = {}
    for chunk_id, windows in groups.items():
        windows.sort(key=lambda w: int(w.metadata.get(WINDOW_KEY) or 0))
        metadata = {k: v for k, v in windows[0].metadata.items() if k not in (WINDOW_KEY, WHOLE_KEY, WINDOWS_KEY)}
        if len(windows) == 1:
            out[chunk_id] = record(Document(page_content=windows[0].page_content, metadata=metadata), chunk_id)
            continue
        context = metadata.get(CONTEXT_KEY)  # cleaned contexts hold no blank line: the first one ends the context
        chunk = " ".join(w.page_content.split("\n\n", 1)[-1] if context else w.page_content for w in windows)
        out[chunk_id] = record(Document(page_content=indexed_text(chunk, context), metadata=metadata), chunk_id)
    return out


class _Rows:
    """A LangChain vector store as the pairing writes it (rows as documents, under their row ids)."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store

    def facts(self) -> StoreFacts:
        if _is_chroma(self.store):
            from ctx_retrieval.retrieval.chroma import chroma_facts

            return chroma_facts(self.store._collection)  # type: ignore[attr-defined]
        return StoreFacts("memory") if isinstance(self.store, InMemoryVectorStore) else StoreFacts("unknown")

    def add_rows(self, rows: Sequence[Row]) -> None:
        self.store.add_documents([_row_document(r) for r in rows], ids=[r.id for r in rows])

    def delete_rows(self, ids: Sequence[str]) -> None:
        self.store.delete(ids=list(ids))

    async def aadd_rows(self, rows: Sequence[Row]) -> None:
        await self.store.aadd_documents([_row_document(r) for r in rows], ids=[r.id for r in rows])

    async def adelete_rows(self, ids: Sequence[str]) -> None:
        await self.store.adelete(ids=list(ids))


class _ReadableRows(_Rows):
    """A store that reads documents back by id (``get_by_ids``: Chroma, InMemoryVectorStore...)."""

    def records(self, chunk_ids: Sequence[str]) -> dict[str, Record]:
        if not chunk_ids:
            return {}
        found = self.store.get_by_ids([*chunk_ids, *(row_id(c, 0) for c in chunk_ids)])
        counts = {str(d.metadata.get(WHOLE_KEY)): int(d.metadata.get(WINDOWS_KEY) or 1) for d in found
                  if d.metadata.get(WHOLE_KEY)}
        more = [row_id(c, n) for c, count in counts.items() for n in range(1, count)]
        return _joined([*found, *(self.store.get_by_ids(more) if more else [])])


class _ListedRows(_ReadableRows):
    """A store that lists its documents too: ``InMemoryVectorStore`` (its dict), Chroma (a page at a time: one
    get of 100k rows fails)."""

    def iter_records(self) -> Iterator[Record]:
        memory = getattr(self.store, "store", None)
        if isinstance(memory, dict):
            rows = [Document(page_content=row["text"], metadata=dict(row.get("metadata") or {}), id=i)
                    for i, row in memory.items()]
            yield from _joined(rows).values()
            return
        offset = 0
        while True:
            stored = self.store.get(include=["documents", "metadatas"], limit=_PAGE, offset=offset)  # type: ignore[attr-defined]
            yield from _joined(Document(page_content=text or "", metadata=meta or {}, id=i) for i, text, meta in
                               zip(stored["ids"], stored["documents"], stored["metadatas"], strict=True)).values()
            if len(stored["ids"]) < _PAGE:
                return
            offset += _PAGE

    def searchable(self, ids: Sequence[str]) -> bool:
        from ctx_retrieval.retrieval.chroma import chroma_searchable

        collection = self.store._collection  # type: ignore[attr-defined]
        return collection is None or chroma_searchable(collection, ids)

    def count_rows(self) -> int:
        memory = getattr(self.store, "store", None)
        return len(memory) if isinstance(memory, dict) else int(self.store._collection.count())  # type: ignore[attr-defined]


def rows_for(store: VectorStore) -> _Rows:
    """The store's rows with what it can do: listed (InMemoryVectorStore, Chroma), read by id, or only written."""
    if isinstance(store, InMemoryVectorStore) or _is_chroma(store):
        return _ListedRows(store)
    if type(store).get_by_ids is not VectorStore.get_by_ids:
        return _ReadableRows(store)
    return _Rows(store)


def _is_chroma(store: VectorStore) -> bool:
    """Whether ``store`` is ``langchain_chroma.Chroma`` (never imported here: a store of it means it is)."""
    import sys

    module = sys.modules.get("langchain_chroma")
    return module is not None and isinstance(store, module.Chroma)


class Codec:
    """How the query guard reads a vector-side document: its chunk id, and the record BM25 would hold for it."""

    def chunk_id(self, item: Document) -> str:
        return str(item.metadata.get(WHOLE_KEY) or item.id or item.metadata.get(CHUNK_ID_KEY) or item.page_content)

    def record(self, item: Document) -> Record:
        return record(item, self.chunk_id(item))


class ContextualVectorStore(VectorStore):
    """Any LangChain vector store plus contextual BM25 beside it, written together (the core pairing).

    Key init args:
        inner: the vector store the vectors go to (searched as it is).
        bm25: a ``BM25Store`` or a folder for one (every process opening it sees the same index); by default
            the rule of ``ctx_retrieval.retrieval.pairing.bm25_beside``: on disk beside a persistent Chroma
            (``<persist_directory>/ctx_bm25/<collection>``), under the cache folder for a Chroma server, in memory
            beside an in-memory store (filled from it when empty).
        embed_layout: ``"whole"`` (default) or ``"windows"``: a chunk whose context + text overflow the embedder
            is stored in ``inner`` as several vectors (context + one window each, ids ``<id>#w<n>``, each naming
            its chunk under ``metadata["ctx_whole_id"]``); BM25 holds the whole chunk.
        tokenizer: the BM25 tokenizer (``"identifiers"`` default, ``"folded"``, ``"thai"``, ``"parts"``, a callable).
        also: more vector stores written with every chunk, each with its own embedding (a second embedder): the
            retriever fuses every store's ranking with BM25 (three-way fusion). Not with the windows layout.
        follow: others write to ``inner`` directly (LangChain's ``index()`` on the plain store): queries heal BM25
            from it (set by the retriever when it wraps a plain store).
        bm25_fill: when BM25 is empty beside a store that holds rows (a service on a second machine, with its own
            BM25 folder), it is filled from them once: ``"wait"`` (default) before the constructor returns, with a
            progress line a 10,000 rows; ``"background"`` on a thread, queries meanwhile answered by the vectors
            alone (said once) and writes waiting for it (``store.pairing.wait_filled()`` waits too).

    Use:
        .. code-block:: python

            store = ContextualVectorStore(Chroma(..., persist_directory="db"))       # BM25 in db/ctx_bm25/...
            index(chunks, SQLRecordManager(...), store, cleanup="incremental", source_id_key="source")
            ContextualHybridRetriever(vectorstore=store).invoke("How did ACME's revenue change in Q2 2023?")
    """

    def __init__(self, inner: VectorStore, bm25: BM25Store | str | Path | None = None, *,
                 embed_layout: Literal["whole", "windows"] = "whole",
                 tokenizer: str | Callable[[str], list[str]] = "identifiers", also: Sequence[VectorStore] = (),
                 follow: bool = False, bm25_fill: BM25Fill = "wait") -> None:
        if isinstance(inner, ContextualVectorStore):
            raise ConfigurationError("this store is already a ContextualVectorStore: use it as it is", setting="inner")
        self.inner = inner
        self.also = list(also)
        self.embed_layout = embed_layout
        embedder = counting_embedder(inner.embeddings)
        counter = embedder.count_tokens if embedder is not None else estimate_tokens
        self.pairing = Pairing.beside(rows_for(inner), bm25, tokenizer=tokenizer, owner={"items": _OWNER},
                                      layout=embed_layout, count_tokens=counter, follow=follow,
                                      also=[rows_for(s) for s in self.also], fill=bm25_fill)
        self.bm25 = self.pairing.bm25

    def __repr__(self) -> str:
        also = f", also={[type(s).__name__ for s in self.also]}" if self.also else ""
        return (f"ContextualVectorStore({type(self.inner).__name__}, {self.bm25!r}, embed_layout={self.embed_layout!r}"
                f"{also})")

    @property
    def embeddings(self) -> Any:
        return self.inner.embeddings

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return self.inner._select_relevance_score_fn()

    # -- writing both (the pairing's order) ------------------------------------------------------------------

    def _records(self, documents: Sequence[Document], ids: Sequence[str] | None) -> list[Record]:
        if ids is not None and len(ids) != len(documents):
            raise InvalidInputError(f"{len(ids)} ids for {len(documents)} documents: pass one id per document")
        return [record(d, str(ids[n]) if ids is not None else None) for n, d in enumerate(documents)]

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add (or replace, by id) documents in the vector store and BM25; ``ids=`` as LangChain's stores take."""
        return self.pairing.add(self._records(documents, kwargs.pop("ids", None)))

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        return await self.pairing.aadd(self._records(documents, kwargs.pop("ids", None)))

    def add_texts(self, texts: Iterable[str], metadatas: list[dict[Any, Any]] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        documents = [Document(page_content=t, metadata=m) for t, m in zip(texts, metadatas, strict=True)]
        return self.add_documents(documents, ids=ids, **kwargs)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete chunks by id from BM25 and then the vector store (``ids=None`` deletes nothing, as LangChain's)."""
        if not ids:
            return None
        self.pairing.delete([chunk_of(str(i)) for i in ids])
        return True

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        if not ids:
            return None
        await self.pairing.adelete([chunk_of(str(i)) for i in ids])
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The whole chunks stored under these ids (from BM25, which holds every chunk whole)."""
        return [decode(e) for e in self.bm25.get(ids).values()]

    def documents(self) -> list[Document]:
        """Every stored chunk, whole (reads the whole BM25 index)."""
        return [decode(e) for e in self.bm25.iter_entries()]

    def sync(self) -> SyncReport:
        """Reconcile BM25 with the vector store both ways (chunks written to or deleted from it directly, a write
        interrupted between the two): what was added and removed (``ctx_retrieval.retrieval.pairing.SyncReport``)."""
        return self.pairing.sync()

    # -- searching: the wrapped store's --------------------------------------------------------------------

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return self.inner.similarity_search(query, k=k, **kwargs)

    def similarity_search_with_score(self, *args: Any, **kwargs: Any) -> list[tuple[Document, float]]:
        return self.inner.similarity_search_with_score(*args, **kwargs)

    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, **kwargs: Any) -> list[Document]:
        return self.inner.similarity_search_by_vector(embedding, k=k, **kwargs)

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return await self.inner.asimilarity_search(query, k=k, **kwargs)

    def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5,
                                      **kwargs: Any) -> list[Document]:
        return self.inner.max_marginal_relevance_search(query, k=k, fetch_k=fetch_k, lambda_mult=lambda_mult,
                                                        **kwargs)

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Any, metadatas: list[dict[Any, Any]] | None = None, *,
                   ids: list[str] | None = None, **kwargs: Any) -> ContextualVectorStore:
        """Texts in a new ``InMemoryVectorStore`` with BM25 in memory (``bm25=`` a folder to keep it)."""
        store = cls(InMemoryVectorStore(embedding), **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store


class ContextualBM25Retriever(BaseRetriever):
    """Contextual BM25 alone (the core ``BM25Store``: identifier-splitting tokens), as a LangChain retriever.

    ``filter`` (per call, or in ``search_kwargs``) keeps only matching documents: a ``where`` dict as Chroma takes
    (``{"tenant": "a"}``, ``{"year": {"$gte": 2023}}``, ``$and``/``$or``) or a ``Document -> bool`` callable as
    ``InMemoryVectorStore`` takes; the best ``k`` among them are returned.

    Instantiate:
        .. code-block:: python

            bm25 = ContextualBM25Retriever.from_documents(contextual_chunks, k=150)      # in memory
            bm25 = ContextualBM25Retriever(store=BM25Store("db/ctx_bm25/chunks"), k=150)  # an index on disk
            bm25.invoke("DiffExecutor run_target", filter={"tenant": "a"})
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    store: BM25Store
    k: int = 4
    search_kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("search_kwargs")
    @classmethod
    def _only_filter(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = set(value) - {"filter"}
        if unknown:
            raise ConfigurationError(f"ContextualBM25Retriever search_kwargs takes only 'filter', not "
                                     f"{sorted(unknown)}",
                                     setting="search_kwargs")
        return value

    @classmethod
    def from_documents(cls, documents: Sequence[Document], *, k: int = 4, path: str | Path | None = None,
                       tokenizer: str | Callable[[str], list[str]] = "identifiers", **kwargs: Any
                       ) -> ContextualBM25Retriever:
        store = BM25Store(path, tokenizer=tokenizer)
        ids = [str(d.metadata.get(CHUNK_ID_KEY) or d.id or n) for n, d in enumerate(documents)]
        if len(set(ids)) != len(ids):
            ids = [str(n) for n in range(len(documents))]
        store.upsert(record(d, i).entry() for d, i in zip(documents, ids, strict=True))
        return cls(store=store, k=k, **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None,
        filter: Filter | None = None,  # noqa: A002 - LangChain's name for it
    ) -> list[Document]:
        chosen = filter if filter is not None else self.search_kwargs.get("filter")
        ranking = bm25_side(self.store).search(query, k or self.k, chosen)
        return ranking.items(range(len(ranking.keys)))


def new_store(embedding: Any, *, client: Any, persist_directory: str | Path | None, collection_name: str) -> Any:
    """A store for ``from_documents``: LangChain's ``InMemoryVectorStore`` unless a Chroma ``client`` or a
    ``persist_directory`` is given, then that Chroma collection (cosine)."""
    if client is None and persist_directory is None:
        from langchain_core.vectorstores import InMemoryVectorStore

        return InMemoryVectorStore(embedding)
    langchain_chroma = require("langchain_chroma", "langchain-chroma")
    from ctx_retrieval.retrieval.chroma import client_for

    where: dict[str, Any] = {"persist_directory": str(persist_directory)}  # as a plain Chroma reopens it
    if client is not None or persist_directory is None:
        chosen, collection_name = client_for(client, None, collection_name)
        where = {"client": chosen}
    return langchain_chroma.Chroma(collection_name=collection_name, embedding_function=embedding,
                                   collection_metadata={"hnsw:space": "cosine"}, **where)

