"""Contextualize the 737-chunk cookbook corpus against the fake Anthropic API and print what caching achieved.

    .venv/bin/python benchmarks/contextualize_cookbook.py [--concurrency 8] [--latency 0.05] [--json out.json]

The fake applies claude-haiku-5-5's rules (2,048-token minimum cacheable prefix, 5-minute TTL) and the
run is priced at its list prices. Printed:
- requests;
- cache-write tokens / tokens of the cacheable documents (1.00 = each cacheable document written exactly once);
- cache-read share of prompt tokens, and its limit for this corpus (every chunk of a cacheable document but
  the first reads the whole document; uncacheable documents read nothing);
- dollars per million document tokens (Anthropic's cookbook: $1.02 with Claude 3 Haiku);
- a second run over the same corpus: its requests (0: everything comes from the context cache).
Token counts are the fake's deterministic estimate (``ctx_retrieval.tokens``), not Claude's tokenizer.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

from ctx_retrieval import AnthropicProvider, ContextGenerator, SourceDocument, split_into_chunks
from ctx_retrieval.models import MODELS
from ctx_retrieval.testing import FakeAnthropicServer
from ctx_retrieval.tokens import estimate_tokens

MODEL = "claude-haiku-5-5"


def load_corpus() -> list[tuple[SourceDocument, list]]:  # type: ignore[type-arg]
    path = resources.files("ctx_retrieval").joinpath("data").joinpath("anthropic_codebase").joinpath(
        "codebase_chunks.json")
    items = []
    for doc in json.loads(path.read_text(encoding="utf-8")):
        document = SourceDocument(doc["original_uuid"], doc["content"], {"doc_id": doc["doc_id"]})
        items.append((document, split_into_chunks(document, [c["content"] for c in doc["chunks"]])))
    return items


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.05, help="fake latency per request, seconds")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--batch", action="store_true",
                        help="also run batch mode (Message Batches API, 1-hour cache TTL) and print its cost")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    items = load_corpus()
    chunks = sum(len(c) for _, c in items)
    minimum = MODELS[MODEL].min_cacheable_tokens
    generator_probe = ContextGenerator(AnthropicProvider(MODEL, api_key="sk-ant-unused-000000000"), cache=False)
    prefix_tokens = {}
    limit = generator_probe._limit()
    for plan in generator_probe._plan(items):  # the exact cacheable block of each document
        prefix_tokens[plan.document.id] = estimate_tokens(generator_probe._view(plan, 0, limit).prefix)
    cacheable = {d.id for d, _ in items if prefix_tokens[d.id] >= minimum}
    cacheable_tokens = sum(prefix_tokens[d] for d in cacheable)
    document_tokens = sum(estimate_tokens(d.text) for d, _ in items)

    with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer(latency_s=args.latency) as server:
        provider = AnthropicProvider(MODEL, api_key="sk-ant-benchmark-000000000", base_url=server.base_url)
        generator = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite", max_concurrency=args.concurrency)
        started = time.perf_counter()
        run = generator.contextualize_many(items)
        wall = time.perf_counter() - started
        totals = server.totals()
        second = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite").contextualize_many(items)
        second_requests = len(server.requests) - totals["requests"]

    usage = run.report.usage
    read_limit = sum((len(c) - 1) * prefix_tokens[d.id] for d, c in items if d.id in cacheable)
    figures = {
        "documents": len(items),
        "chunks": chunks,
        "cacheable_documents": len(cacheable),
        "requests": run.report.requests,
        "failed": run.report.failed,
        "cache_write_tokens": usage.cache_creation_input_tokens,
        "cacheable_document_tokens": cacheable_tokens,
        "cache_write_ratio": usage.cache_creation_input_tokens / cacheable_tokens,
        "cache_writes": totals["cache_writes"],
        "cache_read_share": usage.cache_read_input_tokens / usage.prompt_tokens,
        "cache_read_share_limit": read_limit / usage.prompt_tokens,
        "cost_usd": run.report.cost_usd,
        "document_tokens": document_tokens,
        "usd_per_million_document_tokens": (run.report.cost_usd or 0.0) / document_tokens * 1e6,
        "wall_time_s": round(wall, 2),
        "second_run_requests": second_requests,
        "second_run_cached": second.report.cached,
    }
    print(f"cookbook corpus: {len(items)} documents, {chunks} chunks, {document_tokens:,} document tokens; "
          f"{len(cacheable)} documents reach {MODEL}'s {minimum:,}-token cache minimum")
    print(f"fake latency {args.latency * 1000:.0f} ms, max_concurrency {args.concurrency}, wall {wall:.2f} s")
    print(f"requests                                   {figures['requests']} (failed {figures['failed']})")
    print(f"cache-write tokens / cacheable doc tokens  {usage.cache_creation_input_tokens:,} / "
          f"{cacheable_tokens:,} = {figures['cache_write_ratio']:.2f}  (target 1.00; "
          f"{totals['cache_writes']} writes for {len(cacheable)} cacheable documents)")
    print(f"cache-read share of prompt tokens          {figures['cache_read_share']:.1%}  (limit for this corpus "
          f"{figures['cache_read_share_limit']:.1%}; cookbook with 5 threads: 77.0%)")
    print(f"dollars                                    ${run.report.cost_usd:.4f}, "
          f"${figures['usd_per_million_document_tokens']:.2f} per million document tokens (cookbook: $1.02)")
    print(f"second run                                 {second_requests} requests, "
          f"{second.report.cached} of {chunks} from the context cache")
    if args.batch:
        with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer(latency_s=args.latency,
                                                                       batch_delay_s=0.5) as server:
            provider = AnthropicProvider(MODEL, api_key="sk-ant-benchmark-000000000", base_url=server.base_url,
                                         cache_ttl="1h")
            batched = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite",
                                       max_concurrency=args.concurrency).contextualize_many_batched(
                items, poll_interval_s=0.2)
        report = batched.report
        figures["batch_cost_usd"] = report.cost_usd
        figures["batch_usd_per_million_document_tokens"] = (report.cost_usd or 0.0) / document_tokens * 1e6
        print(f"batch mode (1h TTL)                        {report.requests} ordinary + {report.batch_requests} "
              f"batch requests, ${report.cost_usd:.4f}, ${figures['batch_usd_per_million_document_tokens']:.2f} "
              f"per million document tokens (failed {report.failed})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
