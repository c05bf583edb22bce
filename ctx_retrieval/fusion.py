"""Reciprocal rank fusion: one ranking from several, robust to their incomparable score scales."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

__all__ = ["DEFAULT_RRF_K", "reciprocal_rank_fusion"]

DEFAULT_RRF_K = 60
T = TypeVar("T", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[T]],
    *,
    k: int = DEFAULT_RRF_K,
    weights: Sequence[float] | None = None,
    limit: int | None = None,
) -> list[tuple[T, float]]:
    """Fuse rankings (ids, best first): ``score(id) = sum_i weight_i / (k + rank_i(id))``, ranks from 1.

    An id repeated within one ranking counts at its best rank only (dedupe by id). Ties keep the order in which
    ids were first seen, ranking by ranking, so the result is deterministic.
    """
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    if k < 0:
        raise ValueError("k must be >= 0")
    scores: dict[T, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        seen: set[T] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    fused = sorted(scores.items(), key=lambda pair: -pair[1])  # stable: first-seen order breaks ties
    return fused[:limit] if limit is not None else fused
