"""A cache that fails mid-run costs no paid answer: a failed batch write rolls back, a full disk keeps answers in the
run's results, a read-only folder still serves its hits, a PostgreSQL restart is survived and a long outage ends in a
typed ``CacheError`` with the report and every result."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import AnthropicProvider, CacheError, ContextGenerator, RetryPolicy
from ctx_retrieval.contextualize.cache import CachedContext, ContextCache
from ctx_retrieval.contextualize.cache_postgres import PostgresContextCache
from ctx_retrieval.contextualize.stores import open_context_cache
from ctx_retrieval.retrieval.embeddings import EmbeddingCache
from ctx_retrieval.testing import FakeAnthropicServer
from ctx_retrieval.testing.faults import synthetic_corpus
from ctx_retrieval.types import TokenUsage
from tests.helpers import TEST_KEY

ROOT = Path(__file__).resolve().parents[2]


def _provider(server: FakeAnthropicServer) -> AnthropicProvider:
    return AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url, endpoint_id="twin")  # one key across twins


def _when_paid(server: FakeAnthropicServer, answers: int, action: Any) -> threading.Thread:
    """Start a thread that runs ``action`` once the twin has answered ``answers`` requests (or after 60 s)."""
    def wait_then_act() -> None:
        deadline = time.monotonic() + 60
        while server.totals()["ok"] < answers and time.monotonic() < deadline:
            time.sleep(0.01)
        action()

    thread = threading.Thread(target=wait_then_act, daemon=True)
    thread.start()
    return thread


def test_a_failed_batch_write_rolls_back_and_later_writes_are_committed(tmp_path: Path) -> None:
    cache = ContextCache(tmp_path / "c.sqlite")
    with pytest.raises(CacheError):
        cache.record_batch("b1", ["k1", object()])  # type: ignore[list-item]  # a value SQLite cannot bind
    cache.put("k", CachedContext("x", "p", "m", "v", TokenUsage()))
    other = sqlite3.connect(tmp_path / "c.sqlite")  # another process sees the later write: it was committed
    assert other.execute("SELECT key FROM contexts").fetchall() == [("k",)]
    assert other.execute("SELECT COUNT(*) FROM batch_items").fetchone() == (0,)  # and nothing of the failed one
    embeddings = EmbeddingCache(tmp_path / "e.sqlite")
    with pytest.raises(CacheError):
        embeddings.put_many("m", [("d1", b"\x00"), ("d2", object())])  # type: ignore[list-item]
    embeddings.put_many("m", [("d3", b"\x01")])
    assert sqlite3.connect(tmp_path / "e.sqlite").execute("SELECT digest FROM embeddings").fetchall() == [("d3",)]


def test_a_full_disk_keeps_every_paid_answer_in_the_results(tmp_path: Path) -> None:
    items = synthetic_corpus(26, per_document=13)
    path = tmp_path / "c.sqlite"
    with FakeAnthropicServer() as server:
        cache = ContextCache(path)
        cache.put("warm", CachedContext("x" * 3000, "p", "m", "v", TokenUsage()))
        pages = cache._conn.execute("PRAGMA page_count").fetchone()[0]
        cache._conn.execute(f"PRAGMA max_page_count = {pages + 1}")  # the disk fills after a couple of answers
        run = ContextGenerator(_provider(server), cache=cache, on_error="skip").contextualize_many(items)
        paid = server.totals()["ok"]
        stored = len(cache) - 1
    assert paid == 26 and all(r.context for r in run) and run.report.failed == 0  # 26 paid, 26 returned
    assert run.report.unstored == 26 - stored > 0 and stored < 26
    assert any("could not store" in w for w in run.report.warnings)
    assert any("cannot store answers" in w for w in run.report.warnings)
    with FakeAnthropicServer() as server:  # room again: a rerun pays only for what was not stored
        again = ContextGenerator(_provider(server), cache=path).contextualize_many(items)
        assert server.totals()["ok"] == run.report.unstored and again.report.cached == stored


READ_ONLY_READER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {root!r})
    from ctx_retrieval import AnthropicProvider, ContextGenerator
    from ctx_retrieval.testing.faults import synthetic_corpus
    provider = AnthropicProvider(api_key="sk-ant-test-0000000000000000", base_url="http://127.0.0.1:9",
                                 endpoint_id="twin")  # nothing listens there: every context must be a hit
    run = ContextGenerator(provider, cache=sys.argv[1]).contextualize_many(synthetic_corpus(10))
    print(json.dumps({{"cached": run.report.cached, "requests": run.report.requests}}))
""")


def test_a_valid_cache_in_a_read_only_folder_serves_its_hits(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    with FakeAnthropicServer() as server, ContextGenerator(
            AnthropicProvider(api_key="sk-ant-test-0000000000000000", base_url=server.base_url, endpoint_id="twin"),
            cache=folder / "c.sqlite") as generator:
        generator.contextualize_many(synthetic_corpus(10))
    # Closed: checkpointed, no WAL index beside it (a cache copied or shipped read-only); SQLite would have to create
    # one to read a WAL database, and cannot in this folder.
    assert not list(folder.glob("c.sqlite-*"))
    script = tmp_path / "read.py"
    script.write_text(READ_ONLY_READER.format(root=str(ROOT)), encoding="utf-8")
    command = [sys.executable, str(script), str(folder / "c.sqlite")]
    if os.geteuid() == 0:  # root writes anywhere: drop the capability that lets it, so the folder's mode holds
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv (util-linux) to drop root's DAC override")
        command = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--", *command]
    folder.chmod(0o555)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "HOME": str(tmp_path)})
    finally:
        folder.chmod(0o755)
    assert done.returncode == 0, done.stderr
    assert '"cached": 10' in done.stdout and '"requests": 0' in done.stdout  # every hit served, nothing asked


