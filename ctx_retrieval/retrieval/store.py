"""A contextual hybrid index on disk: Chroma for vectors, the BM25 store for words, written together by the
pairing and queried by the hybrid query.

The folder holds a Chroma database (``chroma/``), the BM25 store (``bm25-store/``: every chunk with its context,
so a query process opens it without re-tokenizing anything) and ``layout.json`` (the embedder and embedding layout
the vectors were made with). Both indexes hold ``context + blank line + chunk``; nothing is pickled. Every write,
the first build included, goes through ``ctx_retrieval.retrieval.pairing``: ``build_store`` replaces a store,
``HybridStore.add`` / ``delete`` / ``delete_documents`` change one in place, ``sync`` reconciles both sides.

Chroma here is an embedded ``PersistentClient`` unless you pass a client: then one process at a time may have the
folder open (a second one is refused with ``SharedStoreError``, naming the Chroma server to use instead); with
``client=chromadb.HttpClient(...)`` any number of processes share the store.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.protocols import Embedder, TokenCountingEmbedder
from ctx_retrieval.retrieval.bm25_store import FORMAT as BM25_FORMAT
from ctx_retrieval.retrieval.bm25_store import BM25Store, StoredEntry
from ctx_retrieval.retrieval.dense import ADD_BATCH, ChromaSide, cosine_collection
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K
from ctx_retrieval.retrieval.hybrid import BM25Side, HybridRetriever, Side, WindowedSide, search_mode
from ctx_retrieval.retrieval.layout import EMBED_LAYOUTS, EmbedLayout
from ctx_retrieval.retrieval.pairing import JOURNAL, Pairing, Record, Row, StoreFacts, SyncReport, chunk_of, window_of
from ctx_retrieval.text import indexed_text

__all__ = ["HybridStore", "IndexedChunk", "SearchHit", "build_store", "open_store"]

logger = logging.getLogger(__name__)

COLLECTION = "ctx_retrieval_chunks"
_LAYOUT_FILE = "layout.json"
_LEGACY_CHUNKS = "chunks.jsonl"  # written by stores before the pairing; read once if the BM25 store is missing
_BM25_DIR = "bm25-store"
_OWNER = {"items": "ctx_retrieval.IndexedChunk/1"}
SEARCH_EF = 300


@dataclass(frozen=True)
class IndexedChunk:
    chunk_id: str
    document_id: str
    text: str
    context: str | None

    @property
    def indexed_text(self) -> str:
        return indexed_text(self.text, self.context)

    def record(self) -> Record:
        payload = json.dumps({"text": self.text, "context": self.context}, ensure_ascii=False)
        return Record(self.chunk_id, self.indexed_text, self.text, self.context, self.document_id,
                      {"document_id": self.document_id}, payload.encode("utf-8", "surrogatepass"), self)


@dataclass(frozen=True)
class SearchHit:
    """A result: ``score`` is the fused score in (0, 1] (1.0: first on both sides; see ``ctx_retrieval.FusedHit``),
    or, for one side alone, ``1 / rank``; each side's rank from 1, ``None`` where it did not return the chunk."""

    chunk: IndexedChunk
    score: float
    vector_rank: int | None
    bm25_rank: int | None


def _chunk(entry: StoredEntry) -> IndexedChunk:
    fields = json.loads(entry.payload.decode("utf-8", "surrogatepass"))
    return IndexedChunk(entry.id, entry.ref or "", fields["text"], fields["context"])


