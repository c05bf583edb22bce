"""The LlamaIndex adapter with a real IngestionPipeline, real Chroma, the core BM25 index as a LlamaIndex
retriever, and LlamaIndex's own BM25Retriever where a user passes it."""

from __future__ import annotations

import asyncio
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("llama_index.vector_stores.chroma")

import chromadb
from llama_index.core import Document
from llama_index.core.ingestion import IngestionCache, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore

from ctx_retrieval import AnthropicProvider, ConfigurationError, ContextGenerator, MiniLMEmbedder
from ctx_retrieval.testing import FakeAnthropicServer
from llama_index_ctx import (
    ClaudeRerankPostprocessor,
    ContextualBM25Retriever,
    ContextualHybridRetriever,
    ContextualNodeTransform,
    ContextualVectorStore,
    MiniLMEmbedding,
    chroma_vector_store,
)
from tests.helpers import ACME, GLOBEX, QUERY, TEST_KEY, filing_responder, reverse_ranking


@pytest.fixture(scope="module")
def embed_model(embedder: MiniLMEmbedder) -> MiniLMEmbedding:
    return MiniLMEmbedding(embedder)


def documents() -> list[Document]:
    return [Document(text=ACME, id_="acme", metadata={"company_file": "acme.txt"}),
            Document(text=GLOBEX, id_="globex", metadata={"company_file": "globex.txt"})]


def transform_for(server: FakeAnthropicServer, tmp_path: Path, **kwargs: Any) -> ContextualNodeTransform:
    provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
    return ContextualNodeTransform.from_generator(ContextGenerator(provider, cache=tmp_path / "c.sqlite"), **kwargs)


def splitter() -> SentenceSplitter:
    return SentenceSplitter(chunk_size=40, chunk_overlap=5)


def test_pipeline_step_writes_contexts_where_embedding_and_bm25_see_them(tmp_path: Path) -> None:
    with FakeAnthropicServer(responder=filing_responder) as server:
        transform = transform_for(server, tmp_path)
        nodes = IngestionPipeline(transformations=[splitter(), transform]).run(documents=documents())
        sent = {r.body["messages"][0]["content"][0]["text"] for r in server.successful()}
    revenue = next(n for n in nodes if "grew by 3%" in n.get_content(metadata_mode=MetadataMode.NONE))
    assert revenue.metadata["context"] == "From ACME Corp's 10-Q filing for Q2 2023, on revenue growth."
    assert revenue.metadata["context"] in revenue.get_content(metadata_mode=MetadataMode.EMBED)
    assert revenue.metadata["context"] not in revenue.get_content(metadata_mode=MetadataMode.LLM)
    assert "claude-haiku-5-5" not in revenue.get_content(metadata_mode=MetadataMode.EMBED)  # provenance hidden
    assert revenue.metadata["context_model"] == "claude-haiku-5-5"
    # The document was rebuilt from the nodes' offsets: the prompt carried the source text.
    assert any(ACME.split("\n\n")[2] in text for text in sent)
    assert transform.last_report is not None and transform.last_report.generated == len(nodes)


def test_context_for_llm_is_a_setting_and_docstore_is_used(tmp_path: Path) -> None:
    docstore = SimpleDocumentStore()
    docstore.add_documents(documents())
    with FakeAnthropicServer(responder=filing_responder) as server:
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        transform = ContextualNodeTransform.from_generator(ContextGenerator(provider, cache=False),
                                                           docstore=docstore, context_for_llm=True)
        nodes = transform(splitter()(documents()))
        sent = {r.body["messages"][0]["content"][0]["text"] for r in server.successful()}
    assert all(n.metadata["context"] in n.get_content(metadata_mode=MetadataMode.LLM) for n in nodes)
    assert sent == {f"Here is the original source document:\n<document>\n{t}\n</document>" for t in (ACME, GLOBEX)}


def test_whole_documents_get_no_context_unless_asked(tmp_path: Path) -> None:
    with FakeAnthropicServer() as server:
        nodes = transform_for(server, tmp_path)([TextNode(text="A whole note with no parent document.")])
        assert "context" not in nodes[0].metadata and server.requests == []
        asked = transform_for(server, tmp_path, contextualize_whole_documents=True)(
            [TextNode(text="A whole note with no parent document.")])
    assert asked[0].metadata["context"]


