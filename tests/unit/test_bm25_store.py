"""The BM25 store: incremental writes, filters the engine runs, readers in other processes, and its folder."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import SearchIndexError, compile_where
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.retrieval.bm25 import BM25Index
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store
from ctx_retrieval.retrieval.fusion import chunk_key

ROOT = Path(__file__).resolve().parents[2]

TEXTS = {
    "a": "The DiffExecutor runs two executors on the same input.",
    "b": "A scheduler picks the next testcase from the corpus.",
    "c": "The executor forwards run_target calls to the primary executor.",
    "d": "Nothing relevant here at all.",
}


def _ids(store: BM25Store, query: str, k: int = 10, **kwargs: Any) -> list[str]:
    return [e.id for e in store.search(query, k, **kwargs).entries()]


def test_add_replace_and_delete_without_a_rebuild(tmp_path: Path) -> None:
    for store in (BM25Store(), BM25Store(tmp_path / "bm25")):
        store.upsert(BM25Entry(i, t, ref=f"doc-{i in 'ab'}", payload=i.encode()) for i, t in TEXTS.items())
        assert len(store) == 4 and _ids(store, "executor") == ["c", "a"]
        results = store.search("executor run_target", 10)
        assert results.keys == [chunk_key("c"), chunk_key("a")] and results.scores[0] > results.scores[1] > 0
        assert [e.payload for e in results.entries([1])] == [b"a"]
        store.upsert([BM25Entry("c", "now about schedulers only", ref="doc-False")])  # replaced, not added
        assert len(store) == 4 and _ids(store, "executor") == ["a"] and _ids(store, "schedulers") == ["c"]
        store.delete(["a", "missing"])
        assert len(store) == 3 and _ids(store, "executor") == []
        store.delete_refs(["doc-False"])  # c and d
        assert sorted(store.ids()) == ["b"] and set(store.get(["b", "c"])) == {"b"}
        assert store.search("", 5).keys == [] and store.search("zzz unknown", 5).keys == []
        store.clear()
        assert len(store) == 0


def test_it_ranks_as_the_numpy_index_does_on_the_cookbook_corpus() -> None:
    corpus = load_cookbook()
    ids, texts = [c.id for c in corpus.chunks], [c.text for c in corpus.chunks]
    store = BM25Store()
    store.upsert(BM25Entry(i, t) for i, t in zip(ids, texts, strict=True))
    exact = BM25Index(ids, texts, k1=1.2)  # the engine's k1; it stores document lengths in 256 levels
    position = {i: n for n, i in enumerate(ids)}
    overlaps = []
    for query in corpus.queries:
        ours = _ids(store, query.query, 20)
        reference = exact.search(query.query, 20)
        if not reference:
            continue
        scores = exact.scores(query.query)
        cut = reference[-1][1] * (1 - 1e-6)  # chunks tied with the reference's 20th are as good as it
        overlaps.append(sum(scores[position[i]] >= cut for i in ours) / len(reference))
    assert sum(overlaps) / len(overlaps) > 0.97  # measured 0.986 (benchmarks/read_side.py prints it)


METADATA = [
    {"tenant": "a", "year": 2021, "score": 0.5, "draft": True, "note": "x y"},
    {"tenant": "b", "year": 2023, "score": 2.0, "draft": False},
    {"tenant": "a", "year": 2024, "score": 3.5},
    {"year": 2022.0, "tag": "é"},
    {"tenant": "c", "year": "2023", "weird key": 1},
    {"tenant": "b", "year": 2020, "score": -1},
]
FILTERS: list[dict[str, Any]] = [
    {"tenant": "a"}, {"tenant": {"$eq": "b"}}, {"tenant": {"$ne": "a"}}, {"year": 2022}, {"year": {"$gte": 2023}},
    {"year": {"$gt": 2021, "$lt": 2024}}, {"score": {"$lte": 0.5}}, {"draft": True}, {"draft": {"$ne": True}},
    {"tenant": {"$in": ["a", "c"]}}, {"tenant": {"$nin": ["a"]}}, {"tenant": {"$in": []}},
    {"$and": [{"tenant": "b"}, {"year": {"$gte": 2021}}]}, {"$or": [{"tenant": "c"}, {"score": {"$gt": 3}}]},
    {"tag": "é"}, {"year": "2023"},
    # not expressible by the engine: evaluated on each candidate's stored metadata
    {"tenant": {"$gt": "a"}}, {"weird key": 1}, {"note": {"$lte": "x z"}},
]


@pytest.mark.parametrize("where", FILTERS, ids=[str(f) for f in FILTERS])
def test_every_filter_keeps_exactly_what_the_filter_module_keeps(where: dict[str, Any]) -> None:
    store = BM25Store()
    store.upsert(BM25Entry(f"c{n}", "shared words everywhere", metadata=m) for n, m in enumerate(METADATA))
    keep = compile_where(where)
    expected = {f"c{n}" for n, m in enumerate(METADATA) if keep(m)}
    assert set(_ids(store, "shared words", 10, where=where)) == expected


def test_a_filtered_search_returns_the_k_best_that_pass() -> None:
    store = BM25Store()
    store.upsert(BM25Entry(f"c{n}", "match " * (n % 7 + 1) + "filler " * 5, metadata={"even": n % 2 == 0})
                 for n in range(200))
    best_even = [i for i in _ids(store, "match", 200) if int(i[1:]) % 2 == 0][:15]
    assert _ids(store, "match", 15, where={"even": True}) == best_even  # the engine's filter
    assert _ids(store, "match", 15, keep=lambda e: e.metadata["even"]) == best_even  # a predicate, read deeper
    assert _ids(store, "match", 15, where={"even": {"$gt": "a"}}) == []  # no boolean is above a string


WRITER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store
    store = BM25Store(sys.argv[1])
    for n in range(int(sys.argv[3])):  # one commit per chunk: the other writer gets its turns
        store.upsert([BM25Entry(f"{{sys.argv[2]}}-{{n}}", "shared words " + sys.argv[2])])
    store.delete([f"{{sys.argv[2]}}-0"])
""")


