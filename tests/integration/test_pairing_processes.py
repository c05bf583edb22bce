"""Issue 33: an ingestion job and a query service in two processes, in both frameworks, over a Chroma server and
over a local Chroma folder; the usual flow (the frameworks' own incremental ingestion into a plain store) and the
wrapped one. A chunk the job writes is found by both sides of the service's next query; a deleted one by neither; a
local Chroma folder, which a second process cannot follow, is refused with the fix."""

from __future__ import annotations

import textwrap
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
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.vector_stores.chroma import ChromaVectorStore

from ctx_retrieval import HeuristicContextualizer, MiniLMEmbedder
from langchain_ctx import ContextualDocumentTransformer, MiniLMEmbeddings
from langchain_ctx import ContextualVectorStore as LCStore
from llama_index_ctx import ContextualNodeTransform, MiniLMEmbedding
from llama_index_ctx import ContextualVectorStore as LIStore
from tests.helpers import ACME, GLOBEX, ChromaServer, LineService

ROOT = Path(__file__).resolve().parents[2]
EDITED = ACME.replace("Tucson", "Zanzibar")
QUERY = "Zanzibar foundry move"
COLLECTION = "filings"

SERVICE = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {root!r})
    if {machine!r}:  # another machine: its own cache folder, so its own BM25 copy of the server's collection
        os.environ["CTX_RETRIEVAL_CACHE_DIR"] = {machine!r}
    import chromadb
    from ctx_retrieval import MiniLMEmbedder
    framework, where, flow = {framework!r}, {where!r}, {flow!r}
    client = (chromadb.HttpClient(host="127.0.0.1", port=int(where)) if where.isdigit()
              else chromadb.PersistentClient(path=where))
    try:
        if framework == "langchain":
            from langchain_chroma import Chroma
            from langchain_ctx import ContextualHybridRetriever, ContextualVectorStore, MiniLMEmbeddings
            store = Chroma(collection_name="filings", client=client,
                           embedding_function=MiniLMEmbeddings(MiniLMEmbedder(cache={cache!r})),
                           collection_metadata={{"hnsw:space": "cosine"}})
            store = ContextualVectorStore(store) if flow == "wrapped" else store
            retriever = ContextualHybridRetriever.from_vectorstore(store, k=5)
            def ask(q):
                return [[d.page_content, d.metadata["vector_rank"], d.metadata["bm25_rank"]]
                        for d in retriever.invoke(q)]
        else:
            from llama_index.vector_stores.chroma import ChromaVectorStore
            from llama_index_ctx import ContextualHybridRetriever, ContextualVectorStore, MiniLMEmbedding
            collection = client.get_or_create_collection("filings", metadata={{"hnsw:space": "cosine"}})
            store = ChromaVectorStore(chroma_collection=collection)
            store = ContextualVectorStore(store) if flow == "wrapped" else store
            retriever = ContextualHybridRetriever.from_vector_store(
                store, embed_model=MiniLMEmbedding(MiniLMEmbedder(cache={cache!r})), similarity_top_k=5)
            def ask(q):
                return [[r.node.get_content(), r.node.metadata["vector_rank"], r.node.metadata["bm25_rank"]]
                        for r in retriever.retrieve(q)]
    except Exception as exc:
        print(json.dumps({{"error": type(exc).__name__, "message": str(exc)}}), flush=True)
        sys.exit(3)
    print(json.dumps({{"ready": True}}), flush=True)
    for line in sys.stdin:
        try:
            print(json.dumps(ask(line.strip())), flush=True)
        except Exception as exc:
            print(json.dumps({{"error": type(exc).__name__, "message": str(exc)}}), flush=True)
