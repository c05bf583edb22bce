"""Holds the twin against the real Anthropic API. Opt-in: ``CTX_RETRIEVAL_LIVE=1 ANTHROPIC_API_KEY=... pytest
tests/live`` (a few cents at claude-haiku-5-5 prices). Skipped otherwise, and never run in CI.

Each test does the same thing against the real API that a twin test does against the fake, and checks the
answer has the shape and the behaviour the twin gives: if one fails, the twin (or the package) is wrong.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from ctx_retrieval import AnthropicProvider, Chunk, ContextGenerator, SourceDocument, split_into_chunks
from ctx_retrieval.models import MODELS

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not (os.environ.get("CTX_RETRIEVAL_LIVE") == "1" and os.environ.get("ANTHROPIC_API_KEY")),
                       reason="live API tests: set CTX_RETRIEVAL_LIVE=1 and ANTHROPIC_API_KEY"),
]

PARAGRAPHS = [
    "ACME Corp quarterly report, Q2 2026. This filing covers the three months ended June 30, 2026.",
    "Revenue grew 3% over the previous quarter to $314 million, led by the anvil segment in Tucson.",
    "Operating margin fell to 11.2% as steel costs rose; the Rotterdam foundry ran at 84% capacity.",
    "Outlook: management expects flat revenue in Q3 and a warranty charge of about $4 million.",
] + [f"Appendix note {i}: inventory of skates, traps and rockets counted at the Tucson warehouse, lot {i}."
     for i in range(40)]  # the appendix makes the document longer than Claude Haiku 5.5's 512-token minimum


def _document() -> tuple[SourceDocument, list[Chunk]]:
    document = SourceDocument("acme-q2", "\n\n".join(PARAGRAPHS))
    return document, split_into_chunks(document, PARAGRAPHS)


def test_default_model_writes_contexts_and_caches_the_document(tmp_path: Path) -> None:
    document, chunks = _document()
    generator = ContextGenerator(AnthropicProvider(), cache=tmp_path / "c.sqlite", max_concurrency=2)
    run = generator.contextualize(document, chunks[:4])
    assert generator.provider.model == "claude-haiku-5-5"
    assert all(r.context and r.status == "generated" for r in run), run.report.format()
    usage = [r.usage for r in run]
    # The first request writes the document's cache entry; the later ones read it (the twin's rule).
    assert usage[0].cache_creation_input_tokens > 0
    assert all(u.cache_read_input_tokens > 0 for u in usage[1:])
    assert run.report.cost_usd is not None and run.report.cost_usd < 0.01


def test_count_tokens_matches_the_newer_tokenizer() -> None:
    document, _ = _document()
    provider = AnthropicProvider()
    exact = asyncio.run(provider.acount_tokens(document.text))
    estimate = ContextGenerator(provider, cache=False).count_tokens(document.text)
    assert MODELS["claude-haiku-5-5"].tokenizer_ratio == 1.3
    assert 0.7 * estimate < exact < 1.3 * estimate  # our offline estimate is within the planning margin


def test_a_batch_of_two(tmp_path: Path) -> None:
    document, chunks = _document()
    generator = ContextGenerator(AnthropicProvider(cache_ttl="1h"), cache=tmp_path / "b.sqlite")
    run = generator.contextualize_many_batched([(document, chunks[:3])], poll_interval_s=10.0)
    assert run.report.batch_requests == 2 and all(r.context for r in run), run.report.format()


def test_every_row_of_the_model_table_agrees_with_the_models_api() -> None:
    """``GET /v1/models`` describes what the key's API serves: windows, output limits, thinking capabilities. A
    table row that drifted from it (a retired model, a changed limit) fails here for anyone with a key."""
    import anthropic

    from ctx_retrieval.models import drift

    listing = [model.model_dump() for model in anthropic.Anthropic().models.list(limit=1000)]
    assert listing, "the Models API listed no model"
    assert drift(listing) == []
