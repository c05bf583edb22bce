"""A contextual hybrid index on disk: Chroma for vectors, the BM25 store for words, fused by the hybrid query.

The folder holds ``chunks.jsonl`` (the record of what was indexed: chunk text, context, ids), a Chroma database and
the BM25 store (``bm25-store/``: every chunk with its context, so a query process opens it without reading
``chunks.jsonl`` or re-tokenizing anything). Both indexes hold ``context + blank line + chunk``; nothing is
pickled. A store built before the BM25 store existed gets one from ``chunks.jsonl`` when first opened.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.protocols import Embedder
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store, StoredEntry
from ctx_retrieval.retrieval.dense import ChromaSide, add_vectors, cosine_collection
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K
from ctx_retrieval.retrieval.hybrid import BM25Side, HybridRetriever, Side, WindowedSide
from ctx_retrieval.text import indexed_text

__all__ = ["IndexedChunk", "SearchHit", "build_store", "open_store"]

logger = logging.getLogger(__name__)

COLLECTION = "ctx_retrieval_chunks"
_CHUNKS_FILE = "chunks.jsonl"
_LAYOUT_FILE = "layout.json"
_BM25_DIR = "bm25-store"
_MODES = ("hybrid", "dense", "bm25")
SEARCH_EF = 1000


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
    or, for one side alone, ``1 / rank``; each side's rank from 1, ``None`` where it did not return the chunk."""

    chunk: IndexedChunk
    score: float
    vector_rank: int | None
    bm25_rank: int | None


def _entry(chunk: IndexedChunk) -> BM25Entry:
    payload = json.dumps({"text": chunk.text, "context": chunk.context}, ensure_ascii=False)
    return BM25Entry(chunk.chunk_id, chunk.indexed_text, ref=chunk.document_id,
                     metadata={"document_id": chunk.document_id}, payload=payload.encode("utf-8", "surrogatepass"))


def _chunk(entry: StoredEntry) -> IndexedChunk:
    fields = json.loads(entry.payload.decode("utf-8", "surrogatepass"))
    return IndexedChunk(entry.id, entry.ref or "", fields["text"], fields["context"])


class HybridStore:
    """Query side of a store made by ``build_store``."""

    def __init__(self, path: Path, collection: Any, bm25: BM25Store, embedder: Embedder,
                 embed_layout: str = "whole") -> None:
        self.path = path
        self.collection = collection
        self.bm25 = bm25
        self.embedder = embedder
        self.embed_layout = embed_layout
        self._bm25_side: Side[IndexedChunk] = BM25Side(bm25, _chunk)
        dense = ChromaSide(collection, embedder.embed_query, chunk_id_key="chunk_id", resolve=self._chunks)
        self._vector_side: Side[IndexedChunk] = WindowedSide(dense) if embed_layout == "windows" else dense

    def __len__(self) -> int:
        return len(self.bm25)

    def _chunks(self, ids: list[str]) -> list[IndexedChunk]:
        found = self.bm25.get(ids)
        return [_chunk(found[i]) for i in ids]

    def search(self, query: str, *, k: int = 20, mode: str = "hybrid", candidates: int = 150,
               weights: Sequence[float] | Mapping[str, float] = (1.0, 1.0),
               rrf_k: int = DEFAULT_RRF_K) -> list[SearchHit]:
        """The top ``k`` chunks for ``query``: ``hybrid`` (RRF of both; ``weights`` as ``(vector, bm25)``),
        ``dense`` or ``bm25``."""
        if mode not in _MODES:
            raise InvalidInputError(f"mode must be hybrid, dense or bm25, not {mode!r}")
        retriever = HybridRetriever(self._vector_side if mode != "bm25" else None,
                                    self._bm25_side if mode != "dense" else None,
                                    candidates=candidates, weights=weights, rrf_k=rrf_k)
        return [SearchHit(h.item, h.score, h.vector_rank, h.bm25_rank) for h in retriever.retrieve(query, k)]


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
    # A wide HNSW search: the store answers as exact search does on the corpora it is built for (the dev ablation
    # through it matches the evaluation's exact vectors; at ef 150 one HNSW build in two did not).
    collection = cosine_collection(client, COLLECTION, embedding_function=MiniLMChromaEmbeddingFunction(embedder),
                                   replace=True, search_ef=SEARCH_EF)
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
    (path / _LAYOUT_FILE).write_text(json.dumps({"embed_layout": embed_layout, "embedder": embedder.model_id}),
                                     encoding="utf-8")
    bm25 = BM25Store(path / _BM25_DIR)
    bm25.clear()
    bm25.upsert(_entry(c) for c in chunks)
    return HybridStore(path, collection, bm25, embedder, embed_layout)


def open_store(path: str | Path, *, embedder: Embedder, client: Any = None) -> HybridStore:
    """Open a store made by ``build_store``; it reads nothing whole (the BM25 store is opened, not rebuilt)."""
    from ctx_retrieval.retrieval.chroma import MiniLMChromaEmbeddingFunction, persistent_client

    path = Path(path)
    chunks_file = path / _CHUNKS_FILE
    if not chunks_file.exists():
        raise InvalidInputError(f"{path} is not an index (no {_CHUNKS_FILE}); build one with 'ctx-retrieval index'")
    client = client or persistent_client(path / "chroma")
    collection = client.get_collection(COLLECTION, embedding_function=MiniLMChromaEmbeddingFunction(embedder))
    migrate = not (path / _BM25_DIR).exists()
    bm25 = BM25Store(path / _BM25_DIR)
    if migrate:  # a store from before the BM25 store: index chunks.jsonl once
        logger.info("%s: building its BM25 store from %s (once)", path, _CHUNKS_FILE)
        with chunks_file.open(encoding="utf-8") as lines:
            bm25.upsert(_entry(IndexedChunk(**json.loads(line))) for line in lines if line.strip())
    meta = _layout(path)
    built_with = meta.get("embedder")
    if built_with is not None and built_with != embedder.model_id:
        raise InvalidInputError(f"{path} was indexed with {built_with}, not {embedder.model_id}: open it with the "
                                "embedder it was built with (queries and vectors must come from one model)")
    return HybridStore(path, collection, bm25, embedder, meta.get("embed_layout", "whole"))


def store_embedder(path: str | Path) -> str | None:
    """``"e5"`` or ``"minilm"`` for a store built by ``build_store`` (``None`` when it does not say: MiniLM then)."""
    model = _layout(Path(path)).get("embedder")
    if model is None:
        return None
    from ctx_retrieval.retrieval.e5 import E5_MODEL_ID

    return "e5" if model == E5_MODEL_ID else "minilm"


def _layout(path: Path) -> dict[str, Any]:
    """What ``build_store`` recorded of a store's vectors (layout, embedder); ``{}`` for stores from before."""
    layout_file = path / _LAYOUT_FILE
    return dict(json.loads(layout_file.read_text(encoding="utf-8"))) if layout_file.exists() else {}


def _token_counter(embedder: Embedder) -> Callable[[str], int]:
    counter: Callable[[str], int] | None = getattr(embedder, "count_tokens", None)
    if counter is None:
        raise InvalidInputError(f"embed_layout='windows' needs an embedder that counts its tokens (MiniLMEmbedder), "
                                f"not {type(embedder).__name__}")
    return counter
