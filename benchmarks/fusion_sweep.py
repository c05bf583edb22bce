"""Fusion settings as measured choices (issues 24 and 35): the RRF constant and the side weights, swept on every
corpus the project measures with, each setting against the literature's RRF k=60 with a paired 95% bootstrap
interval over the questions of all corpora together.

    .venv/bin/python benchmarks/fusion_sweep.py [--covid-qa PATH/200423_covidQA.json]

Corpora, each with the embedder the CLI chooses for it and exact dense search, the default BM25 analysis (the
``BM25Store``), 150 candidates per side, all through ``run_ablation``:
  - the cookbook's dev queries (124) with the contexts recorded from a local LLM, MiniLM;
  - the multilingual set (9 languages, 432 questions), heuristic contexts, multilingual-e5-small;
  - with ``--covid-qa``, deepset's COVID-QA (24 papers, 185 expert questions; not vendored), heuristic contexts, e5.
Printed per setting: questions answered in the top 20 per corpus, contextual and plain hybrid, Pass@5, and the
pooled failure@20 difference from k=60. A setting replaces the default only if it is better pooled, beyond noise
or with Pass@5 not worse, and worse on no corpus's contextual hybrid by more than one question.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from ctx_retrieval.evaluation import RecordedContextualizer, bootstrap_interval, load_cookbook  # noqa: E402
from ctx_retrieval.evaluation.ablation import run_ablation  # noqa: E402
from ctx_retrieval.evaluation.metrics import pass_per_query  # noqa: E402
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K, fuse  # noqa: E402

RRF_KS = (5, 10, 20, 30, 60)
WEIGHTS = ((1.0, 1.0), (1.0, 1.5), (1.5, 1.0))
LITERATURE = (60, (1.0, 1.0))


def corpora(covid_qa: str | None) -> list[tuple[str, Any, dict[str, str | None], str]]:
    """(name, corpus, contexts, embedder) for every corpus measured."""
    from multilingual import corpus_of

    from ctx_retrieval.contextualize.heuristic import HeuristicContextualizer

    def heuristic(corpus: Any) -> dict[str, str | None]:
        return {r.chunk_id: r.context for r in HeuristicContextualizer().contextualize_many(corpus.items)}

    found = [("cookbook dev", load_cookbook(), RecordedContextualizer().contexts(), "minilm")]
    multilingual, _ = corpus_of("all")
    found.append(("multilingual", multilingual, heuristic(multilingual), "e5"))
    if covid_qa:
        from covid_qa import corpus_of as covid_corpus

        from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder

        covid = covid_corpus(covid_qa, 24, MiniLMEmbedder(cache=True))
        found.append(("COVID-QA", covid, heuristic(covid), "e5"))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--covid-qa", help="deepset's 200423_covidQA.json (github.com/deepset-ai/COVID-QA)")
    args = parser.parse_args()
    from ctx_retrieval.retrieval.e5 import E5Embedder
    from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder

    embedders = {"minilm": MiniLMEmbedder(cache=True), "e5": E5Embedder(cache=True)}
    runs = []
    for name, corpus, contexts, embedder in corpora(args.covid_qa):
        result = run_ablation(corpus, contexts, contextualizer_label="sweep", embedder=embedders[embedder],
                              progress=lambda _: None)
        runs.append((name, corpus, result, {c.id: c.text for c in corpus.chunks}))

    def passes(variant: str, rrf_k: int, weights: tuple[float, float]) -> dict[int, list[float]]:
        """Per question of every corpus in turn, Pass@5 and Pass@20 of ``variant`` hybrid at this setting."""
        out: dict[int, list[float]] = {5: [], 20: []}
        for _, corpus, result, text_of in runs:
            dense, bm25 = result.rankings[f"{variant} dense"], result.rankings[f"{variant} BM25"]
            fused = [[h.id for h in fuse([d, b], rrf_k=rrf_k, weights=weights, limit=20)]
                     for d, b in zip(dense, bm25, strict=True)]
            for k in out:
                out[k].extend(pass_per_query(fused, corpus.queries, text_of, k))
        return out

    sizes = [len(corpus.queries) for _, corpus, _, _ in runs]
    print(f"questions: {', '.join(f'{name} {n}' for (name, *_), n in zip(runs, sizes, strict=True))}; "
          f"shipped default rrf_k={DEFAULT_RRF_K}, weights (1, 1)\n")
    print("| variant | rrf_k | weights (vector, bm25) | top 20 per corpus | Pass@5 | failure@20 | vs k=60 (points) "
          "[95% CI] |")
    print("|---|---|---|---|---|---|---|")
    for variant in ("contextual", "plain"):
        base = [1 - p for p in passes(variant, *LITERATURE)[20]]
        for rrf_k in RRF_KS:
            for weights in WEIGHTS:
                got = passes(variant, rrf_k, weights)
                fails = [1 - p for p in got[20]]
                lo, hi = bootstrap_interval(fails, against=base)
                per, start = [], 0
                for n in sizes:
                    per.append(f"{sum(got[20][start:start + n]):.0f}/{n}")
                    start += n
                mark = " (default)" if (rrf_k, weights) == (DEFAULT_RRF_K, (1.0, 1.0)) else ""
                print(f"| {variant} | {rrf_k}{mark} | {weights} | {', '.join(per)} | "
                      f"{sum(got[5]) / len(got[5]):.1%} | {sum(fails) / len(fails):.2%} | "
                      f"{100 * (sum(fails) - sum(base)) / len(base):+.2f} [{100 * lo:+.2f}, {100 * hi:+.2f}] |")
    print("\nThe floor is 0% on every corpus (each question has its gold chunk in the corpus).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
