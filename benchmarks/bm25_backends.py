"""BM25 backends side by side: the core's numpy index, bm25s and rank-bm25; index time, query time, agreement.

    .venv/bin/python benchmarks/bm25_backends.py [--sizes 737,10000,100000] [--queries 100]

The 737-chunk size is the cookbook corpus with its dev queries; larger sizes add synthetic chunks that mix the
words of two random cookbook chunks (seeded; realistic vocabulary and lengths) and reuse the queries. All three
use the same tokenizer (``ctx_retrieval.tokenize``); top-20 agreement is measured against the core index.
rank-bm25 is skipped above --rank-bm25-max chunks (its per-query cost is linear in the corpus). "build MB" is the
growth of peak RSS while the index is built (tokenizing included), measured in a fresh process per backend and size
(Linux: the peak is reset through /proc/self/clear_refs first).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

import numpy as np

from ctx_retrieval import tokenize
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.retrieval.bm25 import BM25Index


def corpus_of(size: int, texts: list[str], seed: int = 0) -> list[str]:
    if size <= len(texts):
        return texts[:size]
    rng = random.Random(seed)
    out = list(texts)
    while len(out) < size:
        # Half the words of one chunk and half of another: realistic vocabulary, no exact score ties.
        a, b = rng.choice(texts).split(), rng.choice(texts).split()
        words = rng.sample(a, len(a) // 2) + rng.sample(b, len(b) // 2)
        rng.shuffle(words)
        out.append(" ".join(words))
    return out


def timed(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - started


def tokenize_all(texts: list[str]) -> list[list[str]]:
    return [tokenize(t) for t in texts]


def build(backend: str, ids: list[str], texts: list[str]) -> object:
    if backend == "core":
        return BM25Index(ids, texts)
    tokenized = tokenize_all(texts)
    if backend == "bm25s":
        import bm25s

        index = bm25s.BM25()
        index.index(tokenized, show_progress=False)
        return index
    from rank_bm25 import BM25Okapi

    return BM25Okapi(tokenized)


def rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def build_peak_mb(backend: str, size: int) -> float:
    """Peak RSS growth (MB) while building ``backend`` over ``size`` chunks, in a fresh process."""
    done = subprocess.run([sys.executable, __file__, "--build-only", backend, str(size)], capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return float(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="737,10000,100000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rank-bm25-max", type=int, default=100_000)
    parser.add_argument("--build-only", nargs=2, metavar=("BACKEND", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build_only:
        texts = corpus_of(int(args.build_only[1]), [c.text for c in load_cookbook().chunks])
        ids = [str(i) for i in range(len(texts))]
        with open("/proc/self/clear_refs", "w") as f:  # Linux: reset the peak (VmHWM) to the current RSS
            f.write("5")
        before = rss_kb("VmRSS")
        index = build(args.build_only[0], ids, texts)
        print((rss_kb("VmHWM") - before) / 1024)
        del index
        return 0
    import bm25s
    from rank_bm25 import BM25Okapi

    cookbook = load_cookbook()
    base = [c.text for c in cookbook.chunks]
    queries = [q.query for q in cookbook.queries][: args.queries]
    print(f"{'chunks':>8} {'backend':>10} {'index s':>9} {'query p50 ms':>13} {'query p95 ms':>13} "
          f"{'x slower than core':>19} {'top-20 overlap':>15} {'build MB':>9}")
    for size in (int(s) for s in args.sizes.split(",")):
        texts = corpus_of(size, base)
        ids = [str(i) for i in range(len(texts))]
        core, core_build = timed(BM25Index, ids, texts)
        core_times, core_tops = [], []
        for q in queries:
            hits, t = timed(core.search, q, 20)
            core_times.append(t)
            core_tops.append({h for h, _ in hits})
        rows = [("core", core_build, core_times, 1.0)]
        tokenized, tok_time = timed(tokenize_all, texts)
        fast = bm25s.BM25()
        _, fast_build = timed(fast.index, tokenized, show_progress=False)
        fast_times, overlaps = [], []
        for q, top in zip(queries, core_tops, strict=True):
            (docs, _), t = timed(fast.retrieve, [tokenize(q)], k=20, show_progress=False)
            fast_times.append(t)
            overlaps.append(len(top & {str(i) for i in docs[0]}) / max(1, len(top)))
        rows.append(("bm25s", fast_build + tok_time, fast_times, statistics.mean(overlaps)))
        if size <= args.rank_bm25_max:
            okapi, okapi_build = timed(BM25Okapi, tokenized)
            okapi_times, overlaps = [], []
            for q, top in zip(queries[: min(len(queries), 30)], core_tops, strict=False):
                scores, t = timed(okapi.get_scores, tokenize(q))
                okapi_times.append(t)
                best = {str(i) for i in np.argsort(-scores)[:20] if scores[i] > 0}
                overlaps.append(len(top & best) / max(1, len(top)))
            rows.append(("rank-bm25", okapi_build + tok_time, okapi_times, statistics.mean(overlaps)))
        core_p50 = statistics.median(core_times)
        for name, seconds, times, overlap in rows:
            p50 = statistics.median(times) * 1000
            p95 = sorted(times)[int(0.95 * (len(times) - 1))] * 1000
            ratio = statistics.median(times) / core_p50
            print(f"{size:>8} {name:>10} {seconds:>9.2f} {p50:>13.3f} {p95:>13.3f} {ratio:>19.1f} {overlap:>15.2f} "
                  f"{build_peak_mb(name, size):>9.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
