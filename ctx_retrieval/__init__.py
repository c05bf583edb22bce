"""ctx_retrieval: contextual retrieval for RAG pipelines, the framework-free core.

An LLM reads each document and writes a short context for each of its chunks; the context is prepended to the
chunk before it is embedded and BM25-indexed. This package turns (document, chunks) into those contexts as
cheaply (prompt caching, a persistent context cache) and reliably (retries, rate limits, resumable runs) as
the API allows. Importing it imports no framework and no SDK.
"""

from ctx_retrieval import errors as _errors
from ctx_retrieval.contextualize.cache import ContextCache, default_cache_path
from ctx_retrieval.contextualize.generator import ContextGenerator
from ctx_retrieval.contextualize.heuristic import HeuristicContextualizer
from ctx_retrieval.contextualize.prompts import (
    DEFAULT_PROMPT,
    DOCUMENT_LANGUAGE_PROMPT,
    ENGLISH_PROMPT,
    PROMPT_VERSION,
    PromptTemplate,
    clean_context,
)
from ctx_retrieval.contextualize.results import ContextRun, CostEstimate
from ctx_retrieval.contextualize.versions import ReusePolicy
from ctx_retrieval.contextualize.windowing import WindowConfig
from ctx_retrieval.errors import *  # noqa: F403 - the error tree, named once in errors.__all__
from ctx_retrieval.loaders import split_into_chunks
from ctx_retrieval.models import MODELS, ModelInfo
from ctx_retrieval.pacing import RateLimit, RetryPolicy
from ctx_retrieval.providers import AnthropicProvider, OpenAICompatibleProvider, Provider
from ctx_retrieval.retrieval.bm25 import BM25Index as _BM25Index
from ctx_retrieval.retrieval.bm25 import tokenize, tokenize_parts
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store
from ctx_retrieval.retrieval.embeddings import EmbeddingCache, MiniLMEmbedder
from ctx_retrieval.retrieval.filters import compile_where
from ctx_retrieval.retrieval.fusion import FusedHit, fuse, reciprocal_rank_fusion
from ctx_retrieval.retrieval.hybrid import BM25Side, Hit, HybridRetriever
from ctx_retrieval.retrieval.late import late_chunk_embeddings
from ctx_retrieval.retrieval.rerank import ClaudeReranker
from ctx_retrieval.text import indexed_text
from ctx_retrieval.types import Chunk, ContextResult, SourceDocument, TokenUsage, make_chunk_id
from ctx_retrieval.usage import FailedChunk, RunReport, StaleChunk

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_PROMPT",
    "DOCUMENT_LANGUAGE_PROMPT",
    "ENGLISH_PROMPT",
    "MODELS",
    "PROMPT_VERSION",
    "AnthropicProvider",
    "BM25Entry",
    "BM25Side",
    "BM25Store",
    "Chunk",
    "ClaudeReranker",
    "ContextCache",
    "ContextGenerator",
    "ContextResult",
    "ContextRun",
    "CostEstimate",
    "EmbeddingCache",
    "FailedChunk",
    "FusedHit",
    "HeuristicContextualizer",
    "Hit",
    "HybridRetriever",
    "MiniLMEmbedder",
    "ModelInfo",
    "OpenAICompatibleProvider",
    "PromptTemplate",
    "Provider",
    "RateLimit",
    "RetryPolicy",
    "ReusePolicy",
    "RunReport",
    "SourceDocument",
    "StaleChunk",
    "TokenUsage",
    "WindowConfig",
    "__version__",
    "clean_context",
    "compile_where",
    "default_cache_path",
    "fuse",
    "indexed_text",
    "late_chunk_embeddings",
    "make_chunk_id",
    "reciprocal_rank_fusion",
    "split_into_chunks",
    "tokenize",
    "tokenize_parts",
]
__all__ += _errors.__all__

# BM25Index (a static in-memory numpy index) leaves the top level: no part of the package indexes with it (BM25Store
# is the one contextual BM25 index, in memory with path=None or on disk, incremental); it stays in
# ctx_retrieval.retrieval.bm25 as the exact BM25 the tests and benchmarks check the engines against.
from ctx_retrieval._names import former_names as _former_names  # noqa: E402

__getattr__ = _former_names(__name__, {}, moved={"BM25Index": (
    "left the top level: index with BM25Store (BM25Store() in memory, BM25Store(path) on disk), or import the "
    "exact reference from ctx_retrieval.retrieval.bm25", _BM25Index)})
