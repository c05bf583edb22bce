"""The cost of confirming BM25's hits against a Chroma server (issue 51): over a server, each hit BM25 found is
checked in one read (by id and text), so a machine's BM25 copy never returns a chunk another machine deleted or
replaced. The LangChain adapter's hybrid query p50 (wall, and CPU of this process) with the confirmation, as shipped,
and without it (the same store taken for one of unknown kind), on a real ``chroma run`` on 127.0.0.1.

    .venv/bin/python benchmarks/server_confirmation.py [--size 10000] [--queries 40]

Synthetic chunks and random vectors as in ``query_latency.py`` (query embedding is a lookup), cookbook queries.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "benchmarks")]

from query_latency import corpus, langchain_lookup, vectors  # noqa: E402

from tests.helpers import ChromaServer  # noqa: E402


def p50s(retriever: Any, queries: list[str]) -> tuple[float, float]:
    for query in queries[:3]:
        retriever.invoke(query)
    walls, cpus = [], []
    for query in queries:
        cpu, wall = time.process_time(), time.perf_counter()
        retriever.invoke(query)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls) * 1000, statistics.median(cpus) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    from langchain_chroma import Chroma

    from ctx_retrieval.evaluation import load_cookbook
    from ctx_retrieval.retrieval.pairing import StoreFacts
    from langchain_ctx import ContextualHybridRetriever, ContextualVectorStore

    texts, ids = corpus(args.size), [f"c{i}" for i in range(args.size)]
    queries = [q.query for q in load_cookbook().queries][: args.queries]
    by_query = dict(zip(queries, vectors(len(queries), seed=1), strict=True))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["CTX_RETRIEVAL_CACHE_DIR"] = os.path.join(tmp, "cache")  # this machine's BM25 copy
        server = ChromaServer(Path(tmp) / "chroma")
        server.start()
        try:
            client = server.client()
            collection = client.create_collection("bench", metadata={"hnsw:space": "cosine"}, embedding_function=None)
            embedded = vectors(args.size, seed=0)
            for start in range(0, args.size, 2000):
                end = start + 2000
                collection.add(ids=ids[start:end], documents=texts[start:end], embeddings=embedded[start:end],
                               metadatas=[{"chunk_id": i} for i in ids[start:end]])
            inner = Chroma(client=client, collection_name="bench", embedding_function=langchain_lookup(by_query))
            store = ContextualVectorStore(inner)
            retriever = ContextualHybridRetriever(vectorstore=store)
            confirmed = p50s(retriever, queries)
            store.pairing.facts = StoreFacts("unknown")  # the same store, its hits no longer confirmed
            plain = p50s(retriever, queries)
        finally:
            server.stop()
    print(f"{args.size:,} chunks on a Chroma server, LangChain ContextualHybridRetriever, p50 of {len(queries)} "
          "queries")
    print(f"  with the per-hit confirmation (as shipped): {confirmed[0]:.1f} ms wall, {confirmed[1]:.1f} ms CPU")
    print(f"  without it: {plain[0]:.1f} ms wall, {plain[1]:.1f} ms CPU "
          f"(the confirmation: {confirmed[0] / plain[0]:.2f}x wall, {confirmed[1] / plain[1]:.2f}x CPU)")


if __name__ == "__main__":
    main()
