"""Any embedding model as an evaluation row: LangChain ``Embeddings``, LlamaIndex ``BaseEmbedding`` or an
``Embedder`` of this package, read through their methods (no framework is imported), vectors normalised so the
exact search ranks by cosine as it does for the built-in embedders."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.protocols import Embedder, QueryEmbedder


@runtime_checkable
class LangChainEmbeddings(Protocol):
    """LangChain's ``Embeddings`` interface (no import of LangChain needed)."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...


@runtime_checkable
class LlamaIndexEmbedding(Protocol):
    """LlamaIndex's ``BaseEmbedding`` interface, as far as an evaluation uses it."""

    def get_text_embedding_batch(self, texts: list[str]) -> list[list[float]]: ...

    def get_query_embedding(self, query: str) -> list[float]: ...


def embed_queries(embedder: Embedder, queries: Sequence[str]) -> Any:
    """``queries`` embedded as queries: with the model's own query form where it has one (E5's ``query:``
    prefix), else as any text."""
    return embedder.embed_queries(queries) if isinstance(embedder, QueryEmbedder) else embedder.embed(queries)


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
        self._documents: Callable[[list[str]], list[Any]]
        self._query: Callable[[str], Any]
        if isinstance(model, LangChainEmbeddings):
            self._documents, self._query = model.embed_documents, model.embed_query
        elif isinstance(model, LlamaIndexEmbedding):
            self._documents, self._query = model.get_text_embedding_batch, model.get_query_embedding
        else:
            raise ConfigurationError(f"{type(model).__name__} is not an embedding model: pass a LangChain Embeddings, "
                                     "a LlamaIndex BaseEmbedding or an Embedder", setting="embedders")
        self.model = model
        self.batch_size = batch_size
        # The row's label, not a capability: the model's name where the framework keeps one (OpenAI's: model)
        name = getattr(model, "model_name", None) or getattr(model, "model", None)
        self.model_id = f"{type(model).__name__}:{name}" if isinstance(name, str) else type(model).__name__

    def embed(self, texts: Sequence[str]) -> Any:
        rows: list[Any] = []
        texts = list(texts)
        for i in range(0, len(texts), self.batch_size):
            rows += list(self._documents(texts[i : i + self.batch_size]))
        return _unit(rows)

    def embed_query(self, text: str) -> Any:
        return _unit(self._query(text))[0]

    def embed_queries(self, queries: Sequence[str]) -> Any:
        import numpy as np

        return np.stack([self.embed_query(q) for q in queries]) if queries else _unit([[0.0]])[:0]


def as_embedder(model: Any) -> Embedder:
    """``model`` as an ``Embedder``: this package's embedders as they are, also inside our framework models
    (``MiniLMEmbeddings``, ``E5Embedding``...); other LangChain ``Embeddings`` (``embed_documents`` /
    ``embed_query``) and LlamaIndex ``BaseEmbedding`` (``get_text_embedding_batch`` / ``get_query_embedding``)
    wrapped; anything else is a ``ConfigurationError``."""
    from ctx_retrieval.adapting import embedder_of

    model = embedder_of(model)
    if isinstance(model, Embedder):
        return model
    return FrameworkEmbedder(model)
