"""The ``ctx-retrieval`` command line: contextualize, index, query, eval and demo.

Every command states which contextualizer wrote the contexts: Claude (``ANTHROPIC_API_KEY`` set), the no-LLM
heuristic (the default without a key), contexts recorded offline from a local LLM (``recorded``, cookbook
corpus only), or the local fake Anthropic API (``fake``: canned contexts, real request flow).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctx_retrieval.chunking import DEFAULT_CHUNK_TOKENS
from ctx_retrieval.contextualize.cache import ContextCache, default_cache_path
from ctx_retrieval.contextualize.heuristic import HeuristicContextualizer
from ctx_retrieval.contextualize.prompts import DEFAULT_PROMPT, DOCUMENT_LANGUAGE_PROMPT, ENGLISH_PROMPT
from ctx_retrieval.errors import ConfigurationError, ContextGenerationError, CtxRetrievalError, InvalidInputError
from ctx_retrieval.loaders import DEFAULT_MAX_INPUT_BYTES, SAMPLE_DOCUMENT, load_documents, load_sample
from ctx_retrieval.naming import printable
from ctx_retrieval.types import Chunk, SourceDocument

__all__ = ["main"]

WORK_DIR = Path(".ctx_retrieval")
CONTEXTUALIZERS = ["auto", "anthropic", "bedrock", "vertex", "openai", "openai-compatible", "heuristic", "recorded",
                   "fake", "none"]
LLM_CHOICES = ("anthropic", "bedrock", "vertex", "openai")

CONTEXT_LANGUAGES = {"auto": DEFAULT_PROMPT, "document": DOCUMENT_LANGUAGE_PROMPT, "english": ENGLISH_PROMPT}
DEMO_QUERIES = 3
DEFAULT_MODEL = "claude-haiku-5-5"
# Text input is cut into chunks of at most this many of the embedder's tokens, so that a chunk and a context of up
# to 100 tokens fit MiniLM's 256 (ctx_retrieval.chunking); --chunk-chars cuts by characters instead (450 kept
# chunk + context within 256 tokens for 98% of the cookbook's code, and for far fewer in Chinese).
CHUNK_TOKENS_HELP = ("chunk size for text input, in tokens of --embedder (default %(default)s: the chunk and a "
                     "100-token context fit MiniLM's 256; e5 reads 512)")
CHUNK_CHARS_HELP = "size chunks in characters instead (the 0.x default was 450)"


_FAKE_KEY = "sk-ant-fake-cli-key-0000000"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- contextualizers -------------------------------------------------------------------------------------


@dataclass
class _Contextualizer:
    label: str
    run: Callable[[list[tuple[SourceDocument, list[Chunk]]]], dict[str, str | None]]
    close: Callable[[], None]
    # per chunk id: status and provenance of its context, filled by run (written to the contextualize output)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    interrupted: bool = False  # Ctrl-C stopped the run: the command exits 130 after writing what was done
    report: Any = None  # the last run's RunReport, where the contextualizer makes one (its cost, for eval's verdict)


def _resolved_choice(args: argparse.Namespace) -> str:
    """``--contextualizer``, with ``auto`` resolved: Claude when a key is set; else, for the demo on the bundled
    corpus, the contexts recorded from a local LLM (the technique's real effect without a key); else the
    heuristic."""
    if args.contextualizer == "openai-compatible":
        return "openai"
    if args.contextualizer != "auto":
        return str(args.contextualizer)
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    if getattr(args, "command", None) == "demo" and not getattr(args, "sample_document", False):
        return "recorded"
    return "heuristic"


def _make_contextualizer(args: argparse.Namespace) -> _Contextualizer:
    choice = _resolved_choice(args)
    if args.contextualizer == "auto" and choice == "heuristic":
        _say("no ANTHROPIC_API_KEY: using the heuristic contextualizer (title and nearest heading, no LLM); "
             "set the key to use Claude")
    elif args.contextualizer == "auto" and choice == "recorded":
        _say("no ANTHROPIC_API_KEY: using contexts RECORDED offline from a local LLM for the bundled corpus (real "
             "LLM contexts, no API call); the heuristic (no LLM) is the baseline row; set the key to use Claude")
    if choice == "none":
        return _Contextualizer("none (plain chunks)", lambda items: {}, lambda: None)
    if choice == "heuristic":
        heuristic = HeuristicContextualizer()

        def run_heuristic(items: list[tuple[SourceDocument, list[Chunk]]]) -> dict[str, str | None]:
            results = heuristic.contextualize_many(items)
            made.records.update((r.chunk_id, _record(r)) for r in results)
            return {r.chunk_id: r.context for r in results}

        made = _Contextualizer("heuristic (title and nearest heading, no LLM)", run_heuristic, lambda: None)
        return made
    if choice == "recorded":
        from ctx_retrieval.evaluation import RecordedContextualizer

        recorded = RecordedContextualizer(getattr(args, "contexts_file", None))

        def read(items: list[tuple[SourceDocument, list[Chunk]]]) -> dict[str, str | None]:
            contexts = recorded.contexts()
            missing = [c.id for _, chunks in items for c in chunks if c.id not in contexts]
            if missing:
                raise InvalidInputError(f"{len(missing)} chunks have no recorded context (first: {missing[0]}); "
                                        "recorded contexts exist for the bundled cookbook corpus only")
            made.records.update((c.id, {"status": "recorded", "provider": "recorded", "model": recorded.model,
                                        "prompt_version": "cookbook"}) for _, chunks in items for c in chunks)
            return dict(contexts)

        made = _Contextualizer(f"{recorded.label} ({recorded.model})", read, lambda: None)
        return made
    from ctx_retrieval.contextualize.generator import ContextGenerator

    provider, server, label = _llm_for(args, choice)
    cache = getattr(args, "cache", None)
    generator = ContextGenerator(provider, cache=Path(cache) if cache else (choice != "fake"),
                                 max_concurrency=getattr(args, "max_concurrency", None),
                                 budget_usd=getattr(args, "budget", None),
                                 progress=not getattr(args, "quiet", False),
                                 on_error=getattr(args, "on_error", "raise"),
                                 prompt=CONTEXT_LANGUAGES[getattr(args, "context_language", "auto")],
                                 reuse=_reuse_policy(args))
    refresh, batch = getattr(args, "refresh_stale", False), getattr(args, "batch", False)

    def run(items: list[tuple[SourceDocument, list[Chunk]]]) -> dict[str, str | None]:
        if not refresh:
            _say(generator.estimate(items).format())
        with _interruptible(generator, made):
            try:
                if refresh:
                    result = generator.refresh_stale(items, batch=batch, poll_interval_s=args.poll_interval)
                elif batch:
                    result = generator.contextualize_many_batched(items, poll_interval_s=args.poll_interval)
                else:
                    result = generator.contextualize_many(items)
            except ContextGenerationError as exc:
                if not made.interrupted or exc.run is None:
                    raise
                result = exc.run  # stopped by Ctrl-C: what was done is kept, reported and written
        _say("context generation report:\n" + textwrap.indent(result.report.format(warnings=False), "  "))
        if made.interrupted:
            _say(f"interrupted: {result.report.not_attempted} chunks were not attempted; run the same command again "
                 "to do them (finished contexts are cached)")
        made.records.update((r.chunk_id, _record(r)) for r in result)
        made.report = result.report
        return {r.chunk_id: r.context for r in result}

    made = _Contextualizer(label, run, server.stop if server else (lambda: None))
    return made


def _llm_for(args: argparse.Namespace, choice: str) -> tuple[Any, Any, str]:
    """The provider for an LLM choice (``anthropic``, ``openai``, or ``fake``: the API twin, started here), the
    twin server to stop after (or None), and the label the command prints."""
    from ctx_retrieval.providers.anthropic import AnthropicProvider

    if choice == "fake":
        if getattr(args, "twin", None) is None:
            raise ConfigurationError(
                "--contextualizer fake needs the Anthropic API twin, which the command line does not import: run "
                "'python -m ctx_retrieval.testing <command> ... --contextualizer fake' (./scripts/demo.sh does)",
                setting="contextualizer")
        server = args.twin().start()
        provider = AnthropicProvider(args.model, api_key=_FAKE_KEY, base_url=server.base_url,
                                     endpoint_id="ctx-retrieval-twin")  # its port changes; its answers do not
        if not getattr(args, "cache", None):
            _say("the fake API's canned answers are not kept in the context cache (every run asks it again); pass "
                 "--cache PATH to keep them")
        return provider, server, "the local FAKE Anthropic API (canned answers, real request flow)"
    if choice in LLM_CHOICES:
        provider = _llm_provider(args, choice)
        label = {"anthropic": f"Claude ({args.model})", "bedrock": f"Claude on Amazon Bedrock ({provider.model})",
                 "vertex": f"Claude on Vertex AI ({args.model})"}.get(
            choice, f"{args.model} at {args.base_url} (OpenAI-compatible)")
        return provider, None, label
    raise InvalidInputError(f"--contextualizer {choice} writes no text: questions need an LLM (--contextualizer "
                            "anthropic, or openai with --base-url and --model)")


@contextlib.contextmanager
def _interruptible(generator: Any, made: _Contextualizer) -> Iterator[None]:
    """Ctrl-C stops the run cleanly (requests in flight finish and are stored, the report is printed); a second
    Ctrl-C stops at once."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_interrupt(signum: int, frame: Any) -> None:
        if made.interrupted:  # quit at once: requests in flight are abandoned, what was done is still written
            _say("quitting: requests in flight are abandoned; what was done is written")
            generator.stop(at_once=True)
            return
        made.interrupted = True
        _say("stopping: requests in flight finish and are stored (press Ctrl-C again to quit at once)")
        generator.stop()

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _llm_provider(args: argparse.Namespace, choice: str) -> Any:
    """The provider for ``--contextualizer anthropic`` or ``openai`` (``--base-url``, ``--model``)."""
    base_url = getattr(args, "base_url", None)
    timeout_s = getattr(args, "timeout", None) or 60.0
    if choice == "anthropic":
        from ctx_retrieval.providers.anthropic import AnthropicProvider

        return AnthropicProvider(args.model, base_url=base_url, timeout_s=timeout_s,
                                 endpoint_id=getattr(args, "endpoint_id", None))
    if choice in ("bedrock", "vertex"):
        from ctx_retrieval.models import platform_model
        from ctx_retrieval.providers.platforms import BedrockProvider, VertexProvider

        region = getattr(args, "region", None)
        if choice == "bedrock":
            model = args.model if platform_model(args.model).platform == "bedrock" else f"anthropic.{args.model}"
            return BedrockProvider(model, aws_region=region, base_url=base_url, timeout_s=timeout_s,
                                   endpoint="invoke" if getattr(args, "bedrock_invoke", False) else "messages")
        return VertexProvider(args.model, project_id=getattr(args, "project", None), region=region,
                              base_url=base_url, timeout_s=timeout_s)
    if args.model == DEFAULT_MODEL or not base_url:
        raise InvalidInputError("--contextualizer openai needs --base-url and --model: the server's address and the "
                                "model it serves (e.g. --base-url http://127.0.0.1:8080/v1 --model qwen2.5-coder-1.5b)")
    from ctx_retrieval.providers.openai_compat import OpenAICompatibleProvider

    return OpenAICompatibleProvider(args.model, base_url=base_url, timeout_s=timeout_s,
                                    context_tokens=getattr(args, "context_tokens", None),
                                    slots=getattr(args, "slots", None),
                                    check_model=not getattr(args, "no_model_check", False),
                                    endpoint_id=getattr(args, "endpoint_id", None))


def _reuse_policy(args: argparse.Namespace) -> Any:
    """``--reuse-changed-tokens``, ``--reuse-other-models`` and ``--rewrite-neighbours`` as a ``ReusePolicy`` (None:
    exact, the default)."""
    tokens, other = getattr(args, "reuse_changed_tokens", 0) or 0, getattr(args, "reuse_other_models", False)
    if not tokens and not other:
        return None
    from ctx_retrieval.contextualize.versions import ReusePolicy

    return ReusePolicy(max_changed_tokens=tokens, other_models=other,
                       rewrite_neighbours=getattr(args, "rewrite_neighbours", 0) or 0)


def _record(result: Any) -> dict[str, Any]:
    record = {"status": result.status, "provider": result.provider, "model": result.model,
              "prompt_version": result.prompt_version}
    if result.written_from:
        record["written_from"] = result.written_from
    if result.error:
        record["error"], record["error_kind"] = result.error, result.error_kind
    return record


# -- commands --------------------------------------------------------------------------------------------


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} must be at least 1")
    return number


