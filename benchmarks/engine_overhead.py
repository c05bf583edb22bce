"""The engine's own cost per chunk, with a provider that answers at once (no network): our overhead, not the
LLM's, and memory while streaming over a corpus in waves.

    .venv/bin/python benchmarks/engine_overhead.py [--chunks 10000,100000] [--cache]

Documents of 20 paragraph chunks (~80 words) are generated lazily and fed to ``iter_contextualize`` (64
documents per wave); reported: microseconds per chunk and the peak of Python-allocated memory (tracemalloc) while
the stream runs, so growth with the corpus would show as a larger peak at the larger size.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

from ctx_retrieval import Chunk, ContextGenerator, SourceDocument
from ctx_retrieval.testing.faults import synthetic_corpus
from ctx_retrieval.testing.instant import InstantProvider


def documents(chunks: int) -> Iterator[tuple[SourceDocument, list[Chunk]]]:
    for start in range(0, chunks, 1000):  # built lazily, 1,000 chunks (50 documents) at a time
        yield from synthetic_corpus(min(1000, chunks - start), per_document=20, first_document=start // 20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", default="10000,100000")
    parser.add_argument("--cache", action="store_true", help="with the SQLite context cache (default: none)")
    args = parser.parse_args()
    print(f"{'chunks':>8} {'context cache':>14} {'total s':>8} {'us per chunk':>13} {'peak MB':>8}")
    for size in (int(s) for s in args.chunks.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            provider = InstantProvider()
            generator = ContextGenerator(provider, cache=Path(tmp) / "c.sqlite" if args.cache else False,
                                         max_concurrency=16)
            tracemalloc.start()
            started = time.perf_counter()
            done = 0
            for run in generator.iter_contextualize(documents(size), documents_per_wave=64):
                done += sum(1 for r in run if r.context)
            elapsed = time.perf_counter() - started
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            generator.close()
        assert done == size == provider.requests
        print(f"{size:>8,} {'on' if args.cache else 'off':>14} {elapsed:>8.1f} {elapsed / size * 1e6:>13.0f} "
              f"{peak / 2**20:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
