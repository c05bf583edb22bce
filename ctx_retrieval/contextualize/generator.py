"""The context generator: (document, chunks) in, one situated context per chunk out.

Per document, one request goes first and writes the prompt cache; the document's other chunks then go concurrently
and read it. Several documents are in flight, twice the requests in flight; follow-ups of documents whose cache is
written go first, so each document finishes while its cache entry is warm. Every answer is committed to the
persistent context cache as it arrives, so an identical rerun makes no request and a killed run resumes with only
the missing chunks. The facade: ``planning`` decides what each document sends, ``run`` runs the requests.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from os import PathLike
from typing import Any, Literal

from ctx_retrieval._aio import run_sync
from ctx_retrieval.contextualize._planning import DocumentItems, Planner, iterable_items, waves
from ctx_retrieval.contextualize._reuse import estimate as estimate_run
from ctx_retrieval.contextualize._run import Run, prepare_provider
from ctx_retrieval.contextualize._settings import DEFAULT_LEASE_TTL_S, OPTIONS, OnError, RunSettings
from ctx_retrieval.contextualize.batches import MAX_BATCH_BYTES, BatchOptions, run_batched
from ctx_retrieval.contextualize.cache_postgres import CacheURL, is_postgres_url
from ctx_retrieval.contextualize.leases import leases_for
from ctx_retrieval.contextualize.prompts import DEFAULT_PROMPT, PromptTemplate
from ctx_retrieval.contextualize.results import ContextRun, CostEstimate
from ctx_retrieval.contextualize.stores import ContextStore, open_context_cache
from ctx_retrieval.contextualize.tracing import RequestTracer
from ctx_retrieval.contextualize.versions import ReusePolicy, VersionedStore
from ctx_retrieval.contextualize.windowing import WindowConfig
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.pacing import SYSTEM_CLOCK, Clock, RateLimit, RetryPolicy, SharedBudget
from ctx_retrieval.progress import logs_above
from ctx_retrieval.providers.base import Provider
from ctx_retrieval.tokens import TokenCounter
from ctx_retrieval.types import Chunk, SourceDocument
from ctx_retrieval.usage import RunReport

logger = logging.getLogger(__name__)


class ContextGenerator:
    """Generates situated contexts for chunks, cheaply and resumably.

    Key init args:
        provider: who writes contexts (``AnthropicProvider`` by default, any ``Provider``).
        cache: the persistent context cache: ``True`` (default location, see ``default_cache_path``), a
            path, a ``postgresql://`` URL (``$CTX_RETRIEVAL_CACHE_URL``: the default when set), a ``ContextCache``
            or ``PostgresContextCache``, or ``False`` for none.
        prompt: the template (``DEFAULT_PROMPT``: contexts in the document's language); part of the cache key.
        window: windowing for documents larger than ``max_document_tokens``.
        max_context_tokens: the length cap of a context (about 100 tokens by default).
        max_concurrency: requests in flight at once; None (default): found by the run (from 8 up to 256, growing
            while a request the rate limits allow waits for a slot and the step raises throughput: not where the
            server or this client's CPU is the bottleneck), a number fixes it.
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
        lease_ttl_s: several workers on one cache (processes, machines, Ray actors) claim each document before
            writing it, for this long, renewed while they run (``contextualize.leases``); None turns claims off.
        shared_rate_limit: a rate limit the fleet shares (``ctx_retrieval.distributed``), on top of ``rate_limit``.
        clock: the time every decision of a run reads (waits, backoff, outages, leases); the system's by default,
            one that moves only when slept on in tests.
        tracers: see every context request with its usage and cost (``contextualize.tracing``).
        reuse: opt-in reuse of earlier contexts across document edits and model or prompt changes (``ReusePolicy``,
            ``contextualize.versions``; ``refresh_stale`` rewrites them); None (default): exact.

    The settings are frozen when it is built (``settings``); ``with_options(**changes)`` makes a generator with some
    changed, sharing this one's context cache.

    Use:
        .. code-block:: python

            run = generator.contextualize(document, chunks)
            run[0].context, run.report.format()
    """

    def __init__(
        self,
        provider: Provider | None = None,
        *,
        cache: ContextStore | str | PathLike[str] | bool = True,
        prompt: PromptTemplate = DEFAULT_PROMPT,
        window: WindowConfig | None = None,
        max_context_tokens: int = 100,
        max_concurrency: int | None = None,
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
        lease_ttl_s: float | None = DEFAULT_LEASE_TTL_S,
        shared_rate_limit: SharedBudget | None = None,
        clock: Clock | None = None,
        tracers: Sequence[RequestTracer] = (),
        reuse: ReusePolicy | None = None,
    ) -> None:
        if provider is None:
            from ctx_retrieval.providers.anthropic import AnthropicProvider

            provider = AnthropicProvider()
        self.settings = RunSettings(  # frozen and checked here: with_options makes a generator with some changed
            provider, prompt=prompt, window=window or WindowConfig(), max_context_tokens=max_context_tokens,
            max_concurrency=max_concurrency, max_documents_in_flight=max_documents_in_flight,
            retry=retry or RetryPolicy(), rate_limit=rate_limit, on_error=on_error, budget_usd=budget_usd,
            check_chunks_in_document=check_chunks_in_document, progress=progress, count_tokens=count_tokens,
            exact_token_counts=exact_token_counts, seed=seed, lease_ttl_s=lease_ttl_s,
            shared_rate_limit=shared_rate_limit, clock=clock or SYSTEM_CLOCK, tracers=tuple(tracers), reuse=reuse)
        self._cache_setting = CacheURL(cache) if is_postgres_url(cache) else cache  # pickles without the password
        self._cache: ContextStore | None = None
        self._closed = False
        self._warned_uncacheable: set[str] = set()
        self.last_report: RunReport | None = None
        self._exact_counts: dict[tuple[str, str], int] = {}  # (model, text digest) -> the API's count, across runs
        self._active: list[Run] = []  # runs in progress (stop() ends them)
        self._starting = 0  # runs still planning: a stop() then is kept for them (None: no stop asked)
        self._stop_asked: bool | None = None  # at_once of a stop() that came while a run was starting

    def __repr__(self) -> str:
        s = self.settings
        return (f"ContextGenerator(provider={s.provider!r}, prompt_version={s.prompt.version!r}, "
                f"max_concurrency={s.max_concurrency}, on_error={s.on_error!r})")

    @property
    def provider(self) -> Provider:
        """Who writes the contexts (``settings.provider``)."""
        return self.settings.provider

    @property
    def prompt(self) -> PromptTemplate:
        """The prompt template (``settings.prompt``)."""
        return self.settings.prompt

    @property
    def reuse(self) -> ReusePolicy | None:
        """The reuse policy, None for exact contexts only (``settings.reuse``)."""
        return self.settings.reuse

    def with_options(self, **changes: Any) -> ContextGenerator:
        """A generator like this one with some settings changed (the anthropic SDK's ``with_options``), e.g.
        ``generator.with_options(budget_usd=None).retry_failed(report)``: the constructor's arguments but ``cache``,
        checked as there. It shares this one's context cache (open or not: its ``close()`` leaves it open) and the
        token counts learned; this generator is unchanged, as its settings are frozen (``settings``)."""
        self._check_open()
        unknown = sorted(set(changes) - OPTIONS)
        if unknown:
            raise ConfigurationError(f"with_options takes the generator's settings ({', '.join(sorted(OPTIONS))}), "
                                     f"not {', '.join(unknown)}", setting=unknown[0])
        other = copy.copy(self)
        other.settings = replace(self.settings, **changes)
        if self._cache is not None:
            other._cache_setting = self._cache  # shared: a ContextStore given is never closed by its generator
        other._active, other._starting, other._stop_asked, other.last_report = [], 0, None, None
        return other

    # -- public API ------------------------------------------------------------------------------------

    @property
    def cache(self) -> ContextStore | None:
        """The persistent context cache (opened on first use), or None when disabled."""
        self._check_open()
        if self._cache is None and self._cache_setting is not False:
            self._cache = open_context_cache(self._cache_setting)
        return self._cache

    @property
    def identity(self) -> str:
        """Everything that changes the contexts this generator writes, as text without secrets: provider and
        endpoint (and ``extra_body``), model, prompt, windowing and the context length. The same inputs as the
        context cache's key; frameworks key their own caches by it (LlamaIndex's ``IngestionCache``)."""
        s = self.settings
        return "|".join((s.provider.cache_namespace, s.provider.model, s.prompt.identity,
                         s.window.cache_key_part(Planner(s, self._exact_counts).limit()),
                         f"max_tokens:{s.request_max_tokens}", *([s.reuse.identity] if s.reuse is not None else [])))

    @property
    def request_max_tokens(self) -> int:
        """``max_tokens`` sent with each request: room above the cap for a preamble that cleanup removes."""
        return self.settings.request_max_tokens

    def contextualize(self, document: SourceDocument, chunks: Sequence[Chunk]) -> ContextRun:
        """Contexts for the chunks of one document, in input order."""
        return run_sync(self.acontextualize_many([(document, chunks)]))

    async def acontextualize(self, document: SourceDocument, chunks: Sequence[Chunk]) -> ContextRun:
        return await self.acontextualize_many([(document, chunks)])

    def contextualize_many(self, items: DocumentItems, *, progress: bool | None = None) -> ContextRun:
        """Contexts for many documents' chunks: one flat list in input order, and the run report.
        ``progress`` shows a progress bar for this call (default: the generator's ``progress``)."""
        return run_sync(self.acontextualize_many(items, progress=progress))

    async def acontextualize_many(self, items: DocumentItems, *, progress: bool | None = None) -> ContextRun:
        return await self._arun(items, progress=progress)

    def contextualize_many_batched(self, items: DocumentItems, *, poll_interval_s: float = 30.0,
                                   max_batch_requests: int = 10_000, max_batch_bytes: int = MAX_BATCH_BYTES,
                                   warm_up: Literal["batch", "ordinary"] = "batch") -> ContextRun:
        """Like ``contextualize_many``, at the Message Batches API's half price (``contextualize.batches``: cache
        warm-ups as a first batch, ``warm_up="batch"``, or ordinary requests; batch ids kept in the context cache,
        so a crashed run collects them on restart). Use ``cache_ttl="1h"`` on the provider; batches are split at
        ``max_batch_requests`` requests or ``max_batch_bytes`` bytes (the API's limits: 100,000, 256 MB)."""
        return run_sync(self.acontextualize_many_batched(
            items, poll_interval_s=poll_interval_s, max_batch_requests=max_batch_requests,
            max_batch_bytes=max_batch_bytes, warm_up=warm_up))

    async def acontextualize_many_batched(self, items: DocumentItems, *, poll_interval_s: float = 30.0,
                                          max_batch_requests: int = 10_000, max_batch_bytes: int = MAX_BATCH_BYTES,
                                          warm_up: Literal["batch", "ordinary"] = "batch") -> ContextRun:
        return await self._arun(items, batch=BatchOptions(poll_interval_s, max_batch_requests, max_batch_bytes,
                                                          warm_up).checked(self._settings()))

    def iter_contextualize(self, items: DocumentItems, *, documents_per_wave: int = 64) -> Iterator[ContextRun]:
        """Contextualize a stream of documents in waves of ``documents_per_wave``, yielding each wave's run (its results
        in input order, its own report) as it finishes: memory follows the wave, not the corpus."""
        for wave in waves(items, documents_per_wave):
            yield run_sync(self._arun(wave))

    async def aiter_contextualize(self, items: DocumentItems, *,
                                  documents_per_wave: int = 64) -> AsyncIterator[ContextRun]:
        """The async twin of ``iter_contextualize``."""
        for wave in waves(items, documents_per_wave):
            yield await self._arun(wave)

    def stop(self, *, at_once: bool = False) -> None:
        """Stop the runs in progress cleanly (safe from a signal handler): requests in flight finish and are stored, no
        new one starts; each run ends with its report (``ContextGenerationError``). ``at_once``: requests in flight
        are abandoned too (the CLI's second Ctrl-C); the run still ends with its report and every finished result."""
        if self._starting:  # a run still planning stops as soon as it starts (a Ctrl-C early in the run counts)
            self._stop_asked = bool(at_once or self._stop_asked)
        for run in self._active:
            self._stop(run, at_once=at_once)

    @staticmethod
    def _stop(run: Run, *, at_once: bool) -> None:
        run.interrupted = run.stop = True
        if at_once and run.task is not None and run.loop is not None:
            run.abandoned = True
            run.loop.call_soon_threadsafe(run.task.cancel)

    def retry_failed(self, report: RunReport) -> ContextRun:
        """Run again the documents that have chunks without a context; finished chunks come from the cache,
        so only the failed and not-attempted chunks are requested."""
        return run_sync(self.aretry_failed(report))

    async def aretry_failed(self, report: RunReport) -> ContextRun:
        return await self._arun(report.documents_to_retry())

    def refresh_stale(self, items: DocumentItems | RunReport, *, batch: bool = False, poll_interval_s: float = 30.0,
                      progress: bool | None = None) -> ContextRun:
        """Rewrite the stale (reused) contexts of ``items`` (the documents as they are now, or a report's ``stale``),
        nearest the edits first, at half price with ``batch=True``; until its new context is written a chunk keeps
        its stale one, so a refresh that stops leaves every chunk with a context (``contextualize.versions``)."""
        return run_sync(self.arefresh_stale(items, batch=batch, poll_interval_s=poll_interval_s, progress=progress))

    async def arefresh_stale(self, items: DocumentItems | RunReport, *, batch: bool = False,
                             poll_interval_s: float = 30.0, progress: bool | None = None) -> ContextRun:
        options = BatchOptions(poll_interval_s, 10_000).checked(self._settings()) if batch else None
        return await self._arun(items.documents_to_refresh() if isinstance(items, RunReport) else items, batch=options,
                                progress=progress, refresh=True)

    def estimate(self, items: DocumentItems, *, exact: bool = False) -> CostEstimate:
        """What a run over ``items`` would request and cost, with no context request (a dry run; documents near a
        decision boundary are counted with the API's free token counter when a key is set, every document with
        ``exact=True``). Counts are kept (by this generator, and in its cache), so the run does not count again;
        output is priced at the mean length of the contexts the cache holds for this model and prompt."""
        items, planner = list(iterable_items(items)), self._planner
        plans = planner.plan(items)  # validates before any request
        counts = exact and planner.settings.exact_token_counts is not False
        near = (lambda _tokens: True) if counts else planner.near_boundary
        if run_sync(planner.count_exact(items, planner.settings.pacer(), near=near, close=True)):
            plans = planner.plan(items)
        return estimate_run(planner, plans)

    def close(self) -> None:
        """Close the context cache if this generator opened it; a closed generator stays closed (using it again raises
        ``ConfigurationError``), closing twice is fine."""
        if self._cache is not None and not isinstance(self._cache_setting, ContextStore):
            self._cache.close()
        self._cache = None
        self._closed = True

    def versioned_cache(self) -> VersionedStore | None:
        """The context cache when it records document versions (both built-in caches do), else None."""
        cache = self.cache
        return cache if isinstance(cache, VersionedStore) else None

    def _settings(self) -> RunSettings:
        """What a run reads: the frozen settings with the context cache opened (the provider's traits found once a
        run)."""
        return replace(self.settings, cache=self.cache)

    @property
    def _planner(self) -> Planner:
        """A planner on the settings as they stand now (the exact counts it learns stay with this generator)."""
        return Planner(self._settings(), self._exact_counts)

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("this ContextGenerator was closed (close() or the end of its with block): "
                                     "make a new one to run again", setting="close")

    def __enter__(self) -> ContextGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the run ---------------------------------------------------------------------------------------

    async def _arun(self, items: DocumentItems, *, batch: BatchOptions | None = None,
                    progress: bool | None = None, refresh: bool = False) -> ContextRun:
        started = time.perf_counter()
        iterable_items(items)  # before the provider is checked: the shape is the first thing to fix
        self._check_open()
        self.settings.provider.check_ready()
        self._starting += 1
        try:
            settings = self._settings()
            notes = await prepare_provider(settings)
            planner = Planner(settings, self._exact_counts)
            pacer = settings.pacer()
            plans, fatal = await planner.plan_run(list(items), pacer)
            run = Run(settings, planner, plans, pacer=pacer, notes=notes, fatal=fatal, warned=self._warned_uncacheable,
                      progress=settings.progress if progress is None else progress,
                      leases=leases_for(settings.cache, settings.lease_ttl_s, clock=settings.clock)
                      if batch is None else None)
            run.task, run.loop = asyncio.current_task(), asyncio.get_running_loop()
            self._active.append(run)
        finally:
            self._starting -= 1
        if self._stop_asked is not None:  # stopped while planning: nothing is in flight, so no request starts
            self._stop(run, at_once=False)
            if not self._starting:
                self._stop_asked = None
        parts = await run.sort(plans, refresh=refresh)
        try:
            with logs_above(run.progress):
                await (run.run_documents(parts.work) if batch is None else run_batched(run, parts.work, batch))
                run.warn_uncacheable()  # above the progress bar, as the run's other warnings
        except asyncio.CancelledError:
            if not run.abandoned:
                raise
            assert run.task is not None
            run.task.uncancel()  # quit at once (stop(at_once=True)): what was done is kept and reported
            run.abandon()
        finally:
            self._active.remove(run)
            run.progress.close()
            await settings.provider.aclose()
        await run.wrap_up(parts, refresh=refresh)
        try:
            return run.finish(started)
        finally:
            self.last_report = run.report