def _check_out(out: str) -> None:
    """Refuse an output path whose folder does not exist, before any paid request."""
    if out != "-" and not Path(out).resolve().parent.is_dir():
        raise InvalidInputError(f"--out {out}: the folder {Path(out).parent} does not exist; create it first")


def _dry_run(args: argparse.Namespace, items: list[tuple[SourceDocument, list[Chunk]]]) -> int:
    """An estimate for the chosen contextualizer and cache, writing no file."""
    choice = _resolved_choice(args)
    if choice not in (*LLM_CHOICES, "fake"):  # no LLM: the heuristic, recorded contexts, none
        chunks = sum(len(c) for _, c in items)
        print(f"estimate: {len(items)} documents, {chunks} chunks: 0 requests, cost $0.0000 ({choice} contexts)")
        return 0
    from ctx_retrieval.contextualize.generator import ContextGenerator

    if choice == "fake":  # the twin makes the requests Claude would and bills nothing: estimate Claude's bill
        from ctx_retrieval.providers.anthropic import AnthropicProvider

        estimate = ContextGenerator(AnthropicProvider(args.model, api_key=_FAKE_KEY), cache=False,
                                    exact_token_counts=False).estimate(items)
        print(estimate.format() + f"\n(the fake API answers these requests for $0; the cost is {args.model}'s at "
                                  "Anthropic's list prices)")
        return 0
    path = Path(args.cache) if args.cache else default_cache_path()
    cache: ContextCache | bool = ContextCache(path) if path.exists() else False  # read what exists, create nothing
    generator = ContextGenerator(_llm_provider(args, choice), cache=cache, reuse=_reuse_policy(args))
    print(generator.estimate(items, exact=True).format())  # a dry run asked for by name: every document counted (free)
    return 0


