"""Query latency of the read paths for several processes (issue 37), beside the embedded ones, at one size:

    .venv/bin/python benchmarks/engine_latency.py [--size 10000] [--queries 100]

The same synthetic chunks (seeded, ``read_side.corpus``) with random unit vectors (a lookup stands in for the
embedder, so embedding is in no timing), each path queried for the top 20 with 150 candidates per side, as users
call it; the median wall time over the queries, the paths interleaved query by query (``store_query.timed``):
  - core store, embedded Chroma: ``open_store(path).search(q)`` (one process at a time on its folder);
  - core store, Chroma server: the same store's vectors in a ``chroma run`` server on loopback (``HttpClient``), BM25
    on the local disk beside it (the pairing's rule for a server);
  - Milvus Lite, in-process: ``MilvusStore("file.db").search(q)``, our fusion over the two engine sides, then the
    engine's own ``hybrid_search`` (``engine_fusion=True``);
  - Milvus Lite server on loopback (``milvus-lite server``): the same two, by URI, as several processes use it.
Milvus Lite is a local stand-in for a Milvus server: a server's figure depends on its index type (FLAT here),
segments, replicas and the network between the service and it.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from query_latency import Lookup  # noqa: E402
from query_latency import vectors as unit  # noqa: E402
from read_side import corpus  # noqa: E402
from store_query import timed  # noqa: E402

from ctx_retrieval.retrieval.milvus import MilvusStore  # noqa: E402
from ctx_retrieval.retrieval.store import IndexedChunk, build_store, open_store  # noqa: E402
from tests.helpers import ChromaServer, milvus_lite_server  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    texts = corpus(args.size)
    rng = random.Random(1)
    queries = [" ".join(rng.sample(words, min(8, len(words)))) for words in
               (texts[rng.randrange(args.size)].split() for _ in range(args.queries))]
    vectors, query_vectors = unit(args.size, 0), unit(len(queries), 1)
    embedder = Lookup({**dict(zip(texts, vectors, strict=True)), **dict(zip(queries, query_vectors, strict=True)),
                       "dimension": vectors[0]})  # MilvusStore sizes its dense field by embedding a word
    chunks = [IndexedChunk(f"c{i}", f"d{i // 20}", t, None) for i, t in enumerate(texts)]
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        build_store(work / "embedded", chunks, embedder=embedder).close()
        embedded = open_store(work / "embedded", embedder=embedder)
        chroma = ChromaServer(work / "chroma-server")
        chroma.start()
        try:
            build_store(work / "served", chunks, embedder=embedder, client=chroma.client()).close()
            served = open_store(work / "served", embedder=embedder, client=chroma.client())
            lite = MilvusStore(str(work / "lite.db"), embedder=embedder)
            started = time.perf_counter()
            lite.add(chunks)
            lite_build = time.perf_counter() - started
            lite_fused = MilvusStore(str(work / "lite.db"), embedder=embedder, engine_fusion=True)
            with milvus_lite_server(work / "milvus-server") as uri:
                remote = MilvusStore(uri, embedder=embedder)
                remote.add(chunks)
                remote_fused = MilvusStore(uri, embedder=embedder, engine_fusion=True)
                calls = {
                    "core store, embedded Chroma": lambda q: embedded.search(q, k=20),
                    "core store, Chroma server (loopback)": lambda q: served.search(q, k=20),
                    "Milvus Lite in-process, our fusion": lambda q: lite.search(q, k=20),
                    "Milvus Lite in-process, engine fusion": lambda q: lite_fused.search(q, k=20),
                    "Milvus Lite server (loopback), our fusion": lambda q: remote.search(q, k=20),
                    "Milvus Lite server (loopback), engine fusion": lambda q: remote_fused.search(q, k=20),
                }
                for call in calls.values():  # warm every path once
                    for q in queries[:3]:
                        call(q)
                figures = timed(calls, queries, rounds=3)
        finally:
            chroma.stop()
    print(f"{args.size:,} chunks, random 384-d vectors, {len(queries)} queries, top 20 of 150 per side "
          f"(Milvus Lite wrote them in {lite_build:.0f} s)\n")
    print("| path | query p50 (wall) | CPU in this process |\n|---|---|---|")
    for name, (cpu, wall) in figures.items():
        print(f"| {name} | {wall:.1f} ms | {cpu:.1f} ms |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
