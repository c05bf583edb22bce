"""Reciprocal rank fusion: one ranking from several, robust to their incomparable score scales.

Both adapters and the core store fuse with ``fuse`` and name its parameter ``rrf_k``; their results carry the
fused score on one documented scale and each side's rank.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from ctx_retrieval.errors import InvalidInputError

DEFAULT_RRF_K = 10
"""The RRF constant: 10, not the literature's 60 (Cormack et al. 2009; LangChain's ``EnsembleRetriever`` and
LlamaIndex's fusion retriever use 60). Measured on three corpora (``benchmarks/fusion_sweep.py``), a smaller constant
lets a chunk one side ranks near the top survive when the other side ranks it far down (dense search over
Vietnamese typed without marks, MiniLM past its 256 tokens): contextual hybrid misses fewer in the top 20 on every
corpus that moves and on none more."""
SIDES = ("vector", "bm25")
"""The order of the two sides everywhere a pair of weights or ranks appears."""
T = TypeVar("T", bound=Hashable)


@functools.lru_cache(maxsize=1 << 17)
def chunk_key(chunk_id: str) -> int:
    """A chunk id as the 63-bit integer the hybrid query fuses on (every side maps its ids the same way, and the
    BM25 index keeps it as a column, so no id is read for a candidate that is not returned). Two ids of a million
    collide with odds of about 1 in 10^7; the chunk ids themselves are what writes and deletes use."""
    digest = hashlib.blake2b(chunk_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[T]],
    *,
    rrf_k: int = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> list[tuple[T, float]]:
    """Fuse rankings (ids, best first): ``score(id) = sum_i weight_i / (rrf_k + rank_i(id))``, ranks from 1.

    An id repeated within one ranking counts at its best rank only (dedupe by id). Ties keep the order in which
    ids were first seen, ranking by ranking, so the result is deterministic (LangChain's ``EnsembleRetriever``
    orders the same way).
    """
    return [(hit.id, hit.raw_score) for hit in fuse(rankings, rrf_k=rrf_k, weights=weights, limit=limit)]


@dataclass(frozen=True)
class FusedHit(Generic[T]):
    """One fused result. ``score`` is the RRF score divided by its maximum (first on every side), so it lies in
    (0, 1]: 1.0 is first on both sides, about 0.5 first on one side of two equally weighted and absent from the
    other, and a chunk ranked 150th on one side only scores about 0.03 (``rrf_k=10``; 0.15 at 60). ``ranks`` holds each
    side's rank from 1, or ``None`` where that side did not return it."""

    id: T
    score: float
    raw_score: float
    ranks: tuple[int | None, ...]


def fuse(
    rankings: Sequence[Sequence[T]],
    *,
    rrf_k: int = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> list[FusedHit[T]]:
    """``reciprocal_rank_fusion`` with each result's normalized score and per-side ranks."""
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise InvalidInputError(f"{len(weights)} weights for {len(rankings)} rankings")
    if rrf_k < 0:
        raise InvalidInputError(f"rrf_k must be >= 0, not {rrf_k}")
    if any(w < 0 for w in weights) or (rankings and not any(w > 0 for w in weights)):
        raise InvalidInputError(f"weights must be >= 0 with at least one above 0, not {list(weights)}")
    ranks: dict[T, list[int | None]] = {}
    raw: dict[T, float] = {}
    sides = len(rankings)
    for side, (ranking, weight) in enumerate(zip(rankings, weights, strict=True)):
        for rank, item in enumerate(ranking, start=1):
            held = ranks.get(item)
            if held is None:
                held = ranks[item] = [None] * sides
                raw[item] = 0.0
            if held[side] is None:  # an id repeated within one ranking counts at its best rank
                held[side] = rank
                raw[item] += weight / (rrf_k + rank)
    best = sum(weights) / (rrf_k + 1) if rankings else 1.0
    # insertion order (first seen, ranking by ranking) breaks ties, as a stable sort by score would
    scored = [(-score, order, item) for order, (item, score) in enumerate(raw.items())]
    chosen = heapq.nsmallest(limit, scored) if limit is not None else sorted(scored)
    return [FusedHit(item, -negative / best, -negative, tuple(ranks[item])) for negative, _, item in chosen]


def side_weights(weights: Sequence[float] | Mapping[str, float]) -> tuple[float, float]:
    """Weights for the two sides, as ``(vector, bm25)`` or ``{"vector": ..., "bm25": ...}`` (the mapping cannot be
    read the wrong way round)."""
    if isinstance(weights, Mapping):
        unknown = set(weights) - set(SIDES)
        if unknown or len(weights) != 2:
            raise InvalidInputError(f"weights as a dict need the keys 'vector' and 'bm25', not {sorted(weights)}")
        pair = (float(weights["vector"]), float(weights["bm25"]))
    else:
        values = list(weights)
        if len(values) != 2:
            raise InvalidInputError(f"two weights, (vector, bm25), not {values}")
        pair = (float(values[0]), float(values[1]))
    if min(pair) < 0 or max(pair) <= 0:
        raise InvalidInputError(f"weights must be >= 0 with at least one above 0, not {pair}")
    return pair
