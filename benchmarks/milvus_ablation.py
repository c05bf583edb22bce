"""The cookbook dev ablation through Milvus (issue 37): the same chunks, recorded contexts and MiniLM vectors as the
core store's path, in one Milvus Lite collection whose BM25 function reads our tokens; failure@20 per row beside the
``BM25Store`` path's (``run_ablation``: exact dense search, the core BM25 index), and query latency.

    .venv/bin/python benchmarks/milvus_ablation.py [--uri /tmp/cookbook-milvus.db]

Rows: plain and contextual BM25, dense and hybrid through ``MilvusStore`` (our ``HybridRetriever`` over the two
engine sides), and contextual hybrid fused in the engine (``hybrid_search`` with its RRF, k=60); then contextual BM25
and hybrid with the engine analysing the readable text itself (``tokenizer="engine"``, the standard analyzer: what
a framework's own Milvus store does), against our analysis in the same engine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ctx_retrieval import MiniLMEmbedder
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.evaluation.ablation import run_ablation
from ctx_retrieval.evaluation.corpus import RecordedContextualizer
from ctx_retrieval.evaluation.metrics import pass_per_query
from ctx_retrieval.retrieval.milvus import MilvusStore
from ctx_retrieval.retrieval.store import IndexedChunk


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", help="a Milvus URI (default: a Milvus Lite file in a temporary folder)")
    args = parser.parse_args()
    corpus = load_cookbook()
    contexts = {r.chunk_id: r.context for r in RecordedContextualizer().contextualize_many(corpus.items)}
    embedder = MiniLMEmbedder(cache=True)
    text_of = {c.id: c.text for c in corpus.chunks}
    reference = run_ablation(corpus, contexts, contextualizer_label="recorded", embedder=embedder,
                             progress=lambda _: None)
    ours = {row.name: row.failure_at_20 for row in reference.rows}
    print(f"cookbook dev: {len(corpus.chunks)} chunks, {len(corpus.queries)} queries; failure@20\n")
    print("| row | BM25Store path | Milvus | Milvus, engine fusion | Milvus query p50 |\n|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for variant, tokenizer in (("plain", "identifiers"), ("contextual", "identifiers"), ("contextual", "engine")):
            uri = args.uri or str(Path(folder) / f"{variant}-{tokenizer}.db")
            store = MilvusStore(uri, embedder=embedder, collection=f"cookbook_{variant}_{tokenizer}",
                                tokenizer=tokenizer)
            store.add(IndexedChunk(c.id, d.id, c.text, contexts.get(c.id) if variant == "contextual" else None)
                      for d, chunks in corpus.items for c in chunks)
            for mode in ("bm25", "vector", "hybrid") if tokenizer != "engine" else ("bm25", "hybrid"):
                times, rankings = [], []
                for query in corpus.queries:
                    started = time.perf_counter()
                    rankings.append([h.chunk.chunk_id for h in store.search(query.query, k=20, mode=mode)])
                    times.append(time.perf_counter() - started)
                fails = 1 - statistics.mean(pass_per_query(rankings, corpus.queries, text_of, 20))
                engine = ""
                if mode == "hybrid":
                    store.engine_fusion = True
                    fused = [[h.chunk.chunk_id for h in store.search(q.query, k=20)] for q in corpus.queries]
                    store.engine_fusion = False
                    engine = f"{1 - statistics.mean(pass_per_query(fused, corpus.queries, text_of, 20)):.1%}"
                name = f"{variant} {'BM25' if mode == 'bm25' else mode}"
                label = name if tokenizer != "engine" else f"{name}, Milvus's standard analyzer"
                print(f"| {label} | {ours[name]:.1%} | {fails:.1%} | {engine} | "
                      f"{1000 * statistics.median(times):.1f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
