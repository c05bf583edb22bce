"""Both adapters as their frameworks' users expect them (issue 14, items 4-7): one indexed text everywhere,
metadata filters on both sides, any vector store, the frameworks' parameter names, unknown arguments rejected,
the fused score and each side's rank on every result."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("langchain_core")

import chromadb
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document as LCDocument
from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core import Document as LIDocument
from llama_index.core import VectorStoreIndex
from llama_index.core.callbacks import CallbackManager, LlamaDebugHandler
from llama_index.core.callbacks.schema import CBEventType
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import MetadataMode
from llama_index.core.vector_stores import MetadataFilters
from llama_index.core.vector_stores.simple import SimpleVectorStore
from pydantic import ValidationError

from ctx_retrieval import ConfigurationError, HeuristicContextualizer, MiniLMEmbedder, indexed_text
from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K
from langchain_ctx import (
    ContextualDocumentTransformer,
    ContextualVectorStore,
    MiniLMEmbeddings,
    for_answering,
    original_text,
)
from langchain_ctx import ContextualHybridRetriever as LCRetriever
from llama_index_ctx import ContextualHybridRetriever as LIRetriever
from llama_index_ctx import ContextualNodeTransform, MiniLMEmbedding, chroma_vector_store
from llama_index_ctx import ContextualVectorStore as LIContextualVectorStore
from llama_index_ctx.store import with_stable_id as stable_id

# Two tenants whose documents share vocabulary: a query about one tenant's topic must not reach the other's chunks.
TENANTS = {
    "a": [("a-runbook.md", "# Runbook\n\nThe payment service restarts its queue workers every night at 02:00. "
                           "Queue workers drain the retry queue before the restart.\n\nAlerts page the payments "
                           "on-call engineer when the retry queue exceeds 5,000 messages."),
          ("a-billing.md", "# Billing\n\nInvoices are generated on the first day of each month. A failed invoice "
                           "is retried three times by the billing queue worker.")],
    "b": [("b-runbook.md", "# Runbook\n\nThe search service rebuilds its index every night at 03:00. The retry "
                           "queue of the indexer is drained by queue workers before the rebuild.\n\nAlerts page "
                           "the search on-call engineer when indexing lags by more than one hour."),
          ("b-payroll.md", "# Payroll\n\nSalaries are paid on the last working day. The payroll queue worker "
                           "retries a failed transfer twice before paging the finance team.")],
}
QUERY = "which queue workers drain the retry queue at night before the restart"


def li_nodes(**transform_kwargs: Any) -> list[Any]:
    documents = [LIDocument(text=text, id_=name, metadata={"tenant": tenant, "file_name": name})
                 for tenant, files in TENANTS.items() for name, text in files]
    nodes = SentenceSplitter(chunk_size=48, chunk_overlap=0)(documents)
    transform = ContextualNodeTransform.from_generator(HeuristicContextualizer(), **transform_kwargs)
    return list(transform(nodes))


def lc_documents(**transformer_kwargs: Any) -> list[LCDocument]:
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    documents = [LCDocument(page_content=text, metadata={"tenant": tenant, "source": name, "file_name": name})
                 for tenant, files in TENANTS.items() for name, text in files]
    chunks = RecursiveCharacterTextSplitter(chunk_size=180, chunk_overlap=0, add_start_index=True).split_documents(
        documents)
    transformer = ContextualDocumentTransformer(HeuristicContextualizer(), **transformer_kwargs)
    return list(transformer.transform_documents(chunks, source_documents=documents))


# -- item 7: one indexed text --------------------------------------------------------------------------------


@pytest.mark.parametrize("keys", [(), ("file_name",)])
def test_both_adapters_index_exactly_the_cores_text(keys: tuple[str, ...]) -> None:
    nodes = li_nodes(indexed_metadata_keys=keys)
    assert nodes and all(n.metadata.get("context") for n in nodes)
    for node in nodes:
        chunk = node.get_content(metadata_mode=MetadataMode.NONE)
        expected = indexed_text(chunk, node.metadata["context"], node.metadata, keys)
        assert node.get_content(metadata_mode=MetadataMode.EMBED) == expected
        assert ("tenant" in expected) is False and (node.metadata["file_name"] in expected) == bool(keys)
    documents = lc_documents(indexed_metadata_keys=keys)
    assert documents and all(d.metadata.get("context") for d in documents)
    for document in documents:
        chunk = original_text(document)
        assert document.page_content == indexed_text(chunk, document.metadata["context"], document.metadata, keys)
        assert "original_text" not in document.metadata
    bare = for_answering(documents)
    assert all(b.page_content == original_text(d) and d.metadata["context"] not in b.page_content
               for b, d in zip(bare, documents, strict=True))
    kept = lc_documents(keep_original_text=True)
    assert all(d.metadata["original_text"].rstrip() == original_text(d) for d in kept)


def test_a_failed_context_is_never_rendered_as_text() -> None:
    class Failing(HeuristicContextualizer):
        async def acontextualize_many(self, items: Any) -> Any:
            from dataclasses import replace

            return [replace(r, context=None, status="failed") for r in await super().acontextualize_many(items)]

    documents = [LIDocument(text=text, id_=name) for name, text in TENANTS["a"]]
    chunks = SentenceSplitter(chunk_size=48, chunk_overlap=0)(documents)
    nodes = ContextualNodeTransform.from_generator(Failing())(chunks)
    for node in nodes:
        assert "context" not in node.metadata and node.metadata["context_status"] == "failed"
        assert node.get_content(metadata_mode=MetadataMode.EMBED) == node.get_content(metadata_mode=MetadataMode.NONE)


# -- items 4 and 5: filters on both sides, over any store ----------------------------------------------------


def _li_store(kind: str) -> Any:
    return SimpleVectorStore() if kind == "simple" else chroma_vector_store(client=chromadb.EphemeralClient())


@pytest.mark.parametrize("store", ["simple", "chroma"])
def test_llama_index_filters_apply_to_both_sides(store: str, embedder: MiniLMEmbedder) -> None:
    nodes = li_nodes()
    embed_model = MiniLMEmbedding(embedder)
    only_a = MetadataFilters.from_dicts([{"key": "tenant", "value": "a"}])
    retriever = LIRetriever.from_defaults(nodes=nodes, vector_store=_li_store(store), embed_model=embed_model,
                                          similarity_top_k=50, filters=only_a)
    results = retriever.retrieve(QUERY)
    assert results and {r.node.metadata["tenant"] for r in results} == {"a"}
    assert any(r.node.metadata["bm25_rank"] for r in results) and any(r.node.metadata["vector_rank"] for r in results)
    unfiltered = LIRetriever(retriever.index, similarity_top_k=50).retrieve(QUERY)
    assert {r.node.metadata["tenant"] for r in unfiltered} == {"a", "b"}  # the filter is what kept b out
    sparse = retriever.bm25.retrieve(QUERY)  # the BM25 side alone: the best tenant-a nodes, not a cut top list
    assert sparse and {n.node.metadata["tenant"] for n in sparse} == {"a"}


@pytest.mark.parametrize("store", ["memory", "chroma"])
def test_langchain_filters_apply_to_both_sides(store: str, embedder: MiniLMEmbedder) -> None:
    documents = lc_documents()
    kwargs: dict[str, Any] = {"client": chromadb.EphemeralClient()} if store == "chroma" else {}
    where = {"tenant": "a"}
    in_store_filter: Any = where if store == "chroma" else (lambda d: d.metadata["tenant"] == "a")
    retriever = LCRetriever.from_documents(documents, MiniLMEmbeddings(embedder), k=50,
                                           search_kwargs={"filter": in_store_filter}, **kwargs)
    results = retriever.invoke(QUERY)
    assert results and {d.metadata["tenant"] for d in results} == {"a"}
    assert any(d.metadata["bm25_rank"] for d in results) and any(d.metadata["vector_rank"] for d in results)
    everyone = LCRetriever.from_vectorstore(retriever.vectorstore, k=50)
    assert {d.metadata["tenant"] for d in everyone.invoke(QUERY)} == {"a", "b"}
    per_call = everyone.invoke(QUERY, filter=in_store_filter)  # the per-call form
    assert [d.id for d in per_call] == [d.id for d in results]
    if store == "memory":  # a where dict works on InMemoryVectorStore too (turned into its callable form)
        only_b = everyone.invoke(QUERY, filter={"tenant": {"$in": ["b"]}})
        assert only_b and {d.metadata["tenant"] for d in only_b} == {"b"}
        assert any(d.metadata["vector_rank"] for d in only_b) and any(d.metadata["bm25_rank"] for d in only_b)


def test_unknown_filter_operators_fail_before_any_search() -> None:
    from ctx_retrieval import compile_where

    with pytest.raises(InvalidInputError, match=r"\$regex"):
        compile_where({"tenant": {"$regex": "a.*"}})
    assert compile_where({"$or": [{"tenant": "a"}, {"year": {"$gte": 2024}}]})({"tenant": "b", "year": 2025})
    assert not compile_where({"year": {"$gt": 2024}})({"year": "2025"})  # across types: no match, no crash


def test_default_stores_are_the_frameworks_in_memory_ones(embedder: MiniLMEmbedder) -> None:
    li = LIRetriever.from_defaults(nodes=li_nodes(), embed_model=MiniLMEmbedding(embedder), similarity_top_k=3)
    assert isinstance(li.index.vector_store, LIContextualVectorStore) and li.bm25 is not None
    assert isinstance(li.index.vector_store.inner, SimpleVectorStore)
    assert len(li.stored_nodes()) == len(li_nodes())
    lc = LCRetriever.from_documents(lc_documents(), MiniLMEmbeddings(embedder), k=3)
    assert isinstance(lc.vectorstore, ContextualVectorStore) and isinstance(lc.vectorstore.inner, InMemoryVectorStore)
    assert len(lc.stored_documents()) == len(lc_documents())
    # delete by id from both sides
    li_gone = li.stored_nodes()[0].node_id
    li.delete_nodes([li_gone])
    assert li_gone not in {n.node_id for n in li.stored_nodes()}
    assert li_gone not in {r.node.node_id for r in li.bm25.retrieve(QUERY)}  # type: ignore[union-attr]
    lc_gone = lc.stored_documents()[0].id
    lc.delete([lc_gone])
    assert lc_gone not in {d.id for d in lc.bm25.invoke(QUERY, k=100)}  # type: ignore[union-attr]
    # an existing index, as LlamaIndex's retrievers take it
    again = LIRetriever.from_defaults(index=li.index, similarity_top_k=3)
    assert [r.node.node_id for r in again.retrieve(QUERY)] == [r.node.node_id for r in li.retrieve(QUERY)]


# -- item 6: conventions, scores and ranks, unknown arguments --------------------------------------------------


def test_fused_scores_follow_the_documented_scale_and_match_ensemble_retriever(embedder: MiniLMEmbedder) -> None:
    from langchain_classic.retrievers import EnsembleRetriever

    retriever = LCRetriever.from_documents(lc_documents(), MiniLMEmbeddings(embedder), k=100, rrf_k=60,
                                           weights={"vector": 1.0, "bm25": 1.0})
    results = retriever.invoke(QUERY)
    for doc in results:
        ranks = [doc.metadata["vector_rank"], doc.metadata["bm25_rank"]]
        expected = sum(1 / (60 + r) for r in ranks if r) / (2 / 61)
        assert doc.metadata["fused_score"] == pytest.approx(expected)
        assert 0 < doc.metadata["fused_score"] <= 1
    vector = retriever.vectorstore.as_retriever(search_kwargs={"k": 150}).invoke(QUERY)
    keyword = retriever.bm25.invoke(QUERY)  # type: ignore[union-attr]
    ensemble = EnsembleRetriever(retrievers=[retriever.vectorstore.as_retriever(), retriever.bm25], c=60,
                                 weights=[1.0, 1.0], id_key="chunk_id")
    theirs = ensemble.weighted_reciprocal_rank([vector, keyword])
    assert [d.metadata["chunk_id"] for d in results] == [d.metadata["chunk_id"] for d in theirs][:100]


def test_llama_index_scores_ranks_and_callback_manager(embedder: MiniLMEmbedder) -> None:
    debug = LlamaDebugHandler()
    retriever = LIRetriever.from_defaults(nodes=li_nodes(), embed_model=MiniLMEmbedding(embedder),
                                          similarity_top_k=5, callback_manager=CallbackManager([debug]))
    results = retriever.retrieve(QUERY)
    assert len(results) == 5 and results == sorted(results, key=lambda r: -(r.score or 0))
    for r in results:
        ranks = [r.node.metadata["vector_rank"], r.node.metadata["bm25_rank"]]
        assert r.score == pytest.approx(sum(1 / (DEFAULT_RRF_K + k) for k in ranks if k) / (2 / (DEFAULT_RRF_K + 1)))
        assert "fused_score" not in r.node.get_content(metadata_mode=MetadataMode.EMBED)
        assert "fused_score" not in r.node.get_content(metadata_mode=MetadataMode.LLM)
    stored = {n.node_id: n for n in retriever.stored_nodes()}
    assert "fused_score" not in stored[results[0].node.node_id].metadata  # stored nodes are not changed
    # ours, the vector side and the BM25 side each report their retrieval to the user's callback manager
    assert len(debug.get_event_pairs(CBEventType.RETRIEVE)) == 3


def test_unknown_arguments_are_rejected_not_ignored(embedder: MiniLMEmbedder) -> None:
    embeddings = MiniLMEmbeddings(embedder)
    store = InMemoryVectorStore(embeddings)
    for bad in ({"weight": [0.5, 0.5]}, {"topk": 3}, {"search_kwarg": {}}, {"c": 60}):
        with pytest.raises(ValidationError):
            LCRetriever(vectorstore=store, **bad)
    with pytest.raises(ValidationError, match="search_kwargs\\['k'\\]"):
        LCRetriever(vectorstore=store, search_kwargs={"k": 3})
    with pytest.raises(ValidationError, match="vector"):
        LCRetriever(vectorstore=store, weights=[0.2, 0.3, 0.5])
    retriever = LCRetriever.from_documents(lc_documents(), embeddings, k=2)
    with pytest.raises(TypeError, match="topk"):
        retriever.invoke(QUERY, topk=3)
    nodes = li_nodes()
    embed_model = MiniLMEmbedding(embedder)
    for bad in ({"k": 3}, {"topk": 3}, {"weight": (1, 1)}, {"postprocessors": []}):
        with pytest.raises(TypeError):
            LIRetriever.from_defaults(nodes=nodes, embed_model=embed_model, **bad)
    with pytest.raises(ConfigurationError, match="exactly one"):
        LIRetriever.from_defaults(embed_model=embed_model)
    with pytest.raises(TypeError, match="MetadataFilters"):
        LIRetriever(VectorStoreIndex([], embed_model=embed_model), filters={"tenant": "a"})  # type: ignore[arg-type]


def test_langchain_callbacks_see_both_sides(embedder: MiniLMEmbedder) -> None:
    class Recorder(BaseCallbackHandler):
        def __init__(self) -> None:
            self.started: list[str] = []

        def on_retriever_start(self, serialized: Any, query: str, **kwargs: Any) -> None:
            self.started.append(kwargs.get("name") or (serialized or {}).get("name", "?"))

    recorder = Recorder()
    retriever = LCRetriever.from_documents(lc_documents(), MiniLMEmbeddings(embedder), k=2)
    retriever.invoke(QUERY, config={"callbacks": [recorder]})
    assert len(recorder.started) == 3  # ours, then the vector side and the BM25 side as child runs


def test_add_documents_says_when_it_cannot_update_a_bm25_side_of_yours(embedder: MiniLMEmbedder) -> None:
    from langchain_ctx import ContextualBM25Retriever

    documents = lc_documents()
    mine = ContextualBM25Retriever.from_documents(documents[:3], k=10)
    retriever = LCRetriever.from_documents(documents[:3], MiniLMEmbeddings(embedder), bm25=mine, k=5)
    with pytest.warns(UserWarning, match="not updated by add_documents"):
        retriever.add_documents(documents[3:])
    assert retriever.bm25 is mine and len(mine.store) == 3
    built = LCRetriever.from_documents(documents[:3], MiniLMEmbeddings(embedder), k=5)
    built.add_documents(documents[3:])  # the built-in side follows, silently
    assert len(built.bm25.store) == len(documents)  # type: ignore[union-attr]


def test_a_store_that_cannot_list_its_documents_gets_bm25_from_what_was_added(embedder: MiniLMEmbedder,
                                                                             tmp_path: Path) -> None:
    from langchain_core.vectorstores import VectorStore

    class Opaque(VectorStore):
        """A vector store with no way to list its contents (as many hosted stores)."""

        def __init__(self, embedding: Any) -> None:
            self._inner = InMemoryVectorStore(embedding)

        def add_documents(self, documents: list[LCDocument], **kwargs: Any) -> list[str]:
            return self._inner.add_documents(documents, **kwargs)

        def add_texts(self, texts: Any, metadatas: Any = None, **kwargs: Any) -> list[str]:
            return self._inner.add_texts(texts, metadatas, **kwargs)

        def delete(self, ids: Any = None, **kwargs: Any) -> None:
            self._inner.delete(ids)

        def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[LCDocument]:
            return self._inner.similarity_search(query, k=k, **kwargs)

        @classmethod
        def from_texts(cls, texts: Any, embedding: Any, metadatas: Any = None, **kwargs: Any) -> Opaque:
            raise NotImplementedError

    documents = lc_documents()
    embeddings = MiniLMEmbeddings(embedder)
    with pytest.raises(ConfigurationError, match=r"cannot list its rows.*pass bm25="):  # BM25 could not be rebuilt
        LCRetriever.from_vectorstore(Opaque(embeddings))
    retriever = LCRetriever(vectorstore=Opaque(embeddings), k=50, bm25=tmp_path / "bm25")
    retriever.add_documents(documents)
    assert len(retriever.stored_documents()) == len(documents)
    results = retriever.invoke(QUERY)
    assert any(d.metadata["bm25_rank"] for d in results) and any(d.metadata["vector_rank"] for d in results)
    gone = documents[0].metadata["chunk_id"]
    retriever.delete([gone])
    assert gone not in {d.metadata["chunk_id"] for d in retriever.invoke(QUERY)}


def test_a_retrievers_bm25_is_where_bm25_lives_or_a_retriever_and_bm25_path_is_its_former_name(
        tmp_path: Path, embedder: MiniLMEmbedder) -> None:
    """Issue 53: one name for one thing. ``bm25=`` a folder on a retriever puts a wrapped store's BM25 there, as it
    does on ``ContextualVectorStore``; a retriever there is asked instead of BM25; ``bm25_path=`` still works, with a
    ``DeprecationWarning``; a folder beside a store that has its BM25 already is refused, naming the fix."""
    documents, nodes = lc_documents(), li_nodes()
    embeddings, embed_model = MiniLMEmbeddings(embedder), MiniLMEmbedding(embedder)
    lc = LCRetriever(vectorstore=InMemoryVectorStore(embeddings), bm25=tmp_path / "lc", k=5)
    lc.add_documents(documents)
    assert lc.vectorstore.bm25.path == tmp_path / "lc" and len(lc.vectorstore.bm25) == len(documents)
    with pytest.warns(DeprecationWarning, match=r"bm25_path=\) is now bm25="):
        old = LCRetriever(vectorstore=InMemoryVectorStore(embeddings), bm25_path=str(tmp_path / "lc-old"))
    assert old.vectorstore.bm25.path == tmp_path / "lc-old"
    with pytest.raises(ConfigurationError, match="has its own: drop bm25="):
        LCRetriever(vectorstore=lc.vectorstore, bm25=tmp_path / "elsewhere")
    mine = LCRetriever(vectorstore=lc.vectorstore, bm25=lc.bm25)  # a retriever: asked as it is
    assert mine.bm25 is lc.bm25 and mine.invoke(QUERY)

    li = LIRetriever.from_defaults(nodes=nodes, embed_model=embed_model, bm25=tmp_path / "li", similarity_top_k=5)
    assert li.store.bm25.path == tmp_path / "li" and li.retrieve(QUERY)
    plain = VectorStoreIndex(nodes, embed_model=embed_model)
    with pytest.warns(DeprecationWarning, match=r"bm25_path=\) is now bm25="):
        wrapped = LIRetriever(plain, bm25_path=tmp_path / "li-old")
    assert wrapped.store.bm25.path == tmp_path / "li-old" and len(wrapped.store.bm25) == len(nodes)
    with pytest.raises(ConfigurationError, match="has its own: drop bm25="):
        LIRetriever(li.index, bm25=tmp_path / "elsewhere")


# -- issue 16: the windows layout in both adapters -------------------------------------------------------------


def _long_tenant_nodes() -> list[Any]:
    """Nodes whose context + text overflow MiniLM's 256 tokens: the windows layout splits them."""
    filler = " ".join(f"detail{n}" for n in range(160))
    documents = [LIDocument(text=f"# Runbook {t}\n\n{filler} The {topic} workers drain the retry queue at night. "
                                 f"{filler}", id_=f"{t}.md", metadata={"tenant": t})
                 for t, topic in (("a", "payment"), ("b", "search"))]
    nodes = SentenceSplitter(chunk_size=1024, chunk_overlap=0)(documents)
    return list(ContextualNodeTransform.from_generator(HeuristicContextualizer())(nodes))


