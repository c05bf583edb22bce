"""The hybrid query, once: candidates from a vector side and a BM25 side under one filter, reciprocal rank fusion,
each side's rank on every result, an optional rerank stage; sync and async.

The core store, the evaluation and both framework adapters query through ``HybridRetriever``; what differs between
them is only what a side is (a Chroma collection, a numpy matrix, a LangChain vector store, a LlamaIndex index;
the ``BM25Store``) and what an item is (a chunk id, an ``IndexedChunk``, a ``Document``, a node). A side answers
with a ``Ranking``: chunk keys (``chunk_key`` of the chunk id), best first, and a way to read the items at some
positions, so only the results returned are ever built (not the 2 x 150 candidates).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from ctx_retrieval.errors import ConfigurationError, InvalidInputError
from ctx_retrieval.keys import BM25_RANK_KEY, FUSED_SCORE_KEY, VECTOR_RANK_KEY, VECTOR_RANKS_KEY
from ctx_retrieval.retrieval.bm25_store import BM25Results, BM25Store, StoredEntry
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K, fuse, side_weights

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
W = TypeVar("W")

DEFAULT_CANDIDATES = 150
"""Results taken from each side before fusion (Anthropic's cookbook fuses 150 from each)."""

SearchMode = Literal["hybrid", "vector", "bm25"]


def search_mode(mode: str) -> SearchMode:
    """A store's ``search(mode=)``: ``hybrid`` (both sides fused), ``vector`` or ``bm25`` alone, the names the
    weights and ranks give the sides (``fusion.SIDES``). ``dense``, its name before issue 53, still works for one
    release, with a ``DeprecationWarning``."""
    if mode == "dense":
        import warnings

        warnings.warn("mode='dense' is now mode='vector' (the name the weights and ranks give that side); 'dense' "
                      "goes in the next release", DeprecationWarning, stacklevel=3)
        return "vector"
    if mode not in ("hybrid", "vector", "bm25"):
        raise InvalidInputError(f"mode must be hybrid, vector or bm25, not {mode!r}")
    return mode  # type: ignore[return-value]


class Ranking(Protocol[T_co]):
    """One side's answer to one query: chunk keys best first, and the items at any positions, read on demand."""

    @property
    def keys(self) -> Sequence[int]: ...

    def items(self, positions: Sequence[int]) -> Sequence[T_co]: ...


@runtime_checkable
class IdentifiedRanking(Ranking[T_co], Protocol):
    """A ranking that also knows its chunk ids, best first (what a ``Screen`` checks; None: it does not)."""

    @property
    def ids(self) -> Sequence[str] | None: ...


@dataclass(frozen=True)
class Ranked(Generic[T]):
    """A ``Ranking`` whose items are already built (a framework store returns documents with their ids);
    ``ids`` are their chunk ids (what a ``Screen`` checks)."""

    keys: Sequence[int]
    found: Sequence[T]
    ids: Sequence[str] = ()

    def items(self, positions: Sequence[int]) -> list[T]:
        return [self.found[p] for p in positions]


@runtime_checkable
class Side(Protocol[T_co]):
    """A source of candidates: the ``k`` best for ``query`` under ``where`` (the side's own filter format, or
    ``None``)."""

    def search(self, query: str, k: int, where: Any = None) -> Ranking[T_co]: ...


@runtime_checkable
class AsyncSide(Protocol[T_co]):
    """A side with a native async search (a remote store); the others run in a thread when queried async."""

    async def asearch(self, query: str, k: int, where: Any = None) -> Ranking[T_co]: ...


@dataclass(frozen=True)
class Hit(Generic[T]):
    """A result: the item, its chunk key, the fused score in (0, 1] (``FusedHit``: 1.0 is first on every side; for
    one side alone ``1 / rank``) and each side's rank from 1, ``None`` where that side did not return it: with more
    than one vector side, ``vector_rank`` is the best of them and ``vector_ranks`` holds each."""

    item: T
    key: int
    score: float
    vector_rank: int | None
    bm25_rank: int | None
    vector_ranks: tuple[int | None, ...] = ()

    def metadata(self) -> dict[str, Any]:
        """The fused score and each side's rank under the keys both adapters write on a result
        (``ctx_retrieval.keys``); ``vector_ranks`` only with more than one vector side."""
        ranks = {VECTOR_RANKS_KEY: list(self.vector_ranks)} if len(self.vector_ranks) > 1 else {}
        return {FUSED_SCORE_KEY: self.score, VECTOR_RANK_KEY: self.vector_rank, BM25_RANK_KEY: self.bm25_rank,
                **ranks}


@runtime_checkable
class Screen(Protocol):
    """Checks one query's rankings against what the indexes hold before fusion (``pairing.QueryGuard``): chunks
    being deleted dropped, chunks the vector side holds and BM25 lacks added to it (``again`` asks BM25 anew).
    Vector rankings it screens carry ``ids`` (chunk ids beside their keys). ``confirm`` sees the fused hits and says
    whether some were stale (the query then runs once more)."""

    def prepare(self) -> None:
        """Before the sides are searched (a store others write is reconciled first)."""
        ...

    def screen(self, vectors: list[Any], bm25: Any, again: Callable[[], Any] | None) -> tuple[list[Any], Any]: ...

    def confirm(self, hits: Sequence[Any]) -> bool: ...


@runtime_checkable
class Reranker(Protocol[T]):
    """Reorders fused hits for a query; ``depth`` is how many it reads (the first ``depth`` fused hits are built
    and handed to it, the rest are not read)."""

    depth: int

    def rerank(self, query: str, hits: list[Hit[T]]) -> list[Hit[T]]: ...

    async def arerank(self, query: str, hits: list[Hit[T]]) -> list[Hit[T]]: ...


class HybridRetriever(Generic[T]):
    """Contextual embeddings + contextual BM25 for one query: ``candidates`` from each side, fused by reciprocal
    rank fusion (``weights`` as ``(vector, bm25)``, ``rrf_k``), reranked if a ``reranker`` is given, cut to ``k``.

    Either side may be ``None`` (dense only, BM25 only: each result scores ``1 / rank``). ``vector`` may also be a
    list of vector sides (two embedders, e.g. MiniLM and multilingual e5): every side is then one ranking of the
    fusion, each vector side weighted ``weights[0]`` (or give one weight per vector side, then BM25's).

    Use:
        .. code-block:: python

            retriever = HybridRetriever(vector_side, BM25Side(store, decode=...))
            hits = retriever.retrieve("How did ACME's revenue change in Q2 2023?", k=20, where={"tenant": "a"})
            hits[0].item, hits[0].score, hits[0].vector_rank, hits[0].bm25_rank
            three_way = HybridRetriever([minilm_side, e5_side], BM25Side(store, decode=...))
    """

    def __init__(self, vector: Side[T] | Sequence[Side[T]] | None, bm25: Side[T] | None, *,
                 candidates: int = DEFAULT_CANDIDATES, weights: Sequence[float] | Mapping[str, float] = (1.0, 1.0),
                 rrf_k: int = DEFAULT_RRF_K, reranker: Reranker[T] | None = None, screen: Screen | None = None,
                 items_from: Literal["vector", "bm25"] = "vector") -> None:
        vectors: tuple[Side[T], ...]
        if vector is None:
            vectors = ()
        elif isinstance(vector, (list, tuple)):
            vectors = tuple(vector)
        else:
            vectors = (vector,)  # type: ignore[assignment]
        if not vectors and bm25 is None:
            raise ConfigurationError("a hybrid retriever needs a vector side, a BM25 side or both", setting="vector")
        if candidates < 1:
            raise ConfigurationError(f"candidates must be >= 1, not {candidates}", setting="candidates")
        if rrf_k < 0:
            raise ConfigurationError(f"rrf_k must be >= 0, not {rrf_k}", setting="rrf_k")
        self.vectors = vectors
        self.vector = vectors[0] if vectors else None
        self.bm25 = bm25
        self.candidates = candidates
        self.weights = all_weights(weights, len(vectors))
        self.rrf_k = rrf_k
        self.reranker = reranker
        if screen is not None and not isinstance(screen, Screen):
            raise ConfigurationError(f"screen= takes a Screen (screen, confirm), not {type(screen).__name__}",
                                     setting="screen")
        self.screen = screen
        self.items_from = items_from  # which side's items a hit both found is read from (the cheaper one)

    def __repr__(self) -> str:
        vector = self.vector if len(self.vectors) < 2 else list(self.vectors)
        return (f"HybridRetriever(vector={vector!r}, bm25={self.bm25!r}, candidates={self.candidates}, "
                f"weights={self.weights}, rrf_k={self.rrf_k})")

    def retrieve(self, query: str, k: int = 20, where: Any = None) -> list[Hit[T]]:
        """The ``k`` best hits for ``query``; ``where`` goes to every side (each applies it in its own terms)."""
        _check_k(k)
        for attempt in (1, 2):
            if self.screen is not None:
                self.screen.prepare()
            vectors, bm25 = self._search(query, where)
            if self.screen is not None:
                vectors, bm25 = self.screen.screen(vectors, bm25, self._again(query, where))
            hits = self._fused(vectors, bm25, self._depth(k))
            if self.screen is None or attempt == 2 or not self.screen.confirm(hits):
                break
        if self.reranker is not None and hits:
            hits = self.reranker.rerank(query, hits)
        return hits[:k]

    async def aretrieve(self, query: str, k: int = 20, where: Any = None) -> list[Hit[T]]:
        """``retrieve``, with the sides queried concurrently."""
        _check_k(k)
        for attempt in (1, 2):
            if self.screen is not None:
                await asyncio.to_thread(self.screen.prepare)
            *vectors, bm25 = await asyncio.gather(*(_asearch(side, query, self.candidates, where)
                                                    for side in (*self.vectors, self.bm25)))
            found = [v for v in vectors if v is not None]
            if self.screen is not None:
                found, bm25 = await asyncio.to_thread(self.screen.screen, found, bm25, self._again(query, where))
            hits = self._fused(found, bm25, self._depth(k))
            if self.screen is None or attempt == 2 or not await asyncio.to_thread(self.screen.confirm, hits):
                break
        if self.reranker is not None and hits:
            hits = await self.reranker.arerank(query, hits)
        return hits[:k]

    def _search(self, query: str, where: Any) -> tuple[list[Ranking[T]], Ranking[T] | None]:
        """Every side's candidates; the BM25 store searched on a thread meanwhile (the engine releases the
        interpreter while it scores, so its time hides behind the vector store's)."""
        bm25 = self.bm25
        if bm25 is None:
            return [side.search(query, self.candidates, where) for side in self.vectors], None
        if not self.vectors or not isinstance(bm25, BM25Side):
            return [s.search(query, self.candidates, where) for s in self.vectors], bm25.search(query, self.candidates,
                                                                                                 where)
        pending = _pool().submit(bm25.search, query, self.candidates, where)
        try:
            vectors = [side.search(query, self.candidates, where) for side in self.vectors]
        finally:
            found = pending.result()
        return vectors, found

    def _again(self, query: str, where: Any) -> Callable[[], Ranking[T]] | None:
        bm25 = self.bm25
        return None if bm25 is None else lambda: bm25.search(query, self.candidates, where)

    def _depth(self, k: int) -> int:
        return max(k, self.reranker.depth) if self.reranker is not None else k

    def _fused(self, vectors: list[Ranking[T]], bm25: Ranking[T] | None, depth: int) -> list[Hit[T]]:
        """The first ``depth`` fused hits, each item read from the first side that found it (vector sides first)."""
        sides = [*vectors, *([bm25] if bm25 is not None else [])]
        weights = self.weights if bm25 is not None else self.weights[:-1]
        # a side's keys are usually distinct (then a key's position is its rank - 1); a side of repeats is read
        # at each key's first position, and ranked among its distinct keys
        distinct = [keys if len(set(keys)) == len(keys) else _unique(keys) for keys in (s.keys for s in sides)]
        positions = [None if d is side.keys else _first_positions(side.keys) for d, side in zip(distinct, sides,
                                                                                               strict=True)]
        if len(sides) == 1:
            keys = list(distinct[0][:depth])
            at = positions[0]
            found = sides[0].items([at[key] for key in keys] if at is not None else list(range(len(keys))))
            on_vector = bm25 is None
            return [Hit(item, key, 1.0 / rank, rank if on_vector else None, None if on_vector else rank,
                        (rank,) if on_vector else ())
                    for rank, (key, item) in enumerate(zip(keys, found, strict=True), start=1)]
        fused = fuse(distinct, rrf_k=self.rrf_k, weights=weights, limit=depth)
        wanted: dict[int, list[tuple[int, int]]] = {}
        last = len(sides) - 1
        for hit in fused:
            side = last if bm25 is not None and self.items_from == "bm25" and hit.ranks[last] is not None else next(
                s for s, rank in enumerate(hit.ranks) if rank is not None)
            at = positions[side]
            rank = hit.ranks[side]
            assert rank is not None
            wanted.setdefault(side, []).append((hit.id, at[hit.id] if at is not None else rank - 1))
        items: dict[int, T] = {}
        for s, chosen in wanted.items():
            items.update(zip((key for key, _ in chosen), sides[s].items([p for _, p in chosen]), strict=True))
        n = len(vectors)
        return [Hit(items[hit.id], hit.id, hit.score, min((r for r in hit.ranks[:n] if r is not None), default=None),
                    hit.ranks[n] if bm25 is not None else None, hit.ranks[:n]) for hit in fused]


def all_weights(weights: Sequence[float] | Mapping[str, float], vectors: int) -> tuple[float, ...]:
    """One weight per side, vector sides first: ``(vector, bm25)`` repeats the vector weight for each vector side;
    ``vectors + 1`` weights are taken as they are."""
    if vectors > 1 and not isinstance(weights, Mapping) and len(weights) == vectors + 1:
        values = tuple(float(w) for w in weights)
        if min(values) < 0 or max(values) <= 0:
            raise ConfigurationError(f"weights must be >= 0 with at least one above 0, not {values}",
                                     setting="weights")
        return values
    try:
        vector, bm25 = side_weights(weights)
    except InvalidInputError as exc:
        raise ConfigurationError(f"{exc} (or, with {vectors} vector sides, {vectors + 1} weights: each vector side's, "
                                 "then BM25's)" if vectors > 1 else str(exc), setting="weights") from None
    return (vector,) * max(vectors, 1) + (bm25,)


_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads BM25 searches run on while the vector side answers (one per core, shared by every query)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2,
                                                          thread_name_prefix="ctx-bm25")
        return _POOL


