"""LlamaIndex integration: ``ContextualNodeTransform`` for ingestion pipelines and a contextual hybrid retriever
(Chroma + BM25, fused by reciprocal rank fusion), with Claude reranking and offline embeddings.

Setup:
    pip install "ctx-retrieval[llama-index,chroma,local,anthropic]"
"""

from ctx_retrieval._optional import require

require("llama_index.core", "llama-index")

from .bm25 import BM25IndexRetriever  # noqa: E402 - after the dependency check
from .embeddings import MiniLMEmbedding  # noqa: E402
from .late import LateChunkingTransform  # noqa: E402
from .providers import LlamaIndexLLMProvider  # noqa: E402
from .rerank import ClaudeRerankPostprocessor  # noqa: E402
from .retrievers import ContextualHybridRetriever, chroma_vector_store  # noqa: E402
from .transform import ContextualNodeTransform  # noqa: E402

__all__ = [
    "BM25IndexRetriever",
    "ClaudeRerankPostprocessor",
    "ContextualHybridRetriever",
    "ContextualNodeTransform",
    "LateChunkingTransform",
    "LlamaIndexLLMProvider",
    "MiniLMEmbedding",
    "chroma_vector_store",
]
