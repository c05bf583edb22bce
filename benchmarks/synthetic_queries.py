"""Do generated queries tell the variants apart as gold queries do? The cookbook corpus, its gold dev queries against
queries an LLM writes for the same corpus (issue 27).

    .venv/bin/python benchmarks/synthetic_queries.py                     # questions from the API twin
    .venv/bin/python benchmarks/synthetic_queries.py --base-url http://127.0.0.1:8080/v1 --model qwen2.5-1.5b
                                                                         # from a local llama.cpp-family server

Both ablations use the same contexts (recorded offline from a local LLM, the bundled file) and the same retrieval
(MiniLM, BM25, RRF). Printed: each variant's failure@20 under both query sets, the Kendall rank correlation of the
variants' order, whether contextual hybrid vs plain hybrid has the same sign with overlapping intervals, and what the
questions cost (requests, dollars at the writer's prices, seconds). The twin writes its questions from the chunk's
own words (it is no language model), so with it the figures check the machinery; a real model's questions are the
measurement the issue asks for.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ctx_retrieval import AnthropicProvider, HeuristicContextualizer, MiniLMEmbedder
from ctx_retrieval.evaluation import EvalCorpus, RecordedContextualizer, load_cookbook
from ctx_retrieval.evaluation.ablation import run_ablation
from ctx_retrieval.evaluation.queries import generate_queries

KEY = "sk-ant-benchmark-000000000"


def kendall_tau(a: list[float], b: list[float]) -> float:
    pairs = concordant = discordant = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            x, y = a[i] - a[j], b[i] - b[j]
            if x == 0 or y == 0:
                continue
            pairs += 1
            concordant += (x > 0) == (y > 0)
            discordant += (x > 0) != (y > 0)
    return (concordant - discordant) / pairs if pairs else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", help="an OpenAI-compatible server writes the questions (else the API twin)")
    parser.add_argument("--model", default="local-model")
    parser.add_argument("--count", type=int, default=0, help="questions to write (default: as many as gold queries)")
    parser.add_argument("--context-tokens", type=int, help="the server context size when it does not say")
    parser.add_argument("--stop", action="append", help="a stop sequence for the server (a base model that never "
                        "ends its answer: --stop '\n')")
    args = parser.parse_args()
    corpus = load_cookbook()
    contexts = RecordedContextualizer().contexts()
    heuristic = {r.chunk_id: r.context for r in HeuristicContextualizer().contextualize_many(corpus.items)}
    embedder = MiniLMEmbedder(progress=False)
    count = args.count or len(corpus.queries)

    def ablation(c: EvalCorpus) -> Any:
        return run_ablation(c, dict(contexts), contextualizer_label="recorded local-LLM contexts", embedder=embedder,
                            baseline=("heuristic baseline", heuristic))

    gold = ablation(corpus)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        if args.base_url:
            from ctx_retrieval.providers import OpenAICompatibleProvider

            provider: Any = OpenAICompatibleProvider(args.model, base_url=args.base_url, timeout_s=600,
                                                     context_tokens=args.context_tokens,
                                                     extra_body={"stop": args.stop} if args.stop else None)
            writer = f"{args.model} at {args.base_url}"
            query_set = generate_queries(corpus.items, count, provider=provider, cache=Path(tmp) / "q.sqlite")
        else:
            from ctx_retrieval.testing import FakeAnthropicServer

            with FakeAnthropicServer() as server:
                provider = AnthropicProvider(api_key=KEY, base_url=server.base_url)
                writer = "the API twin (questions from the chunk's own words; Claude Haiku 5.5 prices)"
                query_set = generate_queries(corpus.items, count, provider=provider, cache=Path(tmp) / "q.sqlite")
        seconds = time.perf_counter() - started
    generated = ablation(EvalCorpus("cookbook, generated queries", corpus.items, query_set.eval_queries()))
    print(f"question writer: {writer}\n{query_set.format()} ({seconds:.1f} s with the ablation set-up)\n")
    print("| variant | failure@20, gold dev queries | failure@20, generated queries |")
    print("|---|---|---|")
    rows = {r.name: r for r in generated.rows}
    for row in gold.rows:
        other = rows[row.name]
        print(f"| {row.name} | {row.failure_at_20:.1%} [{row.failure_interval[0]:.1%}, {row.failure_interval[1]:.1%}]"
              f" | {other.failure_at_20:.1%} [{other.failure_interval[0]:.1%}, {other.failure_interval[1]:.1%}] |")
    tau = kendall_tau([r.failure_at_20 for r in gold.rows], [rows[r.name].failure_at_20 for r in gold.rows])
    g, s = ({r.name: r for r in result.rows}["contextual hybrid"] for result in (gold, generated))
    same_sign = (g.difference or 0) * (s.difference or 0) > 0
    overlap = not (g.difference_interval[1] < s.difference_interval[0]
                   or s.difference_interval[1] < g.difference_interval[0])
    print(f"\nvariants' order (failure@20): Kendall tau {tau:+.2f} between the two query sets")
    print(f"contextual vs plain hybrid: gold {g.difference * 100:+.1f} points [{g.difference_interval[0] * 100:+.1f}, "
          f"{g.difference_interval[1] * 100:+.1f}], generated {s.difference * 100:+.1f} points "
          f"[{s.difference_interval[0] * 100:+.1f}, {s.difference_interval[1] * 100:+.1f}]: "
          f"{'same sign' if same_sign else 'different sign'}, intervals {'overlap' if overlap else 'do not overlap'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
