"""Contextualize a document's chunks with the Claude request flow, offline.

Runs the real `anthropic` SDK against the bundled local fake Anthropic API (canned contexts, real prompt
caching, retries and cost accounting), so it needs no key and no network. Set ANTHROPIC_API_KEY and drop the
fake server to use Claude itself.

    .venv/bin/python examples/contextualize_offline.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ctx_retrieval import AnthropicProvider, ContextGenerator, SourceDocument, split_into_chunks
from ctx_retrieval.loaders import load_sample
from ctx_retrieval.testing import FakeAnthropicServer


def main() -> None:
    sample, _ = load_sample()
    document = SourceDocument(id="acme-q2-2023", text=sample.text, metadata={"source": "sample"})
    # Any splitter works: chunks only need to be pieces of the document's text.
    paragraphs = [p for p in document.text.split("\n\n") if p.strip()]
    chunks = split_into_chunks(document, paragraphs)

    with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer(latency_s=0.05) as server:
        provider = AnthropicProvider("claude-haiku-5-5", api_key="sk-ant-example-000000000000",
                                     base_url=server.base_url)
        generator = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite", max_concurrency=8)
        print(generator.estimate([(document, chunks)]).format())
        run = generator.contextualize(document, chunks)
        revenue = next(c for c in chunks if "revenue grew by 3%" in c.text)
        result = run[revenue.position]
        print("\nindexed text of the revenue chunk:\n" + result.contextualized_text(revenue.text)[:400])
        print("\n" + run.report.format())
        again = generator.contextualize(document, chunks)
        print(f"\nsecond run: {again.report.requests} requests, {again.report.cached} contexts from the cache")


if __name__ == "__main__":
    main()