def _cmd_contextualize(args: argparse.Namespace) -> int:
    items = load_documents(args.inputs, _splitter(args), max_bytes=int(args.max_input_mb * 2**20))
    if args.dry_run:
        return _dry_run(args, items)
    _check_out(args.out)
    contextualizer = _make_contextualizer(args)
    _say(f"contextualizer: {contextualizer.label}")
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
        _say(f"wrote {len(rows)} chunks to {args.out}: {with_context} with a context{rest}")
    return 130 if contextualizer.interrupted else 0


def write_jsonl(target: str, rows: Iterable[Mapping[str, Any]]) -> None:
    """One JSON object per line, as UTF-8; a name the filesystem gave as bytes that are not UTF-8 is written as
    those bytes (surrogateescape), so no row is lost to an encoding after its context was paid for."""
    out = open(target, "wb") if target != "-" else sys.stdout.buffer  # noqa: SIM115
    try:
        for row in rows:
            out.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8", "surrogateescape"))
    finally:
        if target != "-":
            out.close()
        else:
            out.flush()


EMBEDDERS = ("minilm", "e5")
EMBEDDER_HELP = ("auto (the default): minilm (all-MiniLM-L6-v2, English, the faster) unless a fifth or more of the "
                 "documents is in another language, then e5 (multilingual-e5-small, [multilingual]); or name one")


def _resolve_embedder(args: argparse.Namespace, texts: Sequence[str] | None = None) -> str:
    """``--embedder`` as named, or for ``auto`` the one the documents need (``ctx_retrieval.retrieval.choosing``):
    read from ``texts`` or from the command's inputs (whole files), said on stderr with why, and kept in ``args``."""
    if args.embedder != "auto":
        return str(args.embedder)
    from ctx_retrieval.retrieval.choosing import choose_embedder

    if texts is None:
        texts = [d.text for d, _ in load_documents(args.inputs, lambda text: [text],
                                                   max_bytes=int(args.max_input_mb * 2**20))]
    choice = choose_embedder(texts)
    _say(f"embedder: {choice.name} ({choice.reason}); --embedder minilm|e5 chooses another")
    args.embedder = choice.name
    return choice.name


def _embedder(progress: bool = True, name: str = "minilm", *, cache: bool = True) -> Any:
    """The offline embedder by name: MiniLM (English, the default) or multilingual-e5-small (``[multilingual]``);
    ``cache=False`` for one that only counts tokens (no embedding cache is opened)."""
    if name == "e5":
        from ctx_retrieval.retrieval.e5 import E5Embedder

        return E5Embedder(cache=cache, progress=progress)
    from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder

    return MiniLMEmbedder(cache=cache, progress=progress)


