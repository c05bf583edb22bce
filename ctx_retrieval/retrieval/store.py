"""A contextual hybrid index on disk: Chroma for vectors, the core BM25 for words, fused by RRF.

The folder holds ``chunks.jsonl`` (the source of truth: chunk text, context, ids), a Chroma database and the
BM25 arrays. Both indexes hold ``context + blank line + chunk``; the BM25 side is rebuilt from ``chunks.jsonl``
whenever it is missing or stale, so the two never drift apart, and nothing is pickled.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.protocols import Embedder
from ctx_retrieval.retrieval.bm25 import BM25Index
from ctx_retrieval.retrieval.dense import add_vectors, cosine_collection
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K, fuse, side_weights
from ctx_retrieval.text import indexed_text

__all__ = ["IndexedChunk", "SearchHit", "build_store", "open_store"]

COLLECTION = "ctx_retrieval_chunks"
_CHUNKS_FILE = "chunks.jsonl"
_LAYOUT_FILE = "layout.json"


@dataclass(frozen=True)
class IndexedChunk:
    chunk_id: str
    document_id: str
    text: str
    context: str | None

    @property
    def indexed_text(self) -> str:
        return indexed_text(self.text, self.context)


@dataclass(frozen=True)
class SearchHit:
    """A result: ``score`` is the fused score in (0, 1] (1.0: first on both sides; see ``ctx_retrieval.FusedHit``),
    or, for one side alone, ``1 / rank``."""

    chunk: IndexedChunk
    score: float
    dense_rank: int | None
    bm25_rank: int | None


def _fingerprint(chunks: Sequence[IndexedChunk]) -> str:
    h = hashlib.sha256(b"tokenizer:identifiers\x00")  # an index built with another tokenizer is stale
    for c in chunks:
        h.update(c.chunk_id.encode() + b"\x00" + c.indexed_text.encode("utf-8", "surrogatepass") + b"\x01")
    return h.hexdigest()[:16]


class HybridStore:
    """Query side of a store made by ``build_store``."""

    def __init__(self, path: Path, chunks: list[IndexedChunk], collection: Any, bm25: BM25Index,
                 embedder: Embedder, embed_layout: str = "whole") -> None:
        self.path = path
        self.chunks = {c.chunk_id: c for c in chunks}
        self.collection = collection
        self.bm25 = bm25
        self.embedder = embedder
        self.embed_layout = embed_layout

    def search(self, query: str, *, k: int = 20, mode: str = "hybrid", candidates: int = 150,
               weights: Sequence[float] | Mapping[str, float] = (1.0, 1.0),
               rrf_k: int = DEFAULT_RRF_K) -> list[SearchHit]:
        """The top ``k`` chunks for ``query``: ``hybrid`` (RRF of both; ``weights`` as ``(vector, bm25)``),
        ``dense`` or ``bm25``."""
        if mode not in ("hybrid", "dense", "bm25"):
            raise InvalidInputError(f"mode must be hybrid, dense or bm25, not {mode!r}")
        n = len(self.chunks)
        dense: list[str] = []
        if mode in ("hybrid", "dense") and n:
            vector = self.embedder.embed_query(query)
            if self.embed_layout == "windows":  # vectors are windows: rank each chunk by its best one
                stored = self.collection.count()
                found = self.collection.query(query_embeddings=[vector], n_results=min(4 * candidates, stored),
                                              include=["metadatas"])
                dense = list(dict.fromkeys(str(m["chunk_id"]) for m in found["metadatas"][0]))[:candidates]
            else:
                dense = self.collection.query(query_embeddings=[vector], n_results=min(candidates, n),
                                              include=[])["ids"][0]
        bm25 = [i for i, _ in self.bm25.search(query, candidates)] if mode in ("hybrid", "bm25") else []
        dense_rank = {cid: r for r, cid in enumerate(dense, start=1)}
        bm25_rank = {cid: r for r, cid in enumerate(bm25, start=1)}
        if mode == "hybrid":
            fused = [(hit.id, hit.score) for hit in fuse([dense, bm25], rrf_k=rrf_k, weights=side_weights(weights),
                                                         limit=k)]
        else:
            ranking = dense if mode == "dense" else bm25
            fused = [(cid, 1.0 / r) for r, cid in enumerate(ranking[:k], start=1)]
        return [SearchHit(self.chunks[cid], score, dense_rank.get(cid), bm25_rank.get(cid)) for cid, score in fused]


def build_store(path: str | Path, chunks: Sequence[IndexedChunk], *, embedder: Embedder, client: Any = None,
                embed_layout: str = "whole") -> HybridStore:
    """Write (or replace) a store at ``path`` holding ``chunks``; vectors come from ``embedder`` (cached).
    ``embed_layout="windows"`` stores a chunk whose context + text overflow the embedder as several vectors
    (``ctx_retrieval.retrieval.layout``), ranked by the best."""
    if embed_layout not in ("whole", "windows"):
        raise InvalidInputError(f"embed_layout must be 'whole' or 'windows', not {embed_layout!r}")
    from ctx_retrieval.retrieval.chroma import MiniLMChromaEmbeddingFunction, persistent_client

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    ids = [c.chunk_id for c in chunks]
    if len(set(ids)) != len(ids):
        raise InvalidInputError("chunk ids must be unique across the store")
    with (path / _CHUNKS_FILE).open("w", encoding="utf-8") as out:
        for c in chunks:
            out.write(json.dumps({"chunk_id": c.chunk_id, "document_id": c.document_id, "text": c.text,
                                  "context": c.context}, ensure_ascii=False) + "\n")
    client = client or persistent_client(path / "chroma")
    collection = cosine_collection(client, COLLECTION, embedding_function=MiniLMChromaEmbeddingFunction(embedder),
                                   replace=True)
    texts = [c.indexed_text for c in chunks]
    if embed_layout == "windows":
        from ctx_retrieval.retrieval.layout import window_texts

        rows = [(f"{c.chunk_id}#w{n}", text, {"document_id": c.document_id, "chunk_id": c.chunk_id})
                for c in chunks for n, text in enumerate(window_texts(c.text, c.context, _token_counter(embedder)))]
    else:
        if hasattr(embedder, "warn_if_truncated"):
            embedder.warn_if_truncated(texts)
        rows = [(c.chunk_id, text, {"document_id": c.document_id, "chunk_id": c.chunk_id})
                for c, text in zip(chunks, texts, strict=True)]
    vectors = embedder.embed([text for _, text, _ in rows])
    add_vectors(collection, [r[0] for r in rows], [r[1] for r in rows], vectors, [r[2] for r in rows])
    (path / _LAYOUT_FILE).write_text(json.dumps({"embed_layout": embed_layout}), encoding="utf-8")
    bm25 = BM25Index(ids, texts)
    bm25.save(path / "bm25")
    (path / "bm25.fingerprint").write_text(_fingerprint(chunks), encoding="utf-8")
    return HybridStore(path, list(chunks), collection, bm25, embedder, embed_layout)


def open_store(path: str | Path, *, embedder: Embedder, client: Any = None) -> HybridStore:
    """Open a store made by ``build_store``; a missing or stale BM25 index is rebuilt from ``chunks.jsonl``."""
    from ctx_retrieval.retrieval.chroma import MiniLMChromaEmbeddingFunction, persistent_client

    path = Path(path)
    chunks_file = path / _CHUNKS_FILE
    if not chunks_file.exists():
        raise InvalidInputError(f"{path} is not an index (no {_CHUNKS_FILE}); build one with 'ctx-retrieval index'")
    chunks = [IndexedChunk(**json.loads(line)) for line in chunks_file.read_text(encoding="utf-8").splitlines()
              if line.strip()]
    client = client or persistent_client(path / "chroma")
    collection = client.get_collection(COLLECTION, embedding_function=MiniLMChromaEmbeddingFunction(embedder))
    fingerprint = _fingerprint(chunks)
    stamp = path / "bm25.fingerprint"
    if stamp.exists() and stamp.read_text(encoding="utf-8") == fingerprint and BM25Index.saved_at(path / "bm25"):
        bm25 = BM25Index.load(path / "bm25", mmap=True)
    else:
        bm25 = BM25Index([c.chunk_id for c in chunks], [c.indexed_text for c in chunks])
        bm25.save(path / "bm25")
        stamp.write_text(fingerprint, encoding="utf-8")
    layout_file = path / _LAYOUT_FILE
    layout = json.loads(layout_file.read_text(encoding="utf-8"))["embed_layout"] if layout_file.exists() else "whole"
    return HybridStore(path, chunks, collection, bm25, embedder, layout)


def _token_counter(embedder: Embedder) -> Callable[[str], int]:
    counter: Callable[[str], int] | None = getattr(embedder, "count_tokens", None)
    if counter is None:
        raise InvalidInputError(f"embed_layout='windows' needs an embedder that counts its tokens (MiniLMEmbedder), "
                                f"not {type(embedder).__name__}")
    return counter
