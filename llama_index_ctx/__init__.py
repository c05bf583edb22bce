"""LlamaIndex integration: ``ContextualNodeTransform`` for ingestion pipelines, a contextual hybrid retriever over
any ``VectorStoreIndex`` (vectors + BM25, fused by reciprocal rank fusion, filters on both sides), late chunking
(``LateChunkingTransform``), Claude reranking and offline embeddings.

Setup:
    pip install "ctx-retrieval[llama-index,local,anthropic]"      # llama-index-chroma for Chroma
"""

from ctx_retrieval._names import former_names as _former_names
from ctx_retrieval._optional import require

require("llama_index.core", "llama-index")

from .embeddings import E5Embedding, MiniLMEmbedding, embedding_for  # noqa: E402
from .engines import ContextualMilvusVectorStore, ContextualPostgresVectorStore  # noqa: E402 - extras when used
from .late import LateChunkingTransform  # noqa: E402
from .providers import LlamaIndexLLMProvider  # noqa: E402
from .rerank import ClaudeRerankPostprocessor, eval_reranker  # noqa: E402
from .retrievers import ContextualHybridRetriever  # noqa: E402
from .splitters import EmbedderTokenSplitter  # noqa: E402
from .store import ContextualBM25Retriever, ContextualVectorStore, chroma_vector_store  # noqa: E402
from .transform import ContextualNodeTransform, arefresh_stale, refresh_stale  # noqa: E402

__all__ = [
    "ClaudeRerankPostprocessor",
    "ContextualBM25Retriever",
    "ContextualHybridRetriever",
    "ContextualMilvusVectorStore",
    "ContextualNodeTransform",
    "ContextualPostgresVectorStore",
    "ContextualVectorStore",
    "E5Embedding",
    "EmbedderTokenSplitter",
    "LateChunkingTransform",
    "LlamaIndexLLMProvider",
    "MiniLMEmbedding",
    "arefresh_stale",
    "chroma_vector_store",
    "embedding_for",
    "eval_reranker",
    "refresh_stale",
]


# ContextualBM25Retriever's name before 2026-12-05 (issue 36), for one release.
__getattr__ = _former_names(__name__, {"BM25IndexRetriever": ("ContextualBM25Retriever", ContextualBM25Retriever)})