def _splitter(args: argparse.Namespace, embedder: Any = None) -> int | Callable[[str], list[str]]:
    """``--chunk-chars`` as it is, else a splitter in the tokens of ``embedder`` (the one the command embeds
    with; by default ``--embedder``'s, for counting only: its tokenizer is loaded, not its model)."""
    if args.chunk_chars is not None:
        return int(args.chunk_chars)
    from ctx_retrieval.chunking import token_chunker
    from ctx_retrieval.errors import MissingDependencyError

    embedder = embedder or _embedder(progress=False, name=_resolve_embedder(args), cache=False)
    try:
        embedder.count_tokens("")  # loads the tokenizer only
    except MissingDependencyError as exc:
        raise MissingDependencyError(f"{exc}; or size chunks in characters with --chunk-chars N (no tokenizer "
                                     "needed)", extra=exc.extra, module=exc.module) from exc
    return token_chunker(embedder, args.chunk_tokens)


def _add_chunking_args(parser: argparse.ArgumentParser, embedder_help: str) -> None:
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--chunk-tokens", type=_positive_int, default=DEFAULT_CHUNK_TOKENS, help=CHUNK_TOKENS_HELP)
    sizes.add_argument("--chunk-chars", type=_positive_int, help=CHUNK_CHARS_HELP)
    parser.add_argument("--embedder", choices=("auto", *EMBEDDERS), default="auto",
                        help=f"{embedder_help}: {EMBEDDER_HELP}")


def _cmd_index(args: argparse.Namespace) -> int:
    from ctx_retrieval.retrieval.store import IndexedChunk, build_store

    embedder = _embedder(progress=not args.quiet, name=_resolve_embedder(args))  # sizes the chunks, embeds them
    items = load_documents(args.inputs, _splitter(args, embedder), max_bytes=int(args.max_input_mb * 2**20))
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
            _say(f"warning: {args.contexts} covers {covered} of {len(wanted)} chunks; the other "
                 f"{len(wanted) - covered} are indexed without a context (the same inputs and chunk size "
                 "(--chunk-tokens, --embedder or --chunk-chars) as the 'contextualize' run give the same chunk ids)")
        unused = len(set(contexts) - set(wanted))
        if unused:
            _say(f"warning: {unused} contexts in {args.contexts} match no chunk of these inputs")
    else:
        contextualizer = _make_contextualizer(args)
        label = contextualizer.label
        try:
            contexts = contextualizer.run(items)
        finally:
            contextualizer.close()
        if contextualizer.interrupted:
            _say(f"interrupted: the index at {args.store} was not built")
            return 130
    _say(f"contextualizer: {label}")
    chunks = [IndexedChunk(c.id, d.id, c.text, contexts.get(c.id)) for d, cs in items for c in cs]
    build_store(args.store, chunks, embedder=embedder, embed_layout=args.embed_layout,
                tokenizer=args.bm25_tokenizer).close()
    print(f"indexed {len(chunks)} chunks ({sum(1 for c in chunks if c.context)} with a context) into {args.store} "
          "(Chroma + BM25)")
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    """``cache stats`` / ``cache prune``: what the context cache holds, and dropping what is no longer needed."""
    from ctx_retrieval.contextualize.cache import default_cache_path
    from ctx_retrieval.contextualize.cache_postgres import CACHE_URL_ENV, is_postgres_url
    from ctx_retrieval.contextualize.stores import open_context_cache

    where = args.cache or os.environ.get(CACHE_URL_ENV) or default_cache_path()
    if not is_postgres_url(where) and not Path(where).is_file():  # reading or pruning never creates a cache
        if not args.cache and not os.environ.get(CACHE_URL_ENV):
            print(f"no context cache yet at {where}: nothing has been contextualized on this machine")
            return 0
        raise InvalidInputError(f"no context cache at {where}: check the path (--cache PATH; by default "
                                f"{default_cache_path()}, or ${CACHE_URL_ENV})")
    cache: Any = open_context_cache(where)
    try:
        if args.action == "stats":
            print(cache.stats().format())
            return 0
        live: list[str] | None = None
        if args.live:
            live = [document.id for document, _ in load_documents(args.live, lambda text: [text],
                                                                   max_bytes=int(args.max_input_mb * 2**20))]
        if args.live_ids:
            from ctx_retrieval.loaders import InputBudget

            ids = [line.strip() for line in InputBudget().lines(Path(args.live_ids)) if line.strip()]
            live = [*(live or []), *ids]
        older = None
        if args.older_than:
            import datetime

            try:
                older = datetime.date.fromisoformat(args.older_than)
            except ValueError:
                raise InvalidInputError(f"--older-than takes a date as YYYY-MM-DD, not {args.older_than!r}") from None
        n = cache.prune(keep_documents=live, older_than=older, dry_run=args.dry_run, compact=args.compact)
        kept = f" ({len(live):,} live documents)" if live is not None else ""
        print(f"{'would delete' if args.dry_run else 'deleted'} {n:,} contexts{kept}; now: "
              f"{cache.stats().format()}")
        return 0
    finally:
        cache.close()


def _cmd_query(args: argparse.Namespace) -> int:
    from ctx_retrieval.retrieval.store import open_store, store_embedder

    built_with = store_embedder(args.store)  # the store's own: queries must be embedded by the same model
    store = open_store(args.store, embedder=_embedder(progress=False, name="e5" if built_with == "e5" else "minilm"),
                       tokenizer=args.bm25_tokenizer)
    hits = store.search(args.query, k=args.k, mode=args.mode)
    for n, hit in enumerate(hits, start=1):
        ranks = f"vector #{hit.vector_rank or '-'}, bm25 #{hit.bm25_rank or '-'}"
        print(f"{n:>2}. {hit.chunk.chunk_id} ({hit.chunk.document_id}) score {hit.score:.4f} [{ranks}]")
        if hit.chunk.context:
            print(textwrap.indent(textwrap.fill("context: " + hit.chunk.context, 100), "    "))
        print(textwrap.indent(textwrap.shorten(" ".join(hit.chunk.text.split()), 200), "    "))
    return 0