def test_llama_index_windows_layout_indexes_children_and_answers_with_whole_nodes(
        embedder: MiniLMEmbedder, caplog: pytest.LogCaptureFixture) -> None:
    nodes = _long_tenant_nodes()
    embed_model = MiniLMEmbedding(embedder)
    retriever = LIRetriever.from_defaults(nodes=nodes, embed_model=embed_model, similarity_top_k=5,
                                          embed_layout="windows")
    children = list(retriever.index.docstore.docs.values())  # SimpleVectorStore keeps its nodes in the docstore
    assert len(children) > len(nodes) and all("#w" in c.node_id for c in children)
    assert "truncated for embedding" not in caplog.text  # every window fits: nothing to warn of
    wholes = retriever.stored_nodes()  # BM25 holds the whole nodes
    assert sorted(n.node_id for n in wholes) == sorted(stable_id(n).node_id for n in nodes)
    # as after a restart, BM25 lost: filled at open from the children the index's docstore holds
    fresh = LIContextualVectorStore(retriever.store.inner, embed_layout="windows", docstore=retriever.index.docstore)
    assert len(fresh.bm25) == len(nodes) and fresh.sync().added == 0
    rebuilt = {n.node_id: n for n in fresh.get_nodes()}
    for node in wholes:
        assert _parent_text_key(rebuilt[node.node_id].get_content(metadata_mode=MetadataMode.NONE)) == \
            _parent_text_key(node.get_content(metadata_mode=MetadataMode.NONE))
    results = retriever.retrieve("payment workers drain the retry queue")
    ids = [r.node.node_id for r in results]
    assert len(ids) == len(set(ids)) and all("#w" not in i for i in ids)  # whole nodes, each once
    assert results[0].node.metadata["tenant"] == "a" and results[0].node.metadata["vector_rank"] == 1
    texts = {_parent_text_key(n.get_content(metadata_mode=MetadataMode.NONE)) for n in nodes}
    assert _parent_text_key(results[0].node.get_content(metadata_mode=MetadataMode.NONE)) in texts
    retriever.delete_nodes([results[0].node.node_id])
    assert results[0].node.node_id not in {n.node_id for n in retriever.stored_nodes()}


