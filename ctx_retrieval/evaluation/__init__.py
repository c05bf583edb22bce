"""Retrieval evaluation: Anthropic's ablation (plain/contextual x dense/BM25/hybrid) on any corpus with gold chunks.

``corpus`` loads the documents, gold chunks and queries (and recorded contexts), ``metrics`` scores rankings
(Pass@k, bootstrap intervals), ``ablation`` runs the variants, ``report`` renders the result.
"""

from ctx_retrieval.evaluation.ablation import DEFAULT_CANDIDATES, run_ablation
from ctx_retrieval.evaluation.corpus import (
    EvalCorpus,
    EvalQuery,
    RecordedContextualizer,
    cookbook_chunk_id,
    document_from_row,
    load_cookbook,
    load_corpus,
)
from ctx_retrieval.evaluation.metrics import (
    BOOTSTRAP_RESAMPLES,
    K_VALUES,
    bootstrap_interval,
    pass_at_k,
    pass_per_query,
)
from ctx_retrieval.evaluation.report import EvalResult, VariantScore

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
