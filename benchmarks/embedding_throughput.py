"""Offline embedding speed: all-MiniLM-L6-v2 int8 ONNX (MiniLMEmbedder), batched texts/s and per-query latency.

    .venv/bin/python benchmarks/embedding_throughput.py [--texts 512] [--queries 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from ctx_retrieval import MiniLMEmbedder
from ctx_retrieval.evaluation import load_cookbook


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    corpus = load_cookbook()
    texts = [c.text for c in corpus.chunks][: args.texts]
    queries = [q.query for q in corpus.queries][: args.queries]
    embedder = MiniLMEmbedder(cache=False)
    embedder.embed(texts[:8])  # load the model outside the timings
    started = time.perf_counter()
    embedder.embed(texts)
    batch_s = time.perf_counter() - started
    times = []
    for query in queries:
        t = time.perf_counter()
        embedder.embed_query(query)
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"{os.cpu_count()} cores; chunks (up to 256 tokens each, batches of {embedder.batch_size}): "
          f"{len(texts) / batch_s:.1f} texts/s; queries one at a time: p50 {statistics.median(times) * 1000:.1f} ms, "
          f"p95 {times[int(0.95 * (len(times) - 1))] * 1000:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
