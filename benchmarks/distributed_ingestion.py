"""Distributed ingestion side by side against the rate-limited Anthropic API twin: one process; four processes on
one SQLite cache; four Ray actors on PostgreSQL; four independent processes with no shared limiter (what a user
would write); and the Ray run again with one actor killed half-way. Then what the shared cache costs per chunk on
PostgreSQL, and how that grows from --chunks to ten times as many stored contexts.

    .venv/bin/python benchmarks/distributed_ingestion.py [--chunks 20000] [--rps 200] [--latency 0.25]

The twin (started here, on 127.0.0.1) answers after --latency seconds and enforces --rps requests a second (a
per-minute limit enforced over one-second intervals, as the API may), answering 429 with retry-after; it sends the
anthropic-ratelimit-* headers, as the API does. The corpus is synthetic: documents of 20 chunks. PostgreSQL and Ray
are started here too (testing/postgres.py; a local Ray cluster on 127.0.0.1), and stopped after.

Configurations:
- 1 process: one ContextGenerator, RateLimit(--rps a second), max_concurrency 64.
- 4 processes, one SQLite cache: each runs the whole corpus with a quarter of the limit; document leases make
  them share the work (each document claimed by one, the others read its contexts from the cache).
- 4 Ray actors, PostgreSQL cache: contextualize_dataset with the fleet's limit owned by one budget actor
  (--actor-concurrency requests in flight per actor, --documents-per-batch documents per task).
- 4 independent processes: each takes a quarter of the documents, its own cache, and the whole limit.
- 4 Ray actors, one killed at 50%: the same as the Ray run, on a fresh database.

Printed per configuration: requests answered, paid twice (answered requests beyond one per chunk), 429s, cache
writes per document, chunks without context (lost), wall time, and wall time over the bound the rate limit allows
(chunks / rps, after the first second's burst).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctx_retrieval import AnthropicProvider, RateLimit  # noqa: E402
from ctx_retrieval.testing import FakeAnthropicServer  # noqa: E402
from ctx_retrieval.testing.faults import kill_when_answered, synthetic_corpus  # noqa: E402
from ctx_retrieval.testing.postgres import LocalPostgres  # noqa: E402

KEY = "sk-ant-benchmark-key-000000000000"
PER_DOCUMENT = 20

WORKER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {root!r})
    from ctx_retrieval import AnthropicProvider, ContextGenerator, RateLimit
    from ctx_retrieval.testing.faults import synthetic_corpus
    base_url, cache, chunks, first = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rpm = float(sys.argv[5])
    provider = AnthropicProvider(api_key={key!r}, base_url=base_url)
    generator = ContextGenerator(provider, cache=cache, max_concurrency=int(sys.argv[6]), on_error="skip",
                                 rate_limit=RateLimit(requests_per_minute=rpm))
    run = generator.contextualize_many(synthetic_corpus(chunks, first_document=first))
    print(json.dumps({{"with_context": sum(1 for r in run if r.context), "chunks": len(run)}}))
    """
)


def _processes(server: FakeAnthropicServer, work: list[tuple[str, int, int]], rpm: float, concurrency: int,
               folder: Path) -> list[dict[str, Any]]:
    script = folder / "worker.py"
    script.write_text(WORKER.format(root=str(ROOT), key=KEY), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, str(script), server.base_url, cache, str(chunks), str(first),
                               str(rpm), str(concurrency)], stdout=subprocess.PIPE, text=True, env=env)
             for cache, chunks, first in work]
    return [json.loads(p.communicate()[0]) for p in procs]