def test_writers_in_two_processes_take_turns_and_a_reader_sees_each_commit(tmp_path: Path) -> None:
    folder = tmp_path / "bm25"
    reader = BM25Store(folder)  # opened before anything is written: it must still see later commits
    assert len(reader) == 0
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(root=str(ROOT)), encoding="utf-8")
    writers = [subprocess.Popen([sys.executable, str(script), str(folder), name, "30"], stderr=subprocess.PIPE,
                                text=True) for name in ("left", "right")]
    for process in writers:
        assert process.wait(timeout=120) == 0, process.stderr.read() if process.stderr else ""
    assert len(reader) == 58 and sorted(reader.ids()) == sorted(
        f"{name}-{n}" for name in ("left", "right") for n in range(1, 30))
    assert len(_ids(reader, "left", 100)) == 29  # no reopening: the reader's next query sees every commit


def test_the_folder_remembers_its_tokenizer_and_refuses_what_it_is_not(tmp_path: Path) -> None:
    BM25Store(tmp_path / "bm25").upsert([BM25Entry("a", "DiffExecutor")])
    with pytest.raises(SearchIndexError, match="tokenizer='identifiers'") as caught:
        BM25Store(tmp_path / "bm25", tokenizer="parts")
    assert caught.value.path == str(tmp_path / "bm25")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(SearchIndexError, match="not a ctx-retrieval BM25 index"):
        BM25Store(tmp_path / "other")
    assert (tmp_path / "other" / "notes.txt").read_text(encoding="utf-8") == "mine"
    # an index whose tokens came from an earlier version of the same tokenizer (before CJK bigrams) is refused
    manifest = tmp_path / "bm25" / "ctx_bm25.json"
    meta = json.loads(manifest.read_text(encoding="utf-8"))
    manifest.write_text(json.dumps({**meta, "analysis": 1}), encoding="utf-8")
    with pytest.raises(SearchIndexError, match="version 1 of the 'identifiers' tokenizer"):
        BM25Store(tmp_path / "bm25")


def test_a_store_on_disk_pickles_as_its_folder_and_one_in_memory_refuses(tmp_path: Path) -> None:
    store = BM25Store(tmp_path / "bm25")
    store.upsert([BM25Entry("a", "DiffExecutor run_target")])
    again = pickle.loads(pickle.dumps(store))
    assert again.path == store.path and _ids(again, "run_target") == ["a"]
    with pytest.raises(TypeError, match="give it a folder"):
        pickle.dumps(BM25Store())


def test_a_writer_held_by_another_process_past_the_timeout_is_a_typed_error(tmp_path: Path) -> None:
    folder = tmp_path / "bm25"
    BM25Store(folder)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from ctx_retrieval.retrieval.bm25_store import BM25Store
        store = BM25Store({str(folder)!r})
        with store._writer():
            print("holding", flush=True)
            time.sleep(30)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        with pytest.raises(SearchIndexError, match="writer_timeout_s"):
            BM25Store(folder, writer_timeout_s=0.3).upsert([BM25Entry("a", "text")])
    finally:
        holder.kill()
        holder.wait()
    BM25Store(folder, writer_timeout_s=5).upsert([BM25Entry("a", "text")])  # a killed holder leaves no lock