class _ChromaRows:
    """The store's Chroma collection as the pairing writes and reads it: each row embedded by the store's embedder,
    with its chunk id, document id and context in metadata (so a chunk can be read back whole from Chroma)."""

    def __init__(self, collection: Any, embedder: Embedder) -> None:
        from ctx_retrieval.retrieval.chroma import chroma_facts

        self.collection = collection
        self.embedder = embedder
        self._facts = chroma_facts(collection)

    def facts(self) -> StoreFacts:
        return self._facts

    def add_rows(self, rows: Sequence[Row]) -> None:
        for start in range(0, len(rows), ADD_BATCH):
            part = rows[start:start + ADD_BATCH]
            texts = [r.text for r in part]
            metadatas = [{"chunk_id": r.record.id, "document_id": r.record.ref or "",
                          **({"context": r.record.context} if r.record.context else {}),
                          **({"window": r.window} if r.window is not None else {})} for r in part]
            self.collection.upsert(ids=[r.id for r in part], documents=texts,
                                   embeddings=list(self.embedder.embed(texts)), metadatas=metadatas)

    def delete_rows(self, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), ADD_BATCH):
            self.collection.delete(ids=list(ids[start:start + ADD_BATCH]))

    async def aadd_rows(self, rows: Sequence[Row]) -> None:
        self.add_rows(rows)

    async def adelete_rows(self, ids: Sequence[str]) -> None:
        self.delete_rows(ids)

    def records(self, chunk_ids: Sequence[str]) -> dict[str, Record]:
        if not chunk_ids:
            return {}
        found = self.collection.get(where={"chunk_id": {"$in": list(chunk_ids)}}, include=["documents", "metadatas"])
        return _records(found)

    def iter_records(self) -> Iterator[Record]:
        offset = 0
        while True:
            found = self.collection.get(include=["documents", "metadatas"], limit=ADD_BATCH, offset=offset)
            yield from _records(found).values()  # a chunk's windows are written together, in one page or two
            if len(found["ids"]) < ADD_BATCH:
                return
            offset += ADD_BATCH

    def count_rows(self) -> int:
        return int(self.collection.count())


def _records(found: Mapping[str, Any]) -> dict[str, Record]:
    """Chroma rows grouped back into whole chunks (windows joined on the spaces they were cut at)."""
    groups: dict[str, list[tuple[int, str, Mapping[str, Any]]]] = {}
    for row, text, meta in zip(found["ids"], found["documents"], found["metadatas"], strict=True):
        meta = meta or {}
        groups.setdefault(str(meta.get("chunk_id") or chunk_of(row)), []).append((window_of(row), text or "", meta))
    out = {}
    for chunk_id, windows in groups.items():
        windows.sort(key=lambda w: w[0])
        meta = windows[0][2]
        context = meta.get("context")
        skip = len(context) + 2 if isinstance(context, str) and context else 0
        text = " ".join(w[1][skip:] for w in windows)
        out[chunk_id] = IndexedChunk(chunk_id, str(meta.get("document_id", "")), text,
                                     context if isinstance(context, str) else None).record()
    return out


