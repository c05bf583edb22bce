"""LangChain's own standard tests for a vector store (sync and async: add, get by id, idempotent ids, delete),
run against every vector store we ship for LangChain (issue 53): ``ContextualVectorStore`` over LangChain's
``InMemoryVectorStore`` and over Chroma, ``ContextualMilvus`` on Milvus Lite, ``ContextualPostgres`` on PostgreSQL."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("langchain_tests")

from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from langchain_ctx import ContextualVectorStore

_names = itertools.count()


class TestContextualVectorStoreInMemory(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self) -> Iterator[VectorStore]:
        store = ContextualVectorStore(InMemoryVectorStore(self.get_embeddings()))
        yield store


class TestContextualVectorStoreOverChroma(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, tmp_path: Path) -> Iterator[VectorStore]:
        from langchain_chroma import Chroma

        inner = Chroma(collection_name=f"standard{next(_names)}", embedding_function=self.get_embeddings(),
                       persist_directory=str(tmp_path / "chroma"))
        store = ContextualVectorStore(inner, bm25=tmp_path / "bm25")
        yield store


@pytest.fixture(scope="module")
def milvus_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One Milvus Lite file for the module's tests, each in a collection of its own: Milvus Lite starts a server
    process for each file it opens (about a second), which the tests need not pay 25 times."""
    pytest.importorskip("milvus_lite")
    return str(tmp_path_factory.mktemp("milvus") / "standard.db")


class TestContextualMilvus(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, milvus_file: str) -> Iterator[VectorStore]:
        from langchain_ctx import ContextualMilvus

        yield ContextualMilvus(self.get_embeddings(), uri=milvus_file, collection_name=f"standard{next(_names)}")


class TestContextualPostgres(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self, request: pytest.FixtureRequest) -> Iterator[VectorStore]:
        pytest.importorskip("psycopg")
        from langchain_ctx import ContextualPostgres

        store = ContextualPostgres(self.get_embeddings(), url=str(request.getfixturevalue("postgres").new_database()))
        yield store
        store.store.close()
