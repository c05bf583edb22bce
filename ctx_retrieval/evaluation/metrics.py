"""Scores over rankings: the cookbook's Pass@k per query and averaged, and seeded bootstrap intervals."""

from __future__ import annotations

from collections.abc import Sequence

from ctx_retrieval.evaluation.corpus import EvalQuery

__all__ = ["BOOTSTRAP_RESAMPLES", "K_VALUES", "bootstrap_interval", "pass_at_k", "pass_per_query"]

K_VALUES = (5, 10, 20)


def pass_per_query(results: Sequence[Sequence[str]], queries: Sequence[EvalQuery], text_of: dict[str, str],
                   k: int) -> list[float]:
    """Per query, the share of its gold chunk texts found among the top-k texts (the cookbook's Pass@k terms)."""
    values = []
    for retrieved, query in zip(results, queries, strict=True):
        top = {text_of[r].strip() for r in retrieved[:k]}
        values.append(sum(1 for g in query.gold if text_of[g].strip() in top) / len(query.gold))
    return values


def pass_at_k(results: Sequence[Sequence[str]], queries: Sequence[EvalQuery], text_of: dict[str, str], k: int) -> float:
    """The cookbook's Pass@k: per query, gold chunk texts found among the top-k texts / gold count; averaged."""
    values = pass_per_query(results, queries, text_of, k)
    return sum(values) / len(values) if values else 0.0


BOOTSTRAP_RESAMPLES = 2000


def bootstrap_interval(values: Sequence[float], *, against: Sequence[float] | None = None, seed: int = 0,
                       resamples: int = BOOTSTRAP_RESAMPLES) -> tuple[float, float]:
    """A 95% percentile bootstrap interval over queries for the mean of ``values`` (paired with ``against``: the
    mean difference ``values - against``, the same queries resampled for both). Seeded: the same on every run."""
    import numpy as np

    data = np.asarray(values, dtype=np.float64)
    if against is not None:
        data = data - np.asarray(against, dtype=np.float64)
    if len(data) == 0:
        return 0.0, 0.0
    picks = np.random.default_rng(seed).integers(0, len(data), size=(resamples, len(data)))
    means = data[picks].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))
