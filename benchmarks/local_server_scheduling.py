"""Scheduling against a local server with a per-slot prefix cache (llama.cpp), on the OpenAI twin's llama.cpp
profile: prompt tokens the server had to compute, against the minimum (each document read once), and wall time.

    .venv/bin/python benchmarks/local_server_scheduling.py [--documents 12] [--slots 1 4]

The twin's ``llama.cpp`` profile keeps one prompt per slot and reuses its longest common prefix (llama-server's
slot rules, ``--slot-prompt-similarity`` 0.10), and spends --ms-per-token milliseconds per prompt token it computes
(default 0.25: about 4,000 tokens/s, a small model on a CPU). Rows, for each slot count:

- per-slot (ours): the provider reads /props (slots, n_ctx) and the generator keeps each slot on one document.
- interleaved (before issue 15): the same generator with the server's description hidden: max_concurrency 8,
  documents interleaved in the slots, as the issue measured against a real llama-cpp-python server.

The minimum is computed from the requests sent: each prompt minus what it shares with the previous request of the
same document.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctx_retrieval import ContextGenerator  # noqa: E402
from ctx_retrieval.evaluation import load_cookbook  # noqa: E402
from ctx_retrieval.providers import OpenAICompatibleProvider  # noqa: E402
from ctx_retrieval.testing import FakeOpenAIServer  # noqa: E402


def run(items: list, slots: int, seconds_per_token: float, *, per_slot: bool) -> tuple[int, int, int, float]:
    with FakeOpenAIServer(profile="llama.cpp", slots=slots, n_ctx=32768,
                          seconds_per_prompt_token=seconds_per_token) as server:
        provider = OpenAICompatibleProvider("local-model", base_url=server.base_url)
        generator = ContextGenerator(provider, cache=False, max_concurrency=8)
        if not per_slot:
            async def hidden() -> list[str]:
                return []

            provider.aprepare = hidden  # type: ignore[method-assign]
        started = time.perf_counter()
        result = generator.contextualize_many(items)
        elapsed = time.perf_counter() - started
        assert result.report.failed == 0
        return server.prompt_tokens_total, server.prompt_tokens_processed, server.minimum_prompt_tokens(), elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=12)
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--ms-per-token", type=float, default=0.25)
    args = parser.parse_args()
    corpus = load_cookbook()
    items = [item for item in corpus.items if 4 <= len(item[1]) <= 12][: args.documents]
    chunks = sum(len(c) for _, c in items)
    print(f"{len(items)} cookbook documents, {chunks} chunks; llama.cpp twin at {args.ms_per_token} ms per computed "
          "prompt token\n")
    print("| slots | scheduling | prompt tokens | computed | minimum | computed / minimum | wall time (s) |")
    print("|---|---|---|---|---|---|---|")
    for slots in args.slots:
        for label, per_slot in (("per-slot (ours)", True), ("interleaved (before)", False)):
            total, computed, least, elapsed = run(items, slots, args.ms_per_token / 1000, per_slot=per_slot)
            print(f"| {slots} | {label} | {total:,} | {computed:,} | {least:,} | {computed / least:.2f}x | "
                  f"{elapsed:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
