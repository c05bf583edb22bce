"""One context cache shared by several workers: the same module runs on SQLite (one machine) and on a real
PostgreSQL server (several machines), and both keep every promise: the first answer stored wins, counts and the
batch ledger round-trip, a document is claimed by one worker at a time, and four processes on one corpus pay each
chunk once, with each document's prompt cache written once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import AnthropicProvider, ContextGenerator
from ctx_retrieval.contextualize.cache import CachedContext
from ctx_retrieval.contextualize.leases import DocumentLeases
from ctx_retrieval.contextualize.stores import open_context_cache
from ctx_retrieval.testing import FakeAnthropicServer
from ctx_retrieval.testing.faults import synthetic_corpus
from ctx_retrieval.types import TokenUsage
from tests.helpers import TEST_KEY

ROOT = Path(__file__).resolve().parents[2]

WORKER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {root!r})
    from ctx_retrieval import AnthropicProvider, ContextGenerator
    from ctx_retrieval.testing.faults import synthetic_corpus
    base_url, cache, chunks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    provider = AnthropicProvider(api_key={key!r}, base_url=base_url)
    run = ContextGenerator(provider, cache=cache, max_concurrency=int(sys.argv[5]),
                           lease_ttl_s=float(sys.argv[4])).contextualize_many(synthetic_corpus(chunks))
    r = run.report
    print(json.dumps({{"generated": r.generated, "cached": r.cached, "shared": r.shared_documents,
                      "requests": r.requests, "with_context": sum(1 for x in run if x.context)}}))
    """
)


@pytest.fixture(params=["sqlite", "postgres"])
def cache_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "contexts.sqlite")
    return str(request.getfixturevalue("postgres").new_database())


def _workers(tmp_path: Path, base_url: str, cache_url: str, chunks: int, n: int,
             lease_ttl_s: float = 60.0, concurrency: int = 4) -> list[subprocess.Popen[str]]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(root=str(ROOT), key=TEST_KEY), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return [subprocess.Popen([sys.executable, str(script), base_url, cache_url, str(chunks), str(lease_ttl_s),
                              str(concurrency)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(n)]


def test_entries_counts_and_the_batch_ledger_round_trip(cache_url: str) -> None:
    cache = open_context_cache(cache_url)
    first = CachedContext("first answer", "anthropic", "m", "v1", TokenUsage(10, 5, 0, 90))
    cache.put("k1", first)
    cache.put("k1", CachedContext("a later answer", "anthropic", "m", "v1", TokenUsage(1, 1)))  # the first wins
    assert cache.get_many(["k1", "missing"]) == {"k1": first}
    cache.put_token_count("model@endpoint", "d1", 1234)
    assert cache.get_token_counts("model@endpoint", ["d1", "d2"]) == {"d1": 1234}
    cache.record_batch("batch-1", ["k2", "k3"])
    assert {b: sorted(k) for b, k in cache.batches_in_flight().items()} == {"batch-1": ["k2", "k3"]}
    cache.forget_batch("batch-1")
    assert cache.batches_in_flight() == {}
    reopened = open_context_cache(cache_url)  # another worker sees what this one stored
    assert reopened.get_many(["k1"]) == {"k1": first}
    cache.close()
    reopened.close()


def test_a_claim_stands_until_released_or_expired(cache_url: str) -> None:
    store: Any = open_context_cache(cache_url)
    assert store.claim("doc:a", "host-1:1:x", 30) is None
    assert store.claim("doc:a", "host-2:2:y", 30) == "host-1:1:x"  # a live claim stands
    assert store.claim("doc:a", "host-1:1:x", 30) is None  # its holder may extend it
    assert store.renew("host-1:1:x", 30) == ["doc:a"]  # the keys it still holds
    store.release("doc:a", "host-1:1:x")
    assert store.claim("doc:a", "host-2:2:y", 0.5) is None  # released: the next worker gets it
    assert store.claim("doc:a", "host-1:1:x", 30) == "host-2:2:y"
    time.sleep(0.8)
    assert store.claim("doc:a", "host-1:1:x", 30) is None  # expired (its worker stopped renewing): taken over
    store.close()


def test_four_processes_on_one_cache_pay_each_chunk_once(cache_url: str, tmp_path: Path) -> None:
    chunks = 200  # 10 documents of 20 chunks
    with FakeAnthropicServer(latency_s=0.02) as server:
        workers = _workers(tmp_path, server.base_url, cache_url, chunks, 4)
        outputs = [json.loads(w.communicate(timeout=180)[0]) for w in workers]
        assert all(w.returncode == 0 for w in workers)
        totals = server.totals()
    assert sum(o["generated"] for o in outputs) == chunks  # each chunk written by exactly one worker
    assert totals["ok"] == chunks and totals["requests"] == chunks  # and paid once: no request twice
    assert all(o["with_context"] == chunks for o in outputs)  # every worker returns every chunk's context
    assert all(o["generated"] + o["cached"] == chunks for o in outputs)
    assert sum(o["shared"] for o in outputs) > 0  # the workers did meet on documents
    assert totals["cache_entries_written"] == 10 and totals["max_writes_per_entry"] == 1  # one cache write each


def test_a_killed_workers_documents_are_taken_over_and_nothing_is_paid_twice(cache_url: str, tmp_path: Path) -> None:
    chunks = 60
    with FakeAnthropicServer(latency_s=0.3) as server:
        # Its leases would last an hour: a run that waited for them to expire, not for the process that holds them,
        # would end at the test's timeout, not here.
        (doomed,) = _workers(tmp_path, server.base_url, cache_url, chunks, 1, lease_ttl_s=3600.0)
        deadline = time.monotonic() + 60
        while server.totals()["ok"] < 3 and time.monotonic() < deadline:  # it holds documents, mid-way
            time.sleep(0.05)
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=30)
        # Its requests in flight finish on the server side first (0.3 s latency): an answer recorded and then found
        # undeliverable is taken back, and one counted before that would be paid twice in this arithmetic.
        deadline = time.monotonic() + 60  # a liveness bound, not a speed bound
        while server.answering and time.monotonic() < deadline:
            time.sleep(0.05)
        paid_before = server.totals()["ok"]
        run = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), cache=cache_url,
                               max_concurrency=8).contextualize_many(synthetic_corpus(chunks))
        paid_after = server.totals()["ok"]
    # Its claims were taken over at once (a process of this machine that no longer exists): the run ended.
    assert all(r.context for r in run) and run.report.failed == 0
    # Nothing the killed worker stored was asked again; requests it had in flight died with it (at most its slots).
    assert run.report.cached >= paid_before - 4 and paid_after - paid_before == run.report.generated
    assert run.report.generated + run.report.cached == chunks


