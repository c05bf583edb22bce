"""Contextual hybrid inside one engine for LangChain: the core ``MilvusStore`` (one collection: the contextualized
text, its vector, and Milvus's BM25 over our analysis) and ``PostgresStore`` (one table: pgvector beside BM25 in SQL
over our analysis) as LangChain ``VectorStore``s, ``ContextualMilvus`` and ``ContextualPostgres``.

There is nothing to pair: each chunk is one row that both engine sides read, so LangChain's own calls
(``add_documents``, ``delete``, the indexing API ``index(docs, record_manager, store, cleanup=...)``) keep both sides
true at once, in every process that opens the collection. Documents are stored whole (``page_content``, metadata,
id) and come back as they went in. ``ContextualHybridRetriever(vectorstore=ContextualMilvus(...))`` queries both
engine sides and fuses them (each document with its fused score and both ranks), or, on Milvus, fuses in the engine
with ``engine_fusion=True``. Why not ``langchain-milvus``: its BM25 is the engine's analyzer over ``page_content``,
which on Milvus Lite keeps identifiers whole and folds nothing (measured: contextual BM25 12.3% against 7.9%
failure@20 on the cookbook dev half, ``benchmarks/milvus_ablation.py``); ours writes the tokens ``BM25Store`` would
index. Why not ``langchain-postgres``: its ``PGVectorStore`` has no BM25 (its hybrid search is PostgreSQL's full-text
``ts_rank``, which neither stems our way nor splits identifiers), so the table would hold a second analysis.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.retrieval.engine_store import EngineStore, Stored
from ctx_retrieval.retrieval.milvus import MilvusStore

from .sides import TracedSide
from .store import record

DEFAULT_COLLECTION = "ctx_retrieval"


def _document(stored: Stored) -> Document:
    data = json.loads(stored.payload.decode("utf-8", "surrogatepass"))
    return Document(page_content=data["page_content"], metadata=data["metadata"], id=data["id"])


def _documents(stored: Sequence[Stored]) -> list[Document]:
    return [_document(s) for s in stored]


def where_of(chosen: Any) -> Mapping[str, Any] | None:
    """A retriever's filter as the where dict the engine applies (a callable cannot reach it)."""
    if chosen is None or isinstance(chosen, Mapping):
        return chosen
    raise InvalidInputError("a filter on an engine's collection is a where dict ({'tenant': 'a'}, {'year': {'$gte': "
                            "2023}}, $and/$or), which the engine applies on both sides; a callable cannot reach it")


