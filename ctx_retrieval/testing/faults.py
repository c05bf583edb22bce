"""A faulty run, end to end: used by the CI-sized test and the 2,000-chunk benchmark."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ctx_retrieval.contextualize.generator import ContextGenerator
from ctx_retrieval.contextualize.prompts import clean_context
from ctx_retrieval.loaders import split_into_chunks
from ctx_retrieval.pacing import RetryPolicy
from ctx_retrieval.providers.anthropic import AnthropicProvider
from ctx_retrieval.testing.fake_anthropic import FakeAnthropicServer
from ctx_retrieval.types import Chunk, SourceDocument

DEFAULT_FAULT_MIX = {"rate_limit": 1.0, "overloaded": 1.0, "server_error": 1.0, "slow": 0.5, "drop": 1.0,
                     "truncated": 1.0}


def synthetic_corpus(chunks: int, per_document: int = 20, words: int = 80,
                     first_document: int = 0) -> list[tuple[SourceDocument, list[Chunk]]]:
    """Deterministic documents of ``per_document`` paragraphs, ``chunks`` paragraphs in all, numbered from
    ``first_document``."""
    vocabulary = (
        "revenue", "margin", 'quarter', 'anvil', 'skate', 'trap', 'foundry', 'tucson', 'rotterdam',
        'dividend', 'backlog', 'warranty', 'inventory', 'capital', 'outlook', 'segment', 'growth', 'decline',
        'contract', 'supplier',
    )
    items = []
    made = 0
    doc = first_document
    while made < chunks:
        n = min(per_document, chunks - made)
        paragraphs = [f"Document {doc} paragraph {p}: " + " ".join(
            vocabulary[(doc * 7 + p * 5 + w * 3) % len(vocabulary)] for w in range(words)) + "."
            for p in range(n)]
        document = SourceDocument(f"doc-{doc:05d}", "\n\n".join(paragraphs))
        items.append((document, split_into_chunks(document, paragraphs)))
        made += n
        doc += 1
    return items


@dataclass(frozen=True)
class FaultyRunFigures:
    chunks: int
    done: int
    lost: int
    duplicated: int
    invented: int
    out_of_order: int
    requests: int
    ideal_requests: int
    faults_injected: int
    wall_time_s: float

    @property
    def requests_per_ideal(self) -> float:
        return self.requests / self.ideal_requests if self.ideal_requests else 0.0

    def format(self) -> str:
        return (f"chunks {self.chunks}: done {self.done}, lost {self.lost}, duplicated {self.duplicated}, "
                f"invented {self.invented}, out of order {self.out_of_order}; requests {self.requests} / ideal "
                f"{self.ideal_requests} = {self.requests_per_ideal:.2f}x ({self.faults_injected} faults injected); "
                f"wall time {self.wall_time_s:.1f} s")


def run_faulty_ingestion(
    chunks: int,
    *,
    fault_rate: float = 0.3,
    max_concurrency: int = 16,
    latency_s: float = 0.01,
    timeout_s: float = 1.0,
    slow_s: float | None = None,
    fault_mix: dict[str, float] | None = None,
    seed: int = 1,
    api_key: str = "sk-ant-fault-run-000000000",
) -> FaultyRunFigures:
    """Contextualize ``chunks`` synthetic chunks while ``fault_rate`` of requests fail (``fault_mix``, default
    ``DEFAULT_FAULT_MIX``), and account for them. A ``slow`` answer ends ``slow_s`` late (default twice the client's
    timeout).

    A context counts as invented unless it is exactly an answer the fake sent for that chunk, on time or late: a
    client starved of CPU may read a slow answer before its own timeout fires, and that answer is real. A chunk
    counts as duplicated when it was answered on time more than once (the generator paid twice); out of order when
    a result sits at another position than its chunk.
    """
    items = synthetic_corpus(chunks)
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer(
            latency_s=latency_s, retry_after_s=0.2, slow_s=timeout_s * 2 if slow_s is None else slow_s,
            seed=seed) as server:
        server.set_fault_rate(fault_rate, DEFAULT_FAULT_MIX if fault_mix is None else fault_mix)
        provider = AnthropicProvider(api_key=api_key, base_url=server.base_url,
                                     timeout_s=timeout_s)
        generator = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite", max_concurrency=max_concurrency,
                                     retry=RetryPolicy(max_attempts=12, initial_delay_s=0.05, max_delay_s=1.0),
                                     on_error="skip", seed=seed)
        started = time.perf_counter()
        run = generator.contextualize_many(items)
        wall = time.perf_counter() - started
        answered: dict[str, list[str]] = {}  # chunk text -> every answer sent on time for it
        for record in server.successful():
            if record.chunk_text is not None and record.response_text is not None:
                answered.setdefault(record.chunk_text, []).append(record.response_text)
        sent: dict[str, set[str]] = {}  # chunk text -> every answer sent for it, the slow ones included
        for record in list(server.requests):
            if record.chunk_text is not None and record.response_text is not None and record.status == 200:
                sent.setdefault(record.chunk_text, set()).add(clean_context(record.response_text))
        faults = sum(1 for r in server.requests if r.fault is not None)
    expected = [(d.id, c.id, c.text) for d, cs in items for c in cs]
    out_of_order = sum(1 for (doc_id, chunk_id, _), r in zip(expected, run, strict=True)
                       if (r.document_id, r.chunk_id) != (doc_id, chunk_id))
    invented = sum(1 for (_, _, text), r in zip(expected, run, strict=True) if r.context is not None and r.context
                   not in sent.get(text.strip(), set()))
    duplicated = sum(len(v) - 1 for v in answered.values() if len(v) > 1)
    return FaultyRunFigures(
        chunks=len(expected), done=sum(1 for r in run if r.context), lost=sum(1 for r in run if r.context is None),
        duplicated=duplicated, invented=invented, out_of_order=out_of_order, requests=run.report.requests,
        ideal_requests=len(expected), faults_injected=faults, wall_time_s=wall)


def kill_when_answered(server: FakeAnthropicServer, answered: int, title: bytes = b"ContextualizeBatch",
                       timeout_s: float = 120.0) -> int | None:
    """Once ``server`` has answered ``answered`` requests, SIGKILL one process of this machine whose command line
    holds ``title`` (a Ray actor's process is titled after its class); its pid, or None if none was found."""
    deadline = time.monotonic() + timeout_s
    while server.totals()["ok"] < answered and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if title in command and pid != os.getpid():
            os.kill(pid, signal.SIGKILL)
            return pid
    return None
