"""Cache housekeeping (issue 26, part 3) on both backends: each context records the document it was written for;
stats report what the cache holds; prune drops the contexts of documents that no longer exist, or those older than
a date, and a later run re-pays only what was pruned. An older SQLite cache gains the column and keeps its rows."""

from __future__ import annotations

import datetime
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import AnthropicProvider, ContextGenerator
from ctx_retrieval.cli import main
from ctx_retrieval.contextualize.cache import CachedContext, ContextCache
from ctx_retrieval.contextualize.stores import open_context_cache
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.types import TokenUsage
from tests.helpers import TEST_KEY, make_document


@pytest.fixture(params=["sqlite", "postgres"])
def cache_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "contexts.sqlite")
    return str(request.getfixturevalue("postgres").new_database())


def test_stats_and_pruning_by_live_documents_and_by_date(cache_url: str, fake_server: Any) -> None:
    items = [make_document(name, paragraphs=4) for name in ("alpha", "beta", "gamma")]
    provider = AnthropicProvider(api_key=TEST_KEY, base_url=fake_server.base_url)
    ContextGenerator(provider, cache=cache_url).contextualize_many(items)
    cache: Any = open_context_cache(cache_url)
    try:
        stats = cache.stats()
        assert (stats.contexts, stats.documents, stats.unattributed) == (12, 3, 0)
        assert stats.by_model == {"claude-haiku-5-5": 12} and stats.bytes > 0 and stats.oldest <= stats.newest
        assert "12 contexts for 3 documents" in stats.format()
        # "gamma" was deleted from the corpus: its contexts go, the live documents' stay
        assert cache.prune(keep_documents=["alpha", "beta"], dry_run=True) == 4 and len(cache) == 12
        assert cache.prune(keep_documents=["alpha", "beta"]) == 4
        assert cache.stats().documents == 2
        assert cache.prune(older_than=time.time() - 3600) == 0  # nothing is an hour old
        with pytest.raises(ConfigurationError, match="keep_documents"):
            cache.prune()
    finally:
        cache.close()
    fake_server.reset()
    again = ContextGenerator(provider, cache=cache_url).contextualize_many(items)
    assert again.report.cached == 8 and again.report.generated == 4  # only gamma is paid again
    cache = open_context_cache(cache_url)
    try:
        assert cache.prune(older_than=datetime.date.today() + datetime.timedelta(days=1)) == 12  # all of them
        assert len(cache) == 0
    finally:
        cache.close()


def test_an_older_sqlite_cache_gains_document_ids_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE contexts (key TEXT PRIMARY KEY, raw_text TEXT NOT NULL, provider TEXT NOT NULL, "
                 "model TEXT NOT NULL, prompt_version TEXT NOT NULL, usage TEXT NOT NULL, created_at REAL NOT NULL)")
    conn.execute("INSERT INTO contexts VALUES ('old', 'a context', 'anthropic', 'm', 'ctx-v1', ?, ?)",
                 (json.dumps(TokenUsage().to_dict()), time.time()))
    conn.commit()
    conn.close()
    with ContextCache(path) as cache:
        assert cache.get("old") is not None
        cache.put("new", CachedContext("another", "anthropic", "m", "ctx-v1", TokenUsage(), "doc-1"))
        stats = cache.stats()
        assert (stats.contexts, stats.documents, stats.unattributed) == (2, 1, 1)
        assert cache.prune(keep_documents=[]) == 1  # an unattributed row is pruned by date only
        assert cache.get("old") is not None and cache.get("new") is None


def test_the_cli_reports_and_prunes(tmp_path: Path, fake_server: Any, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b"):
        (docs / f"{name}.md").write_text(f"# Report {name}\n\nFirst paragraph of {name}.\n\nSecond of {name}.\n",
                                         encoding="utf-8")
    cache = tmp_path / "c.sqlite"
    provider = AnthropicProvider(api_key=TEST_KEY, base_url=fake_server.base_url)
    from ctx_retrieval.loaders import load_documents

    ContextGenerator(provider, cache=cache).contextualize_many(load_documents([str(docs)], 450))
    assert main(["cache", "stats", "--cache", str(cache)]) == 0
    assert "for 2 documents" in capsys.readouterr().out
    (docs / "b.md").unlink()
    assert main(["cache", "prune", "--cache", str(cache), "--live", str(docs), "--dry-run"]) == 0
    assert "would delete 1 contexts (1 live documents)" in capsys.readouterr().out
    assert main(["cache", "prune", "--cache", str(cache), "--live", str(docs), "--compact"]) == 0
    assert "deleted 1 contexts" in capsys.readouterr().out
    assert main(["cache", "prune", "--cache", str(cache)]) == 2
    assert "keep_documents" in capsys.readouterr().err
    assert main(["cache", "prune", "--cache", str(cache), "--older-than", "yesterday"]) == 2


def test_prune_never_deletes_what_a_live_run_wrote_under_its_lease(cache_url: str) -> None:
    cache: Any = open_context_cache(cache_url)
    try:
        assert cache.claim("doc:lease", "host:1:run", 600.0) is None  # a live run holds a document's lease ...
        cache.put("paid", CachedContext("just paid for", "anthropic", "m", "ctx-v1", TokenUsage(), "gone"))
        assert cache.prune(keep_documents=[], dry_run=True) == 0
        assert cache.prune(keep_documents=[]) == 0 and cache.get("paid") is not None  # ... so its context stays
        assert cache.prune(older_than=time.time() + 3600) == 0
        if isinstance(cache, ContextCache):  # what was written before the oldest live lease began is pruned as ever
            cache.put("old", CachedContext("old", "anthropic", "m", "ctx-v1", TokenUsage(), "gone"))
            cache._conn.execute("UPDATE contexts SET created_at = created_at - 7200 WHERE key = 'old'")
            assert cache.prune(keep_documents=[]) == 1 and cache.get("old") is None
        cache.release_owner("host:1:run")  # the run ended
        assert cache.prune(keep_documents=[]) == 1 and cache.get("paid") is None
    finally:
        cache.close()


def test_a_prune_during_a_run_keeps_every_context_the_run_paid_for(cache_url: str) -> None:
    from ctx_retrieval.testing import FakeAnthropicServer

    items = [make_document(name, paragraphs=3) for name in ("alpha", "beta", "gamma")]
    pruned: list[int] = []

    def pruning_meanwhile(body: dict[str, Any]) -> str:  # a housekeeping job prunes while gamma is written
        document = body["messages"][0]["content"][0]["text"]
        if "gamma" in document.lower() and not pruned:
            other: Any = open_context_cache(cache_url)
            try:
                pruned.append(other.prune(keep_documents=[]))  # nothing is live by its list
            finally:
                other.close()
        return "A context."

    with FakeAnthropicServer(responder=pruning_meanwhile) as server:
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        first = ContextGenerator(provider, cache=cache_url, max_concurrency=1).contextualize_many(items)
        assert pruned == [0] and first.report.generated == 9  # alpha and beta were done, their leases released
        server.reset()
        again = ContextGenerator(provider, cache=cache_url).contextualize_many(items)
        assert again.report.cached == 9 and server.requests == []  # nothing paid for was lost