def _load_eval_corpus(args: argparse.Namespace) -> Any:
    from ctx_retrieval.evaluation import load_cookbook, load_corpus

    if getattr(args, "inputs", None):
        return _corpus_from_inputs(args)
    if getattr(args, "generate_queries", None):
        raise InvalidInputError("--generate-queries writes questions for your documents: name them (ctx-retrieval "
                                "eval docs/ --generate-queries 100)")
    if getattr(args, "documents", None):
        if not args.queries:
            raise InvalidInputError("--documents needs --queries (JSONL: query, gold_chunk_ids)")
        return load_corpus(args.documents, args.queries)
    corpus = load_cookbook(getattr(args, "chunks", None), getattr(args, "queries", None))
    if not corpus.queries:
        raise InvalidInputError(f"{args.queries} holds no queries: an evaluation over 0 queries measures nothing")
    return corpus


def _corpus_from_inputs(args: argparse.Namespace) -> Any:
    """``eval INPUTS``: the documents chunked as ``contextualize`` and ``index`` chunk them, with queries from
    ``--queries`` or written now by the LLM (``--generate-queries N``, kept in WORK_DIR/eval/queries.jsonl)."""
    from ctx_retrieval.evaluation import EvalCorpus
    from ctx_retrieval.evaluation.corpus import read_queries

    items = load_documents(args.inputs, _splitter(args), max_bytes=int(args.max_input_mb * 2**20))
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
    corpus.validate()
    return corpus


@contextlib.contextmanager
def _question_writer(args: argparse.Namespace) -> Iterator[tuple[Any, Any, str]]:
    """The provider that writes questions (``_llm_for``), its twin stopped after, whatever happens meanwhile."""
    provider, server, label = _llm_for(args, _resolved_choice(args))
    try:
        yield provider, server, label
    finally:
        if server is not None:
            server.stop()


def _write_questions(args: argparse.Namespace, items: list[tuple[SourceDocument, list[Chunk]]], count: int,
                     out: Path) -> Any:
    """Questions for ``count`` sampled chunks by the chosen LLM, written to ``out`` (the same engine, cache and
    budget as contexts); the query set."""
    from ctx_retrieval.evaluation.queries import generate_queries

    cache = getattr(args, "cache", None)
    with _question_writer(args) as (provider, server, label):
        _say(f"question writer: {label}")
        query_set = generate_queries(items, count, provider=provider, seed=getattr(args, "seed", 0),
                                     cache=Path(cache) if cache else server is None,
                                     budget_usd=getattr(args, "budget", None),
                                     progress=not getattr(args, "quiet", False))
    query_set.write(out)
    _say(f"{query_set.format()}; wrote {out}")
    _say(query_set.note)
    return query_set


def _cmd_queries(args: argparse.Namespace) -> int:
    items = load_documents(args.inputs, _splitter(args), max_bytes=int(args.max_input_mb * 2**20))
    if args.dry_run:
        from ctx_retrieval.evaluation.queries import estimate_queries

        with _question_writer(args) as (provider, _, _):
            print(estimate_queries(items, args.count, provider=provider, seed=args.seed, cache=False).format())
        return 0
    _check_out(args.out)
    _write_questions(args, items, args.count, Path(args.out))
    return 0


def _run_eval(args: argparse.Namespace, corpus: Any, contextualizer: _Contextualizer) -> Any:
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
    reranker = None
    if getattr(args, "rerank", "none") == "claude":
        from ctx_retrieval.providers.anthropic import AnthropicProvider
        from ctx_retrieval.retrieval.rerank import ClaudeReranker

        reranker = ClaudeReranker(AnthropicProvider(args.model))
    baseline = None
    if _resolved_choice(args) not in ("heuristic", "none"):  # LLM contexts: read them against the no-LLM baseline
        heuristic = HeuristicContextualizer()
        baseline = ("heuristic baseline", {r.chunk_id: r.context for r in heuristic.contextualize_many(corpus.items)})
    result = run_ablation(corpus, contexts, contextualizer_label=contextualizer.label,
                          embedder=_embedder(name=_resolve_embedder(args, [d.text for d, _ in corpus.items])),
                          vector_store=args.vector_store, chroma_client=client,
                          reranker=reranker.rerank_ids if reranker else None, progress=_say, baseline=baseline,
                          tokenizer=args.bm25_tokenizer, late_chunking=args.late_chunking,
                          embed_layout=args.embed_layout,
                          second_embedder=((args.also_embedder, _embedder(name=args.also_embedder))
                                           if args.also_embedder else None))
    report = contextualizer.report
    if report is not None:  # what writing these contexts cost (a heuristic, recorded or no contexts cost nothing)
        result.meta["ingestion"] = {"model": f"{report.provider}/{report.model}", "cost_usd": report.cost_usd,
                                    "cost_per_million_document_tokens": report.cost_per_million_document_tokens,
                                    "document_tokens": report.document_tokens}
    else:  # no LLM wrote these: what Claude would cost on this corpus, from a dry run (no request, no key)
        from ctx_retrieval.contextualize.generator import ContextGenerator
        from ctx_retrieval.providers.anthropic import AnthropicProvider

        estimate = ContextGenerator(AnthropicProvider(DEFAULT_MODEL, api_key=_FAKE_KEY), cache=False,
                                    exact_token_counts=False).estimate(corpus.items)
        result.meta["ingestion"] = {
            "model": contextualizer.label, "cost_usd": 0.0, "estimated_model": DEFAULT_MODEL,
            "estimated_cost_per_million_document_tokens": (estimate.cost_usd or 0.0) / max(1, estimate.document_tokens)
            * 1_000_000}
    query_set = getattr(args, "query_set", None)
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


def _generated_queries_file(args: argparse.Namespace) -> bool:
    """Whether ``--queries`` names a file the ``queries`` command wrote (its rows say ``generated_by``)."""
    path = getattr(args, "queries", None)
    if not path or not getattr(args, "inputs", None):
        return False
    from ctx_retrieval.loaders import read_jsonl

    return any(isinstance(row, dict) and "generated_by" in row for row in read_jsonl(path))


