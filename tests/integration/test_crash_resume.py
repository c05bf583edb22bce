"""SIGKILL a real ingestion process several times; each restart resumes from the persistent context cache."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from ctx_retrieval import AnthropicProvider, ContextCache, ContextGenerator
from ctx_retrieval.testing import FakeAnthropicServer
from tests.helpers import TEST_KEY, make_document

ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = 4

WORKER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from ctx_retrieval import AnthropicProvider, ContextGenerator
    from tests.helpers import make_document
    documents = [make_document(f"doc-{{i}}") for i in range(5)]
    provider = AnthropicProvider(api_key={key!r}, base_url=sys.argv[1])
    ContextGenerator(provider, cache=sys.argv[2], max_concurrency={concurrency}).contextualize_many(documents)
    """
)


def test_killed_runs_resume_and_end_like_an_uninterrupted_run(tmp_path: Path) -> None:
    documents = [make_document(f"doc-{i}") for i in range(5)]
    total = sum(len(c) for _, c in documents)
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(root=str(ROOT), key=TEST_KEY, concurrency=CONCURRENCY), encoding="utf-8")
    cache_path = tmp_path / "contexts.sqlite"
    kills = 0
    with FakeAnthropicServer(latency_s=0.02) as server:
        for fraction in (0.2, 0.45, 0.7):
            process = subprocess.Popen([sys.executable, str(script), server.base_url, str(cache_path)],
                                       env={**os.environ, "PYTHONPATH": str(ROOT)})
            deadline = time.monotonic() + 60
            while len(server.successful()) < fraction * total and process.poll() is None:
                assert time.monotonic() < deadline, "the worker made no progress"
                time.sleep(0.005)
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
            stored = len(ContextCache(cache_path))
            assert stored >= len(server.successful()) - kills * CONCURRENCY
        generator = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url),
                                     cache=cache_path, max_concurrency=CONCURRENCY)
        resumed = generator.contextualize_many(documents)
        paid = len(server.successful())
    with FakeAnthropicServer() as clean_server:
        reference = ContextGenerator(AnthropicProvider(api_key=TEST_KEY, base_url=clean_server.base_url),
                                     cache=False).contextualize_many(documents)
    assert [(r.chunk_id, r.context) for r in resumed] == [(r.chunk_id, r.context) for r in reference]
    assert resumed.report.generated < total and resumed.report.failed == 0
    assert paid <= total + kills * CONCURRENCY
    assert len(ContextCache(cache_path)) == total