def test_second_pipeline_run_makes_zero_requests_and_no_key_is_stored(tmp_path: Path) -> None:
    cache = IngestionCache()
    with FakeAnthropicServer(responder=filing_responder) as server:
        transform = transform_for(server, tmp_path)
        IngestionPipeline(transformations=[splitter(), transform], cache=cache).run(documents=documents())
        first = len(server.requests)
        # A fresh transform (fresh generator, no context cache) over the same pipeline cache: the ingestion
        # cache answers, not the provider.
        fresh = ContextualNodeTransform.from_generator(ContextGenerator(
            AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), cache=False))
        again = IngestionPipeline(transformations=[splitter(), fresh], cache=cache).run(documents=documents())
        assert first > 0 and len(server.requests) == first
    assert all(n.metadata.get("context") for n in again)
    assert TEST_KEY not in json.dumps(transform.to_dict()) and TEST_KEY not in transform.to_json()
    assert TEST_KEY.encode() not in pickle.dumps(transform)
    assert TEST_KEY not in json.dumps(cache.cache.get_all(collection="llama_cache"), default=str)
    restored = pickle.loads(pickle.dumps(transform))
    assert restored.contextualizer_id == transform.contextualizer_id


def test_async_pipeline_is_concurrent_and_agrees_with_sync(tmp_path: Path) -> None:
    with FakeAnthropicServer(responder=filing_responder, latency_s=0.05) as server:
        sync_nodes = transform_for(server, tmp_path / "a")(splitter()(documents()))
        n_sync = len(server.successful())
        async_nodes = asyncio.run(transform_for(server, tmp_path / "b").acall(splitter()(documents())))
        spans = [(r.started, r.finished) for r in server.successful()[n_sync:]]
    assert [n.metadata["context"] for n in sync_nodes] == [n.metadata["context"] for n in async_nodes]
    assert max(sum(1 for s, f in spans if s <= t < f) for t, _ in spans) >= 2


def test_the_revenue_chunk_is_found_only_through_its_context(tmp_path: Path, embed_model: MiniLMEmbedding) -> None:
    with FakeAnthropicServer(responder=filing_responder) as server:
        contextual = IngestionPipeline(transformations=[splitter(), transform_for(server, tmp_path)]).run(
            documents=documents())
    plain = splitter()(documents())
    gold_text = "The company's revenue grew by 3% over the previous quarter."
    firsts = {}
    for name, nodes in (("contextual", contextual), ("plain", plain)):
        store = chroma_vector_store(client=chromadb.EphemeralClient(), collection_name=f"li-{name}")
        retriever = ContextualHybridRetriever.from_nodes(nodes, vector_store=store, embed_model=embed_model,
                                                         similarity_top_k=3)
        firsts[name] = retriever.retrieve(QUERY)[0].node.get_content(metadata_mode=MetadataMode.NONE)
    assert gold_text in firsts["contextual"]
    assert gold_text not in firsts["plain"]


