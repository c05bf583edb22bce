"""``ctx-retrieval eval``, ``demo`` and ``queries``: the retrieval ablation on the bundled corpus or your own, the
demo around it, and evaluation queries written by the LLM."""

from __future__ import annotations

import contextlib
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctx_retrieval.chunking import DEFAULT_CHUNK_TOKENS
from ctx_retrieval.cli._common import (
    CHUNK_CHARS_HELP,
    CHUNK_TOKENS_HELP,
    DEFAULT_MODEL,
    DEMO_QUERIES,
    FAKE_KEY,
    Args,
    ContextWriter,
    add_chunking_args,
    add_contextualizer_args,
    add_eval_output_args,
    add_input_limit,
    check_out,
    llm_for,
    make_contextualizer,
    offline_embedder,
    positive_int,
    resolve_embedder,
    resolved_choice,
    say,
    splitter_for,
)
from ctx_retrieval.contextualize.heuristic import HeuristicContextualizer
from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.loaders import SAMPLE_DOCUMENT, load_documents, load_sample
from ctx_retrieval.types import Chunk, SourceDocument


def _load_eval_corpus(args: Args) -> Any:
    from ctx_retrieval.evaluation import load_cookbook, load_corpus

    if args.inputs:
        return _corpus_from_inputs(args)
    if args.generate_queries:
        raise InvalidInputError("--generate-queries writes questions for your documents: name them (ctx-retrieval "
                                "eval docs/ --generate-queries 100)")
    if args.documents:
        if not args.queries:
            raise InvalidInputError("--documents needs --queries (JSONL: query, gold_chunk_ids)")
        return load_corpus(args.documents, args.queries)
    corpus = load_cookbook(args.chunks, args.queries)
    if not corpus.queries:
        raise InvalidInputError(f"{args.queries} holds no queries: an evaluation over 0 queries measures nothing")
    return corpus


def _corpus_from_inputs(args: Args) -> Any:
    """``eval INPUTS``: the documents chunked as ``contextualize`` and ``index`` chunk them, with queries from
    ``--queries`` or written now by the LLM (``--generate-queries N``, kept in WORK_DIR/eval/queries.jsonl)."""
    from ctx_retrieval.evaluation import EvalCorpus
    from ctx_retrieval.evaluation.corpus import read_queries

    items = load_documents(args.inputs, splitter_for(args), max_bytes=int(args.max_input_mb * 2**20))
    name = Path(args.inputs[0]).name or "corpus"
    if args.generate_queries:
        query_set = _write_questions(args, items, args.generate_queries, Path(args.work_dir) / "eval" / "queries.jsonl")
        queries = query_set.eval_queries()
        args.query_set = query_set  # its note and cost go into the evaluation's outputs
    elif args.queries:
        queries = read_queries(args.queries)
    else:
        raise InvalidInputError("eval INPUTS needs queries: --queries FILE (query, gold_chunk_ids), or "
                                "--generate-queries N to have the LLM write N of them")
    corpus = EvalCorpus(name, items, queries)
    how = (f"{args.chunk_chars} characters" if args.chunk_chars is not None else
           f"{args.chunk_tokens} tokens of {args.embedder} (--embedder {args.embedder})")
    corpus.validate(f"these chunks are cut in {how}, and chunk ids follow the cut: evaluate with the --embedder and "
                    "--chunk-tokens the queries were written over, or write them again over these chunks "
                    f"(ctx-retrieval queries ... --embedder {args.embedder})")
    return corpus


@contextlib.contextmanager
def _question_writer(args: Args) -> Iterator[tuple[Any, Any, str]]:
    """The provider that writes questions (``llm_for``), its twin stopped after, whatever happens meanwhile."""
    provider, server, label = llm_for(args, resolved_choice(args))
    try:
        yield provider, server, label
    finally:
        if server is not None:
            server.stop()


def _write_questions(args: Args, items: list[tuple[SourceDocument, list[Chunk]]], count: int,
                     out: Path) -> Any:
    """Questions for ``count`` sampled chunks by the chosen LLM, written to ``out`` (the same engine, cache and
    budget as contexts); the query set."""
    from ctx_retrieval.evaluation.queries import generate_queries

    cache = args.cache
    with _question_writer(args) as (provider, server, label):
        say(f"question writer: {label}")
        query_set = generate_queries(items, count, provider=provider, seed=args.seed,
                                     cache=Path(cache) if cache else server is None,
                                     budget_usd=args.budget,
                                     progress=not args.quiet)
    query_set.write(out)
    say(f"{query_set.format()}; wrote {out}")
    say(query_set.note)
    return query_set


