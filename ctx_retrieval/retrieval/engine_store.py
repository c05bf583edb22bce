"""What the stores that keep both sides of a chunk in one engine row share (``MilvusStore``, ``PostgresStore``): the
stored chunk and its hits, the two sides as ``HybridRetriever`` sides, the hybrid and one-side searches, and the
records the adapters write. An engine implements five things: ``add_records``, ``delete``, ``delete_documents``,
``_stored`` (rows by id) and ``_side_ids`` (one side's best ids for a query); there is nothing to pair.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.protocols import Embedder
from ctx_retrieval.retrieval.dense import IdRanking
from ctx_retrieval.retrieval.fusion import chunk_key
from ctx_retrieval.retrieval.hybrid import Hit, HybridRetriever, search_mode
from ctx_retrieval.retrieval.pairing import Record
from ctx_retrieval.retrieval.store import IndexedChunk, SearchHit

T = TypeVar("T")


@dataclass(frozen=True)
class Stored:
    """A chunk as the engine holds it: the chunk, its metadata, and the adapter's serialized item (``payload``, the
    ``Record``'s: a LangChain document or a LlamaIndex node, rebuilt from it by the adapter)."""

    chunk: IndexedChunk
    metadata: Mapping[str, Any] = field(default_factory=dict)
    payload: bytes = b""


@dataclass(frozen=True)
class StoredHit(Generic[T]):
    """A result of ``search_stored``: the stored chunk, its fused score and each side's rank (as ``SearchHit``)."""

    item: T
    score: float
    vector_rank: int | None
    bm25_rank: int | None


class Fusion(Generic[T]):
    """An engine's own fusion (Milvus's ``hybrid_search``), which ``EngineStore.hybrid`` returns in place of a
    ``HybridRetriever`` when the store was asked for it: ``retrieve(query, k, where)`` and ``aretrieve``."""

    def retrieve(self, query: str, k: int = 20, where: Mapping[str, Any] | None = None) -> list[Hit[T]]:
        raise NotImplementedError

    async def aretrieve(self, query: str, k: int = 20, where: Mapping[str, Any] | None = None) -> list[Hit[T]]:
        raise NotImplementedError


