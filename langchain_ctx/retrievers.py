"""Contextual hybrid retrieval for LangChain: BM25 + a vector store fused by ``EnsembleRetriever``.

The BM25 side is the core's numpy index (``BM25IndexRetriever``): it ranks like bm25s and answers in well under a
millisecond where rank-bm25 takes tens to hundreds (see ``benchmarks/bm25_backends.py``), it needs no
``langchain-community`` (which is being sunset), and it is rebuilt from the vector store's stored texts, so it
survives a restart without pickle and stays in sync when documents are added or deleted. Any other LangChain
retriever, such as community's ``BM25Retriever.from_documents(docs, preprocess_func=ctx_retrieval.tokenize)``,
can be passed as ``bm25`` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from ctx_retrieval._names import in_memory_collection
from ctx_retrieval._optional import require
from ctx_retrieval.bm25 import BM25Index
from ctx_retrieval.keys import CHUNK_ID_KEY

__all__ = ["BM25IndexRetriever", "ContextualHybridRetriever"]

DEFAULT_COLLECTION = "ctx_retrieval"


class BM25IndexRetriever(BaseRetriever):
    """BM25 over ``page_content`` (context + chunk) with the core index and its identifier-splitting tokenizer.

    Instantiate:
        .. code-block:: python

            bm25 = BM25IndexRetriever.from_documents(contextual_chunks, k=150)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    documents: list[Document] = Field(default_factory=list)
    k: int = 4
    _index: BM25Index | None = PrivateAttr(default=None)
    _ids: dict[str, int] = PrivateAttr(default_factory=dict)

    def model_post_init(self, context: Any, /) -> None:
        self._rebuild()

    def _rebuild(self) -> None:
        ids = [str(d.metadata.get(CHUNK_ID_KEY) or d.id or n) for n, d in enumerate(self.documents)]
        if len(set(ids)) != len(ids):
            ids = [str(n) for n in range(len(self.documents))]
        self._ids = {i: n for n, i in enumerate(ids)}
        self._index = BM25Index(ids, [d.page_content for d in self.documents]) if self.documents else None

    @classmethod
    def from_documents(cls, documents: Sequence[Document], *, k: int = 4) -> BM25IndexRetriever:
        return cls(documents=list(documents), k=k)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        if self._index is None:
            return []
        return [self.documents[self._ids[i]] for i, _ in self._index.search(query, k or self.k)]


