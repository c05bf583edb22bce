"""The core hybrid query with more than one vector side (two embedders fused with BM25)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K, fuse
from ctx_retrieval.retrieval.hybrid import HybridRetriever, Ranked


class ListSide:
    """A side answering every query with the same ranking; its items say which side built them."""

    def __init__(self, name: str, keys: list[int]) -> None:
        self.name, self.keys, self.calls = name, keys, 0

    def search(self, query: str, k: int, where: Any = None) -> Ranked[str]:
        self.calls += 1
        keys = self.keys[:k]
        return Ranked(keys, [f"{self.name}:{key}" for key in keys])


def test_three_sides_fuse_as_one_reciprocal_rank_fusion_with_each_sides_rank() -> None:
    minilm, e5, bm25 = ListSide("minilm", [1, 2, 3, 4]), ListSide("e5", [3, 5, 1]), ListSide("bm25", [5, 6, 1])
    hits = HybridRetriever([minilm, e5], bm25, candidates=10).retrieve("q", k=10)
    expected = fuse([[1, 2, 3, 4], [3, 5, 1], [5, 6, 1]], rrf_k=DEFAULT_RRF_K)
    assert [h.key for h in hits] == [f.id for f in expected]
    assert [h.score for h in hits] == pytest.approx([f.score for f in expected])
    first = hits[0]
    assert first.key == 1 and first.vector_ranks == (1, 3) and first.vector_rank == 1 and first.bm25_rank == 3
    five = next(h for h in hits if h.key == 5)
    assert five.vector_ranks == (None, 2) and five.vector_rank == 2 and five.item == "e5:5"  # read where first found
    six = next(h for h in hits if h.key == 6)
    assert six.vector_rank is None and six.item == "bm25:6"
    assert asyncio.run(HybridRetriever([minilm, e5], bm25, candidates=10).aretrieve("q", k=10)) == hits


def test_weights_per_side_or_one_for_all_vector_sides() -> None:
    a, b, bm25 = ListSide("a", [1, 2]), ListSide("b", [2, 1]), ListSide("bm25", [3, 1])
    assert HybridRetriever([a, b], bm25, weights=(1.0, 2.0)).weights == (1.0, 1.0, 2.0)
    hits = HybridRetriever([a, b], bm25, weights=(0.0, 1.0, 0.0)).retrieve("q", k=3)
    assert [h.key for h in hits][:2] == [2, 1]  # only the second vector side counts
    with pytest.raises(ConfigurationError):
        HybridRetriever([a, b], bm25, weights=(1.0, -1.0, 1.0))
    with pytest.raises(ConfigurationError, match="needs a vector side"):
        HybridRetriever([], None)


def test_vector_sides_alone_fuse_without_bm25() -> None:
    a, b = ListSide("a", [1, 2]), ListSide("b", [2, 3])
    hits = HybridRetriever([a, b], None).retrieve("q", k=3)
    assert [h.key for h in hits] == [2, 1, 3] and all(h.bm25_rank is None for h in hits)
    assert HybridRetriever(a, None).retrieve("q", k=1)[0].vector_ranks == (1,)
