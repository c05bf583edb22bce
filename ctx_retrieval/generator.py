"""The context generator: (document, chunks) in, one situated context per chunk out.

Per document, one request goes first and writes the prompt cache; the document's other chunks then go
concurrently and read it. Several documents are in flight at once, bounded by ``max_concurrency`` requests;
follow-ups of documents whose cache is written go before first requests of new documents, so each document
finishes while its cache entry is warm. Every answer is committed to the persistent context cache as it
arrives, so an identical rerun makes no request and a killed run resumes with only the missing chunks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any, Literal

from ._aio import run_sync
from .cache import CachedContext, ContextCache, context_cache_key, default_cache_path, text_digest
from .errors import (
    BudgetExceededError,
    ChunkTooLargeError,
    ConfigurationError,
    ContextGenerationError,
    CtxRetrievalError,
    InvalidInputError,
    ProviderUnavailableError,
)
from .models import ModelInfo
from .prompts import DEFAULT_PROMPT, PromptTemplate, clean_context
from .providers.base import ContextRequest, ErrorDecision, Provider, ProviderResponse, TokenCountingProvider
from .providers.generic import server_message
from .results import ContextRun, CostEstimate
from .scheduling import Limiter, PrioritySlots, RateLimit, RetryPolicy, pace_after
from .tokens import TokenCounter, estimate_tokens
from .types import Chunk, ContextResult, ResultStatus, SourceDocument
from .usage import FailedChunk, RunReport, TokenUsage, cost_usd, request_cost_usd
from .validation import locate_chunks
from .windowing import DocumentView, WindowConfig, document_view

__all__ = ["ContextGenerator", "ContextRun", "CostEstimate", "OnError"]

logger = logging.getLogger(__name__)

OnError = Literal["raise", "skip"]
DocumentItems = Iterable[tuple[SourceDocument, Sequence[Chunk]]]

# A document whose cacheable prefix is estimated below this share of the model's minimum gets no warm-up
# request. The estimate can be ~20% off Claude's tokenizer either way; skipping the warm-up of a document that
# turns out cacheable costs a cache write per racing request, warming one that is not costs one round trip.
_WARM_UP_THRESHOLD = 0.5
_FALLBACK_MIN_CACHEABLE_TOKENS = 1024
# An answer cut off at max_tokens is never stored; it is asked once more with this many times the budget.
_MAX_TOKENS_RETRY_FACTOR = 4
# A document is counted exactly by the API when its estimate lies within these factors of a decision boundary:
# the minimum cacheable length (caching and the warm-up request) and the windowing limit (which keeps prompts in
# the model's cheaper price tier). Elsewhere the estimate's error (~20%) cannot change a decision.
_EXACT_NEAR_MINIMUM = (0.4, 2.5)
_EXACT_NEAR_LIMIT = (0.7, 1.3)


def _waves(items: DocumentItems, size: int) -> Iterator[list[tuple[SourceDocument, Sequence[Chunk]]]]:
    """``items`` in lists of ``size``, read lazily."""
    if size < 1:
        raise ConfigurationError("documents_per_wave must be >= 1", setting="documents_per_wave")
    wave: list[tuple[SourceDocument, Sequence[Chunk]]] = []
    for item in items:
        wave.append(item)
        if len(wave) == size:
            yield wave
            wave = []
    if wave:
        yield wave


# Message Batches limits (https://platform.claude.com/docs/en/build-with-claude/batch-processing): 100,000
# requests or 256 MB per batch, whichever comes first. We split below both, with room for the envelope.
MAX_BATCH_REQUESTS = 100_000
MAX_BATCH_BYTES = 200_000_000


@dataclass(frozen=True)
class _BatchOptions:
    poll_interval_s: float
    max_batch_requests: int
    max_batch_bytes: int = MAX_BATCH_BYTES
    warm_up: Literal["batch", "ordinary"] = "batch"


@dataclass
class _Plan:
    """One document prepared for a run."""

    document: SourceDocument
    chunks: tuple[Chunk, ...]
    offset: int  # index of its first result in the flat result list
    tokens: int
    digest: str
    windowed: bool
    keys: list[str | None]  # None for empty chunks
    prefix_tokens: int
    cache_warm: bool = False
    cache_checked: bool = False


class _Answered:
    """An attempt the provider answered (the answer may still be unusable: refusal, cut off, empty)."""

    __slots__ = ("response",)

    def __init__(self, response: ProviderResponse) -> None:
        self.response = response


class _Failed:
    """An attempt that raised, with what the provider's classification says to do about it."""

    __slots__ = ("decision", "error")

    def __init__(self, error: Exception, decision: ErrorDecision) -> None:
        self.error, self.decision = error, decision


@dataclass
class _RunState:
    report: RunReport
    results: list[ContextResult | None]
    plans: list[_Plan]
    limiter: Limiter
    slots: PrioritySlots
    doc_slots: asyncio.Semaphore
    rng: random.Random
    progress: Any
    stop: bool = False
    fatal: Exception | None = None
    budget_hit: bool = False
    inflight_cost: float = 0.0
    probe: asyncio.Event | None = None
    overload_streak: int = 0  # 529s since the last answer: two or more in a row pause the run
    outage_since: float | None = None  # when the server stopped answering (connections refused since then)
    outage_streak: int = 0
    per_slot: bool = False  # the server caches one prefix per slot: each document's chunks go one at a time


