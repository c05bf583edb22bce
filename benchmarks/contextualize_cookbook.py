"""Contextualize the 737-chunk cookbook corpus against the Anthropic API twin and print what caching achieved.

    .venv/bin/python benchmarks/contextualize_cookbook.py [--models claude-haiku-5-5,claude-haiku-4-5] [--batch]

The twin applies each model's documented rules (its own copy: minimum cacheable length counted with the model's
tokenizer, 5-minute TTL, thinking unless disabled) and every run is priced at the model's list prices. Per model:
- requests (and the free token-count requests made for documents near a decision boundary), and a second run
  over the same corpus (0 requests of either kind: contexts and counts come from the context cache);
- cache writes per cacheable document (1.00 = each cacheable document's cache written exactly once);
- cache-read share of prompt tokens beside its limit for this corpus (perfect caching);
- dollars per million document tokens beside the floor: perfect caching at the model's prices for the same
  requests (``benchmarks/floors.py``); with ``--batch``, batch mode beside the batch floor (everything at batch
  prices with 1-hour writes).
Document tokens are counted with the model's tokenizer (the twin's). The cookbook's $1.02 per million document
tokens (Claude 3 Haiku, retired 2026-04-20, 8k-token documents) is the historical anchor.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ctx_retrieval import AnthropicProvider, ContextGenerator
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.models import MODELS
from ctx_retrieval.testing import FakeAnthropicServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floors import caching_floor, document_tokens

KEY = "sk-ant-benchmark-000000000"


def measure(model: str, items: list[Any], *, concurrency: int, latency: float, batch: bool) -> dict[str, Any]:
    info = MODELS[model]
    doc_tokens = document_tokens((d.text for d, _ in items), model)
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer(latency_s=latency) as server:
        provider = AnthropicProvider(model, api_key=KEY, base_url=server.base_url)
        generator = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite", max_concurrency=concurrency)
        started = time.perf_counter()
        run = generator.contextualize_many(items)
        wall = time.perf_counter() - started
        totals = server.totals()
        floor = caching_floor(server.successful(), model, info)
        second = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite").contextualize_many(items)
        after = server.totals()  # message requests and token counts of both runs
        second_requests = after["requests"] + after["token_counts"] - totals["requests"] - totals["token_counts"]
    usage = run.report.usage
    figures: dict[str, Any] = {
        "model": model, "chunks": sum(len(c) for _, c in items), "documents": len(items),
        "document_tokens": doc_tokens, "requests": run.report.requests, "failed": run.report.failed,
        "cacheable_documents": floor.cacheable_documents, "cache_writes": totals["cache_writes"],
        "writes_per_cacheable_document": totals["cache_writes"] / max(1, floor.cacheable_documents),
        "cache_write_tokens": usage.cache_creation_input_tokens, "cacheable_tokens": floor.cacheable_tokens,
        "cache_read_share": usage.cache_read_input_tokens / usage.prompt_tokens,
        "cache_read_share_limit": floor.read_share_limit,
        "cost_usd": run.report.cost_usd, "floor_usd": floor.usd,
        "usd_per_m": (run.report.cost_usd or 0.0) / doc_tokens * 1e6, "floor_usd_per_m": floor.usd / doc_tokens * 1e6,
        "long_prompt_requests": run.report.long_prompt_requests, "wall_time_s": round(wall, 2),
        "token_count_requests": totals["token_counts"],
        "second_run_requests": second_requests, "second_run_cached": second.report.cached,
    }
    if batch:
        with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer(latency_s=latency, batch_delay_s=0.5) as server:
            provider = AnthropicProvider(model, api_key=KEY, base_url=server.base_url, cache_ttl="1h")
            batched = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite",
                                       max_concurrency=concurrency).contextualize_many_batched(items,
                                                                                             poll_interval_s=0.2)
            batch_floor = caching_floor(server.successful(), model, info)
        report = batched.report
        figures.update({
            "batch_requests": report.batch_requests, "batch_ordinary_requests": report.requests,
            "batch_failed": report.failed, "batch_cost_usd": report.cost_usd,
            "batch_usd_per_m": (report.cost_usd or 0.0) / doc_tokens * 1e6,
            "batch_floor_usd_per_m": batch_floor.batch_usd / doc_tokens * 1e6,
        })
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="claude-haiku-5-5,claude-haiku-4-5")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.05, help="twin latency per request, seconds")
    parser.add_argument("--batch", action="store_true", help="also run batch mode (Message Batches, 1-hour TTL)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    items = load_cookbook().items
    rows = [measure(m.strip(), items, concurrency=args.concurrency, latency=args.latency, batch=args.batch)
            for m in args.models.split(",") if m.strip()]
    print(f"cookbook corpus: {rows[0]['documents']} documents, {rows[0]['chunks']} chunks; twin latency "
          f"{args.latency * 1000:.0f} ms, max_concurrency {args.concurrency}")
    header = (f"{'model':18} {'doc tokens':>10} {'requests':>8} {'cacheable':>9} {'writes/doc':>10} "
              f"{'read share':>10} {'limit':>6} {'$/M doc':>8} {'floor':>7} {'x floor':>7}")
    if args.batch:
        header += f" {'batch $/M':>9} {'floor':>7} {'x floor':>7}"
    header += f" {'counts':>6} {'wall s':>6} {'rerun req':>9}"
    print(header)
    for r in rows:
        line = (f"{r['model']:18} {r['document_tokens']:>10,} {r['requests']:>8} {r['cacheable_documents']:>9} "
                f"{r['writes_per_cacheable_document']:>10.2f} {r['cache_read_share']:>10.1%} "
                f"{r['cache_read_share_limit']:>6.1%} {r['usd_per_m']:>8.3f} {r['floor_usd_per_m']:>7.3f} "
                f"{r['usd_per_m'] / r['floor_usd_per_m']:>7.2f}")
        if args.batch:
            line += (f" {r['batch_usd_per_m']:>9.3f} {r['batch_floor_usd_per_m']:>7.3f} "
                     f"{r['batch_usd_per_m'] / r['batch_floor_usd_per_m']:>7.2f}")
        line += f" {r['token_count_requests']:>6} {r['wall_time_s']:>6.1f} {r['second_run_requests']:>9}"
        print(line)
    print("historical anchor: the cookbook's $1.02 per million document tokens (Claude 3 Haiku, retired 2026-04-20)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