def test_a_postgres_restart_mid_run_is_survived_and_nothing_is_paid_twice(postgres: Any) -> None:
    url = postgres.new_database()
    items = synthetic_corpus(60)
    with FakeAnthropicServer(latency_s=0.05) as server:
        def restart() -> None:
            postgres.halt()  # every pooled connection breaks
            time.sleep(1.0)
            postgres.resume()

        restarter = _when_paid(server, 10, restart)
        try:
            run = ContextGenerator(_provider(server), cache=url, max_concurrency=4).contextualize_many(items)
        finally:
            restarter.join()
        paid = server.totals()["ok"]
    assert all(r.context for r in run) and run.report.failed == 0 and paid == 60
    cache: Any = open_context_cache(url)
    assert len(cache) == 60 and run.report.unstored == 0  # every answer stored once the server was back
    cache.close()


def test_a_long_postgres_outage_ends_in_a_cache_error_with_every_paid_answer(postgres: Any) -> None:
    cache = PostgresContextCache(postgres.new_database(), timeout_s=0.5)
    items = synthetic_corpus(60)
    with FakeAnthropicServer(latency_s=0.05) as server:
        # One document at a time: the next one's claim needs the cache, which stays down.
        generator = ContextGenerator(_provider(server), cache=cache, max_concurrency=4, max_documents_in_flight=1,
                                     retry=RetryPolicy(max_outage_s=1.5))

        stopper = _when_paid(server, 10, postgres.halt)
        try:
            with pytest.raises(CacheError) as caught:
                generator.contextualize_many(items)
        finally:
            stopper.join()
            postgres.resume()
        paid = server.totals()["ok"]
    error = caught.value
    assert error.transient and error.report is not None and error.run is not None
    with_context = [r for r in error.run if r.context]
    assert len(with_context) == paid == error.report.generated  # every paid answer is returned with the error
    assert error.report.unstored > 0 and error.report.failed == 0 and error.report.not_attempted == 60 - paid
    cache.close()


def test_a_run_that_starts_while_the_cache_is_down_waits_for_it(postgres: Any) -> None:
    cache = PostgresContextCache(postgres.new_database(), timeout_s=0.5)
    items = synthetic_corpus(40)
    with FakeAnthropicServer(latency_s=0.05) as server:
        postgres.halt()  # down when the run starts; back a second later
        restart = threading.Timer(1.0, postgres.resume)
        restart.start()
        try:
            run = ContextGenerator(_provider(server), cache=cache, max_concurrency=4).contextualize_many(items)
        finally:
            restart.join()
        paid = server.totals()["ok"]
    assert paid == 40 and all(r.context for r in run)  # nothing failed: the run waited, then ran
    assert run.report.unstored == 0 and len(cache) == 40
    cache.close()


def test_a_server_whose_starter_is_killed_is_stopped_and_its_folder_deleted(tmp_path: Path) -> None:
    import json
    import signal
    import socket
    import subprocess
    import sys
    import time

    from ctx_retrieval.testing.postgres import postgres_bin

    if postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed")
    starter = subprocess.Popen(
        [sys.executable, "-c", "import json, sys, time\n"
         "from ctx_retrieval.testing.postgres import LocalPostgres\n"
         "server = LocalPostgres().start()\n"
         "print(json.dumps([server.port, str(server.folder)]), flush=True)\n"
         "time.sleep(600)\n"], stdout=subprocess.PIPE, text=True)
    assert starter.stdout is not None
    port, folder = json.loads(starter.stdout.readline())
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the server is up
    starter.send_signal(signal.SIGKILL)  # as a timed-out test worker dies: no teardown runs
    starter.wait()
    deadline = time.monotonic() + 120  # a liveness bound, not a speed bound: the watcher polls every 0.5 s
    while Path(folder).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(folder).exists()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


def _server_processes(postgres: Any) -> list[int]:
    """The test server's postmaster and its children (every backend): what freezing the server stops."""
    postmaster = int((postgres.folder / "data" / "postmaster.pid").read_text().split()[0])
    children = Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split()
    return [postmaster, *map(int, children)]


def test_a_frozen_postgres_is_an_outage_not_a_hang(postgres: Any) -> None:
    import signal

    cache = PostgresContextCache(postgres.new_database(), timeout_s=0.5)
    cache.put("k", CachedContext("a context", "anthropic", "m", "ctx-v1", TokenUsage(), "doc"))
    outcome: list[BaseException | object] = []

    def read() -> None:
        try:
            outcome.append(cache.get_many(["k"]))
        except BaseException as exc:
            outcome.append(exc)

    frozen = _server_processes(postgres)
    for pid in frozen:  # SIGSTOP: the server's processes stop; its kernel still acknowledges every packet
        os.kill(pid, signal.SIGSTOP)
    try:
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(120)  # it would wait for ever: the statement is cut after twice the pool's timeout
        assert not reader.is_alive(), "a statement to a frozen server never returned"
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    # a transient outage either way: the statement cut after its deadline, or (a loaded machine) no pooled
    # connection free in time
    assert isinstance(outcome[0], CacheError) and outcome[0].transient, outcome
    assert "did not answer within" in str(outcome[0]) or "does not answer (PoolTimeout)" in str(outcome[0])
    assert "k" in cache.get_many(["k"])  # thawed: the pool replaced the connection it cut
    cache.close()
