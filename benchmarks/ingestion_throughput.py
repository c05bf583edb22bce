"""Ingestion side by side under a server-side rate limit: the seeds' loop, the cookbook's threads, LlamaIndex's
DocumentContextExtractor and ours, on the 737-chunk cookbook corpus against the fake Anthropic API.

    .venv/bin/python benchmarks/ingestion_throughput.py [--skip seeds,extractor] [--window 6] [--busy 20]

The fake answers after --latency + --per-token-latency x output tokens and enforces token buckets of --rpm requests
and --itpm uncached input tokens per --window seconds (60 = per minute; the default 6 compresses a minute into six
seconds so the whole comparison takes minutes, all ratios unchanged), answering 429 with retry-after. For each
approach: wall time, requests, 429s received, cache-write and cache-read tokens, dollars at --model's list prices
(claude-haiku-5-5 by default), and the ratio to ours; then the bound the rate limit allows (the shortest possible
wall time) and ours divided by it, and ours beside the floor perfect caching allows (``floors.py``). Document
tokens are counted with the model's tokenizer (the twin's). The extractor runs in .venv-extractor
(benchmarks/setup_extractor_env.sh) and is skipped without it.

The seeds' and the cookbook's code send ``thinking: {"type": "disabled"}`` to models that think by default (as
Anthropic's migration guide for Claude Haiku 5.5 says to): sent as written, their ``max_tokens`` of 150 is spent
on thinking and most answers hold no text.

- seeds: one request per chunk, in order, the whole document inside the prompt text (no cache_control).
- cookbook: 5 threads, the document as a cached first block, no warm-up (Anthropic's cookbook).
- extractor: LlamaIndex DocumentContextExtractor, num_workers=4.
- ours: ContextGenerator at its defaults (it finds how many requests to keep in flight, paces itself by the
  server's anthropic-ratelimit-* headers, and by retry-after when a 429 comes anyway), and at fixed concurrencies
  equal to each peer's (4 = the extractor's workers, 5 = the cookbook's threads, --peer-threads for both); and at
  defaults with ``request_threads=0`` (requests sent and read by the event loop itself, the way before 2026-12-05).
- --busy N: N busy-loop processes run beside the whole comparison (a machine its other work keeps loaded).
- the bound: what the rate limit alone allows (draining the fewest uncached input tokens possible, or the
  requests, whichever takes longer); latency is not part of it, since requests in flight hide it.
- ours, batch mode: contextualize_many_batched (Message Batches at half price, 1-hour cache TTL, a first batch
  of each cacheable document's first chunk to write the cache, then the rest). Its wall time is not comparable
  (real batches end within 24 hours; the twin holds each for 0.5 s), so the row shows cost only, beside the
  floor perfect caching allows at batch prices.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic

from ctx_retrieval import AnthropicProvider, ContextGenerator, RunReport, TokenUsage
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.models import MODELS, request_cost_usd
from ctx_retrieval.providers.base import DEFAULT_REQUEST_THREADS
from ctx_retrieval.testing import FakeAnthropicServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from busy import busy_loops
from floors import caching_floor, document_tokens
from llama_index_extractor_vs_ours import EXTRACTOR_PYTHON, EXTRACTOR_SCRIPT

MODEL = "claude-haiku-5-5"  # --model
KEY = "sk-ant-throughput-benchmark-00"
SEEDS_PROMPT = (
    "Write a short and succinct snippet of text to situate this chunk within the\noverall source document for the "
    "purposes of improving search retrieval of the chunk.\n\nHere is the original source document:\n<document>\n"
    "{document}\n</document>\n\nHere is the chunk we want to situate within the whole document:\n<chunk>\n{chunk}\n"
    "</chunk>\n\nAnswer only with the succinct context and nothing else.")
COOKBOOK_CHUNK = (
    "Here is the chunk we want to situate within the whole document\n<chunk>\n{chunk}\n</chunk>\n\nPlease give a short "
    "succinct context to situate this chunk within the overall document for the purposes of improving search "
    "retrieval of the chunk. Answer only with the succinct context and nothing else.")


def _migrated() -> dict[str, Any]:
    """What Anthropic's migration guide adds for a model that thinks by default."""
    return {"thinking": {"type": "disabled"}} if MODELS[MODEL].thinking == "on_can_disable" else {}