def test_ties_rank_the_same_however_the_index_was_written() -> None:
    """One commit or one commit per chunk (many segments): chunks with equal scores come back in write order."""
    texts = [f"shared words here filler{n % 3}" for n in range(60)]  # twenty-way ties for "shared"
    one, many = BM25Store(), BM25Store()
    one.upsert(BM25Entry(f"c{n}", t) for n, t in enumerate(texts))
    for n, t in enumerate(texts):
        many.upsert([BM25Entry(f"c{n}", t)])
    assert _ids(one, "shared", 5) == ["c0", "c1", "c2", "c3", "c4"]
    for k in (1, 7, 20, 59):
        assert one.search("shared", k).keys == many.search("shared", k).keys
        assert one.search("shared", k, keep=lambda e: e.id != "c5").keys == \
            many.search("shared", k, keep=lambda e: e.id != "c5").keys


# -- issue 33: the store hardened ---------------------------------------------------------------------------------


def test_ids_and_refs_past_the_engines_term_limit_are_replaced_and_deleted_like_short_ones() -> None:
    store = BM25Store()
    long_id, long_ref = "x" * 70_000, "source/" + "y" * 70_000  # the engine's terms end at 65,530 bytes
    store.upsert([BM25Entry(long_id, "first words", ref=long_ref)])
    store.upsert([BM25Entry(long_id, "second words", ref=long_ref)])
    assert len(store) == 1 and store.get([long_id])[long_id].ref == long_ref and _ids(store, "second") == [long_id]
    store.delete([long_id])
    assert len(store) == 0
    store.upsert([BM25Entry(long_id, "third words", ref=long_ref), BM25Entry("short", "words", ref=long_ref)])
    assert sorted(store.ids_of_refs([long_ref])) == sorted([long_id, "short"])
    store.delete_refs([long_ref])
    assert len(store) == 0


class Year(__import__("enum").IntEnum):
    NOW = 2023


@pytest.mark.parametrize("bound", [2023, 2023.0, 2023.5, 1e19, -1e16, 1e300, -1e300, 2**63, 10**18 + 1, 0, 3, True,
                                   Year.NOW, "np.float64(2000.0)", "np.int64(2023)", float("nan")])
@pytest.mark.parametrize("operator", ["$gt", "$gte", "$lt", "$lte", "$eq", "$ne"])
def test_numeric_filters_keep_exactly_what_the_filter_module_keeps_for_any_bound(bound: Any, operator: str) -> None:
    np = pytest.importorskip("numpy")
    if isinstance(bound, str):
        bound = eval(bound, {"np": np})  # numpy scalars, built here so the parameter ids stay readable
    values = [2023, 2023.5, -5, 0, 10**18, 2**62, -1e16, 1e19, True, False, 3.0, "2023", None, np.int64(7),
              np.float64(2000.0), Year.NOW]
    store = BM25Store()
    store.upsert(BM25Entry(f"c{n}", "word", metadata={"year": v} if v is not None else {}) for n, v in
                 enumerate(values))
    where = {"year": {operator: bound}}
    matches = compile_where(where)
    want = sorted(f"c{n}" for n, v in enumerate(values) if matches({"year": v} if v is not None else {}))
    assert sorted(_ids(store, "word", 100, where=where)) == want


def test_a_boolean_and_an_integer_are_equal_in_both_as_in_python() -> None:
    store = BM25Store()
    store.upsert([BM25Entry("t", "word", metadata={"flag": True}), BM25Entry("one", "word", metadata={"flag": 1}),
                  BM25Entry("f", "word", metadata={"flag": False}), BM25Entry("zero", "word", metadata={"flag": 0.0})])
    assert sorted(_ids(store, "word", where={"flag": True})) == ["one", "t"]
    assert sorted(_ids(store, "word", where={"flag": 1})) == ["one", "t"]
    assert sorted(_ids(store, "word", where={"flag": {"$in": [0]}})) == ["f", "zero"]


@pytest.mark.parametrize("k", [10**9, 2**63, 2**64 + 5])
def test_a_huge_k_is_the_index_size(k: int) -> None:
    store = BM25Store()
    store.upsert(BM25Entry(i, t) for i, t in TEXTS.items())
    assert _ids(store, "executor", k) == ["c", "a"]
    assert len(store.search("executor", k, keep=lambda e: True)) == 2