""")


class Service(LineService):
    """A query service in its own process, over the store ``flow`` makes of the collection at ``where``."""

    def __init__(self, framework: str, where: str, flow: str, cache: Path, machine: Path | None = None) -> None:
        super().__init__(SERVICE.format(root=str(ROOT), framework=framework, where=where, flow=flow,
                                        cache=str(cache / "embeddings.sqlite"), machine=str(machine or "")))


def lc_chunks(*texts_and_sources: tuple[str, str]) -> list[LCDocument]:
    splitter = RecursiveCharacterTextSplitter(chunk_size=160, chunk_overlap=0, add_start_index=True)
    sources = [LCDocument(page_content=t, metadata={"source": s}) for t, s in texts_and_sources]
    return ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(
        splitter.split_documents(sources), source_documents=sources)


class LangChainJob:
    """The ingestion job: LangChain's ``index()`` with a record manager, into the plain store (the usual flow) or
    through ``ContextualVectorStore`` (wrapped)."""

    def __init__(self, client: Any, flow: str, embedder: MiniLMEmbedder) -> None:
        store: Any = Chroma(collection_name=COLLECTION, client=client, embedding_function=MiniLMEmbeddings(embedder),
                            collection_metadata={"hnsw:space": "cosine"})
        self.store = LCStore(store) if flow == "wrapped" else store
        self.records = InMemoryRecordManager(COLLECTION)
        self.records.create_schema()

    def write(self, *documents: tuple[str, str]) -> None:
        index(lc_chunks(*documents), self.records, self.store, cleanup="full", source_id_key="source",
              key_encoder="sha256")


class LlamaIndexJob:
    """The ingestion job: LlamaIndex's ``IngestionPipeline`` with a docstore (``UPSERTS_AND_DELETE``), into the
    plain store or through ``ContextualVectorStore``."""

    def __init__(self, client: Any, flow: str, embedder: MiniLMEmbedder) -> None:
        collection = client.get_or_create_collection(COLLECTION, metadata={"hnsw:space": "cosine"})
        store: Any = ChromaVectorStore(chroma_collection=collection)
        self.store = LIStore(store) if flow == "wrapped" else store
        self.docstore = SimpleDocumentStore()
        self.embed_model = MiniLMEmbedding(embedder)

    def write(self, *documents: tuple[str, str]) -> None:
        pipeline = IngestionPipeline(
            transformations=[SentenceSplitter(chunk_size=48, chunk_overlap=0),
                             ContextualNodeTransform.from_generator(HeuristicContextualizer()), self.embed_model],
            vector_store=self.store, docstore=self.docstore,
            docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
        pipeline.run(documents=[LIDocument(text=text, id_=source) for text, source in documents])


JOBS = {"langchain": LangChainJob, "llama_index": LlamaIndexJob}


@pytest.mark.parametrize("flow", ["usual", "wrapped"])
@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_query_service_sees_every_write_of_an_ingestion_job_on_both_sides(
        framework: str, flow: str, chroma_server: ChromaServer, embedder: MiniLMEmbedder,
        shared_cache_dir: Path) -> None:
    job = JOBS[framework](chroma_server.client(), flow, embedder)
    job.write((GLOBEX, "globex"))
    service = Service(framework, str(chroma_server.port), flow, shared_cache_dir)
    try:
        assert service.first == {"ready": True}, service.first
        assert all("Zanzibar" not in text for text, _, _ in service.ask(QUERY))
        job.write((GLOBEX, "globex"), (EDITED, "acme"))  # the job adds a document while the service runs
        found = [(vector, bm25) for text, vector, bm25 in service.ask(QUERY) if "Zanzibar" in text]
        assert found and found[0][0] is not None and found[0][1] == 1, found  # both sides, at the first query
        job.write((GLOBEX, "globex"))  # ... and deletes it (full cleanup: the document is gone)
        assert all("Zanzibar" not in text for text, _, _ in service.ask(QUERY))
        assert all("Tucson" not in text and "Zanzibar" not in text for text, _, _ in service.ask("foundry Tucson"))
    finally:
        assert service.close() == 0


@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_service_on_a_second_machine_never_returns_what_the_job_deleted_or_replaced(
        framework: str, chroma_server: ChromaServer, embedder: MiniLMEmbedder, shared_cache_dir: Path,
        tmp_path: Path) -> None:
    job = JOBS[framework](chroma_server.client(), "wrapped", embedder)
    job.write((GLOBEX, "globex"), (ACME, "acme"))
    service = Service(framework, str(chroma_server.port), "wrapped", shared_cache_dir, machine=tmp_path / "machine-b")
    try:
        assert service.first == {"ready": True}, service.first  # its BM25 filled from the server
        assert any("Tucson" in text and bm25 for text, _, bm25 in service.ask("foundry Tucson"))
        job.write((GLOBEX, "globex"), (EDITED, "acme"))  # Acme's page edited: its chunks replaced
        for _ in range(2):  # the first query repairs the service's BM25, the second finds it repaired
            answer = service.ask("foundry Tucson")
            assert all("Tucson" not in text for text, _, _ in answer), answer
        assert any("Zanzibar" in text for text, _, _ in service.ask(QUERY))
        job.write((GLOBEX, "globex"))  # ... and the page deleted
        assert all("Zanzibar" not in text and "Tucson" not in text for text, _, _ in service.ask(QUERY))
    finally:
        assert service.close() == 0
    again = Service(framework, str(chroma_server.port), "wrapped", shared_cache_dir, machine=tmp_path / "machine-b")
    try:  # restarted on the same machine: its BM25 copy kept nothing stale
        assert all("Zanzibar" not in text and "Tucson" not in text for text, _, _ in again.ask("foundry Tucson"))
    finally:
        assert again.close() == 0


@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_local_chroma_folder_open_in_a_job_is_refused_to_a_second_process_with_the_fix(
        framework: str, tmp_path: Path, embedder: MiniLMEmbedder, shared_cache_dir: Path) -> None:
    import chromadb

    client = chromadb.PersistentClient(path=str(tmp_path / "db"))
    job = JOBS[framework](client, "wrapped", embedder)
    job.write((GLOBEX, "globex"))
    service = Service(framework, str(tmp_path / "db"), "wrapped", shared_cache_dir)
    assert service.close() == 3
    assert service.first["error"] == "SharedStoreError"
    assert "chroma run --path" in service.first["message"] and "HttpClient" in service.first["message"]


@pytest.mark.parametrize("served", ["usual", "wrapped"])
@pytest.mark.parametrize("framework", ["langchain", "llama_index"])
def test_a_local_chroma_folder_written_by_a_plain_job_is_refused_at_the_services_next_query(
        framework: str, served: str, tmp_path: Path, embedder: MiniLMEmbedder, shared_cache_dir: Path) -> None:
    """A job that never imports ctx-retrieval cannot say it has the folder open: the service finds out when the
    folder holds rows its own Chroma client cannot search, and says so instead of answering from one side."""
    import chromadb

    job = JOBS[framework](chromadb.PersistentClient(path=str(tmp_path / "db")), "usual", embedder)
    job.write((GLOBEX, "globex"))
    service = Service(framework, str(tmp_path / "db"), served, shared_cache_dir)  # the plain store, or wrapped
    try:
        assert service.first == {"ready": True}, service.first
        job.write((GLOBEX, "globex"), (EDITED, "acme"))
        answer = service.ask(QUERY)
        assert answer["error"] == "SharedStoreError" and "chroma run --path" in answer["message"], answer
    finally:
        service.close()
