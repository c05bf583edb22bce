"""How a context run walks the package: calls that cross from one ctx_retrieval module to another, per chunk, for
one 12-chunk document against the Anthropic twin (loopback, no cache), and how often the walk enters each module.

    .venv/bin/python benchmarks/module_hops.py [--chunks 12] [--top 15]

A hop is a call from a function of one package module into a function of another (the caller is the nearest
package frame on the stack; the twin, ``ctx_retrieval.testing``, is left out, as are calls the event loop makes
when it resumes a coroutine: those have no package caller). "Entries" counts, per module, how many times the walk
comes into it from another; calls into the generator from the modules below it are the layers calling back up
(reading the generator as their settings).
Figures are exact counts (no timing), so they are the same on any machine.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from ctx_retrieval import Chunk, ContextGenerator, SourceDocument
from ctx_retrieval.providers.anthropic import AnthropicProvider
from ctx_retrieval.testing import FakeAnthropicServer

PACKAGE = Path(__file__).resolve().parents[1] / "ctx_retrieval"
TESTING = PACKAGE / "testing"


def module_of(frame: FrameType) -> str | None:
    path = frame.f_code.co_filename
    if not path.startswith(str(PACKAGE)) or path.startswith(str(TESTING)):
        return None
    return str(Path(path).relative_to(PACKAGE.parent).with_suffix("")).replace("/", ".")


class Walk:
    def __init__(self) -> None:
        self.hops: Counter[tuple[str, str]] = Counter()
        self.trail: list[str] = []  # modules in the order the walk enters them (consecutive repeats merged)
        self.thread = threading.get_ident()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or threading.get_ident() != self.thread:
            return
        callee = module_of(frame)
        if callee is None:
            return
        caller_frame = frame.f_back
        while caller_frame is not None and module_of(caller_frame) is None:
            caller_frame = caller_frame.f_back
        caller = module_of(caller_frame) if caller_frame is not None else None
        if caller is not None and caller != callee:
            self.hops[(caller, callee)] += 1
        if not self.trail or self.trail[-1] != callee:
            self.trail.append(callee)


def document(chunks: int) -> tuple[SourceDocument, list[Chunk]]:
    # ~500 tokens a chunk: the document is over the model's minimum cacheable length, so the run warms the cache
    # with one chunk and the others read it, as a real run does
    paragraphs = [" ".join(f"Paragraph {i}, sentence {j}: revenue in region {i} grew {i + j}% while costs of line "
                           f"{j} fell, and the board noted item {i * 7 + j}." for j in range(30))
                  for i in range(chunks)]
    doc = SourceDocument(id="report", text="\n\n".join(paragraphs))
    return doc, [Chunk(id=f"c{i}", text=p, position=i) for i, p in enumerate(paragraphs)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=12)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    doc, chunks = document(args.chunks)
    with FakeAnthropicServer() as server:
        provider = AnthropicProvider(model="claude-haiku-4-5", api_key="sk-ant-bench-0123456789abcdef",
                                     base_url=server.base_url)
        generator = ContextGenerator(provider, cache=False, exact_token_counts=False)
        generator.contextualize(doc, chunks[:1])  # the SDK's imports and first client out of the count
        walk = Walk()
        sys.setprofile(walk)
        try:
            run = generator.contextualize(doc, chunks)
        finally:
            sys.setprofile(None)
        generator.close()
    assert run.report.failed == 0 and len(run) == args.chunks
    total = sum(walk.hops.values())
    modules = {m for pair in walk.hops for m in pair}
    entered = Counter(walk.trail)
    print(f"one document of {args.chunks} chunks: {total:,} hops between {len(modules)} modules, "
          f"{total / args.chunks:.1f} a chunk")
    print(f"\n{'module':<44} {'entries':>8} {'per chunk':>10}")
    for module, count in entered.most_common(args.top):
        print(f"{module:<44} {count:>8} {count / args.chunks:>10.1f}")
    up = {a: n for (a, b), n in walk.hops.items()  # _aio drives the generator's coroutines: it is above it
          if b == "ctx_retrieval.contextualize.generator" and a != "ctx_retrieval._aio"}
    print(f"\ncalls back up into the generator (a layer below reading it as its settings): {sum(up.values())} "
          + (f"({', '.join(f'{a}: {n}' for a, n in sorted(up.items()))})" if up else ""))
    print(f"\n{'hop':<70} {'count':>7}")
    for (a, b), count in walk.hops.most_common(args.top):
        print(f"{a + ' -> ' + b:<70} {count:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