def _cmd_queries(args: Args) -> int:
    items = load_documents(args.inputs, splitter_for(args), max_bytes=int(args.max_input_mb * 2**20))
    if args.dry_run:
        from ctx_retrieval.evaluation.queries import estimate_queries

        with _question_writer(args) as (provider, _, _):
            print(estimate_queries(items, args.count, provider=provider, seed=args.seed, cache=False).format())
        return 0
    check_out(args.out)
    _write_questions(args, items, args.count, Path(args.out))
    return 0


def _run_eval(args: Args, corpus: Any, contextualizer: ContextWriter) -> Any:
    from ctx_retrieval.evaluation.ablation import run_ablation

    print(f"contextualizer: {contextualizer.label}", flush=True)
    try:
        contexts = contextualizer.run(corpus.items)
    finally:
        contextualizer.close()
    client = None
    if args.vector_store == "chroma":
        from ctx_retrieval.retrieval.chroma import persistent_client

        client = persistent_client(Path(args.work_dir) / "chroma")
    milvus = None
    if args.vector_store == "milvus":
        milvus = args.milvus_uri or str(Path(args.work_dir) / "milvus.db")
        if "://" not in milvus:
            Path(milvus).parent.mkdir(parents=True, exist_ok=True)
    reranker = None
    if args.rerank == "claude":
        from ctx_retrieval.providers.anthropic import AnthropicProvider
        from ctx_retrieval.retrieval.rerank import ClaudeReranker

        reranker = ClaudeReranker(AnthropicProvider(args.model))
    baseline = None
    if resolved_choice(args) not in ("heuristic", "none"):  # LLM contexts: read them against the no-LLM baseline
        heuristic = HeuristicContextualizer()
        baseline = ("heuristic baseline", {r.chunk_id: r.context for r in heuristic.contextualize_many(corpus.items)})
    result = run_ablation(corpus, contexts, contextualizer_label=contextualizer.label,
                          embedder=offline_embedder(name=resolve_embedder(args, [d.text for d, _ in corpus.items])),
                          vector_store=args.vector_store, chroma_client=client, milvus_uri=milvus,
                          postgres_url=args.postgres_url,
                          reranker=reranker.rerank_ids if reranker else None, progress=say, baseline=baseline,
                          tokenizer=args.bm25_tokenizer, late_chunking=args.late_chunking,
                          embed_layout=args.embed_layout,
                          fused_embedder=((args.also_embedder, offline_embedder(name=args.also_embedder))
                                           if args.also_embedder else None))
    report = contextualizer.report
    if report is not None:  # what writing these contexts cost (a heuristic, recorded or no contexts cost nothing)
        result.meta["ingestion"] = {"model": f"{report.provider}/{report.model}", "cost_usd": report.cost_usd,
                                    "cost_per_million_document_tokens": report.cost_per_million_document_tokens,
                                    "document_tokens": report.document_tokens}
    else:  # no LLM wrote these: what Claude would cost on this corpus, from a dry run (no request, no key)
        from ctx_retrieval.contextualize.generator import ContextGenerator
        from ctx_retrieval.providers.anthropic import AnthropicProvider

        estimate = ContextGenerator(AnthropicProvider(DEFAULT_MODEL, api_key=FAKE_KEY), cache=False,
                                    exact_token_counts=False).estimate(corpus.items)
        result.meta["ingestion"] = {
            "model": contextualizer.label, "cost_usd": 0.0, "estimated_model": DEFAULT_MODEL,
            "estimated_cost_per_million_document_tokens": (estimate.cost_usd or 0.0) / max(1, estimate.document_tokens)
            * 1_000_000}
    query_set = args.query_set
    from ctx_retrieval.evaluation.metrics import copied_share

    text_of = {c.id: c.text for c in corpus.chunks}  # how much the questions quote their gold chunks
    result.meta["queries_copied"] = copied_share([(q.query, " ".join(text_of.get(g, "") for g in q.gold))
                                                  for q in corpus.queries])
    result.meta["queries_generated"] = query_set is not None or _generated_queries_file(args)
    if query_set is not None:
        result.meta["queries_note"] = query_set.note
        result.meta["queries_generation"] = {"model": query_set.model, "queries": len(query_set.queries),
                                             "cost_usd": query_set.report.cost_usd,
                                             "requests": query_set.report.requests,
                                             "wall_seconds": round(query_set.report.wall_time_s, 1)}
    return result


