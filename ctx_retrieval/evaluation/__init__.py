"""Retrieval evaluation: Anthropic's ablation (plain/contextual x dense/BM25/hybrid) on any corpus with gold chunks.

``corpus`` loads the documents, gold chunks and queries (and recorded contexts), ``metrics`` scores rankings
(Pass@k, bootstrap intervals), ``ablation`` runs the variants, ``report`` renders the result.
"""

from ctx_retrieval.evaluation.ablation import run_ablation
from ctx_retrieval.evaluation.corpus import EvalCorpus, EvalQuery, RecordedContextualizer, load_cookbook, load_corpus
from ctx_retrieval.evaluation.metrics import (
    BOOTSTRAP_RESAMPLES,
    K_VALUES,
    bootstrap_interval,
    pass_at_k,
    pass_per_query,
)
from ctx_retrieval.evaluation.report import EvalResult, VariantScore
from ctx_retrieval.loaders import cookbook_chunk_id, document_from_row
from ctx_retrieval.retrieval.hybrid import DEFAULT_CANDIDATES

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "DEFAULT_CANDIDATES",
    "K_VALUES",
    "EvalCorpus",
    "EvalQuery",
    "EvalResult",
    "RecordedContextualizer",
    "VariantScore",
    "bootstrap_interval",
    "cookbook_chunk_id",
    "document_from_row",
    "load_cookbook",
    "load_corpus",
    "pass_at_k",
    "pass_per_query",
    "run_ablation",
]
