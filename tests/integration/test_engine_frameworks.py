"""Issues 37 and 54: contextual hybrid inside one engine (Milvus, PostgreSQL) through the frameworks. Each chunk is
one row both engine sides read, so the frameworks' own incremental ingestion (LangChain ``index()``, LlamaIndex
``IngestionPipeline`` with a docstore) keeps both true at once; an ingestion job and a query service in two
processes share a Milvus server or a PostgreSQL database."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document as LCDocument
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_text_splitters import RecursiveCharacterTextSplitter

from ctx_retrieval import HeuristicContextualizer, InvalidInputError
from ctx_retrieval.errors import ConfigurationError
from langchain_ctx import ContextualDocumentTransformer, ContextualHybridRetriever, MiniLMEmbeddings
from langchain_ctx.engines import ContextualMilvus, ContextualPostgres
from tests.helpers import LineService, milvus_lite_server

ACME = ("ACME Corp quarterly report, Q2 2023.\n\nRevenue grew by 3% over the previous quarter.\n\n"
        "The foundry moved to Tucson during the period under review.")
GLOBEX = "Globex Corporation quarterly report, Q2 2023.\n\nRevenue fell by 5% over the previous quarter."
EDITED = ACME.replace("Tucson", "Zanzibar")


def lc_chunks(*texts_and_sources: tuple[str, str], tenant: str = "a") -> list[LCDocument]:
    splitter = RecursiveCharacterTextSplitter(chunk_size=70, chunk_overlap=0, add_start_index=True)
    sources = [LCDocument(page_content=t, metadata={"source": s, "tenant": tenant}) for t, s in texts_and_sources]
    return ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(
        splitter.split_documents(sources), source_documents=sources)


def lc_ids(documents: list[LCDocument]) -> list[str]:
    return [str(d.metadata["chunk_id"]) for d in documents]


class Engine:
    """Where the tests' engine keeps a collection: ``place()`` one for this process, ``shared()`` one a second
    process reaches; ``lc``/``li`` open the framework stores on it."""

    def __init__(self, name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.name, self.tmp_path = name, tmp_path
        if name == "milvus":
            pytest.importorskip("pymilvus")
            pytest.importorskip("milvus_lite")
        else:
            self.server = request.getfixturevalue("postgres")

    def place(self) -> str:
        return str(self.tmp_path / "engine.db") if self.name == "milvus" else str(self.server.new_database())

    @contextlib.contextmanager
    def shared(self) -> Iterator[str]:
        if self.name == "milvus":
            with milvus_lite_server(self.tmp_path / "milvus") as uri:
                yield uri
        else:
            yield str(self.server.new_database())

    def lc(self, embeddings: Any, where: str) -> Any:
        return ContextualMilvus(embeddings, uri=where) if self.name == "milvus" else ContextualPostgres(embeddings,
                                                                                                         url=where)

    def li(self, where: str, embed_model: Any) -> Any:
        from llama_index_ctx import ContextualMilvusVectorStore, ContextualPostgresVectorStore

        made = ContextualMilvusVectorStore if self.name == "milvus" else ContextualPostgresVectorStore
        return made(where, embed_model=embed_model)


@pytest.fixture(params=["milvus", "postgres"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    return Engine(request.param, tmp_path, request)


def test_langchain_hybrid_in_an_engine_finds_a_chunk_by_its_context_on_both_sides(engine: Engine,
                                                                                   embedder: Any) -> None:
    where = engine.place()
    store = engine.lc(MiniLMEmbeddings(embedder), where)
    chunks = lc_chunks((ACME, "acme"), (GLOBEX, "globex"))
    store.add_documents(chunks, ids=lc_ids(chunks))
    retriever = ContextualHybridRetriever(vectorstore=store, k=3)
    first = retriever.invoke("acme Tucson")[0]  # "acme" is in the context only
    assert "Tucson" in first.page_content and first.metadata["source"] == "acme"  # the document comes back whole
    assert first.metadata["bm25_rank"] == 1 and first.metadata["vector_rank"] is not None
    assert first.metadata["context"] and first.page_content.startswith(first.metadata["context"])
    # "Globex revenue" filtered to another tenant finds nothing; a where dict reaches both engine sides
    assert retriever.invoke("Globex revenue", filter={"tenant": "b"}) == []
    with pytest.raises(InvalidInputError, match="where dict"):
        retriever.invoke("Globex revenue", filter=lambda d: True)
    assert [d.id for d in store.get_by_ids([first.id, "missing"])] == [first.id]
    if engine.name != "milvus":
        return
    # Milvus's own fusion agrees on the first hit, and says it cannot weigh the sides
    fused = ContextualMilvus(MiniLMEmbeddings(embedder), uri=where, engine_fusion=True)
    assert "Tucson" in ContextualHybridRetriever(vectorstore=fused, k=1).invoke("acme Tucson")[0].page_content
    with pytest.raises(ConfigurationError, match="weights"):
        ContextualHybridRetriever(vectorstore=fused, weights=(0.3, 0.7)).invoke("acme Tucson")


def test_langchain_index_edits_and_deletes_land_on_both_engine_sides(engine: Engine, embedder: Any) -> None:
    store = engine.lc(MiniLMEmbeddings(embedder), engine.place())
    records = InMemoryRecordManager("engine")
    records.create_schema()

    def write(*documents: tuple[str, str]) -> Any:
        return index(lc_chunks(*documents), records, store, cleanup="full", source_id_key="source",
                     key_encoder="sha256")

    write((ACME, "acme"), (GLOBEX, "globex"))
    edited = write((EDITED, "acme"), (GLOBEX, "globex"))
    assert edited["num_deleted"] >= 1 and edited["num_added"] >= 1
    for mode in ("bm25", "vector"):
        texts = [h.item.chunk.text for h in store.store.search_stored("foundry", k=10, mode=mode)]
        assert any("Zanzibar" in t for t in texts) and not any("Tucson" in t for t in texts), (mode, texts)
    write((GLOBEX, "globex"))  # full cleanup: ACME's chunks leave both sides
    for mode in ("bm25", "vector"):
        assert not any("ACME" in h.item.chunk.indexed_text for h in store.store.search_stored("ACME", k=10,
                                                                                              mode=mode))


LC_SERVICE = """
import json, sys
from ctx_retrieval import MiniLMEmbedder
from langchain_ctx import ContextualHybridRetriever, ContextualMilvus, ContextualPostgres, MiniLMEmbeddings
embeddings = MiniLMEmbeddings(MiniLMEmbedder(cache=sys.argv[2]))
store = (ContextualPostgres(embeddings, url=sys.argv[1]) if sys.argv[1].startswith("postgresql:")
         else ContextualMilvus(embeddings, uri=sys.argv[1]))
