"""Contextual hybrid inside one engine, from both frameworks: LangChain's indexing API and a LlamaIndex ingestion
pipeline write contextualized chunks into one Milvus collection or PostgreSQL table each (vectors and BM25 side by
side, nothing to pair), then both retrievers answer with each result's ranks on both engine sides.

    .venv/bin/python examples/engine_quickstart.py                     # Milvus Lite: ctx-retrieval[milvus]
    .venv/bin/python examples/engine_quickstart.py http://host:19530   # a Milvus server
    .venv/bin/python examples/engine_quickstart.py postgresql://user@host/db   # pgvector >= 0.8: [postgres]

(with ctx-retrieval[langchain,llama-index,local]). Milvus Lite (a file, one process) runs it by default; a Milvus
server or a PostgreSQL database serves an ingestion job and query services in several processes with the same code.
With ANTHROPIC_API_KEY set, Claude writes the contexts; without it the bundled fake Anthropic API does (the real
request flow, canned contexts), and says so.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, index
from langchain_core.vectorstores import VectorStore
from llama_index.core import Document as LIDocument
from llama_index.core import VectorStoreIndex
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from ctx_retrieval import ContextGenerator
from ctx_retrieval.loaders import load_sample
from ctx_retrieval.testing import claude_or_fake
from langchain_ctx import (
    ContextualDocumentTransformer,
    ContextualHybridRetriever,
    ContextualMilvus,
    ContextualPostgres,
    EmbedderTokenSplitter,
    MiniLMEmbeddings,
    for_answering,
)
from llama_index_ctx import ContextualHybridRetriever as LIRetriever
from llama_index_ctx import (
    ContextualMilvusVectorStore,
    ContextualNodeTransform,
    ContextualPostgresVectorStore,
    MiniLMEmbedding,
)

QUESTION = "How much did ACME's revenue grow over the previous quarter?"


def stores(where: str | None, folder: Path, embeddings: MiniLMEmbeddings, embed_model: MiniLMEmbedding
           ) -> tuple[VectorStore, BasePydanticVectorStore]:
    """The LangChain and the LlamaIndex store, each its own collection (or table) in the engine at ``where``."""
    if where and where.startswith(("postgresql://", "postgres://")):
        return (ContextualPostgres(embeddings, url=where, table="langchain_chunks"),
                ContextualPostgresVectorStore(where, embed_model=embed_model, table="llama_index_nodes"))
    if where:
        return (ContextualMilvus(embeddings, uri=where, collection_name="langchain_chunks"),
                ContextualMilvusVectorStore(where, embed_model=embed_model, collection_name="llama_index_nodes"))
    return (ContextualMilvus(embeddings, uri=str(folder / "langchain.db")),
            ContextualMilvusVectorStore(str(folder / "llama_index.db"), embed_model=embed_model))


def main() -> None:
    sample, _ = load_sample()
    with tempfile.TemporaryDirectory() as tmp, claude_or_fake() as provider:
        generator = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite")
        # LangChain: split, contextualize, and index() into the collection (edits and deletes land on both sides)
        embeddings = MiniLMEmbeddings()
        documents = [Document(page_content=sample.text, metadata={"source": "acme_q2_2023.md"})]
        chunks = EmbedderTokenSplitter(embeddings, add_start_index=True).split_documents(documents)
        transformer = ContextualDocumentTransformer(generator)
        contextual = transformer.transform_documents(chunks)
        print(f"{len(contextual)} chunks contextualized\n" + transformer.last_report.format())  # type: ignore[union-attr]
        embed_model = MiniLMEmbedding()
        store, engine = stores(sys.argv[1] if len(sys.argv) > 1 else None, Path(tmp), embeddings, embed_model)
        print(f"stores: {store!r}, {engine!r}")
        records = InMemoryRecordManager("acme")
        records.create_schema()
        print(index(contextual, records, store, cleanup="scoped_full", source_id_key="source",
                    key_encoder="sha256"))
        print(f"\nLangChain, Q: {QUESTION}")
        found = for_answering(ContextualHybridRetriever(vectorstore=store, k=3).invoke(QUESTION))  # chunks alone
        for n, doc in enumerate(found, start=1):
            meta = doc.metadata
            print(f"  {n}. [vector #{meta['vector_rank'] or '-'}, bm25 #{meta['bm25_rank'] or '-'}] "
                  f"{' '.join(doc.page_content.split())[:100]}...")

        # LlamaIndex: an ingestion pipeline with a docstore writes the nodes; its own index queries them
        pipeline = IngestionPipeline(
            transformations=[SentenceSplitter(chunk_size=150, chunk_overlap=0),
                             ContextualNodeTransform.from_generator(generator), embed_model],
            vector_store=engine, docstore=SimpleDocumentStore(),
            docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
        nodes = pipeline.run(documents=[LIDocument(text=sample.text, id_="acme_q2_2023.md")])
        print(f"\n{len(nodes)} nodes written by the LlamaIndex pipeline")
        retriever = LIRetriever(VectorStoreIndex.from_vector_store(engine, embed_model=embed_model),
                                similarity_top_k=3)
        print(f"LlamaIndex, Q: {QUESTION}")
        for n, hit in enumerate(retriever.retrieve(QUESTION), start=1):
            meta = hit.node.metadata
            print(f"  {n}. [vector #{meta['vector_rank'] or '-'}, bm25 #{meta['bm25_rank'] or '-'}] "
                  f"{' '.join(hit.node.get_content().split())[:100]}...")


if __name__ == "__main__":
    main()
