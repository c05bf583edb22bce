"""ctx_retrieval: contextual retrieval for RAG pipelines, the framework-free core.

An LLM reads each document and writes a short context for each of its chunks; the context is prepended to the
chunk before it is embedded and BM25-indexed. This package turns (document, chunks) into those contexts as
cheaply (prompt caching, a persistent context cache) and reliably (retries, rate limits, resumable runs) as
the API allows. Importing it imports no framework and no SDK.

The names below are imported when first used (PEP 562), so a process that only embeds or searches (a query service,
the CLI's ``query``) does not import the context engine: importing ``ctx_retrieval.retrieval.e5`` took 0.33-0.45 s
with every name imported at once and takes 0.07-0.11 s now (``benchmarks/embedding_throughput.py``'s fresh process).
"""

import importlib as _importlib
import typing as _typing

from ctx_retrieval import errors as _errors
from ctx_retrieval.errors import *  # noqa: F403 - the error tree, named once in errors.__all__

if _typing.TYPE_CHECKING:  # for type checkers; at run time each name is imported when first used (__getattr__)
    from ctx_retrieval.contextualize.cache import ContextCache as ContextCache
    from ctx_retrieval.contextualize.cache import default_cache_path as default_cache_path
    from ctx_retrieval.contextualize.generator import ContextGenerator as ContextGenerator
    from ctx_retrieval.contextualize.heuristic import HeuristicContextualizer as HeuristicContextualizer
    from ctx_retrieval.contextualize.prompts import DEFAULT_PROMPT as DEFAULT_PROMPT
    from ctx_retrieval.contextualize.prompts import DOCUMENT_LANGUAGE_PROMPT as DOCUMENT_LANGUAGE_PROMPT
    from ctx_retrieval.contextualize.prompts import ENGLISH_PROMPT as ENGLISH_PROMPT
    from ctx_retrieval.contextualize.prompts import PROMPT_VERSION as PROMPT_VERSION
    from ctx_retrieval.contextualize.prompts import PromptTemplate as PromptTemplate
    from ctx_retrieval.contextualize.prompts import clean_context as clean_context
    from ctx_retrieval.contextualize.results import ContextRun as ContextRun
    from ctx_retrieval.contextualize.results import CostEstimate as CostEstimate
    from ctx_retrieval.contextualize.versions import ReusePolicy as ReusePolicy
    from ctx_retrieval.contextualize.windowing import WindowConfig as WindowConfig
    from ctx_retrieval.loaders import split_into_chunks as split_into_chunks
    from ctx_retrieval.models import MODELS as MODELS
    from ctx_retrieval.models import ModelInfo as ModelInfo
    from ctx_retrieval.pacing import RateLimit as RateLimit
    from ctx_retrieval.pacing import RetryPolicy as RetryPolicy
    from ctx_retrieval.providers import AnthropicProvider as AnthropicProvider
    from ctx_retrieval.providers import OpenAICompatibleProvider as OpenAICompatibleProvider
    from ctx_retrieval.providers import Provider as Provider
    from ctx_retrieval.retrieval.bm25 import tokenize as tokenize
    from ctx_retrieval.retrieval.bm25 import tokenize_parts as tokenize_parts
    from ctx_retrieval.retrieval.bm25_store import BM25Entry as BM25Entry
    from ctx_retrieval.retrieval.bm25_store import BM25Store as BM25Store
    from ctx_retrieval.retrieval.embeddings import EmbeddingCache as EmbeddingCache
    from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder as MiniLMEmbedder
    from ctx_retrieval.retrieval.filters import compile_where as compile_where
    from ctx_retrieval.retrieval.fusion import FusedHit as FusedHit
    from ctx_retrieval.retrieval.fusion import fuse as fuse
    from ctx_retrieval.retrieval.fusion import reciprocal_rank_fusion as reciprocal_rank_fusion
    from ctx_retrieval.retrieval.hybrid import BM25Side as BM25Side
    from ctx_retrieval.retrieval.hybrid import Hit as Hit
    from ctx_retrieval.retrieval.hybrid import HybridRetriever as HybridRetriever
    from ctx_retrieval.retrieval.late import late_chunk_embeddings as late_chunk_embeddings
    from ctx_retrieval.retrieval.rerank import ClaudeReranker as ClaudeReranker
    from ctx_retrieval.text import indexed_text as indexed_text
    from ctx_retrieval.types import Chunk as Chunk
    from ctx_retrieval.types import ContextResult as ContextResult
    from ctx_retrieval.types import SourceDocument as SourceDocument
    from ctx_retrieval.types import TokenUsage as TokenUsage
    from ctx_retrieval.types import make_chunk_id as make_chunk_id
    from ctx_retrieval.usage import FailedChunk as FailedChunk
    from ctx_retrieval.usage import RunReport as RunReport
    from ctx_retrieval.usage import StaleChunk as StaleChunk

