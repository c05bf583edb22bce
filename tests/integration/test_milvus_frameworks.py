"""Issue 37: contextual hybrid inside Milvus through the frameworks. Each chunk is one row both engine sides read, so
the frameworks' own incremental ingestion (LangChain ``index()``, LlamaIndex ``IngestionPipeline`` with a docstore)
keeps both true at once; an ingestion job and a query service in two processes share a Milvus server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")
pytest.importorskip("langchain_core")

from langchain_core.documents import Document as LCDocument
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_text_splitters import RecursiveCharacterTextSplitter

from ctx_retrieval import HeuristicContextualizer, InvalidInputError
from ctx_retrieval.errors import ConfigurationError
from langchain_ctx import ContextualDocumentTransformer, ContextualHybridRetriever, MiniLMEmbeddings
from langchain_ctx.milvus import ContextualMilvus
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


def test_langchain_hybrid_on_milvus_finds_a_chunk_by_its_context_on_both_sides(tmp_path: Path, embedder: Any) -> None:
    store = ContextualMilvus(MiniLMEmbeddings(embedder), uri=str(tmp_path / "lc.db"))
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
    # the engine's own fusion agrees on the first hit, and says it cannot weigh the sides
    fused = ContextualMilvus(MiniLMEmbeddings(embedder), uri=str(tmp_path / "lc.db"), engine_fusion=True)
    assert "Tucson" in ContextualHybridRetriever(vectorstore=fused, k=1).invoke("acme Tucson")[0].page_content
    with pytest.raises(ConfigurationError, match="weights"):
        ContextualHybridRetriever(vectorstore=fused, weights=(0.3, 0.7)).invoke("acme Tucson")


def test_langchain_index_edits_and_deletes_land_on_both_engine_sides(tmp_path: Path, embedder: Any) -> None:
    store = ContextualMilvus(MiniLMEmbeddings(embedder), uri=str(tmp_path / "lc.db"))
    records = InMemoryRecordManager("milvus")
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
from langchain_ctx import ContextualHybridRetriever, MiniLMEmbeddings
from langchain_ctx.milvus import ContextualMilvus
store = ContextualMilvus(MiniLMEmbeddings(MiniLMEmbedder(cache=sys.argv[2])), uri=sys.argv[1])
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


def test_llama_index_pipeline_and_hybrid_query_on_milvus(tmp_path: Path, embedder: Any) -> None:
    pytest.importorskip("llama_index.core")
    from llama_index.core import VectorStoreIndex
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.core.vector_stores.types import MetadataFilters

    from llama_index_ctx import ContextualHybridRetriever, MiniLMEmbedding
    from llama_index_ctx.milvus import ContextualMilvusVectorStore

    store = ContextualMilvusVectorStore(str(tmp_path / "li.db"), embed_model=MiniLMEmbedding(embedder))
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
from llama_index_ctx import ContextualHybridRetriever, MiniLMEmbedding
from llama_index_ctx.milvus import ContextualMilvusVectorStore
embed = MiniLMEmbedding(MiniLMEmbedder(cache=sys.argv[2]))
store = ContextualMilvusVectorStore(sys.argv[1], embed_model=embed)
retriever = ContextualHybridRetriever(VectorStoreIndex.from_vector_store(store, embed_model=embed), similarity_top_k=3)
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    found = retriever.retrieve(line.strip())
    print(json.dumps([[n.node.get_content(), n.node.metadata["vector_rank"], n.node.metadata["bm25_rank"]]
                      for n in found]), flush=True)
"""


def langchain_job(uri: str, embedder: Any) -> Any:
    """The ingestion job: LangChain's ``index()`` with a record manager into the collection (its own client)."""
    job = ContextualMilvus(MiniLMEmbeddings(embedder), uri=uri)
    records = InMemoryRecordManager("milvus")
    records.create_schema()

    def write(*documents: tuple[str, str]) -> None:
        index(lc_chunks(*documents), records, job, cleanup="full", source_id_key="source", key_encoder="sha256")

    return write


def llama_index_job(uri: str, embedder: Any) -> Any:
    """The ingestion job: an ``IngestionPipeline`` with a docstore (UPSERTS_AND_DELETE) into the collection."""
    pytest.importorskip("llama_index.core")
    from llama_index.core.storage.docstore import SimpleDocumentStore

    from llama_index_ctx import MiniLMEmbedding
    from llama_index_ctx.milvus import ContextualMilvusVectorStore

    job = ContextualMilvusVectorStore(uri, embed_model=MiniLMEmbedding(embedder))
    docstore = SimpleDocumentStore()

    def write(*documents: tuple[str, str]) -> None:
        li_pipeline(job, embedder, docstore).run(documents=li_documents(*documents))

    return write


@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_job_and_a_query_service_in_two_processes_share_a_milvus_server(
        framework: str, tmp_path: Path, embedder: Any, shared_cache_dir: Path) -> None:
    job, script = {"langchain": (langchain_job, LC_SERVICE), "llama_index": (llama_index_job, LI_SERVICE)}[framework]
    with milvus_lite_server(tmp_path / "milvus") as uri:
        write = job(uri, embedder)
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
