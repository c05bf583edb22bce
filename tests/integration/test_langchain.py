"""The LangChain adapter with real LangChain splitters, real Chroma and real BM25."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_chroma")

import chromadb
from langchain_chroma import Chroma
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests
from langchain_text_splitters import RecursiveCharacterTextSplitter

from ctx_retrieval import AnthropicProvider, ContextGenerator, HeuristicContextualizer, MiniLMEmbedder
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.retrieval import pairing as pairing_module
from ctx_retrieval.testing import FakeAnthropicServer
from langchain_ctx import (
    ClaudeRerankCompressor,
    ContextualBM25Retriever,
    ContextualDocumentTransformer,
    ContextualHybridRetriever,
    ContextualVectorStore,
    MiniLMEmbeddings,
    split_and_contextualize,
)
from langchain_ctx import store as store_module
from langchain_ctx.transformer import UnplaceableChunkError, original_text
from tests.helpers import ACME, GLOBEX, QUERY, TEST_KEY, filing_responder, peak_concurrency, reverse_ranking


@pytest.fixture(scope="module")
def embeddings(embedder: MiniLMEmbedder) -> MiniLMEmbeddings:
    return MiniLMEmbeddings(embedder)


def split(*texts_and_sources: tuple[str, str]) -> list[Document]:
    splitter = RecursiveCharacterTextSplitter(chunk_size=120, chunk_overlap=20, add_start_index=True)
    return splitter.split_documents([Document(page_content=t, metadata={"source": s}) for t, s in texts_and_sources])


def fake_transformer(server: FakeAnthropicServer, tmp_path: Path, **kwargs: Any) -> ContextualDocumentTransformer:
    provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
    return ContextualDocumentTransformer(ContextGenerator(provider, cache=tmp_path / "c.sqlite", **kwargs))


def test_transformer_adds_contexts_without_mutating_inputs(tmp_path: Path) -> None:
    chunks = split((ACME, "acme.txt"), (GLOBEX, "globex.txt"))
    before = [(d.page_content, dict(d.metadata)) for d in chunks]
    with FakeAnthropicServer(responder=filing_responder) as server:
        out = fake_transformer(server, tmp_path).transform_documents(chunks)
    assert [(d.page_content, d.metadata) for d in chunks] == before
    assert len(out) == len(chunks)
    revenue = next(d for d in out if "grew by 3%" in original_text(d))
    chunk = next(d for d in chunks if "grew by 3%" in d.page_content)
    assert revenue.page_content == revenue.metadata["context"] + "\n\n" + chunk.page_content.rstrip()
    assert original_text(revenue) == chunk.page_content.rstrip()
    assert "original_text" not in revenue.metadata  # the chunk text is not stored twice unless asked
    assert revenue.metadata["context"] == "From ACME Corp's 10-Q filing for Q2 2023, on revenue growth."
    assert revenue.metadata["source"] == "acme.txt" and revenue.metadata["start_index"] > 0
    assert revenue.metadata["context_model"] == "claude-haiku-5-5"
    assert revenue.id == revenue.metadata["chunk_id"]
    again = ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(chunks)
    assert [d.metadata["chunk_id"] for d in again] == [d.metadata["chunk_id"] for d in out]  # stable ids


def test_rebuilt_document_is_the_source_text(tmp_path: Path) -> None:
    chunks = split((ACME, "acme.txt"))
    with FakeAnthropicServer() as server:
        fake_transformer(server, tmp_path).transform_documents(chunks)
        documents = {r.body["messages"][0]["content"][0]["text"] for r in server.successful()}
    # The splitter dropped the blank lines between chunks; the rebuilt document has them back as newlines.
    assert documents == {f"Here is the original source document:\n<document>\n{ACME.rstrip()}\n</document>"}


def test_async_is_concurrent_and_matches_sync(tmp_path: Path) -> None:
    chunks = split((ACME, "acme.txt"), (GLOBEX, "globex.txt"))
    with FakeAnthropicServer(responder=filing_responder, latency_s=0.05) as server:
        sync = fake_transformer(server, tmp_path / "a").transform_documents(chunks)
        transformer = fake_transformer(server, tmp_path / "b")
        asynchronous = asyncio.run(transformer.atransform_documents(chunks))
        peak = peak_concurrency(server.successful()[len(sync):])
    assert [(d.id, d.page_content) for d in sync] == [(d.id, d.page_content) for d in asynchronous]
    assert peak >= 2
    assert transformer.last_report is not None and transformer.last_report.generated == len(chunks)


def test_unplaceable_chunks_raise_or_pass_through() -> None:
    chunks = [Document(page_content="orphan chunk"), *split((ACME, "acme.txt"))]
    with pytest.raises(UnplaceableChunkError, match="source"):
        ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(chunks)
    out = ContextualDocumentTransformer(HeuristicContextualizer(), on_unplaceable="skip").transform_documents(chunks)
    assert out[0].page_content == "orphan chunk" and "context" not in out[0].metadata
    assert all(d.metadata["context"] for d in out[1:])


def test_split_and_contextualize_uses_the_whole_documents(tmp_path: Path) -> None:
    splitter = RecursiveCharacterTextSplitter(chunk_size=120, chunk_overlap=0)  # no start_index
    docs = [Document(page_content=ACME, id="acme"), Document(page_content=GLOBEX, id="globex")]
    with FakeAnthropicServer() as server:
        out = split_and_contextualize(docs, splitter, fake_transformer(server, tmp_path))
        sent = {r.body["messages"][0]["content"][0]["text"] for r in server.successful()}
    assert {d.metadata["source"] for d in out} == {"acme", "globex"}
    assert sent == {f"Here is the original source document:\n<document>\n{text}\n</document>"
                    for text in (ACME, GLOBEX)}
    assert all(d.metadata["context"] for d in out)


def test_the_revenue_chunk_is_found_only_through_its_context(tmp_path: Path, embeddings: MiniLMEmbeddings) -> None:
    chunks = split((ACME, "acme.txt"), (GLOBEX, "globex.txt"))
    with FakeAnthropicServer(responder=filing_responder) as server:
        contextual = fake_transformer(server, tmp_path).transform_documents(chunks)
    plain = [Document(page_content=original_text(d), metadata={"chunk_id": d.metadata["chunk_id"]},
                      id=d.id) for d in contextual]
    results = {}
    for name, docs in (("contextual", contextual), ("plain", plain)):
        retriever = ContextualHybridRetriever.from_documents(
            docs, embeddings, client=chromadb.EphemeralClient(), collection_name=f"t-{name}", k=3)
        results[name] = retriever.invoke(QUERY)
    gold = next(d.metadata["chunk_id"] for d in contextual if "grew by 3%" in original_text(d))
    assert results["contextual"][0].metadata["chunk_id"] == gold
    assert results["plain"][0].metadata["chunk_id"] != gold


def test_chroma_is_queried_for_ids_alone_and_ranks_as_its_own_retriever_does(
        tmp_path: Path, embeddings: MiniLMEmbeddings, monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_core.callbacks import BaseCallbackHandler

    from langchain_ctx import sides

    docs = ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(
        split((ACME, "acme.txt"), (GLOBEX, "globex.txt")))
    retriever = ContextualHybridRetriever.from_documents(docs, embeddings, client=chromadb.EphemeralClient(),
                                                         collection_name="fast", k=6)
    own = sides.VectorSide.search
    used: list[str] = []

    def tracked(self: Any, query: str, k: int, where: Any = None) -> Any:
        used.append(query)
        return own(self, query, k, where)

    monkeypatch.setattr(sides.VectorSide, "search", tracked)
    for query, where in ((QUERY, None), ("Tucson foundry", {"source": "acme.txt"})):
        fast = retriever.invoke(query, filter=where)
        assert used == []  # the collection itself, not the store's retriever
        traced = retriever.invoke(query, filter=where, config={"callbacks": [BaseCallbackHandler()]})
        assert used == [query]  # someone traces the query: the store's own retriever, as a child run
        used.clear()
        assert [(d.id, d.page_content, d.metadata) for d in fast] == [(d.id, d.page_content, d.metadata)
                                                                       for d in traced]
        assert fast and all(d.metadata["source"] == "acme.txt" for d in fast if where)


def test_bm25_survives_a_restart_and_follows_adds_and_deletes(tmp_path: Path, embeddings: MiniLMEmbeddings) -> None:
    docs = ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(
        split((ACME, "acme.txt")))
    ContextualHybridRetriever.from_documents(docs, embeddings, persist_directory=tmp_path / "chroma")
    assert (tmp_path / "chroma" / "ctx_bm25" / "ctx_retrieval" / "ctx_bm25.json").exists()  # BM25 beside Chroma
    # A new process: a new client on the same folder; the BM25 index beside it is opened, not rebuilt.
    store = Chroma(collection_name="ctx_retrieval", embedding_function=embeddings,
                   persist_directory=str(tmp_path / "chroma"))
    retriever = ContextualHybridRetriever.from_vectorstore(store, k=2)
    assert isinstance(retriever.bm25, ContextualBM25Retriever) and len(retriever.bm25.store) == len(docs)
    assert retriever.bm25.invoke("Tucson foundry")[0].metadata["chunk_id"] in {d.metadata["chunk_id"] for d in docs}
    extra = Document(page_content="Zanzibar spice import ledger.", metadata={"chunk_id": "extra-1"}, id="extra-1")
    retriever.add_documents([extra])
    assert retriever.bm25.invoke("zanzibar")[0].id == "extra-1"
    assert retriever.invoke("Zanzibar spice ledger")[0].id == "extra-1"
    retriever.delete(["extra-1"])
    assert retriever.bm25.invoke("zanzibar") == []
    assert all(d.id != "extra-1" for d in retriever.invoke("Zanzibar spice ledger"))


def test_a_chroma_indexed_before_bm25_lived_beside_it_is_filled_once(
        tmp_path: Path, embeddings: MiniLMEmbeddings, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    docs = ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(split((ACME, "acme.txt")))
    store = Chroma(collection_name="old", embedding_function=embeddings, persist_directory=str(tmp_path / "db"))
    store.add_documents(docs, ids=[d.metadata["chunk_id"] for d in docs])  # no BM25 anywhere yet
    monkeypatch.setattr(pairing_module, "_FILL_BATCH", 2)  # a commit and a progress line every 2 rows
    with caplog.at_level("WARNING"):
        retriever = ContextualHybridRetriever.from_vectorstore(store, k=3)
    assert len(retriever.bm25.store) == len(docs)  # type: ignore[union-attr]
    assert f"empty beside {len(docs)} rows" in caplog.text and f"filled with {len(docs)} chunks" in caplog.text
    assert f"2 of {len(docs)} rows read and indexed" in caplog.text
    assert any(d.metadata["bm25_rank"] for d in retriever.invoke("Tucson foundry"))


def test_a_service_fills_bm25_in_the_background_answering_from_the_vectors_meanwhile(
        tmp_path: Path, embeddings: MiniLMEmbeddings, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    docs = ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(split((ACME, "acme.txt")))
    chroma = Chroma(collection_name="served", embedding_function=embeddings, persist_directory=str(tmp_path / "db"))
    chroma.add_documents(docs, ids=[d.metadata["chunk_id"] for d in docs])  # written on the ingestion machine
    gate = threading.Event()
    reading = store_module._ListedRows.iter_records

    def held_back(self: Any) -> Any:  # the fill reads the rows only once the test lets it
        gate.wait()
        yield from reading(self)

    monkeypatch.setattr(store_module._ListedRows, "iter_records", held_back)
    with caplog.at_level("WARNING"):
        store = ContextualVectorStore(chroma, bm25=tmp_path / "this-machine-bm25", bm25_fill="background")
        retriever = ContextualHybridRetriever(vectorstore=store, k=3)
        meanwhile = retriever.invoke("Tucson foundry")
    assert store.pairing.filling and len(store.bm25) == 0
    assert meanwhile and all(d.metadata["bm25_rank"] is None and d.metadata["vector_rank"] for d in meanwhile)
    assert "answered by the vectors alone" in caplog.text
    extra = Document(page_content="Zanzibar spice import ledger.", metadata={"chunk_id": "extra-1"}, id="extra-1")
    writer = threading.Thread(target=store.add_documents, args=([extra],), kwargs={"ids": ["extra-1"]})
    writer.start()
    writer.join(0.2)
    assert writer.is_alive() and not chroma.get_by_ids(["extra-1"])  # a write waits for the fill
    gate.set()
    assert store.pairing.wait_filled(60)
    writer.join(60)
    assert not store.pairing.filling and len(store.bm25) == len(docs) + 1
    assert retriever.invoke("Zanzibar spice ledger")[0].id == "extra-1"
    assert any(d.metadata["bm25_rank"] for d in retriever.invoke("Tucson foundry"))
    with pytest.raises(ConfigurationError, match="bm25_fill must be 'wait' or 'background'"):
        ContextualVectorStore(chroma, bm25=tmp_path / "other", bm25_fill="later")  # type: ignore[arg-type]


def test_duplicate_texts_are_merged_by_chunk_id_not_by_text(embeddings: MiniLMEmbeddings) -> None:
    docs = [Document(page_content="Identical boilerplate paragraph.", metadata={"chunk_id": f"dup-{i}"}, id=f"dup-{i}")
            for i in range(2)]
    retriever = ContextualHybridRetriever.from_documents(docs, embeddings, client=chromadb.EphemeralClient(),
                                                         collection_name="dups", k=5)
    assert sorted(d.id for d in retriever.invoke("boilerplate paragraph")) == ["dup-0", "dup-1"]


def test_claude_rerank_compressor_reorders(embeddings: MiniLMEmbeddings) -> None:
    docs = [Document(page_content=f"Revenue note number {i}.", metadata={"chunk_id": f"r{i}"}, id=f"r{i}")
            for i in range(4)]
    with FakeAnthropicServer(responder=reverse_ranking) as server:
        compressor = ClaudeRerankCompressor.from_provider(
            AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url))
        plain = ContextualHybridRetriever.from_documents(docs, embeddings, client=chromadb.EphemeralClient(),
                                                         collection_name="rerank", k=4)
        reranked = ContextualHybridRetriever(vectorstore=plain.vectorstore, compressor=compressor, k=4)
        before = [d.id for d in plain.invoke("revenue note")]
        after = [d.id for d in reranked.invoke("revenue note")]
        after_async = [d.id for d in asyncio.run(reranked.ainvoke("revenue note"))]
        assert "cache_control" not in server.successful()[0].body["messages"][0]["content"][0]
    assert after == list(reversed(before)) == after_async


def test_a_rerank_compressor_built_directly_is_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    documents = [Document(page_content=f"Revenue note number {i}.", id=f"r{i}") for i in range(4)]
    with FakeAnthropicServer(responder=reverse_ranking) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        compressor = ClaudeRerankCompressor(candidates=10)  # Claude from the environment; no from_provider
        order = [d.id for d in compressor.compress_documents(documents, "revenue note")]
        assert len(server.successful()) == 1
    assert order == ["r3", "r2", "r1", "r0"] and compressor.candidates == 10


def test_langchain_community_bm25_can_be_the_keyword_side(embeddings: MiniLMEmbeddings) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-community is being sunset
        community = pytest.importorskip("langchain_community.retrievers")
    from ctx_retrieval import tokenize

    docs = ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(
        split((ACME, "acme.txt"), (GLOBEX, "globex.txt")))
    bm25 = community.BM25Retriever.from_documents(docs, preprocess_func=tokenize, k=150)
    retriever = ContextualHybridRetriever.from_documents(docs, embeddings, client=chromadb.EphemeralClient(),
                                                         collection_name="community", bm25=bm25, k=3)
    assert len(retriever.invoke(QUERY)) == 3


def test_long_contextual_texts_warn_about_truncation(embeddings: MiniLMEmbeddings,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    embeddings.embedder._warned_long = 0
    embeddings.embed_documents(["word " * 400])
    assert "256-token input" in caplog.text


class TestContextualHybridRetrieverConformance(RetrieversIntegrationTests):
    """LangChain's standard retriever tests."""

    @property
    def retriever_constructor(self) -> type[ContextualHybridRetriever]:
        return ContextualHybridRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        docs = [Document(page_content=f"Paragraph {i} about revenue, margins and the quarter.",
                         metadata={"chunk_id": f"c{i}"}, id=f"c{i}") for i in range(6)]
        store = Chroma(collection_name="conformance", embedding_function=MiniLMEmbeddings(),
                       client=chromadb.EphemeralClient())
        store.add_documents(docs, ids=[d.id for d in docs])
        return {"vectorstore": store, "k": 4}

    @property
    def retriever_query_example(self) -> str:
        return "revenue in the quarter"