def _parent_text_key(text: str) -> str:
    return " ".join(text.split())


def stored_rows(store: Any) -> list[LCDocument]:
    """What an InMemoryVectorStore holds, row by row."""
    return [LCDocument(page_content=row["text"], metadata=dict(row["metadata"]), id=i)
            for i, row in store.store.items()]


def test_langchain_windows_layout_is_the_multi_vector_pattern(embedder: MiniLMEmbedder,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    filler = " ".join(f"detail{n}" for n in range(160))
    documents = [LCDocument(page_content=f"# Runbook {t}\n\n{filler} The {topic} workers drain the retry queue at "
                                         f"night. {filler}", metadata={"tenant": t, "source": f"{t}.md"})
                 for t, topic in (("a", "payment"), ("b", "search"))]
    chunks = ContextualDocumentTransformer(HeuristicContextualizer()).transform_documents(
        [LCDocument(page_content=d.page_content, metadata={**d.metadata, "start_index": 0}) for d in documents],
        source_documents=documents)
    retriever = LCRetriever.from_documents(chunks, MiniLMEmbeddings(embedder), k=5, embed_layout="windows")
    rows = stored_rows(retriever.vectorstore.inner)
    assert len(rows) > len(chunks) and all("#w" in str(r.id) for r in rows)
    assert "truncated for embedding" not in caplog.text  # every window fits: nothing to warn of
    assert all(r.metadata["chunk_id"] in {c.metadata["chunk_id"] for c in chunks} for r in rows)
    wholes = {d.id: d for d in retriever.stored_documents()}
    assert {c.metadata["chunk_id"] for c in chunks} == set(wholes)
    for chunk in chunks:  # the whole chunks are rebuilt from their windows exactly (spaces aside)
        assert " ".join(wholes[chunk.metadata["chunk_id"]].page_content.split()) == " ".join(chunk.page_content.split())
    results = retriever.invoke("payment workers drain the retry queue")
    assert results[0].metadata["tenant"] == "a" and len({d.id for d in results}) == len(results)
    assert all("#w" not in str(d.id) for d in results)
    retriever.delete([results[0].metadata["chunk_id"]])
    rows = stored_rows(retriever.vectorstore.inner)
    assert rows and not [r for r in rows if r.metadata["chunk_id"] == results[0].metadata["chunk_id"]]


def test_index_builds_show_progress_when_asked_and_are_quiet_otherwise(embedder: MiniLMEmbedder,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    LIRetriever.from_defaults(nodes=li_nodes(), embed_model=MiniLMEmbedding(embedder))
    LCRetriever.from_documents(lc_documents(), MiniLMEmbeddings(embedder))
    assert capsys.readouterr().err == ""
    LIRetriever.from_defaults(nodes=li_nodes(), embed_model=MiniLMEmbedding(embedder), show_progress=True)
    assert "Generating embeddings" in capsys.readouterr().err  # LlamaIndex's own bar, which used to raise TypeError
    LCRetriever.from_documents(lc_documents(), MiniLMEmbeddings(embedder), show_progress=True)
    assert "indexing chunks" in capsys.readouterr().err
