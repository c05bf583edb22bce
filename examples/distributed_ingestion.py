"""Distributed ingestion: Ray actors write the contexts into a shared cache, then a LlamaIndex IngestionPipeline and
a LangChain flow build their indexes from it, paying for nothing twice.

    .venv/bin/python examples/distributed_ingestion.py

Starts a local Ray cluster (127.0.0.1). The cache is $CTX_RETRIEVAL_CACHE_URL (a postgresql:// URL, for actors on
several machines) or a SQLite file in a temporary folder (actors on this machine). With ANTHROPIC_API_KEY set,
Claude writes the contexts; without it the bundled fake Anthropic API does (canned contexts), and it says so.

The framework steps split the documents first (their splitters decide the chunks), the fleet contextualizes those
chunks, and each framework's contextual step then finds every context in the cache: its report shows 0 requests.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import ray
from langchain_core.documents import Document as LCDocument
from langchain_text_splitters import RecursiveCharacterTextSplitter
from llama_index.core import Document
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore

from ctx_retrieval import AnthropicProvider, ContextGenerator
from ctx_retrieval.distributed import contextualize_dataset
from ctx_retrieval.loaders import load_sample
from ctx_retrieval.testing import claude_or_fake
from langchain_ctx import ContextualDocumentTransformer
from llama_index_ctx import ContextualNodeTransform


def main() -> None:
    sample, _ = load_sample()
    # the actors read the key from their environment
    with claude_or_fake(latency_s=0.02, key_in_env=True) as provider, tempfile.TemporaryDirectory() as tmp:
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
        try:
            cache = os.environ.get("CTX_RETRIEVAL_CACHE_URL") or str(Path(tmp) / "contexts.sqlite")
            run(provider, cache, sample.text)
        finally:
            ray.shutdown()


def run(provider: AnthropicProvider, cache: str, text: str) -> None:
    # 1. Each framework splits as it will index; the fleet contextualizes exactly those chunks.
    li_document = Document(text=text, id_="acme-q2-2023")
    li_splitter = SentenceSplitter(chunk_size=150, chunk_overlap=15)
    li_chunks = [n.get_content() for n in li_splitter.get_nodes_from_documents([li_document])]
    lc_splitter = RecursiveCharacterTextSplitter(chunk_size=600, chunk_overlap=60, add_start_index=True)
    lc_chunks = lc_splitter.split_documents([LCDocument(page_content=text, metadata={"source": "acme-q2-2023"})])
    rows = [{"id": "acme-q2-2023/llama-index", "text": text, "chunks": li_chunks},
            {"id": "acme-q2-2023/langchain", "text": text, "chunks": [c.page_content for c in lc_chunks]}]
    contexts = contextualize_dataset(ray.data.from_items(rows), provider=provider, cache=cache, actors=2,
                                     documents_per_batch=1).take_all()
    print(f"the fleet wrote {sum(1 for r in contexts if r['status'] == 'generated')} contexts "
          f"({sum(1 for r in contexts if r['context'])} of {len(contexts)} chunks have one)")

    # 2. LlamaIndex: the usual pipeline; its contextual step reads every context from the shared cache.
    docstore = SimpleDocumentStore()
    docstore.add_documents([li_document])
    transform = ContextualNodeTransform(llm=ContextGenerator(provider, cache=cache), docstore=docstore)
    nodes = IngestionPipeline(transformations=[li_splitter, transform]).run(documents=[li_document])
    report = transform.last_report
    print(f"LlamaIndex pipeline: {len(nodes)} nodes, requests {report.requests}, from the cache {report.cached}")

    # 3. LangChain: the transformer over the same splits, on the same cache.
    transformer = ContextualDocumentTransformer(ContextGenerator(provider, cache=cache))
    documents = transformer.transform_documents(lc_chunks, source_documents=[
        LCDocument(page_content=text, metadata={"source": "acme-q2-2023"})])
    report = transformer.last_report
    assert report is not None
    print(f"LangChain flow: {len(documents)} documents, requests {report.requests}, from the cache {report.cached}")
    print("\nfirst LangChain document as indexed:\n" + documents[0].page_content[:300])


if __name__ == "__main__":
    main()
