"""Issue 33: the pairing of the vector side and BM25. Every failure point of a write (BM25 locked by a real second
process, the vector store raising, a SIGKILL between the two writes) leaves the next query returning neither a
deleted chunk nor silently missing an added one, and ``sync()`` or the next open finishes the write."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import SearchIndexError
from ctx_retrieval.retrieval import pairing as pairing_module
from ctx_retrieval.retrieval.bm25_store import BM25Store
from ctx_retrieval.retrieval.fusion import chunk_key
from ctx_retrieval.retrieval.hybrid import BM25Side, HybridRetriever, Ranked
from ctx_retrieval.retrieval.pairing import Pairing, Record, Row, StoreFacts

ROOT = Path(__file__).resolve().parents[2]


def rec(chunk_id: str, text: str, ref: str = "doc") -> Record:
    return Record(chunk_id, text, text, None, ref, {"ref": ref}, text.encode(), None)


class Vectors:
    """An in-memory vector store the pairing writes (rows by id) and a query reads (word overlap ranks), with
    faults on demand: ``fail`` names a method that raises once."""

    def __init__(self) -> None:
        self.rows: dict[str, Row] = {}
        self.fail: str | None = None

    def _maybe_fail(self, method: str) -> None:
        if self.fail == method:
            self.fail = None
            raise ConnectionError(f"the vector store failed in {method}")

    def facts(self) -> StoreFacts:
        return StoreFacts("memory")

    def add_rows(self, rows: Sequence[Row]) -> None:
        self._maybe_fail("add_rows")
        self.rows.update((r.id, r) for r in rows)

    def delete_rows(self, ids: Sequence[str]) -> None:
        self._maybe_fail("delete_rows")
        for i in ids:
            self.rows.pop(i, None)

    async def aadd_rows(self, rows: Sequence[Row]) -> None:
        self.add_rows(rows)

    async def adelete_rows(self, ids: Sequence[str]) -> None:
        self.delete_rows(ids)

    def records(self, chunk_ids: Sequence[str]) -> dict[str, Record]:
        return {i: self.rows[i].record for i in chunk_ids if i in self.rows}

    def iter_records(self) -> Iterator[Record]:
        return iter([r.record for r in self.rows.values()])

    def count_rows(self) -> int:
        return len(self.rows)

    def search(self, query: str, k: int, where: Any = None) -> Ranked[Record]:
        words = set(query.lower().split())
        scored = sorted(((-len(words & set(r.text.lower().split())), i) for i, r in self.rows.items()))
        found = [self.rows[i].record for score, i in scored if score < 0][:k]
        return Ranked([chunk_key(r.id) for r in found], found, [r.id for r in found])


class Codec:
    def chunk_id(self, item: Record) -> str:
        return item.id

    def record(self, item: Record) -> Record:
        return item


def decode(entry: Any) -> Record:
    return rec(entry.id, entry.payload.decode(), entry.ref or "")


def hybrid(pairing: Pairing, vectors: Vectors) -> HybridRetriever[Record]:
    return HybridRetriever(vectors, BM25Side(pairing.bm25, decode), screen=pairing.guard(Codec()))


def found(pairing: Pairing, vectors: Vectors, query: str) -> dict[str, tuple[int | None, int | None]]:
    return {h.item.id: (h.vector_rank, h.bm25_rank) for h in hybrid(pairing, vectors).retrieve(query, 10)}


CHUNKS = [rec("a", "acme revenue grew three percent", "acme"), rec("b", "globex opened a foundry", "globex"),
          rec("c", "acme moved its foundry to tucson", "acme")]


def paired(tmp_path: Path) -> tuple[Pairing, Vectors]:
    vectors = Vectors()
    pairing = Pairing(vectors, BM25Store(tmp_path / "bm25"))
    pairing.add(CHUNKS)
    return pairing, vectors


HOLDER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from ctx_retrieval.retrieval.bm25_store import BM25Store
    with BM25Store({folder!r})._writer():
        print("holding", flush=True)
        sys.stdin.readline()
""")


