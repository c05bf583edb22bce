"""Any embedding model as an evaluation row: LangChain ``Embeddings``, LlamaIndex ``BaseEmbedding`` or an
``Embedder`` of this package, read through their methods (no framework is imported), vectors normalised so the
exact search ranks by cosine as it does for the built-in embedders."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctx_retrieval.errors import ConfigurationError

__all__ = ["FrameworkEmbedder", "as_embedder"]


def _unit(rows: Any) -> Any:
    import numpy as np

    matrix = np.asarray(rows, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


class FrameworkEmbedder:
    """A framework's embedding model as an ``Embedder`` (documents and queries embedded each its own way, as an
    asymmetric model needs)."""

    def __init__(self, model: Any, *, batch_size: int = 64) -> None:
        self.model = model
        self.batch_size = batch_size
        name = getattr(model, "model_name", None) or getattr(model, "model", None)
        self.model_id = f"{type(model).__name__}:{name}" if isinstance(name, str) else type(model).__name__

    def _documents(self, texts: list[str]) -> list[Any]:
        if hasattr(self.model, "embed_documents"):  # LangChain
            return list(self.model.embed_documents(texts))
        return list(self.model.get_text_embedding_batch(texts))  # LlamaIndex

    def embed(self, texts: Sequence[str]) -> Any:
        rows: list[Any] = []
        texts = list(texts)
        for i in range(0, len(texts), self.batch_size):
            rows += self._documents(texts[i : i + self.batch_size])
        return _unit(rows)

    def embed_query(self, text: str) -> Any:
        if hasattr(self.model, "embed_query"):
            return _unit(self.model.embed_query(text))[0]
        return _unit(self.model.get_query_embedding(text))[0]

    def embed_queries(self, queries: Sequence[str]) -> Any:
        import numpy as np

        return np.stack([self.embed_query(q) for q in queries]) if queries else _unit([[0.0]])[:0]


def as_embedder(model: Any) -> Any:
    """``model`` as an ``Embedder``: this package's embedders as they are; LangChain ``Embeddings``
    (``embed_documents`` / ``embed_query``) and LlamaIndex ``BaseEmbedding`` (``get_text_embedding_batch`` /
    ``get_query_embedding``) wrapped; anything else is a ``ConfigurationError``."""
    if hasattr(model, "embed") and hasattr(model, "model_id"):
        return model
    if (hasattr(model, "embed_documents") and hasattr(model, "embed_query")) or (
            hasattr(model, "get_text_embedding_batch") and hasattr(model, "get_query_embedding")):
        return FrameworkEmbedder(model)
    raise ConfigurationError(f"{type(model).__name__} is not an embedding model: pass a LangChain Embeddings, a "
                             "LlamaIndex BaseEmbedding or an Embedder", setting="embedders")
