"""The core store's query, timed as users call it (``open_store(path).search(q)``), beside its floor and Chroma's own
query, and the HNSW search width chosen by recall against exact search (issue 33).

    .venv/bin/python benchmarks/store_query.py [--sizes 10000,100000] [--queries 100] [--widths 0,150,300,600,1000]

For each size: synthetic chunks (seeded, ``read_side.corpus``) with random unit vectors (384-d; the worst case for
HNSW: no clusters to follow), queries of 8 words from random chunks with their own random vectors, so embedding is in
no timing (a lookup stands in for the embedder). Printed per size, median over the queries of CPU time (this process
and its threads: Chroma searches on a thread pool) and wall time, each run interleaved with the others:
  - ours: ``open_store(...).search(q, k=20)``, the guard included (journal, BM25's membership check of the vector
    candidates it did not rank);
  - Chroma bare: ``collection.query(n_results=150, include=[])`` on the store's own collection, nothing else;
  - BM25 alone: ``BM25Store.search(q, 150)``;
  - floor: exact dense (one matrix-vector product + ``argpartition`` of 150) + BM25 alone: what a hybrid query
    cannot do with less.
Then, per search width (``hnsw:search_ef``; 0 is Chroma's default, raised to k per query): recall@150 of Chroma's
candidates against exact search, the share of hybrid top-20 results that exact dense candidates would give, and
Chroma's query time; the store's width is the smallest whose hybrid top 20 agrees with exact search on >= 99.5%.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from query_latency import Lookup  # noqa: E402
from query_latency import vectors as unit  # noqa: E402

DIM = 384


def timed(calls: dict[str, Callable[[str], Any]], queries: list[str], rounds: int = 5,
          differences: list[float] | None = None) -> dict[str, tuple[float, float]]:
    """Median CPU and wall milliseconds per call, the calls interleaved query by query (in rotating order), best of
    ``rounds``; with ``differences``, each query's wall time of the first call minus the second's is appended
    (paired, so the machine's drift cancels)."""
    best: dict[str, tuple[float, float]] = {}
    names = list(calls)
    for _ in range(rounds):
        cpu: dict[str, list[float]] = {name: [] for name in calls}
        wall: dict[str, list[float]] = {name: [] for name in calls}
        for n, q in enumerate(queries):
            # the order rotates query by query, so every call follows every other equally often (the floor's
            # matrix product leaves BLAS threads spinning on the other core for a while: the call after it pays)
            for name in names[n % len(names):] + names[:n % len(names)]:
                call = calls[name]
                c, w = time.process_time(), time.perf_counter()
                call(q)
                cpu[name].append(time.process_time() - c)
                wall[name].append(time.perf_counter() - w)
            if differences is not None:
                differences.append((wall[names[0]][-1] - wall[names[1]][-1]) * 1000)
        for name in calls:
            now = (statistics.median(cpu[name]) * 1000, statistics.median(wall[name]) * 1000)
            best[name] = min(best.get(name, now), now)
    return best


def build(size: int, width: int | None, texts: list[str], vectors: Any, embedder: Lookup, folder: str) -> Any:
    import ctx_retrieval.retrieval.store as store

    shipped = store.SEARCH_EF
    if width is not None:
        store.SEARCH_EF = width or None  # type: ignore[assignment]
    try:
        path = os.path.join(folder, f"store-{size}-{width}")
        store.build_store(path, (store.IndexedChunk(f"c{i}", f"d{i // 20}", t, None) for i, t in enumerate(texts)),
                          embedder=embedder).close()
    finally:
        store.SEARCH_EF = shipped
    return store.open_store(path, embedder=embedder)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--widths", default="0,150,300,600,1000")
    parser.add_argument("--vectors", choices=("random", "minilm"), default="random",
                        help="random unit vectors (HNSW's worst case), or MiniLM's embeddings of the chunks "
                             "(cached; the first run embeds them, about 40 texts/s)")
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        measure(size, args)
    return 0


def measure(size: int, args: argparse.Namespace) -> None:
    import numpy as np
    from query_latency import corpus as cookbook_like  # words of the cookbook's chunks: text MiniLM can read
    from read_side import corpus

    from ctx_retrieval.retrieval.dense import top_k
    from ctx_retrieval.retrieval.store import SEARCH_EF

    texts = cookbook_like(size) if args.vectors == "minilm" else corpus(size)
    rng = random.Random(1)
    queries = [" ".join(rng.sample(words, min(8, len(words)))) for words in
               (texts[rng.randrange(size)].split() for _ in range(args.queries))]
    if args.vectors == "minilm":
        from ctx_retrieval import MiniLMEmbedder

        minilm = MiniLMEmbedder()
        vectors, query_vectors = minilm.embed(texts), np.stack([minilm.embed_query(q) for q in queries])
    else:
        vectors, query_vectors = unit(size, 0), unit(len(queries), 1)
    embedder = Lookup({**dict(zip(texts, vectors, strict=True)), **dict(zip(queries, query_vectors,
                                                                            strict=True))})
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        store = build(size, None, texts, vectors, embedder, folder)
        print(f"\n{size:,} chunks, {args.vectors} vectors (built in {time.perf_counter() - started:.0f} s, "
              f"store width hnsw:search_ef={SEARCH_EF})")

        def exact(q: str) -> Any:
            return top_k(vectors @ embedder.embed_query(q), 150)

        def floor(q: str) -> Any:
            return exact(q), store.bm25.search(q, 150)

        for q in queries[:5]:
            store.search(q)
        paired: list[float] = []
        figures = timed({
            "ours": lambda q: store.search(q, k=20),
            "Chroma bare": lambda q: store.collection.query(query_embeddings=[embedder.embed_query(q)],
                                                           n_results=150, include=[]),
            "BM25 alone": lambda q: store.bm25.search(q, 150),
            "floor": floor,
        }, queries, differences=paired)
        for name, (cpu, wall) in figures.items():
            print(f"  {name:<12} cpu {cpu:7.2f} ms   wall {wall:7.2f} ms")
        ours, low = figures["ours"][1], figures["floor"][1]
        print(f"  ours - Chroma bare, paired per query (wall): median {statistics.median(paired):+.2f} ms; "
              f"ours / floor (wall): {ours / low:.2f}x")
        store.close()
        print("  width  recall@150  hybrid top-20 = exact  Chroma cpu ms")
        for width in (int(w) for w in args.widths.split(",")):
            wide = build(size, width, texts, vectors, embedder, folder)
            recalls, agree = [], []
            for q in queries:
                truth = {f"c{i}" for i in exact(q)}
                got = wide.collection.query(query_embeddings=[embedder.embed_query(q)], n_results=150,
                                            include=[])["ids"][0]
                recalls.append(len(truth & set(got)) / 150)
                hybrid = [h.chunk.chunk_id for h in wide.search(q, k=20)]
                exact_hybrid = _exact_hybrid(wide, q, [f"c{i}" for i in exact(q)])
                agree.append(len(set(hybrid) & set(exact_hybrid)) / 20)
            cost = timed({"chroma": lambda q, w=wide: w.collection.query(
                query_embeddings=[embedder.embed_query(q)], n_results=150, include=[])}, queries, rounds=1)
            print(f"  {width or 'default':>7}  {np.mean(recalls):9.3f}  {np.mean(agree):20.3f}  "
                  f"{cost['chroma'][0]:12.2f}")
            wide.close()


def _exact_hybrid(store: Any, query: str, dense: list[str]) -> list[str]:
    """The hybrid top 20 with exact dense candidates in place of Chroma's."""
    from ctx_retrieval.retrieval.fusion import chunk_key, fuse

    bm25 = store.bm25.search(query, 150)
    keys = {chunk_key(i): i for i in dense}
    fused = fuse([[chunk_key(i) for i in dense], bm25.keys], limit=20)
    ids = {**keys, **{k: e.id for k, e in zip(bm25.keys, bm25.entries(), strict=True)}}
    return [ids[h.id] for h in fused]


if __name__ == "__main__":
    sys.exit(main())
