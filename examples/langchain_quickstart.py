"""LangChain quickstart: split, contextualize, index (in memory: vectors + BM25), ask, read the usage report.

    .venv/bin/python examples/langchain_quickstart.py

With ANTHROPIC_API_KEY set, Claude writes the contexts. Without it the example runs offline against the bundled
fake Anthropic API (the real request flow, prompt caching and cost accounting, with canned contexts), and says so.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from langchain_core.documents import Document

from ctx_retrieval import ContextGenerator
from ctx_retrieval.loaders import load_sample
from ctx_retrieval.testing import claude_or_fake
from langchain_ctx import (
    ContextualDocumentTransformer,
    ContextualHybridRetriever,
    EmbedderTokenSplitter,
    MiniLMEmbeddings,
    for_answering,
)

QUESTIONS = ["How much did ACME's revenue grow over the previous quarter?",
             "Who is ACME's new chief financial officer?"]


def main() -> None:
    sample, _ = load_sample()
    documents = [Document(page_content=sample.text, metadata={"source": "acme_q2_2023.md"})]
    embeddings = MiniLMEmbeddings()
    # chunks of at most 150 MiniLM tokens: with a context of up to 100 they fit its 256-token input, in any language
    chunks = EmbedderTokenSplitter(embeddings, add_start_index=True).split_documents(documents)

    with tempfile.TemporaryDirectory() as tmp:
        with claude_or_fake() as provider:
            transformer = ContextualDocumentTransformer(ContextGenerator(provider, cache=Path(tmp) / "c.sqlite"))
            contextual = transformer.transform_documents(chunks)
        print(f"{len(contextual)} chunks contextualized\n" + transformer.last_report.format())  # type: ignore[union-attr]

        # LangChain's InMemoryVectorStore + the core BM25; pass client= or persist_directory= for Chroma.
        retriever = ContextualHybridRetriever.from_documents(contextual, embeddings, k=3)
        for question in QUESTIONS:
            print(f"\nQ: {question}")
            for n, doc in enumerate(for_answering(retriever.invoke(question)), start=1):
                ranks = f"vector #{doc.metadata['vector_rank'] or '-'}, bm25 #{doc.metadata['bm25_rank'] or '-'}"
                print(f"  {n}. score {doc.metadata['fused_score']:.2f} [{ranks}] "
                      f"{' '.join(doc.page_content.split())[:90]}...")
                print(f"     context: {doc.metadata['context']}")


if __name__ == "__main__":
    main()
