"""Edits and migrations over a living corpus, against the Anthropic API twin (issue 26): what reuse saves, how stale
the index gets, and whether a migration ever leaves a chunk without a context.

    .venv/bin/python benchmarks/document_edits.py [--documents 1000] [--days 10] [--edit-share 0.05]

1. One edit: a 50-chunk document with one paragraph edited; requests, cache writes and dollars without reuse (the
   exact default) and with ``ReusePolicy(max_changed_tokens=300)``, beside the floor (the changed chunks alone,
   one cache write).
2. A living corpus: ``--documents`` documents of 10 paragraphs, ``--edit-share`` of them edited each day (one
   paragraph each, a document may be edited again) for ``--days`` days. Three policies: exact; reuse, never
   refreshed; reuse with a nightly refresh of the stale contexts through Message Batches. Total dollars and, per
   day, the share of the corpus's chunks serving a stale context (from the cache's stats).
3. A model migration of the cookbook corpus (737 chunks) from Claude Haiku 4.5 to Claude Haiku 5.5 with
   ``ReusePolicy(other_models=True)``: the switch, then a refresh stopped by a budget, then the refresh finished in
   batch mode; at every step the chunks without a context. Beside it, the same switch without the policy, stopped by
   the same budget.

All runs go through the real SDK to the twin (its documented caching rules, Haiku 5.5 list prices; nothing billed).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ctx_retrieval import AnthropicProvider, ContextGenerator, ReusePolicy
from ctx_retrieval.contextualize.cache import ContextCache
from ctx_retrieval.errors import BudgetExceededError
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.loaders import split_into_chunks
from ctx_retrieval.testing import FakeAnthropicServer
from ctx_retrieval.types import Chunk, SourceDocument

KEY = "sk-ant-benchmark-000000000"
MODEL = "claude-haiku-5-5"
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
         "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey"]


def paragraphs(doc_id: str, n: int, rng: random.Random) -> list[str]:
    return [f"Section {p} of {doc_id}: " + " ".join(rng.choice(WORDS) for _ in range(45)) + "." for p in range(n)]


def item(doc_id: str, parts: list[str]) -> tuple[SourceDocument, list[Chunk]]:
    document = SourceDocument(doc_id, "\n\n".join(parts) + "\n")
    return document, split_into_chunks(document, parts)


def generator(server: Any, cache: Path, model: str = MODEL, **kwargs: Any) -> ContextGenerator:
    return ContextGenerator(AnthropicProvider(model, api_key=KEY, base_url=server.base_url), cache=cache, **kwargs)


def one_edit() -> None:
    rng = random.Random(1)
    parts = paragraphs("handbook", 50, rng)
    edited = list(parts)
    edited[20] = "Section 20 of handbook was rewritten: rail journeys booked abroad are now covered."
    print("## 1. A 50-chunk document, one paragraph edited\n")
    print("| policy | requests | cache writes | dollars | reused (stale) |")
    print("|---|---|---|---|---|")
    for label, reuse in (("exact (default)", None), ("ReusePolicy(max_changed_tokens=300)",
                                                     ReusePolicy(max_changed_tokens=300))):
        with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer() as server:
            generator(server, Path(tmp) / "c.sqlite").contextualize(*item("handbook", parts))
            server.reset()
            run = generator(server, Path(tmp) / "c.sqlite", reuse=reuse).contextualize(*item("handbook", edited))
            totals = server.totals()
            print(f"| {label} | {totals['requests']} | {totals['cache_writes']} | ${run.report.cost_usd:.5f} | "
                  f"{run.report.reused} |")
    print("| floor: the changed chunk alone | 1 | 1 | | |\n")


def living_corpus(documents: int, days: int, share: float) -> None:
    print(f"## 2. A living corpus: {documents:,} documents x 10 paragraphs, {share:.0%} edited per day, {days} days\n")
    rows: dict[str, list[str]] = {}
    totals: dict[str, tuple[float, int, float]] = {}
    for label, reuse, refresh in (("exact", None, False),
                                  ("reuse (300 tokens), never refreshed", ReusePolicy(max_changed_tokens=300), False),
                                  ("reuse + nightly batch refresh", ReusePolicy(max_changed_tokens=300), True)):
        rng = random.Random(7)
        corpus = {f"doc-{n:04d}": paragraphs(f"doc-{n:04d}", 10, rng) for n in range(documents)}
        with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer() as server:
            cache = Path(tmp) / "c.sqlite"
            gen = generator(server, cache, reuse=reuse)
            started = time.perf_counter()
            first = gen.contextualize_many([item(d, p) for d, p in corpus.items()])
            dollars, requests = 0.0, 0
            day_share: list[str] = []
            for day in range(1, days + 1):
                edited = rng.sample(sorted(corpus), max(1, round(share * documents)))
                for doc_id in edited:
                    at = rng.randrange(10)
                    corpus[doc_id][at] = f"Section {at} of {doc_id}, edited on day {day}: " + " ".join(
                        rng.choice(WORDS) for _ in range(45)) + "."
                before = server.totals()["ok"]
                run = gen.contextualize_many([item(d, corpus[d]) for d in edited])
                dollars += run.report.cost_usd or 0.0
                if refresh and run.report.stale:
                    done = gen.refresh_stale(run.report, batch=True, poll_interval_s=0.01)
                    dollars += done.report.cost_usd or 0.0
                requests += server.totals()["ok"] - before
                with ContextCache(cache) as opened:
                    stats = opened.stats()
                day_share.append(f"{stats.stale / stats.versioned_chunks:.1%}")
            wall = time.perf_counter() - started
        rows[label] = day_share
        totals[label] = (dollars, requests, wall)
        first_cost = first.report.cost_usd or 0.0
    print(f"Day 0 (the whole corpus, every policy): ${first_cost:.4f}, {documents * 10:,} requests.\n")
    print(f"| policy | days 1-{days}: dollars | requests | stale share at day 1 / {days // 2} / {days} | wall |")
    print("|---|---|---|---|---|")
    exact = totals["exact"][0]
    for label, (dollars, requests, wall) in totals.items():
        shares = rows[label]
        print(f"| {label} | ${dollars:.4f} ({dollars / exact:.2f}x exact) | {requests:,} | {shares[0]} / "
              f"{shares[days // 2 - 1]} / {shares[-1]} | {wall:.0f} s |")
    print(f"\nStale share per day (reuse, never refreshed): {', '.join(rows['reuse (300 tokens), never refreshed'])}\n")


def until_budget(run: Any, items: Any) -> Any:
    """``run(items)``'s results, also when the budget stopped it (what it finished)."""
    try:
        return run(items)
    except BudgetExceededError as exc:
        assert exc.run is not None
        return exc.run