def _write_outputs(result: Any, args: argparse.Namespace, stem: str) -> None:
    work = Path(args.work_dir)
    json_path = Path(args.json) if getattr(args, "json", None) else work / "eval" / f"{stem}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result.to_dict(), indent=2), encoding="utf-8")
    chart_path = Path(args.chart) if getattr(args, "chart", None) else work / "eval" / f"{stem}.png"
    try:
        result.chart(chart_path)
    except ImportError as exc:
        _say(f"no chart: {exc}")
    html_path = result.to_html(json_path.with_suffix(".html"), chart=chart_path)
    verdict = result.verdict(result.meta.get("ingestion"))
    if verdict:
        print("\n" + textwrap.fill(verdict, 110))
    _say(f"wrote {json_path}, {chart_path} and the report {html_path}: open file://{html_path.resolve()}")


def _cmd_eval(args: argparse.Namespace) -> int:
    corpus = _load_eval_corpus(args)
    result = _run_eval(args, corpus, _make_contextualizer(args))
    print(result.to_markdown())
    _write_outputs(result, args, "ablation")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.sample_document:
        return _demo_sample(args)
    from ctx_retrieval.evaluation import load_cookbook

    corpus = load_cookbook()
    print(f"ctx-retrieval demo: Anthropic's contextual-retrieval cookbook corpus, {len(corpus.items)} source files, "
          f"{len(corpus.chunks)} chunks, {len(corpus.queries)} dev queries; "
          f"{'exact in-memory' if args.vector_store == 'numpy' else 'embedded Chroma'} vectors + BM25, fused by RRF")
    contextualizer = _make_contextualizer(args)
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
    if _resolved_choice(args) == "recorded":
        print("\nThe contexts above were RECORDED offline from a local LLM (Qwen2.5-Coder-1.5B, the cookbook's "
              "prompt); 'contextual hybrid (heuristic baseline)' is the no-LLM title-and-heading prefix. Set "
              "ANTHROPIC_API_KEY to write the contexts with Claude.")
    elif _resolved_choice(args) == "heuristic":
        print("\nThe heuristic is the cheap baseline. For LLM-written contexts without a key, run "
              "'ctx-retrieval demo' without --contextualizer (contexts recorded offline from a local LLM); "
              "set ANTHROPIC_API_KEY to write them with Claude.")
    return 0


def _demo_sample(args: argparse.Namespace) -> int:
    document, chunks = load_sample()
    print(f"ctx-retrieval demo: {len(chunks)} chunks of the bundled sample document '{SAMPLE_DOCUMENT}'")
    contextualizer = _make_contextualizer(args)
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


def _add_contextualizer_args(parser: argparse.ArgumentParser, *, twin: bool, default: str = "auto") -> None:
    # "fake" (the API twin, a test helper) is offered only by ``python -m ctx_retrieval.testing``; typed here, it
    # gets a message saying where it runs instead of argparse's refusal.
    shown = [c for c in CONTEXTUALIZERS if twin or c != "fake"]
    parser.add_argument("--contextualizer", "--provider", choices=CONTEXTUALIZERS, default=default,
                        metavar="{" + ",".join(shown) + "}",
                        help="who writes contexts: auto = Claude if ANTHROPIC_API_KEY is set, else heuristic "
                             "(the demo: recorded) (default %(default)s); bedrock / vertex = Claude on Amazon Bedrock "
                             "(--region, a Bedrock API key or AWS credentials) or Vertex AI (--region, --project); "
                             "openai = an OpenAI-compatible server "
                             "(--base-url, --model); recorded = contexts recorded from a local LLM (cookbook "
                             "corpus); none = no contexts" + ("; fake = the local fake API" if twin else ""))
    parser.add_argument("--model", default=DEFAULT_MODEL,
                        help="Claude model (default %(default)s), or the served model with openai")
    parser.add_argument("--base-url", help="the API's address: an Anthropic-compatible gateway with anthropic, or an "
                        "OpenAI-compatible server with openai (llama.cpp, vLLM, Ollama: http://127.0.0.1:8080/v1)")
    parser.add_argument("--endpoint-id", help="with --base-url: a stable name for the server in the context cache's "
                        "keys instead of its address (the same server on another port or host keeps its contexts)")
    parser.add_argument("--region", help="with bedrock: the AWS region (default $AWS_REGION); with vertex: the region "
                        "('global', 'us-east5', ...; default $CLOUD_ML_REGION)")
    parser.add_argument("--project",
                        help="with vertex: the Google Cloud project (default $ANTHROPIC_VERTEX_PROJECT_ID)")
    parser.add_argument("--bedrock-invoke", action="store_true",
                        help="with bedrock: the legacy InvokeModel endpoint (model ids such as "
                             "global.anthropic.claude-haiku-4-5-20251001-v1:0) instead of the Messages-API endpoint")
    parser.add_argument("--cache", help="context cache file (default: ~/.cache/ctx-retrieval/contexts.sqlite)")
    parser.add_argument("--max-concurrency", type=_positive_int, default=None,
                        help="requests in flight (default: found by the run, from 8 up to what the rate limits and "
                             "latency call for)")
    parser.add_argument("--budget", type=float, help="stop before spending more than this many dollars")
    parser.add_argument("--reuse-changed-tokens", type=_positive_int, metavar="N",
                        help="an edited document's unchanged chunks keep their contexts while it changed by at most N "
                             "tokens since they were written (stale until refreshed; default: exact, none reused)")
    parser.add_argument("--reuse-other-models", action="store_true",
                        help="after a model or prompt change, each chunk keeps its previous context until its new one "
                             "is written ('contextualize --refresh-stale' writes them)")
    parser.add_argument("--rewrite-neighbours", type=_positive_int, metavar="N",
                        help="with --reuse-changed-tokens: chunks within N chunks of an edit are rewritten, not reused")
    parser.add_argument("--context-language", choices=list(CONTEXT_LANGUAGES), default="auto",
                        help="the language contexts are asked in: auto = the document's (English documents and code "
                             "get the course's prompt unchanged) (default); document = always the document's; "
                             "english = the course's prompt for every document")
    parser.add_argument("--timeout", type=_positive_mb, metavar="SECONDS",
                        help="the most one request may take, sending to its last byte (default 60); a server that "
                             "runs past it gets twice the time on the next request")
    parser.add_argument("--context-tokens", type=_positive_int, metavar="N",
                        help="with openai: the server's context size per request, for windowing (llama-cpp-python "
                             "does not report it; its default is 2048)")
    parser.add_argument("--slots", type=_positive_int, metavar="N",
                        help="with openai: requests the server runs at once, when it does not say")
    parser.add_argument("--no-model-check", action="store_true",
                        help="with openai: do not check --model against the server's /v1/models")