retriever = ContextualHybridRetriever(vectorstore=store, k=3)
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    found = retriever.invoke(line.strip())
    print(json.dumps([[d.page_content, d.metadata["vector_rank"], d.metadata["bm25_rank"]] for d in found]),
          flush=True)
"""


# -- LlamaIndex ----------------------------------------------------------------------------------------------------


def li_pipeline(store: Any, embedder: Any, docstore: Any) -> Any:
    from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter

    from llama_index_ctx import ContextualNodeTransform, MiniLMEmbedding

    return IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=24, chunk_overlap=0),
                         ContextualNodeTransform.from_generator(HeuristicContextualizer()), MiniLMEmbedding(embedder)],
        vector_store=store, docstore=docstore, docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)


def li_documents(*texts_and_sources: tuple[str, str]) -> list[Any]:
    from llama_index.core import Document as LIDocument

    return [LIDocument(text=text, id_=source, metadata={"tenant": "a"}) for text, source in texts_and_sources]


def test_llama_index_pipeline_and_hybrid_query_in_an_engine(engine: Engine, embedder: Any) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core import VectorStoreIndex
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.core.vector_stores.types import MetadataFilters

    from llama_index_ctx import ContextualHybridRetriever, MiniLMEmbedding

    store = engine.li(engine.place(), MiniLMEmbedding(embedder))
    docstore = SimpleDocumentStore()
    li_pipeline(store, embedder, docstore).run(documents=li_documents((ACME, "acme"), (GLOBEX, "globex")))
    index = VectorStoreIndex.from_vector_store(store, embed_model=MiniLMEmbedding(embedder))
    # LlamaIndex's own retriever, hybrid mode: both engine sides, each node with its ranks
    first = index.as_retriever(vector_store_query_mode="hybrid", similarity_top_k=3).retrieve("acme Tucson")[0]
    assert "Tucson" in first.node.get_content() and first.node.ref_doc_id == "acme"
    assert first.node.metadata["bm25_rank"] == 1 and first.node.metadata["vector_rank"] is not None
    assert first.node.metadata["context"]  # the node comes back whole, its context with it
    # ours over the same index: filters reach both engine sides
    ours = ContextualHybridRetriever(index, similarity_top_k=3)
    assert "Tucson" in ours.retrieve("acme Tucson")[0].node.get_content()
    other = MetadataFilters.from_dicts([{"key": "tenant", "value": "b"}])
    assert ContextualHybridRetriever(index, similarity_top_k=3, filters=other).retrieve("Globex revenue") == []
    # an edit through the pipeline's docstore replaces the document's nodes on both sides; a delete removes them
    li_pipeline(store, embedder, docstore).run(documents=li_documents((EDITED, "acme"), (GLOBEX, "globex")))
    for mode in ("bm25", "vector"):
        texts = [h.item.chunk.text for h in store.client.search_stored("foundry", k=10, mode=mode)]
        assert any("Zanzibar" in t for t in texts) and not any("Tucson" in t for t in texts), (mode, texts)
    index.delete_ref_doc("acme")
    for mode in ("bm25", "vector"):
        assert not any("Zanzibar" in h.item.chunk.text for h in store.client.search_stored("foundry", k=10,
                                                                                             mode=mode))


LI_SERVICE = """
import json, sys
from llama_index.core import VectorStoreIndex
from ctx_retrieval import MiniLMEmbedder
from llama_index_ctx import (ContextualHybridRetriever, ContextualMilvusVectorStore, ContextualPostgresVectorStore,
                             MiniLMEmbedding)