def check_depths(k: int, candidates: int, rrf_k: int = DEFAULT_RRF_K) -> None:
    """What an adapter's retriever checks when it is made (its hybrid query is made per query): results returned
    and candidates per side at least 1, the RRF constant at least 0."""
    if k < 1 or candidates < 1 or rrf_k < 0:
        raise ConfigurationError(f"k (results) and candidates must be >= 1 and rrf_k >= 0 (got {k}, {candidates}, "
                                 f"{rrf_k})", setting="k")


def _check_k(k: int) -> None:
    if k < 1:
        raise ConfigurationError(f"k must be >= 1, not {k}", setting="k")


async def _asearch(side: Side[T] | None, query: str, k: int, where: Any) -> Ranking[T] | None:
    if side is None:
        return None
    if isinstance(side, AsyncSide):
        return await side.asearch(query, k, where)
    return await asyncio.to_thread(side.search, query, k, where)


def _unique(keys: Sequence[int]) -> list[int]:
    return list(dict.fromkeys(keys))


def _first_positions(keys: Sequence[int]) -> dict[int, int]:
    positions: dict[int, int] = {}
    for position, key in enumerate(keys):
        positions.setdefault(key, position)
    return positions


class BM25Side(Generic[T]):
    """The ``BM25Store`` as a side: ``decode`` turns a stored chunk into the item (a document, a node); ``where``
    becomes the store's ``where`` and ``keep`` by ``translate`` (default: a ``where`` dict as it is)."""

    def __init__(self, store: BM25Store, decode: Callable[[StoredEntry], T], *,
                 translate: Callable[[Any], tuple[Mapping[str, Any] | None,
                                                  Callable[[StoredEntry], bool] | None]] | None = None) -> None:
        self.store = store
        self.decode = decode
        self.translate = translate or _where_as_is

    def __repr__(self) -> str:
        return f"BM25Side({self.store!r})"

    def search(self, query: str, k: int, where: Any = None) -> _DecodedRanking[T]:
        mapping, keep = self.translate(where) if where is not None else (None, None)
        return _DecodedRanking(self.store.search(query, k, where=mapping, keep=keep), self.decode)


