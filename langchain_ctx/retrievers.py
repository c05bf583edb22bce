"""Contextual hybrid retrieval for LangChain: the core ``HybridRetriever`` over a ``ContextualVectorStore``.

The vector side is the wrapped store's own retriever (``as_retriever``, your ``search_kwargs``, your callbacks); the
BM25 side is the ``BM25Store`` the wrapper's pairing keeps beside it, and every query is screened by that pairing
(chunks being deleted dropped, chunks BM25 does not know yet added to it). Fusion, per-side ranks, the windows
layout and the filter on both sides are the core's: the ranking ``EnsembleRetriever`` gives (same formula, same tie
order, checked by a test), plus the fused score and each side's rank on every result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, field_validator

from ctx_retrieval._names import former_keywords
from ctx_retrieval.adapting import file_name, warn_truncated
from ctx_retrieval.errors import ConfigurationError, InvalidInputError
from ctx_retrieval.keys import CHUNK_ID_KEY
from ctx_retrieval.progress import progress_bar
from ctx_retrieval.retrieval.bm25 import resolve_tokenizer
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K, side_weights
from ctx_retrieval.retrieval.hybrid import DEFAULT_CANDIDATES, HybridRetriever, Side, check_depths, vector_sides
from ctx_retrieval.retrieval.hybrid import all_weights as check_weights
from ctx_retrieval.retrieval.pairing import bm25_place

from .engines import EngineVectorStore, where_of
from .sides import RetrieverSide, TracedSide, VectorSide, documents, vector_side
from .store import Codec, ContextualBM25Retriever, ContextualVectorStore, bm25_side, new_store

DEFAULT_COLLECTION = "ctx_retrieval"
Filter = Mapping[str, Any] | Callable[[Document], bool]
_CODEC = Codec()


class ContextualHybridRetriever(BaseRetriever):
    """Contextual BM25 + contextual embeddings, fused by reciprocal rank fusion, optionally reranked, cut to ``k``.

    Setup:
        pip install "ctx-retrieval[langchain,local]"          # add langchain-chroma for Chroma

    Key init args:
        vectorstore: a ``ContextualVectorStore``, or a plain store, wrapped with BM25 where the rule puts it (see
            ``ContextualVectorStore``) and followed: chunks written to the plain store directly (LangChain's
            ``index()``) are added to BM25 at the next query, deleted ones dropped, with a warning naming the fix.
        k: results returned (20); candidates: results taken from each side before fusion (150).
        weights: fusion weights, ``(vector, bm25)`` or ``{"vector": .., "bm25": ..}`` (one per side, BM25's last,
            with ``also_embeddings``); rrf_k: the RRF constant (``EnsembleRetriever``'s ``c``).
        search_kwargs: passed to the vector store's search (``{"filter": ...}`` in the store's own filter format;
            the BM25 side applies the same filter: a ``where`` dict or a ``Document -> bool`` callable).
        bm25: where BM25 lives for a plain store wrapped here (a folder or a ``BM25Store``, as
            ``ContextualVectorStore``'s ``bm25=``), or another keyword retriever instead of the store's BM25 (then
            it is yours to filter and keep in sync). ``bm25_path=`` is its former name.
        bm25_tokenizer / embed_layout: for a plain store wrapped here (see ``ContextualVectorStore``).
        compressor: a reranking ``BaseDocumentCompressor``, applied to the fused candidates.

    Instantiate:
        .. code-block:: python

            retriever = ContextualHybridRetriever.from_documents(contextual_chunks, MiniLMEmbeddings())
            retriever = ContextualHybridRetriever(vectorstore=ContextualVectorStore(Chroma(...)))
            index(new_chunks, record_manager, retriever.vectorstore, cleanup="incremental", source_id_key="source")

    Use:
        .. code-block:: python

            docs = retriever.invoke("How did ACME's revenue change in Q2 2023?", k=5, filter={"tenant": "a"})
            docs[0].metadata["fused_score"], docs[0].metadata["vector_rank"], docs[0].metadata["bm25_rank"]
            docs = await retriever.ainvoke("...")

    ``metadata["fused_score"]`` is the RRF score divided by its maximum: 1.0 for a chunk ranked first on both
    sides, 0.5 for one first on one side and absent from the other (equal weights), 0.37 at
    rank 20 on both (``rrf_k=10``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    vectorstore: Any
    bm25: BaseRetriever | None = None
    k: int = 20
    candidates: int = DEFAULT_CANDIDATES
    weights: Sequence[float] | Mapping[str, float] = (0.5, 0.5)
    rrf_k: int = DEFAULT_RRF_K
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    bm25_tokenizer: str | Callable[[str], list[str]] = "identifiers"
    embed_layout: Literal["whole", "windows"] = "whole"
    compressor: BaseDocumentCompressor | None = None
    _fixed_bm25: bool = PrivateAttr(default=False)

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
        if isinstance(value, Mapping) or len(value) == 2:
            side_weights(value)
        return value  # one per side: checked against the store's sides below

    @former_keywords({"bm25_path": "bm25"})
    def __init__(self, **kwargs: Any) -> None:
        store = kwargs.get("vectorstore")
        wrapped = store if isinstance(store, ContextualVectorStore | EngineVectorStore) else None
        place, kwargs["bm25"] = bm25_place(kwargs.get("bm25"), wrapped)
        if store is not None and wrapped is None:  # a plain store: wrapped here
            kwargs["vectorstore"] = ContextualVectorStore(
                store, place, embed_layout=kwargs.get("embed_layout", "whole"),
                tokenizer=kwargs.get("bm25_tokenizer", "identifiers"), follow=True)
        super().__init__(**kwargs)

    def model_post_init(self, context: Any, /) -> None:
        check_depths(self.k, self.candidates, self.rrf_k)
        if isinstance(self.vectorstore, EngineVectorStore):  # both sides in one engine: nothing to pair or wrap
            if self.bm25 is not None or self.embed_layout != "whole":
                raise ConfigurationError(f"a {type(self.vectorstore).__name__} holds its own BM25 side, each chunk "
                                         "whole: drop bm25= and embed_layout=", setting="vectorstore")
            check_weights(self.weights, 2)
            return
        if not isinstance(self.vectorstore, ContextualVectorStore):
            raise ConfigurationError("vectorstore= takes a LangChain VectorStore", setting="vectorstore")
        self.embed_layout = self.vectorstore.embed_layout
        check_weights(self.weights, 1 + len(self.vectorstore.also))
        self._fixed_bm25 = self.bm25 is not None
        if self.bm25 is None:
            self.bm25 = ContextualBM25Retriever(store=self.vectorstore.bm25, k=self.candidates)

    @classmethod
    @former_keywords({"bm25_path": "bm25"})
    def from_documents(cls, documents: Sequence[Document], embedding: Any, *, client: Any = None,
                       persist_directory: str | Path | None = None, collection_name: str = DEFAULT_COLLECTION,
                       show_progress: bool = False, batch_size: int = 256, also_embeddings: Sequence[Any] = (),
                       **kwargs: Any) -> ContextualHybridRetriever:
        """Index contextualized chunks: in LangChain's ``InMemoryVectorStore`` by default (nothing written to
        disk), or in Chroma with a Chroma ``client`` or a ``persist_directory`` (``ctx-retrieval[langchain-chroma]``;
        BM25 then lives in ``<persist_directory>/ctx_bm25/<collection>``). Chunks are upserted under their chunk id;
        ``show_progress`` draws a bar over the batches. ``also_embeddings``: more embedders, each with its own store
        of the same kind (Chroma collections ``<collection_name>_also<n>``), fused with the first and BM25."""
        where = {"client": client, "persist_directory": persist_directory}
        also = [new_store(e, collection_name=f"{collection_name}_also{n}", **where)
                for n, e in enumerate(also_embeddings, start=1)]
        place, kwargs["bm25"] = bm25_place(kwargs.get("bm25"))
        inner = ContextualVectorStore(new_store(embedding, collection_name=collection_name, **where), place,
                                      embed_layout=kwargs.get("embed_layout", "whole"),
                                      tokenizer=kwargs.get("bm25_tokenizer", "identifiers"), also=also)
        retriever = cls(vectorstore=inner, **kwargs)
        retriever._add(documents, show_progress=show_progress, batch_size=batch_size, warn=False)
        return retriever

    @classmethod
    def from_vectorstore(cls, vectorstore: Any, **kwargs: Any) -> ContextualHybridRetriever:
        """Over an existing store, e.g. in a query service: its ``ContextualVectorStore``, or a plain store (BM25
        found beside it or filled from it, and following what others write to it)."""
        return cls(vectorstore=vectorstore, **kwargs)

    def add_documents(self, documents: Sequence[Document], *, show_progress: bool = False,
                      batch_size: int = 256) -> list[str]:
        """Add (or replace, by chunk id) contextualized chunks in the vector store and BM25."""
        return self._add(documents, show_progress=show_progress, batch_size=batch_size, warn=True)

    def _add(self, documents: Sequence[Document], *, show_progress: bool, batch_size: int, warn: bool) -> list[str]:
        ids = [_chunk_id(d) for d in documents]
        if len(set(ids)) != len(ids):
            raise InvalidInputError("the documents repeat a chunk id; each chunk is stored once under its id")
        if self.embed_layout == "whole":  # in the windows layout every row fits the embedder
            warn_truncated(self.vectorstore.embeddings, [d.page_content for d in documents],
                           [file_name(d.metadata, str(d.id or "?")) for d in documents])
        if warn and self._fixed_bm25 and documents:
            import warnings

            warnings.warn("the bm25= retriever you passed is not updated by add_documents/delete: rebuild it "
                          "with the new documents (or let the retriever use its store's BM25 side)", stacklevel=3)
        with progress_bar(len(documents), "indexing chunks", enabled=show_progress) as bar:
            for start in range(0, len(documents), batch_size):
                part = list(documents[start:start + batch_size])
                self.vectorstore.add_documents(part, ids=ids[start:start + batch_size])
                bar.update(len(part))
        return ids

    def delete(self, ids: Sequence[str]) -> None:
        """Delete chunks (by chunk id) from both sides."""
        self.vectorstore.delete(ids=list(ids))

    def stored_documents(self) -> list[Document]:
        """Every chunk both sides hold, whole."""
        return self.vectorstore.documents()  # type: ignore[no-any-return]

    def _hybrid(self, run_manager: Any, filter: Filter | None) -> tuple[HybridRetriever[Document], Any]:  # noqa: A002
        chosen = filter if filter is not None else self.search_kwargs.get("filter")
        config = {"callbacks": run_manager.get_child()}
        if isinstance(self.vectorstore, EngineVectorStore):
            return self.vectorstore.hybrid(candidates=self.candidates, weights=self.weights, rrf_k=self.rrf_k,
                                           callbacks=config["callbacks"]), where_of(chosen)
        store: ContextualVectorStore = self.vectorstore
        windows = self.embed_layout == "windows"
        side = VectorSide if windows else vector_side  # a window's id is not its chunk's
        vector = vector_sides(side(store.inner, self.search_kwargs, config),
                              [side(s, self.search_kwargs, config) for s in store.also],
                              self._wholes if windows else None)
        screen = None
        if isinstance(self.bm25, ContextualBM25Retriever):
            bm25: Side[Document] = TracedSide(bm25_side(self.bm25.store), config["callbacks"])
            screen = store.pairing.guard(_CODEC) if self.bm25.store is store.bm25 else None
        elif chosen is not None:
            raise InvalidInputError("a filter needs the built-in BM25 side (it filters BM25 candidates the same "
                                    "way); a bm25= retriever of your own cannot be filtered: filter it yourself")
        else:
            assert self.bm25 is not None
            bm25 = RetrieverSide(self.bm25, config)
        # a hit both sides found is read from the store's own BM25 (its payload is the document as written: 0.6 ms
        # for 20 against 2.3 ms from Chroma at 10k chunks)
        return HybridRetriever(vector, bm25, candidates=self.candidates, weights=self.weights, rrf_k=self.rrf_k,
                               screen=screen, items_from="bm25" if screen is not None else "vector"), chosen

    def _wholes(self, windows: Sequence[Document]) -> list[Document]:
        ids = [_CODEC.chunk_id(w) for w in windows]
        found = {str(d.id): d for d in self.vectorstore.get_by_ids(ids)}
        return [found.get(i, w) for i, w in zip(ids, windows, strict=True)]

    def warm_up(self) -> None:
        """Pay a fresh process's first-query costs now, before a query service's first request: one query through
        both sides (no reranker) loads the embedding model, opens BM25 and the vector index."""
        hybrid, chosen = self._hybrid(CallbackManagerForRetrieverRun.get_noop_manager(), None)
        hybrid.retrieve("warm-up", 1, chosen)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None,
        filter: Filter | None = None,  # noqa: A002 - LangChain's name for it
    ) -> list[Document]:
        hybrid, chosen = self._hybrid(run_manager, filter)
        found = documents(hybrid.retrieve(query, self.candidates if self.compressor else (k or self.k), chosen))
        if self.compressor is not None and found:
            found = list(self.compressor.compress_documents(found, query, callbacks=run_manager.get_child()))
        return found[: k or self.k]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None,
        filter: Filter | None = None,  # noqa: A002
    ) -> list[Document]:
        hybrid, chosen = self._hybrid(run_manager, filter)
        found = documents(await hybrid.aretrieve(query, self.candidates if self.compressor else (k or self.k),
                                                  chosen))
        if self.compressor is not None and found:
            found = list(await self.compressor.acompress_documents(found, query, callbacks=run_manager.get_child()))
        return found[: k or self.k]


def _chunk_id(document: Document) -> str:
    chunk_id = document.metadata.get(CHUNK_ID_KEY) or document.id
    if not chunk_id:
        raise InvalidInputError(f"documents need metadata[{CHUNK_ID_KEY!r}] (ContextualDocumentTransformer sets it) "
                                "or an id: the chunk id is what makes a second ingestion replace instead of duplicate")
    return str(chunk_id)