# Where each name lives (the imports above, for type checkers; tests/unit/test_packaging.py checks the two agree)
_HOMES = {
    "contextualize.cache": ("ContextCache", "default_cache_path"),
    "contextualize.generator": ("ContextGenerator",),
    "contextualize.heuristic": ("HeuristicContextualizer",),
    "contextualize.prompts": ("DEFAULT_PROMPT", "DOCUMENT_LANGUAGE_PROMPT", "ENGLISH_PROMPT", "PROMPT_VERSION",
                              "PromptTemplate", "clean_context"),
    "contextualize.results": ("ContextRun", "CostEstimate"),
    "contextualize.versions": ("ReusePolicy",),
    "contextualize.windowing": ("WindowConfig",),
    "loaders": ("split_into_chunks",),
    "models": ("MODELS", "ModelInfo"),
    "pacing": ("RateLimit", "RetryPolicy"),
    "providers": ("AnthropicProvider", "OpenAICompatibleProvider", "Provider"),
    "retrieval.bm25": ("tokenize", "tokenize_parts"),
    "retrieval.bm25_store": ("BM25Entry", "BM25Store"),
    "retrieval.embeddings": ("EmbeddingCache", "MiniLMEmbedder"),
    "retrieval.filters": ("compile_where",),
    "retrieval.fusion": ("FusedHit", "fuse", "reciprocal_rank_fusion"),
    "retrieval.hybrid": ("BM25Side", "Hit", "HybridRetriever"),
    "retrieval.late": ("late_chunk_embeddings",),
    "retrieval.rerank": ("ClaudeReranker",),
    "text": ("indexed_text",),
    "types": ("Chunk", "ContextResult", "SourceDocument", "TokenUsage", "make_chunk_id"),
    "usage": ("FailedChunk", "RunReport", "StaleChunk"),
}
_HOME = {name: f"{__name__}.{module}" for module, names in _HOMES.items() for name in names}

__version__ = "0.1.0"

__all__ = sorted([*_HOME, "__version__"]) + _errors.__all__


def __getattr__(name: str) -> object:
    if name in _HOME:
        value = vars(_importlib.import_module(_HOME[name]))[name]
        globals()[name] = value  # imported once: later look-ups find it without this function
        return value
    if name == "BM25Index":
        # BM25Index (a static in-memory numpy index) left the top level: no part of the package indexes with it
        # (BM25Store is the one contextual BM25 index, in memory with path=None or on disk, incremental); it stays in
        # ctx_retrieval.retrieval.bm25 as the exact BM25 the tests and benchmarks check the engines against.
        from ctx_retrieval._names import former_names
        from ctx_retrieval.retrieval.bm25 import BM25Index

        return former_names(__name__, {}, moved={"BM25Index": (
            "left the top level: index with BM25Store (BM25Store() in memory, BM25Store(path) on disk), or import "
            "the exact reference from ctx_retrieval.retrieval.bm25", BM25Index)})(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