class ContextualHybridRetriever(BaseRetriever):
    """Contextual BM25 + contextual embeddings, fused by LangChain's ``EnsembleRetriever`` (reciprocal rank
    fusion, duplicates merged by ``chunk_id``), optionally reranked, cut to ``k``.

    Setup:
        pip install "ctx-retrieval[langchain,chroma,local]"

    Key init args:
        vectorstore: a LangChain vector store holding the contextualized chunks (``Chroma`` by default).
        bm25: the keyword side; rebuilt from the vector store's stored texts when not given.
        k: results returned (20); candidates: results taken from each side before fusion (150).
        weights: fusion weights (BM25, vector); compressor: a reranking ``BaseDocumentCompressor``.

    Instantiate:
        .. code-block:: python

            retriever = ContextualHybridRetriever.from_documents(contextual_chunks, MiniLMEmbeddings())
            # or over an existing collection (the BM25 side is rebuilt from it):
            retriever = ContextualHybridRetriever.from_vectorstore(Chroma(..., embedding_function=...))

    Use:
        .. code-block:: python

            docs = retriever.invoke("How did ACME's revenue change in Q2 2023?")
            docs = retriever.invoke("...", k=5)

    Async:
        .. code-block:: python

            docs = await retriever.ainvoke("...")
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    vectorstore: Any
    bm25: BaseRetriever | None = None
    k: int = 20
    candidates: int = 150
    weights: list[float] = Field(default_factory=lambda: [0.5, 0.5])
    c: int = 60
    compressor: BaseDocumentCompressor | None = None
    id_key: str = CHUNK_ID_KEY

    def model_post_init(self, context: Any, /) -> None:
        if self.bm25 is None:
            self.bm25 = BM25IndexRetriever(documents=self._stored_documents(), k=self.candidates)

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
        """Index contextualized chunks into Chroma: in memory by default (nothing written to disk), persisted to
        ``persist_directory`` or any Chroma ``client`` you pass. Chunks are upserted under their stable chunk id,
        so indexing the same chunks again replaces them instead of adding copies."""
        vectorstore = _chroma(embedding, client=client, persist_directory=persist_directory,
                              collection_name=collection_name)
        if documents:
            vectorstore.add_documents(list(documents), ids=[_chunk_id(d) for d in documents])
        return cls(vectorstore=vectorstore, **kwargs)

    @classmethod
    def from_vectorstore(cls, vectorstore: Any, **kwargs: Any) -> ContextualHybridRetriever:
        """Over an existing collection, e.g. after a restart; the BM25 side is rebuilt from its texts."""
        return cls(vectorstore=vectorstore, **kwargs)

    def _stored_documents(self) -> list[Document]:
        getter = getattr(self.vectorstore, "get", None)
        if getter is None:
            raise TypeError("pass bm25= for vector stores that cannot list their documents (no .get())")
        stored = getter(include=["documents", "metadatas"])
        return [Document(page_content=text or "", metadata=meta or {}, id=i)
                for i, text, meta in zip(stored["ids"], stored["documents"], stored["metadatas"], strict=True)]

    # -- keeping both sides in sync ----------------------------------------------------------------------

    def add_documents(self, documents: Sequence[Document]) -> list[str]:
        """Add contextualized chunks to the vector store and the BM25 side."""
        ids = [_chunk_id(d) for d in documents]
        self.vectorstore.add_documents(list(documents), ids=ids)
        self._refresh_bm25()
        return ids

    def delete(self, ids: Sequence[str]) -> None:
        """Delete chunks (by chunk id) from both sides."""
        self.vectorstore.delete(ids=list(ids))
        self._refresh_bm25()

    def _refresh_bm25(self) -> None:
        if isinstance(self.bm25, BM25IndexRetriever):
            self.bm25 = BM25IndexRetriever(documents=self._stored_documents(), k=self.candidates)

    # -- retrieval ---------------------------------------------------------------------------------------

    def _ensemble(self) -> Any:
        ensemble_module = require("langchain_classic.retrievers", "langchain")
        vector = self.vectorstore.as_retriever(search_kwargs={"k": self.candidates})
        return ensemble_module.EnsembleRetriever(retrievers=[self.bm25, vector], weights=self.weights, c=self.c,
                                                 id_key=self.id_key)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        fused: list[Document] = self._ensemble().invoke(query, config={"callbacks": run_manager.get_child()})
        fused = fused[: self.candidates]
        if self.compressor is not None and fused:
            fused = list(self.compressor.compress_documents(fused, query, callbacks=run_manager.get_child()))
        return fused[: k or self.k]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        fused: list[Document] = await self._ensemble().ainvoke(query, config={"callbacks": run_manager.get_child()})
        fused = fused[: self.candidates]
        if self.compressor is not None and fused:
            fused = list(await self.compressor.acompress_documents(fused, query, callbacks=run_manager.get_child()))
        return fused[: k or self.k]


def _chunk_id(document: Document) -> str:
    chunk_id = document.metadata.get(CHUNK_ID_KEY) or document.id
    if not chunk_id:
        raise ValueError("documents need metadata['chunk_id'] (ContextualDocumentTransformer sets it) or an id")
    return str(chunk_id)


def _chroma(embedding: Any, *, client: Any, persist_directory: str | Path | None, collection_name: str) -> Any:
    langchain_chroma = require("langchain_chroma", "langchain")
    kwargs: dict[str, Any] = {"collection_name": collection_name, "embedding_function": embedding,
                              "collection_metadata": {"hnsw:space": "cosine"}}
    if client is not None:
        kwargs["client"] = client
    elif persist_directory is not None:
        kwargs["persist_directory"] = str(persist_directory)
    else:  # in memory: in-memory clients share one store per process, so each retriever gets its own collection
        kwargs["collection_name"] = in_memory_collection(collection_name)
    return langchain_chroma.Chroma(**kwargs)