def _where_as_is(where: Any) -> tuple[Mapping[str, Any] | None, Callable[[StoredEntry], bool] | None]:
    if isinstance(where, Mapping):
        return where, None
    if callable(where):
        return None, where
    raise ConfigurationError(f"a BM25 filter is a where dict ({{'tenant': 'a'}}) or a predicate, not "
                             f"{type(where).__name__}", setting="where")


class _DecodedRanking(Generic[T]):
    def __init__(self, results: BM25Results, decode: Callable[[StoredEntry], T]) -> None:
        self.results = results
        self.decode = decode

    @property
    def keys(self) -> Sequence[int]:
        return self.results.keys

    def items(self, positions: Sequence[int]) -> list[T]:
        return [self.decode(entry) for entry in self.results.entries(positions)]


class WindowedSide(Generic[T, W]):
    """A vector side whose vectors are windows of chunks (``embed_layout="windows"``): asks ``per_chunk`` times as
    many windows, ranks each chunk by its best window, and answers with whole chunks (``wholes`` reads them, e.g.
    from the ``BM25Store``, for the windows at some positions; by default the inner side's items already are)."""

    def __init__(self, inner: Side[W], wholes: Callable[[Sequence[W]], Sequence[T]] | None = None, *,
                 per_chunk: int = 4) -> None:
        self.inner = inner
        self.wholes: Callable[[Sequence[W]], Sequence[Any]] = wholes or _as_they_are
        self.per_chunk = per_chunk

    def __repr__(self) -> str:
        return f"WindowedSide({self.inner!r}, per_chunk={self.per_chunk})"

    def search(self, query: str, k: int, where: Any = None) -> _WholeRanking[T, W]:
        return _WholeRanking(self.inner.search(query, k * self.per_chunk, where), k, self.wholes)

    async def asearch(self, query: str, k: int, where: Any = None) -> _WholeRanking[T, W]:
        inner = await _asearch(self.inner, query, k * self.per_chunk, where)
        assert inner is not None
        return _WholeRanking(inner, k, self.wholes)


