"""Issue 24, item 3: whatever the frameworks' own incremental ingestion writes, the BM25 side holds the same chunks.

LangChain's indexing API (``index()`` with a record manager, ``cleanup="incremental"`` and ``"full"``) and
LlamaIndex's ``IngestionPipeline`` (a docstore strategy, ``UPSERTS`` and ``UPSERTS_AND_DELETE``) and its index's
``insert_nodes`` / ``delete_ref_doc``, into a ``ContextualVectorStore`` over Chroma on disk; then a second process
(a query service: tests/integration/test_pairing_processes.py) sees the writer's next commit at its next query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_chroma")
pytest.importorskip("llama_index.vector_stores.chroma")

from langchain_chroma import Chroma
from langchain_core.documents import Document as LCDocument
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_text_splitters import RecursiveCharacterTextSplitter
from llama_index.core import Document as LIDocument
from llama_index.core import VectorStoreIndex
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore

from ctx_retrieval import HeuristicContextualizer, MiniLMEmbedder
from langchain_ctx import ContextualDocumentTransformer, MiniLMEmbeddings
from langchain_ctx import ContextualHybridRetriever as LCRetriever
from langchain_ctx import ContextualVectorStore as LCStore
from llama_index_ctx import ContextualHybridRetriever as LIRetriever
from llama_index_ctx import ContextualNodeTransform, MiniLMEmbedding, chroma_vector_store
from llama_index_ctx import ContextualVectorStore as LIStore
from tests.helpers import ACME, GLOBEX

ROOT = Path(__file__).resolve().parents[2]
EDITED = ACME.replace("Tucson", "Zanzibar")  # one changed paragraph: its chunks change, the others do not


def lc_chunks(*texts_and_sources: tuple[str, str]) -> list[LCDocument]:
    splitter = RecursiveCharacterTextSplitter(chunk_size=160, chunk_overlap=0, add_start_index=True)
    sources = [LCDocument(page_content=t, metadata={"source": s}) for t, s in texts_and_sources]
    return ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(
        splitter.split_documents(sources), source_documents=sources)


def lc_ids(store: LCStore) -> tuple[set[str], set[str]]:
    return set(store.inner.get()["ids"]), set(store.bm25.ids())


def test_langchain_index_api_incremental_and_full_cleanup_keep_bm25_equal_to_the_store(
        tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    embeddings = MiniLMEmbeddings(embedder)
    store = LCStore(Chroma(collection_name="filings", embedding_function=embeddings,
                           persist_directory=str(tmp_path / "db")), bm25=tmp_path / "db" / "bm25")
    records = InMemoryRecordManager("filings")
    records.create_schema()
    first = index(lc_chunks((ACME, "acme"), (GLOBEX, "globex")), records, store, cleanup="incremental",
                  source_id_key="source", key_encoder="sha256")
    vector, bm25 = lc_ids(store)
    assert first["num_added"] == len(vector) > 0 and vector == bm25
    edited = index(lc_chunks((EDITED, "acme"), (GLOBEX, "globex")), records, store, cleanup="incremental",
                   source_id_key="source", key_encoder="sha256")
    assert 0 < edited["num_added"] == edited["num_deleted"] and edited["num_skipped"] > 0
    vector, bm25 = lc_ids(store)
    assert vector == bm25
    hits = LCRetriever(vectorstore=store, k=3).invoke("Zanzibar foundry move")
    assert "Zanzibar" in hits[0].page_content and hits[0].metadata["bm25_rank"] == 1
    assert not LCRetriever(vectorstore=store, k=3).bm25.invoke("Tucson")  # type: ignore[union-attr]
    full = index(lc_chunks((GLOBEX, "globex")), records, store, cleanup="full", source_id_key="source",
                 key_encoder="sha256")
    vector, bm25 = lc_ids(store)
    assert full["num_deleted"] > 0 and vector == bm25
    assert {d.metadata["source"] for d in store.documents()} == {"globex"}


def li_pipeline(store: Any, docstore: SimpleDocumentStore, embed_model: MiniLMEmbedding,
                strategy: DocstoreStrategy) -> IngestionPipeline:
    return IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=48, chunk_overlap=0),
                         ContextualNodeTransform.from_generator(HeuristicContextualizer()), embed_model],
        vector_store=store, docstore=docstore, docstore_strategy=strategy)


def li_ids(store: LIStore) -> tuple[set[str], set[str]]:
    return set(store.inner.client.get()["ids"]), set(store.bm25.ids())


def test_llama_index_ingestion_pipeline_upserts_and_deletes_keep_bm25_equal_to_the_store(
        tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    embed_model = MiniLMEmbedding(embedder)
    store = LIStore(chroma_vector_store(persist_directory=tmp_path / "db"), bm25=tmp_path / "db" / "bm25")
    docstore = SimpleDocumentStore()
    documents = [LIDocument(text=ACME, id_="acme"), LIDocument(text=GLOBEX, id_="globex")]
    li_pipeline(store, docstore, embed_model, DocstoreStrategy.UPSERTS).run(documents=documents)
    vector, bm25 = li_ids(store)
    assert len(vector) > 2 and vector == bm25
    edited = [LIDocument(text=EDITED, id_="acme"), LIDocument(text=GLOBEX, id_="globex")]
    li_pipeline(store, docstore, embed_model, DocstoreStrategy.UPSERTS).run(documents=edited)
    vector, bm25 = li_ids(store)
    assert vector == bm25
    retriever = LIRetriever.from_vector_store(store, embed_model=embed_model, similarity_top_k=3)
    hits = retriever.retrieve("Zanzibar foundry move")
    assert "Zanzibar" in hits[0].node.get_content() and hits[0].node.metadata["bm25_rank"] == 1
    assert all("Tucson" not in n.get_content() for n in store.get_nodes())
    li_pipeline(store, docstore, embed_model, DocstoreStrategy.UPSERTS_AND_DELETE).run(documents=edited[1:])
    vector, bm25 = li_ids(store)
    assert vector == bm25 and {n.ref_doc_id for n in store.get_nodes()} == {"globex"}


def test_llama_index_own_index_calls_write_both_sides(embedder: MiniLMEmbedder) -> None:
    embed_model = MiniLMEmbedding(embedder)
    nodes = ContextualNodeTransform.from_generator(HeuristicContextualizer())(
        SentenceSplitter(chunk_size=48, chunk_overlap=0)([LIDocument(text=ACME, id_="acme")]))
    store = LIStore(chroma_vector_store())
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed_model)
    index.insert_nodes(nodes)
    assert li_ids(store)[0] == li_ids(store)[1] == {n.node_id for n in nodes}
    index.delete_ref_doc("acme")
    assert li_ids(store) == (set(), set())


def test_a_store_indexed_before_bm25_is_read_a_page_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Filling BM25 from a plain Chroma reads it in pages (one get of 100k rows fails in Chroma)."""
    import chromadb
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import TextNode

    import langchain_ctx.store
    import llama_index_ctx.store

    monkeypatch.setattr(langchain_ctx.store, "_PAGE", 3)
    monkeypatch.setattr(llama_index_ctx.store, "_PAGE", 3)
    texts = [f"runbook line {n} about service{n}" for n in range(7)]
    plain = Chroma(collection_name="paged", embedding_function=DeterministicFakeEmbedding(size=8),
                   client=chromadb.EphemeralClient())
    plain.add_texts(texts, ids=[f"t{n}" for n in range(7)])
    assert len(LCRetriever.from_vectorstore(plain).vectorstore.bm25) == 7
    store = chroma_vector_store(collection_name="paged-li")
    store.add([TextNode(text=t, id_=f"n{n}", embedding=[float(n + 1)] * 8) for n, t in enumerate(texts)])
    retriever = LIRetriever.from_vector_store(store, embed_model=MockEmbedding(embed_dim=8))
    assert len(retriever.store.bm25) == 7 and retriever.bm25.retrieve("service5")[0].node.node_id == "n5"


