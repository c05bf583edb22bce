"""A living corpus, offline: an edited document pays only its changed chunk, a model migration keeps every chunk's
context until the new one is written, and refreshes rewrite what is stale (in batch mode, at half price).

Runs the real `anthropic` SDK against the bundled local fake Anthropic API (real prompt caching, batches and cost
accounting). With a key, drop the fake server: the calls are the same.

    .venv/bin/python examples/edits_and_migrations.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ctx_retrieval import AnthropicProvider, ContextGenerator, ReusePolicy, SourceDocument, split_into_chunks
from ctx_retrieval.loaders import load_sample
from ctx_retrieval.testing import FakeAnthropicServer

KEY = "sk-ant-example-000000000000"


def chunked(text: str) -> tuple[SourceDocument, list]:
    document = SourceDocument(id="acme-q2-2023", text=text)
    return document, split_into_chunks(document, [p for p in text.split("\n\n") if p.strip()])


def main() -> None:
    sample, _ = load_sample()
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer() as server:
        cache = Path(tmp) / "contexts.sqlite"

        def generator(model: str, reuse: ReusePolicy | None = None) -> ContextGenerator:
            return ContextGenerator(AnthropicProvider(model, api_key=KEY, base_url=server.base_url), cache=cache,
                                    reuse=reuse)

        first = generator("claude-sonnet-4-6").contextualize(*chunked(sample.text))
        print(first.report.format(warnings=False))

        # 1. An edit: one paragraph changes; its chunk is written, the others keep their contexts (stale).
        edited = sample.text.replace("grew by 3%", "grew by 4%")
        reusing = generator("claude-sonnet-4-6", ReusePolicy(max_changed_tokens=300))
        run = reusing.contextualize(*chunked(edited))
        print(f"\nedit: {run.report.requests} request, {run.report.reused} contexts reused "
              f"(written from version {run[1].written_from}), reuse saved ${run.report.reuse_saved_usd:.5f}")
        refreshed = reusing.refresh_stale(run.report)
        print(f"refresh: {refreshed.report.refreshed} stale contexts rewritten, nearest the edit first")

        # 2. A migration to Claude Haiku 5.5: every chunk keeps its Sonnet 4.6 context until the new one is written.
        migrating = generator("claude-haiku-5-5", ReusePolicy(other_models=True))
        served = migrating.contextualize(*chunked(edited))
        print(f"\nmigration: {served.report.requests} requests, {served.report.on_previous_settings} of "
              f"{len(served)} chunks still on the previous model, "
              f"{sum(1 for r in served if not r.context)} without a context")
        done = migrating.refresh_stale(served.report, batch=True, poll_interval_s=0.05)
        print(f"migrated in batch mode: {done.report.batch_requests} batch requests, models now "
              f"{sorted({r.model for r in done})}")


if __name__ == "__main__":
    main()