def _stored(cache_url: str) -> int:
    cache = open_context_cache(cache_url)
    try:
        return len(cache)
    finally:
        cache.close()


def test_a_worker_stalled_past_its_lease_does_not_pay_for_what_the_next_one_wrote(cache_url: str,
                                                                                 tmp_path: Path) -> None:
    chunks, concurrency = 40, 2
    with FakeAnthropicServer(latency_s=0.1) as server:
        (stalled,) = _workers(tmp_path, server.base_url, cache_url, chunks, 1, lease_ttl_s=3.0,
                              concurrency=concurrency)
        deadline = time.monotonic() + 60
        while server.totals()["ok"] < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(stalled.pid, signal.SIGSTOP)  # a GC pause, a VM migration: alive, holding its leases, silent
        # Answers the server sent that the stopped worker had not stored yet are as much in flight as its
        # requests on the wire (a loaded machine widens that window): count them at the stop.
        unstored_at_stop = max(0, server.totals()["ok"] - _stored(cache_url))
        try:
            run = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), cache=cache_url,
                                   max_concurrency=8, lease_ttl_s=3.0).contextualize_many(synthetic_corpus(chunks))
            written_by_next = run.report.generated
        finally:
            os.kill(stalled.pid, signal.SIGCONT)
        output = json.loads(stalled.communicate(timeout=120)[0])
        paid = server.totals()["ok"]
    assert stalled.returncode == 0 and output["with_context"] == chunks and run.report.failed == 0
    assert written_by_next > chunks // 2 and run.report.shared_documents >= 1  # it waited out the leases, then wrote
    # Paid twice at most: the requests the stalled worker had in flight when it stopped (its slots), never the
    # chunks the next worker wrote meanwhile (it re-read the cache before its next request: 64 of 120 before).
    in_flight = concurrency + unstored_at_stop
    assert paid - chunks <= in_flight, (paid, unstored_at_stop, output)
    assert output["generated"] + written_by_next <= chunks + in_flight


