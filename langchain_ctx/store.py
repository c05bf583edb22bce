"""The vector store that keeps contextual BM25 beside any LangChain vector store: every write goes to both.

``ContextualVectorStore`` wraps the store you already use (Chroma, InMemoryVectorStore, pgvector...) and a core
``BM25Store`` (a folder, shared by every process that opens it). It is a ``VectorStore``, so LangChain's own
calls write through it: ``add_documents`` / ``add_texts`` / ``delete`` (and async), and the indexing API,
``index(docs, record_manager, store, cleanup="incremental" | "full")``. The BM25 side holds exactly the chunks the
vector store holds, under the same ids; searches go to the wrapped store.

``BM25IndexRetriever`` is the BM25 side alone, as a LangChain retriever.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, Field, field_validator

from ctx_retrieval._names import in_memory_collection
from ctx_retrieval._optional import require
from ctx_retrieval.errors import ConfigurationError, InvalidInputError
from ctx_retrieval.keys import CHUNK_ID_KEY, CONTEXT_KEY
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store, StoredEntry
from ctx_retrieval.retrieval.filters import compile_where
from ctx_retrieval.retrieval.hybrid import BM25Side

__all__ = ["BM25IndexRetriever", "ContextualVectorStore", "bm25_side", "decode", "document_filter"]

WHOLE_KEY = "ctx_whole_id"
"""On each window stored for a chunk (``embed_layout="windows"``): the id of the whole chunk it belongs to."""
WINDOW_KEY = "window"
Filter = Mapping[str, Any] | Callable[[Document], bool]


def encode(document: Document, id_: str, windows: int = 1) -> BM25Entry:
    """A document as a BM25 entry: its text, its metadata for filters, the document itself as the payload."""
    payload = json.dumps({"page_content": document.page_content, "metadata": document.metadata, "id": id_,
                          "windows": windows}, ensure_ascii=False, default=str).encode()
    source = document.metadata.get("source")
    return BM25Entry(id_, document.page_content, ref=str(source) if source is not None else None,
                     metadata=document.metadata, payload=payload)


def decode(entry: StoredEntry) -> Document:
    data = json.loads(entry.payload)
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


class ContextualVectorStore(VectorStore):
    """Any LangChain vector store plus contextual BM25 beside it, written together.

    Key init args:
        inner: the vector store the vectors go to (searched as it is).
        bm25: a ``BM25Store``, a folder for one (every process opening it sees the same index), or ``None`` for
            one in memory.
        embed_layout: ``"whole"`` (default) or ``"windows"``: a chunk whose context + text overflow the embedder
            is stored in ``inner`` as several vectors (context + one window each, ids ``<id>#w<n>``, each naming
            its chunk under ``metadata["ctx_whole_id"]``); BM25 holds the whole chunk.
        tokenizer: the BM25 tokenizer (``"identifiers"`` default, ``"parts"``, or a callable).
        also: more vector stores of the same kind written with every chunk, each with its own embedding (a second
            embedder, e.g. ``E5Embeddings`` beside ``MiniLMEmbeddings``): the retriever fuses every store's
            ranking with BM25 (three-way fusion). Not with the windows layout.

    Use:
        .. code-block:: python

            store = ContextualVectorStore(Chroma(..., persist_directory="db"), bm25="db/ctx_bm25/chunks")
            index(chunks, SQLRecordManager(...), store, cleanup="incremental", source_id_key="source")
            ContextualHybridRetriever(vectorstore=store).invoke("How did ACME's revenue change in Q2 2023?")
    """

    def __init__(self, inner: VectorStore, bm25: BM25Store | str | Path | None = None, *,
                 embed_layout: Literal["whole", "windows"] = "whole",
                 tokenizer: str | Callable[[str], list[str]] = "identifiers", also: Sequence[VectorStore] = ()) -> None:
        if isinstance(inner, ContextualVectorStore):
            raise ConfigurationError("this store is already a ContextualVectorStore: use it as it is", setting="inner")
        if embed_layout not in ("whole", "windows"):
            raise ConfigurationError(f"embed_layout must be 'whole' or 'windows', not {embed_layout!r}",
                                     setting="embed_layout")
        if also and embed_layout == "windows":
            raise ConfigurationError("also= (more vector stores) and the windows layout do not go together: each "
                                     "embedder would cut its own windows", setting="also")
        self.inner = inner
        self.also = list(also)
        self.bm25 = bm25 if isinstance(bm25, BM25Store) else BM25Store(bm25, tokenizer=tokenizer)
        self.embed_layout = embed_layout

    def __repr__(self) -> str:
        also = f", also={[type(s).__name__ for s in self.also]}" if self.also else ""
        return (f"ContextualVectorStore({type(self.inner).__name__}, {self.bm25!r}, embed_layout={self.embed_layout!r}"
                f"{also})")

    @property
    def embeddings(self) -> Any:
        return self.inner.embeddings

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return self.inner._select_relevance_score_fn()

    # -- writing both ------------------------------------------------------------------------------------

    def _prepare(self, documents: Sequence[Document], ids: Sequence[str] | None
                 ) -> tuple[list[Document], list[str], list[BM25Entry]]:
        """What goes to the vector store (documents or windows, with their ids) and to BM25, for one write."""
        if ids is not None and len(ids) != len(documents):
            raise InvalidInputError(f"{len(ids)} ids for {len(documents)} documents: pass one id per document")
        chosen = [str(i) for i in ids] if ids is not None else [
            str(d.id or d.metadata.get(CHUNK_ID_KEY) or uuid.uuid4()) for d in documents]
        if len(set(chosen)) != len(chosen):
            raise InvalidInputError("the documents repeat an id; each chunk is stored once under its id")
        if self.embed_layout == "whole":
            stored = [d.model_copy(update={"id": i}) for d, i in zip(documents, chosen, strict=True)]
            return stored, chosen, [encode(d, i) for d, i in zip(stored, chosen, strict=True)]
        rows: list[Document] = []
        entries = []
        for document, id_ in zip(documents, chosen, strict=True):
            windows = self._windows(document, id_)
            rows.extend(windows)
            entries.append(encode(document.model_copy(update={"id": id_}), id_, len(windows)))
        return rows, [str(r.id) for r in rows], entries

    def _windows(self, document: Document, id_: str) -> list[Document]:
        from ctx_retrieval.retrieval.layout import window_texts
        from ctx_retrieval.tokens import estimate_tokens

        from .transformer import original_text

        counter = getattr(getattr(self.embeddings, "embedder", None), "count_tokens", None) or estimate_tokens
        texts = window_texts(original_text(document), document.metadata.get(CONTEXT_KEY), counter)
        if len(texts) == 1:
            texts = [document.page_content]
        return [Document(page_content=text, id=f"{id_}#w{n}", metadata={**document.metadata, WHOLE_KEY: id_,
                                                                          WINDOW_KEY: n})
                for n, text in enumerate(texts)]

    def _stale_windows(self, ids: Sequence[str]) -> list[str]:
        """The window ids stored for these chunks (windows layout), read from BM25 (no listing of the store)."""
        stored = self.bm25.get(ids)
        return [f"{i}#w{n}" for i in ids if i in stored
                for n in range(int(json.loads(stored[i].payload).get("windows", 1)))]

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add (or replace, by id) documents in the vector store and BM25; ``ids=`` as LangChain's stores take."""
        rows, row_ids, entries = self._prepare(documents, kwargs.pop("ids", None))
        if self.embed_layout == "windows":  # a chunk replaced by fewer windows leaves none behind
            stale = sorted(set(self._stale_windows([e.id for e in entries])) - set(row_ids))
            if stale:
                self.inner.delete(ids=stale)
        self.inner.add_documents(rows, ids=row_ids, **kwargs)
        for store in self.also:
            store.add_documents(rows, ids=row_ids, **kwargs)
        self.bm25.upsert(entries)
        return [e.id for e in entries]

    async def aadd_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        rows, row_ids, entries = self._prepare(documents, kwargs.pop("ids", None))
        if self.embed_layout == "windows":
            stale = sorted(set(await asyncio.to_thread(self._stale_windows, [e.id for e in entries])) - set(row_ids))
            if stale:
                await self.inner.adelete(ids=stale)
        await self.inner.aadd_documents(rows, ids=row_ids, **kwargs)
        for store in self.also:
            await store.aadd_documents(rows, ids=row_ids, **kwargs)
        await asyncio.to_thread(self.bm25.upsert, entries)
        return [e.id for e in entries]

    def add_texts(self, texts: Iterable[str], metadatas: list[dict[Any, Any]] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        documents = [Document(page_content=t, metadata=m) for t, m in zip(texts, metadatas, strict=True)]
        return self.add_documents(documents, ids=ids, **kwargs)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete chunks by id from the vector store and BM25 (``ids=None`` deletes nothing, as LangChain's)."""
        if not ids:
            return None
        wanted = [str(i) for i in ids]
        rows = self._stale_windows(wanted) if self.embed_layout == "windows" else wanted
        result = self.inner.delete(ids=rows, **kwargs) if rows else True
        for store in self.also:
            store.delete(ids=rows, **kwargs)
        self.bm25.delete(wanted)
        return result

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        if not ids:
            return None
        wanted = [str(i) for i in ids]
        rows = await asyncio.to_thread(self._stale_windows, wanted) if self.embed_layout == "windows" else wanted
        result = await self.inner.adelete(ids=rows, **kwargs) if rows else True
        for store in self.also:
            await store.adelete(ids=rows, **kwargs)
        await asyncio.to_thread(self.bm25.delete, wanted)
        return result

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The whole chunks stored under these ids (from BM25, which holds every chunk whole)."""
        return [decode(e) for e in self.bm25.get(ids).values()]

    def documents(self) -> list[Document]:
        """Every stored chunk, whole (reads the whole BM25 index)."""
        return [decode(e) for e in self.bm25.entries()]

    def sync(self, stored: list[Document] | None = None) -> int:
        """Backfill BM25 from the vector store when it holds chunks BM25 does not (written to it directly, or
        before this wrapper existed); stores that list their documents only (Chroma, InMemoryVectorStore), or
        ``stored``, the store's documents as the caller listed them. Returns how many chunks were added."""
        stored = stored if stored is not None else list_documents(self.inner)
        if stored is None:
            raise TypeError(f"{type(self.inner).__name__} cannot list its documents, so BM25 cannot be filled from "
                            "it: add the chunks through this store (add_documents, or LangChain's index())")
        have = set(self.bm25.ids())
        if self.embed_layout == "windows":
            stored = whole_chunks(stored)
        missing = [d for d in stored if str(d.id) not in have]
        self.bm25.upsert(encode(d, str(d.id)) for d in missing)
        return len(missing)

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
        from langchain_core.vectorstores import InMemoryVectorStore

        store = cls(InMemoryVectorStore(embedding), **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store


def list_documents(store: Any) -> list[Document] | None:
    """Every document of a store that can list them (``InMemoryVectorStore``, Chroma), else ``None``."""
    memory = getattr(store, "store", None)
    if isinstance(memory, dict):  # InMemoryVectorStore
        return [Document(page_content=row["text"], metadata=dict(row.get("metadata") or {}), id=i)
                for i, row in memory.items()]
    getter = getattr(store, "get", None)
    if callable(getter):  # Chroma and the stores that copy its API, a page at a time (one get of 100k fails)
        out: list[Document] = []
        while True:
            stored = getter(include=["documents", "metadatas"], limit=_PAGE, offset=len(out))
            out.extend(Document(page_content=text or "", metadata=meta or {}, id=i) for i, text, meta in
                       zip(stored["ids"], stored["documents"], stored["metadatas"], strict=True))
            if len(stored["ids"]) < _PAGE:
                return out
    return None


_PAGE = 5000


class BM25IndexRetriever(BaseRetriever):
    """Contextual BM25 alone (the core ``BM25Store``: identifier-splitting tokens), as a LangChain retriever.

    ``filter`` (per call, or in ``search_kwargs``) keeps only matching documents: a ``where`` dict as Chroma takes
    (``{"tenant": "a"}``, ``{"year": {"$gte": 2023}}``, ``$and``/``$or``) or a ``Document -> bool`` callable as
    ``InMemoryVectorStore`` takes; the best ``k`` among them are returned.

    Instantiate:
        .. code-block:: python

            bm25 = BM25IndexRetriever.from_documents(contextual_chunks, k=150)      # in memory
            bm25 = BM25IndexRetriever(store=BM25Store("db/ctx_bm25/chunks"), k=150)  # an index on disk
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
            raise ConfigurationError(f"BM25IndexRetriever search_kwargs takes only 'filter', not {sorted(unknown)}",
                                     setting="search_kwargs")
        return value

    @classmethod
    def from_documents(cls, documents: Sequence[Document], *, k: int = 4, path: str | Path | None = None,
                       tokenizer: str | Callable[[str], list[str]] = "identifiers", **kwargs: Any
                       ) -> BM25IndexRetriever:
        store = BM25Store(path, tokenizer=tokenizer)
        ids = [str(d.metadata.get(CHUNK_ID_KEY) or d.id or n) for n, d in enumerate(documents)]
        if len(set(ids)) != len(ids):
            ids = [str(n) for n in range(len(documents))]
        store.upsert(encode(d, i) for d, i in zip(documents, ids, strict=True))
        return cls(store=store, k=k, **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None,
        filter: Filter | None = None,  # noqa: A002 - LangChain's name for it
    ) -> list[Document]:
        chosen = filter if filter is not None else self.search_kwargs.get("filter")
        ranking = bm25_side(self.store).search(query, k or self.k, chosen)
        return ranking.items(range(len(ranking.keys)))


def whole_chunks(rows: list[Document], whole_key: str = WHOLE_KEY) -> list[Document]:
    """Stored windows grouped back into whole chunks (a chunk stored whole is its own window 0)."""
    from ctx_retrieval.text import indexed_text

    groups: dict[str, list[Document]] = {}
    for row in rows:
        groups.setdefault(str(row.metadata.get(whole_key) or row.id), []).append(row)
    wholes = []
    for chunk_id, windows in groups.items():
        windows.sort(key=lambda w: int(w.metadata.get(WINDOW_KEY) or 0))
        metadata = {k: v for k, v in windows[0].metadata.items() if k not in (WINDOW_KEY, whole_key)}
        if len(windows) == 1:
            wholes.append(Document(page_content=windows[0].page_content, metadata=metadata, id=chunk_id))
            continue
        context = metadata.get(CONTEXT_KEY)  # cleaned contexts hold no blank line: the first one ends the context
        chunk = " ".join(w.page_content.split("\n\n", 1)[-1] if context else w.page_content for w in windows)
        wholes.append(Document(page_content=indexed_text(chunk, context), metadata=metadata, id=chunk_id))
    return wholes


def beside(store: Any) -> Path | None:
    """Where BM25 lives for a plain store: beside a persistent Chroma collection, else in memory."""
    client, name = getattr(store, "_client", None), getattr(store, "_collection_name", None)
    settings = getattr(client, "get_settings", None)
    if name and callable(settings) and settings().is_persistent and settings().persist_directory:
        return Path(settings().persist_directory) / "ctx_bm25" / str(name)
    return None


def chroma_store(embedding: Any, *, client: Any, persist_directory: str | Path | None, collection_name: str) -> Any:
    langchain_chroma = require("langchain_chroma", "langchain-chroma")
    kwargs: dict[str, Any] = {"collection_name": collection_name, "embedding_function": embedding,
                              "collection_metadata": {"hnsw:space": "cosine"}}
    if client is not None:
        kwargs["client"] = client
    elif persist_directory is not None:
        kwargs["persist_directory"] = str(persist_directory)
    else:  # in memory: in-memory clients share one store per process, so each retriever gets its own collection
        kwargs["collection_name"] = in_memory_collection(collection_name)
    return langchain_chroma.Chroma(**kwargs)
