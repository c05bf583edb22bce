"""``python -m ctx_retrieval.testing <command> ...``: the ``ctx-retrieval`` command line with the Anthropic API twin
available as ``--contextualizer fake`` (the Claude request flow, prompt caching and the cost report, offline).
``$CTX_RETRIEVAL_TWIN_LATENCY_S`` sets the twin's latency per answer (default 0.02 s).

``python -m ctx_retrieval.testing serve --port 8765``: the twin as a server of its own on 127.0.0.1, for several
processes (an ingestion job and a query service) against one API: point them at ``--base-url
http://127.0.0.1:8765`` (``AnthropicProvider(base_url=...)``) with ``--endpoint-id ctx-retrieval-twin`` so their
context cache keeps its entries when the twin restarts on another port. Rules, limits and faults are options
(``serve --help``); it stops on Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import threading

from ctx_retrieval.testing.fake_anthropic import FAULT_KINDS, FakeAnthropicServer


def serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctx_retrieval.testing serve",
                                     description="The Anthropic API twin as a server on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=0, help="the port (default: any free one, printed)")
    parser.add_argument("--latency", type=float, default=0.02, help="seconds to the first token of each answer")
    parser.add_argument("--api-key", help="accept only this key (default: any)")
    parser.add_argument("--rpm", type=float, help="requests per minute before 429s (with anthropic-ratelimit-*)")
    parser.add_argument("--itpm", type=float, help="input tokens per minute before 429s")
    parser.add_argument("--otpm", type=float, help="output tokens per minute before 429s")
    parser.add_argument("--fault-rate", type=float, default=0.0,
                        help="the share of requests answered with a fault, drawn from --faults")
    parser.add_argument("--faults", nargs="+", choices=FAULT_KINDS, metavar="KIND",
                        help=f"fault kinds for --fault-rate (default: all of {', '.join(FAULT_KINDS)})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault draws")
    args = parser.parse_args(argv)
    if not 0.0 <= args.fault_rate <= 1.0:
        parser.error("--fault-rate takes a share between 0 and 1")
    server = FakeAnthropicServer(port=args.port, latency_s=args.latency, api_key=args.api_key, seed=args.seed,
                                 rate_limit_rpm=args.rpm, rate_limit_itpm=args.itpm, rate_limit_otpm=args.otpm)
    try:
        server.start()
    except OSError as exc:
        print(f"cannot serve on 127.0.0.1:{args.port}: {exc.strerror or exc}; pick another --port",
              file=sys.stderr)
        return 2
    if args.fault_rate:
        server.set_fault_rate(args.fault_rate, {k: 1.0 for k in args.faults} if args.faults else None)
    done = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: done.set())
    print(f"the Anthropic API twin serves {server.base_url} (Ctrl-C stops it)", flush=True)
    while not done.wait(3600):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        raise SystemExit(serve(sys.argv[2:]))
    from ctx_retrieval.cli import main

    latency_s = float(os.environ.get("CTX_RETRIEVAL_TWIN_LATENCY_S", "0.02"))
    raise SystemExit(main(twin=functools.partial(FakeAnthropicServer, latency_s=latency_s)))
