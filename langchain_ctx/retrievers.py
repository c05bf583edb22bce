"""Contextual hybrid retrieval for LangChain: BM25 + any vector store, fused by reciprocal rank fusion.

The BM25 side is the core's numpy index (``BM25IndexRetriever``): it ranks like bm25s and answers in well under a
millisecond where rank-bm25 takes tens to hundreds (see ``benchmarks/bm25_backends.py``), it needs no
``langchain-community`` (which is being sunset), and it is built from the vector store's stored documents where
the store can list them (``InMemoryVectorStore``, Chroma), otherwise from the documents added through the
retriever, so it stays in sync when documents are added or deleted. Any other LangChain retriever, such as
community's ``BM25Retriever``, can be passed as ``bm25`` instead.

Fusion is the core's ``fuse``: the ranking ``EnsembleRetriever`` gives (same formula, same tie order, checked by
a test), plus what it does not give: the fused score and each side's rank on every result, and a metadata filter
applied to both sides (``EnsembleRetriever`` passes no filter to its retrievers).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from ctx_retrieval._names import in_memory_collection
from ctx_retrieval._optional import require
from ctx_retrieval.errors import ConfigurationError, InvalidInputError
from ctx_retrieval.keys import (
    BM25_RANK_KEY,
    CHUNK_ID_KEY,
    CONTEXT_KEY,
    FUSED_SCORE_KEY,
    VECTOR_RANK_KEY,
)
from ctx_retrieval.retrieval.bm25 import BM25Index, resolve_tokenizer
from ctx_retrieval.retrieval.filters import compile_where
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K, fuse, side_weights

__all__ = ["BM25IndexRetriever", "ContextualHybridRetriever"]

DEFAULT_COLLECTION = "ctx_retrieval"
Filter = Mapping[str, Any] | Callable[[Document], bool]


class BM25IndexRetriever(BaseRetriever):
    """BM25 over ``page_content`` (context + chunk) with the core index and its identifier-splitting tokenizer.

    ``filter`` (per call, or in ``search_kwargs``) keeps only matching documents: a ``where`` dict as Chroma takes
    (``{"tenant": "a"}``, ``{"year": {"$gte": 2023}}``, ``$and``/``$or``) or a ``Document -> bool`` callable as
    ``InMemoryVectorStore`` takes; the best ``k`` among them are returned.

    Instantiate:
        .. code-block:: python

            bm25 = BM25IndexRetriever.from_documents(contextual_chunks, k=150)
            bm25.invoke("DiffExecutor run_target", filter={"tenant": "a"})
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    documents: list[Document] = Field(default_factory=list)
    k: int = 4
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    tokenizer: str | Callable[[str], list[str]] = "identifiers"
    _index: BM25Index | None = PrivateAttr(default=None)
    _ids: dict[str, int] = PrivateAttr(default_factory=dict)

    @field_validator("search_kwargs")
    @classmethod
    def _only_filter(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = set(value) - {"filter"}
        if unknown:
            raise ConfigurationError(f"BM25IndexRetriever search_kwargs takes only 'filter', not {sorted(unknown)}",
                                     setting="search_kwargs")
        return value

    def model_post_init(self, context: Any, /) -> None:
        self._rebuild()

    def _rebuild(self) -> None:
        ids = [str(d.metadata.get(CHUNK_ID_KEY) or d.id or n) for n, d in enumerate(self.documents)]
        if len(set(ids)) != len(ids):
            ids = [str(n) for n in range(len(self.documents))]
        self._ids = {i: n for n, i in enumerate(ids)}
        self._index = (BM25Index(ids, [d.page_content for d in self.documents], tokenizer=self.tokenizer)
                       if self.documents else None)

    @classmethod
    def from_documents(cls, documents: Sequence[Document], *, k: int = 4, **kwargs: Any) -> BM25IndexRetriever:
        return cls(documents=list(documents), k=k, **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None,
        filter: Filter | None = None,  # noqa: A002 - LangChain's name for it
    ) -> list[Document]:
        if self._index is None:
            return []
        chosen = filter if filter is not None else self.search_kwargs.get("filter")
        allowed = None
        if chosen is not None:
            keep = document_filter(chosen)
            allowed = [keep(d) for d in self.documents]
        return [self.documents[self._ids[i]] for i, _ in self._index.search(query, k or self.k, allowed=allowed)]


def document_filter(chosen: Filter) -> Callable[[Document], bool]:
    """A predicate on documents for a ``where`` dict or a ``Document -> bool`` callable."""
    if callable(chosen):
        return chosen
    where = compile_where(chosen)
    return lambda document: where(document.metadata)


class ContextualHybridRetriever(BaseRetriever):
    """Contextual BM25 + contextual embeddings, fused by reciprocal rank fusion (duplicates merged by
    ``chunk_id``), optionally reranked, cut to ``k``.

    Setup:
        pip install "ctx-retrieval[langchain,local]"          # add langchain-chroma for Chroma

    Key init args:
        vectorstore: any LangChain vector store holding the contextualized chunks.
        k: results returned (20); candidates: results taken from each side before fusion (150).
        weights: fusion weights, ``(vector, bm25)`` or ``{"vector": .., "bm25": ..}``; rrf_k: the RRF constant
            (``EnsembleRetriever``'s ``c``).
        search_kwargs: passed to the vector store's search (``{"filter": ...}`` in the store's own filter format;
            the BM25 side applies the same filter: a ``where`` dict or a ``Document -> bool`` callable).
        bm25: another keyword retriever (then it is yours to filter and keep in sync).
        bm25_tokenizer: ``"identifiers"`` (default) or ``"parts"`` (before issue 16), or a callable.
        embed_layout: ``"whole"`` (default) or ``"windows"``: a chunk whose context + text overflow the embedder
            is stored as several vectors (context + one window of the chunk each, LangChain's multi-vector pattern
            under ``id_key``), ranked by its best window; results and BM25 are whole chunks.
        compressor: a reranking ``BaseDocumentCompressor``, applied to the fused candidates.

    Instantiate:
        .. code-block:: python

            retriever = ContextualHybridRetriever.from_documents(contextual_chunks, MiniLMEmbeddings())
            # or over an existing store (BM25 is rebuilt from its documents):
            retriever = ContextualHybridRetriever.from_vectorstore(Chroma(..., embedding_function=...))

    Use:
        .. code-block:: python

            docs = retriever.invoke("How did ACME's revenue change in Q2 2023?")
            docs = retriever.invoke("...", k=5, filter={"tenant": "a"})
            docs[0].metadata["fused_score"], docs[0].metadata["vector_rank"], docs[0].metadata["bm25_rank"]

    Async:
        .. code-block:: python

            docs = await retriever.ainvoke("...")

    ``metadata["fused_score"]`` is the RRF score divided by its maximum: 1.0 for a chunk ranked first on both
    sides, 0.5 for one first on one side and absent from the other (equal weights), 0.38 at rank 100 on both
    sides; each side's rank is ``None`` where that side did not return the chunk.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    vectorstore: Any
    bm25: BaseRetriever | None = None
    k: int = 20
    candidates: int = 150
    weights: Sequence[float] | Mapping[str, float] = (0.5, 0.5)
    rrf_k: int = DEFAULT_RRF_K
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    bm25_tokenizer: str | Callable[[str], list[str]] = "identifiers"
    embed_layout: Literal["whole", "windows"] = "whole"
    compressor: BaseDocumentCompressor | None = None
    id_key: str = CHUNK_ID_KEY
    _added: dict[str, Document] = PrivateAttr(default_factory=dict)
    _fixed_bm25: bool = PrivateAttr(default=False)
    _wholes: dict[str, Document] = PrivateAttr(default_factory=dict)  # windows layout: whole chunks by chunk id

    @field_validator("search_kwargs")
    @classmethod
    def _no_k(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "k" in value:
            raise ConfigurationError("search_kwargs['k'] is not used: pass k= (results returned) or candidates= "
                                     "(results taken from each side before fusion)", setting="search_kwargs")
        return value

    @field_validator("bm25_tokenizer")
    @classmethod
    def _known_tokenizer(cls, value: Any) -> Any:
        resolve_tokenizer(value)
        return value

    @field_validator("weights")
    @classmethod
    def _two_weights(cls, value: Any) -> Any:
        side_weights(value)
        return value

    def model_post_init(self, context: Any, /) -> None:
        if self.k < 1 or self.candidates < 1:
            raise ConfigurationError(f"k and candidates must be >= 1 (got {self.k}, {self.candidates})", setting="k")
        self._fixed_bm25 = self.bm25 is not None
        if (self.bm25 is None or self.embed_layout == "windows") and self._can_list():
            self._refresh(warn=False)

    # -- construction ------------------------------------------------------------------------------------

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        embedding: Any,
        *,
        client: Any = None,
        persist_directory: str | Path | None = None,
        collection_name: str = DEFAULT_COLLECTION,
        **kwargs: Any,
    ) -> ContextualHybridRetriever:
        """Index contextualized chunks: in LangChain's ``InMemoryVectorStore`` by default (nothing written to
        disk), or in Chroma when you pass a Chroma ``client`` or a ``persist_directory`` (needs
        ``ctx-retrieval[langchain-chroma]``). Chunks are upserted under their chunk id, so indexing the same
        chunks again replaces them instead of adding copies."""
        if client is None and persist_directory is None:
            from langchain_core.vectorstores import InMemoryVectorStore

            vectorstore: Any = InMemoryVectorStore(embedding)
        else:
            vectorstore = _chroma(embedding, client=client, persist_directory=persist_directory,
                                  collection_name=collection_name)
        retriever = cls(vectorstore=vectorstore, **kwargs)
        if documents:  # a bm25= passed here was built by the caller from these same documents: nothing to warn
            retriever._store(documents)
            retriever._refresh(warn=False)
        return retriever

    @classmethod
    def from_vectorstore(cls, vectorstore: Any, **kwargs: Any) -> ContextualHybridRetriever:
        """Over an existing store, e.g. after a restart; the BM25 side is rebuilt from its documents (stores
        that cannot list them need ``bm25=``)."""
        retriever = cls(vectorstore=vectorstore, **kwargs)
        if retriever.bm25 is None and not retriever._can_list():
            raise TypeError(f"{type(vectorstore).__name__} cannot list its documents, so the BM25 side cannot be "
                            "rebuilt from it: pass bm25=BM25IndexRetriever.from_documents(chunks, k=150), or add the "
                            "chunks through ContextualHybridRetriever.from_documents / add_documents")
        return retriever

    # -- the documents both sides hold -------------------------------------------------------------------

    def _can_list(self) -> bool:
        return isinstance(getattr(self.vectorstore, "store", None), dict) or callable(
            getattr(self.vectorstore, "get", None))

    def stored_documents(self) -> list[Document]:
        """The store's documents (``InMemoryVectorStore``, Chroma), else those added through this retriever; with
        ``embed_layout="windows"``, the whole chunks the stored windows belong to."""
        rows = self._stored_rows()
        return _whole_chunks(rows, self.id_key) if self.embed_layout == "windows" else rows

    def _stored_rows(self) -> list[Document]:
        if self.embed_layout == "windows" and not self._can_list():
            return [w for d in self._added.values() for w in self._windows(d)]
        memory = getattr(self.vectorstore, "store", None)
        if isinstance(memory, dict):  # InMemoryVectorStore
            return [Document(page_content=row["text"], metadata=dict(row.get("metadata") or {}), id=i)
                    for i, row in memory.items()]
        getter = getattr(self.vectorstore, "get", None)
        if callable(getter):  # Chroma and the stores that copy its API
            stored = getter(include=["documents", "metadatas"])
            return [Document(page_content=text or "", metadata=meta or {}, id=i)
                    for i, text, meta in zip(stored["ids"], stored["documents"], stored["metadatas"], strict=True)]
        return list(self._added.values())

    # -- keeping both sides in sync ----------------------------------------------------------------------

    def add_documents(self, documents: Sequence[Document]) -> list[str]:
        """Add (or replace, by chunk id) contextualized chunks in the vector store and the BM25 side. A ``bm25=``
        you passed is not changed: add the documents to it yourself (a warning says so)."""
        ids = self._store(documents)
        self._refresh()
        return ids

    def _store(self, documents: Sequence[Document]) -> list[str]:
        ids = [_chunk_id(d, self.id_key) for d in documents]
        if len(set(ids)) != len(ids):
            raise InvalidInputError("the documents repeat a chunk id; each chunk is stored once under its id")
        embedder = self._offline_embedder()
        if embedder is not None and hasattr(embedder, "warn_if_corpus_truncated") and documents:
            embedder.warn_if_corpus_truncated([d.page_content for d in documents],
                                              [_document_name(d) for d in documents])
        if self.embed_layout == "windows":
            windows = [w for d in documents for w in self._windows(d)]
            self.vectorstore.add_documents(windows, ids=[str(w.id) for w in windows])
        else:
            self.vectorstore.add_documents(list(documents), ids=ids)
        self._added.update((i, d) for i, d in zip(ids, documents, strict=True))
        return ids

    def _offline_embedder(self) -> Any:
        """The ``MiniLMEmbedder`` behind the store's ``MiniLMEmbeddings`` (Chroma says ``embeddings``,
        ``InMemoryVectorStore`` ``embedding``), or None for other embeddings."""
        embeddings = getattr(self.vectorstore, "embeddings", None) or getattr(self.vectorstore, "embedding", None)
        return getattr(embeddings, "embedder", None)

    def _windows(self, document: Document) -> list[Document]:
        """``document`` as the texts the vector store holds for it: itself, or (windows layout, overflowing)
        context + each window of its chunk, ids ``<chunk_id>#w<n>``, each knowing its chunk by ``id_key``."""
        from ctx_retrieval.retrieval.layout import window_texts
        from ctx_retrieval.tokens import estimate_tokens

        from .transformer import original_text

        chunk_id = _chunk_id(document, self.id_key)
        counter = getattr(self._offline_embedder(), "count_tokens", None) or estimate_tokens
        texts = window_texts(original_text(document), document.metadata.get(CONTEXT_KEY), counter)
        if len(texts) == 1:
            texts = [document.page_content]
        return [Document(page_content=text, id=f"{chunk_id}#w{n}",
                         metadata={**document.metadata, self.id_key: chunk_id, WINDOW_KEY: n})
                for n, text in enumerate(texts)]

    def delete(self, ids: Sequence[str]) -> None:
        """Delete chunks (by chunk id) from both sides."""
        if self.embed_layout == "windows":
            wanted = set(ids)
            self.vectorstore.delete(ids=[str(w.id) for w in self._stored_rows()
                                         if w.metadata.get(self.id_key) in wanted])
        else:
            self.vectorstore.delete(ids=list(ids))
        for i in ids:
            self._added.pop(i, None)
        self._refresh()

    def _refresh(self, *, warn: bool = True) -> None:
        """Read the stored documents once after a change: the whole chunks the windows layout answers with, and
        the built-in BM25 side (a ``bm25=`` of yours is not changed: a warning says so)."""
        documents = self.stored_documents() if not self._fixed_bm25 or self.embed_layout == "windows" else []
        if self.embed_layout == "windows":
            self._wholes = {_chunk_id(d, self.id_key): d for d in documents}
        if not self._fixed_bm25:
            self.bm25 = BM25IndexRetriever(documents=documents, k=self.candidates, tokenizer=self.bm25_tokenizer)
        elif warn:
            import warnings

            warnings.warn("the bm25= retriever you passed is not updated by add_documents/delete: rebuild it "
                          "with the new documents (or let the retriever build its own BM25 side)", stacklevel=3)

    # -- retrieval ---------------------------------------------------------------------------------------

    def _vector_retriever(self, filter: Filter | None) -> Any:  # noqa: A002
        per_chunk = _WINDOWS_PER_CHUNK if self.embed_layout == "windows" else 1
        search_kwargs = {**self.search_kwargs, "k": self.candidates * per_chunk}
        if filter is not None:
            search_kwargs["filter"] = filter
        chosen = search_kwargs.get("filter")
        if isinstance(chosen, Mapping) and isinstance(getattr(self.vectorstore, "store", None), dict):
            search_kwargs["filter"] = document_filter(chosen)  # InMemoryVectorStore takes callables: same rules
        return self.vectorstore.as_retriever(search_kwargs=search_kwargs)

    def _bm25_kwargs(self, filter: Filter | None) -> dict[str, Any]:  # noqa: A002
        chosen = filter if filter is not None else self.search_kwargs.get("filter")
        if chosen is None:
            return {}
        if not isinstance(self.bm25, BM25IndexRetriever):
            raise InvalidInputError("a filter needs the built-in BM25 side (it filters BM25 candidates the same way); "
                                    "a bm25= retriever of your own cannot be filtered: filter it yourself")
        return {"filter": chosen}

    def _fuse(self, vector: list[Document], keyword: list[Document]) -> list[Document]:
        def key(d: Document) -> str:
            return str(d.metadata.get(self.id_key) or d.id or d.page_content)

        if self.embed_layout == "windows":  # windows found: answer with their whole chunks (read at the last change)
            vector = [self._wholes.get(key(d), d) for d in vector]
        by_key = {key(d): d for d in [*keyword, *vector]}
        hits = fuse([[key(d) for d in vector], [key(d) for d in keyword]], rrf_k=self.rrf_k,
                    weights=side_weights(self.weights), limit=self.candidates)
        return [Document(page_content=by_key[h.id].page_content, id=by_key[h.id].id,
                         metadata={**by_key[h.id].metadata, FUSED_SCORE_KEY: h.score, VECTOR_RANK_KEY: h.ranks[0],
                                   BM25_RANK_KEY: h.ranks[1]})
                for h in hits]

    def _sides(self, filter: Filter | None, run_manager: Any) -> tuple[Any, dict[str, Any], RunnableConfig]:  # noqa: A002
        """Both sides for one query: the vector retriever, the BM25 call's arguments, the callbacks config."""
        return self._vector_retriever(filter), self._bm25_kwargs(filter), {"callbacks": run_manager.get_child()}

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None,
        filter: Filter | None = None,  # noqa: A002 - LangChain's name for it
    ) -> list[Document]:
        vectors, bm25_kwargs, config = self._sides(filter, run_manager)
        vector = vectors.invoke(query, config=config)
        keyword = self.bm25.invoke(query, config=config, **bm25_kwargs) if self.bm25 is not None else []
        fused = self._fuse(vector, keyword)
        if self.compressor is not None and fused:
            fused = list(self.compressor.compress_documents(fused, query, callbacks=run_manager.get_child()))
        return fused[: k or self.k]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None,
        filter: Filter | None = None,  # noqa: A002
    ) -> list[Document]:
        vectors, bm25_kwargs, config = self._sides(filter, run_manager)
        keyword_call = self.bm25.ainvoke(query, config=config, **bm25_kwargs) if self.bm25 is not None else _none()
        vector, keyword = await asyncio.gather(vectors.ainvoke(query, config=config), keyword_call)
        fused = self._fuse(vector, keyword)
        if self.compressor is not None and fused:
            fused = list(await self.compressor.acompress_documents(fused, query, callbacks=run_manager.get_child()))
        return fused[: k or self.k]


