"""A real Chroma server on 127.0.0.1 (the chromadb package's `chroma run`): index the cookbook corpus through an
HttpClient, query it, restart the server, and find the data still there."""

from __future__ import annotations

from pathlib import Path

import pytest

chromadb = pytest.importorskip("chromadb")

from ctx_retrieval import MiniLMEmbedder  # noqa: E402
from ctx_retrieval.evaluation import RecordedContextualizer, load_cookbook  # noqa: E402
from ctx_retrieval.retrieval.store import IndexedChunk, build_store, open_store  # noqa: E402
from tests.helpers import ChromaServer  # noqa: E402


def test_cookbook_corpus_through_a_chroma_server_survives_a_restart(
        chroma_server: ChromaServer, tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    corpus = load_cookbook()
    # The recorded contexts: the same texts the notebooks and the calibration embed, so the run's one embedding
    # cache already holds (or keeps, for them) their vectors. A fifth of the corpus: a restart does not need all.
    contexts = RecordedContextualizer().contexts()
    chunks = [IndexedChunk(c.id, d.id, c.text, contexts.get(c.id)) for d, cs in corpus.items[:18] for c in cs]
    build_store(tmp_path / "store", chunks, embedder=embedder, client=chroma_server.client())
    query = next(q for q in corpus.queries if set(q.gold) <= {c.chunk_id for c in chunks})
    before = [h.chunk.chunk_id for h in open_store(tmp_path / "store", embedder=embedder,
                                                    client=chroma_server.client()).search(query.query, k=20)]
    assert set(query.gold) & set(before)
    chroma_server.stop()
    chroma_server.start()  # same data folder, new process
    store = open_store(tmp_path / "store", embedder=embedder, client=chroma_server.client())
    assert store.collection.count() == len(chunks)
    after = [h.chunk.chunk_id for h in store.search(query.query, k=20)]
    # HNSW is approximate and fused ranks can tie near the cut: the head and the gold chunk must be the same.
    assert after[:5] == before[:5] and set(query.gold) & set(after)
    assert len(set(after) & set(before)) >= 18