embed = MiniLMEmbedding(MiniLMEmbedder(cache=sys.argv[2]))
store = (ContextualPostgresVectorStore if sys.argv[1].startswith("postgresql:") else ContextualMilvusVectorStore)(
    sys.argv[1], embed_model=embed)
retriever = ContextualHybridRetriever(VectorStoreIndex.from_vector_store(store, embed_model=embed), similarity_top_k=3)
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    found = retriever.retrieve(line.strip())
    print(json.dumps([[n.node.get_content(), n.node.metadata["vector_rank"], n.node.metadata["bm25_rank"]]
                      for n in found]), flush=True)
"""


def langchain_job(engine: Engine, uri: str, embedder: Any) -> Any:
    """The ingestion job: LangChain's ``index()`` with a record manager into the collection (its own client)."""
    job = engine.lc(MiniLMEmbeddings(embedder), uri)
    records = InMemoryRecordManager("engine")
    records.create_schema()

    def write(*documents: tuple[str, str]) -> None:
        index(lc_chunks(*documents), records, job, cleanup="full", source_id_key="source", key_encoder="sha256")

    return write


def llama_index_job(engine: Engine, uri: str, embedder: Any) -> Any:
    """The ingestion job: an ``IngestionPipeline`` with a docstore (UPSERTS_AND_DELETE) into the collection."""
    pytest.importorskip("llama_index.core")
    from llama_index.core.storage.docstore import SimpleDocumentStore

    from llama_index_ctx import MiniLMEmbedding

    job = engine.li(uri, MiniLMEmbedding(embedder))
    docstore = SimpleDocumentStore()

    def write(*documents: tuple[str, str]) -> None:
        li_pipeline(job, embedder, docstore).run(documents=li_documents(*documents))

    return write


