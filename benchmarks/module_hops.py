"""How a context run walks the package: calls that cross from one ctx_retrieval module to another, per chunk, for
one 12-chunk document against the Anthropic twin (loopback; the default path: a context cache, request threads),
and how often the walk enters each module.

    .venv/bin/python benchmarks/module_hops.py [--chunks 12] [--top 15]

A hop is a call from a function of one package module into a function of another (the caller is the nearest
package frame on the stack; the twin, ``ctx_retrieval.testing``, is left out, as are the event loop's steps of a
coroutine: its first step as a task, and every resumption after an ``await``. The profiler reports each as a call,
with the awaiting coroutine, or the ``run_sync`` that runs the loop, as its caller; until session 28 they were
counted, and that figure is printed beside for comparison). "Entries" counts, per module, how many times the walk
comes into it from another; calls into the generator from the modules below it are the layers calling back up
(reading the generator as their settings).
Figures are exact counts (no timing), so they are the same on any machine.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from ctx_retrieval import Chunk, ContextGenerator, SourceDocument
from ctx_retrieval.providers.anthropic import AnthropicProvider
from ctx_retrieval.testing import FakeAnthropicServer

PACKAGE = Path(__file__).resolve().parents[1] / "ctx_retrieval"
ASYNCIO = str(Path(asyncio.__file__).parent)
TESTING = PACKAGE / "testing"


def module_of(frame: FrameType) -> str | None:
    path = frame.f_code.co_filename
    if not path.startswith(str(PACKAGE)) or path.startswith(str(TESTING)):
        return None
    return str(Path(path).relative_to(PACKAGE.parent).with_suffix("")).replace("/", ".")


class Walk:
    def __init__(self) -> None:
        self.hops: Counter[tuple[str, str]] = Counter()
        self.resumed: Counter[tuple[str, str]] = Counter()  # coroutines stepped by the loop: not hops
        self.trail: list[str] = []  # modules in the order the walk enters them (consecutive repeats merged)
        self.thread = threading.get_ident()
        self.frames: set[FrameType] = set()  # every package frame seen: seen again, it is resumed, not called

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or threading.get_ident() != self.thread:
            return
        callee = module_of(frame)
        if callee is None:
            return
        parent = frame.f_back  # the loop's own frame when the loop steps a task
        resumed = frame in self.frames or (parent is not None and parent.f_code.co_filename.startswith(ASYNCIO))
        self.frames.add(frame)
        caller_frame = frame.f_back
        while caller_frame is not None and module_of(caller_frame) is None:
            caller_frame = caller_frame.f_back
        caller = module_of(caller_frame) if caller_frame is not None else None
        if caller is not None and caller != callee:
            (self.resumed if resumed else self.hops)[(caller, callee)] += 1
        if not resumed and (not self.trail or self.trail[-1] != callee):
            self.trail.append(callee)


def document(chunks: int, name: str = "report") -> tuple[SourceDocument, list[Chunk]]:
    # ~500 tokens a chunk: the document is over the model's minimum cacheable length, so the run warms the cache
    # with one chunk and the others read it, as a real run does
    paragraphs = [" ".join(f"Paragraph {i}, sentence {j}: revenue in region {i} grew {i + j}% while costs of line "
                           f"{j} fell, and the board noted item {i * 7 + j}." for j in range(30))
                  for i in range(chunks)]
    doc = SourceDocument(id=name, text="\n\n".join(paragraphs))
    return doc, [Chunk(id=f"c{i}", text=p, position=i) for i, p in enumerate(paragraphs)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=12)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    doc, chunks = document(args.chunks)
    with tempfile.TemporaryDirectory() as folder, FakeAnthropicServer() as server:
        provider = AnthropicProvider(model="claude-haiku-4-5", api_key="sk-ant-bench-0123456789abcdef",
                                     base_url=server.base_url)
        # the default path: a context cache (in a temporary folder) and the provider's request threads
        generator = ContextGenerator(provider, cache=str(Path(folder) / "contexts.sqlite"), exact_token_counts=False)
        generator.contextualize(*document(1, "warm-up"))  # the SDK's imports, first client and cache out of the count
        walk = Walk()
        sys.setprofile(walk)
        try:
            run = generator.contextualize(doc, chunks)
        finally:
            sys.setprofile(None)
        generator.close()
    assert run.report.failed == 0 and len(run) == args.chunks == run.report.generated
    total = sum(walk.hops.values())
    modules = {m for pair in walk.hops for m in pair}
    entered = Counter(walk.trail)
    resumed = sum(walk.resumed.values())
    print(f"one document of {args.chunks} chunks: {total:,} hops between {len(modules)} modules, "
          f"{total / args.chunks:.1f} a chunk ({(total + resumed) / args.chunks:.1f} counting the {resumed} "
          "steps of coroutines by the event loop, as before session 28)")
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