def test_progress_bar_and_async_retrieval_agree(tmp_path: Path, embeddings: MiniLMEmbeddings,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    chunks = split((ACME, "acme.txt"), (GLOBEX, "globex.txt"))
    with FakeAnthropicServer(responder=filing_responder) as server:
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        transformer = ContextualDocumentTransformer(ContextGenerator(provider, cache=False), progress=True)
        contextual = transformer.transform_documents(chunks)
    assert f"{len(chunks)}/{len(chunks)}" in capsys.readouterr().err
    retriever = ContextualHybridRetriever.from_documents(contextual, embeddings, client=chromadb.EphemeralClient(),
                                                         collection_name="sync-async", k=4)
    assert [d.id for d in retriever.invoke(QUERY)] == [d.id for d in asyncio.run(retriever.ainvoke(QUERY))]


def test_the_transformer_on_its_own_output_adds_no_second_context() -> None:
    transformer = ContextualDocumentTransformer(HeuristicContextualizer())
    chunks = [Document(page_content=part, metadata={"source": "acme"}) for part in ACME.split("\n\n") if part]
    once = transformer.transform_documents(chunks, source_documents=[Document(ACME, metadata={"source": "acme"})])
    twice = transformer.transform_documents(once)
    assert [d.page_content for d in twice] == [d.page_content for d in once]
    assert [d.metadata for d in twice] == [d.metadata for d in once]


def test_sources_1_and_quoted_1_stay_two_documents() -> None:
    transformer = ContextualDocumentTransformer(HeuristicContextualizer())
    chunks = [Document(page_content="# Alpha\n\nalpha text", metadata={"source": 1}),
              Document(page_content="# Beta\n\nbeta text", metadata={"source": "1"})]
    out = transformer.transform_documents(chunks)
    report = transformer.last_report
    assert report is not None and report.documents == 2
    assert "Alpha" in out[0].page_content.split("\n\n")[0] and "Beta" in out[1].page_content.split("\n\n")[0]


def test_langchain_retriever_keeps_no_hidden_state_and_reindexing_never_duplicates(tmp_path: Path) -> None:
    import os

    transformer = ContextualDocumentTransformer(HeuristicContextualizer())
    splitter = RecursiveCharacterTextSplitter(chunk_size=120, chunk_overlap=0, add_start_index=True)
    chunks = transformer.transform_documents(splitter.split_documents(
        [Document(ACME, metadata={"source": "acme"}), Document(GLOBEX, metadata={"source": "globex"})]))
    embeddings = MiniLMEmbeddings()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        one = ContextualHybridRetriever.from_documents(chunks, embeddings, k=4)
        two = ContextualHybridRetriever.from_documents(chunks, embeddings, k=4)
        assert not (tmp_path / ".ctx_retrieval").exists()
    finally:
        os.chdir(cwd)
    assert [d.page_content for d in one.invoke(QUERY)] == [d.page_content for d in two.invoke(QUERY)]
    for _ in range(2):
        kept = ContextualHybridRetriever.from_documents(chunks, embeddings, k=4, persist_directory=tmp_path / "db")
    assert len(kept.vectorstore.inner.get()["ids"]) == len(chunks) == len(kept.vectorstore.bm25)


def test_a_missing_key_fails_at_construction_as_in_llama_index(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctx_retrieval import ProviderAuthenticationError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(ProviderAuthenticationError, match="ANTHROPIC_API_KEY"):
        ContextualDocumentTransformer()  # Claude by default: no key fails here, not at the first chunk
    with pytest.raises(ProviderAuthenticationError, match="ANTHROPIC_API_KEY"):
        ContextualDocumentTransformer(AnthropicProvider())


def test_the_estimate_of_a_pipelines_own_chunks_is_the_bill(tmp_path: Path) -> None:
    from tests.helpers import make_document

    def chunks_of(*names: str) -> list[Document]:
        texts = [(make_document(n, paragraphs=30)[0].text, f"{n}.md") for n in names]
        return RecursiveCharacterTextSplitter(chunk_size=400, chunk_overlap=0, add_start_index=True).split_documents(
            [Document(page_content=t, metadata={"source": s}) for t, s in texts])

    with FakeAnthropicServer() as server:
        transformer = fake_transformer(server, tmp_path)
        transformer.transform_documents(chunks_of("earlier-1", "earlier-2"))  # the cache learns the output lengths
        chunks = chunks_of("guide-1", "guide-2", "guide-3")
        estimate = transformer.estimate(chunks)
        counted = len(server.requests)
        transformer.transform_documents(chunks)
        bill = transformer.last_report
        assert bill.cost_usd is not None and estimate.cost_usd is not None and estimate.requests == bill.requests
        assert abs(estimate.cost_usd - bill.cost_usd) <= 0.02 * bill.cost_usd
        assert all(not r.path.endswith("count_tokens") for r in server.requests[counted:])  # counted once
        again = transformer.estimate(chunks)
        assert again.cost_usd == 0.0 and again.requests == 0 and again.cached_chunks == len(chunks)