def _positive_mb(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of megabytes") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{number} must be more than 0")
    return number


def _add_input_limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-input-mb", type=_positive_mb, default=DEFAULT_MAX_INPUT_BYTES / 2**20,
                        help="the most input read in one run, all files together (default %(default).0f MB); "
                             "devices and pipes are refused")


def _add_analysis_args(parser: argparse.ArgumentParser, *, default: str | None = "identifiers") -> None:
    """The BM25 analysis options, the same for every command that builds or reads BM25 (index, query, eval, demo)."""
    parser.add_argument("--bm25-tokenizer", choices=["identifiers", "folded", "thai", "parts"], default=default,
                        help="BM25 tokens: identifier parts and whole identifiers, CJK and Thai as characters + "
                             "bigrams, words also without diacritics (identifiers, the default); folded: only "
                             "without diacritics; thai: Thai segmented into words ([thai] extra); parts: "
                             "identifier parts only" + ("" if default else "; default: what the index was built "
                                                        "with"))


def _add_eval_output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vector-store", choices=["numpy", "chroma"], default="numpy",
                        help="exact in-memory search (default: the same figures on every run) or embedded Chroma "
                             "(approximate HNSW search, which can differ between runs under load)")
    parser.add_argument("--embed-layout", choices=["whole", "windows"], default="whole",
                        help="windows: also rank chunks whose context + text overflow the embedder by their best "
                             "window (context + one window of the chunk), as extra rows")
    parser.add_argument("--embedder", choices=("auto", *EMBEDDERS), default="auto", help=EMBEDDER_HELP)
    parser.add_argument("--also-embedder", choices=EMBEDDERS,
                        help="add three-way fusion rows: the --embedder's and this embedder's dense sides with BM25")
    parser.add_argument("--late-chunking", action="store_true",
                        help="add late chunking rows: the no-LLM alternative on the embedding side (each chunk pooled "
                             "from its whole document's token outputs; about a minute more on 2 cores)")
    _add_analysis_args(parser)
    parser.add_argument("--work-dir", default=str(WORK_DIR), help="Chroma data and outputs (default %(default)s)")
    parser.add_argument("--json", help="write the results as JSON here (default WORK_DIR/eval/*.json)")
    parser.add_argument("--chart", help="write the Pass@k chart here (default WORK_DIR/eval/*.png)")
    parser.add_argument("--rerank", choices=["none", "claude"], default="none",
                        help="rerank the contextual hybrid candidates with Claude (needs ANTHROPIC_API_KEY); there is "
                             "no offline reranker: no cross-encoder weights ship on PyPI")