def test_chroma_is_queried_for_ids_alone_and_ranks_as_the_indexs_own_retriever_does(
        embed_model: MiniLMEmbedding, monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_index.core.callbacks import CallbackManager, LlamaDebugHandler

    from llama_index_ctx import sides

    store = chroma_vector_store(client=chromadb.EphemeralClient(), collection_name="li-fast")
    retriever = ContextualHybridRetriever.from_nodes(splitter()(documents()), vector_store=store,
                                                     embed_model=embed_model, similarity_top_k=6)
    own = sides.IndexSide.search
    used: list[str] = []

    def tracked(self: Any, query: str, k: int, where: Any = None) -> Any:
        used.append(query)
        return own(self, query, k, where)

    monkeypatch.setattr(sides.IndexSide, "search", tracked)
    for query in (QUERY, "Tucson foundry move"):
        fast = retriever.retrieve(query)
        assert used == []  # the collection itself, not the index's retriever
        retriever.callback_manager = CallbackManager([LlamaDebugHandler()])
        traced = retriever.retrieve(query)
        retriever.callback_manager = CallbackManager([])
        assert used == [query]  # a handler listens: the index's own retriever, as its event
        used.clear()
        assert [(r.node.node_id, r.node.get_content(), r.score, r.node.metadata) for r in fast] == [
            (r.node.node_id, r.node.get_content(), r.score, r.node.metadata) for r in traced]


def test_bm25_survives_a_restart_and_follows_inserts_and_deletes(tmp_path: Path, embed_model: MiniLMEmbedding) -> None:
    nodes = splitter()(documents())
    ContextualHybridRetriever.from_nodes(nodes, vector_store=chroma_vector_store(persist_directory=tmp_path / "db"),
                                         embed_model=embed_model)
    assert (tmp_path / "db" / "ctx_bm25" / "ctx_retrieval" / "ctx_bm25.json").exists()  # BM25 beside Chroma
    reopened = ContextualHybridRetriever.from_vector_store(chroma_vector_store(persist_directory=tmp_path / "db"),
                                                           embed_model=embed_model, similarity_top_k=2)
    assert isinstance(reopened.bm25, ContextualBM25Retriever)  # the core index by default
    assert "Tucson" in reopened.retrieve("Tucson foundry move")[0].node.get_content()
    extra = TextNode(text="Zanzibar spice import ledger.", id_="extra")
    reopened.insert_nodes([extra])
    assert reopened.bm25.retrieve("zanzibar spice")[0].node.node_id == "extra"
    reopened.delete_ref_doc("globex")
    remaining = {n.ref_doc_id for n in reopened.stored_nodes()}
    assert "globex" not in remaining and "acme" in remaining
    assert all("Globex" not in r.node.get_content() for r in reopened.retrieve("Globex household robots"))


def test_a_second_machines_service_fills_bm25_from_the_index_in_the_background(
        tmp_path: Path, embed_model: MiniLMEmbedding) -> None:
    nodes = splitter()(documents())
    ContextualHybridRetriever.from_nodes(nodes, vector_store=chroma_vector_store(persist_directory=tmp_path / "db"),
                                         embed_model=embed_model)
    store = ContextualVectorStore(chroma_vector_store(persist_directory=tmp_path / "db"),
                                  bm25=tmp_path / "service-bm25", bm25_fill="background")  # its own BM25 folder
    retriever = ContextualHybridRetriever.from_vector_store(store, embed_model=embed_model, similarity_top_k=2)
    assert "Tucson" in retriever.retrieve("Tucson foundry move")[0].node.get_content()  # at once, or once filled
    assert store.pairing.wait_filled(60) and not store.pairing.filling
    assert len(store.bm25) == len(nodes)
    assert retriever.retrieve("Tucson foundry move")[0].node.metadata["bm25_rank"] == 1


def test_bm25_side_splits_identifiers_and_sees_the_context_metadata() -> None:
    from llama_index.retrievers.bm25 import BM25Retriever

    nodes = [TextNode(text="The executor forwards run_target calls.", id_="code"),
             TextNode(text="Quarterly revenue grew by 3%.", id_="filing",
                      metadata={"context": "From ACME Corp's Q2 2023 10-Q."}),
             TextNode(text="Nothing to see.", id_="other")]
    ours = ContextualBM25Retriever(nodes, similarity_top_k=3)
    assert [h.node.node_id for h in ours.retrieve("run target")] == ["code"]
    found = ours.retrieve("run target")[0].node  # the stored node, whole (decoded from the index's payload)
    assert found.model_dump() == nodes[0].model_dump()
    assert [h.node.node_id for h in ours.retrieve("ACME Corp")] == ["filing"]  # context via MetadataMode.EMBED
    assert ours.retrieve("absent words") == []
    # The control: LlamaIndex's bm25s retriever keeps run_target as one token, so "run target" misses it.
    theirs = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=3)
    assert "code" not in [h.node.node_id for h in theirs.retrieve("run target") if h.score > 0]
    with pytest.raises(ConfigurationError, match="similarity_top_k"):
        ContextualBM25Retriever(nodes, similarity_top_k=0)


def test_a_llama_index_bm25_retriever_can_be_passed(tmp_path: Path, embed_model: MiniLMEmbedding) -> None:
    from llama_index.retrievers.bm25 import BM25Retriever

    nodes = splitter()(documents())
    store = chroma_vector_store(client=chromadb.EphemeralClient(), collection_name="li-pass-bm25")
    bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=10)
    retriever = ContextualHybridRetriever.from_nodes(nodes, vector_store=store, embed_model=embed_model,
                                                     bm25=bm25, similarity_top_k=2)
    assert retriever.bm25 is bm25
    assert "Tucson" in retriever.retrieve("Tucson foundry move")[0].node.get_content()


