"""A large ingestion under 30% faults: every chunk accounted for, nothing paid twice, nothing invented.

    .venv/bin/python benchmarks/faulty_ingestion.py [--chunks 2000] [--fault-rate 0.3] [--concurrency 16]

Against the fake Anthropic API: 429 with retry-after, 529 overloaded, 500, slow answers past the client timeout,
dropped connections and truncated bodies, drawn at random. Prints chunks done, lost, duplicated (answered
twice), invented (a context that is not the answer the API gave for that chunk), out of order, requests / ideal
and wall time.
"""

from __future__ import annotations

import argparse
import sys

from ctx_retrieval.testing.faults import run_faulty_ingestion


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--fault-rate", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    figures = run_faulty_ingestion(args.chunks, fault_rate=args.fault_rate, max_concurrency=args.concurrency)
    print(figures.format())
    return 0 if figures.lost == figures.duplicated == figures.invented == figures.out_of_order == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