def run_seeds(base_url: str, items: list[Any]) -> int:
    """The seeds' loop; returns how many chunks got no context (a request that failed after the SDK's retries)."""
    client = anthropic.Anthropic(api_key=KEY, base_url=base_url, max_retries=20)
    failed = 0
    for document, chunks in items:
        for chunk in chunks:
            try:
                client.messages.create(model=MODEL, max_tokens=150, extra_body=_migrated(), messages=[
                    {"role": "user", "content": SEEDS_PROMPT.format(document=document.text, chunk=chunk.text)}])
            except anthropic.APIError:
                failed += 1
    return failed


def run_cookbook(base_url: str, items: list[Any], threads: int = 5) -> int:
    """The cookbook's threads; returns how many chunks got no context. The cookbook's own loop dies at the first
    request that fails after the SDK's retries; here that chunk is counted as failed and the others go on."""
    client = anthropic.Anthropic(api_key=KEY, base_url=base_url, max_retries=20)

    def one(pair: tuple[Any, Any]) -> bool:
        document, chunk = pair
        try:
            _ask_cookbook(client, document, chunk)
        except anthropic.APIError:
            return False
        return True

    with ThreadPoolExecutor(threads) as pool:
        return sum(not ok for ok in pool.map(one, [(d, c) for d, cs in items for c in cs]))