class Holder:
    """A real second process holding the BM25 index's writer until released."""

    def __init__(self, folder: Path) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", HOLDER.format(root=str(ROOT), folder=str(folder))],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline().strip() == "holding"

    def release(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0


def test_a_delete_whose_bm25_step_meets_another_processes_writer_is_never_found_and_finishes_later(
        tmp_path: Path) -> None:
    pairing, vectors = paired(tmp_path)
    pairing.bm25.writer_timeout_s = 0.2
    holder = Holder(tmp_path / "bm25")
    try:
        with pytest.raises(SearchIndexError, match="another process"):
            pairing.delete(["c"])
        assert "c" not in found(pairing, vectors, "acme foundry tucson")  # journaled: neither side returns it
        other = Pairing(Vectors(), BM25Store(tmp_path / "bm25", writer_timeout_s=0.1))  # another process's view
        assert chunk_key("c") in {chunk_key(i) for intent in other.journal.pending() for i in intent.ids}
    finally:
        holder.release()
    assert pairing.sync().finished == 1
    assert "c" not in vectors.rows and "c" not in pairing.bm25.get(["c"]) and not pairing.journal.pending()
    assert set(found(pairing, vectors, "acme foundry")) == {"a", "b"}


def test_a_delete_whose_vector_step_fails_is_never_found_and_sync_finishes_it(tmp_path: Path) -> None:
    pairing, vectors = paired(tmp_path)
    vectors.fail = "delete_rows"
    with pytest.raises(ConnectionError):
        pairing.delete(["c"])
    assert "c" in vectors.rows and "c" not in pairing.bm25.get(["c"])  # BM25 first: it no longer holds it
    assert "c" not in found(pairing, vectors, "acme foundry tucson")  # the vector store does, the query drops it
    report = pairing.sync()
    assert (report.finished, report.added) == (1, 0) and "c" not in vectors.rows


def test_deleting_a_document_drops_its_chunks_that_bm25_never_held(tmp_path: Path) -> None:
    pairing, vectors = paired(tmp_path)
    vectors.rows["d"] = Row("d", "acme tucson annex", rec("d", "acme tucson annex", "acme"))  # written directly
    vectors.fail = "delete_rows"
    with pytest.raises(ConnectionError):
        pairing.delete_refs(["acme"])
    assert set(found(pairing, vectors, "acme tucson foundry revenue")) == {"b"}


def test_an_add_whose_bm25_step_meets_another_processes_writer_is_found_and_ranked_once_released(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pairing, vectors = paired(tmp_path)
    pairing.bm25.writer_timeout_s = 0.2
    holder = Holder(tmp_path / "bm25")
    try:
        with pytest.raises(SearchIndexError):
            pairing.add([rec("z", "zanzibar foundry opened", "acme")])
        with caplog.at_level(logging.WARNING):
            hits = found(pairing, vectors, "zanzibar foundry")
        assert hits["z"][0] == 1 and hits["z"][1] is None  # found, and the log says why BM25 lacks it
        assert "could not be added" in caplog.text
    finally:
        holder.release()
    hits = found(pairing, vectors, "zanzibar foundry")
    assert hits["z"] == (1, 1)  # BM25 took it at this query: ranked by both sides


def test_an_add_whose_vector_step_fails_leaves_neither_side_holding_it(tmp_path: Path) -> None:
    pairing, vectors = paired(tmp_path)
    vectors.fail = "add_rows"
    with pytest.raises(ConnectionError):
        pairing.add([rec("z", "zanzibar foundry opened", "acme")])
    assert "z" not in found(pairing, vectors, "zanzibar foundry")
    assert pairing.sync().finished == 1 and not pairing.bm25.get(["z"]) and "z" not in vectors.rows


def test_chunks_written_to_the_vector_store_directly_are_added_to_bm25_at_the_first_query(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pairing, vectors = paired(tmp_path)
    vectors.rows["z"] = Row("z", "zanzibar foundry opened", rec("z", "zanzibar foundry opened", "acme"))
    with caplog.at_level(logging.WARNING):
        assert found(pairing, vectors, "zanzibar foundry")["z"] == (1, 1)
    assert "write through ContextualVectorStore" in caplog.text and caplog.text.count("lacked") == 1


def test_a_followed_store_drops_bm25_hits_it_no_longer_holds_and_adds_what_it_gained(tmp_path: Path) -> None:
    vectors = Vectors()
    pairing = Pairing(vectors, BM25Store(tmp_path / "bm25"), follow=True)
    pairing.add(CHUNKS)
    del vectors.rows["c"]  # deleted from the store directly (LangChain's index() cleanup on the plain store)
    vectors.rows["z"] = Row("z", "zanzibar annex", rec("z", "zanzibar annex", "acme"))
    hits = found(pairing, vectors, "tucson zanzibar")
    assert "c" not in hits and hits["z"] == (1, 1) and set(pairing.bm25.ids()) == {"a", "b", "z"}


def test_a_followed_store_is_read_once_a_query_however_many_bm25_only_hits_it_confirms(tmp_path: Path) -> None:
    vectors = Vectors()
    pairing = Pairing(vectors, BM25Store(tmp_path / "bm25"), follow=True)
    pairing.add([rec(f"r{n}", f"rare{n} shared", "doc") for n in range(8)])
    reads: list[list[str]] = []
    real = vectors.records

    def counting(chunk_ids: Sequence[str]) -> dict[str, Record]:
        reads.append(list(chunk_ids))
        return real(chunk_ids)

    vectors.records = counting  # type: ignore[method-assign]
    vectors.search = lambda query, k, where=None: Ranked([], [], [])  # type: ignore[method-assign]
    hits = found(pairing, vectors, "shared")  # eight hits, all from BM25 alone: each confirmed against the store
    assert len(hits) == 8 and all(v is None for v, _ in hits.values())
    assert len(reads) == 1 and sorted(reads[0]) == [f"r{n}" for n in range(8)]


def test_sync_reconciles_both_ways_and_reports_both_counts(tmp_path: Path) -> None:
    pairing, vectors = paired(tmp_path)
    del vectors.rows["a"]
    vectors.rows["y"] = Row("y", "yonder", rec("y", "yonder"))
    report = pairing.sync()
    assert (report.added, report.removed) == (1, 1) and sorted(pairing.bm25.ids()) == ["b", "c", "y"]
    assert "1 chunks added to BM25, 1 removed" in str(report)


def test_a_fill_cut_short_is_finished_by_the_next_open_and_a_full_one_is_not_redone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vectors = Vectors()
    for n in range(5):
        vectors.rows[f"r{n}"] = Row(f"r{n}", f"row {n} foundry", rec(f"r{n}", f"row {n} foundry"))
    monkeypatch.setattr(pairing_module, "_FILL_BATCH", 2)
    listing = Vectors.iter_records

    def killed_after_two(self: Vectors) -> Iterator[Record]:  # the process dies after the first commit
        for n, record in enumerate(listing(self)):
            if n == 3:
                raise KeyboardInterrupt
            yield record

    monkeypatch.setattr(Vectors, "iter_records", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        Pairing.beside(vectors, tmp_path / "bm25", tokenizer="identifiers", owner={"items": "test"})
    assert len(BM25Store(tmp_path / "bm25")) == 2  # one batch committed: not empty, yet not whole
    monkeypatch.setattr(Vectors, "iter_records", listing)
    pairing = Pairing.beside(vectors, tmp_path / "bm25", tokenizer="identifiers", owner={"items": "test"})
    assert sorted(pairing.bm25.ids()) == sorted(vectors.rows)
    monkeypatch.setattr(Vectors, "count_rows", lambda self: pytest.fail("a whole BM25 is not refilled"))
    Pairing.beside(vectors, tmp_path / "bm25", tokenizer="identifiers", owner={"items": "test"})


KILLED = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from ctx_retrieval import MiniLMEmbedder
    from ctx_retrieval.retrieval import store as core
    from ctx_retrieval.retrieval.bm25_store import BM25Store
    step = sys.argv[1]
    owner = core._ChromaRows if step == "add_rows" else BM25Store  # an add writes vectors first, a delete BM25
    method = step if step == "add_rows" else "delete"
    real = getattr(owner, method)
    def then_die(self, *args):
        real(self, *args)
        os.kill(os.getpid(), signal.SIGKILL)  # between the first side's write and the second's
    setattr(owner, method, then_die)
    store = core.open_store({path!r}, embedder=MiniLMEmbedder(cache={cache!r}))
    if step == "add_rows":
        store.add([core.IndexedChunk("z", "acme", "Zanzibar foundry opened in March.", "From Acme's report.")])
    else:
        store.delete([sys.argv[2]])
""")


@pytest.mark.parametrize("step", ["add_rows", "delete_rows"])
def test_a_writer_killed_between_the_two_writes_is_finished_by_the_next_open(
        step: str, tmp_path: Path, embedder: Any, shared_cache_dir: Path) -> None:
    from ctx_retrieval.retrieval.store import IndexedChunk, build_store, open_store

    chunks = [IndexedChunk("a", "acme", "Acme revenue grew three percent.", "From Acme's Q2 report."),
              IndexedChunk("c", "acme", "Acme moved its foundry to Tucson.", "From Acme's Q2 report."),
              IndexedChunk("b", "globex", "Globex opened a foundry.", "From Globex's report.")]
    build_store(tmp_path / "store", chunks, embedder=embedder).close()
    script = KILLED.format(root=str(ROOT), path=str(tmp_path / "store"),
                           cache=str(shared_cache_dir / "embeddings.sqlite"))
    killed = subprocess.run([sys.executable, "-c", script, step, "c"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    store = open_store(tmp_path / "store", embedder=embedder)  # finishes the dead writer's journal entry
    assert not store.pairing.journal.pending()
    ids = set(store.collection.get(include=[])["ids"])
    if step == "add_rows":
        hits = {h.chunk.chunk_id: (h.vector_rank, h.bm25_rank) for h in store.search("Zanzibar foundry", k=5)}
        assert hits["z"][0] is not None and hits["z"][1] == 1 and "z" in ids  # rolled forward
        assert store.bm25.get(["z"])["z"].ref == "acme"
    else:
        assert "c" not in ids and not store.bm25.get(["c"])  # the delete finished on both sides
        assert "c" not in {h.chunk.chunk_id for h in store.search("foundry Tucson", k=5)}


def entry(pairing: Pairing, name: str, text: str) -> Path:
    assert pairing.bm25.path is not None
    path = pairing.bm25.path / ".pairing" / name
    path.write_text(text, encoding="utf-8")
    return path


def test_damaged_journal_entries_are_quarantined_and_what_they_still_say_of_a_delete_is_kept(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pairing, vectors = paired(tmp_path)
    entry(pairing, "01-cut.json", '{"op": "delete", "ids": ["a", "b')  # cut short: "a" is still readable
    entry(pairing, "02-typed.json", '{"op": "delete", "ids": 5, "writer": "w"}')
    entry(pairing, "03-op.json", '{"op": "move", "ids": ["c"], "writer": "w"}')
    entry(pairing, "04-writer.json", '{"op": "add", "ids": ["c"]}')
    left = entry(pairing, ".05-killed.json.tmp", '{"op": "add"')  # a kill before the entry was named
    os.utime(left, (time.time() - 3600, time.time() - 3600))
    with caplog.at_level(logging.WARNING):
        hits = found(pairing, vectors, "acme revenue foundry")  # no raw TypeError, and "a" is not served
    assert "a" not in hits and {"b", "c"} <= set(hits)
    assert caplog.text.count("damaged entry of the pairing journal") == 4
    assert "still names a delete of 1 chunks" in caplog.text
    damaged = pairing.bm25.path / ".pairing" / "damaged"  # type: ignore[operator]
    assert sorted(p.name for p in damaged.iterdir()) == ["01-cut.json", "02-typed.json", "03-op.json",
                                                         "04-writer.json"]
    assert not left.exists()
    report = pairing.sync()  # finishes the salvaged delete; "c" (named by the unknown op) is not skipped
    assert report.finished == 2 and "a" not in vectors.rows and "a" not in set(pairing.bm25.ids())
    assert not pairing.journal.pending() and sorted(pairing.bm25.ids()) == ["b", "c"]


def test_an_intent_of_a_writer_on_another_machine_is_finished_once_it_expires(tmp_path: Path) -> None:
    pairing, vectors = paired(tmp_path)
    other = "another-host|boot-1|4242|-|abcdef01"  # its life cannot be seen from here
    intent = {"op": "delete", "ids": ["b"], "refs": [], "rows": [], "writer": other, "failed": False,
              "expires": time.time() + 3600}
    path = entry(pairing, "01-other.json", json.dumps(intent))
    pairing.bm25.delete(["b"])  # it died after its BM25 step
    assert "b" not in found(pairing, vectors, "globex foundry")  # being deleted: dropped
    pairing.sync()
    assert path.exists() and "b" in vectors.rows  # still within its lease: not another's to finish
    path.write_text(json.dumps({**intent, "expires": time.time() - 1}), encoding="utf-8")
    assert pairing.sync().finished == 1 and "b" not in vectors.rows and not path.exists()
    pairing.add([rec("b", "globex opened a foundry", "globex")])  # added again: found again
    assert "b" in found(pairing, vectors, "globex foundry")


def test_the_journal_folder_replaced_by_a_file_is_a_typed_error_and_same_tick_writes_are_seen(
        tmp_path: Path) -> None:
    pairing, _ = paired(tmp_path)
    folder = pairing.bm25.path / ".pairing"  # type: ignore[operator]
    assert pairing.journal.pending() == []
    before = folder.stat()
    entry(pairing, "01-late.json", json.dumps({"op": "delete", "ids": ["a"], "writer": "w|x|1|-|y"}))
    os.utime(folder, ns=(before.st_atime_ns, before.st_mtime_ns))  # a filesystem whose clock did not tick
    assert [i.ids for i in pairing.journal.pending()] == [["a"]]
    shutil.rmtree(folder)
    folder.write_text("not a folder", encoding="utf-8")
    with pytest.raises(SearchIndexError, match="move the file away"):
        Pairing(Vectors(), BM25Store(tmp_path / "bm25"))
    with pytest.raises(SearchIndexError, match="move the file away"):
        pairing.journal.pending()


def test_an_unreadable_manifest_rebuilds_bm25_but_keeps_the_journal(tmp_path: Path, embedder: Any) -> None:
    from ctx_retrieval.retrieval.store import IndexedChunk, build_store, open_store

    chunks = [IndexedChunk("a", "acme", "Acme revenue grew three percent.", None),
              IndexedChunk("c", "acme", "Acme moved its foundry to Tucson.", None)]
    build_store(tmp_path / "store", chunks, embedder=embedder).close()
    bm25 = tmp_path / "store" / "bm25-store"
    (bm25 / ".pairing" / "01-delete.json").write_text(json.dumps(  # a delete that failed after its BM25 step
        {"op": "delete", "ids": ["c"], "refs": [], "rows": [], "writer": "w|x|1|-|y", "failed": True}))
    (bm25 / "ctx_bm25.json").write_text("{cut", encoding="utf-8")
    store = open_store(tmp_path / "store", embedder=embedder)
    assert "c" not in {h.chunk.chunk_id for h in store.search("foundry Tucson", k=5)}
    assert "c" not in set(store.collection.get(include=[])["ids"]) and sorted(store.bm25.ids()) == ["a"]


class ServerVectors(Vectors):
    """A server's collection: other machines write it, each with its own BM25 copy."""

    def facts(self) -> StoreFacts:
        return StoreFacts("server", identity="server/collection")


def test_over_a_server_every_bm25_hit_is_checked_against_it_by_id_and_text(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    vectors = ServerVectors()
    pairing = Pairing(vectors, BM25Store(tmp_path / "bm25"))
    pairing.add(CHUNKS)
    vectors.rows["c"] = Row("c", "acme moved its plant to zanzibar", rec("c", "acme moved its plant to zanzibar"))
    del vectors.rows["b"]  # another machine replaced one chunk and deleted another
    with caplog.at_level(logging.WARNING):
        hits = {h.item.id: h.item.text for h in hybrid(pairing, vectors).retrieve("tucson foundry globex", 10)}
    assert "b" not in hits and hits.get("c", "acme moved its plant to zanzibar") == "acme moved its plant to zanzibar"
    assert sorted(pairing.bm25.ids()) == ["a", "c"] and "1 hits deleted from it, 1 written anew" in caplog.text
    assert "c" in found(pairing, vectors, "zanzibar plant")  # BM25 holds the new version
    assert found(pairing, vectors, "tucson") == {}


class DeletingWhileSearched(Vectors):
    """A delete finishes between the query's vector search and its screen."""

    def __init__(self) -> None:
        super().__init__()
        self.then: Any = None

    def search(self, query: str, k: int, where: Any = None) -> Ranked[Record]:
        found = super().search(query, k, where)
        if self.then is not None:
            then, self.then = self.then, None
            then()
        return found


def test_a_delete_that_finishes_during_a_query_is_not_written_back_to_bm25(tmp_path: Path) -> None:
    vectors = DeletingWhileSearched()
    pairing = Pairing(vectors, BM25Store(tmp_path / "bm25"))
    pairing.add(CHUNKS[:2])
    vectors.add_rows([Row("c", CHUNKS[2].text, CHUNKS[2])])  # written by another machine: this BM25 never held it
    vectors.then = lambda: pairing.delete(["c"])
    hybrid(pairing, vectors).retrieve("tucson foundry", 10)
    assert "c" not in set(pairing.bm25.ids()) and "c" not in vectors.rows
    assert "c" not in found(pairing, vectors, "tucson foundry")


class Nameless(Codec):
    """A framework whose store returns items without an id or a text: its record gets an id at random."""

    def chunk_id(self, item: Record) -> str:
        return item.id or item.text

    def record(self, item: Record) -> Record:
        return rec(self.chunk_id(item) or f"random-{len(str(id(item)))}-{time.time_ns()}", item.text)


def test_items_without_id_or_text_are_never_added_to_bm25(tmp_path: Path) -> None:
    pairing, vectors = paired(tmp_path)
    vectors.rows["x"] = Row("x", "zanzibar ledger", Record("", "", "", None, None, {}, b"", None))
    retriever = HybridRetriever(vectors, BM25Side(pairing.bm25, decode), screen=pairing.guard(Nameless()))
    for _ in range(3):
        retriever.retrieve("zanzibar ledger", 10)
    assert len(pairing.bm25) == 3


class Unreadable:
    """A store that cannot read rows back by id (no ``get_by_ids``): an interrupted add cannot be rolled forward."""

    def __init__(self) -> None:
        self.inner = Vectors()

    def facts(self) -> StoreFacts:
        return StoreFacts("memory")

    def add_rows(self, rows: Sequence[Row]) -> None:
        self.inner.add_rows(rows)

    def delete_rows(self, ids: Sequence[str]) -> None:
        self.inner.delete_rows(ids)

    async def aadd_rows(self, rows: Sequence[Row]) -> None:
        self.inner.add_rows(rows)

    async def adelete_rows(self, ids: Sequence[str]) -> None:
        self.inner.delete_rows(ids)


def test_an_update_that_failed_over_an_unreadable_store_never_loses_the_chunk(tmp_path: Path) -> None:
    store = Unreadable()
    pairing = Pairing(store, BM25Store(tmp_path / "bm25"))  # type: ignore[arg-type]
    pairing.add(CHUNKS)
    store.inner.fail = "add_rows"
    with pytest.raises(ConnectionError):
        pairing.add([rec("a", "acme revenue grew four percent", "acme")])  # the update fails once
    pairing.add([rec("z", "zanzibar ledger", "zed")])  # the next write finishes the failed one
    assert "a" in store.inner.rows  # the store keeps the version it holds; BM25 re-learns it when found
    assert "a" in found(pairing, store.inner, "acme revenue")
