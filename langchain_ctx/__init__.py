"""LangChain integration: contextual chunks (``ContextualDocumentTransformer``) and a contextual hybrid retriever
over any vector store (BM25 + vectors fused by reciprocal rank fusion as ``EnsembleRetriever`` ranks, with scores,
per-side ranks and filters on both sides), Claude reranking and offline embeddings.

Setup:
    pip install "ctx-retrieval[langchain,local,anthropic]"        # langchain-chroma for Chroma
"""

from ctx_retrieval._names import former_names as _former_names
from ctx_retrieval._optional import require

require("langchain_core", "langchain")

from .embeddings import E5Embeddings, MiniLMEmbeddings, embeddings_for  # noqa: E402 - after the dependency check
from .engines import ContextualMilvus, ContextualPostgres  # noqa: E402 - their extras needed when used, not imported
from .providers import LangChainChatProvider  # noqa: E402
from .rerank import ClaudeRerankCompressor, eval_reranker  # noqa: E402
from .retrievers import ContextualHybridRetriever  # noqa: E402
from .splitters import EmbedderTokenSplitter  # noqa: E402
from .store import ContextualBM25Retriever, ContextualVectorStore  # noqa: E402
from .transformer import (  # noqa: E402
    ContextualDocumentTransformer,
    for_answering,
    original_text,
    split_and_contextualize,
)

__all__ = [
    "ClaudeRerankCompressor",
    "ContextualBM25Retriever",
    "ContextualDocumentTransformer",
    "ContextualHybridRetriever",
    "ContextualMilvus",
    "ContextualPostgres",
    "ContextualVectorStore",
    "E5Embeddings",
    "EmbedderTokenSplitter",
    "LangChainChatProvider",
    "MiniLMEmbeddings",
    "embeddings_for",
    "eval_reranker",
    "for_answering",
    "original_text",
    "split_and_contextualize",
]


# ContextualBM25Retriever's name before 2026-12-05 (issue 36), for one release.
__getattr__ = _former_names(__name__, {"BM25IndexRetriever": ("ContextualBM25Retriever", ContextualBM25Retriever)})