def migration(budget: float) -> None:
    items = load_cookbook().items
    chunks = sum(len(c) for _, c in items)
    print(f"## 3. Model migration of the cookbook corpus ({chunks} chunks, claude-haiku-4-5 -> {MODEL})\n")
    print("| step | requests | chunks without a context | on the previous model |")
    print("|---|---|---|---|")

    def row(step: str, run: Any, requests: int) -> None:
        missing = sum(1 for r in run if not r.context and r.status != "empty")
        print(f"| {step} | {requests} | **{missing}** | {sum(1 for r in run if r.model != MODEL)} |")

    for label, reuse in (("with ReusePolicy(other_models=True)", ReusePolicy(other_models=True)),
                         ("without (today's behaviour)", None)):
        with tempfile.TemporaryDirectory() as tmp, FakeAnthropicServer() as server:
            cache = Path(tmp) / "c.sqlite"
            old = generator(server, cache, model="claude-haiku-4-5").contextualize_many(items)
            print(f"| {label}: the old model's index | - | "
                  f"{sum(1 for r in old if not r.context and r.status != 'empty')} | {chunks} |")
            server.reset()
            new = generator(server, cache, reuse=reuse, budget_usd=budget, on_error="skip")
            switched = until_budget(new.contextualize_many, items)
            row(f"{label}: switch to {MODEL} (budget ${budget})", switched, server.totals()["ok"])
            if reuse is None:
                continue
            server.reset()
            partial = until_budget(new.refresh_stale, items)
            row(f"{label}: refresh, stopped by the budget", partial, server.totals()["ok"])
            server.reset()
            finished = generator(server, cache, reuse=reuse).refresh_stale(items, batch=True, poll_interval_s=0.01)
            row(f"{label}: refresh finished (batch)", finished, len(server.successful()))
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--edit-share", type=float, default=0.05)
    parser.add_argument("--budget", type=float, default=0.05, help="the budget that stops the migration's runs")
    parser.add_argument("--only", choices=["edit", "corpus", "migration"])
    args = parser.parse_args()
    if args.only in (None, "edit"):
        one_edit()
    if args.only in (None, "corpus"):
        living_corpus(args.documents, args.days, args.edit_share)
    if args.only in (None, "migration"):
        migration(args.budget)
    return 0


if __name__ == "__main__":
    sys.exit(main())
