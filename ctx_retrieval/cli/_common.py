"""What the commands share: which contextualizer writes the contexts (and its run, interruptible), the
embedder (chosen from the documents with ``--embedder auto``), chunking, outputs, and the options several
commands declare alike (each declared once, here)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ctx_retrieval.chunking import DEFAULT_CHUNK_TOKENS
from ctx_retrieval.contextualize.cache import ContextCache, default_cache_path
from ctx_retrieval.contextualize.heuristic import HeuristicContextualizer
from ctx_retrieval.contextualize.prompts import DEFAULT_PROMPT, DOCUMENT_LANGUAGE_PROMPT, ENGLISH_PROMPT
from ctx_retrieval.errors import ConfigurationError, ContextGenerationError, InvalidInputError
from ctx_retrieval.loaders import DEFAULT_MAX_INPUT_BYTES, load_documents
from ctx_retrieval.types import Chunk, SourceDocument

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


FAKE_KEY = "sk-ant-fake-cli-key-0000000"


class Args(argparse.Namespace):
    """The parsed command line, typed: every option a shared step reads, with the value it has where a command does
    not declare it (so no step asks whether an option exists). A default here is the parser's own: argparse keeps
    a value the namespace already has for the main parser's options, and copies each command's in."""

    command: str
    verbose: bool = False
    func: Callable[[Args], int]
    twin: Callable[..., Any] | None = None  # the API twin's factory, for --contextualizer fake
    contextualizer: str
    model: str
    work_dir: str
    inputs: Sequence[str] = ()
    sample_document: bool = False
    quiet: bool = False
    # the context run
    cache: str | None = None
    max_concurrency: int | None = None
    budget: float | None = None
    on_error: Literal["raise", "skip"] = "raise"
    context_language: str = "auto"
    refresh_stale: bool = False
    batch: bool = False
    reuse_changed_tokens: int | None = 0
    reuse_other_models: bool = False
    rewrite_neighbours: int | None = 0
    contexts_file: str | None = None
    # where the LLM is
    base_url: str | None = None
    timeout: float | None = None
    endpoint_id: str | None = None
    region: str | None = None
    project: str | None = None
    bedrock_invoke: bool = False
    context_tokens: int | None = None
    slots: int | None = None
    no_model_check: bool = False
    # evaluation
    chunks: str | None = None
    queries: str | None = None
    documents: str | None = None
    generate_queries: int | None = None
    query_set: Any = None  # the QuerySet eval generated (its note and cost go into the evaluation's outputs)
    seed: int = 0
    json: str | None = None
    chart: str | None = None
    rerank: str = "none"


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- contextualizers -------------------------------------------------------------------------------------


@dataclass
class ContextWriter:
    label: str
    run: Callable[[list[tuple[SourceDocument, list[Chunk]]]], dict[str, str | None]]
    close: Callable[[], None]
    # per chunk id: status and provenance of its context, filled by run (written to the contextualize output)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    interrupted: bool = False  # Ctrl-C stopped the run: the command exits 130 after writing what was done
    report: Any = None  # the last run's RunReport, where the contextualizer makes one (its cost, for eval's verdict)


def resolved_choice(args: Args) -> str:
    """``--contextualizer``, with ``auto`` resolved: Claude when a key is set; else, for the demo on the bundled
    corpus, the contexts recorded from a local LLM (the technique's real effect without a key); else the
    heuristic."""
    if args.contextualizer == "openai-compatible":
        return "openai"
    if args.contextualizer != "auto":
        return str(args.contextualizer)
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic"
    if args.command == "demo" and not args.sample_document:
        return "recorded"
    return "heuristic"


def make_contextualizer(args: Args) -> ContextWriter:
    choice = resolved_choice(args)
    if args.contextualizer == "auto" and choice == "heuristic":
        say("no ANTHROPIC_API_KEY: using the heuristic contextualizer (title and nearest heading, no LLM); "
             "set the key to use Claude")
    elif args.contextualizer == "auto" and choice == "recorded":
        say("no ANTHROPIC_API_KEY: using contexts RECORDED offline from a local LLM for the bundled corpus (real "
             "LLM contexts, no API call); the heuristic (no LLM) is the baseline row; set the key to use Claude")
    if choice == "none":
        return ContextWriter("none (plain chunks)", lambda items: {}, lambda: None)
    if choice == "heuristic":
        heuristic = HeuristicContextualizer()

        def run_heuristic(items: list[tuple[SourceDocument, list[Chunk]]]) -> dict[str, str | None]:
            results = heuristic.contextualize_many(items)
            made.records.update((r.chunk_id, result_row(r)) for r in results)
            return {r.chunk_id: r.context for r in results}

        made = ContextWriter("heuristic (title and nearest heading, no LLM)", run_heuristic, lambda: None)
        return made
    if choice == "recorded":
        from ctx_retrieval.evaluation import RecordedContextualizer

        recorded = RecordedContextualizer(args.contexts_file)

        def read(items: list[tuple[SourceDocument, list[Chunk]]]) -> dict[str, str | None]:
            contexts = recorded.contexts()
            missing = [c.id for _, chunks in items for c in chunks if c.id not in contexts]
            if missing:
                raise InvalidInputError(f"{len(missing)} chunks have no recorded context (first: {missing[0]}); "
                                        "recorded contexts exist for the bundled cookbook corpus only")
            made.records.update((c.id, {"status": "recorded", "provider": "recorded", "model": recorded.model,
                                        "prompt_version": "cookbook"}) for _, chunks in items for c in chunks)
            return dict(contexts)

        made = ContextWriter(f"{recorded.label} ({recorded.model})", read, lambda: None)
        return made
    from ctx_retrieval.contextualize.generator import ContextGenerator

    provider, server, label = llm_for(args, choice)
    cache = args.cache
    generator = ContextGenerator(provider, cache=Path(cache) if cache else (choice != "fake"),
                                 max_concurrency=args.max_concurrency,
                                 budget_usd=args.budget,
                                 progress=not args.quiet,
                                 on_error=args.on_error,
                                 prompt=CONTEXT_LANGUAGES[args.context_language],
                                 reuse=reuse_policy(args))
    refresh, batch = args.refresh_stale, args.batch

    def run(items: list[tuple[SourceDocument, list[Chunk]]]) -> dict[str, str | None]:
        if not refresh:
            say(generator.estimate(items).format())
        with interruptible(generator, made):
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
        say("context generation report:\n" + textwrap.indent(result.report.format(warnings=False), "  "))
        if made.interrupted:
            say(f"interrupted: {result.report.not_attempted} chunks were not attempted; run the same command again "
                 "to do them (finished contexts are cached)")
        made.records.update((r.chunk_id, result_row(r)) for r in result)
        made.report = result.report
        return {r.chunk_id: r.context for r in result}

    made = ContextWriter(label, run, server.stop if server else (lambda: None))
    return made


def _is_twin(base_url: str) -> bool:
    """Whether ``base_url`` is the Anthropic API twin (``python -m ctx_retrieval.testing serve``): its answers name it
    in their Server header. One request to the URL's root; anything else (no answer, another server) is not."""
    import urllib.error
    import urllib.request

    from ctx_retrieval.providers.base import TWIN_SERVER

    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/", timeout=2) as answer:
            server = answer.headers.get("Server", "")
    except urllib.error.HTTPError as error:
        server = error.headers.get("Server", "")
    except (OSError, ValueError):
        return False
    return str(server).startswith(TWIN_SERVER)


def llm_for(args: Args, choice: str) -> tuple[Any, Any, str]:
    """The provider for an LLM choice (``anthropic``, ``openai``, or ``fake``: the API twin, started here), the
    twin server to stop after (or None), and the label the command prints."""
    from ctx_retrieval.providers.anthropic import AnthropicProvider

    if choice == "fake":
        if args.twin is None:
            raise ConfigurationError(
                "--contextualizer fake needs the Anthropic API twin, which the command line does not import: run "
                "'python -m ctx_retrieval.testing <command> ... --contextualizer fake' (./scripts/demo.sh does)",
                setting="contextualizer")
        server = args.twin().start()
        provider = AnthropicProvider(args.model, api_key=FAKE_KEY, base_url=server.base_url,
                                     endpoint_id="ctx-retrieval-twin")  # its port changes; its answers do not
        if not args.cache:
            say("the fake API's canned answers are not kept in the context cache (every run asks it again); pass "
                 "--cache PATH to keep them")
        return provider, server, "the local FAKE Anthropic API (canned answers, real request flow)"
    if choice in LLM_CHOICES:
        provider = llm_provider(args, choice)
        if choice == "anthropic" and args.base_url and _is_twin(args.base_url):
            return provider, None, (f"the Anthropic API twin at {args.base_url} (canned answers: a title and the "
                                    "chunk's first words, not evidence of what contexts do)")
        label = {"anthropic": f"Claude ({args.model})", "bedrock": f"Claude on Amazon Bedrock ({provider.model})",
                 "vertex": f"Claude on Vertex AI ({args.model})"}.get(
            choice, f"{args.model} at {args.base_url} (OpenAI-compatible)")
        return provider, None, label
    raise InvalidInputError(f"--contextualizer {choice} writes no text: questions need an LLM (--contextualizer "
                            "anthropic, or openai with --base-url and --model)")


@contextlib.contextmanager
def interruptible(generator: Any, made: ContextWriter) -> Iterator[None]:
    """Ctrl-C stops the run cleanly (requests in flight finish and are stored, the report is printed); a second
    Ctrl-C stops at once. The handler stays in place after the run, while the command reports and writes what was
    done (a second Ctrl-C then must not lose it): ``main`` puts back the one it found when the command returns."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_interrupt(signum: int, frame: Any) -> None:
        if made.interrupted:  # quit at once: requests in flight are abandoned, what was done is still written
            say("quitting: requests in flight are abandoned; what was done is written")
            generator.stop(at_once=True)
            return
        made.interrupted = True
        say("stopping: requests in flight finish and are stored (press Ctrl-C again to quit at once)")
        generator.stop()

    signal.signal(signal.SIGINT, on_interrupt)
    yield


def llm_provider(args: Args, choice: str) -> Any:
    """The provider for ``--contextualizer anthropic`` or ``openai`` (``--base-url``, ``--model``)."""
    base_url = args.base_url
    timeout_s = args.timeout or 60.0
    if choice == "anthropic":
        from ctx_retrieval.providers.anthropic import AnthropicProvider

        return AnthropicProvider(args.model, base_url=base_url, timeout_s=timeout_s,
                                 endpoint_id=args.endpoint_id)
    if choice in ("bedrock", "vertex"):
        from ctx_retrieval.models import platform_model
        from ctx_retrieval.providers.platforms import BedrockProvider, VertexProvider

        region = args.region
        if choice == "bedrock":
            model = args.model if platform_model(args.model).platform == "bedrock" else f"anthropic.{args.model}"
            return BedrockProvider(model, aws_region=region, base_url=base_url, timeout_s=timeout_s,
                                   endpoint="invoke" if args.bedrock_invoke else "messages")
        return VertexProvider(args.model, project_id=args.project, region=region,
                              base_url=base_url, timeout_s=timeout_s)
    if args.model == DEFAULT_MODEL or not base_url:
        raise InvalidInputError("--contextualizer openai needs --base-url and --model: the server's address and the "
                                "model it serves (e.g. --base-url http://127.0.0.1:8080/v1 --model qwen2.5-coder-1.5b)")
    from ctx_retrieval.providers.openai_compat import OpenAICompatibleProvider

    return OpenAICompatibleProvider(args.model, base_url=base_url, timeout_s=timeout_s,
                                    context_tokens=args.context_tokens,
                                    slots=args.slots,
                                    check_model=not args.no_model_check,
                                    endpoint_id=args.endpoint_id)


def reuse_policy(args: Args) -> Any:
    """``--reuse-changed-tokens``, ``--reuse-other-models`` and ``--rewrite-neighbours`` as a ``ReusePolicy`` (None:
    exact, the default)."""
    tokens, other = args.reuse_changed_tokens or 0, args.reuse_other_models
    if not tokens and not other:
        return None
    from ctx_retrieval.contextualize.versions import ReusePolicy

    return ReusePolicy(max_changed_tokens=tokens, other_models=other,
                       rewrite_neighbours=args.rewrite_neighbours or 0)


def result_row(result: Any) -> dict[str, Any]:
    record = {"status": result.status, "provider": result.provider, "model": result.model,
              "prompt_version": result.prompt_version}
    if result.written_from:
        record["written_from"] = result.written_from
    if result.error:
        record["error"], record["error_kind"] = result.error, result.error_kind
    return record


# -- commands --------------------------------------------------------------------------------------------


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} must be at least 1")
    return number


def check_out(out: str) -> None:
    """Refuse an output path whose folder does not exist, before any paid request."""
    if out != "-" and not Path(out).resolve().parent.is_dir():
        raise InvalidInputError(f"--out {out}: the folder {Path(out).parent} does not exist; create it first")


def dry_run_estimate(args: Args, items: list[tuple[SourceDocument, list[Chunk]]]) -> int:
    """An estimate for the chosen contextualizer and cache, writing no file."""
    choice = resolved_choice(args)
    if choice not in (*LLM_CHOICES, "fake"):  # no LLM: the heuristic, recorded contexts, none
        chunks = sum(len(c) for _, c in items)
        print(f"estimate: {len(items)} documents, {chunks} chunks: 0 requests, cost $0.0000 ({choice} contexts)")
        return 0
    from ctx_retrieval.contextualize.generator import ContextGenerator

    if choice == "fake":  # the twin makes the requests Claude would and bills nothing: estimate Claude's bill
        from ctx_retrieval.providers.anthropic import AnthropicProvider

        estimate = ContextGenerator(AnthropicProvider(args.model, api_key=FAKE_KEY), cache=False,
                                    exact_token_counts=False).estimate(items)
        print(estimate.format() + f"\n(the fake API answers these requests for $0; the cost is {args.model}'s at "
                                  "Anthropic's list prices)")
        return 0
    path = Path(args.cache) if args.cache else default_cache_path()
    cache: ContextCache | bool = ContextCache(path) if path.exists() else False  # read what exists, create nothing
    generator = ContextGenerator(llm_provider(args, choice), cache=cache, reuse=reuse_policy(args))
    print(generator.estimate(items, exact=True).format())  # a dry run asked for by name: every document counted (free)
    return 0


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
EMBEDDER_HELP = ("auto (the default): minilm (all-MiniLM-L6-v2, the faster) for English source code, e5 "
                 "(multilingual-e5-small, [multilingual]) for prose in any language, English included; or name one")


def resolve_embedder(args: Args, texts: Sequence[str] | None = None) -> str:
    """``--embedder`` as named, or for ``auto`` the one the documents need (``ctx_retrieval.retrieval.choosing``):
    read from ``texts`` or from the command's inputs (whole files), said on stderr with why, and kept in ``args``."""
    if args.embedder != "auto":
        return str(args.embedder)
    from ctx_retrieval.retrieval.choosing import choose_embedder

    if texts is None:
        texts = [d.text for d, _ in load_documents(args.inputs, lambda text: [text],
                                                   max_bytes=int(args.max_input_mb * 2**20))]
    choice = choose_embedder(texts)
    say(f"embedder: {choice.name} ({choice.reason}); --embedder minilm|e5 chooses another")
    args.embedder = choice.name
    return choice.name


def offline_embedder(progress: bool = True, name: str = "minilm", *, cache: bool = True) -> Any:
    """The offline embedder by name: MiniLM (English, the default) or multilingual-e5-small (``[multilingual]``);
    ``cache=False`` for one that only counts tokens (no embedding cache is opened)."""
    from ctx_retrieval.retrieval.auto import offline_embedder as by_name

    return by_name("e5" if name == "e5" else "minilm", cache=cache, progress=progress)


def splitter_for(args: Args, embedder: Any = None) -> int | Callable[[str], list[str]]:
    """``--chunk-chars`` as it is, else a splitter in the tokens of ``embedder`` (the one the command embeds
    with; by default ``--embedder``'s, for counting only: its tokenizer is loaded, not its model)."""
    if args.chunk_chars is not None:
        return int(args.chunk_chars)
    from ctx_retrieval.chunking import token_chunker
    from ctx_retrieval.errors import MissingDependencyError

    embedder = embedder or offline_embedder(progress=False, name=resolve_embedder(args), cache=False)
    try:
        embedder.count_tokens("")  # loads the tokenizer only
    except MissingDependencyError as exc:
        raise MissingDependencyError(f"{exc}; or size chunks in characters with --chunk-chars N (no tokenizer "
                                     "needed)", extra=exc.extra, module=exc.module) from exc
    return token_chunker(embedder, args.chunk_tokens)


def add_chunking_args(parser: argparse.ArgumentParser, embedder_help: str) -> None:
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--chunk-tokens", type=positive_int, default=DEFAULT_CHUNK_TOKENS, help=CHUNK_TOKENS_HELP)
    sizes.add_argument("--chunk-chars", type=positive_int, help=CHUNK_CHARS_HELP)
    parser.add_argument("--embedder", choices=("auto", *EMBEDDERS), default="auto",
                        help=f"{embedder_help}: {EMBEDDER_HELP}")



def add_contextualizer_args(parser: argparse.ArgumentParser, *, twin: bool, default: str = "auto") -> None:
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
    parser.add_argument("--max-concurrency", type=positive_int, default=None,
                        help="requests in flight (default: found by the run, from 8 up to what the rate limits and "
                             "latency call for)")
    parser.add_argument("--budget", type=float, help="stop before spending more than this many dollars")
    parser.add_argument("--reuse-changed-tokens", type=positive_int, metavar="N",
                        help="an edited document's unchanged chunks keep their contexts while it changed by at most N "
                             "tokens since they were written (stale until refreshed; default: exact, none reused)")
    parser.add_argument("--reuse-other-models", action="store_true",
                        help="after a model or prompt change, each chunk keeps its previous context until its new one "
                             "is written ('contextualize --refresh-stale' writes them)")
    parser.add_argument("--rewrite-neighbours", type=positive_int, metavar="N",
                        help="with --reuse-changed-tokens: chunks within N chunks of an edit are rewritten, not reused")
    parser.add_argument("--context-language", choices=list(CONTEXT_LANGUAGES), default="auto",
                        help="the language contexts are asked in: auto = the document's (English documents and code "
                             "get the course's prompt unchanged) (default); document = always the document's; "
                             "english = the course's prompt for every document")
    parser.add_argument("--timeout", type=positive_mb, metavar="SECONDS",
                        help="the most one request may take, sending to its last byte (default 60); a server that "
                             "runs past it gets twice the time on the next request")
    parser.add_argument("--context-tokens", type=positive_int, metavar="N",
                        help="with openai: the server's context size per request, for windowing (llama-cpp-python "
                             "does not report it; its default is 2048)")
    parser.add_argument("--slots", type=positive_int, metavar="N",
                        help="with openai: requests the server runs at once, when it does not say")
    parser.add_argument("--no-model-check", action="store_true",
                        help="with openai: do not check --model against the server's /v1/models")


def positive_mb(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of megabytes") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{number} must be more than 0")
    return number


def add_input_limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-input-mb", type=positive_mb, default=DEFAULT_MAX_INPUT_BYTES / 2**20,
                        help="the most input read in one run, all files together (default %(default).0f MB); "
                             "devices and pipes are refused")


