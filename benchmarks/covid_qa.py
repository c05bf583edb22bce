"""COVID-QA (issue 35): expert questions over scientific papers, a set no one here wrote, for choosing the defaults.

    .venv/bin/python benchmarks/covid_qa.py --json PATH/TO/200423_covidQA.json [--papers 24] [--e5]

The JSON is deepset's COVID-QA in SQuAD format (github.com/deepset-ai/COVID-QA, Apache-2.0; not vendored here).
The first ``--papers`` papers are documents, cut with the CLI's default chunker (150 tokens of MiniLM, whatever
embedder is measured, so every row ranks the same chunks); each question's gold chunk is the chunk that holds the
first character of its answer. Contexts are the heuristic's (title and heading; no LLM). Rows: MiniLM, and with
``--e5`` multilingual-e5-small and the three-way fusion of both with BM25; failure@20 with its 95% interval, exact
dense search, the default BM25 analysis, RRF over 150 per side (``run_ablation``). Also printed: the embedder the
CLI would choose for these documents, and the share of contextualized chunks over MiniLM's 256-token input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ctx_retrieval.chunking import token_chunker
from ctx_retrieval.contextualize.heuristic import HeuristicContextualizer
from ctx_retrieval.evaluation.ablation import run_ablation
from ctx_retrieval.evaluation.corpus import EvalCorpus, EvalQuery
from ctx_retrieval.loaders import split_into_chunks
from ctx_retrieval.retrieval.choosing import choose_embedder
from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder
from ctx_retrieval.text import indexed_text
from ctx_retrieval.types import SourceDocument


def corpus_of(path: str, papers: int, minilm: MiniLMEmbedder) -> EvalCorpus:
    split = token_chunker(minilm, 150)
    data = json.loads(Path(path).read_text(encoding="utf-8"))["data"][:papers]
    items, queries = [], []
    for n, article in enumerate(data):
        for p, paragraph in enumerate(article["paragraphs"]):
            document = SourceDocument(f"paper-{n:03d}-{p}", paragraph["context"])
            chunks = split_into_chunks(document, split(document.text))
            items.append((document, chunks))
            starts = [(c.start_char if c.start_char is not None else -1, c.id) for c in chunks]
            for qa in paragraph["qas"]:
                if not qa.get("answers"):
                    continue
                at = qa["answers"][0]["answer_start"]
                gold = [chunk_id for start, chunk_id in starts if 0 <= start <= at][-1:]
                if gold:
                    queries.append(EvalQuery(qa["question"], tuple(gold)))
    return EvalCorpus("covid-qa", items, queries)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--papers", type=int, default=24)
    parser.add_argument("--e5", action="store_true", help="also measure e5 and the three-way fusion (slower)")
    args = parser.parse_args()
    minilm = MiniLMEmbedder(cache=True)
    corpus = corpus_of(args.json, args.papers, minilm)
    contexts = {r.chunk_id: r.context for r in HeuristicContextualizer().contextualize_many(corpus.items)}
    over = sum(1 for c in corpus.chunks if minilm.count_tokens(indexed_text(c.text, contexts.get(c.id))) > 256)
    print(f"COVID-QA: {len(corpus.items)} papers, {len(corpus.chunks)} chunks, {len(corpus.queries)} questions; "
          f"{over / len(corpus.chunks):.0%} of contextualized chunks over MiniLM's 256 tokens; the CLI would choose "
          f"{choose_embedder(d.text for d, _ in corpus.items).name}\n")
    runs: dict[str, Any] = {}
    second = None
    if args.e5:
        from ctx_retrieval.retrieval.e5 import E5Embedder

        e5 = E5Embedder(cache=True)
        second = ("e5", e5)
        runs["e5"] = run_ablation(corpus, contexts, contextualizer_label="heuristic", embedder=e5)
    runs["MiniLM"] = run_ablation(corpus, contexts, contextualizer_label="heuristic", embedder=minilm,
                                  fused_embedder=second)
    print("| embedder | row | failure@20 [95% interval] |\n|---|---|---|")
    for label, result in runs.items():
        for row in result.rows:
            if row.name.endswith(("dense", "hybrid", "(+ e5)")) or row.name.endswith("BM25"):
                lo, hi = row.failure_interval or (0.0, 0.0)
                print(f"| {label} | {row.name} | {row.failure_at_20:.1%} [{lo:.1%}, {hi:.1%}] |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
