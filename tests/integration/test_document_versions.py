"""Document versions and context reuse (issue 26, parts 1 and 2), through the real SDK against the API twin, on both
cache backends: an edited document re-pays only its changed chunks while it changed by less than the threshold,
every reused context says which version it was written from, a refresh rewrites the stale ones (nearest the edit
first, in batch mode if asked), and a model migration serves each chunk its previous context until the new one is
written: no chunk is ever without one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import AnthropicProvider, ContextGenerator, ReusePolicy
from ctx_retrieval.contextualize.cache import text_digest
from ctx_retrieval.contextualize.stores import open_context_cache
from ctx_retrieval.errors import BudgetExceededError, ConfigurationError
from ctx_retrieval.loaders import split_into_chunks
from ctx_retrieval.types import Chunk, SourceDocument
from tests.helpers import TEST_KEY, long_text

CHUNKS = 50


@pytest.fixture(params=["sqlite", "postgres"])
def cache_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "contexts.sqlite")
    return str(request.getfixturevalue("postgres").new_database())


def document(edits: dict[int, str] | None = None, doc_id: str = "handbook") -> tuple[SourceDocument, list[Chunk]]:
    """A 50-paragraph document, one chunk per paragraph; ``edits`` replaces paragraphs by index."""
    paragraphs = long_text(doc_id, CHUNKS, 40).rstrip("\n").split("\n\n")[1:]  # without the title
    for index, text in (edits or {}).items():
        paragraphs[index] = text
    text = "\n\n".join(paragraphs) + "\n"
    source = SourceDocument(doc_id, text)
    return source, split_into_chunks(source, paragraphs)


EDIT = {20: "Paragraph 20 was rewritten: the travel policy now covers rail journeys booked abroad."}


def generator(server: Any, cache: str, *, model: str = "claude-haiku-5-5", **kwargs: Any) -> ContextGenerator:
    return ContextGenerator(AnthropicProvider(model, api_key=TEST_KEY, base_url=server.base_url), cache=cache,
                            **kwargs)


def test_an_edit_repays_only_the_changed_chunk_and_says_which_version_the_rest_came_from(
        fake_server: Any, cache_url: str) -> None:
    first = generator(fake_server, cache_url).contextualize(*document())
    assert first.report.generated == CHUNKS
    fake_server.reset()
    edited = document(EDIT)
    run = generator(fake_server, cache_url, reuse=ReusePolicy(max_changed_tokens=200)).contextualize(*edited)
    totals = fake_server.totals()
    assert totals["requests"] == 1 and totals["cache_writes"] == 1  # the changed chunk alone, one cache write
    assert [r.status for r in run].count("generated") == 1 and run.report.reused == CHUNKS - 1
    old_version = text_digest(document()[0].text)[:16]
    assert {r.written_from for r in run if r.status == "reused"} == {old_version}
    assert all(r.stale and r.context for r in run if r.status == "reused")
    assert run[20].status == "generated" and run[20].written_from is None
    assert run.report.reuse_saved_usd is not None and run.report.reuse_saved_usd > run.report.cost_usd
    assert "reused 49 earlier contexts" in run.report.format()
    # the stale chunks nearest the edit come first in the report's refresh order
    distances = sorted(s.distance for s in run.report.stale)
    assert distances[:2] == [1, 1] and distances[-1] == 29

    # the default stays exact: the same edit re-pays all 50 chunks
    fake_server.reset()
    exact = generator(fake_server, cache_url).contextualize(*document({**EDIT, 21: "Paragraph 21, edited too."}))
    assert exact.report.generated == CHUNKS and exact.report.reused == 0


def test_past_the_threshold_or_beside_an_edit_a_chunk_is_rewritten(fake_server: Any, cache_url: str) -> None:
    generator(fake_server, cache_url).contextualize(*document())
    fake_server.reset()
    small = generator(fake_server, cache_url, reuse=ReusePolicy(max_changed_tokens=10)).contextualize(*document(EDIT))
    assert small.report.reused == 0 and small.report.generated == CHUNKS  # the edit is ~90 tokens: over 10
    fake_server.reset()
    other = document({5: "Paragraph 5 changed as well."})
    near = generator(fake_server, cache_url, reuse=ReusePolicy(max_changed_tokens=500, rewrite_neighbours=1))
    run = near.contextualize(*other)
    assert sorted(i for i, r in enumerate(run) if r.status == "generated") == [4, 5, 6]


def test_refresh_rewrites_stale_contexts_nearest_the_edit_first(fake_server: Any, cache_url: str) -> None:
    generator(fake_server, cache_url).contextualize(*document())
    reusing = generator(fake_server, cache_url, reuse=ReusePolicy(max_changed_tokens=200), max_concurrency=1)
    run = reusing.contextualize(*document(EDIT))
    cache: Any = open_context_cache(cache_url)
    try:
        assert (cache.stats().stale, cache.stats().versioned_chunks) == (CHUNKS - 1, CHUNKS)
    finally:
        cache.close()
    fake_server.reset()
    refreshed = reusing.refresh_stale(run.report)
    order = [r.chunk_text for r in fake_server.successful()]
    texts = [c.text for c in document(EDIT)[1]]
    assert len(order) == CHUNKS - 1 and set(order[:2]) == {texts[19], texts[21]}  # the edit's neighbours first
    assert order[-1] == texts[49]  # the farthest last
    assert refreshed.report.refreshed == CHUNKS - 1 and refreshed.report.reused == 0
    assert all(r.status in ("generated", "cached") for r in refreshed)
    fake_server.reset()
    again = reusing.contextualize(*document(EDIT))
    assert again.report.cached == CHUNKS and fake_server.totals()["requests"] == 0
    cache = open_context_cache(cache_url)
    try:
        assert cache.stats().stale == 0
    finally:
        cache.close()


def test_a_refresh_that_stops_leaves_every_chunk_with_a_context(fake_server: Any, tmp_path: Path) -> None:
    cache = str(tmp_path / "c.sqlite")
    generator(fake_server, cache).contextualize(*document())
    run = generator(fake_server, cache, reuse=ReusePolicy(max_changed_tokens=200)).contextualize(*document(EDIT))
    tight = generator(fake_server, cache, reuse=ReusePolicy(max_changed_tokens=200), budget_usd=0.002)
    with pytest.raises(BudgetExceededError) as caught:
        tight.refresh_stale(run.report)
    stopped = caught.value.run
    assert stopped is not None and all(r.context for r in stopped)
    assert 0 < stopped.report.refreshed < CHUNKS - 1
    assert stopped.report.reused == CHUNKS - 1 - stopped.report.refreshed
    assert any("not rewritten" in w for w in stopped.report.warnings)


def test_a_model_migration_never_leaves_a_chunk_without_a_context(fake_server: Any, cache_url: str) -> None:
    items = [document(doc_id=f"doc-{n}") for n in range(3)]
    generator(fake_server, cache_url, model="claude-haiku-4-5").contextualize_many(items)
    fake_server.reset()
    new = generator(fake_server, cache_url, reuse=ReusePolicy(other_models=True))
    served = new.contextualize_many(items)
    assert fake_server.totals()["requests"] == 0 and all(r.context for r in served)
    assert {r.model for r in served} == {"claude-haiku-4-5"} and served.report.on_previous_settings == 3 * CHUNKS
    assert "100.0% of chunks) written by the previous model" in served.report.format()
    # the migration, as Message Batches at half price
    refreshed = new.refresh_stale(items, batch=True, poll_interval_s=0.05)
    assert refreshed.report.batch_requests > 0 and refreshed.report.refreshed == 3 * CHUNKS
    assert {r.model for r in refreshed} == {"claude-haiku-5-5"}
    fake_server.reset()
    after = new.contextualize_many(items)
    assert after.report.cached == 3 * CHUNKS and fake_server.totals()["requests"] == 0


def test_without_the_policy_a_new_model_writes_everything(fake_server: Any, tmp_path: Path) -> None:
    cache = str(tmp_path / "c.sqlite")
    generator(fake_server, cache, model="claude-haiku-4-5").contextualize(*document())
    fake_server.reset()
    run = generator(fake_server, cache).contextualize(*document())
    assert run.report.generated == CHUNKS and run.report.reused == 0


def test_the_dry_run_counts_reuse(fake_server: Any, tmp_path: Path) -> None:
    cache = str(tmp_path / "c.sqlite")
    generator(fake_server, cache).contextualize(*document())
    estimate = generator(fake_server, cache, reuse=ReusePolicy(max_changed_tokens=200)).estimate([document(EDIT)])
    assert (estimate.requests, estimate.reused_chunks) == (1, CHUNKS - 1)
    assert estimate.reuse_saved_usd is not None and estimate.reuse_saved_usd > 0
    assert "49 chunks reuse an earlier context" in estimate.format()


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_changed_tokens"):
        ReusePolicy(max_changed_tokens=-1)
    with pytest.raises(ConfigurationError, match="ReusePolicy"):
        ContextGenerator(AnthropicProvider(api_key=TEST_KEY), cache=False, reuse=200)  # type: ignore[arg-type]


def test_reuse_in_a_chinese_document(fake_server: Any, tmp_path: Path) -> None:
    paragraphs = [f"第{n}节：公司在第二季度的收入增长了百分之{n}，主要来自东南亚市场的新客户和现有合同的续签。"
                  for n in range(12)]
    source = SourceDocument("季报", "\n\n".join(paragraphs))
    cache = str(tmp_path / "c.sqlite")
    generator(fake_server, cache).contextualize(source, split_into_chunks(source, paragraphs))
    fake_server.reset()
    paragraphs[5] = "第5节（已更正）：收入增长了百分之六，而不是百分之五。"
    edited = SourceDocument("季报", "\n\n".join(paragraphs))
    run = generator(fake_server, cache, reuse=ReusePolicy(max_changed_tokens=200)).contextualize(
        edited, split_into_chunks(edited, paragraphs))
    assert fake_server.totals()["requests"] == 1 and run.report.reused == 11
    assert run[5].status == "generated" and all(r.context for r in run)
