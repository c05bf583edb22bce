"""Fusion settings as measured choices: candidates per side, the RRF constant and the side weights, swept on the
cookbook dev queries with the recorded local-LLM contexts (contextual hybrid, exact vector search, the default BM25
tokenizer), each against the shipped default with a paired 95% bootstrap interval over queries.

    .venv/bin/python benchmarks/fusion_sweep.py

A setting would replace the default only if its interval for the failure@20 difference lies wholly below 0 (and
Pass@5 and Pass@10 do not get worse).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctx_retrieval import MiniLMEmbedder  # noqa: E402
from ctx_retrieval.evaluation import (  # noqa: E402
    RecordedContextualizer,
    bootstrap_interval,
    load_cookbook,
    pass_per_query,
)
from ctx_retrieval.retrieval.bm25 import BM25Index  # noqa: E402
from ctx_retrieval.retrieval.dense import NumpyDenseIndex  # noqa: E402
from ctx_retrieval.retrieval.fusion import fuse  # noqa: E402
from ctx_retrieval.text import indexed_text  # noqa: E402

DEFAULT = (150, 60, (1.0, 1.0))
CANDIDATES = (50, 100, 150, 300)
RRF_KS = (10, 30, 60, 100)
WEIGHTS = ((1.0, 1.0), (1.0, 1.5), (1.5, 1.0), (1.0, 2.0), (2.0, 1.0))


def main() -> int:
    corpus = load_cookbook()
    contexts = RecordedContextualizer().contexts()
    ids = [c.id for c in corpus.chunks]
    text_of = {c.id: c.text for c in corpus.chunks}
    texts = [indexed_text(c.text, contexts.get(c.id)) for c in corpus.chunks]
    queries = [q.query for q in corpus.queries]
    embedder = MiniLMEmbedder(cache=True)
    dense = NumpyDenseIndex(ids, embedder.embed(texts)).search(embedder.embed(queries), max(CANDIDATES))
    bm25 = BM25Index(ids, texts)
    sparse = [[i for i, _ in bm25.search(q, max(CANDIDATES))] for q in queries]

    def scores(candidates: int, rrf_k: int, weights: tuple[float, float]) -> dict[int, list[float]]:
        fused = [[h.id for h in fuse([d[:candidates], s[:candidates]], rrf_k=rrf_k, weights=weights)]
                 for d, s in zip(dense, sparse, strict=True)]
        return {k: pass_per_query(fused, corpus.queries, text_of, k) for k in (5, 10, 20)}

    base = scores(*DEFAULT)
    base_fail = [1 - v for v in base[20]]
    print(f"contextual hybrid, {len(queries)} dev queries, recorded contexts; default: candidates {DEFAULT[0]}, "
          f"rrf_k {DEFAULT[1]}, weights (vector, bm25) {DEFAULT[2]}\n")
    print("| candidates | rrf_k | weights (vector, bm25) | Pass@5 | Pass@10 | failure@20 "
          "| vs default (points) [95% CI] |")
    print("|---|---|---|---|---|---|---|")
    better = []
    for candidates in CANDIDATES:
        for rrf_k in RRF_KS:
            for weights in WEIGHTS:
                got = scores(candidates, rrf_k, weights)
                fails = [1 - v for v in got[20]]
                diff = (sum(fails) - sum(base_fail)) / len(fails)
                lo, hi = bootstrap_interval(fails, against=base_fail)
                p5, p10 = (sum(got[k]) / len(got[k]) for k in (5, 10))
                print(f"| {candidates} | {rrf_k} | {weights} | {p5:.1%} | {p10:.1%} | {sum(fails) / len(fails):.1%} | "
                      f"{diff * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}] |")
                if hi < 0 and p5 >= sum(base[5]) / len(base[5]) and p10 >= sum(base[10]) / len(base[10]):
                    better.append((candidates, rrf_k, weights, diff))
    print("\nsettings better than the default beyond noise:", better or "none: the default stays")
    return 0


if __name__ == "__main__":
    sys.exit(main())