class EngineStore:
    """Both sides of each chunk in one engine row: searched by side (``vector``, ``bm25``) and fused by our
    ``HybridRetriever`` (each hit with both ranks, ``where`` filters applied by the engine on both sides)."""

    embedder: Embedder
    rrf_k: int
    candidates: int

    # -- what an engine implements ----------------------------------------------------------------------------

    def add_records(self, records: Sequence[Record], vectors: Sequence[Sequence[float]] | None = None) -> list[str]:
        """Add or replace (by id) the pairing's records, as the adapters make them: ``text`` (context + chunk) is
        embedded, unless ``vectors`` (one per record: a framework that embeds before it writes) are given, and
        analysed for BM25; ``metadata`` is what filters read; ``payload`` comes back with ``search_stored``."""
        raise NotImplementedError

    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Delete chunks by id (unknown ids are ignored), from both sides at once."""
        raise NotImplementedError

    def delete_documents(self, document_ids: Sequence[str]) -> None:
        """Delete every chunk of these documents, from both sides at once."""
        raise NotImplementedError

    def _stored(self, ids: list[str], *, payload: bool = True) -> list[Stored]:
        raise NotImplementedError

    def _side_ids(self, side: str, query: str, k: int, where: Mapping[str, Any] | None,
                  vector: Sequence[float] | None) -> list[str]:
        raise NotImplementedError

    def _engine_fusion(self, load: Callable[[list[str]], Sequence[T]], vector: Sequence[float] | None,
                       candidates: int, rrf_k: int, weights: Sequence[float] | Mapping[str, float]
                       ) -> Fusion[T] | None:
        """The engine's own fusion when the store was asked for it (else ours)."""
        return None

    def flush(self) -> None:
        """Make what was written searchable at its best (nothing to do where a commit does it)."""

    # -- shared -----------------------------------------------------------------------------------------------

    def add(self, chunks: Iterable[IndexedChunk], *, metadata: Mapping[str, Mapping[str, Any]] | None = None,
            vectors: Sequence[Sequence[float]] | None = None) -> int:
        """Add or replace (by chunk id) chunks; ``metadata`` (chunk id -> dict) is what filters read; ``vectors``
        (one per chunk) when they were embedded already. Returns how many were written."""
        records = records_of(chunks, metadata)
        written = len(self.add_records(records, vectors)) if records else 0
        self.flush()
        return written

    def get(self, ids: Sequence[str]) -> list[Stored]:
        """The stored chunks under these ids (those that exist), in the order asked."""
        return self._stored([str(i) for i in ids])

    def chunks(self, ids: Sequence[str]) -> list[IndexedChunk]:
        """The chunks stored under these ids (those that exist), in the order asked."""
        return [s.chunk for s in self._stored([str(i) for i in ids], payload=False)]

    def side(self, name: str, *, load: Callable[[list[str]], Sequence[Any]] | None = None,
             vector: Sequence[float] | None = None) -> EngineSide[Any]:
        """One side (``vector`` or ``bm25``) as a ``HybridRetriever`` side; ``load`` makes its items of the ids
        (default: the stored chunks); ``vector``, settable, is the next query's vector when the caller embedded
        it."""
        side = search_mode(name)
        if side == "hybrid":
            raise InvalidInputError("a side is 'vector' or 'bm25'; search(mode='hybrid') fuses both")
        return EngineSide(self, side, load or self.chunks, vector)

    def search(self, query: str, *, k: int = 20, mode: str = "hybrid",
               where: Mapping[str, Any] | None = None) -> list[SearchHit]:
        """The ``k`` best chunks for ``query``: ``hybrid`` (both sides fused), ``vector`` or ``bm25`` alone."""
        return [SearchHit(h.item, h.score, h.vector_rank, h.bm25_rank)
                for h in self._search(query, k, mode, where, self.chunks, None)]

    def search_stored(self, query: str, *, k: int = 20, mode: str = "hybrid", where: Mapping[str, Any] | None = None,
                      vector: Sequence[float] | None = None, candidates: int | None = None,
                      rrf_k: int | None = None) -> list[StoredHit[Stored]]:
        """As ``search``, each hit with its metadata and payload (what the adapters rebuild their objects from);
        ``vector``: the query's, when the framework embedded it; ``candidates``/``rrf_k``: the caller's, for this
        query (else the store's)."""
        return self._search(query, k, mode, where, self._stored, vector, candidates, rrf_k)

    def _search(self, query: str, k: int, mode: str, where: Mapping[str, Any] | None,
                load: Callable[[list[str]], Sequence[T]], vector: Sequence[float] | None,
                candidates: int | None = None, rrf_k: int | None = None) -> list[StoredHit[T]]:
        mode = search_mode(mode)
        fusion: HybridRetriever[T] | Fusion[T]
        if mode == "hybrid":
            fusion = self.hybrid(load, vector=vector, candidates=candidates, rrf_k=rrf_k)
        else:  # one side alone
            side = EngineSide(self, mode, load, vector)
            fusion = HybridRetriever(side if mode == "vector" else None, side if mode == "bm25" else None,
                                     candidates=candidates or self.candidates,
                                     rrf_k=self.rrf_k if rrf_k is None else rrf_k)
        return [StoredHit(h.item, h.score, h.vector_rank, h.bm25_rank) for h in fusion.retrieve(query, k, where)]

    def hybrid(self, load: Callable[[list[str]], Sequence[T]], *, vector: Sequence[float] | None = None,
               candidates: int | None = None, weights: Sequence[float] | Mapping[str, float] = (1.0, 1.0),
               rrf_k: int | None = None, trace: Callable[[Any], Any] | None = None
               ) -> HybridRetriever[T] | Fusion[T]:
        """What an adapter's retriever queries, its hits read by ``load`` (documents, nodes): our fusion over the
        two engine sides (each hit with both ranks; ``trace`` wraps the BM25 side for the framework's tracing), or
        the engine's own where the store was asked for it. ``vector``: the query's, when the framework embedded it;
        ``where`` dicts are given to ``retrieve``."""
        candidates = candidates or self.candidates
        rrf_k = self.rrf_k if rrf_k is None else rrf_k
        engine = self._engine_fusion(load, vector, candidates, rrf_k, weights)
        if engine is not None:
            return engine
        bm25: Any = EngineSide(self, "bm25", load)
        return HybridRetriever(EngineSide(self, "vector", load, vector), trace(bm25) if trace else bm25,
                               candidates=candidates, weights=weights, rrf_k=rrf_k)


class EngineSide(Generic[T]):
    """One of an ``EngineStore``'s two sides as a hybrid side, its hits read by ``load``."""

    def __init__(self, store: EngineStore, side: str, load: Callable[[list[str]], Sequence[T]],
                 vector: Sequence[float] | None = None) -> None:
        self.store, self.name, self.load, self.vector = store, side, load, vector

    def search(self, query: str, k: int, where: Any = None) -> IdRanking[T]:
        ids = self.store._side_ids(self.name, query, k, where, self.vector)
        return IdRanking(ids, [chunk_key(i) for i in ids], self.load)


def records_of(chunks: Iterable[IndexedChunk], metadata: Mapping[str, Mapping[str, Any]] | None = None
               ) -> list[Record]:
    """Chunks as the records an engine writes, each with its metadata (chunk id -> dict) over the chunk's own."""
    records = []
    for chunk in chunks:
        made = chunk.record()
        records.append(Record(made.id, made.text, made.chunk, made.context, made.ref,
                              {**made.metadata, **dict((metadata or {}).get(chunk.chunk_id, {}))}, made.payload))
    return records
