"""LlamaIndex quickstart: an IngestionPipeline with a contextual step, hybrid retrieval (vectors + BM25), a report.

    .venv/bin/python examples/llama_index_quickstart.py

With ANTHROPIC_API_KEY set, Claude writes the contexts. Without it the example runs offline against the bundled
fake Anthropic API (the real request flow, prompt caching and cost accounting, with canned contexts), and says so.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.schema import MetadataMode

from ctx_retrieval import ContextGenerator
from ctx_retrieval.loaders import load_sample
from ctx_retrieval.testing import claude_or_fake
from llama_index_ctx import ContextualHybridRetriever, ContextualNodeTransform, EmbedderTokenSplitter, MiniLMEmbedding

QUESTIONS = ["How much did ACME's revenue grow over the previous quarter?",
             "Which company did ACME agree to acquire after the quarter?"]


def main() -> None:
    sample, _ = load_sample()
    embed_model = MiniLMEmbedding()
    documents = [Document(text=sample.text, id_="acme-q2-2023", metadata={"file_name": "acme_q2_2023.md"})]

    with tempfile.TemporaryDirectory() as tmp:
        with claude_or_fake() as provider:
            transform = ContextualNodeTransform(llm=ContextGenerator(provider, cache=Path(tmp) / "c.sqlite"))
            # nodes of at most 150 MiniLM tokens (metadata it embeds included): with a context of up to 100 they
            # fit its 256-token input, in any language
            splitter = EmbedderTokenSplitter(embed_model)
            pipeline = IngestionPipeline(transformations=[splitter, transform])
            nodes = pipeline.run(documents=documents)
        print(f"{len(nodes)} nodes contextualized\n" + transform.last_report.format())

        # In memory (SimpleVectorStore, as VectorStoreIndex(nodes)); vector_store= takes any other store.
        retriever = ContextualHybridRetriever.from_defaults(nodes=nodes, embed_model=embed_model,
                                                            similarity_top_k=3)
        for question in QUESTIONS:
            print(f"\nQ: {question}")
            for n, hit in enumerate(retriever.retrieve(question), start=1):
                text = " ".join(hit.node.get_content(metadata_mode=MetadataMode.NONE).split())
                meta = hit.node.metadata
                ranks = f"vector #{meta['vector_rank'] or '-'}, bm25 #{meta['bm25_rank'] or '-'}"
                print(f"  {n}. score {hit.score:.2f} [{ranks}] {text[:90]}...")
                print(f"     context: {hit.node.metadata['context']}")


if __name__ == "__main__":
    main()
