"""Dense search over precomputed vectors: an exact numpy index, or a Chroma collection (cosine space).

The Chroma collection is set up here once (created, refilled when incomplete, added in batches) for the evaluation and
the core store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["ChromaDenseIndex", "DenseIndex", "NumpyDenseIndex", "add_vectors", "cosine_collection"]


class DenseIndex(Protocol):
    def search(self, query_vectors: Any, k: int) -> list[list[str]]: ...


class NumpyDenseIndex:
    """Exact cosine search over unit vectors (brute force)."""

    def __init__(self, ids: Sequence[str], vectors: Any) -> None:
        self.ids = list(ids)
        self.vectors = vectors

    def search(self, query_vectors: Any, k: int) -> list[list[str]]:
        import numpy as np

        scores = query_vectors @ self.vectors.T
        k = min(k, len(self.ids))
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        return [[self.ids[i] for i in row] for row in top]


COSINE = {"hnsw:space": "cosine"}
ADD_BATCH = 1000


def cosine_collection(client: Any, name: str, *, embedding_function: Any = None, replace: bool = False) -> Any:
    """The Chroma collection ``name`` in cosine space, created if missing (emptied first when ``replace``).
    Pass the offline ``embedding_function``: Chroma's default downloads its model and fails offline."""
    if replace and name in [c.name if hasattr(c, "name") else c for c in client.list_collections()]:
        client.delete_collection(name)
    return client.get_or_create_collection(name, embedding_function=embedding_function, metadata=COSINE)


def add_vectors(collection: Any, ids: Sequence[str], texts: Sequence[str], vectors: Any,
                metadatas: Sequence[dict[str, Any]] | None = None) -> None:
    """Add precomputed vectors in batches of ``ADD_BATCH`` (Chroma caps one call's size)."""
    for start in range(0, len(ids), ADD_BATCH):
        end = start + ADD_BATCH
        collection.add(ids=list(ids[start:end]), documents=list(texts[start:end]),
                       embeddings=list(vectors[start:end]),
                       metadatas=list(metadatas[start:end]) if metadatas is not None else None)


class ChromaDenseIndex:
    """A Chroma collection holding precomputed vectors (cosine space); reused when already complete."""

    def __init__(self, client: Any, name: str, ids: Sequence[str], texts: Sequence[str], vectors: Any,
                 embedding_function: Any) -> None:
        self.collection = cosine_collection(client, name, embedding_function=embedding_function)
        if self.collection.count() != len(ids):
            self.collection = cosine_collection(client, name, embedding_function=embedding_function, replace=True)
            add_vectors(self.collection, ids, texts, vectors)

    def search(self, query_vectors: Any, k: int) -> list[list[str]]:
        result = self.collection.query(query_embeddings=list(query_vectors),
                                       n_results=min(k, self.collection.count()), include=[])
        return [list(ids) for ids in result["ids"]]