def test_claude_rerank_postprocessor(tmp_path: Path, embed_model: MiniLMEmbedding) -> None:
    nodes = [TextNode(text=f"Revenue note number {i}.", id_=f"r{i}") for i in range(4)]
    store = chroma_vector_store(client=chromadb.EphemeralClient(), collection_name="li-rerank")
    plain = ContextualHybridRetriever.from_nodes(nodes, vector_store=store, embed_model=embed_model, similarity_top_k=4)
    with FakeAnthropicServer(responder=reverse_ranking) as server:
        rerank = ClaudeRerankPostprocessor.from_provider(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url))
        reranked = ContextualHybridRetriever(plain.index, similarity_top_k=4, node_postprocessors=[rerank])
        before = [r.node.node_id for r in plain.retrieve("revenue note")]
        after = [r.node.node_id for r in reranked.retrieve("revenue note")]
    assert after == list(reversed(before))


def test_a_rerank_postprocessor_built_directly_is_ready(monkeypatch: pytest.MonkeyPatch) -> None:
    from llama_index.core.schema import NodeWithScore, QueryBundle

    nodes = [NodeWithScore(node=TextNode(text=f"Revenue note number {i}.", id_=f"r{i}"), score=1.0) for i in range(4)]
    with FakeAnthropicServer(responder=reverse_ranking) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        rerank = ClaudeRerankPostprocessor(candidates=10)
        order = [n.node.node_id for n in rerank.postprocess_nodes(nodes, QueryBundle("revenue note"))]
    assert order == ["r3", "r2", "r1", "r0"]


def test_pipeline_progress_reaches_the_generator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakeAnthropicServer(responder=filing_responder) as server:
        transform = transform_for(server, tmp_path, show_progress=True)
        nodes = IngestionPipeline(transformations=[splitter(), transform]).run(documents=documents())
    assert "contextualizing" in capsys.readouterr().err and all(n.metadata["context"] for n in nodes)
    assert transform._contextualizer.settings.progress is False  # a shared generator is not changed
    assert "show_progress" not in transform.to_dict()  # not part of the ingestion-cache key


@pytest.mark.parametrize("asynchronous", [False, True])
def test_pipeline_run_show_progress_reaches_the_transform(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          asynchronous: bool) -> None:
    with FakeAnthropicServer(responder=filing_responder) as server:
        transform = transform_for(server, tmp_path / "quiet")
        IngestionPipeline(transformations=[splitter(), transform]).run(documents=documents())
        assert "contextualizing" not in capsys.readouterr().err  # quiet unless asked
        pipeline = IngestionPipeline(transformations=[splitter(), transform_for(server, tmp_path / "shown")])
        if asynchronous:
            asyncio.run(pipeline.arun(documents=documents(), show_progress=True))
        else:
            pipeline.run(documents=documents(), show_progress=True)
    assert "contextualizing" in capsys.readouterr().err


@pytest.mark.parametrize("change", ["max_context_tokens", "window", "extra_body", "endpoint", "none"])
def test_the_ingestion_cache_key_covers_every_setting_that_changes_contexts(change: str) -> None:
    from ctx_retrieval import WindowConfig

    cache = IngestionCache()
    with FakeAnthropicServer(responder=filing_responder) as server:
        def transform(**generator: Any) -> ContextualNodeTransform:
            provider_kwargs = {"endpoint_id": "twin", **generator.pop("provider", {})}
            provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, **provider_kwargs)
            return ContextualNodeTransform.from_generator(ContextGenerator(provider, cache=False, **generator))

        IngestionPipeline(transformations=[splitter(), transform()], cache=cache).run(documents=documents())
        first = len(server.messages)
        changed: dict[str, Any] = {
            "max_context_tokens": {"max_context_tokens": 60},
            "window": {"window": WindowConfig(max_document_tokens=50)},
            "extra_body": {"provider": {"extra_body": {"output_config": {"effort": "low"}}}},
            "endpoint": {"provider": {"endpoint_id": "another-endpoint"}},
            "none": {},
        }[change]
        IngestionPipeline(transformations=[splitter(), transform(**changed)], cache=cache).run(documents=documents())
        again = len(server.messages) - first
    # A changed setting writes new contexts; the same settings are served by the ingestion cache.
    assert first > 0 and (again == 0 if change == "none" else again == first)