class EngineVectorStore(VectorStore):
    """A core ``EngineStore`` (both sides of each chunk in one engine row) as a LangChain ``VectorStore``: what
    ``ContextualMilvus`` and ``ContextualPostgres`` share (``store``: the core store)."""

    store: EngineStore

    def __init__(self, embedding: Embeddings, store: EngineStore) -> None:
        self._embedding, self.store = embedding, store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r})"

    @property
    def embeddings(self) -> Embeddings:
        return self._embedding

    def hybrid(self, *, candidates: int, weights: Any, rrf_k: int, callbacks: Any) -> Any:
        """What ``ContextualHybridRetriever`` queries (``EngineStore.hybrid``): our fusion over the two engine sides
        (the BM25 side traced as a child run), or the engine's own (Milvus's ``engine_fusion=True``); give it
        ``where`` dicts."""
        return self.store.hybrid(self._load, candidates=candidates, weights=weights, rrf_k=rrf_k,
                                 trace=lambda side: TracedSide(side, callbacks))

    def _load(self, ids: list[str]) -> list[Document]:
        return _documents(self.store.get(ids))

    # -- writes: one row per chunk ----------------------------------------------------------------------------

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add (or replace, by id) documents; ``ids=`` as LangChain's stores take."""
        ids = kwargs.pop("ids", None)
        if ids is not None and len(ids) != len(documents):
            raise InvalidInputError(f"{len(ids)} ids for {len(documents)} documents: pass one id per document")
        return self.store.add_records([record(d, str(ids[n]) if ids is not None else None)
                                       for n, d in enumerate(documents)])

    def add_texts(self, texts: Iterable[str], metadatas: list[dict[Any, Any]] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        texts = list(texts)
        metadatas = metadatas or [{} for _ in texts]
        return self.add_documents([Document(page_content=t, metadata=m) for t, m in zip(texts, metadatas,
                                                                                        strict=True)], ids=ids)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete chunks by id, both sides at once (``ids=None`` deletes nothing)."""
        if not ids:
            return None
        self.store.delete([str(i) for i in ids])
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return _documents(self.store.get(ids))

    # -- searching -------------------------------------------------------------------------------------------

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        """The vector side alone (``filter=`` a where dict); ``ContextualHybridRetriever`` searches both."""
        return [document for document, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, **kwargs: Any) -> list[tuple[Document, float]]:
        return [(_document(h.item), h.score) for h in self.store.search_stored(query, k=k, mode="vector",
                                                                                where=where_of(kwargs.get("filter")))]

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings, metadatas: list[dict[Any, Any]] | None = None, *,
                   ids: list[str] | None = None, **kwargs: Any) -> Any:
        """Texts in a new store (``uri=`` for Milvus, ``url=`` for PostgreSQL: required)."""
        store = cls(embedding, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store


class ContextualMilvus(EngineVectorStore):
    """Contextualized chunks in one Milvus collection: vectors and contextual BM25 side by side, nothing to pair.

    Setup:
        pip install "ctx-retrieval[langchain,milvus,local]"

    Key init args:
        embedding: the LangChain embeddings for chunks and queries (``MiniLMEmbeddings()``, or any other).
        uri: ``"./chunks.db"`` (Milvus Lite, one process) or ``"http://host:19530"`` (a server: several processes).
        collection_name: the collection (``"ctx_retrieval"``); token: for a server that asks for one.
        tokenizer: our BM25 analysis (``"identifiers"``), or ``"engine"`` with ``analyzer_params`` (see
            ``ctx_retrieval.retrieval.milvus.MilvusStore``).
        engine_fusion: fuse in the engine (one ``hybrid_search``) instead of our fusion with per-side ranks.

    Instantiate:
        .. code-block:: python

            store = ContextualMilvus(MiniLMEmbeddings(), uri="http://127.0.0.1:19530")

    Use:
        .. code-block:: python

            index(contextual_chunks, SQLRecordManager(...), store, cleanup="incremental", source_id_key="source")
            retriever = ContextualHybridRetriever(vectorstore=store)
            retriever.invoke("How did ACME's revenue change?", filter={"tenant": "a"})
    """

    def __init__(self, embedding: Embeddings, uri: str, *, collection_name: str = DEFAULT_COLLECTION,
                 tokenizer: str = "identifiers", analyzer_params: Mapping[str, Any] | None = None,
                 engine_fusion: bool = False, token: str | None = None) -> None:
        from ctx_retrieval.evaluation.models import as_embedder

        super().__init__(embedding, MilvusStore(uri, embedder=as_embedder(embedding), collection=collection_name,
                                                tokenizer=tokenizer, analyzer_params=analyzer_params,
                                                engine_fusion=engine_fusion, token=token))


class ContextualPostgres(EngineVectorStore):
    """Contextualized chunks in one PostgreSQL table: pgvector and contextual BM25 side by side, written in one
    transaction (the core ``PostgresStore``), so nothing to pair.

    Setup:
        pip install "ctx-retrieval[langchain,postgres,local]"  (a server with pgvector >= 0.8)

    Key init args:
        embedding: the LangChain embeddings for chunks and queries (``MiniLMEmbeddings()``, or any other).
        url: a libpq connection string (``postgresql://user@host:5432/db``).
        table: the collection's table (``"ctx_chunks"``); tokenizer / language: our BM25 analysis, as
            ``BM25Store``'s.

    Instantiate:
        .. code-block:: python

            store = ContextualPostgres(MiniLMEmbeddings(), url="postgresql://rag@db.internal/rag")

    Use:
        .. code-block:: python

            index(contextual_chunks, SQLRecordManager(...), store, cleanup="incremental", source_id_key="source")
            ContextualHybridRetriever(vectorstore=store).invoke("ACME's revenue?", filter={"tenant": "a"})
    """

    def __init__(self, embedding: Embeddings, url: str, *, table: str = "ctx_chunks", tokenizer: str = "identifiers",
                 language: str | Sequence[str] | None = "auto") -> None:
        from ctx_retrieval.evaluation.models import as_embedder
        from ctx_retrieval.retrieval.postgres import PostgresStore

        super().__init__(embedding, PostgresStore(url, embedder=as_embedder(embedding), table=table,
                                                  tokenizer=tokenizer, language=language))