class HybridStore:
    """A store made by ``build_store``: queries (``search``) and writes (``add``, ``delete``, ``delete_documents``,
    ``sync``) through its pairing."""

    def __init__(self, path: Path, collection: Any, bm25: BM25Store, embedder: Embedder,
                 embed_layout: EmbedLayout = "whole") -> None:
        self.path = path
        self.collection = collection
        self.bm25 = bm25
        self.embedder = embedder
        self.embed_layout: EmbedLayout = embed_layout
        counter = embedder.count_tokens if isinstance(embedder, TokenCountingEmbedder) else None
        self._rows = _ChromaRows(collection, embedder)
        self.pairing = Pairing(self._rows, bm25, layout=embed_layout, count_tokens=counter)
        self._bm25_side: Side[IndexedChunk] = BM25Side(bm25, _chunk)
        windows = embed_layout == "windows"
        dense = ChromaSide(collection, embedder.embed_query, chunk_id_key="chunk_id" if windows else None,
                           resolve=self._chunks)
        self._vector_side: Side[IndexedChunk] = WindowedSide(dense) if windows else dense
        self._guard = self.pairing.guard(_Codec())

    def __len__(self) -> int:
        return len(self.bm25)

    def __repr__(self) -> str:
        return f"HybridStore({str(self.path)!r}, {len(self)} chunks, embed_layout={self.embed_layout!r})"

    def close(self) -> None:
        """Let another process open the folder (an embedded Chroma is one process's at a time)."""
        self.pairing.close()

    def _chunks(self, ids: list[str]) -> list[IndexedChunk]:
        found = self.bm25.get(ids)
        held = self._rows.records([i for i in ids if i not in found]) if len(found) < len(ids) else {}
        return [_chunk(found[i]) if i in found else held[i].item for i in ids]

    def search(self, query: str, *, k: int = 20, mode: str = "hybrid", candidates: int = 150,
               weights: Sequence[float] | Mapping[str, float] = (1.0, 1.0),
               rrf_k: int = DEFAULT_RRF_K) -> list[SearchHit]:
        """The top ``k`` chunks for ``query``: ``hybrid`` (RRF of both; ``weights`` as ``(vector, bm25)``),
        ``dense`` or ``bm25``."""
        mode = search_mode(mode)
        retriever = HybridRetriever(self._vector_side if mode != "bm25" else None,
                                    self._bm25_side if mode != "vector" else None,
                                    candidates=candidates, weights=weights, rrf_k=rrf_k, screen=self._guard,
                                    items_from="bm25")  # BM25 reads a chunk it ranked by its address
        return [SearchHit(h.item, h.score, h.vector_rank, h.bm25_rank) for h in retriever.retrieve(query, k)]

    def warm_up(self) -> None:
        """Pay a fresh process's first-query costs now: one query through both sides loads the embedding model,
        opens BM25 and Chroma's vector index (what a query service calls before its first request)."""
        self.search("warm-up", k=1)

    def add(self, chunks: Iterable[IndexedChunk], *, batch: int = 2000) -> int:
        """Add (or replace, by chunk id) chunks on both sides, ``batch`` at a time (embedded as they go)."""
        added = 0
        for part in _batches(chunks, batch):
            added += len(self.pairing.add([c.record() for c in part]))
        return added

    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Delete chunks by id from both sides."""
        self.pairing.delete(list(chunk_ids))

    def delete_documents(self, document_ids: Sequence[str]) -> None:
        """Delete every chunk of these documents from both sides."""
        self.pairing.delete_refs(list(document_ids))

    def sync(self) -> SyncReport:
        """Reconcile both sides (see ``Pairing.sync``)."""
        return self.pairing.sync()


class _Codec:
    def chunk_id(self, item: IndexedChunk) -> str:
        return item.chunk_id

    def record(self, item: IndexedChunk) -> Record:
        return item.record()


def _batches(chunks: Iterable[IndexedChunk], size: int) -> Iterator[list[IndexedChunk]]:
    part: list[IndexedChunk] = []
    for chunk in chunks:
        part.append(chunk)
        if len(part) >= size:
            yield part
            part = []
    if part:
        yield part


def build_store(path: str | Path, chunks: Iterable[IndexedChunk], *, embedder: Embedder, client: Any = None,
                embed_layout: EmbedLayout = "whole", tokenizer: str = "identifiers") -> HybridStore:
    """Write (or replace) a store at ``path`` holding ``chunks`` (any iterable: read and embedded a batch at a
    time); vectors come from ``embedder`` (cached). ``embed_layout="windows"`` stores a chunk whose context + text
    overflow the embedder as several vectors (``ctx_retrieval.retrieval.layout``), ranked by the best."""
    if embed_layout not in EMBED_LAYOUTS:
        raise InvalidInputError(f"embed_layout must be 'whole' or 'windows', not {embed_layout!r}")
    if embed_layout == "windows" and not isinstance(embedder, TokenCountingEmbedder):
        raise InvalidInputError(f"embed_layout='windows' needs an embedder that counts its tokens (MiniLMEmbedder), "
                                f"not {type(embedder).__name__}")
    from ctx_retrieval.retrieval.chroma import MiniLMChromaEmbeddingFunction, persistent_client

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(f"the index folder {path} cannot be made ({exc.strerror or exc}): give a folder path "
                                "where you may write (an existing file cannot be one)") from exc
    client = client or persistent_client(path / "chroma")
    # A wide HNSW search: the store answers as exact search does on the corpora it is built for (the dev ablation
    # through it matches the evaluation's exact vectors; at ef 150 one HNSW build in two did not).
    collection = cosine_collection(client, COLLECTION, embedding_function=MiniLMChromaEmbeddingFunction(embedder),
                                   replace=True, search_ef=SEARCH_EF)
    (path / _LAYOUT_FILE).write_text(json.dumps({"embed_layout": embed_layout, "embedder": embedder.model_id,
                                                 "bm25_tokenizer": tokenizer}), encoding="utf-8")
    (path / _LEGACY_CHUNKS).unlink(missing_ok=True)  # what stores before the pairing kept beside both indexes
    shutil.rmtree(path / _BM25_DIR, ignore_errors=True)  # replaced whole: another tokenizer may build it
    bm25 = BM25Store(path / _BM25_DIR, owner=_OWNER, tokenizer=tokenizer)
    store = HybridStore(path, collection, bm25, embedder, embed_layout)
    seen: set[str] = set()
    for part in _batches(chunks, 2000):
        ids = [c.chunk_id for c in part]
        if len(set(ids)) != len(ids) or seen.intersection(ids):
            raise InvalidInputError("chunk ids must be unique across the store")
        seen.update(ids)
        if embed_layout == "whole" and isinstance(embedder, TokenCountingEmbedder):
            embedder.warn_if_truncated([c.indexed_text for c in part])
        store.pairing.add([c.record() for c in part])
    return store


def open_store(path: str | Path, *, embedder: Embedder, client: Any = None, tokenizer: str | None = None
               ) -> HybridStore:
    """Open a store made by ``build_store``; it reads nothing whole (the BM25 store is opened, not rebuilt). Its BM25
    tokenizer is the one it was built with (``tokenizer`` names it, or another is refused)."""
    from ctx_retrieval.retrieval.chroma import MiniLMChromaEmbeddingFunction, persistent_client

    path = Path(path)
    if not (path / _LAYOUT_FILE).exists() and not (path / _LEGACY_CHUNKS).exists():
        raise InvalidInputError(f"{path} is not an index (no {_LAYOUT_FILE}); build one with 'ctx-retrieval index'")
    meta = _layout(path)
    built_with = meta.get("embedder")
    if built_with is not None and built_with != embedder.model_id:
        raise InvalidInputError(f"{path} was indexed with {built_with}, not {embedder.model_id}: open it with the "
                                "embedder it was built with (queries and vectors must come from one model)")
    client = client or persistent_client(path / "chroma")
    collection = client.get_collection(COLLECTION, embedding_function=MiniLMChromaEmbeddingFunction(embedder))
    bm25_dir = path / _BM25_DIR
    migrate = _outdated(bm25_dir)
    if migrate:  # a store from before this release, or an unreadable manifest: its BM25 index is rebuilt (the
        for entry in (bm25_dir.iterdir() if bm25_dir.is_dir() else ()):  # chunks are kept elsewhere); the journal
            if entry.name != JOURNAL:  # of writes in progress is kept, so a journaled delete is finished first
                shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    bm25 = BM25Store(bm25_dir, owner=_OWNER, tokenizer=tokenizer or meta.get("bm25_tokenizer", "identifiers"))
    store = HybridStore(path, collection, bm25, embedder, meta.get("embed_layout", "whole"))
    if migrate:
        logger.info("%s: building its BM25 store once (from %s)", path,
                    _LEGACY_CHUNKS if (path / _LEGACY_CHUNKS).exists() else "its vectors")
        if (path / _LEGACY_CHUNKS).exists():
            with (path / _LEGACY_CHUNKS).open(encoding="utf-8") as lines:
                bm25.upsert(IndexedChunk(**json.loads(line)).record().entry() for line in lines if line.strip())
        else:
            store.sync()
    return store


def _outdated(bm25_dir: Path) -> bool:
    """Whether a store's BM25 folder is missing or of an earlier format (rebuilt at open, from the store's own
    record of its chunks)."""
    try:
        manifest = json.loads((bm25_dir / "ctx_bm25.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return not isinstance(manifest, dict) or manifest.get("format") != BM25_FORMAT


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
