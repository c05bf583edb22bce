"""Contextual hybrid inside Milvus, from both frameworks: LangChain's indexing API and a LlamaIndex ingestion
pipeline write contextualized chunks into one Milvus collection each (vectors and Milvus's BM25 side by side, nothing
to pair), then both retrievers answer with each result's ranks on both engine sides.

    .venv/bin/python examples/milvus_quickstart.py    # needs ctx-retrieval[langchain,llama-index,milvus,local]

Milvus Lite (a file, one process) runs it here; give a server's URI ("http://host:19530") instead and the same code
serves an ingestion job and query services in several processes. With ANTHROPIC_API_KEY set, Claude writes the
contexts; without it the bundled fake Anthropic API does (the real request flow, canned contexts), and says so.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from langchain_core.documents import Document
from langchain_core.indexing import InMemoryRecordManager, index
from llama_index.core import Document as LIDocument
from llama_index.core import VectorStoreIndex
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore

from ctx_retrieval import AnthropicProvider, ContextGenerator
from ctx_retrieval.loaders import load_sample
from ctx_retrieval.testing import FakeAnthropicServer
from langchain_ctx import (
    ContextualDocumentTransformer,
    ContextualHybridRetriever,
    ContextualMilvus,
    EmbedderTokenSplitter,
    MiniLMEmbeddings,
    for_answering,
)
from llama_index_ctx import ContextualHybridRetriever as LIRetriever
from llama_index_ctx import ContextualMilvusVectorStore, ContextualNodeTransform, MiniLMEmbedding

QUESTION = "How much did ACME's revenue grow over the previous quarter?"


def main() -> None:
    sample, _ = load_sample()
    server = None
    if os.environ.get("ANTHROPIC_API_KEY"):
        provider = AnthropicProvider("claude-haiku-5-5")
        print("contextualizer: Claude (claude-haiku-5-5)")
    else:
        server = FakeAnthropicServer(latency_s=0.05).start()
        provider = AnthropicProvider(api_key="sk-ant-example-0000000000", base_url=server.base_url)
        print("contextualizer: no ANTHROPIC_API_KEY, so the local FAKE Anthropic API (canned contexts)")
    with tempfile.TemporaryDirectory() as tmp:
        generator = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite")
        try:
            # LangChain: split, contextualize, and index() into the collection (edits and deletes land on both sides)
            embeddings = MiniLMEmbeddings()
            documents = [Document(page_content=sample.text, metadata={"source": "acme_q2_2023.md"})]
            chunks = EmbedderTokenSplitter(embeddings, add_start_index=True).split_documents(documents)
            transformer = ContextualDocumentTransformer(generator)
            contextual = transformer.transform_documents(chunks)
            print(f"{len(contextual)} chunks contextualized\n" + transformer.last_report.format())  # type: ignore[union-attr]
            store = ContextualMilvus(embeddings, uri=str(Path(tmp) / "langchain.db"))
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
            embed_model = MiniLMEmbedding()
            milvus = ContextualMilvusVectorStore(str(Path(tmp) / "llama_index.db"), embed_model=embed_model)
            pipeline = IngestionPipeline(
                transformations=[SentenceSplitter(chunk_size=150, chunk_overlap=0),
                                 ContextualNodeTransform.from_generator(generator), embed_model],
                vector_store=milvus, docstore=SimpleDocumentStore(),
                docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
            nodes = pipeline.run(documents=[LIDocument(text=sample.text, id_="acme_q2_2023.md")])
            print(f"\n{len(nodes)} nodes written by the LlamaIndex pipeline")
            retriever = LIRetriever(VectorStoreIndex.from_vector_store(milvus, embed_model=embed_model),
                                    similarity_top_k=3)
            print(f"LlamaIndex, Q: {QUESTION}")
            for n, hit in enumerate(retriever.retrieve(QUESTION), start=1):
                meta = hit.node.metadata
                print(f"  {n}. [vector #{meta['vector_rank'] or '-'}, bm25 #{meta['bm25_rank'] or '-'}] "
                      f"{' '.join(hit.node.get_content().split())[:100]}...")
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
