"""``ctx-retrieval contextualize``: a context for every chunk of some documents, as JSONL."""

from __future__ import annotations

from typing import Any

from ctx_retrieval.cli._common import (
    Args,
    add_chunking_args,
    add_contextualizer_args,
    add_input_limit,
    check_out,
    dry_run_estimate,
    make_contextualizer,
    positive_mb,
    say,
    splitter_for,
    write_jsonl,
)
from ctx_retrieval.loaders import load_documents


def _cmd_contextualize(args: Args) -> int:
    items = load_documents(args.inputs, splitter_for(args), max_bytes=int(args.max_input_mb * 2**20))
    if args.dry_run:
        return dry_run_estimate(args, items)
    check_out(args.out)
    contextualizer = make_contextualizer(args)
    say(f"contextualizer: {contextualizer.label}")
    try:
        contexts = contextualizer.run(items)
    finally:
        contextualizer.close()
    rows = [{"document_id": document.id, "chunk_id": chunk.id, "position": chunk.position, "text": chunk.text,
             "context": contexts.get(chunk.id), **contextualizer.records.get(chunk.id, {})}
            for document, chunks in items for chunk in chunks]
    write_jsonl(args.out, rows)
    if args.out != "-":
        with_context = sum(1 for row in rows if row["context"])
        undone = sum(1 for row in rows if row.get("status") in ("not_attempted", "failed"))
        rest = (f"; {undone} without one (not attempted or failed): run the same command again to do them"
                if undone else "")
        say(f"wrote {len(rows)} chunks to {args.out}: {with_context} with a context{rest}")
    return 130 if contextualizer.interrupted else 0


def add_parser(sub: Any, *, twin: bool) -> None:
    """The command's options."""
    ctx = sub.add_parser("contextualize", help="write a context for every chunk of some documents",
                         description="Read documents (text files or folders, a documents JSONL, or the cookbook's "
                         "codebase_chunks.json), write one JSON line per chunk with its context, and report usage.")
    ctx.add_argument("inputs", nargs="+", help="files or folders")
    ctx.add_argument("--out", default="-", help="output JSONL (default: standard output)")
    add_chunking_args(ctx, "the embedder whose tokens size the chunks")
    ctx.add_argument("--dry-run", action="store_true", help="only estimate requests, tokens and dollars")
    add_input_limit(ctx)
    ctx.add_argument("--on-error", choices=["raise", "skip"], default="raise")
    ctx.add_argument("--refresh-stale", action="store_true",
                     help="rewrite the stale contexts of these inputs (reused after an edit or a model change), "
                          "nearest the edits first; a chunk keeps its stale context until the new one is written")
    ctx.add_argument("--batch", action="store_true",
                     help="send the requests as Message Batches, at half price (results take up to 24 hours)")
    ctx.add_argument("--poll-interval", type=positive_mb, default=30.0, metavar="SECONDS",
                     help="with --batch: seconds between checks on submitted batches (default %(default)s)")
    add_contextualizer_args(ctx, twin=twin)
    ctx.set_defaults(func=_cmd_contextualize)