def _ask_cookbook(client: anthropic.Anthropic, document: Any, chunk: Any) -> None:
    client.messages.create(model=MODEL, max_tokens=150, extra_body=_migrated(), messages=[{"role": "user", "content": [
        {"type": "text", "text": f"<document>\n{document.text}\n</document>", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": COOKBOOK_CHUNK.format(chunk=chunk.text)}]}])


def run_extractor(base_url: str, items: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "corpus.json"
        data.write_text(json.dumps([{"id": d.id, "text": d.text, "chunks": [
            {"id": c.id, "text": c.text, "start": c.start_char} for c in cs]} for d, cs in items]))
        done = subprocess.run([str(EXTRACTOR_PYTHON), "-c", EXTRACTOR_SCRIPT, base_url, str(data), MODEL],
                              capture_output=True, text=True, timeout=3600, env={**os.environ, "PYTHONPATH": ""})
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])


def run_ours(base_url: str, items: list[Any], concurrency: int | None = None,
             request_threads: int = DEFAULT_REQUEST_THREADS) -> RunReport:
    provider = AnthropicProvider(MODEL, api_key=KEY, base_url=base_url, request_threads=request_threads)
    run = ContextGenerator(provider, cache=False, max_concurrency=concurrency).contextualize_many(items)
    assert run.report.failed == 0
    return run.report


def run_ours_batched(base_url: str, items: list[Any]) -> RunReport:
    provider = AnthropicProvider(MODEL, api_key=KEY, base_url=base_url, cache_ttl="1h")
    with tempfile.TemporaryDirectory() as tmp:  # batch mode records submitted batches in the context cache
        generator = ContextGenerator(provider, cache=Path(tmp) / "contexts.sqlite", max_concurrency=16)
        run = generator.contextualize_many_batched(items, poll_interval_s=0.2)
        generator.close()
    assert run.report.failed == 0
    return run.report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--per-token-latency", type=float, default=0.002)
    parser.add_argument("--rpm", type=float, default=1500, help="requests per window")
    parser.add_argument("--itpm", type=float, default=200_000, help="uncached input tokens per window")
    parser.add_argument("--window", type=float, default=6.0, help="seconds per rate-limit window (60 = real)")
    parser.add_argument("--no-rate-limit-headers", action="store_true",
                        help="the fake sends no anthropic-ratelimit-* headers (a proxy that strips them)")
    parser.add_argument("--skip", default="", help="comma-separated: seeds, cookbook, extractor, batch, equal "
                        "(the fixed-concurrency rows of ours), loop (ours sending from the event loop)")
    parser.add_argument("--busy", type=int, default=0,
                        help="run this many busy-loop processes beside the comparison (a machine loaded by others)")
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--peer-threads", type=int, default=32,
                        help="the cookbook's threads and ours in flight for the equal-concurrency rows")
    args = parser.parse_args()
    with busy_loops(args.busy):
        return compare(args)


def compare(args: argparse.Namespace) -> int:
    globals()["MODEL"] = args.model
    info = MODELS[MODEL]
    items = load_cookbook().items
    chunks = sum(len(c) for _, c in items)
    doc_tokens = document_tokens((d.text for d, _ in items), MODEL)
    threads = args.peer_threads
    # A runner returns our run's report, or how many chunks a peer left without context (None: not counted).
    approaches: list[tuple[str, Callable[[str, list[Any]], RunReport | int | None]]] = [
        ("seeds: sequential loop", run_seeds), ("cookbook: 5 threads, cached block", run_cookbook),
        (f"cookbook: {threads} threads, cached block",
         lambda url, items: run_cookbook(url, items, threads)),
        ("LlamaIndex DocumentContextExtractor (4)", run_extractor),
        ("ctx-retrieval, 4 in flight (= extractor)", lambda url, items: run_ours(url, items, 4)),
        ("ctx-retrieval, 5 in flight (= cookbook)", lambda url, items: run_ours(url, items, 5)),
        (f"ctx-retrieval, {threads} in flight", lambda url, items: run_ours(url, items, threads)),
        ("ctx-retrieval batch mode (1h TTL)", run_ours_batched),
        ("ctx-retrieval (defaults)", run_ours),
        ("ctx-retrieval, requests from the event loop", lambda url, items: run_ours(url, items, request_threads=0))]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if not EXTRACTOR_PYTHON.exists():
        skip.add("extractor")
    rows = []
    for name, runner in approaches:
        if name.split(":")[0].split(" ")[0].lower() in skip or ("extractor" in skip and "xtractor" in name) or (
                "batch" in skip and "batch" in name) or ("equal" in skip and "in flight" in name) or (
                "loop" in skip and "event loop" in name):
            continue
        with FakeAnthropicServer(latency_s=args.latency, latency_per_output_token_s=args.per_token_latency,
                                 rate_limit_rpm=args.rpm, rate_limit_itpm=args.itpm,
                                 rate_window_s=args.window, batch_delay_s=0.5,
                                 rate_limit_headers=not args.no_rate_limit_headers) as server:
            started = time.perf_counter()
            outcome = runner(server.base_url, items)
            wall = time.perf_counter() - started
            report = outcome if isinstance(outcome, RunReport) else None
            failed = report.failed if report is not None else outcome
            peak = report.peak_concurrency if report is not None else None
            t = server.totals()
            answered = server.successful()
            # The floor of the task: perfect caching of our requests (the others send different prompts).
            floor = caching_floor(answered, MODEL, info) if name.startswith("ctx-retrieval") else None
        usage = TokenUsage(t["input_tokens"], t["output_tokens"], t["cache_creation_input_tokens"],
                           t["cache_read_input_tokens"])
        dollars = sum(request_cost_usd(TokenUsage.from_dict(r.usage or {}), info) for r in answered)
        requests = t["requests"]
        batch = report is not None and report.batch_requests > 0
        if report is not None and batch:  # ordinary (1h TTL) and half-price batch usage, as the run billed it
            usage = report.usage + report.batch_usage
            dollars = report.cost_usd or 0.0
            requests = report.requests + report.batch_requests
        rows.append({"name": name, "wall": None if batch else wall, "requests": requests,
                     "429s": t["rate_limited"], "writes": usage.cache_creation_input_tokens,
                     "reads": usage.cache_read_input_tokens, "usage": usage,
                     "uncached": usage.input_tokens + usage.cache_creation_input_tokens,
                     "dollars": dollars, "ok": t["ok"],
                     "floor": None if floor is None else (floor.batch_usd if batch else floor.usd), "failed": failed,
                     "entries": f"{t['cache_writes']} ({t['cache_entries_written']})", "peak": peak})
        print(f"  done: {name} in {wall:.1f} s", file=sys.stderr)
    ours = next(r for r in rows if r["name"] == "ctx-retrieval (defaults)")  # the row every ratio is to
    print(f"cookbook corpus, {chunks} chunks, {doc_tokens:,} document tokens ({MODEL}'s tokenizer); twin latency "
          f"{args.latency * 1000:.0f} ms + {args.per_token_latency * 1000:.0f} ms/output token; limits "
          f"{args.rpm:,.0f} requests and {args.itpm:,.0f} uncached input tokens per {args.window:g} s (token "
          f"buckets); {MODEL} prices")
    print(f"{'':42} {'wall s':>7} {'x ours':>6} {'requests':>8} {'429s':>6} {'writes (docs)':>13} {'write tok':>10} "
          f"{'read tok':>11} {'dollars':>8} {'x ours':>6} {'$/M doc':>8} {'floor':>7} {'x floor':>7} {'failed':>6}")
    for r in rows:
        wall_cells = (f"{r['wall']:>7.1f} {r['wall'] / ours['wall']:>6.2f}" if r["wall"] is not None
                      else f"{'-':>7} {'-':>6}")
        floor = r["floor"] if r["floor"] is not None else ours["floor"]
        print(f"{r['name']:42} {wall_cells} {r['requests']:>8} {r['429s']:>6} {r['entries']:>13} "
              f"{r['writes']:>10,} {r['reads']:>11,} {r['dollars']:>8.4f} {r['dollars'] / ours['dollars']:>6.2f} "
              f"{r['dollars'] / doc_tokens * 1e6:>8.3f} {floor / doc_tokens * 1e6:>7.3f} "
              f"{r['dollars'] / floor:>7.2f} {'?' if r['failed'] is None else r['failed']:>6}")
    print("failed: chunks left without a context (? = not counted: the extractor's subprocess)")
    print("floor: perfect caching of the task's requests (one per chunk) at the model's prices (batch row: batch "
          "prices, 1-hour writes); historical anchor: the cookbook's $1.02 per million document tokens "
          "(Claude 3 Haiku)")
    # The bound is what the rate limit alone allows: ours sends the fewest uncached tokens possible (each cache
    # written once), so no run is faster than draining those tokens (after the first window's burst) or its
    # requests, whichever is slower. Latency is not a bound: more requests in flight hide it.
    tokens_bound = max(0.0, ours["uncached"] - args.itpm) / args.itpm * args.window
    requests_bound = max(0.0, ours["ok"] - args.rpm) / args.rpm * args.window
    bound = max(tokens_bound, requests_bound)
    mean_latency = args.latency + args.per_token_latency * ours["usage"].output_tokens / max(1, ours["ok"])
    print(f"ours: {ours['entries'].split()[0]} cache writes for {ours['entries'].split()[1].strip('()')} cached "
          "documents (writes (docs): each document's cache written once when the two are equal)")
    print(f"bound the rate limit alone allows: {bound:.2f} s (uncached tokens {tokens_bound:.2f} s, requests "
          f"{requests_bound:.2f} s); mean request latency {mean_latency * 1000:.0f} ms, so the bound needs "
          f"~{ours['ok'] / max(bound, 1e-9) * mean_latency:.0f} requests in flight (Little's law)")
    for r in rows:
        if r["wall"] is not None and r["name"].startswith("ctx-retrieval"):
            peak = f" (up to {r['peak']} in flight)" if r["peak"] else ""
            print(f"  {r['name']}{peak}: {r['wall']:.2f} s = {r['wall'] / bound:.2f}x the bound")
    print(f"ours at defaults / bound = {ours['wall'] / bound:.2f} (target 1.15)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
