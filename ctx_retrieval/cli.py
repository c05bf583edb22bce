"""The ``ctx-retrieval`` command line.

``ctx-retrieval demo`` contextualizes a bundled sample document and prints each chunk's context and the usage
report: with Claude when ``ANTHROPIC_API_KEY`` is set, with the no-LLM heuristic otherwise (it says which), or
against the local fake Anthropic server with ``--provider fake`` to show prompt caching and the cost report
without a key.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import textwrap
from collections.abc import Sequence
from importlib import resources

from .errors import CtxRetrievalError
from .heuristic import HeuristicContextualizer
from .types import Chunk, SourceDocument, split_into_chunks

__all__ = ["main"]

SAMPLE_DOCUMENT = "sample_acme_q2_2023.md"


def split_paragraphs(text: str, max_chars: int = 900) -> list[str]:
    """Split ``text`` at blank lines into chunks of whole paragraphs of at most ``max_chars`` (a paragraph
    longer than that is its own chunk). The chunks concatenate back to the text."""
    paragraphs: list[str] = []
    start = 0
    while start < len(text):
        end = text.find("\n\n", start)
        end = len(text) if end < 0 else end + 2
        paragraphs.append(text[start:end])
        start = end
    chunks: list[str] = []
    for paragraph in paragraphs:
        if chunks and len(chunks[-1]) + len(paragraph) <= max_chars:
            chunks[-1] += paragraph
        else:
            chunks.append(paragraph)
    return chunks


def load_sample() -> tuple[SourceDocument, list[Chunk]]:
    text = resources.files("ctx_retrieval").joinpath("data").joinpath(SAMPLE_DOCUMENT).read_text(encoding="utf-8")
    document = SourceDocument(id="acme-q2-2023", text=text, metadata={"source": SAMPLE_DOCUMENT})
    return document, split_into_chunks(document, split_paragraphs(text))


def _demo(args: argparse.Namespace) -> int:
    from .generator import ContextGenerator
    from .providers.anthropic import AnthropicProvider

    document, chunks = load_sample()
    choice = args.provider
    if choice == "auto":
        choice = "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "heuristic"
    print(f"ctx-retrieval demo: {len(chunks)} chunks of the bundled sample document '{SAMPLE_DOCUMENT}'")
    server = None
    try:
        if choice == "heuristic":
            print("contextualizer: heuristic (title and nearest heading, no LLM) because no ANTHROPIC_API_KEY is "
                  "set; set it to use Claude, or pass --provider fake to see caching against a local fake API")
            run = HeuristicContextualizer().contextualize(document, chunks)
        else:
            if choice == "fake":
                from .testing import FakeAnthropicServer

                server = FakeAnthropicServer(latency_s=0.05).start()
                provider = AnthropicProvider(args.model, api_key="sk-ant-fake-demo-key-000000",
                                             base_url=server.base_url)
                print("contextualizer: Claude API shape against the local FAKE server (canned contexts, real "
                      "request flow, caching and cost accounting)")
            else:
                provider = AnthropicProvider(args.model)
                print(f"contextualizer: Claude ({args.model}) through the Anthropic API")
            cache: object = args.cache if args.cache else True
            if choice == "fake" and not args.cache:
                cache = False  # canned contexts never go into the user's real context cache
            generator = ContextGenerator(provider, cache=cache, progress=args.progress)  # type: ignore[arg-type]
            print(generator.estimate([(document, chunks)]).format())
            run = generator.contextualize(document, chunks)
        for chunk, result in zip(chunks, run, strict=True):
            first_line = " ".join(chunk.text.split())[:90]
            print(f"\n[{result.position}] chunk: {first_line}...")
            print(textwrap.fill(f"context ({result.status}): {result.context}", width=110,
                                subsequent_indent="    "))
        print("\nusage report:")
        print(textwrap.indent(run.report.format(), "  "))
    finally:
        if server is not None:
            server.stop()
    return 0


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctx-retrieval",
        description="Contextual retrieval: LLM-written chunk contexts for embedding and BM25 indexes.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress and warnings")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="contextualize a bundled sample document and print contexts and the usage report",
        description="Contextualize a bundled sample document (a fictional quarterly report) and print each "
        "chunk's context and the run's usage report.")
    demo.add_argument("--provider", choices=["auto", "anthropic", "heuristic", "fake"], default="auto",
                      help="auto: Claude when ANTHROPIC_API_KEY is set, else the heuristic (default)")
    demo.add_argument("--model", default="claude-3-haiku-20240307", help="Claude model id")
    demo.add_argument("--cache", default=None, help="context cache file (default: the user cache directory)")
    demo.add_argument("--progress", action="store_true", help="show a progress bar")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except CtxRetrievalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
