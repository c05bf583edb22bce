"""A missing BM25 replica, built from the vector store's rows (issue 50): how long a service that opens a Chroma
collection with no BM25 folder on its machine takes to have both sides, against the floor of reading those rows.

    .venv/bin/python benchmarks/bm25_refill.py [--sizes 10000,100000] [--framework langchain|llama-index]

Synthetic corpora (``query_latency.corpus``: seeded chunks mixing the words of two cookbook chunks) with random
unit vectors, in a Chroma collection on disk. Each size prints, in one process:
  - floor: reading every row's id, text and metadata from the collection, a page of 5,000 at a time (what any
    rebuild must read; the engine's own ``collection.get``);
  - our BM25 analysis of the same texts alone (``tokenize``: a rebuild must analyse every text it indexes);
  - the rows as the adapter reads them (``iter_records``: the floor plus the framework's objects);
  - ours, waiting: ``ContextualVectorStore(store, bm25=empty folder)`` until both sides are whole (the fill, with
    its progress lines);
  - ours, in the background (``bm25_fill="background"``): the time to the first hybrid answer (from the vectors
    alone, with a warning) and to a whole BM25 side.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from query_latency import chroma_collection, corpus, langchain_lookup, llama_index_vector_index, vectors

_PAGE = 5000


def timed(run: Any) -> tuple[float, float, Any]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def measure(size: int, framework: str) -> None:
    texts = corpus(size)
    ids = [f"c{i}" for i in range(size)]
    query = texts[7]
    by_query = {query: vectors(1, seed=1)[0]}
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        client, collection = chroma_collection(ids, texts, vectors(size, seed=0), tmp)
        print(f"{size:,} chunks: Chroma collection built in {time.perf_counter() - started:.1f} s", flush=True)

        def read_floor() -> int:
            count, offset = 0, 0
            while True:
                page = collection.get(include=["documents", "metadatas"], limit=_PAGE, offset=offset)
                count += len(page["ids"])
                if len(page["ids"]) < _PAGE:
                    return count
                offset += _PAGE

        if framework == "langchain":
            from langchain_chroma import Chroma

            from langchain_ctx import ContextualHybridRetriever, ContextualVectorStore
            from langchain_ctx.store import rows_for

            inner: Any = Chroma(client=client, collection_name="bench", embedding_function=langchain_lookup(by_query))

            def open_wrapped(folder: str, fill: str) -> Any:
                return ContextualVectorStore(inner, bm25=folder, bm25_fill=fill)

            def answer(wrapped: Any) -> int:
                return len(ContextualHybridRetriever(vectorstore=wrapped).invoke(query))
        else:
            from llama_index_ctx import ContextualHybridRetriever as LlamaIndexHybrid
            from llama_index_ctx import ContextualVectorStore as LlamaIndexStore
            from llama_index_ctx.store import rows_for as rows_for_llama_index

            index = llama_index_vector_index(collection, by_query)
            inner = index.vector_store
            rows_for = rows_for_llama_index  # type: ignore[assignment]

            def open_wrapped(folder: str, fill: str) -> Any:
                return LlamaIndexStore(inner, bm25=folder, bm25_fill=fill)

            def answer(wrapped: Any) -> int:
                return len(LlamaIndexHybrid.from_vector_store(wrapped, embed_model=index._embed_model).retrieve(query))

        floor_wall, floor_cpu, count = timed(read_floor)
        assert count == size
        rows_wall, _, records = timed(lambda: sum(1 for _ in rows_for(inner).iter_records()))
        assert records == size
        from ctx_retrieval import tokenize

        analysis_wall, _, _ = timed(lambda: [tokenize(t) for t in texts])
        wait_wall, wait_cpu, wrapped = timed(lambda: open_wrapped(os.path.join(tmp, "bm25-wait"), "wait"))
        assert len(wrapped.pairing.bm25) == size
        wrapped.pairing.close()

        started = time.perf_counter()
        background = open_wrapped(os.path.join(tmp, "bm25-background"), "background")
        hits = answer(background)
        first = time.perf_counter() - started
        background.pairing.wait_filled()
        whole = time.perf_counter() - started
        assert len(background.pairing.bm25) == size and hits
        bound = floor_wall + analysis_wall
        print(f"  floor: reading the rows (collection.get, pages of {_PAGE:,}) {floor_wall:.1f} s wall, "
              f"{floor_cpu:.1f} s CPU; our BM25 analysis of their text alone {analysis_wall:.1f} s; both {bound:.1f} s")
        print(f"  the rows as the adapter reads them (iter_records): {rows_wall:.1f} s")
        print(f"  BM25 filled, waiting: {wait_wall:.1f} s wall, {wait_cpu:.1f} s CPU: {wait_wall / floor_wall:.2f}x "
              f"reading the rows, {wait_wall / bound:.2f}x reading and analysing them")
        print(f"  BM25 filled in the background: first hybrid answer after {first:.2f} s (vectors alone), both "
              f"sides whole after {whole:.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--framework", choices=["langchain", "llama-index"], default="langchain")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="    log: %(message)s")
    for size in map(int, args.sizes.split(",")):
        measure(size, args.framework)


if __name__ == "__main__":
    main()
