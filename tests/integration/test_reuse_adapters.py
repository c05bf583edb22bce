"""Context reuse through both adapters and the CLI (issue 26, parts 1-2): an edited document goes through the
framework's own incremental ingestion paying only its changed chunks, the reused ones say which version they were
written from, and a refresh rewrites them into the same index (LlamaIndex: the pipeline's docstore upserts, with its
IngestionCache never serving the stale output again; LangChain: ``index()`` with a record manager)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("langchain_core")

from langchain_core.documents import Document as LCDocument
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import Document as LIDocument
from llama_index.core.ingestion import DocstoreStrategy, IngestionCache, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore

from ctx_retrieval import AnthropicProvider, ContextGenerator, MiniLMEmbedder, ReusePolicy
from ctx_retrieval.cli import main
from ctx_retrieval.keys import CONTEXT_STATUS_KEY, CONTEXT_WRITTEN_FROM_KEY
from langchain_ctx import ContextualDocumentTransformer, MiniLMEmbeddings
from llama_index_ctx import ContextualNodeTransform, MiniLMEmbedding, refresh_stale
from tests.helpers import TEST_KEY, long_text

TEXT = long_text("policy", 12, 40)
EDITED = TEXT.replace("Paragraph 6 of policy:", "Paragraph 6 of policy, revised in May:")


def generator(server: Any, tmp_path: Path) -> ContextGenerator:
    return ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url),
                            cache=tmp_path / "contexts.sqlite", reuse=ReusePolicy(max_changed_tokens=300))


def statuses(nodes: Any) -> list[str]:
    return [n.metadata[CONTEXT_STATUS_KEY] for n in nodes]


def test_llama_index_pipeline_reuses_then_refreshes_through_its_own_upserts(
        fake_server: Any, tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    from llama_index.core.vector_stores import SimpleVectorStore

    store = SimpleVectorStore()
    docstore = SimpleDocumentStore()
    pipeline = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=80, chunk_overlap=0),
                         ContextualNodeTransform.from_generator(generator(fake_server, tmp_path)),
                         MiniLMEmbedding(embedder)],
        vector_store=store, docstore=docstore, docstore_strategy=DocstoreStrategy.UPSERTS)
    first = pipeline.run(documents=[LIDocument(text=TEXT, id_="policy")])
    assert set(statuses(first)) == {"generated"} and len(first) > 8
    fake_server.reset()
    edited = [LIDocument(text=EDITED, id_="policy")]
    second = pipeline.run(documents=edited)
    changed = [n for n in second if n.metadata[CONTEXT_STATUS_KEY] == "generated"]
    assert len(changed) == 1 and "revised in May" in changed[0].get_content()
    assert fake_server.totals()["requests"] == 1
    reused = [n for n in second if n.metadata[CONTEXT_STATUS_KEY] == "reused"]
    assert len(reused) == len(second) - 1 and all(n.metadata[CONTEXT_WRITTEN_FROM_KEY] for n in reused)
    assert CONTEXT_WRITTEN_FROM_KEY in reused[0].excluded_embed_metadata_keys  # provenance, never embedded
    fake_server.reset()
    refreshed = refresh_stale(pipeline, edited)
    assert fake_server.totals()["requests"] == len(reused)
    assert set(statuses(refreshed)) == {"generated"}
    stored = store.data.embedding_dict
    assert len(stored) == len(second)  # the docstore's upsert replaced the document's nodes, none doubled
    assert refresh_stale(pipeline, edited) == []  # nothing stale now: nothing runs


def test_llama_index_ingestion_cache_never_serves_a_stale_output_after_a_refresh(
        fake_server: Any, tmp_path: Path) -> None:
    transform = ContextualNodeTransform.from_generator(generator(fake_server, tmp_path))
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=80, chunk_overlap=0), transform],
                                 cache=IngestionCache())
    pipeline.run(documents=[LIDocument(text=TEXT, id_="policy")])
    edited = [LIDocument(text=EDITED, id_="policy")]
    assert "reused" in statuses(pipeline.run(documents=edited))
    refresh_stale(pipeline, edited)
    fake_server.reset()
    after = pipeline.run(documents=edited)  # the same nodes: the cached step output would be the stale one
    assert set(statuses(after)) == {"generated"} and fake_server.totals()["requests"] == 0
    assert transform.last_report.cached == len(after)  # the step ran: its cached output would have been stale


def test_langchain_transformer_reuses_and_index_rewrites_the_refreshed_chunks(
        fake_server: Any, tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(chunk_size=300, chunk_overlap=0, add_start_index=True)
    transformer = ContextualDocumentTransformer(generator(fake_server, tmp_path))
    store = InMemoryVectorStore(MiniLMEmbeddings(embedder))
    records = InMemoryRecordManager("policy")
    records.create_schema()

    def chunks(text: str) -> list[LCDocument]:
        return splitter.split_documents([LCDocument(page_content=text, metadata={"source": "policy"})])

    def indexed(documents: Any) -> dict[str, int]:
        return index(documents, records, store, cleanup="incremental", source_id_key="source", key_encoder="sha256")

    first = transformer.transform_documents(chunks(TEXT))
    assert indexed(first)["num_added"] == len(first)
    # a nightly rerun of an unchanged corpus: contexts from the cache, the chunks' metadata as it was, nothing
    # re-embedded (the chunk's status stays "generated": served from the cache is the same context)
    assert indexed(transformer.transform_documents(chunks(TEXT)))["num_skipped"] == len(first)
    fake_server.reset()
    edited = chunks(EDITED)
    second = transformer.transform_documents(edited)
    assert fake_server.totals()["requests"] == 1 and statuses(second).count("reused") == len(second) - 1
    assert indexed(second)["num_added"] == len(second)  # the new chunk, and the others now marked stale
    refreshed = transformer.refresh_stale(edited)
    assert "reused" not in statuses(refreshed) and CONTEXT_WRITTEN_FROM_KEY not in refreshed[0].metadata
    written = indexed(refreshed)
    assert written["num_added"] == len(second) - 1 and written["num_deleted"] == len(second) - 1
    with pytest.raises(ValueError, match="not its contextualized output"):
        transformer.refresh_stale(refreshed)


def test_the_cli_reuses_and_refreshes(fake_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", TEST_KEY)
    doc = tmp_path / "docs" / "policy.md"
    doc.parent.mkdir()
    doc.write_text(TEXT, encoding="utf-8")
    base = ["contextualize", str(doc.parent), "--contextualizer", "anthropic", "--base-url", fake_server.base_url,
            "--cache", str(tmp_path / "c.sqlite"), "--chunk-chars", "300"]
    assert main([*base, "--out", str(tmp_path / "v1.jsonl")]) == 0
    doc.write_text(EDITED, encoding="utf-8")
    fake_server.reset()
    assert main([*base, "--reuse-changed-tokens", "300", "--out", str(tmp_path / "v2.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "v2.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["status"] for r in rows].count("generated") == 1 and fake_server.totals()["requests"] == 1
    assert all(r["context"] and r["written_from"] for r in rows if r["status"] == "reused")
    assert "reused" in capsys.readouterr().err
    assert main(["cache", "stats", "--cache", str(tmp_path / "c.sqlite")]) == 0
    assert f"{len(rows) - 1} of {len(rows)} chunks" in capsys.readouterr().out
    fake_server.reset()
    assert main([*base, "--refresh-stale", "--batch", "--poll-interval", "0.05",
                 "--out", str(tmp_path / "v3.jsonl")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "v3.jsonl").read_text(encoding="utf-8").splitlines()]
    err = capsys.readouterr().err
    assert "reused" not in {r["status"] for r in rows} and f"batch: {len(rows) - 1} requests at half price" in err
    assert f"refreshed {len(rows) - 1} stale contexts" in err


def test_refreshing_needs_a_contextualizer_that_writes_stale_contexts() -> None:
    from ctx_retrieval import HeuristicContextualizer
    from ctx_retrieval.errors import ConfigurationError

    chunks = [LCDocument(page_content=TEXT.split("\n\n")[1], metadata={"source": "policy"})]
    with pytest.raises(ConfigurationError, match="writes no stale contexts"):
        ContextualDocumentTransformer(HeuristicContextualizer()).refresh_stale(chunks)
    pipeline = IngestionPipeline(transformations=[
        SentenceSplitter(), ContextualNodeTransform.from_generator(HeuristicContextualizer())])
    with pytest.raises(ConfigurationError, match="writes no stale contexts"):
        refresh_stale(pipeline, [LIDocument(text=TEXT, id_="policy")])
