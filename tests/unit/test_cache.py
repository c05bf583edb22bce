"""The SQLite context cache: persistence, first-writer-wins, and several processes at once."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

from ctx_retrieval import ContextCache, TokenUsage
from ctx_retrieval.contextualize.cache import CachedContext, context_cache_key


def entry(text: str) -> CachedContext:
    return CachedContext(text, "anthropic", "claude-haiku-5-5", "ctx-v1", TokenUsage(10, 5, 100, 0))


def test_entries_persist_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    with ContextCache(path) as cache:
        cache.put("k1", entry("first"))
    with ContextCache(path) as cache:
        assert cache.get("k1") == entry("first")
        assert cache.get("missing") is None and len(cache) == 1
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_first_writer_wins(tmp_path: Path) -> None:
    with ContextCache(tmp_path / "c.sqlite") as cache:
        cache.put("k", entry("first"))
        cache.put("k", entry("second"))
        assert cache.get("k") == entry("first")


def test_get_many_handles_more_keys_than_sqlite_variables(tmp_path: Path) -> None:
    with ContextCache(tmp_path / "c.sqlite") as cache:
        for i in range(1200):
            cache.put(f"k{i}", entry(str(i)))
        found = cache.get_many([f"k{i}" for i in range(0, 1500)])
    assert len(found) == 1200 and found["k1199"].raw_text == "1199"


def test_key_depends_on_every_part() -> None:
    base = dict(provider="anthropic", model="m", prompt_fingerprint="p", window="w", document_digest="d",
                chunk_text="c", extra="e")
    keys = {context_cache_key(**base)}  # type: ignore[arg-type]
    for name in base:
        keys.add(context_cache_key(**{**base, name: base[name] + "x"}))  # type: ignore[arg-type]
    assert len(keys) == len(base) + 1
    # Length-prefixed parts: moving text between parts changes the key.
    assert context_cache_key(**{**base, "model": "mx", "prompt_fingerprint": ""}) != context_cache_key(  # type: ignore[arg-type]
        **{**base, "model": "m", "prompt_fingerprint": "x"})


def _writer(path: str, worker: int, n: int) -> None:
    cache = ContextCache(path)
    for i in range(n):
        cache.put(f"shared-{i}", entry(f"worker {worker}"))  # every worker races on the same keys
        cache.put(f"own-{worker}-{i}", entry(f"worker {worker} item {i}"))
    cache.close()


def test_several_processes_write_at_once_without_corruption(tmp_path: Path) -> None:
    path = str(tmp_path / "c.sqlite")
    ContextCache(path).close()
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(path, w, 200)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
        assert p.exitcode == 0
    with ContextCache(path) as cache:
        assert len(cache) == 200 + 4 * 200
        shared = cache.get_many([f"shared-{i}" for i in range(200)])
        assert all(e.raw_text.startswith("worker ") for e in shared.values()) and len(shared) == 200
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchone() == ("ok",)