@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_job_and_a_query_service_in_two_processes_share_an_engine(
        framework: str, engine: Engine, embedder: Any, shared_cache_dir: Path) -> None:
    job, script = {"langchain": (langchain_job, LC_SERVICE), "llama_index": (llama_index_job, LI_SERVICE)}[framework]
    with engine.shared() as uri:
        write = job(engine, uri, embedder)
        write((GLOBEX, "globex"))
        service = LineService(script, uri, str(shared_cache_dir / "embeddings.sqlite"))
        try:
            assert service.first == "ready"
            assert all("Zanzibar" not in text for text, _, _ in service.ask("Zanzibar foundry"))
            write((GLOBEX, "globex"), (EDITED, "acme"))  # the job adds a document while the service runs
            found = [(vector, bm25) for text, vector, bm25 in service.ask("Zanzibar foundry") if "Zanzibar" in text]
            assert found and found[0][0] is not None and found[0][1] == 1, found  # both sides, at the next query
            write((GLOBEX, "globex"))  # ... and deletes it (full cleanup, UPSERTS_AND_DELETE: it left the input)
            assert all("Zanzibar" not in text for text, _, _ in service.ask("Zanzibar foundry"))
        finally:
            assert service.close() == 0


_KILLED_JOB = """
import sys
from langchain_classic.indexes import SQLRecordManager
from langchain_core.indexing import index
from ctx_retrieval import MiniLMEmbedder
from langchain_ctx import ContextualPostgres, MiniLMEmbeddings
from tests.integration.test_engine_frameworks import ACME, EDITED, GLOBEX, lc_chunks
store = ContextualPostgres(MiniLMEmbeddings(MiniLMEmbedder(cache=sys.argv[2])), url=sys.argv[1])
records = SQLRecordManager("engine", db_url=sys.argv[3])
records.create_schema()
index(lc_chunks((ACME, "acme"), (GLOBEX, "globex")), records, store, cleanup="incremental", source_id_key="source",
      key_encoder="sha256")
execute = store.store._conn.execute
def held(sql, *args, **kwargs):  # the edit's rows are deleted and copied: wait to be killed before the statistics
    if "_stats SET" in str(sql):
        print("mid-write", flush=True)
        sys.stdin.readline()
    return execute(sql, *args, **kwargs)
store.store._conn.execute = held
index(lc_chunks((EDITED, "acme")), records, store, cleanup="incremental", source_id_key="source",
      key_encoder="sha256")
"""


def test_a_job_killed_inside_its_write_leaves_the_old_version_on_both_sides_and_its_rerun_the_new(
        postgres: Any, embedder: Any, tmp_path: Path, shared_cache_dir: Path) -> None:
    import subprocess
    import sys

    from langchain_classic.indexes import SQLRecordManager

    url, records_url = str(postgres.new_database()), f"sqlite:///{tmp_path / 'records.sqlite'}"
    job = subprocess.Popen([sys.executable, "-c", _KILLED_JOB, url, str(shared_cache_dir / "embeddings.sqlite"),
                            records_url], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout is not None and job.stdout.readline().strip() == "mid-write"
        service = ContextualPostgres(MiniLMEmbeddings(embedder), url=url)  # its own connection

        def foundry() -> list[tuple[str, str]]:
            return [(mode, h.item.chunk.text) for mode in ("bm25", "vector")
                    for h in service.store.search_stored("foundry Tucson Zanzibar", k=10, mode=mode)
                    if "foundry" in h.item.chunk.text]

        assert sorted(t for _, t in foundry()) == 2 * [next(t for _, t in foundry())]  # the old version, both sides
        assert "Tucson" in foundry()[0][1]
        job.kill()
    finally:
        job.kill()
        job.wait(timeout=60)
    stored = len(service.store)
    assert all("Tucson" in t for _, t in foundry()) and len(foundry()) == 2  # the kill rolled the edit back
    # the rerun (the same record manager) writes the edit and cleans the old chunk up: the new version only
    records = SQLRecordManager("engine", db_url=records_url)
    index(lc_chunks((EDITED, "acme")), records, service, cleanup="incremental", source_id_key="source",
          key_encoder="sha256")
    assert all("Zanzibar" in t for _, t in foundry()) and len(foundry()) == 2 and len(service.store) == stored
