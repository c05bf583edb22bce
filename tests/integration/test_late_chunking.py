"""Late chunking (issue 16): chunk vectors pooled from the whole document's token outputs, in the core, as a
LlamaIndex transform and as evaluation rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ctx_retrieval import MiniLMEmbedder, SourceDocument, late_chunk_embeddings, split_into_chunks

SHARED = "The service restarts its workers every night."


def _document(doc_id: str, before: str, words: int = 0) -> tuple[SourceDocument, list]:
    filler = " ".join(f"word{n}" for n in range(words))
    text = f"{before} {filler}\n\n{SHARED}\n\nThe end."
    document = SourceDocument(doc_id, text)
    return document, split_into_chunks(document, [f"{before} {filler}\n\n", f"{SHARED}\n\n", "The end."])


def test_the_same_chunk_in_two_documents_gets_two_vectors(embedder: MiniLMEmbedder) -> None:
    payments = _document("pay", "Payments runbook: the payment queue and its retry workers.")
    search = _document("search", "Search indexing runbook: the index rebuild and its crawler.")
    late = {d.id: late_chunk_embeddings(d, chunks, embedder) for d, chunks in (payments, search)}
    for vectors in late.values():
        assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    plain = embedder.embed([SHARED])[0]
    assert float(late["pay"][1] @ late["search"][1]) < 0.999  # the document around it changed the vector
    query = embedder.embed_query("payment retry workers restart")
    assert float(query @ late["pay"][1]) > float(query @ late["search"][1])  # and it found the right one
    assert float(query @ late["pay"][1]) > float(query @ plain)
    again = late_chunk_embeddings(payments[0], payments[1], embedder)
    assert np.array_equal(again, late["pay"])  # deterministic


def test_documents_longer_than_one_window_are_read_in_overlapping_windows(embedder: MiniLMEmbedder) -> None:
    document, chunks = _document("long", "A long preface.", words=600)  # ~1,000 tokens: several windows
    states, spans = embedder.token_states(document.text, window=254, stride=127)
    assert states.shape[0] == len(spans) > 254
    vectors = late_chunk_embeddings(document, chunks, embedder)
    assert vectors.shape == (3, 384) and np.isfinite(vectors).all()
    with pytest.raises(ValueError, match="stride"):
        embedder.token_states(document.text, window=300, stride=10)


def test_llama_index_transform_sets_embeddings_the_index_keeps(embedder: MiniLMEmbedder) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter

    from llama_index_ctx import LateChunkingTransform, MiniLMEmbedding

    embedded: list[str] = []

    class Counting(MiniLMEmbedding):
        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            embedded.extend(texts)
            return super()._get_text_embeddings(texts)

    documents = [Document(text=d.text, id_=d.id) for d, _ in (
        _document("pay", "Payments runbook: the payment queue and its retry workers.", words=80),
        _document("search", "Search indexing runbook: the index rebuild and its crawler.", words=80))]
    nodes = LateChunkingTransform(embedder)(SentenceSplitter(chunk_size=60, chunk_overlap=0)(documents))
    assert nodes and all(n.embedding is not None and len(n.embedding) == 384 for n in nodes)
    index = VectorStoreIndex(nodes, embed_model=Counting(embedder))
    assert embedded == []  # the late-chunked vectors were kept, not recomputed
    hits = index.as_retriever(similarity_top_k=2).retrieve("payment retry workers restart")
    assert hits and hits[0].node.ref_doc_id == "pay"
    assert LateChunkingTransform(embedder).to_dict()["window"] == 254  # settings are the cache key


def test_evaluation_adds_late_chunking_rows(tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    from ctx_retrieval.evaluation import load_corpus, run_ablation
    from tests.helpers import write_corpus

    documents, queries = write_corpus(tmp_path)
    corpus = load_corpus(documents, queries)
    result = run_ablation(corpus, {}, contextualizer_label="none", embedder=embedder, late_chunking=True)
    names = [r.name for r in result.rows]
    assert "late-chunked dense" in names and "late-chunked hybrid" in names
    late = next(r for r in result.rows if r.name == "late-chunked dense")
    assert late.compared_with == "plain dense" and late.difference_interval is not None
