"""``ctx-retrieval index``: a contextual hybrid index (Chroma + BM25) in a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ctx_retrieval.cli._common import (
    Args,
    add_analysis_args,
    add_chunking_args,
    add_contextualizer_args,
    add_input_limit,
    make_contextualizer,
    milvus_uri,
    offline_embedder,
    postgres_url,
    resolve_embedder,
    say,
    splitter_for,
    store_name,
)
from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.loaders import load_documents
from ctx_retrieval.naming import printable


def _cmd_index(args: Args) -> int:
    from ctx_retrieval.retrieval.store import IndexedChunk, build_store

    if milvus_uri(args.store) is None and postgres_url(args.store) is None and Path(args.store).exists() and \
            not Path(args.store).is_dir():
        raise InvalidInputError(f"--store {args.store} is a file: give an index folder (or milvus:URI)")  # unpaid
    embedder = offline_embedder(progress=not args.quiet, name=resolve_embedder(args))  # sizes the chunks, embeds them
    items = load_documents(args.inputs, splitter_for(args, embedder), max_bytes=int(args.max_input_mb * 2**20))
    for document, _ in items:  # before any request: an index's ids are text (a vector store refuses other bytes)
        try:
            document.id.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError(f"{printable(document.id.encode('utf-8', 'surrogateescape'))}: its name is not "
                                    "UTF-8, and an index's ids must be text: rename the file") from None
    if args.contexts:
        from ctx_retrieval.loaders import numbered_jsonl

        contexts = {}
        for n, row in numbered_jsonl(args.contexts):
            chunk_id = row.get("chunk_id") if isinstance(row, dict) else None
            context = row.get("context") if isinstance(row, dict) else None
            if not isinstance(chunk_id, str) or not (context is None or isinstance(context, str)):
                raise InvalidInputError(f"{args.contexts}:{n}: expected an object with a string 'chunk_id' and a "
                                        "string or null 'context' (a 'contextualize' output line)")
            contexts[chunk_id] = context
        label = f"contexts from {args.contexts}"
        wanted = [c.id for _, cs in items for c in cs]
        covered = sum(1 for i in wanted if i in contexts)
        if covered < len(wanted):
            say(f"warning: {args.contexts} covers {covered} of {len(wanted)} chunks; the other "
                 f"{len(wanted) - covered} are indexed without a context (the same inputs and chunk size "
                 "(--chunk-tokens, --embedder or --chunk-chars) as the 'contextualize' run give the same chunk ids)")
        unused = len(set(contexts) - set(wanted))
        if unused:
            say(f"warning: {unused} contexts in {args.contexts} match no chunk of these inputs")
    else:
        contextualizer = make_contextualizer(args)
        label = contextualizer.label
        try:
            contexts = contextualizer.run(items)
        finally:
            contextualizer.close()
        if contextualizer.interrupted:
            say(f"interrupted: the index at {store_name(args.store)} was not built")
            return 130
    say(f"contextualizer: {label}")
    chunks = [IndexedChunk(c.id, d.id, c.text, contexts.get(c.id)) for d, cs in items for c in cs]
    uri = milvus_uri(args.store)
    if postgres_url(args.store) is not None:  # one table: vectors and BM25 postings written in one transaction
        from ctx_retrieval.retrieval.postgres import PostgresStore

        table = PostgresStore(args.store, embedder=embedder, tokenizer=args.bm25_tokenizer, replace=True)
        table.add(chunks)
        table.close()
        engine = "PostgreSQL: vectors and BM25 postings in one table"
    elif uri is not None:  # one collection, the engine's BM25 beside the vectors
        from ctx_retrieval.retrieval.milvus import MilvusStore

        MilvusStore(uri, embedder=embedder, tokenizer=args.bm25_tokenizer, replace=True).add(chunks)
        engine = "Milvus: vectors and its BM25 in one collection"
    else:
        build_store(args.store, chunks, embedder=embedder, embed_layout=args.embed_layout,
                    tokenizer=args.bm25_tokenizer).close()
        engine = "Chroma + BM25"
    print(f"indexed {len(chunks)} chunks ({sum(1 for c in chunks if c.context)} with a context) into "
          f"{store_name(args.store)} ({engine})")
    return 0


def add_parser(sub: Any, *, twin: bool) -> None:
    """The command's options."""
    index = sub.add_parser("index", help="build a contextual hybrid index (Chroma + BM25) in a folder")
    index.add_argument("inputs", nargs="+", help="files or folders (as for contextualize)")
    index.add_argument("--store", required=True, help="index folder, or milvus:URI for a Milvus collection "
                       "(milvus:./chunks.db for Milvus Lite, milvus:http://host:19530 for a server; [milvus]), or "
                       "postgresql://... for PostgreSQL with pgvector ([postgres]; the table ctx_chunks, rebuilt)")
    index.add_argument("--contexts", help="use contexts from a 'contextualize' output instead of generating them")
    add_input_limit(index)
    index.add_argument("--embed-layout", choices=["whole", "windows"], default="whole",
                       help="windows: a chunk whose context + text overflow the embedder gets one vector per window")
    index.add_argument("--quiet", action="store_true", help="no progress bars (contexts, embeddings)")
    add_analysis_args(index)
    add_chunking_args(index, "the embedder that embeds the chunks and whose tokens size them")
    add_contextualizer_args(index, twin=twin)
    index.set_defaults(func=_cmd_index)
