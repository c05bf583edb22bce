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
import math
import os
import signal
import sys
import threading
from collections.abc import Callable

from ctx_retrieval.testing.fake_anthropic import FakeAnthropicServer
from ctx_retrieval.testing.twin_faults import FAULT_KINDS


def _number(low: float, *, above: bool = False, integer: bool = False, high: float = math.inf
            ) -> Callable[[str], float]:
    """An argparse type: a finite number of at least ``low`` (above it with ``above``) and at most ``high``."""

    def parse(text: str) -> float:
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if integer else ' number'}") from None
        if not math.isfinite(value) or value < low or (above and value == low) or value > high:
            bound = f"above {low:g}" if above else f"from {low:g}" + (f" to {high:g}" if high < math.inf else "")
            raise argparse.ArgumentTypeError(f"{text} is not a finite number {bound}")
        return value

    return parse


def serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctx_retrieval.testing serve",
                                     description="The Anthropic API twin as a server on 127.0.0.1.")
    parser.add_argument("--port", type=_number(0, integer=True, high=65535), default=0,
                        help="the port (default: any free one, printed)")
    parser.add_argument("--latency", type=_number(0), default=0.02, help="seconds to the first token of each answer")
    parser.add_argument("--api-key", help="accept only this key (default: any)")
    parser.add_argument("--rpm", type=_number(0, above=True),
                        help="requests per minute before 429s (with anthropic-ratelimit-*)")
    parser.add_argument("--itpm", type=_number(0, above=True), help="input tokens per minute before 429s")
    parser.add_argument("--otpm", type=_number(0, above=True), help="output tokens per minute before 429s")
    parser.add_argument("--fault-rate", type=_number(0, high=1), default=0.0,
                        help="the share of requests answered with a fault, drawn from --faults")
    parser.add_argument("--faults", nargs="+", choices=FAULT_KINDS, metavar="KIND",
                        help=f"fault kinds for --fault-rate (default: all of {', '.join(FAULT_KINDS)})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fault draws")
    args = parser.parse_args(argv)
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