def test_a_lone_surrogate_id_is_a_typed_error_and_text_with_one_is_indexed() -> None:
    from ctx_retrieval import InvalidInputError

    store = BM25Store()
    with pytest.raises(InvalidInputError, match=r"lone surrogate.*errors='replace'"):
        store.upsert([BM25Entry("bad\ud800id", "text")])
    store.upsert([BM25Entry("ok", "broken \ud800 text", metadata={"name": "x\udcff"})])
    assert _ids(store, "broken") == ["ok"] and len(store) == 1


def test_a_full_disk_is_a_search_index_error_that_names_the_disk(tmp_path: Path) -> None:
    import os

    tiny = tmp_path / "tiny"
    tiny.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(tiny)],
                                           capture_output=True).returncode:
        pytest.skip("a small tmpfs needs root (mount)")
    try:
        store = BM25Store(tiny / "bm25")
        with pytest.raises(SearchIndexError, match=r"disk holding the BM25 index.*is full.*free space"):
            for round_ in range(100):
                store.upsert(BM25Entry(f"c{round_}-{n}", " ".join(f"w{m}x{n}" for m in range(50)),
                                       payload=b"x" * 2000) for n in range(100))
    finally:
        subprocess.run(["umount", "-l", str(tiny)], check=False)


def test_a_folder_that_lost_the_engines_segment_list_is_an_error_never_an_empty_index(tmp_path: Path) -> None:
    store = BM25Store(tmp_path / "bm25")
    store.upsert(BM25Entry(i, t) for i, t in TEXTS.items())
    (tmp_path / "bm25" / "meta.json").unlink()
    with pytest.raises(SearchIndexError, match=r"lost the engine's meta.json"):
        BM25Store(tmp_path / "bm25")


@pytest.mark.parametrize("manifest", ["[1, 2]", '"text"', "3", "null"])
def test_a_manifest_that_is_json_but_not_an_object_is_a_search_index_error(tmp_path: Path, manifest: str) -> None:
    BM25Store(tmp_path / "bm25")
    (tmp_path / "bm25" / "ctx_bm25.json").write_text(manifest, encoding="utf-8")
    with pytest.raises(SearchIndexError, match="not a BM25 manifest"):
        BM25Store(tmp_path / "bm25")


def test_two_different_tokenizer_callables_are_never_taken_for_one(tmp_path: Path) -> None:
    BM25Store(tmp_path / "bm25", tokenizer=lambda text: text.split())
    with pytest.raises(SearchIndexError, match="tokenizer"):
        BM25Store(tmp_path / "bm25", tokenizer=lambda text: text.lower().split())
    BM25Store(tmp_path / "bm25", tokenizer=lambda text: text.split())  # the same code is the same tokenizer


def test_a_folder_written_for_one_owner_is_refused_by_another(tmp_path: Path) -> None:
    BM25Store(tmp_path / "bm25", owner={"items": "langchain_ctx.Document/1", "layout": "whole"})
    with pytest.raises(SearchIndexError, match=r"written by items langchain_ctx.Document/1.*its own folder"):
        BM25Store(tmp_path / "bm25", owner={"items": "llama_index_ctx.Node/1", "layout": "whole"})
    BM25Store(tmp_path / "bm25", owner={"items": "langchain_ctx.Document/1", "layout": "whole"})
    BM25Store(tmp_path / "bm25")  # a reader that names no owner reads any


def test_a_million_chunks_are_indexed_a_batch_at_a_time(tmp_path: Path) -> None:
    """The store reads its entries as they come: a generator is never turned into a list of every document."""
    seen = []

    def entries() -> Any:
        for n in range(12_000):
            seen.append(n)
            yield BM25Entry(f"c{n}", f"word{n % 50} common")

    store = BM25Store()
    original = store._document
    high_water = []

    def document(entry: BM25Entry, seq: int) -> Any:
        high_water.append(len(seen) - int(entry.id[1:]))  # entries read ahead of the one being built
        return original(entry, seq)

    store._document = document  # type: ignore[method-assign]
    assert store.upsert(entries()) == 12_000 and len(store) == 12_000
    assert max(high_water) <= 5000  # one batch, however long the stream


def test_a_segment_file_gone_is_a_typed_error_naming_the_rebuild(tmp_path: Path) -> None:
    store = BM25Store(tmp_path / "bm25")
    store.upsert([BM25Entry("a", "acme revenue grew"), BM25Entry("b", "globex foundry")])
    for positions in (tmp_path / "bm25").glob("*.pos"):
        positions.unlink()
    with pytest.raises(SearchIndexError, match=r"is damaged .* refills it from the vector store"):
        BM25Store(tmp_path / "bm25").search("acme")
