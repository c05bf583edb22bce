"""Fault injection at CI size, and two processes ingesting one corpus into one cache at once."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

from ctx_retrieval import AnthropicProvider, ContextCache, ContextGenerator
from ctx_retrieval.testing import FakeAnthropicServer
from ctx_retrieval.testing.faults import run_faulty_ingestion, synthetic_corpus
from tests.helpers import TEST_KEY

ROOT = Path(__file__).resolve().parents[2]


def test_thirty_percent_faults_every_chunk_once_in_order_nothing_invented() -> None:
    figures = run_faulty_ingestion(300, fault_rate=0.3)
    assert figures.faults_injected > 50
    assert (figures.done, figures.lost, figures.duplicated, figures.invented, figures.out_of_order) == (
        300, 0, 0, 0, 0)
    assert figures.requests_per_ideal <= 1.55  # 1/(1-0.3) = 1.43 is the floor with independent faults


def test_a_slow_answer_read_before_the_timeout_is_real_not_invented() -> None:
    # A client starved of CPU can read a slow answer before its own timeout fires; here every slow answer ends
    # 50 ms late against a 1 s timeout, so the client keeps each one, pays once and retries nothing.
    figures = run_faulty_ingestion(40, fault_rate=0.5, fault_mix={"slow": 1.0}, slow_s=0.05)
    assert figures.faults_injected >= 10
    assert (figures.done, figures.lost, figures.duplicated, figures.invented, figures.out_of_order) == (
        40, 0, 0, 0, 0)
    assert figures.requests == 40


WORKER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from ctx_retrieval import AnthropicProvider, ContextGenerator
    from ctx_retrieval.testing.faults import synthetic_corpus
    provider = AnthropicProvider(api_key={key!r}, base_url=sys.argv[1])
    run = ContextGenerator(provider, cache=sys.argv[2], max_concurrency=8).contextualize_many(synthetic_corpus(400))
    print(run.report.generated, run.report.cached)
    """
)


def test_two_processes_on_one_cache_do_not_corrupt_it(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(root=str(ROOT), key=TEST_KEY), encoding="utf-8")
    cache = tmp_path / "contexts.sqlite"
    with FakeAnthropicServer(latency_s=0.005) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        workers = [subprocess.Popen([sys.executable, str(script), server.base_url, str(cache)],
                                    stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)]
        outputs = [w.communicate(timeout=120)[0] for w in workers]
        assert all(w.returncode == 0 for w in workers)
        generated = sum(int(o.split()[0]) for o in outputs)
        assert generated == 400  # one claims each document, the other reads its contexts: each chunk paid once
        assert len(ContextCache(cache)) == 400
        assert sqlite3.connect(cache).execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rerun = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url),
                                 cache=cache).contextualize_many(synthetic_corpus(400))
    assert rerun.report.requests == 0 and all(r.context for r in rerun)