def vector_sides(first: Side[T], others: Sequence[Side[T]] = (),
                 wholes: Callable[[Sequence[Any]], Sequence[T]] | None = None) -> Side[T] | list[Side[T]]:
    """A retriever's vector side for ``HybridRetriever``: ``first`` alone, ``first`` searched by windows and
    answering with whole items (``wholes``: the windows layout), or ``first`` beside more embedders' sides."""
    if wholes is not None:
        return WindowedSide(first, wholes)
    return [first, *others] if others else first


def _as_they_are(items: Sequence[W]) -> Sequence[W]:
    return items


class _WholeRanking(Generic[T, W]):
    def __init__(self, windows: Ranking[W], k: int, wholes: Callable[[Sequence[W]], Sequence[T]]) -> None:
        at = _first_positions(windows.keys)
        self._keys = list(at)[:k]  # each chunk at its best window, first k chunks
        self._window_at = [at[key] for key in self._keys]
        self._windows = windows
        self._wholes = wholes
        window_ids = windows.ids if isinstance(windows, IdentifiedRanking) else None
        self.ids = [window_ids[p] for p in self._window_at] if window_ids else []

    @property
    def keys(self) -> Sequence[int]:
        return self._keys

    def items(self, positions: Sequence[int]) -> list[T]:
        windows = self._windows.items([self._window_at[p] for p in positions])
        return list(self._wholes(windows))