class ContextGenerator:
    """Generates situated contexts for chunks, cheaply and resumably.

    Key init args:
        provider: who writes contexts (``AnthropicProvider`` by default, any ``Provider``).
        cache: the persistent context cache: ``True`` (default location, see ``default_cache_path``), a
            path, a ``ContextCache``, or ``False`` for none.
        prompt: the prompt template (``DEFAULT_PROMPT``); its text and version are part of the cache key.
        window: windowing for documents larger than ``max_document_tokens``.
        max_context_tokens: the length cap of a context (about 100 tokens by default).
        max_concurrency: requests in flight at once.
        retry / rate_limit: retry policy and an optional client-side limit (requests and input tokens/min).
        on_error: ``"raise"`` (default) stops at the first chunk that fails after retries and raises
            ``ContextGenerationError``; ``"skip"`` finishes the run and records failures per chunk.
        budget_usd: stop cleanly (``BudgetExceededError``) before spending more than this.
        count_tokens: the planning token counter (default: the offline estimate scaled by the model's tokenizer
            ratio from the model table).
        exact_token_counts: ``None`` (default) counts a document with the provider's token-counting endpoint
            (Anthropic's free ``messages.count_tokens``) when a key is set and its estimate is near a decision
            boundary (the minimum cacheable length, the windowing limit); ``True`` counts every document;
            ``False`` never asks.

    Use:
        .. code-block:: python

            run = generator.contextualize(document, chunks)
            run[0].context, run.report.format()
    """

    def __init__(
        self,
        provider: Provider | None = None,
        *,
        cache: ContextCache | str | PathLike[str] | bool = True,
        prompt: PromptTemplate = DEFAULT_PROMPT,
        window: WindowConfig | None = None,
        max_context_tokens: int = 100,
        max_concurrency: int = 8,
        max_documents_in_flight: int | None = None,
        retry: RetryPolicy | None = None,
        rate_limit: RateLimit | None = None,
        on_error: OnError = "raise",
        budget_usd: float | None = None,
        check_chunks_in_document: bool = True,
        progress: bool = False,
        count_tokens: TokenCounter | None = None,
        exact_token_counts: bool | None = None,
        seed: int | None = None,
    ) -> None:
        if provider is None:
            from .providers.anthropic import AnthropicProvider

            provider = AnthropicProvider()
        if on_error not in ("raise", "skip"):
            raise ConfigurationError("on_error must be 'raise' or 'skip'", setting="on_error")
        settings = (("max_concurrency", max_concurrency, 1), ("max_context_tokens", max_context_tokens, 8),
                    ("max_documents_in_flight", max_documents_in_flight, 1))
        for name, value, least in settings:
            if value is None and name == "max_documents_in_flight":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigurationError(f"{name} must be an int >= {least}, got {value!r}", setting=name)
        if budget_usd is not None and (isinstance(budget_usd, bool) or not isinstance(budget_usd, (int, float))
                                       or not math.isfinite(budget_usd) or budget_usd < 0):
            raise ConfigurationError(f"budget_usd must be a finite number >= 0 or None, got {budget_usd!r}",
                                     setting="budget_usd")
        self.provider = provider
        self.prompt = prompt
        self.window = window or WindowConfig()
        self.max_context_tokens = max_context_tokens
        self.max_concurrency = max_concurrency
        self.max_documents_in_flight = max_documents_in_flight or 2 * max_concurrency
        self.retry = retry or RetryPolicy()
        self.rate_limit = rate_limit
        self.on_error: OnError = on_error
        self.budget_usd = budget_usd
        self.check_chunks_in_document = check_chunks_in_document
        self.progress = progress
        info = provider.model_info
        if info is not None and info.max_output_tokens and self.request_max_tokens > info.max_output_tokens:
            raise ConfigurationError(
                f"max_context_tokens={max_context_tokens} asks for up to {self.request_max_tokens} output tokens, more "
                f"than {info.name}'s maximum output ({info.max_output_tokens:,}): lower max_context_tokens",
                setting="max_context_tokens")
        self.count_tokens: TokenCounter = count_tokens or _model_token_estimate(info)
        self.exact_token_counts = exact_token_counts
        self._exact_counts: dict[tuple[str, str], int] = {}  # (model, text digest) -> the API's count
        self._seed = seed
        self._cache_setting = cache
        self._cache: ContextCache | None = None
        self._closed = False
        self._warned_uncacheable: set[str] = set()
        self.last_report: RunReport | None = None

    def __repr__(self) -> str:
        return (f"ContextGenerator(provider={self.provider!r}, prompt_version={self.prompt.version!r}, "
                f"max_concurrency={self.max_concurrency}, on_error={self.on_error!r})")

    # -- public API ------------------------------------------------------------------------------------

    @property
    def cache(self) -> ContextCache | None:
        """The persistent context cache (opened on first use), or None when disabled."""
        self._check_open()
        if self._cache is None and self._cache_setting is not False:
            setting = self._cache_setting
            if isinstance(setting, ContextCache):
                self._cache = setting
            elif setting is True:
                self._cache = ContextCache(default_cache_path())
            else:
                self._cache = ContextCache(setting)
        return self._cache

    @property
    def identity(self) -> str:
        """Everything that changes the contexts this generator writes, as text without secrets: provider and
        endpoint (and ``extra_body``), model, prompt, windowing and the context length. The same inputs as the
        context cache's key; frameworks key their own caches by it (LlamaIndex's ``IngestionCache``)."""
        return "|".join((self.provider.cache_namespace, self.provider.model, self.prompt.fingerprint,
                         self.window.cache_key_part(self._limit()), f"max_tokens:{self.request_max_tokens}"))

    @property
    def request_max_tokens(self) -> int:
        """``max_tokens`` sent with each request: room above the cap for a preamble that cleanup removes."""
        return max(64, (self.max_context_tokens * 3) // 2)

    def contextualize(self, document: SourceDocument, chunks: Sequence[Chunk]) -> ContextRun:
        """Contexts for the chunks of one document, in input order."""
        return run_sync(self.acontextualize_many([(document, chunks)]))

    async def acontextualize(self, document: SourceDocument, chunks: Sequence[Chunk]) -> ContextRun:
        return await self.acontextualize_many([(document, chunks)])

    def contextualize_many(self, items: DocumentItems) -> ContextRun:
        """Contexts for many documents' chunks: one flat list in input order, and the run report."""
        return run_sync(self.acontextualize_many(items))

    async def acontextualize_many(self, items: DocumentItems) -> ContextRun:
        return await self._arun(items)

    def contextualize_many_batched(self, items: DocumentItems, *, poll_interval_s: float = 30.0,
                                   max_batch_requests: int = 10_000,
                                   max_batch_bytes: int = MAX_BATCH_BYTES,
                                   warm_up: Literal["batch", "ordinary"] = "batch") -> ContextRun:
        """Like ``contextualize_many``, at the Message Batches API's half price.

        Each cacheable document's first chunk writes the prompt cache (``warm_up="batch"``, the default: a first
        batch of those requests, also at half price; ``"ordinary"``: ordinary requests, quicker to start, at full
        price); then the rest go in batches that read it, polled until they end (Anthropic answers within 24
        hours). Submitted batch ids are stored in the context cache at once, so a run that crashes while waiting
        collects them on restart instead of paying again (a crash in the instant between the API accepting a
        batch and its id being stored cannot be covered: the API takes no idempotency key). Requests that end
        errored or expired are retried as ordinary requests; those the API rejected as invalid fail. Use
        ``cache_ttl="1h"`` on the provider so the cache written first lasts while the batches wait. Batches are
        split at ``max_batch_requests`` requests or ``max_batch_bytes`` serialized bytes, whichever comes first
        (the API's limits: 100,000 requests, 256 MB)."""
        return run_sync(self.acontextualize_many_batched(items, poll_interval_s=poll_interval_s,
                                                         max_batch_requests=max_batch_requests,
                                                         max_batch_bytes=max_batch_bytes, warm_up=warm_up))

    async def acontextualize_many_batched(self, items: DocumentItems, *, poll_interval_s: float = 30.0,
                                          max_batch_requests: int = 10_000,
                                          max_batch_bytes: int = MAX_BATCH_BYTES,
                                          warm_up: Literal["batch", "ordinary"] = "batch") -> ContextRun:
        if warm_up not in ("batch", "ordinary"):
            raise ConfigurationError("warm_up must be 'batch' or 'ordinary'", setting="warm_up")
        if not 1 <= max_batch_requests <= MAX_BATCH_REQUESTS:
            raise ConfigurationError(f"max_batch_requests must be 1..{MAX_BATCH_REQUESTS:,} (the API's limit)",
                                     setting="max_batch_requests")
        if not 1 <= max_batch_bytes <= 256_000_000:
            raise ConfigurationError("max_batch_bytes must be 1..256,000,000 (the API's limit is 256 MB)",
                                     setting="max_batch_bytes")
        if not getattr(self.provider, "supports_batches", False):
            raise ConfigurationError(f"{type(self.provider).__name__} has no batch API; use contextualize_many",
                                     setting="provider")
        if self.cache is None:
            raise ConfigurationError("batch mode needs the context cache (cache=True or a path): it records the "
                                     "submitted batches so a restart collects them instead of paying again",
                                     setting="cache")
        if self.budget_usd is not None:
            raise ConfigurationError("budget_usd is not supported in batch mode yet: run contextualize_many, or "
                                     "check estimate() first", setting="budget_usd")
        return await self._arun(items, _BatchOptions(poll_interval_s, max_batch_requests, max_batch_bytes, warm_up))

    def iter_contextualize(self, items: DocumentItems, *, documents_per_wave: int = 64) -> Iterator[ContextRun]:
        """Contextualize a stream of documents in waves of ``documents_per_wave``, yielding each wave's results
        (in input order) as it finishes: memory follows the wave, not the corpus. Each wave is a full run (its
        own report); consume one before the next is read from ``items``."""
        for wave in _waves(items, documents_per_wave):
            yield run_sync(self._arun(wave))

    async def aiter_contextualize(self, items: DocumentItems, *,
                                  documents_per_wave: int = 64) -> AsyncIterator[ContextRun]:
        """The async twin of ``iter_contextualize``."""
        for wave in _waves(items, documents_per_wave):
            yield await self._arun(wave)

    def retry_failed(self, report: RunReport) -> ContextRun:
        """Run again the documents that have chunks without a context; finished chunks come from the cache,
        so only the failed and not-attempted chunks are requested."""
        return run_sync(self.aretry_failed(report))

    async def aretry_failed(self, report: RunReport) -> ContextRun:
        items: dict[str, tuple[SourceDocument, Sequence[Chunk]]] = {}
        for failure in report.to_retry:
            items.setdefault(failure.document.id, (failure.document, failure.chunks))
        return await self._arun(list(items.values()))

    def estimate(self, items: DocumentItems) -> CostEstimate:
        """What a run over ``items`` would request and cost, without any context request (a dry run). Documents
        near a decision boundary are counted with the API's free token counter when a key is set."""
        items = list(items)
        plans = self._plan(items)  # validates before any request
        if run_sync(self._acount_exact(items, near=self._near_boundary, close=True)):
            plans = self._plan(items)
        info = self.provider.model_info
        limit = self._limit()
        cached = self._lookup(plans)
        usage = TokenUsage()
        requests = empty = hits = 0
        uncacheable: list[str] = []
        output_guess = (self.max_context_tokens * 3) // 5
        dollars = 0.0
        long_prompts = 0
        for plan in plans:
            pending = []
            seen: set[str] = set()
            for i, key in enumerate(plan.keys):
                if key is None:
                    empty += 1
                elif key in cached or key in seen:
                    hits += 1
                else:
                    seen.add(key)
                    pending.append(i)
            cacheable = self._cacheable(plan)
            if not cacheable:
                uncacheable.append(plan.document.id)
            for n, i in enumerate(pending):
                view = self._view(plan, i, limit)
                variable = self.count_tokens(view.rest) + self.count_tokens(
                    self.prompt.render_chunk_block(plan.chunks[i].text, windowed=view.windowed))
                if not cacheable:
                    one = TokenUsage(input_tokens=plan.prefix_tokens + variable, output_tokens=output_guess)
                elif n == 0:
                    one = TokenUsage(input_tokens=variable, output_tokens=output_guess,
                                     cache_creation_input_tokens=plan.prefix_tokens)
                else:
                    one = TokenUsage(input_tokens=variable, output_tokens=output_guess,
                                     cache_read_input_tokens=plan.prefix_tokens)
                usage += one
                if info is not None:
                    dollars += request_cost_usd(one, info, cache_ttl=self.provider.cache_ttl)
                    long_prompts += info.in_long_prompt_tier(one.prompt_tokens)
            requests += len(pending)
        return CostEstimate(
            documents=len(plans), chunks=sum(len(p.chunks) for p in plans), cached_chunks=hits,
            empty_chunks=empty, requests=requests, usage=usage, cost_usd=dollars if info else None,
            document_tokens=sum(p.tokens for p in plans), uncacheable_documents=uncacheable,
            windowed_documents=sum(p.windowed for p in plans), long_prompt_requests=long_prompts,
        )

    def close(self) -> None:
        """Close the context cache if this generator opened it. A closed generator stays closed: using it again
        raises ``ConfigurationError`` (it used to reopen its cache silently). Closing twice is fine."""
        if self._cache is not None and not isinstance(self._cache_setting, ContextCache):
            self._cache.close()
        self._cache = None
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("this ContextGenerator was closed (close() or the end of its with block): "
                                     "make a new one to run again", setting="close")

    def __enter__(self) -> ContextGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- planning --------------------------------------------------------------------------------------

    def _limit(self) -> int:
        info = self.provider.model_info
        if info is None:
            served = getattr(self.provider, "context_tokens", None)  # a local server's context size, when known
            return self.window.resolved_limit(served if isinstance(served, int) and served > 0 else 200_000)
        return self.window.resolved_limit(info.context_window, info.long_prompt_threshold)

    def _min_cacheable(self) -> int | None:
        """The model's minimum cacheable prompt length; None where its documentation states none."""
        info = self.provider.model_info
        return info.min_cacheable_tokens if info is not None else _FALLBACK_MIN_CACHEABLE_TOKENS

    def _cacheable(self, plan: _Plan) -> bool:
        minimum = self._min_cacheable()
        return self.provider.supports_prompt_caching and (
            minimum is None or plan.prefix_tokens >= _WARM_UP_THRESHOLD * minimum)

    def _view(self, plan: _Plan, index: int, limit: int) -> DocumentView:
        return document_view(plan.document, plan.chunks, index, prompt=self.prompt, config=self.window,
                             limit=limit, document_tokens=plan.tokens, count=self.count_tokens)

    def _validate(self, document: SourceDocument, chunks: Sequence[Chunk], info: ModelInfo | None) -> None:
        locate_chunks(document, chunks, require_found=self.check_chunks_in_document)
        if info is None:
            return
        for chunk in chunks:
            need = self.count_tokens(chunk.text) + self.request_max_tokens + 512
            if need > info.context_window:
                raise ChunkTooLargeError(
                    f"chunk {chunk.id!r} of document {document.id!r} alone (~{self.count_tokens(chunk.text):,} "
                    f"tokens) does not fit {info.name}'s {info.context_window:,}-token window; split with a "
                    "smaller chunk size", document_id=document.id, chunk_id=chunk.id)

    def _plan(self, items: DocumentItems) -> list[_Plan]:
        info = self.provider.model_info
        limit = self._limit()
        window_part = self.window.cache_key_part(limit)
        plans: list[_Plan] = []
        offset = 0
        ids: set[str] = set()
        for item in items:
            try:
                document, chunks = item
            except (TypeError, ValueError):
                raise InvalidInputError(
                    "each item must be a (SourceDocument, list of Chunk) pair") from None
            if isinstance(chunks, (Chunk, str)):
                raise InvalidInputError(
                    f"chunks must be a list of Chunk, got one {type(chunks).__name__}: pass [chunk], or "
                    "split_into_chunks(document, texts)", document_id=getattr(document, "id", None))
            chunks = tuple(chunks)
            self._validate(document, chunks, info)
            if document.id in ids:
                raise InvalidInputError(
                    f"document id {document.id!r} appears twice in one run; give each document a unique id",
                    document_id=document.id)
            ids.add(document.id)
            digest = text_digest(document.text)
            exact = self._exact_counts.get((self.provider.model, digest))
            tokens = exact if exact is not None else self.count_tokens(document.text)
            plan = _Plan(document=document, chunks=chunks, offset=offset, tokens=tokens, digest=digest,
                         windowed=tokens > limit, keys=[], prefix_tokens=0)
            for i, chunk in enumerate(chunks):
                if not chunk.text.strip():
                    plan.keys.append(None)
                    continue
                extra = f"max_tokens:{self.request_max_tokens}"
                if plan.windowed:
                    view = self._view(plan, i, limit)
                    extra += ":view:" + text_digest(view.prefix + "\x00" + view.rest)
                plan.keys.append(context_cache_key(
                    provider=self.provider.cache_namespace, model=self.provider.model,
                    prompt_fingerprint=self.prompt.fingerprint, window=window_part, document_digest=digest,
                    chunk_text=chunk.text, extra=extra))
            if chunks and exact is not None and not plan.windowed:
                plan.prefix_tokens = self._whole_document_prefix(exact)
            elif chunks:
                plan.prefix_tokens = self.count_tokens(self._view(plan, len(chunks) - 1, limit).prefix)
            plans.append(plan)
            offset += len(chunks)
        return plans

    def _lookup(self, plans: list[_Plan]) -> dict[str, str]:
        """Contexts already in the context cache for these plans, cleaned: key -> context. A stored answer that
        cleans to nothing is no hit (the chunk is asked again)."""
        cache = self.cache
        if cache is None:
            return {}
        found = cache.get_many(k for p in plans for k in p.keys if k is not None)
        return {key: context for key, entry in found.items()
                if (context := clean_context(entry.raw_text, max_tokens=self.max_context_tokens,
                                             count_tokens=self.count_tokens))}

    # -- the run ---------------------------------------------------------------------------------------

    def _whole_document_prefix(self, document_tokens: int) -> int:
        """Tokens of the cached block of a document sent whole: the document and the prompt's tags around it."""
        return document_tokens + self.count_tokens(self.prompt.document_open + self.prompt.document_close)

    def _near_minimum(self, tokens: int) -> bool:
        minimum = self._min_cacheable()
        return minimum is not None and _EXACT_NEAR_MINIMUM[0] * minimum <= tokens <= _EXACT_NEAR_MINIMUM[1] * minimum

    def _near_limit(self, tokens: int) -> bool:
        limit = self._limit()
        return _EXACT_NEAR_LIMIT[0] * limit <= tokens <= _EXACT_NEAR_LIMIT[1] * limit

    def _near_boundary(self, tokens: int) -> bool:
        return self._near_minimum(tokens) or self._near_limit(tokens)

    def _token_counter(self) -> TokenCountingProvider | None:
        """The provider, when exact counts are wanted and it can give them now."""
        provider = self.provider
        if self.exact_token_counts is False or not isinstance(provider, TokenCountingProvider) or not (
                provider.can_count_tokens):
            return None
        return provider

    async def _count_texts(self, wanted: dict[tuple[str, str], str], limiter: Limiter) -> bool:
        """Exact counts for ``wanted`` ((model, digest) -> text): from the context cache where an earlier run
        stored them, else from the API (paced by ``limiter``). True when any count is new to this generator.
        A count that fails transiently leaves the estimate in place; one that shows the run cannot succeed (a
        rejected key, an unknown model, billing) raises the run's typed error."""
        provider = self._token_counter()
        wanted = {k: t for k, t in wanted.items() if k not in self._exact_counts}
        if provider is None or not wanted:
            return False
        store = f"{provider.model}@{self.provider.cache_namespace}"  # counts are per model and endpoint
        cache = self.cache
        learned = False
        if cache is not None:  # counted by an earlier run: no request
            for digest, tokens in cache.get_token_counts(store, (d for _, d in wanted)).items():
                self._exact_counts[(provider.model, digest)] = tokens
                wanted.pop((provider.model, digest), None)
                learned = True
        slots = asyncio.Semaphore(self.max_concurrency)

        async def count(key: tuple[str, str], text: str) -> None:
            async with slots:
                probe = await limiter.acquire(0)
                limiter.sent(0)
                rate_limited = False
                try:
                    self._exact_counts[key] = tokens = await provider.acount_tokens(text)
                    if cache is not None:
                        cache.put_token_count(store, key[1], tokens)
                except Exception as exc:
                    decision = self.provider.classify_error(exc)
                    if decision is None:
                        raise
                    if decision.action == "fail_run":
                        raise self.provider.run_error(decision, exc) from exc
                    rate_limited = decision.kind == "rate_limited"
                    logger.info("token count failed (%s): planning with the estimate", decision.kind)
                finally:
                    if probe:
                        limiter.answered(rate_limited=rate_limited)

        await asyncio.gather(*(count(key, text) for key, text in wanted.items()))
        return learned or bool(wanted)

    async def _acount_exact(self, items: list[tuple[SourceDocument, Sequence[Chunk]]], *,
                            near: Callable[[int], bool], close: bool = False) -> bool:
        """Count, with the API, the documents whose estimate satisfies ``near`` (every document with
        ``exact_token_counts=True``); True when a count is new."""
        provider = self._token_counter()
        if provider is None:
            return False
        wanted: dict[tuple[str, str], str] = {}
        for item in items:
            document = item[0] if isinstance(item, tuple) and item else None
            if isinstance(document, SourceDocument) and (self.exact_token_counts or near(
                    self.count_tokens(document.text))):
                wanted[(provider.model, text_digest(document.text))] = document.text
        try:
            return await self._count_texts(wanted, Limiter(self.rate_limit))
        finally:
            if close:
                await self.provider.aclose()

    async def _count_prefixes(self, state: _RunState, plans: list[_Plan]) -> None:
        """Exact counts for whole documents whose estimated size is near the model's minimum cacheable length,
        just before their warm-up decision (in the run, so other documents' requests go on meanwhile)."""
        provider = self._token_counter()
        if provider is None:
            return
        near = [p for p in plans if not p.windowed and (self.exact_token_counts or self._near_minimum(p.prefix_tokens))]
        try:
            await self._count_texts({(provider.model, p.digest): p.document.text for p in near}, state.limiter)
        except CtxRetrievalError as exc:
            if state.fatal is None:
                state.fatal = exc
            state.stop = True
            return
        for plan in near:
            exact = self._exact_counts.get((provider.model, plan.digest))
            if exact is not None:
                plan.prefix_tokens = self._whole_document_prefix(exact)

    async def _arun(self, items: DocumentItems, batch: _BatchOptions | None = None) -> ContextRun:
        started = time.perf_counter()
        self._check_open()
        self.provider.check_ready()
        notes = await self._prepare_provider()
        info = self.provider.model_info
        if self.budget_usd is not None and info is None:
            raise ConfigurationError(
                f"budget_usd needs prices, and none are known for model {self.provider.model!r}: pass "
                "model_info=ModelInfo(...) to the provider", setting="budget_usd")
        items = list(items)
        plans = self._plan(items)  # validates before any request
        fatal: Exception | None = None
        try:  # counts that may change a document's windowing (and so its cache keys) come first
            if await self._acount_exact(items, near=self._near_limit):
                plans = self._plan(items)
        except CtxRetrievalError as exc:  # the count showed the run cannot succeed: stop it before it starts
            fatal = exc
        report = RunReport(provider=self.provider.name, model=self.provider.model,
                           prompt_version=self.prompt.version, documents=len(plans),
                           chunks=sum(len(p.chunks) for p in plans),
                           document_tokens=sum(p.tokens for p in plans if p.chunks),
                           windowed_documents=sum(p.windowed for p in plans))
        results: list[ContextResult | None] = [None] * report.chunks
        progress = self._progress_bar(report.chunks)
        for note in notes:
            logger.warning("%s", note)
            report.warnings.append(note)
        concurrency, documents, per_slot = self._server_shape()
        state = _RunState(report=report, results=results, plans=plans, limiter=Limiter(self.rate_limit),
                          slots=PrioritySlots(concurrency), doc_slots=asyncio.Semaphore(documents),
                          rng=random.Random(self._seed), progress=progress, fatal=fatal, stop=fatal is not None,
                          per_slot=per_slot)
        hits = self._lookup(plans)
        owners: dict[str, tuple[_Plan, int]] = {}
        followers: list[tuple[_Plan, int, _Plan, int]] = []
        work: list[tuple[_Plan, list[int]]] = []
        for plan in plans:
            pending: list[int] = []
            for i, key in enumerate(plan.keys):
                if key is None:
                    self._set(state, plan, i, None, "empty", TokenUsage())
                elif key in hits:
                    self._set(state, plan, i, hits[key], "cached", TokenUsage())
                elif key in owners:
                    owner_plan, owner_i = owners[key]
                    followers.append((plan, i, owner_plan, owner_i))
                else:
                    owners[key] = (plan, i)
                    pending.append(i)
            if pending:
                work.append((plan, pending))
        try:
            if batch is None:
                await self._run_documents(state, work)
            else:
                await self._run_batched(state, work, batch)
        finally:
            progress.close()
            await self.provider.aclose()
        for plan, i, owner_plan, owner_i in followers:
            owner = results[owner_plan.offset + owner_i]
            assert owner is not None
            status: ResultStatus = "cached" if owner.status in ("generated", "cached") else owner.status
            self._set(state, plan, i, owner.context, status, TokenUsage(), error=owner.error,
                      error_kind=owner.error_kind)
        return self._finish(state, started)

    async def _prepare_provider(self) -> list[str]:
        """Let the provider ask its server about itself (slots, context size, the model name) before planning."""
        prepare = getattr(self.provider, "aprepare", None)
        if prepare is None:
            return []
        try:
            notes: list[str] = await prepare()
        except BaseException:
            await self.provider.aclose()
            raise
        return notes

    def _server_shape(self) -> tuple[int, int, bool]:
        """Requests in flight, documents in flight, and whether each document's chunks go one at a time.

        A server that keeps one cached prefix per slot (llama.cpp, llama-cpp-python, Ollama) gets one document per
        slot: its chunks one after another, so the slot still holds the document when the next chunk comes; B's
        first request interleaved between A's chunks would make the server read A whole again. Where the server
        says how many slots it has, concurrency follows them (more would only queue into timeouts)."""
        slots = getattr(self.provider, "slots", None)
        concurrency = min(self.max_concurrency, slots) if isinstance(slots, int) and slots > 0 else self.max_concurrency
        if getattr(self.provider, "prefix_cache", None) == "per_slot":
            return concurrency, concurrency, True
        return concurrency, self.max_documents_in_flight, False

    def _progress_bar(self, total: int) -> Any:
        if self.progress:
            try:
                from tqdm.auto import tqdm

                return tqdm(total=total, unit="chunk", desc="contextualizing")
            except ImportError:
                logger.info("progress bar needs tqdm: pip install tqdm")

        class _NoBar:
            def update(self, n: int = 1) -> None: ...
            def close(self) -> None: ...

        return _NoBar()

    def _set(self, state: _RunState, plan: _Plan, i: int, context: str | None, status: ResultStatus,
             usage: TokenUsage, *, error: str | None = None, error_kind: str | None = None) -> None:
        state.results[plan.offset + i] = ContextResult(
            document_id=plan.document.id, chunk_id=plan.chunks[i].id, position=plan.chunks[i].position,
            context=context, status=status, provider=self.provider.name, model=self.provider.model,
            prompt_version=self.prompt.version, usage=usage, windowed=plan.windowed, error=error,
            error_kind=error_kind)
        state.progress.update(1)

    async def _run_documents(self, state: _RunState, work: list[tuple[_Plan, list[int]]]) -> None:
        tasks = [asyncio.ensure_future(self._run_document(state, plan, pending)) for plan, pending in work]
        if not tasks:
            return
        done, pending_tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = [t for t in done if not t.cancelled() and t.exception() is not None]
        if failed:  # a bug, not a provider error: stop everything and surface it
            for task in pending_tasks:
                task.cancel()
            await asyncio.gather(*pending_tasks, return_exceptions=True)
            raise failed[0].exception()  # type: ignore[misc]

    async def _run_document(self, state: _RunState, plan: _Plan, pending: list[int]) -> None:
        async with state.doc_slots:
            if len(pending) > 1:
                await self._count_prefixes(state, [plan])
            rest = list(pending)
            if state.per_slot:  # one slot per document: its chunks one after another, the prefix stays warm
                for i in rest:
                    await self._generate(state, plan, i, priority=0)
                return
            if len(rest) > 1 and self._cacheable(plan):
                # One request first: it writes the document's prompt cache, which the others then read.
                while rest and not state.stop:
                    if await self._generate(state, plan, rest.pop(0), priority=1):
                        break
            await asyncio.gather(*(self._generate(state, plan, i, priority=0) for i in rest))

    async def _run_batched(self, state: _RunState, work: list[tuple[_Plan, list[int]]], options: _BatchOptions) -> None:
        """Each cacheable document's first chunk writes its cache (a warm-up batch by default, else ordinary
        requests); once those are answered the rest go as Message Batches and read it. Collected as they end;
        what did not succeed is retried as ordinary requests."""
        cache = self.cache
        assert cache is not None
        wanted = {str(plan.keys[i]): (plan, i) for plan, pending in work for i in pending}
        in_flight = cache.batches_in_flight()  # earlier runs' batches: paid for, collected, never resubmitted
        waiting = {key for keys in in_flight.values() for key in keys}
        await self._count_prefixes(state, [plan for plan, pending in work if len(pending) > 1])
        warm_ups: list[tuple[_Plan, int]] = []
        to_batch: list[tuple[_Plan, int]] = []
        for plan, pending in work:
            fresh = [i for i in pending if plan.keys[i] not in waiting]
            warming = len(fresh) < len(pending)  # an earlier run's batch holds some of its requests already
            if len(fresh) > 1 and self._cacheable(plan) and not warming:
                warm_ups.append((plan, fresh[0]))
                fresh = fresh[1:]
            to_batch.extend((plan, i) for i in fresh)
        if options.warm_up == "batch":
            # Half price for the cache writes too; the other requests wait for these answers, not for a racing
            # write inside one batch (hits within a batch are best effort).
            retry = await self._batch_phase(state, warm_ups, options, wanted, in_flight)
            in_flight = {}
        else:
            retry = warm_ups
        await asyncio.gather(*(self._generate(state, plan, i, priority=1) for plan, i in retry))
        if state.stop:
            for plan, i in to_batch:
                self._set(state, plan, i, None, "not_attempted", TokenUsage())
            return
        retry = await self._batch_phase(state, to_batch, options, wanted, in_flight)
        await asyncio.gather(*(self._generate(state, plan, i, priority=0) for plan, i in retry))

    async def _batch_phase(self, state: _RunState, items: list[tuple[_Plan, int]], options: _BatchOptions,
                           wanted: dict[str, tuple[_Plan, int]],
                           in_flight: dict[str, list[str]]) -> list[tuple[_Plan, int]]:
        """Submit ``items`` as batches (with ``in_flight``, earlier runs' batches), wait for all of them to end and
        collect the answers; the items to retry as ordinary requests."""
        cache = self.cache
        assert cache is not None
        provider: Any = self.provider
        pending_batches = dict(in_flight)
        for group in self._batch_groups(items, options):
            keys = [key for key, _ in group]
            batch_id = await provider.asubmit_batch(group)
            cache.record_batch(batch_id, keys)  # at once: a crash from here on collects, never resubmits
            pending_batches[batch_id] = keys
            state.report.batch_requests += len(keys)
        retry: list[tuple[_Plan, int]] = []
        while pending_batches:
            for batch_id in list(pending_batches):
                if not await provider.abatch_ended(batch_id):
                    continue
                for key, response, why in await provider.abatch_results(batch_id):
                    item = wanted.get(key)
                    if response is not None:
                        self._count_usage(state, response.usage, batch=True)
                        answer = _read_answer(response, self.max_context_tokens, self.count_tokens)
                        if answer.problem is None:  # a refused, cut-off or empty answer is never cached
                            cache.put(key, CachedContext(response.text, self.provider.name, self.provider.model,
                                                         self.prompt.version, response.usage))
                        if item is not None:
                            plan, i = item
                            self._note_cache_use(state, plan, response.usage)
                            if answer.problem is None:
                                state.report.generated += 1
                                self._set(state, plan, i, answer.context, "generated", response.usage)
                            elif answer.problem[0] == "max_tokens":
                                retry.append(item)  # asked again as an ordinary request, with room to finish
                            else:
                                self._fail(state, plan, i, *answer.problem, response.usage)
                    elif item is not None and why is not None and why.startswith("errored:invalid_request"):
                        # The API rejected the request itself: sending it again cannot succeed.
                        plan, i = item
                        state.report.errors_by_type["bad_request"] = state.report.errors_by_type.get(
                            "bad_request", 0) + 1
                        self._fail(state, plan, i, "bad_request", f"the batch answered {why}", TokenUsage())
                    elif item is not None:
                        logger.info("batch request for chunk %s ended %s: retrying it as an ordinary request",
                                    item[0].chunks[item[1]].id, why)
                        retry.append(item)
                cache.forget_batch(batch_id)
                del pending_batches[batch_id]
            if pending_batches:
                await asyncio.sleep(options.poll_interval_s)
        return retry

    def _batch_groups(self, items: list[tuple[_Plan, int]],
                      options: _BatchOptions) -> Iterator[list[tuple[str, ContextRequest]]]:
        """``(custom_id, request)`` groups within both batch limits: request count and serialized bytes."""
        provider: Any = self.provider
        group: list[tuple[str, ContextRequest]] = []
        size = 0
        for plan, i in items:
            entry = (str(plan.keys[i]), self._request(plan, i))
            entry_bytes = provider.batch_request_bytes(*entry)
            if entry_bytes > options.max_batch_bytes:
                raise ConfigurationError(
                    f"one batch request for chunk {plan.chunks[i].id!r} is {entry_bytes:,} bytes, over the batch "
                    f"size limit ({options.max_batch_bytes:,}): use a smaller max_document_tokens",
                    setting="max_document_tokens")
            if group and (len(group) >= options.max_batch_requests or size + entry_bytes > options.max_batch_bytes):
                yield group
                group, size = [], 0
            group.append(entry)
            size += entry_bytes
        if group:
            yield group

    def _request(self, plan: _Plan, i: int) -> ContextRequest:
        chunk = plan.chunks[i]
        view = self._view(plan, i, self._limit())
        return ContextRequest(
            document_id=plan.document.id, chunk_id=chunk.id, document_prefix=view.prefix,
            document_rest=view.rest, chunk_block=self.prompt.render_chunk_block(chunk.text, windowed=view.windowed),
            max_tokens=self.request_max_tokens)

    def _estimated_cost(self, plan: _Plan, variable_tokens: int) -> float:
        info = self.provider.model_info
        if info is None:
            return 0.0
        prefix = TokenUsage(cache_read_input_tokens=plan.prefix_tokens) if plan.cache_warm else TokenUsage(
            cache_creation_input_tokens=plan.prefix_tokens)
        usage = prefix + TokenUsage(input_tokens=variable_tokens, output_tokens=self.request_max_tokens)
        return request_cost_usd(usage, info, cache_ttl=self.provider.cache_ttl)

    def _spent(self, state: _RunState) -> float:
        info = self.provider.model_info
        return cost_usd(state.report.usage, info, cache_ttl=self.provider.cache_ttl,
                        long_prompt_usage=state.report.long_prompt_usage) if info else 0.0

    def _count_usage(self, state: _RunState, usage: TokenUsage, *, batch: bool = False) -> None:
        """Add one answer's usage to the report, noting whether its prompt fell into the dearer price tier."""
        report = state.report
        info = self.provider.model_info
        long_prompt = info is not None and info.in_long_prompt_tier(usage.prompt_tokens)
        if batch:
            report.batch_usage += usage
            if long_prompt:
                report.long_prompt_batch_usage += usage
        else:
            report.usage += usage
            if long_prompt:
                report.long_prompt_usage += usage
        report.long_prompt_requests += long_prompt

    async def _generate(self, state: _RunState, plan: _Plan, i: int, *, priority: int) -> bool:
        """Request one chunk's context with retries; True when it got one."""
        key = plan.keys[i]
        assert key is not None
        request = self._request(plan, i)
        variable = self.count_tokens(request.document_rest) + self.count_tokens(request.chunk_block)
        report = state.report
        failures = 0
        rate_limit_wait = 0.0
        last_error: tuple[str, str] | None = None  # this chunk's latest failed attempt (kind, detail), if any
        while True:
            if state.stop:
                # A chunk tried before the run stopped failed (with why); only an untried one was not attempted.
                if last_error is None:
                    self._set(state, plan, i, None, "not_attempted", TokenUsage())
                else:
                    self._set(state, plan, i, None, "failed", TokenUsage(), error=f"{last_error[0]}: {last_error[1]}",
                              error_kind=last_error[0])
                return False
            probing = state.probe is None
            if probing:
                # The run's first request goes alone: a rejected key or an unknown model then stops the run
                # after one request instead of one per slot.
                state.probe = asyncio.Event()
            else:
                assert state.probe is not None
                await state.probe.wait()
                if state.stop:
                    continue
            try:
                outcome = await self._attempt(state, plan, request, variable, priority)
            finally:
                if probing:
                    assert state.probe is not None
                    state.probe.set()
            if outcome is None:
                continue  # the run stopped (budget, or another chunk's failure) while this one waited
            if isinstance(outcome, _Answered):
                response = outcome.response
                self._count_usage(state, response.usage)
                if response.cache_reported:
                    self._note_cache_use(state, plan, response.usage)
                else:
                    report.cache_reads_reported = False
                if response.stop_reason == "max_tokens" and request.max_tokens == self.request_max_tokens:
                    # Cut off (by thinking, or a long preamble): never stored; asked once more with room.
                    report.retries += 1
                    request = dataclasses.replace(request, max_tokens=request.max_tokens * _MAX_TOKENS_RETRY_FACTOR)
                    continue
                answer = _read_answer(response, self.max_context_tokens, self.count_tokens)
                if answer.problem is not None:
                    self._fail(state, plan, i, *answer.problem, response.usage)
                    return False
                cache = self.cache
                if cache is not None:
                    cache.put(key, CachedContext(response.text, self.provider.name, self.provider.model,
                                                 self.prompt.version, response.usage))
                report.generated += 1
                self._set(state, plan, i, answer.context, "generated", response.usage)
                return True
            error, decision = outcome.error, outcome.decision
            report.errors_by_type[decision.kind] = report.errors_by_type.get(decision.kind, 0) + 1
            said = server_message(error)  # the server's own reason, once ("exceeds the context size of 8192")
            detail = (f"{type(error).__name__}" + (f" (HTTP {decision.status_code})" if decision.status_code else "")
                      + (f": {said}" if said else ""))
            last_error = (decision.kind, detail)
            logger.debug("chunk %s of document %s: %s -> %s%s", plan.chunks[i].id, plan.document.id, detail,
                         decision.action, f" after {decision.retry_after_s:.2f} s" if decision.retry_after_s else "")
            if decision.action == "fail_run":
                if state.fatal is None:
                    state.fatal = self.provider.run_error(decision, error)
                state.stop = True
                self._fail(state, plan, i, decision.kind, detail, TokenUsage())
                return False
            if decision.action == "retry":
                if decision.kind == "unreachable":
                    down = time.monotonic() - (state.outage_since or time.monotonic())
                    if down <= self.retry.max_outage_s and not state.stop:
                        report.retries += 1
                        continue  # the run is paused, one probe at a time: waiting uses no attempt
                    if state.fatal is None:
                        state.fatal = ProviderUnavailableError(
                            f"the server at {getattr(self.provider, 'base_url', None) or self.provider.name} has "
                            f"refused connections for {down:.0f} s (RetryPolicy.max_outage_s="
                            f"{self.retry.max_outage_s:.0f}): start it and call retry_failed(error.report); "
                            "finished contexts are cached", provider=self.provider.name)
                        logger.warning("%s", state.fatal)
                    state.stop = True
                    detail += f", unreachable for {down:.0f} s"
                elif decision.kind == "rate_limited":
                    report.rate_limited += 1
                    delay = decision.retry_after_s or 0.0  # set by _attempt, which paused the run for it
                    if rate_limit_wait + delay <= self.retry.max_rate_limit_wait_s:
                        rate_limit_wait += delay
                        report.retries += 1
                        # _attempt paused the run already; the next acquire waits it out, holding no slot
                        continue
                    detail += (f", the server asked for {delay:.0f} s more after {rate_limit_wait:.0f} s of "
                               f"waiting, over RetryPolicy.max_rate_limit_wait_s "
                               f"({self.retry.max_rate_limit_wait_s:.0f} s)")
                else:
                    failures += 1
                    if failures < self.retry.max_attempts:
                        report.retries += 1
                        delay = max(self.retry.backoff(failures, state.rng), decision.retry_after_s or 0.0)
                        await asyncio.sleep(delay)  # holding no slot: the rest of the run goes on
                        continue
                    detail += f", failed {failures} attempts (RetryPolicy.max_attempts)"
            self._fail(state, plan, i, decision.kind, detail, TokenUsage())
            return False

    async def _attempt(
        self, state: _RunState, plan: _Plan, request: ContextRequest, variable: int, priority: int
    ) -> _Answered | _Failed | None:
        """One request: budget check, rate limit, a slot, the call. None when the run stopped first."""
        estimate = self._estimated_cost(plan, variable)
        if self.budget_usd is not None and self._spent(state) + state.inflight_cost + estimate > self.budget_usd:
            state.stop = state.budget_hit = True
            return None
        state.inflight_cost += estimate  # reserved now, so requests waiting together cannot overspend
        rate_limited = probe = reserved = False
        tokens = variable if plan.cache_warm else variable + plan.prefix_tokens
        try:
            probe = await state.limiter.acquire(tokens, request.max_tokens)
            reserved = True
            if state.stop:
                return None
            await state.slots.acquire(priority)
            try:
                state.report.requests += 1
                sent_at, reserved = state.limiter.sent(tokens, request.max_tokens), False
                response = await self.provider.agenerate(request)
                state.overload_streak = state.outage_streak = 0
                state.outage_since = None
                if response.limits is not None:
                    state.limiter.observe(response.limits, sent_at)
                return _Answered(response)
            except Exception as exc:  # classified by type; anything unknown propagates
                decision = self.provider.classify_error(exc)
                if decision is None:
                    raise
                # Pause the run before the probe's answer releases the others (a wait longer than the run would
                # make fails this chunk in _generate and holds no other). A 529 storm, overloaded answers with no
                # success between them, is the whole API saying "slow down": paced like a 429 without
                # retry-after; a lone 529 among successes is retried by its chunk alone.
                if decision.kind == "rate_limited":
                    rate_limited = True
                    decision = pace_after(decision, state.limiter, self.retry, state.report.rate_limited, state.rng)
                elif decision.kind == "unreachable":
                    # Nothing answers at the address: the server is down. Pause the run and let one probe at a
                    # time find out when it is back, instead of every chunk burning its attempts.
                    state.outage_streak += 1
                    if state.outage_since is None:
                        state.outage_since = time.monotonic()
                    rate_limited = True
                    delay = self.retry.backoff(state.outage_streak, state.rng)
                    state.limiter.pause(delay)
                    decision = dataclasses.replace(decision, retry_after_s=delay)
                elif decision.kind == "overloaded":
                    state.overload_streak += 1
                    if state.overload_streak >= 2:
                        rate_limited = True
                        decision = pace_after(decision, state.limiter, self.retry, state.overload_streak - 2,
                                              state.rng)
                return _Failed(exc, decision)
            finally:
                state.slots.release()
        finally:
            state.inflight_cost -= estimate
            if reserved:  # passed the limiter but never sent (the run stopped, or cancelled)
                state.limiter.unsent(tokens, request.max_tokens)
            if probe:
                state.limiter.answered(rate_limited=rate_limited)

    def _fail(self, state: _RunState, plan: _Plan, i: int, kind: str, message: str, usage: TokenUsage) -> None:
        logger.warning("no context for chunk %s of document %s: %s: %s", plan.chunks[i].id, plan.document.id,
                       kind, message)
        self._set(state, plan, i, None, "failed", usage, error=f"{kind}: {message}", error_kind=kind)
        if self.on_error == "raise":
            state.stop = True

    def _note_cache_use(self, state: _RunState, plan: _Plan, usage: TokenUsage) -> None:
        if usage.cache_creation_input_tokens or usage.cache_read_input_tokens:
            plan.cache_warm = True
        if plan.cache_checked or not self.provider.supports_prompt_caching or not getattr(
                self.provider, "reports_cache_usage", True):
            return
        if getattr(self.provider, "prefix_cache", "explicit") != "explicit":
            return  # automatic prefix caching (local servers, OpenAI): there is no minimum length to warn about
        plan.cache_checked = True
        if plan.cache_warm:
            return
        state.report.uncacheable_documents.append(plan.document.id)
        model = self.provider.model
        if model not in self._warned_uncacheable:
            self._warned_uncacheable.add(model)
            minimum = self._min_cacheable()
            stated = f"{minimum:,} tokens" if minimum is not None else "not documented"
            message = (
                f"prompt caching did nothing for document {plan.document.id!r}: its cacheable part is below "
                f"{model}'s minimum cacheable length ({stated}), so each of its chunks "
                "pays the whole document (report.uncacheable_documents lists all such documents)")
            logger.warning(message)
            state.report.warnings.append(message)

    def _finish(self, state: _RunState, started: float) -> ContextRun:
        report = state.report
        results: list[ContextResult] = []
        for plan in state.plans:
            for i, chunk in enumerate(plan.chunks):
                result = state.results[plan.offset + i]
                assert result is not None, "every chunk gets a result"
                results.append(result)
                if result.status == "cached":
                    report.cached += 1
                elif result.status == "empty":
                    report.empty += 1
                elif result.status == "failed":
                    report.failures.append(FailedChunk(plan.document, chunk, plan.chunks,
                                                       result.error_kind or "error", result.error or ""))
                elif result.status == "not_attempted":
                    report.skipped.append(FailedChunk(plan.document, chunk, plan.chunks, "not_attempted",
                                                      "the run stopped before this chunk"))
        info = self.provider.model_info
        ttl = self.provider.cache_ttl
        report.cost_usd = (cost_usd(report.usage, info, cache_ttl=ttl, long_prompt_usage=report.long_prompt_usage)
                           + cost_usd(report.batch_usage, info, cache_ttl=ttl, batch=True,
                                      long_prompt_usage=report.long_prompt_batch_usage)
                           if info else None)
        report.wall_time_s = time.perf_counter() - started
        self.last_report = report
        run = ContextRun(results, report)
        if state.fatal is not None:
            state.fatal.report = report  # type: ignore[attr-defined]
            raise state.fatal
        if state.budget_hit:
            raise BudgetExceededError(
                f"stopped before exceeding budget_usd=${self.budget_usd:.4f} (spent ${report.cost_usd or 0:.4f}); "
                f"{len(report.to_retry)} chunks have no context: raise budget_usd and call "
                "retry_failed(error.report) (finished contexts are cached)",
                report=report, budget_usd=self.budget_usd or 0.0, spent_usd=report.cost_usd or 0.0)
        if report.to_retry and self.on_error == "raise":
            first = report.failures[0] if report.failures else report.to_retry[0]
            raise ContextGenerationError(
                f"{report.failed} chunks failed and {report.not_attempted} were not attempted (first: chunk "
                f"{first.chunk.id!r} of document {first.document.id!r}: {first.message}); finished contexts are "
                "cached: call retry_failed(error.report), or pass on_error='skip' to finish runs past failures",
                report=report)
        return run


@dataclass(frozen=True)
class _ScaledEstimate:
    """The offline estimate times a tokenizer ratio; a class, not a lambda, so a generator pickles (LlamaIndex's
    ``num_workers`` sends it to worker processes)."""

    ratio: float

    def __call__(self, text: str) -> int:
        return round(estimate_tokens(text) * self.ratio)


def _model_token_estimate(info: ModelInfo | None) -> TokenCounter:
    """The offline token estimate scaled by the model's tokenizer ratio (newer tokenizers count ~30% more)."""
    ratio = info.tokenizer_ratio if info is not None else 1.0
    return estimate_tokens if ratio == 1.0 else _ScaledEstimate(ratio)


@dataclass(frozen=True)
class _Answer:
    """An answer read once: its cleaned context, or why it is none (``(kind, message)``)."""

    context: str | None
    problem: tuple[str, str] | None = None


def _read_answer(response: ProviderResponse, max_context_tokens: int, count_tokens: TokenCounter) -> _Answer:
    if response.stop_reason == "refusal":
        return _Answer(None, ("refusal", "the model declined to write a context (stop_reason refusal)"))
    if response.stop_reason == "max_tokens":
        return _Answer(None, ("max_tokens", "the answer was cut off at max_tokens, also with a larger budget"))
    context = clean_context(response.text, max_tokens=max_context_tokens, count_tokens=count_tokens)
    if not context:
        return _Answer(None, ("empty_response", "the model answered with no context text"))
    return _Answer(context)