def test_retrievers_keep_no_hidden_state_and_reindexing_never_duplicates(tmp_path: Path,
                                                                         embed_model: MiniLMEmbedding) -> None:
    import os

    nodes = splitter()(documents())
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        first = ContextualHybridRetriever.from_nodes(nodes, embed_model=embed_model, similarity_top_k=5)
        second = ContextualHybridRetriever.from_nodes(nodes, embed_model=embed_model, similarity_top_k=5)
        assert not (tmp_path / ".ctx_retrieval").exists()  # nothing written to disk by default
    finally:
        os.chdir(cwd)
    assert len(first.stored_nodes()) == len(second.stored_nodes()) == len(nodes)
    assert [r.node.get_content() for r in first.retrieve(QUERY)] == [
        r.node.get_content() for r in second.retrieve(QUERY)]
    store = tmp_path / "store"
    for _ in range(2):  # a persistent store indexed twice with fresh nodes of the same documents
        again = ContextualHybridRetriever.from_nodes(splitter()(documents()), embed_model=embed_model,
                                                     similarity_top_k=5,
                                                     vector_store=chroma_vector_store(persist_directory=store))
    assert len(again.stored_nodes()) == len(nodes)
    texts = [r.node.get_content() for r in again.retrieve(QUERY)]
    assert len(texts) == len(set(texts))  # never the same chunk twice


WORKERS_SCRIPT = """
import json, sys
from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from ctx_retrieval import AnthropicProvider, ContextGenerator
from llama_index_ctx import ContextualNodeTransform

if __name__ == "__main__":
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from ctx_retrieval.contextualize.otel import OpenTelemetryRequestTracer

    spans = TracerProvider()  # holds locks: it cannot travel, each worker re-creates the tracer on its own
    spans.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    generator = ContextGenerator(AnthropicProvider(base_url=sys.argv[1]), cache=False,  # the key: from the env
                                 tracers=[OpenTelemetryRequestTracer(spans)])
    transform = ContextualNodeTransform.from_generator(generator)
    docs = [Document(text=sys.argv[2], id_="acme"), Document(text=sys.argv[3], id_="globex")]
    nodes = SentenceSplitter(chunk_size=40, chunk_overlap=5)(docs)  # split here: the splitter does not pickle
    out = IngestionPipeline(transformations=[transform]).run(nodes=nodes, num_workers=2)
    print(json.dumps([n.metadata.get("context") for n in out]))
"""