def add_analysis_args(parser: argparse.ArgumentParser, *, default: str | None = "identifiers") -> None:
    """The BM25 analysis options, the same for every command that builds or reads BM25 (index, query, eval, demo)."""
    parser.add_argument("--bm25-tokenizer", choices=["identifiers", "folded", "thai", "parts"], default=default,
                        help="BM25 tokens: identifier parts and whole identifiers, CJK and Thai as characters + "
                             "bigrams, words also without diacritics (identifiers, the default); folded: only "
                             "without diacritics; thai: Thai segmented into words ([thai] extra); parts: "
                             "identifier parts only" + ("" if default else "; default: what the index was built "
                                                        "with"))


def add_eval_output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vector-store", choices=["numpy", "chroma", "milvus", "postgres"], default="numpy",
                        help="exact in-memory search (default: the same figures on every run), embedded Chroma "
                             "(approximate HNSW search, which can differ between runs under load), Milvus (both "
                             "sides in the engine: its dense field and its BM25 over our analysis; --milvus-uri), or "
                             "PostgreSQL (pgvector and BM25 in SQL, one table a variant; --postgres-url)")
    parser.add_argument("--postgres-url", help="with --vector-store postgres: postgresql://user@host/db (pgvector "
                                               ">= 0.8); the evaluation's tables are named ctx_eval_*")
    parser.add_argument("--milvus-uri", help="with --vector-store milvus: a Milvus Lite file or a server's URL "
                                             "(default: <work-dir>/milvus.db); the evaluation's collections are "
                                             "named ctx_eval_*")
    parser.add_argument("--embed-layout", choices=["whole", "windows"], default="whole",
                        help="windows: also rank chunks whose context + text overflow the embedder by their best "
                             "window (context + one window of the chunk), as extra rows")
    parser.add_argument("--embedder", choices=("auto", *EMBEDDERS), default="auto", help=EMBEDDER_HELP)
    parser.add_argument("--also-embedder", choices=EMBEDDERS,
                        help="add three-way fusion rows: the --embedder's and this embedder's dense sides with BM25")
    parser.add_argument("--late-chunking", action="store_true",
                        help="add late chunking rows: the no-LLM alternative on the embedding side (each chunk pooled "
                             "from its whole document's token outputs; about a minute more on 2 cores)")
    add_analysis_args(parser)
    parser.add_argument("--work-dir", default=str(WORK_DIR), help="Chroma data and outputs (default %(default)s)")
    parser.add_argument("--json", help="write the results as JSON here (default WORK_DIR/eval/*.json)")
    parser.add_argument("--chart", help="write the Pass@k chart here (default: beside the JSON, as .png)")
    parser.add_argument("--rerank", choices=["none", "claude"], default="none",
                        help="rerank the contextual hybrid candidates with Claude (needs ANTHROPIC_API_KEY); there is "
                             "no offline reranker: no cross-encoder weights ship on PyPI")


def postgres_url(store: str) -> str | None:
    """The connection string of a ``--store postgresql://...`` (or ``postgres://``), else ``None``."""
    return store if store.startswith(("postgresql://", "postgres://")) else None


def store_name(store: str) -> str:
    """``--store`` as said on the terminal: a connection string without its password."""
    if postgres_url(store) is None:
        return store
    from ctx_retrieval.contextualize.cache_postgres import redact_url

    return redact_url(store)


def milvus_uri(store: str) -> str | None:
    """The Milvus URI of a ``--store milvus:URI`` (``None`` for an index folder); a URI that names no server and no
    Milvus Lite file in an existing folder is an ``InvalidInputError`` naming the forms."""
    if not store.startswith("milvus:"):
        return None
    uri = store[len("milvus:"):]
    if "://" not in uri and not uri.startswith("unix:"):
        folder = Path(uri).expanduser().parent
        if not uri.endswith(".db") or not folder.is_dir():
            raise InvalidInputError(f"--store {store!r}: give milvus:./chunks.db (a Milvus Lite file in an existing "
                                    "folder) or milvus:http://host:19530 (a server)")
    return uri
