"""The hybrid query's sides over LangChain objects: the vector store's own retriever, the BM25 side as a traced
child run, a keyword retriever of the user's; and results as documents carrying their ranks."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever

from ctx_retrieval.retrieval.dense import ChromaSide
from ctx_retrieval.retrieval.fusion import chunk_key
from ctx_retrieval.retrieval.hybrid import Hit, Ranked, Side

from .store import WHOLE_KEY, WINDOW_KEY, WINDOWS_KEY, Codec, _is_chroma, document_filter

_CODEC = Codec()


def documents(hits: list[Hit[Document]]) -> list[Document]:
    hidden = (WHOLE_KEY, WINDOW_KEY, WINDOWS_KEY)
    return [Document(page_content=h.item.page_content, id=h.item.id, metadata={
        **{k: v for k, v in h.item.metadata.items() if k not in hidden}, **h.metadata()}) for h in hits]


def _ranked(found: Sequence[Document]) -> Ranked[Document]:
    ids = [_CODEC.chunk_id(d) for d in found]
    return Ranked([chunk_key(i) for i in ids], found, ids)


def vector_side(store: Any, search_kwargs: Mapping[str, Any], config: Any) -> Side[Document]:
    """The wrapped store's side. A ``langchain_chroma.Chroma`` asked for nothing but a filter, with no one tracing
    the query, is searched on its collection directly for ids alone (its documents read only for the hits that need
    them): its own retriever reads all 150 candidates' documents and metadata and builds their ``Document``s, 1.8x
    the core store's whole hybrid query at 10k chunks (``benchmarks/query_latency.py``). The ranking is the same
    (the same embedding, the same Chroma query); anything else goes through the store's own retriever."""
    if _is_chroma(store) and set(search_kwargs) <= {"filter"} and not config["callbacks"].handlers \
            and store.embeddings is not None:
        # langchain-chroma names its collection only privately; it is the collection its own search queries
        return ChromaSide(store._collection, store.embeddings.embed_query, resolve=lambda ids: _by_ids(store, ids))
    return VectorSide(store, search_kwargs, config)


def _by_ids(store: Any, ids: list[str]) -> list[Document]:
    found = {str(d.id): d for d in store.get_by_ids(ids)}
    return [found[i] for i in ids]


class VectorSide:
    """The wrapped store's own retriever (its search type, its filter format) with the query's callbacks; an
    ``InMemoryVectorStore`` gets where dicts as the callables it takes."""

    def __init__(self, store: Any, search_kwargs: Mapping[str, Any], config: Any) -> None:
        self.store, self.search_kwargs, self.config = store, search_kwargs, config

    def _retriever(self, k: int, where: Any) -> Any:
        from langchain_core.vectorstores import InMemoryVectorStore

        search_kwargs = {**self.search_kwargs, "k": k}
        if where is not None:
            memory = isinstance(self.store, InMemoryVectorStore)
            search_kwargs["filter"] = document_filter(where) if memory and isinstance(where, Mapping) else where
        return self.store.as_retriever(search_kwargs=search_kwargs)

    def search(self, query: str, k: int, where: Any = None) -> Ranked[Document]:
        return _ranked(self._retriever(k, where).invoke(query, config=self.config))

    async def asearch(self, query: str, k: int, where: Any = None) -> Ranked[Document]:
        return _ranked(await self._retriever(k, where).ainvoke(query, config=self.config))


class TracedSide:
    """The store's BM25 side as a child retriever run of the query (for LangChain tracing), as
    ``ContextualBM25Retriever`` would report it; the documents are decoded for the trace only when someone listens."""

    def __init__(self, inner: Side[Document], callbacks: Any) -> None:
        self.inner, self.callbacks = inner, callbacks

    def search(self, query: str, k: int, where: Any = None) -> Any:
        if not self.callbacks.handlers:
            return self.inner.search(query, k, where)
        run = self.callbacks.on_retriever_start(None, query, name="ContextualBM25Retriever")
        try:
            ranking = self.inner.search(query, k, where)
        except BaseException as exc:
            run.on_retriever_error(exc)
            raise
        run.on_retriever_end(ranking.items(range(len(ranking.keys))))
        return ranking

    async def asearch(self, query: str, k: int, where: Any = None) -> Any:
        if not self.callbacks.handlers:
            return await asyncio.to_thread(self.inner.search, query, k, where)
        run = await self.callbacks.on_retriever_start(None, query, name="ContextualBM25Retriever")
        try:
            ranking = await asyncio.to_thread(self.inner.search, query, k, where)
        except BaseException as exc:
            await run.on_retriever_error(exc)
            raise
        await run.on_retriever_end(ranking.items(range(len(ranking.keys))))
        return ranking


class RetrieverSide:
    """Any LangChain retriever as a side (a ``bm25=`` of the user's), asked for its own ``k``."""

    def __init__(self, retriever: BaseRetriever, config: Any) -> None:
        self.retriever, self.config = retriever, config

    def search(self, query: str, k: int, where: Any = None) -> Ranked[Document]:
        return _ranked(self.retriever.invoke(query, config=self.config))

    async def asearch(self, query: str, k: int, where: Any = None) -> Ranked[Document]:
        return _ranked(await self.retriever.ainvoke(query, config=self.config))