def test_pipeline_runs_with_two_worker_processes(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    script = tmp_path / "workers.py"
    script.write_text(WORKERS_SCRIPT)
    with FakeAnthropicServer(responder=filing_responder) as server:
        done = subprocess.run([sys.executable, str(script), server.base_url, ACME, GLOBEX], capture_output=True,
                              text=True, timeout=180, env={**os.environ, "ANTHROPIC_API_KEY": TEST_KEY})
        answered = len(server.successful())
    assert done.returncode == 0, done.stderr[-2000:]
    contexts = json.loads(done.stdout.strip().splitlines()[-1])
    # Both workers had the contextualizer (rebuilt from its pickle, the key read from their environment).
    assert contexts and all(contexts) and answered == len(contexts)
    assert TEST_KEY not in done.stdout


def test_a_provider_error_in_a_worker_process_fails_the_pipeline_instead_of_hanging(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    script = tmp_path / "workers.py"
    script.write_text(WORKERS_SCRIPT)
    with FakeAnthropicServer(api_key="sk-ant-the-only-valid-key-000000") as server:  # every request: 401
        done = subprocess.run([sys.executable, str(script), server.base_url, ACME, GLOBEX], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "ANTHROPIC_API_KEY": TEST_KEY})
    # The worker's ProviderAuthenticationError came back through multiprocessing whole (it used to fail to
    # unpickle, killing the pool's result thread: the pipeline waited forever).
    assert done.returncode != 0 and "ProviderAuthenticationError" in done.stderr, done.stderr[-2000:]
    assert TEST_KEY not in done.stderr


def test_last_report_is_never_stale_nor_missing(tmp_path: Path) -> None:
    cache = IngestionCache()
    with FakeAnthropicServer(responder=filing_responder) as server:
        transform = transform_for(server, tmp_path)
        assert transform.last_report.requests == 0 and "has not run yet" in transform.last_report.format()
        IngestionPipeline(transformations=[splitter(), transform], cache=cache).run(documents=documents())
        assert transform.last_report.generated > 0 and transform.last_report.requests > 0
        # the same transform, the same pipeline cache: LlamaIndex serves the nodes and never calls the transform
        IngestionPipeline(transformations=[splitter(), transform], cache=cache).run(documents=documents())
    assert transform.last_report.requests == 0 and transform.last_report.generated == 0
    assert "IngestionCache served its nodes" in transform.last_report.format()


def test_llm_is_accepted_directly_and_checked_at_construction(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from ctx_retrieval import HeuristicContextualizer, ProviderAuthenticationError

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    with pytest.raises(ProviderAuthenticationError, match="ANTHROPIC_API_KEY"):
        ContextualNodeTransform()  # Claude by default: no key fails here, not when the pipeline runs
    with pytest.raises(ProviderAuthenticationError):
        ContextualNodeTransform(llm=AnthropicProvider())
    with pytest.raises(TypeError, match="llm= takes"):
        ContextualNodeTransform(llm="claude-haiku-5-5")
    with FakeAnthropicServer(responder=filing_responder) as server:
        transform = ContextualNodeTransform(llm=AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url))
        nodes = transform(splitter()(documents()))
        assert server.requests and all(n.metadata.get("context") for n in nodes)
    heuristic = ContextualNodeTransform(llm=HeuristicContextualizer())
    assert heuristic.contextualizer_id and all(n.metadata.get("context") for n in heuristic(splitter()(documents())))


def test_documents_without_a_node_parser_are_reported_and_one_node_documents_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    from ctx_retrieval import HeuristicContextualizer

    transform = ContextualNodeTransform(llm=HeuristicContextualizer())
    with caplog.at_level("WARNING"):
        out = transform(documents())  # whole documents, no node parser before the step
    assert all("context" not in n.metadata for n in out)
    assert "node parser" in caplog.text and "2 of 2 nodes are whole documents" in caplog.text
    short = Document(text="A short note on ACME's revenue.", id_="note")
    nodes = splitter()([*documents(), short])
    transform(nodes)
    assert any("1 documents are a single node" in w for w in transform.last_report.warnings)


def test_the_ingestion_cache_key_waits_for_the_servers_context_size(tmp_path: Path) -> None:
    from ctx_retrieval.providers import OpenAICompatibleProvider
    from ctx_retrieval.testing import FakeOpenAIServer

    cache = IngestionCache()
    keys, asked = [], []
    with FakeOpenAIServer(profile="llama.cpp") as server:
        for n_ctx in (2048, 32768):  # the same address, restarted with another --ctx-size
            server.n_ctx = n_ctx
            before = sum(r["path"].endswith("/chat/completions") for r in server.requests)
            transform = ContextualNodeTransform(llm=OpenAICompatibleProvider("local-model", base_url=server.base_url))
            first = transform.contextualizer_id  # asked at construction: the key never changes afterwards
            nodes = IngestionPipeline(transformations=[splitter(), transform], cache=cache).run(documents=documents())
            keys.append(transform.contextualizer_id)
            assert keys[-1] == first and f"window:{n_ctx * 3 // 4}:" in first
            asked.append(sum(r["path"].endswith("/chat/completions") for r in server.requests) - before)
            assert all(n.metadata.get("context") for n in nodes)
    # Each key names its server's window (it used to say window:150000 for both): the second run was not served
    # the first one's contexts from the ingestion cache.
    assert keys[0] != keys[1] and all("window:150000" not in k for k in keys)
    assert asked[0] > 0 and asked[1] > 0


def test_the_estimate_of_a_pipelines_own_nodes_is_the_bill(tmp_path: Path) -> None:
    from tests.helpers import make_document

    def nodes_of(*names: str) -> list[Any]:
        docs = [Document(text=make_document(n, paragraphs=30)[0].text, id_=n) for n in names]
        return SentenceSplitter(chunk_size=100, chunk_overlap=0)(docs)

    with FakeAnthropicServer() as server:
        generator = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url),
                                     cache=tmp_path / "c.sqlite")
        transform = ContextualNodeTransform.from_generator(generator)
        transform(nodes_of("earlier-1", "earlier-2"))  # the cache learns the output lengths
        nodes = nodes_of("guide-1", "guide-2", "guide-3")
        estimate = transform.estimate(nodes)
        counted = len(server.requests)
        IngestionPipeline(transformations=[transform]).run(nodes=nodes)
        bill = transform.last_report
        assert bill.cost_usd is not None and estimate.cost_usd is not None and estimate.requests == bill.requests
        assert abs(estimate.cost_usd - bill.cost_usd) <= 0.02 * bill.cost_usd
        assert all(not r.path.endswith("count_tokens") for r in server.requests[counted:])  # counted once
        again = transform.estimate(nodes)
        assert again.cost_usd == 0.0 and again.requests == 0 and again.cached_chunks == len(nodes)
