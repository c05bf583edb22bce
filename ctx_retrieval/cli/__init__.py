"""The ``ctx-retrieval`` command line: contextualize, index, query, cache, eval, queries and demo, a module each
(the options several commands share are declared once, in ``_common``).

Every command states which contextualizer wrote the contexts: Claude (``ANTHROPIC_API_KEY`` set), the no-LLM
heuristic (the default without a key), contexts recorded offline from a local LLM (``recorded``, cookbook
corpus only), or the local fake Anthropic API (``fake``: canned contexts, real request flow).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ctx_retrieval.cli import cache, contextualize, evaluation, index, query
from ctx_retrieval.cli._common import Args
from ctx_retrieval.errors import CtxRetrievalError


def _build_parser(*, twin: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctx-retrieval",
        description="Contextual retrieval: an LLM writes a short context for each chunk, and the context is "
                    "indexed with the chunk in both a vector index and BM25. Start with 'ctx-retrieval demo'.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress and warnings")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    evaluation.add_demo(sub, twin=twin)  # the commands in the order --help has always listed them
    for command in (contextualize, index, cache, query, evaluation):
        command.add_parser(sub, twin=twin)
    return parser


def main(argv: Sequence[str] | None = None, *, twin: Callable[..., Any] | None = None) -> int:
    """The command line. ``twin`` makes the Anthropic API twin (its class, or a factory), for ``--contextualizer
    fake``: passed by ``python -m ctx_retrieval.testing`` (the package's code never imports its test helpers)."""
    parser = _build_parser(twin=twin is not None)
    args = parser.parse_args(argv, namespace=Args())
    args.twin = twin
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    handler = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    try:
        return int(args.func(args))
    except (CtxRetrievalError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory: the input is too large for this machine; split it, or lower --max-input-mb",
              file=sys.stderr)
        return 2
    finally:  # a command that stops on Ctrl-C keeps its handler until it has written what was done
        if handler is not None:
            signal.signal(signal.SIGINT, handler)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