def _generated_queries_file(args: Args) -> bool:
    """Whether ``--queries`` names a file the ``queries`` command wrote (its rows say ``generated_by``)."""
    path = args.queries
    if not path or not args.inputs:
        return False
    from ctx_retrieval.loaders import read_jsonl

    return any(isinstance(row, dict) and "generated_by" in row for row in read_jsonl(path))


def _write_outputs(result: Any, args: Args, stem: str) -> None:
    work = Path(args.work_dir)
    json_path = Path(args.json) if args.json else work / "eval" / f"{stem}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result.to_dict(), indent=2), encoding="utf-8")
    chart_path = Path(args.chart) if args.chart else json_path.with_suffix(".png")  # beside the JSON and the report
    try:
        result.chart(chart_path)
    except ImportError as exc:
        say(f"no chart: {exc}")
    html_path = result.to_html(json_path.with_suffix(".html"), chart=chart_path)
    verdict = result.verdict(result.meta.get("ingestion"))
    if verdict:
        print("\n" + textwrap.fill(verdict, 110))
    say(f"wrote {json_path}, {chart_path} and the report {html_path}: open file://{html_path.resolve()}")


VECTOR_STORES = {"numpy": "exact in-memory vectors + BM25", "chroma": "embedded Chroma vectors + BM25",
                 "milvus": "Milvus (vectors and its BM25 in one collection)",
                 "postgres": "PostgreSQL (pgvector and BM25 in SQL, one table)"}


def _cmd_eval(args: Args) -> int:
    corpus = _load_eval_corpus(args)
    result = _run_eval(args, corpus, make_contextualizer(args))
    print(result.to_markdown())
    _write_outputs(result, args, "ablation")
    return 0


def _cmd_demo(args: Args) -> int:
    if args.sample_document:
        return _demo_sample(args)
    from ctx_retrieval.evaluation import load_cookbook

    corpus = load_cookbook()
    print(f"ctx-retrieval demo: Anthropic's contextual-retrieval cookbook corpus, {len(corpus.items)} source files, "
          f"{len(corpus.chunks)} chunks, {len(corpus.queries)} dev queries; "
          f"{VECTOR_STORES[args.vector_store]}, fused by RRF")
    contextualizer = make_contextualizer(args)
    result = _run_eval(args, corpus, contextualizer)
    contexts = result.contexts
    print(f"\nPlain vs contextual hybrid retrieval, side by side: the first {DEMO_QUERIES} queries whose gold chunk "
          "the contexts moved up (* marks gold chunks; ids are <file uuid prefix>_<chunk index>):")
    shown = 0
    for n, query in enumerate(corpus.queries):
        plain = result.rankings["plain hybrid"][n]
        contextual = result.rankings["contextual hybrid"][n]
        gold = query.gold[0]
        plain_rank = plain.index(gold) + 1 if gold in plain else None
        ctx_rank = contextual.index(gold) + 1 if gold in contextual else None
        if ctx_rank is None or (plain_rank is not None and plain_rank <= ctx_rank) or shown >= DEMO_QUERIES:
            continue
        shown += 1
        print(f"\nquery: {query.query}")
        print(f"  gold chunk: plain rank {plain_rank or '>150'}, contextual rank {ctx_rank}")
        for label, ranking in (("plain", plain), ("contextual", contextual)):
            top = ", ".join(("*" if cid in query.gold else "") + cid[:8] + cid[cid.rfind("_"):] for cid in ranking[:3])
            print(f"  {label:>10} top 3: {top}")
        if contexts.get(gold):
            print(textwrap.indent(textwrap.fill(f"context of the gold chunk: {contexts[gold]}", 100), "  "))
    print("\n" + result.to_markdown())
    _write_outputs(result, args, "demo")
    if resolved_choice(args) == "recorded":
        print("\nThe contexts above were RECORDED offline from a local LLM (Qwen2.5-Coder-1.5B, the cookbook's "
              "prompt); 'contextual hybrid (heuristic baseline)' is the no-LLM title-and-heading prefix. Set "
              "ANTHROPIC_API_KEY to write the contexts with Claude.")
    elif resolved_choice(args) == "heuristic":
        print("\nThe heuristic is the cheap baseline. For LLM-written contexts without a key, run "
              "'ctx-retrieval demo' without --contextualizer (contexts recorded offline from a local LLM); "
              "set ANTHROPIC_API_KEY to write them with Claude.")
    return 0


