"""``ctx-retrieval query``: search an index made by ``index``."""

from __future__ import annotations

import textwrap
from typing import Any

from ctx_retrieval.cli._common import (
    Args,
    add_analysis_args,
    milvus_uri,
    offline_embedder,
    positive_int,
    postgres_url,
    store_name,
)
from ctx_retrieval.errors import InvalidInputError


def _cmd_query(args: Args) -> int:
    from ctx_retrieval.retrieval.store import open_store, store_embedder

    uri = milvus_uri(args.store)
    store: Any
    if postgres_url(args.store) is not None or uri is not None:  # one engine holds both sides and its analysis
        engine: Any
        if uri is None:
            from ctx_retrieval.retrieval import postgres as engine

            uri = args.store
            built = engine.recorded(uri)
            if not built:
                raise InvalidInputError(f"{store_name(uri)} holds no ctx-retrieval index (no table ctx_chunks): "
                                        "build one with ctx-retrieval index docs/ --store postgresql://...")
            make = engine.PostgresStore
        else:
            from ctx_retrieval.retrieval import milvus as engine

            built = engine.recorded(uri)
            make = engine.MilvusStore
        model = "e5" if "e5" in str(built.get("embedder", "")) else "minilm"  # the embedder the chunks were made with
        store = make(uri, embedder=offline_embedder(progress=False, name=model),
                     tokenizer=args.bm25_tokenizer or str(built.get("tokenizer", "identifiers")))
    else:
        built_with = store_embedder(args.store)  # the store's own: queries must be embedded by the same model
        model = "e5" if built_with == "e5" else "minilm"
        store = open_store(args.store, embedder=offline_embedder(progress=False, name=model),
                           tokenizer=args.bm25_tokenizer)
    hits = store.search(args.query, k=args.k, mode=args.mode)
    for n, hit in enumerate(hits, start=1):
        ranks = f"vector #{hit.vector_rank or '-'}, bm25 #{hit.bm25_rank or '-'}"
        print(f"{n:>2}. {hit.chunk.chunk_id} ({hit.chunk.document_id}) score {hit.score:.4f} [{ranks}]")
        if hit.chunk.context:
            print(textwrap.indent(textwrap.fill("context: " + hit.chunk.context, 100), "    "))
        print(textwrap.indent(textwrap.shorten(" ".join(hit.chunk.text.split()), 200), "    "))
    return 0


def add_parser(sub: Any, *, twin: bool) -> None:
    """The command's options."""
    query = sub.add_parser("query", help="search an index made by 'index'")
    query.add_argument("store", help="index folder, milvus:URI or postgresql://... (as given to index)")
    query.add_argument("query", help="the question")
    query.add_argument("-k", type=positive_int, default=5, help="results (default %(default)s)")
    query.add_argument("--mode", choices=["hybrid", "vector", "bm25", "dense"], default="hybrid",
                       help="both sides fused, or one alone ('dense' is the former name of 'vector')")
    add_analysis_args(query, default=None)
    query.set_defaults(func=_cmd_query)
