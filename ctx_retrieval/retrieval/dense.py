"""Dense search over precomputed vectors: an exact numpy index, or a Chroma collection (cosine space), each also as
a side of the hybrid query (``NumpyDenseSide``, ``ChromaSide``).

The Chroma collection is set up here once (created, refilled when incomplete, added in batches) for the evaluation and
the core store."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.retrieval.fusion import chunk_key

T = TypeVar("T")


class DenseIndex(Protocol):
    def search(self, query_vectors: Any, k: int) -> list[list[str]]: ...


class NumpyDenseIndex:
    """Exact cosine search over unit vectors (brute force)."""

    def __init__(self, ids: Sequence[str], vectors: Any) -> None:
        self.ids = list(ids)
        self.vectors = vectors

    def search(self, query_vectors: Any, k: int) -> list[list[str]]:
        scores = query_vectors @ self.vectors.T
        return [[self.ids[i] for i in top_k(row, k)] for row in scores]


def top_k(scores: Any, k: int) -> Any:
    """Positions of the ``k`` highest scores, best first, ties by position: a partition, then a sort of ``k``
    (sorting all N scores costs twice as much at 1M)."""
    import numpy as np

    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    return top[np.lexsort((top, -scores[top]))]


class IdRanking(Generic[T]):
    """A dense side's answer: chunk keys and ids best first; items read by ``resolve(ids)`` for the positions asked."""

    def __init__(self, ids: Sequence[str], keys: Sequence[int], resolve: Callable[[list[str]], Sequence[T]]) -> None:
        self.ids = list(ids)
        self.keys = list(keys)
        self._resolve = resolve

    def items(self, positions: Sequence[int]) -> Sequence[T]:
        return self._resolve([self.ids[p] for p in positions])


def _same(ids: list[str]) -> Any:
    return ids


class NumpyDenseSide(Generic[T]):
    """Exact cosine search as a hybrid side. ``embed_query`` turns the query into a unit vector (an embedder, or a
    lookup of vectors embedded beforehand); ``chunk_ids`` maps each row to its chunk when rows are windows of
    chunks (then several rows share a key); items are chunk ids, or what ``resolve`` makes of them."""

    def __init__(self, ids: Sequence[str], vectors: Any, embed_query: Callable[[str], Any], *,
                 chunk_ids: Sequence[str] | None = None, resolve: Callable[[list[str]], Sequence[T]] = _same) -> None:
        # Kept as given (a list, or a memory-mapped numpy array of ids): only the top k rows are ever read.
        self.ids = chunk_ids if chunk_ids is not None else ids
        self.vectors = vectors
        self.embed_query = embed_query
        self.resolve = resolve

    def __repr__(self) -> str:
        return f"NumpyDenseSide({len(self.ids)} vectors)"

    def search(self, query: str, k: int, where: Any = None) -> IdRanking[T]:
        if where is not None:
            raise ConfigurationError("the numpy dense index holds no metadata to filter on: use a vector store",
                                     setting="where")
        found = [str(self.ids[i]) for i in top_k(self.vectors @ self.embed_query(query), k)]
        return IdRanking(found, [chunk_key(i) for i in found], self.resolve)


class ChromaSide(Generic[T]):
    """A Chroma collection as a hybrid side: ``where`` is Chroma's own filter; ``chunk_id_key`` names the metadata
    key holding each vector's chunk (windows of one chunk share it), else the vector's id is the chunk's; items are
    chunk ids, or what ``resolve`` makes of them."""

    def __init__(self, collection: Any, embed_query: Callable[[str], Any], *, chunk_id_key: str | None = None,
                 resolve: Callable[[list[str]], Sequence[T]] = _same) -> None:
        self.collection = collection
        self.embed_query = embed_query
        self.chunk_id_key = chunk_id_key
        self.resolve = resolve

    def __repr__(self) -> str:
        return f"ChromaSide({self.collection.name!r})"

    def search(self, query: str, k: int, where: Mapping[str, Any] | None = None) -> IdRanking[T]:
        # No count() first: a round trip per query (0.9 ms at 10k), and Chroma answers fewer than k as it is.
        found = self.collection.query(query_embeddings=[self.embed_query(query)], n_results=k,
                                      where=where or None, include=["metadatas"] if self.chunk_id_key else [])
        # Chroma's ids are strings; windows name their chunk in metadata
        ids = [str(m[self.chunk_id_key]) for m in found["metadatas"][0]] if self.chunk_id_key else found["ids"][0]
        return IdRanking(ids, [chunk_key(i) for i in ids], self.resolve)


COSINE = {"hnsw:space": "cosine"}
ADD_BATCH = 1000


def cosine_collection(client: Any, name: str, *, embedding_function: Any = None, replace: bool = False,
                      search_ef: int | None = None) -> Any:
    """The Chroma collection ``name`` in cosine space, created if missing (emptied first when ``replace``).
    Pass the offline ``embedding_function``: Chroma's default downloads its model and fails offline.
    ``search_ef`` widens HNSW's search (closer to exact, slower; Chroma's default is 10, raised to k per query)."""
    # Chroma lists names (>= 0.6) or collection objects (earlier)
    if replace and name in [c if isinstance(c, str) else c.name for c in client.list_collections()]:
        client.delete_collection(name)
    metadata = {**COSINE, **({"hnsw:search_ef": search_ef} if search_ef else {})}
    return client.get_or_create_collection(name, embedding_function=embedding_function, metadata=metadata)


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