def _demo_sample(args: Args) -> int:
    document, chunks = load_sample()
    print(f"ctx-retrieval demo: {len(chunks)} chunks of the bundled sample document '{SAMPLE_DOCUMENT}'")
    contextualizer = make_contextualizer(args)
    print(f"contextualizer: {contextualizer.label}")
    try:
        contexts = contextualizer.run([(document, chunks)])
    finally:
        contextualizer.close()
    for chunk in chunks:
        first_line = " ".join(chunk.text.split())[:90]
        print(f"\n[{chunk.position}] chunk: {first_line}...")
        print(textwrap.fill(f"context: {contexts.get(chunk.id)}", width=110, subsequent_indent="    "))
    return 0


# -- parser ----------------------------------------------------------------------------------------------


def add_demo(sub: Any, *, twin: bool) -> None:
    """The demo's options (listed first in --help)."""
    demo = sub.add_parser("demo", help="index the bundled cookbook corpus and compare plain vs contextual retrieval",
                          description="Index the bundled cookbook corpus (90 source files, 737 chunks) into embedded "
                          "a vector index + BM25 with and without contexts, show rankings side by side and print the "
                          "ablation table for its dev queries. Without a key it uses contexts recorded offline "
                          "from a local LLM, beside the no-LLM heuristic baseline.")
    add_contextualizer_args(demo, twin=twin)
    add_eval_output_args(demo)
    demo.add_argument("--sample-document", action="store_true",
                      help="instead, contextualize the small bundled sample document and print its contexts")
    demo.set_defaults(func=_cmd_demo)


def add_parser(sub: Any, *, twin: bool) -> None:
    """The options of eval and queries."""
    ev = sub.add_parser("eval", help="run the retrieval ablation (plain/contextual x dense/BM25/hybrid)",
                        description="Pass@5/10/20 as in Anthropic's cookbook for plain and contextual dense, BM25 and "
                        "hybrid retrieval. Default corpus: the bundled cookbook corpus with its dev queries.")
    ev.add_argument("--chunks", help="cookbook-format codebase_chunks.json")
    ev.add_argument("--queries", help="evaluation JSONL (cookbook format, or query + gold_chunk_ids)")
    ev.add_argument("--documents", help="generic documents JSONL (id, text, chunks with ids)")
    ev.add_argument("--contexts-file", help="with --contextualizer recorded: the JSONL of chunk_id, context")
    ev.add_argument("inputs", nargs="*", help="your documents (files or folders, as for contextualize), chunked as "
                    "contextualize chunks them; with --queries or --generate-queries")
    ev.add_argument("--generate-queries", type=positive_int, metavar="N",
                    help="with INPUTS: the --contextualizer LLM writes a question for each of N sampled chunks "
                         "(stratified over documents; kept in WORK_DIR/eval/queries.jsonl)")
    ev.add_argument("--seed", type=int, default=0, help="the chunk sample's seed (default %(default)s)")
    sizes = ev.add_mutually_exclusive_group()
    sizes.add_argument("--chunk-tokens", type=positive_int, default=DEFAULT_CHUNK_TOKENS, help=CHUNK_TOKENS_HELP)
    sizes.add_argument("--chunk-chars", type=positive_int, help=CHUNK_CHARS_HELP)
    add_input_limit(ev)
    add_contextualizer_args(ev, twin=twin)
    add_eval_output_args(ev)
    ev.set_defaults(func=_cmd_eval)

    qs = sub.add_parser("queries", help="have the LLM write evaluation queries for your documents",
                        description="For a sample of chunks (stratified over documents), the LLM writes a question "
                        "each chunk answers, through the same engine as contexts (prompt caching per document, "
                        "prices, --budget, the context cache: a rerun pays only for what is missing). Writes a "
                        "queries JSONL (query, gold_chunk_ids) that 'eval INPUTS --queries' reads.")
    qs.add_argument("inputs", nargs="+", help="files or folders (as for contextualize)")
    qs.add_argument("--count", type=positive_int, default=100, help="queries to write (default %(default)s)")
    qs.add_argument("--out", default="queries.jsonl", help="output JSONL (default %(default)s)")
    qs.add_argument("--seed", type=int, default=0, help="the chunk sample's seed (default %(default)s)")
    qs.add_argument("--dry-run", action="store_true", help="only estimate requests, tokens and dollars")
    qs.add_argument("--quiet", action="store_true", help="no progress bar")
    add_chunking_args(qs, "the embedder whose tokens size the chunks (as for eval and index)")
    add_input_limit(qs)
    add_contextualizer_args(qs, twin=twin)
    qs.set_defaults(func=_cmd_queries)
