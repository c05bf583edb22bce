"""LlamaIndex's metadata filters as the BM25 side applies them (issue 53: only EQ was tested, so NE translated as EQ
survived): every operator we translate returns what LlamaIndex's own filter function keeps, on the BM25 side and
on both sides of each store that keeps them in one engine (Milvus Lite, PostgreSQL)."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.vector_stores import FilterOperator, MetadataFilter, MetadataFilters
from llama_index.core.vector_stores.utils import build_metadata_filter_fn

from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store
from ctx_retrieval.retrieval.fusion import chunk_key
from llama_index_ctx.store import where_of

META = {f"c{n}": {"year": 2020 + n % 5, "tenant": "ab"[n % 2]} for n in range(20)}
CASES = [(FilterOperator.EQ, "tenant", "a"), (FilterOperator.NE, "tenant", "a"), (FilterOperator.GT, "year", 2022),
         (FilterOperator.GTE, "year", 2022), (FilterOperator.LT, "year", 2022), (FilterOperator.LTE, "year", 2022),
         (FilterOperator.IN, "year", [2021, 2024]), (FilterOperator.NIN, "year", [2021, 2024]),
         (FilterOperator.NE, "year", 2023)]


@pytest.mark.parametrize(("operator", "key", "value"), CASES, ids=[f"{o.name}-{k}" for o, k, _ in CASES])
def test_each_operator_keeps_what_llama_index_keeps(operator: FilterOperator, key: str, value: object) -> None:
    store = BM25Store()
    store.upsert(BM25Entry(i, "quarterly revenue report", metadata=m) for i, m in META.items())
    filters = MetadataFilters(filters=[MetadataFilter(key=key, operator=operator, value=value)])
    keep = build_metadata_filter_fn(lambda chunk_id: META[chunk_id], filters)  # type: ignore[arg-type]
    expected = {chunk_key(i) for i in META if keep(i)}
    where = where_of(filters)
    assert where is not None  # translated, not evaluated node by node
    assert set(store.search("revenue", k=len(META), where=where).keys) == expected and expected


@pytest.fixture(params=["milvus", "postgres"])
def engine_store(request: pytest.FixtureRequest, tmp_path: object, embedder: object) -> object:
    """A LlamaIndex vector store of ours that keeps both sides in one engine, holding META's nodes."""
    from llama_index.core.schema import TextNode

    from llama_index_ctx import ContextualMilvusVectorStore, ContextualPostgresVectorStore, MiniLMEmbedding

    model = MiniLMEmbedding(embedder)
    if request.param == "milvus":
        pytest.importorskip("milvus_lite")
        store: object = ContextualMilvusVectorStore(f"{tmp_path}/filters.db", embed_model=model)
    else:
        pytest.importorskip("psycopg")
        store = ContextualPostgresVectorStore(request.getfixturevalue("postgres").new_database(), embed_model=model)
    vector = model.get_text_embedding("quarterly revenue report")
    store.add([TextNode(id_=i, text="quarterly revenue report", metadata=m, embedding=vector)  # type: ignore[attr-defined]
               for i, m in META.items()])
    return store


@pytest.mark.parametrize(("operator", "key", "value"), CASES, ids=[f"{o.name}-{k}" for o, k, _ in CASES])
def test_each_operator_keeps_on_both_engine_sides_what_llama_index_keeps(
        engine_store: object, operator: FilterOperator, key: str, value: object) -> None:
    from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

    filters = MetadataFilters(filters=[MetadataFilter(key=key, operator=operator, value=value)])
    keep = build_metadata_filter_fn(lambda node_id: META[node_id], filters)  # type: ignore[arg-type]
    expected = {i for i in META if keep(i)}
    vector = engine_store._store.embedder.embed_query("revenue")  # type: ignore[attr-defined]
    for mode in (VectorStoreQueryMode.DEFAULT, VectorStoreQueryMode.TEXT_SEARCH):
        found = engine_store.query(VectorStoreQuery(  # type: ignore[attr-defined]
            query_embedding=list(vector), query_str="revenue", similarity_top_k=len(META), filters=filters, mode=mode))
        assert set(found.ids) == expected and expected, mode