def _build_parser(*, twin: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctx-retrieval",
        description="Contextual retrieval: an LLM writes a short context for each chunk, and the context is "
                    "indexed with the chunk in both a vector index and BM25. Start with 'ctx-retrieval demo'.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress and warnings")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="index the bundled cookbook corpus and compare plain vs contextual retrieval",
                          description="Index the bundled cookbook corpus (90 source files, 737 chunks) into embedded "
                          "a vector index + BM25 with and without contexts, show rankings side by side and print the "
                          "ablation table for its dev queries. Without a key it uses contexts recorded offline "
                          "from a local LLM, beside the no-LLM heuristic baseline.")
    _add_contextualizer_args(demo, twin=twin)
    _add_eval_output_args(demo)
    demo.add_argument("--sample-document", action="store_true",
                      help="instead, contextualize the small bundled sample document and print its contexts")
    demo.set_defaults(func=_cmd_demo)

    ctx = sub.add_parser("contextualize", help="write a context for every chunk of some documents",
                         description="Read documents (text files or folders, a documents JSONL, or the cookbook's "
                         "codebase_chunks.json), write one JSON line per chunk with its context, and report usage.")
    ctx.add_argument("inputs", nargs="+", help="files or folders")
    ctx.add_argument("--out", default="-", help="output JSONL (default: standard output)")
    _add_chunking_args(ctx, "the embedder whose tokens size the chunks")
    ctx.add_argument("--dry-run", action="store_true", help="only estimate requests, tokens and dollars")
    _add_input_limit(ctx)
    ctx.add_argument("--on-error", choices=["raise", "skip"], default="raise")
    ctx.add_argument("--refresh-stale", action="store_true",
                     help="rewrite the stale contexts of these inputs (reused after an edit or a model change), "
                          "nearest the edits first; a chunk keeps its stale context until the new one is written")
    ctx.add_argument("--batch", action="store_true",
                     help="send the requests as Message Batches, at half price (results take up to 24 hours)")
    ctx.add_argument("--poll-interval", type=_positive_mb, default=30.0, metavar="SECONDS",
                     help="with --batch: seconds between checks on submitted batches (default %(default)s)")
    _add_contextualizer_args(ctx, twin=twin)
    ctx.set_defaults(func=_cmd_contextualize)

    index = sub.add_parser("index", help="build a contextual hybrid index (Chroma + BM25) in a folder")
    index.add_argument("inputs", nargs="+", help="files or folders (as for contextualize)")
    index.add_argument("--store", required=True, help="index folder")
    index.add_argument("--contexts", help="use contexts from a 'contextualize' output instead of generating them")
    _add_input_limit(index)
    index.add_argument("--embed-layout", choices=["whole", "windows"], default="whole",
                       help="windows: a chunk whose context + text overflow the embedder gets one vector per window")
    index.add_argument("--quiet", action="store_true", help="no progress bars (contexts, embeddings)")
    _add_analysis_args(index)
    _add_chunking_args(index, "the embedder that embeds the chunks and whose tokens size them")
    _add_contextualizer_args(index, twin=twin)
    index.set_defaults(func=_cmd_index)

    cache = sub.add_parser("cache", help="what the context cache holds, and pruning it",
                           description="stats: contexts, documents, models, dates and size of the context cache. "
                           "prune: delete the contexts of documents no longer live (--live inputs or --live-ids) "
                           "and/or those written before a date (--older-than).")
    cache.add_argument("action", choices=["stats", "prune"])
    cache.add_argument("--cache", help="the cache: a file or a postgresql:// URL (default: the run's default cache)")
    cache.add_argument("--live", nargs="+", metavar="INPUT",
                       help="prune: the corpus as it is now (files, folders, JSONL, as given to 'contextualize'); "
                            "contexts of other documents are deleted")
    cache.add_argument("--live-ids", metavar="FILE", help="prune: a file of live document ids, one per line")
    cache.add_argument("--older-than", metavar="YYYY-MM-DD", help="prune: contexts written before this day (UTC)")
    cache.add_argument("--dry-run", action="store_true", help="prune: only count what would be deleted")
    cache.add_argument("--compact", action="store_true", help="prune: give the freed space back (VACUUM)")
    _add_input_limit(cache)
    cache.set_defaults(func=_cmd_cache)

    query = sub.add_parser("query", help="search an index made by 'index'")
    query.add_argument("store", help="index folder")
    query.add_argument("query", help="the question")
    query.add_argument("-k", type=_positive_int, default=5, help="results (default %(default)s)")
    query.add_argument("--mode", choices=["hybrid", "dense", "bm25"], default="hybrid")
    _add_analysis_args(query, default=None)
    query.set_defaults(func=_cmd_query)

    ev = sub.add_parser("eval", help="run the retrieval ablation (plain/contextual x dense/BM25/hybrid)",
                        description="Pass@5/10/20 as in Anthropic's cookbook for plain and contextual dense, BM25 and "
                        "hybrid retrieval. Default corpus: the bundled cookbook corpus with its dev queries.")
    ev.add_argument("--chunks", help="cookbook-format codebase_chunks.json")
    ev.add_argument("--queries", help="evaluation JSONL (cookbook format, or query + gold_chunk_ids)")
    ev.add_argument("--documents", help="generic documents JSONL (id, text, chunks with ids)")
    ev.add_argument("--contexts-file", help="with --contextualizer recorded: the JSONL of chunk_id, context")
    ev.add_argument("inputs", nargs="*", help="your documents (files or folders, as for contextualize), chunked as "
                    "contextualize chunks them; with --queries or --generate-queries")
    ev.add_argument("--generate-queries", type=_positive_int, metavar="N",
                    help="with INPUTS: the --contextualizer LLM writes a question for each of N sampled chunks "
                         "(stratified over documents; kept in WORK_DIR/eval/queries.jsonl)")
    ev.add_argument("--seed", type=int, default=0, help="the chunk sample's seed (default %(default)s)")
    sizes = ev.add_mutually_exclusive_group()
    sizes.add_argument("--chunk-tokens", type=_positive_int, default=DEFAULT_CHUNK_TOKENS, help=CHUNK_TOKENS_HELP)
    sizes.add_argument("--chunk-chars", type=_positive_int, help=CHUNK_CHARS_HELP)
    _add_input_limit(ev)
    _add_contextualizer_args(ev, twin=twin)
    _add_eval_output_args(ev)
    ev.set_defaults(func=_cmd_eval)

    qs = sub.add_parser("queries", help="have the LLM write evaluation queries for your documents",
                        description="For a sample of chunks (stratified over documents), the LLM writes a question "
                        "each chunk answers, through the same engine as contexts (prompt caching per document, "
                        "prices, --budget, the context cache: a rerun pays only for what is missing). Writes a "
                        "queries JSONL (query, gold_chunk_ids) that 'eval INPUTS --queries' reads.")
    qs.add_argument("inputs", nargs="+", help="files or folders (as for contextualize)")
    qs.add_argument("--count", type=_positive_int, default=100, help="queries to write (default %(default)s)")
    qs.add_argument("--out", default="queries.jsonl", help="output JSONL (default %(default)s)")
    qs.add_argument("--seed", type=int, default=0, help="the chunk sample's seed (default %(default)s)")
    qs.add_argument("--dry-run", action="store_true", help="only estimate requests, tokens and dollars")
    qs.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_chunking_args(qs, "the embedder whose tokens size the chunks (as for eval and index)")
    _add_input_limit(qs)
    _add_contextualizer_args(qs, twin=twin)
    qs.set_defaults(func=_cmd_queries)
    return parser


def main(argv: Sequence[str] | None = None, *, twin: Callable[..., Any] | None = None) -> int:
    """The command line. ``twin`` makes the Anthropic API twin (its class, or a factory), for ``--contextualizer
    fake``: passed by ``python -m ctx_retrieval.testing`` (the package's code never imports its test helpers)."""
    parser = _build_parser(twin=twin is not None)
    args = parser.parse_args(argv)
    args.twin = twin
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except (CtxRetrievalError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory: the input is too large for this machine; split it, or lower --max-input-mb",
              file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
