"""Writes through ``ContextualVectorStore`` against the bare store beside it (issue 33's write target: within 2x of the
bare store plus BM25's own commit), in both adapters.

    .venv/bin/python benchmarks/write_path.py [--chunks 5000] [--batch 256]

The cookbook's 737 chunks, repeated under new ids to ``--chunks``, with precomputed vectors (a lookup stands in for the
embedder, so embedding is in no timing: it would be the same on both paths). Each path writes every chunk in
batches of ``--batch`` into a fresh Chroma collection on disk, in its own temporary folder:
  - bare: the framework's own Chroma store (LangChain ``add_documents``, LlamaIndex ``ChromaVectorStore.add``);
  - BM25 alone: ``BM25Store.upsert`` of the same entries, one commit per batch (what the pairing adds at least);
  - ours: ``ContextualVectorStore`` over the same kind of store (the pairing: journal, vectors, BM25).
Printed: seconds per path, and ours / (2 x bare + BM25 alone), which the target wants at or under 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DIM = 384


def chunks(n: int) -> list[tuple[str, str, str]]:
    from ctx_retrieval.evaluation import load_cookbook

    base = [(c.text, d.id) for d, cs in load_cookbook().items for c in cs]
    return [(f"c{i}", base[i % len(base)][0], base[i % len(base)][1]) for i in range(n)]


def vectors(texts: list[str]) -> dict[str, list[float]]:
    import numpy as np

    rng = np.random.default_rng(0)
    v = rng.standard_normal((len(set(texts)), DIM), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return {t: row.tolist() for t, row in zip(dict.fromkeys(texts), v, strict=True)}


def client(folder: str) -> Any:
    import chromadb

    return chromadb.PersistentClient(path=folder, settings=chromadb.Settings(anonymized_telemetry=False))


def langchain(rows: list[tuple[str, str, str]], batch: int, by_text: dict[str, list[float]]) -> dict[str, float]:
    from langchain_chroma import Chroma
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings

    from ctx_retrieval.retrieval.bm25_store import BM25Store
    from langchain_ctx import ContextualVectorStore
    from langchain_ctx.store import record

    class Lookup(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return [by_text[t] for t in texts]

        def embed_query(self, text: str) -> list[float]:
            return by_text[text]

    documents = [Document(page_content=t, metadata={"source": s, "chunk_id": i}, id=i) for i, t, s in rows]
    out = {}
    for name in ("bare", "BM25 alone", "ours"):
        with tempfile.TemporaryDirectory() as folder:
            store: Any = Chroma(collection_name="bench", embedding_function=Lookup(), client=client(folder),
                                collection_metadata={"hnsw:space": "cosine"})
            bm25 = BM25Store(os.path.join(folder, "bm25"))
            if name == "ours":
                store = ContextualVectorStore(store)
            started = time.perf_counter()
            for start in range(0, len(documents), batch):
                part = documents[start:start + batch]
                if name == "BM25 alone":
                    bm25.upsert(record(d).entry() for d in part)
                else:
                    store.add_documents(part, ids=[d.id for d in part])
            out[name] = time.perf_counter() - started
    return out


def llama_index(rows: list[tuple[str, str, str]], batch: int, by_text: dict[str, list[float]]) -> dict[str, float]:
    from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from ctx_retrieval.retrieval.bm25_store import BM25Store
    from llama_index_ctx import ContextualVectorStore
    from llama_index_ctx.store import record

    nodes = [TextNode(text=t, id_=i, embedding=by_text[t], metadata={"file_name": s},
                      relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=s)}) for i, t, s in rows]
    out = {}
    for name in ("bare", "BM25 alone", "ours"):
        with tempfile.TemporaryDirectory() as folder:
            collection = client(folder).get_or_create_collection("bench", metadata={"hnsw:space": "cosine"})
            store: Any = ChromaVectorStore(chroma_collection=collection)
            bm25 = BM25Store(os.path.join(folder, "bm25"))
            if name == "ours":
                store = ContextualVectorStore(store)
            started = time.perf_counter()
            for start in range(0, len(nodes), batch):
                part = nodes[start:start + batch]
                if name == "BM25 alone":
                    bm25.upsert(record(n).entry() for n in part)
                else:
                    store.add(part)
            out[name] = time.perf_counter() - started
    return out


def bm25_build(n: int) -> int:
    """Peak memory of building a BM25Store of ``n`` chunks streamed from a generator (60 words each)."""
    import subprocess

    script = f"""
import resource, sys, tempfile, time
sys.path.insert(0, {ROOT!r})
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store
def entries():
    for i in range({n}):
        yield BM25Entry(f"c{{i}}", " ".join(f"w{{(i * 7 + j * 13) % 50000}}" for j in range(60)), ref=f"d{{i // 20}}")
with tempfile.TemporaryDirectory() as folder:
    started = time.perf_counter()
    BM25Store(folder + "/bm25").upsert(entries())
    print(time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    seconds, peak = (float(x) for x in done.stdout.split())
    print(f"BM25Store of {n:,} chunks from a generator: {seconds:.0f} s, peak memory {peak:,.0f} MB")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--bm25-build", type=int, metavar="N",
                        help="instead: build a BM25Store of N synthetic chunks from a generator, in a fresh process, "
                             "and print its time and peak memory (max RSS)")
    args = parser.parse_args()
    if args.bm25_build:
        return bm25_build(args.bm25_build)
    rows = chunks(args.chunks)
    by_text = vectors([t for _, t, _ in rows])
    print(f"{args.chunks:,} chunks in batches of {args.batch}, Chroma on disk, vectors precomputed")
    print(f"{'adapter':<12} {'bare s':>8} {'BM25 s':>8} {'ours s':>8} {'ours / (2 bare + BM25)':>24}")
    for adapter, run in (("langchain", langchain), ("llama-index", llama_index)):
        times = run(rows, args.batch, by_text)
        bound = 2 * times["bare"] + times["BM25 alone"]
        print(f"{adapter:<12} {times['bare']:>8.2f} {times['BM25 alone']:>8.2f} {times['ours']:>8.2f} "
              f"{times['ours'] / bound:>24.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