# -- issue 33: the usual flow, the frameworks' own ingestion into a plain store, in one process ----------------------


def test_langchain_index_into_a_plain_store_is_followed_by_the_retriever_at_its_first_query(
        embedder: MiniLMEmbedder, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from langchain_core.vectorstores import InMemoryVectorStore

    plain = InMemoryVectorStore(MiniLMEmbeddings(embedder))
    records = InMemoryRecordManager("plain")
    records.create_schema()
    index(lc_chunks((GLOBEX, "globex")), records, plain, cleanup="full", source_id_key="source",
          key_encoder="sha256")
    retriever = LCRetriever.from_vectorstore(plain, k=5)  # the user's own store, as it is
    assert retriever.invoke("Globex")
    index(lc_chunks((GLOBEX, "globex"), (EDITED, "acme")), records, plain, cleanup="full", source_id_key="source",
          key_encoder="sha256")
    with caplog.at_level(logging.WARNING):
        hits = [d for d in retriever.invoke("Zanzibar foundry move") if "Zanzibar" in d.page_content]
    assert hits and hits[0].metadata["bm25_rank"] == 1 and hits[0].metadata["vector_rank"] is not None
    assert "written directly" in caplog.text and "ContextualVectorStore" in caplog.text  # and says how to avoid it
    index(lc_chunks((GLOBEX, "globex")), records, plain, cleanup="full", source_id_key="source",
          key_encoder="sha256")
    assert all("Zanzibar" not in d.page_content for d in retriever.invoke("Zanzibar foundry move"))


def test_llama_index_pipeline_into_a_plain_store_is_followed_by_the_retriever_at_its_first_query(
        embedder: MiniLMEmbedder) -> None:
    embed_model = MiniLMEmbedding(embedder)
    plain = chroma_vector_store()  # in memory, not wrapped
    docstore = SimpleDocumentStore()
    li_pipeline(plain, docstore, embed_model, DocstoreStrategy.UPSERTS_AND_DELETE).run(
        documents=[LIDocument(text=GLOBEX, id_="globex")])
    retriever = LIRetriever.from_vector_store(plain, embed_model=embed_model, similarity_top_k=5)
    assert retriever.retrieve("Globex")
    li_pipeline(plain, docstore, embed_model, DocstoreStrategy.UPSERTS_AND_DELETE).run(
        documents=[LIDocument(text=GLOBEX, id_="globex"), LIDocument(text=EDITED, id_="acme")])
    hits = [r for r in retriever.retrieve("Zanzibar foundry move") if "Zanzibar" in r.node.get_content()]
    assert hits and hits[0].node.metadata["bm25_rank"] == 1 and hits[0].node.metadata["vector_rank"] is not None
    li_pipeline(plain, docstore, embed_model, DocstoreStrategy.UPSERTS_AND_DELETE).run(
        documents=[LIDocument(text=GLOBEX, id_="globex")])
    assert all("Zanzibar" not in r.node.get_content() for r in retriever.retrieve("Zanzibar foundry move"))


def test_a_rerun_rewrites_nothing_with_scoped_full_and_incremental_rewrites_a_file_split_across_batches(
        embedder: MiniLMEmbedder) -> None:
    """Issue 52's resumed LangChain job that deleted and re-added 21 chunks: LangChain's ``incremental`` cleanup
    runs after every batch of ``batch_size`` chunks and deletes the chunks of that batch's files not yet seen in this
    run, so a file whose chunks fall on both sides of a batch boundary loses its later chunks and gets them back in
    the next batch, on every run. ``scoped_full`` (the README's advice for a job resumed over the same files) cleans
    once at the end and rewrites nothing."""
    from langchain_core.vectorstores import InMemoryVectorStore

    chunks = [LCDocument(page_content=f"Chunk {n} of file {source}: the quarterly figures.", id=f"{source}-{n}",
                         metadata={"source": source}) for source in ("a", "b") for n in range(30)]
    # batches of 25: a0-24 | a25-29 b0-19 | b20-29: a's last 5 and b's last 10 are deleted and re-added
    for cleanup, rewritten in (("scoped_full", 0), ("incremental", 15)):
        store = LCStore(InMemoryVectorStore(MiniLMEmbeddings(embedder)))
        records = InMemoryRecordManager(cleanup)
        records.create_schema()
        index(chunks, records, store, cleanup=cleanup, source_id_key="source", key_encoder="sha256", batch_size=25)
        rerun = index(chunks, records, store, cleanup=cleanup, source_id_key="source", key_encoder="sha256",
                      batch_size=25)
        assert (rerun["num_deleted"], rerun["num_added"]) == (rewritten, rewritten), cleanup
        assert len(store.bm25.ids()) == len(chunks)
