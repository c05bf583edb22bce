"""LlamaIndex's DocumentContextExtractor vs ctx-retrieval on the same nodes and the same fake Anthropic API.

    ./benchmarks/setup_extractor_env.sh     # once: .venv-extractor, llama-index-llms-anthropic + anthropic 0.125
    .venv/bin/python benchmarks/llama_index_extractor_vs_ours.py [--documents 90] [--latency 0.1]

The extractor needs llama-index-llms-anthropic, which fails with current anthropic releases, so it runs in its own
environment (a subprocess) against a fresh fake server; ours runs here against another fresh one. Both see the
cookbook corpus's first --documents documents as LlamaIndex nodes (with their source documents in a docstore for
the extractor) and the twin's claude-haiku-5-5 rules. The extractor's LLM is given thinking disabled, as the
migration guide says (``--extractor-as-written`` leaves it on). Printed for each: requests, cache writes (count
and tokens), cache-read, input and output tokens, dollars and wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from ctx_retrieval import AnthropicProvider, ContextGenerator, TokenUsage
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.models import MODELS, request_cost_usd
from ctx_retrieval.testing import FakeAnthropicServer

ROOT = Path(__file__).resolve().parents[1]
EXTRACTOR_PYTHON = ROOT / ".venv-extractor" / "bin" / "python"
MODEL = "claude-haiku-5-5"

EXTRACTOR_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys, time
    from llama_index.core.extractors import DocumentContextExtractor
    from llama_index.core.schema import Document, NodeRelationship, RelatedNodeInfo, TextNode
    from llama_index.core.storage.docstore import SimpleDocumentStore
    from llama_index.llms.anthropic import Anthropic

    corpus = json.load(open(sys.argv[2]))
    docstore = SimpleDocumentStore()
    nodes = []
    for doc in corpus:
        document = Document(text=doc["text"], id_=doc["id"])
        docstore.add_documents([document])
        for chunk in doc["chunks"]:
            node = TextNode(text=chunk["text"], id_=chunk["id"], start_char_idx=chunk["start"])
            node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=doc["id"])
            nodes.append(node)
    # As Anthropic's migration guide to Claude Haiku 5.5 says: thinking is on by default and counts against
    # max_tokens, so a context writer turns it off (argv[4] == "as-written" leaves it on).
    thinking = None if sys.argv[4:] == ["as-written"] else {"type": "disabled"}
    llm = Anthropic(model=sys.argv[3], api_key="sk-ant-extractor-benchmark-000", base_url=sys.argv[1],
                    max_tokens=150, thinking_dict=thinking)
    extractor = DocumentContextExtractor(docstore=docstore, llm=llm, num_workers=4, max_context_length=200_000,
                                         max_output_tokens=150)
    started = time.perf_counter()
    metadata = asyncio.run(extractor.aextract(nodes))
    print(json.dumps({"wall_time_s": time.perf_counter() - started,
                      "with_context": sum(1 for m in metadata if m.get("context"))}))
    """
)


def _row(name: str, server: FakeAnthropicServer, wall: float, with_context: int, chunks: int) -> dict[str, object]:
    totals = server.totals()
    usage = TokenUsage(totals["input_tokens"], totals["output_tokens"], totals["cache_creation_input_tokens"],
                       totals["cache_read_input_tokens"])
    dollars = sum(request_cost_usd(TokenUsage.from_dict(r.usage or {}), MODELS[MODEL]) for r in server.successful())
    return {"name": name, "requests": totals["requests"], "cache_writes": totals["cache_writes"],
            "cache_write_tokens": usage.cache_creation_input_tokens, "cache_read_tokens": usage.cache_read_input_tokens,
            "input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "dollars": dollars,
            "wall_time_s": wall, "with_context": f"{with_context}/{chunks}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=90)
    parser.add_argument("--latency", type=float, default=0.1, help="fake latency per request, seconds")
    parser.add_argument("--per-token-latency", type=float, default=0.004,
                        help="extra fake latency per output token, seconds (answers vary in length)")
    parser.add_argument("--extractor-as-written", action="store_true",
                        help="leave the extractor's thinking on (claude-haiku-5-5 thinks by default)")
    args = parser.parse_args()
    corpus = load_cookbook()
    items = corpus.items[: args.documents]
    chunks = sum(len(c) for _, c in items)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if EXTRACTOR_PYTHON.exists():
            data = Path(tmp) / "corpus.json"
            data.write_text(json.dumps([{"id": d.id, "text": d.text, "chunks": [
                {"id": c.id, "text": c.text, "start": c.start_char} for c in cs]} for d, cs in items]))
            with FakeAnthropicServer(latency_s=args.latency,
                                     latency_per_output_token_s=args.per_token_latency) as server:
                command = [str(EXTRACTOR_PYTHON), "-c", EXTRACTOR_SCRIPT, server.base_url, str(data), MODEL,
                           *(["as-written"] if args.extractor_as_written else [])]
                done = subprocess.run(command, capture_output=True, text=True, timeout=3600,
                                      env={**os.environ, "PYTHONPATH": ""})
                if done.returncode != 0:
                    print("DocumentContextExtractor failed:\n" + done.stderr[-2000:])
                else:
                    result = json.loads(done.stdout.strip().splitlines()[-1])
                    rows.append(_row("LlamaIndex DocumentContextExtractor (num_workers=4)", server,
                                     result["wall_time_s"], result["with_context"], chunks))
        else:
            print(f"no {EXTRACTOR_PYTHON}: run benchmarks/setup_extractor_env.sh to include DocumentContextExtractor")
        with FakeAnthropicServer(latency_s=args.latency, latency_per_output_token_s=args.per_token_latency) as server:
            provider = AnthropicProvider(MODEL, api_key="sk-ant-ours-benchmark-0000", base_url=server.base_url)
            generator = ContextGenerator(provider, cache=False, max_concurrency=4)
            started = time.perf_counter()
            run = generator.contextualize_many(items)
            rows.append(_row("ctx-retrieval ContextGenerator (max_concurrency=4)", server,
                             time.perf_counter() - started, sum(1 for r in run if r.context), chunks))
    print(f"{len(items)} cookbook documents, {chunks} chunks; fake latency {args.latency * 1000:.0f} ms + "
          f"{args.per_token_latency * 1000:.0f} ms per output token; {MODEL}")
    header = f"{'':56} {'requests':>8} {'writes':>7} {'write tok':>10} {'read tok':>10} {'input tok':>10} " \
             f"{'output tok':>10} {'dollars':>8} {'wall s':>7} {'contexts':>9}"
    print(header)
    for r in rows:
        print(f"{r['name']:56} {r['requests']:>8} {r['cache_writes']:>7} {r['cache_write_tokens']:>10,} "
              f"{r['cache_read_tokens']:>10,} {r['input_tokens']:>10,} {r['output_tokens']:>10,} "
              f"{r['dollars']:>8.4f} {r['wall_time_s']:>7.1f} "
              f"{r['with_context']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