async def _none() -> list[Document]:
    return []


_WINDOWS_PER_CHUNK = 4  # vector hits asked per candidate chunk in the windows layout, before deduplication
WINDOW_KEY = "window"


def _whole_chunks(rows: list[Document], id_key: str) -> list[Document]:
    """Stored windows grouped back into whole chunks (a chunk stored whole is its own window 0)."""
    from ctx_retrieval.text import indexed_text

    groups: dict[str, list[Document]] = {}
    for row in rows:
        groups.setdefault(str(row.metadata.get(id_key) or row.id), []).append(row)
    wholes = []
    for chunk_id, windows in groups.items():
        windows.sort(key=lambda w: int(w.metadata.get(WINDOW_KEY) or 0))
        metadata = {k: v for k, v in windows[0].metadata.items() if k != WINDOW_KEY}
        if len(windows) == 1:
            wholes.append(Document(page_content=windows[0].page_content, metadata=metadata, id=chunk_id))
            continue
        context = metadata.get(CONTEXT_KEY)  # cleaned contexts hold no blank line: the first one ends the context
        chunk = " ".join(w.page_content.split("\n\n", 1)[-1] if context else w.page_content for w in windows)
        wholes.append(Document(page_content=indexed_text(chunk, metadata.get(CONTEXT_KEY)), metadata=metadata,
                               id=chunk_id))
    return wholes


def _document_name(document: Document) -> str:
    for key in ("file_name", "source", "file_path"):
        if document.metadata.get(key):
            return Path(str(document.metadata[key])).name
    return str(document.id or "?")


def _chunk_id(document: Document, id_key: str = CHUNK_ID_KEY) -> str:
    chunk_id = document.metadata.get(id_key) or document.id
    if not chunk_id:
        raise InvalidInputError(f"documents need metadata[{id_key!r}] (ContextualDocumentTransformer sets it) or an "
                                "id: the chunk id is what makes a second ingestion replace instead of duplicate")
    return str(chunk_id)


def _chroma(embedding: Any, *, client: Any, persist_directory: str | Path | None, collection_name: str) -> Any:
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