def test_an_expired_claim_of_another_machine_is_taken_over(cache_url: str) -> None:
    items, other = synthetic_corpus(20), synthetic_corpus(2, first_document=1)
    with FakeAnthropicServer() as server:
        generator = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url), cache=cache_url,
                                     lease_ttl_s=2.0)
        # The claim below lasts 2 s of the store's time: a first run pays the client's start (the SDK's import, its
        # connection pool; over a second in a fresh process) so the run under test reaches the claim well inside it.
        generator.contextualize_many(other)
        plan = generator._planner.plan(items)[0]
        store: Any = generator.cache
        started = time.monotonic()
        assert store.claim(DocumentLeases.key(plan), "another-host|another-boot/1|42|1|dead", 2.0) is None  # it died
        run = generator.contextualize_many(items)
        waited = time.monotonic() - started
    assert all(r.context for r in run) and run.report.generated == 20
    generator.close()
    # It waited out the lease, then wrote the document. The lease runs on the store's own clock (the database's
    # time, shared by every worker), which no test clock can stand in for: a lower bound, which load only lengthens.
    assert run.report.shared_documents == 1 and waited >= 1.9


def test_the_postgres_password_stays_out_of_reprs_and_pickles(postgres: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from ctx_retrieval.contextualize.cache_postgres import CACHE_URL_ENV, redact_url

    url = postgres.new_database().replace("ctx@", "ctx:s3cret-canary@")  # trust authentication ignores it
    cache = open_context_cache(url)
    assert "s3cret-canary" not in repr(cache) and b"s3cret-canary" not in pickle.dumps(cache)
    assert redact_url(url) == url.replace(":s3cret-canary", "")
    monkeypatch.setenv(CACHE_URL_ENV, url)  # a worker given the full URL in its environment
    restored = pickle.loads(pickle.dumps(cache))
    restored.put("k", CachedContext("x", "p", "m", "v", TokenUsage()))
    assert cache.get_many(["k"])["k"].raw_text == "x"
    cache.close()
    restored.close()
    # A generator given the URL (LlamaIndex's num_workers and Ray pickle it) carries it without the password.
    generator = ContextGenerator(AnthropicProvider(api_key=TEST_KEY), cache=url)
    assert b"s3cret-canary" not in pickle.dumps(generator) and "s3cret-canary" not in repr(generator.__dict__)
    clone = pickle.loads(pickle.dumps(generator))
    assert clone.cache is not None and clone.cache.get_many(["k"])["k"].raw_text == "x"  # the password from the env
    clone.close()
    generator.close()


def test_ray_actors_never_receive_the_password(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    from ctx_retrieval import ConfigurationError
    from ctx_retrieval.contextualize.cache_postgres import CACHE_URL_ENV
    from ctx_retrieval.distributed import _actor_cache

    url = "postgresql://ctx:s3cret-canary@db-host:5432/contexts"
    monkeypatch.delenv(CACHE_URL_ENV, raising=False)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    with pytest.raises(ConfigurationError, match=CACHE_URL_ENV) as caught:
        _actor_cache(url)
    assert "s3cret-canary" not in str(caught.value)
    monkeypatch.setenv(CACHE_URL_ENV, url)  # the actors can learn it from their environment
    assert b"s3cret-canary" not in pickle.dumps(_actor_cache(url))
    assert _actor_cache("postgresql://ctx@db-host/contexts") == "postgresql://ctx@db-host/contexts"


def test_a_postgres_cache_nobody_closed_is_closed_even_when_collected_in_its_pools_thread(
        postgres: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector runs in whichever thread allocates, one of the pool's own included; psycopg's pool closed there
    by its ``__del__`` joins the thread it runs in (``RuntimeError``, reported as unraisable). The cache closes the
    pool itself, from another thread when it must."""
    import threading
    import weakref

    raised: list[str] = []  # not the exceptions: their tracebacks would keep the pool alive
    monkeypatch.setattr(sys, "unraisablehook", lambda report: raised.append(repr(report.exc_value)))
    holder = [open_context_cache(postgres.new_database())]
    pool = weakref.ref(holder[0]._pool)  # type: ignore[attr-defined]
    dropped = threading.Event()

    class DropTheCache:  # a task the pool runs in one of its workers: the cache's last reference goes there
        def run(self) -> None:
            holder.clear()
            dropped.set()

    pool().run_task(DropTheCache())  # type: ignore[union-attr]
    assert dropped.wait(60)
    for closer in [t for t in threading.enumerate() if t.name == "ctx-retrieval-cache-close"]:
        closer.join(60)
    assert raised == [] and pool() is None  # nothing raised in the pool's threads; closed and collected