def _row(name: str, server: FakeAnthropicServer, chunks: int, with_context: int, wall: float,
         rps: float) -> dict[str, Any]:
    totals = server.totals()
    bound = max(chunks - rps, 0) / rps
    documents = -(-chunks // PER_DOCUMENT)
    return {"configuration": name, "answered": totals["ok"], "paid_twice": totals["ok"] - chunks,
            "429s": totals["rate_limited"], "cache_writes_per_document": totals["cache_writes"] / documents,
            "lost": chunks - with_context, "wall_s": round(wall, 1), "bound_s": round(bound, 1),
            "vs_bound": round(wall / bound, 2) if bound else None}


def _ray_run(ray: Any, server: FakeAnthropicServer, chunks: int, rps: float, cache: str, args: Any,
             kill_at: int | None = None) -> tuple[int, float]:
    from ctx_retrieval.distributed import contextualize_dataset

    rows = [{"id": d.id, "text": d.text, "chunks": [c.text for c in cs]} for d, cs in synthetic_corpus(chunks)]
    killer = None
    if kill_at is not None:
        def kill() -> None:
            pid = kill_when_answered(server, kill_at)
            print(f"  killed actor process {pid} after {kill_at} answers", file=sys.stderr)

        killer = threading.Thread(target=kill, daemon=True)
        killer.start()
    started = time.monotonic()
    out = contextualize_dataset(ray.data.from_items(rows), provider=AnthropicProvider(base_url=server.base_url),
                                cache=cache, actors=4, documents_per_batch=args.documents_per_batch,
                                max_concurrency=args.actor_concurrency,
                                rate_limit=RateLimit(requests_per_minute=rps * 60), rate_burst_s=1.0).take_all()
    wall = time.monotonic() - started
    if killer is not None:
        killer.join(timeout=5)
    by_chunk = {r["chunk_id"]: r for r in out}
    return sum(1 for r in by_chunk.values() if r["context"]), wall


def _cache_cost(url: str, stored: int) -> dict[str, Any]:
    """Milliseconds per chunk the shared cache adds (claim + release per document, one read of the document's
    keys, one write per chunk), measured with ``stored`` contexts already in the table."""
    import psycopg

    from ctx_retrieval.contextualize.cache import CachedContext
    from ctx_retrieval.contextualize.cache_postgres import PostgresContextCache
    from ctx_retrieval.types import TokenUsage

    cache = PostgresContextCache(url)
    with psycopg.connect(url, autocommit=True) as conn:  # fill it fast: the cost of interest is the lookups'
        conn.execute("INSERT INTO ctx_contexts SELECT 'fill-' || i, 'x', 'p', 'm', 'v', '{}', 0 "
                     "FROM generate_series(1, %s) i ON CONFLICT DO NOTHING", (stored,))
    entry = CachedContext("a context " * 10, "anthropic", "m", "v", TokenUsage(10, 5))
    documents = 50
    started = time.perf_counter()
    round_trips = 0
    for d in range(documents):
        keys = [f"bench-{stored}-{d}-{c}" for c in range(PER_DOCUMENT)]
        cache.claim(f"doc:{stored}:{d}", "bench:1:x", 60)
        cache.get_many(keys)
        for key in keys:
            cache.put(key, entry)
        cache.release(f"doc:{stored}:{d}", "bench:1:x")
        round_trips += 3 + PER_DOCUMENT
    elapsed = time.perf_counter() - started
    cache.close()
    chunks = documents * PER_DOCUMENT
    return {"stored_contexts": stored, "round_trips_per_chunk": round(round_trips / chunks, 2),
            "ms_per_chunk": round(1000 * elapsed / chunks, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--rps", type=float, default=200.0, help="the twin's limit: requests a second")
    parser.add_argument("--latency", type=float, default=0.25)
    parser.add_argument("--actor-concurrency", type=int, default=32, help="requests in flight per Ray actor")
    parser.add_argument("--documents-per-batch", type=int, default=16, help="documents per Ray task")
    parser.add_argument("--skip", default="", help="comma-separated: single,sqlite,ray,independent,kill,cache")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    chunks, rps = args.chunks, args.rps
    os.environ["ANTHROPIC_API_KEY"] = KEY  # the Ray actors read it from their environment
    results = []
    twin = {"latency_s": args.latency, "rate_limit_rpm": rps * 60, "rate_burst_s": 1.0}
    with tempfile.TemporaryDirectory() as tmp, LocalPostgres() as pg:
        folder = Path(tmp)
        runs = [("1 process", "single", [(str(folder / "one.sqlite"), chunks, 0)], rps * 60, 64),
                ("4 processes, one SQLite cache", "sqlite", [(str(folder / "shared.sqlite"), chunks, 0)] * 4,
                 rps * 15, 16),
                ("4 independent processes, no shared limiter", "independent",
                 [(str(folder / f"own-{n}.sqlite"), chunks // 4, n * chunks // 4 // PER_DOCUMENT) for n in range(4)],
                 rps * 60, 16)]
        for name, tag, work, rpm, concurrency in runs:
            if tag in skip:
                continue
            with FakeAnthropicServer(**twin) as server:
                started = time.monotonic()
                outputs = _processes(server, work, rpm, concurrency, folder)
                wall = time.monotonic() - started
                with_context = (min(o["with_context"] for o in outputs) if tag == "sqlite"
                                else sum(o["with_context"] for o in outputs))
                results.append(_row(name, server, chunks, with_context, wall, rps))
                print(json.dumps(results[-1]), file=sys.stderr)
        if not {"ray", "kill"} <= skip:
            import ray

            ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
            for name, tag, kill_at in (("4 Ray actors, PostgreSQL cache", "ray", None),
                                       ("4 Ray actors, one killed at 50%", "kill", chunks // 2)):
                if tag in skip:
                    continue
                with FakeAnthropicServer(**twin) as server:
                    with_context, wall = _ray_run(ray, server, chunks, rps, pg.new_database(), args, kill_at)
                    results.append(_row(name, server, chunks, with_context, wall, rps))
                    print(json.dumps(results[-1]), file=sys.stderr)
            ray.shutdown()
        costs = [] if "cache" in skip else [_cache_cost(pg.new_database(), n) for n in (chunks, 10 * chunks)]
    print(f"{chunks:,} chunks ({chunks // PER_DOCUMENT:,} documents of {PER_DOCUMENT}); twin: {rps:g} requests/s "
          f"enforced per second, {args.latency:g} s latency\n")
    print("| configuration | answered | paid twice | 429s | cache writes/doc | lost | wall s | bound s | vs bound |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['configuration']} | {r['answered']:,} | {r['paid_twice']:,} | {r['429s']:,} | "
              f"{r['cache_writes_per_document']:.2f} | {r['lost']} | {r['wall_s']} | {r['bound_s']} | "
              f"{r['vs_bound']}x |")
    if costs:
        print("\nthe shared cache on PostgreSQL, per chunk (claim, read, write, release; 50 documents):")
        for c in costs:
            print(f"  {c['stored_contexts']:,} contexts stored: {c['round_trips_per_chunk']} round trips, "
                  f"{c['ms_per_chunk']} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
