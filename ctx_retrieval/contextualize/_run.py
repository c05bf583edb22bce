"""One run, one object (``Run``): its state, which documents and chunks go when, what each answer becomes, and the
report at the end.

Each document's first request writes its prompt cache before the others go; the run's first request goes alone, so
a rejected key stops the run after one request. How one request goes and what a failure leads to (retries, pauses)
is ``request_context`` below, through ``pacing.paced_call``; the cache side (stores that lose no paid answer,
leases) is ``_runcache``. Fatal errors are raised
``from`` their cause with the report and every result attached. With leases (a shared cache), a document another
worker is writing is waited for, its contexts read from the cache, never requested again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import operator
import time
from dataclasses import dataclass
from typing import Any

from ctx_retrieval.contextualize._planning import Partition, Plan, Planner, partition
from ctx_retrieval.contextualize._reuse import find_previous, refresh_order, reuse_savings, versioned_store
from ctx_retrieval.contextualize._runcache import RunCache
from ctx_retrieval.contextualize._scheduling import DOCUMENTS_PER_SLOT, server_shape
from ctx_retrieval.contextualize._settings import RunSettings
from ctx_retrieval.contextualize.leases import DocumentLeases
from ctx_retrieval.contextualize.prompts import clean_context
from ctx_retrieval.contextualize.results import ContextRun
from ctx_retrieval.contextualize.tracing import RunTracers, TracedAnswer, TracedRequest, current_tracers
from ctx_retrieval.contextualize.versions import Previous
from ctx_retrieval.errors import (
    BudgetExceededError,
    CacheError,
    ContextGenerationError,
    CtxRetrievalError,
    ProviderUnavailableError,
)
from ctx_retrieval.models import cost_usd, request_cost_usd
from ctx_retrieval.naming import document_name, printable
from ctx_retrieval.pacing import (
    ConcurrencyTuner,
    Hooks,
    Pacer,
    PrioritySlots,
    RetriesSpentError,
    Send,
    Tries,
    paced_call,
)
from ctx_retrieval.progress import make_bar
from ctx_retrieval.tokens import TokenCounter
from ctx_retrieval.types import ContextRequest, ContextResult, ErrorDecision, ProviderResponse, ResultStatus, TokenUsage
from ctx_retrieval.usage import FailedChunk, RunReport, StaleChunk

logger = logging.getLogger(__name__)

# An answer cut off at max_tokens is never stored; it is asked once more with this many times the budget.
MAX_TOKENS_RETRY_FACTOR = 4
# Failed chunks logged as warnings per run (the rest at DEBUG; the report lists every one).
LOGGED_FAILURES = 5


@dataclass(frozen=True)
class Answer:
    """An answer read once: its cleaned context, or why it is none (``(kind, message)``)."""

    context: str | None
    problem: tuple[str, str] | None = None


# Stop reasons of a finished answer (Anthropic's end_turn / stop_sequence, OpenAI's stop; None where the provider
# does not say). Any other ends the answer early or elsewhere, so its text is never stored as a context
# (https://platform.claude.com/docs/en/api/handling-stop-reasons).
COMPLETE_STOP_REASONS = frozenset({None, "end_turn", "stop_sequence", "stop"})
_STOP_PROBLEMS = {
    "refusal": ("refusal", "the model declined to write a context (stop_reason refusal)"),
    "max_tokens": ("max_tokens", "the answer was cut off at max_tokens, also with a larger budget"),
    "model_context_window_exceeded": (
        "context_window", "the answer was cut off at the model's context window (stop_reason "
        "model_context_window_exceeded): lower WindowConfig(max_document_tokens=...) so the document leaves room"),
    "content_filter": ("refusal", "the server's content filter stopped the answer (finish_reason content_filter)"),
}


def read_answer(response: ProviderResponse, max_context_tokens: int, count_tokens: TokenCounter) -> Answer:
    reason = response.stop_reason
    if reason not in COMPLETE_STOP_REASONS:
        return Answer(None, _STOP_PROBLEMS.get(reason or "", (
            "incomplete", f"the answer ended with stop_reason {reason!r}, not a finished answer")))
    context = clean_context(response.text, max_tokens=max_context_tokens, count_tokens=count_tokens)
    if not context:
        return Answer(None, ("empty_response", "the model answered with no context text"))
    return Answer(context)


async def prepare_provider(settings: RunSettings) -> list[str]:
    """Let the provider ask its server about itself (slots, context size, the model name) before planning; the
    notes it returns go into the report."""
    described = settings.traits.described
    if described is None:
        return []
    try:
        notes: list[str] = await described.aprepare()
    except BaseException:
        await settings.provider.aclose()
        raise
    return notes


# -- a context request -------------------------------------------------------------------------------------------
# What it adds to the one send-and-retry loop (``ctx_retrieval.pacing.paced_call``, which the reranker and the token
# counts go through too): the run's budget and its first-request probe before the limiter, a slot (grown when latency
# holds the run back) and the lease's freshness after it, tracing around the call, and the report's counts. The run
# decides which chunks and documents go when; the pacing decides when a request is tried again (429s and outages
# pause the whole run, using no attempt; other retryable errors back off per chunk, holding no slot); a failure that
# stops the run stops it here, with the provider's typed error.


class Lost:
    """This run's hold on the document is stale (it stalled past its lease, or renewals failed): nothing was sent;
    the cache is read again and the document claimed again first."""

    __slots__ = ()


STOPPED = object()  # the run stopped (a budget, a failure, stop()) before this attempt was sent


class _ChunkHooks(Hooks):
    """One chunk's attempts, as the run counts, traces and gates them."""

    def __init__(self, run: Run, plan: Plan, request: ContextRequest, variable: int, i: int) -> None:
        self.s, self.run, self.plan, self.request, self.i = run.settings, run, plan, request, i
        # in-flight cost matters only to a budget: not priced without one
        self.estimate = estimated_cost(self.s, plan, variable) if self.s.budget_usd is not None else 0.0
        self.probing = False
        self.reserved_cost = False
        self.traced: list[Any] = []

    async def before(self) -> object | None:
        s, run = self.s, self.run
        if run.stop:
            return STOPPED
        if run.probe is None:
            # The run's first request goes alone: a rejected key or an unknown model then stops the run after one
            # request instead of one per slot.
            run.probe, self.probing = asyncio.Event(), True
        else:
            await run.probe.wait()
            if run.stop:
                return STOPPED
        if s.budget_usd is not None and run.spent_usd() + run.inflight_cost + self.estimate > s.budget_usd:
            run.stop = run.budget_hit = True
            self.finished()
            return STOPPED
        run.inflight_cost += self.estimate  # reserved now, so requests waiting together cannot overspend
        self.reserved_cost = True
        return None

    async def admit(self) -> object | None:
        run = self.run
        if run.stop:  # stopped while this request waited for the limiter or a slot (stop(), a failure, the budget)
            return STOPPED
        run.follow_slots()
        if run.leases is not None and not run.leases.trusted(self.plan):
            return Lost()
        run.report.requests += 1
        if run.tracers:
            self.traced = run.tracers.start(traced_request(self.s, self.plan, self.request))
        return None

    def answered(self, answer: Any, send: Send) -> None:
        if self.traced:
            self.run.tracers.end(self.traced, traced_answer(self.s, answer))

    def failed(self, error: Exception, decision: ErrorDecision, detail: str) -> None:
        report = self.run.report
        if decision.kind == "unreachable":
            report.requests -= 1  # the connection was never made: nothing reached the server
        report.errors_by_type[decision.kind] = report.errors_by_type.get(decision.kind, 0) + 1
        if decision.kind == "rate_limited" and decision.action == "retry":
            report.rate_limited += 1
        logger.debug("chunk %s of document %s: %s -> %s%s", printable(self.plan.chunks[self.i].id),
                     document_name(self.plan.document), printable(detail, 400), decision.action,
                     f" after {decision.retry_after_s:.2f} s" if decision.retry_after_s else "")

    def retrying(self, decision: ErrorDecision) -> None:
        self.run.report.retries += 1

    def finished(self) -> None:
        run = self.run
        if self.reserved_cost:
            self.reserved_cost = False
            run.inflight_cost -= self.estimate
        if self.probing:
            self.probing = False
            assert run.probe is not None
            run.probe.set()


async def request_context(run: Run, plan: Plan, request: ContextRequest, i: int, *, variable: int, priority: int,
                          tries: Tries) -> ProviderResponse | Lost | object:
    """One chunk's context request through the run's pacing, retried as its policy says: the answer, ``Lost`` (a
    stale lease: nothing sent), or ``STOPPED``. A chunk that fails for good raises ``RetriesSpentError`` (the run
    stopped first when the failure stops it: a rejected key, a server down past ``max_outage_s``)."""
    s = run.settings
    tokens = variable if plan.cache_warm else variable + plan.prefix_tokens

    def stops_the_run(decision: ErrorDecision, error: Exception) -> Exception:
        run.stop_with(s.provider.run_error(decision, error), error)
        assert tries.last_error is not None  # paced_call records the attempt before it asks for the run's error
        kind, detail = tries.last_error
        return RetriesSpentError(detail, kind=kind, detail=detail, provider=s.traits.name)

    hooks = _ChunkHooks(run, plan, request, variable, i)

    async def traced_call() -> ProviderResponse:
        try:
            return await s.provider.agenerate(request)
        except BaseException as exc:
            if hooks.traced:
                run.tracers.error(hooks.traced, exc)
            raise

    try:
        return await paced_call(traced_call if run.tracers else functools.partial(s.provider.agenerate, request),
                                pacer=run.pacer, classify=s.provider.classify_error, run_error=stops_the_run,
                                limits_of=operator.attrgetter("limits"), input_tokens=tokens,
                                output_tokens=request.max_tokens, what="a context request",
                                provider=s.traits.name, tries=tries, hooks=hooks, priority=priority)
    except RetriesSpentError as spent_error:
        if spent_error.kind == "unreachable":
            down = run.clock.monotonic() - (run.pacer.outage_since or run.clock.monotonic())
            if run.fatal is None:
                unavailable = ProviderUnavailableError(
                    f"the server at {s.traits.where} has refused connections for {down:.0f} s "
                    f"(RetryPolicy.max_outage_s={s.retry.max_outage_s:.0f}): start it and run again (the same "
                    "command, or retry_failed(error.report)); finished contexts are cached", provider=s.traits.name)
                logger.warning("%s", unavailable)
                run.stop_with(unavailable, spent_error.__cause__)
            run.stop = True
        raise


def traced_request(s: RunSettings, plan: Plan, request: ContextRequest, *, batch: bool = False) -> TracedRequest:
    return TracedRequest(document_id=plan.document.id, chunk_id=request.chunk_id, provider=s.traits.name,
                         model=s.traits.model, prompt_version=plan.prompt.version, chunk_block=request.chunk_block,
                         document_chars=len(request.document_prefix) + len(request.document_rest),
                         max_tokens=request.max_tokens, batch=batch)


def traced_answer(s: RunSettings, response: ProviderResponse, *, batch: bool = False) -> TracedAnswer:
    info = s.traits.info
    cost = request_cost_usd(response.usage, info, cache_ttl=s.traits.cache_ttl, batch=batch) if info else None
    return TracedAnswer(response.text, response.usage, response.stop_reason, s.traits.model, cost)


def estimated_cost(settings: RunSettings, plan: Plan, variable_tokens: int) -> float:
    info = settings.traits.info
    if info is None:
        return 0.0
    prefix = TokenUsage(cache_read_input_tokens=plan.prefix_tokens) if plan.cache_warm else TokenUsage(
        cache_creation_input_tokens=plan.prefix_tokens)
    usage = prefix + TokenUsage(input_tokens=variable_tokens, output_tokens=settings.request_max_tokens)
    return request_cost_usd(usage, info, cache_ttl=settings.traits.cache_ttl)


class Run:
    """One run, and all its state: the settings it read when it started (frozen), its planner and plans, its report
    and results, its pacing (limiter, clock, retry policy, streaks), request and document slots, progress bar, leases
    and tracers, and what stopped it; its requests, what each answer becomes, and the report at the end. ``warned``
    carries the models already warned about (once per generator, not per run)."""

    def __init__(self, settings: RunSettings, planner: Planner, plans: list[Plan], *, pacer: Pacer, progress: bool,
                 notes: list[str], fatal: CtxRetrievalError | None, leases: DocumentLeases | None,
                 warned: set[str]) -> None:
        self.settings, self.planner, self.plans, self.warned = settings, planner, plans, warned
        versions = sorted({p.prompt.version for p in plans if p.chunks}) or [settings.prompt.version]
        self.report = report = RunReport(
            provider=settings.traits.name, model=settings.traits.model, prompt_version=", ".join(versions),
            documents=len(plans), chunks=sum(len(p.chunks) for p in plans),
            document_tokens=sum(p.tokens for p in plans if p.chunks), windowed_documents=sum(p.windowed for p in plans))
        for note in notes:  # the provider's notes on its server
            logger.warning("%s", note)
            report.warnings.append(note)
        self.results: list[ContextResult | None] = [None] * report.chunks
        self.previous: dict[int, Previous] = {}  # earlier contexts served or kept (``versions``)
        self.pacer = pacer  # the limiter, clock, retry policy, random source and run-wide streaks of every request
        self.clock = pacer.clock  # every time decision of the run (tests inject one)
        # Slots shaped by the server; the tuner (``pacing.ConcurrencyTuner``) grows them while latency, not the
        # rate limits, holds the run back (None: fixed); documents in flight follow the slots
        shape = server_shape(settings.traits, settings.max_concurrency, settings.max_documents_in_flight)
        self.slots = pacer.slots = PrioritySlots(shape.concurrency)  # the pacing holds them: paced_call(priority=)
        self.doc_slots = asyncio.Semaphore(shape.documents)
        self.documents_capacity = shape.documents
        self.documents_per_slot = 0.0 if settings.max_documents_in_flight else float(DOCUMENTS_PER_SLOT)
        self.per_slot = shape.per_slot  # the server caches one prefix per slot: a document's chunks one at a time
        pacer.tuner = ConcurrencyTuner(self.slots, self.clock, shape.grow_to) if shape.grow_to is not None else None
        report.peak_concurrency = shape.concurrency
        self.progress: Any = make_bar(report.chunks, "contextualizing", enabled=progress)
        self.leases = leases  # other workers share the cache: documents are claimed before writing
        self.tracers = RunTracers(current_tracers(settings.tracers))  # who sees each request (``tracing``)
        self.probe: asyncio.Event | None = None  # set when the run's first request (sent alone) has its answer
        self.inflight_cost = 0.0  # the estimated cost of the requests in flight (a budget counts it as spent)
        self.failures_logged = 0
        self.uncacheable: list[Plan] = []  # documents prompt caching did nothing for, said once at the end
        # What stopped it: the first fatal error (raised at the end, from its cause), the budget, stop() (Ctrl-C in
        # the CLI: requests in flight finish, the rest are not attempted), stop(at_once=True) (requests in flight
        # were cancelled too: the run's task and loop, which a signal handler cancels)
        self.stop = False
        self.fatal: CtxRetrievalError | None = None
        self.fatal_cause: BaseException | None = None
        self.budget_hit = self.interrupted = self.abandoned = False
        self.task: Any = None  # asyncio.Task (its uncancel() is 3.11+)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.cache = RunCache(self)
        if fatal is not None:
            self.stop_with(fatal, fatal.__cause__)

    def stop_with(self, error: CtxRetrievalError, cause: BaseException | None = None) -> None:
        """Stop the run; the first fatal error is the one raised at the end (``from`` its cause)."""
        if self.fatal is None:
            self.fatal, self.fatal_cause = error, cause
        self.stop = True

    def spent_usd(self) -> float:
        """What the answers so far cost (0 where the model's prices are unknown)."""
        info = self.settings.traits.info
        return cost_usd(self.report.usage, info, cache_ttl=self.settings.traits.cache_ttl,
                        long_prompt_usage=self.report.long_prompt_usage) if info else 0.0

    def follow_slots(self) -> None:
        """Documents in flight follow the request slots, which the tuner grows (``Pacer.take_slot``)."""
        capacity = self.slots.capacity
        if capacity <= self.report.peak_concurrency:
            return
        self.report.peak_concurrency = capacity
        while self.documents_capacity < int(capacity * self.documents_per_slot):
            self.documents_capacity += 1
            self.doc_slots.release()  # one more document may start

    def abandon(self) -> None:
        """After the run was quit at once: every chunk without a result (its request abandoned in flight, or never
        sent) is not attempted."""
        for plan in self.plans:
            for i in range(len(plan.chunks)):
                if self.results[plan.offset + i] is None:
                    self.set(plan, i, None, "not_attempted", TokenUsage())

    def set(self, plan: Plan, i: int, context: str | None, status: ResultStatus, usage: TokenUsage, *,
            error: str | None = None, error_kind: str | None = None) -> None:
        s = self.settings
        if status == "generated" and plan.offset + i in self.previous:
            self.report.refreshed += 1  # a refresh wrote the context a stale one stood in for
        self.results[plan.offset + i] = ContextResult(
            document_id=plan.document.id, chunk_id=plan.chunks[i].id, position=plan.chunks[i].position,
            context=context, status=status, provider=s.traits.name, model=s.traits.model,
            prompt_version=plan.prompt.version, usage=usage, windowed=plan.windowed, error=error, error_kind=error_kind)
        if status != "not_attempted":  # the bar counts chunks done: a stopped run's bar ends where it stopped
            self.progress.update(1)

    def reuse(self, plan: Plan, i: int, previous: Previous, *, error: str | None = None,
              error_kind: str | None = None) -> None:
        """Serve an earlier context of the chunk (stale), with the provenance it was written with."""
        entry = previous.entry
        self.results[plan.offset + i] = ContextResult(
            document_id=plan.document.id, chunk_id=plan.chunks[i].id, position=plan.chunks[i].position,
            context=previous.context, status="reused", provider=entry.provider, model=entry.model,
            prompt_version=entry.prompt_version, windowed=plan.windowed, error=error, error_kind=error_kind,
            written_from=(entry.document_digest or "")[:16] or None)

    def settle(self, parts: Partition) -> None:
        """Results for the chunks that need no request: empty ones, those found in the context cache, and those
        the reuse policy serves an earlier context."""
        for plan, i in parts.empty:
            self.set(plan, i, None, "empty", TokenUsage())
        for plan, i, context in parts.cached:
            self.set(plan, i, context, "cached", TokenUsage())
        for plan, i, previous in parts.reused:
            self.reuse(plan, i, previous)
            self.progress.update(1)

    def keep_previous(self) -> int:
        """After a refresh: a chunk whose new context was not written (failed, or the run stopped first) keeps its
        stale one, with why; how many kept theirs."""
        kept = 0
        for plan in self.plans:
            for i in range(len(plan.chunks)):
                previous = self.previous.get(plan.offset + i)
                result = self.results[plan.offset + i]
                if previous is None or result is None or result.context is not None:
                    continue
                kept += 1
                self.reuse(plan, i, previous, error=result.error or "not refreshed: the run stopped first",
                           error_kind=result.error_kind or "not_attempted")
        return kept

    def answer_followers(self, parts: Partition) -> None:
        """A chunk repeated in the run takes its first copy's answer (asked once)."""
        for plan, i, owner_plan, owner_i in parts.followers:
            owner = self.results[owner_plan.offset + owner_i]
            assert owner is not None
            self.set(plan, i, owner.context, "cached" if owner.status == "generated" else owner.status,
                     TokenUsage(), error=owner.error, error_kind=owner.error_kind)

    def fail(self, plan: Plan, i: int, kind: str, message: str, usage: TokenUsage) -> None:
        # The first few failures are logged as warnings; the report lists them all (a thousand failed chunks
        # would otherwise bury the terminal and the progress bar).
        self.failures_logged += 1
        level = logging.WARNING if self.failures_logged <= LOGGED_FAILURES else logging.DEBUG
        logger.log(level, "no context for chunk %s of document %s: %s: %s%s", printable(plan.chunks[i].id),
                   document_name(plan.document), kind, printable(message, 400),
                   " (later failures: see the run's report)" if self.failures_logged == LOGGED_FAILURES else "")
        self.set(plan, i, None, "failed", usage, error=message, error_kind=kind)  # the kind is its own field
        if self.settings.on_error == "raise":
            self.stop = True

    async def run_documents(self, work: list[tuple[Plan, list[int]]]) -> None:
        leases = self.leases
        async with leases.kept_alive() if leases is not None else contextlib.nullcontext():
            await self._run_all(work)

    async def _run_all(self, work: list[tuple[Plan, list[int]]]) -> None:
        tasks = [asyncio.ensure_future(self.run_document(plan, pending)) for plan, pending in work]
        if not tasks:
            return
        try:
            done, pending_tasks = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        except asyncio.CancelledError:  # the run was cancelled: its documents end with it, none is left running
            self.stop = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        for task in done:
            error = None if task.cancelled() else task.exception()
            if error is not None:  # a bug, not a provider error: stop everything and surface it
                for other in pending_tasks:
                    other.cancel()
                await asyncio.gather(*pending_tasks, return_exceptions=True)
                raise error

    async def run_document(self, plan: Plan, pending: list[int]) -> None:
        """Write one document's missing contexts; a cache that stays unreachable stops the run (typed, reported)."""
        try:
            await self._run_document(plan, pending)
        except CacheError as exc:
            self.stop_with(exc, exc.__cause__)
            for i in pending:
                if self.results[plan.offset + i] is None:
                    self.set(plan, i, None, "not_attempted", TokenUsage())

    async def _run_document(self, plan: Plan, pending: list[int]) -> None:
        leases, cache = self.leases, self.cache
        if leases is None:
            async with self.doc_slots:
                await self._write_document(plan, pending)
            return
        async with self.doc_slots:  # claimed when about to write it, not when queued
            if await cache.claim(leases, plan):
                try:
                    await self._write_document(plan, await cache.still_missing(plan, pending))
                finally:
                    cache.release(leases, plan)
                return
        # Another worker is writing it: wait for its contexts, holding no slot; write what its lease leaves.
        pending = await cache.wait_for_other_worker(leases, plan, pending)
        if pending:
            try:
                async with self.doc_slots:
                    await self._write_document(plan, pending)
            finally:
                cache.release(leases, plan)

    async def _write_document(self, plan: Plan, pending: list[int]) -> None:
        """Write a document's missing contexts (its caller holds a document slot)."""
        if len(pending) > 1:
            await self.count_prefixes([plan])
        rest = list(pending)
        if self.per_slot:  # one slot per document: its chunks one after another, the prefix stays warm
            for i in rest:
                await self.generate(plan, i, priority=0)
            return
        if len(rest) > 1 and self.planner.cacheable(plan):
            # One request first: it writes the document's prompt cache, which the others then read.
            while rest and not self.stop:
                if await self.generate(plan, rest.pop(0), priority=1):
                    break
        await asyncio.gather(*(self.generate(plan, i, priority=0) for i in rest))

    async def count_prefixes(self, plans: list[Plan]) -> None:
        """Exact counts for whole documents whose estimated size is near the model's minimum cacheable length,
        just before their warm-up decision (in the run, so other documents' requests go on meanwhile)."""
        planner = self.planner
        counter = planner.token_counter()
        if counter is None:
            return
        near = [p for p in plans if not p.windowed and (
            self.settings.exact_token_counts or planner.near_minimum(p.prefix_tokens))]
        try:
            await planner.count_texts({(counter.model, p.digest): p.document.text for p in near}, self.pacer)
        except CtxRetrievalError as exc:
            self.stop_with(exc, exc.__cause__)
            return
        for plan in near:
            exact = planner.exact_counts.get((counter.model, plan.digest))
            if exact is not None:
                plan.prefix_tokens = planner.whole_document_prefix(plan, exact)

    async def generate(self, plan: Plan, i: int, *, priority: int) -> bool:
        """Request one chunk's context with retries; True when it got one."""
        s = self.settings
        key = plan.keys[i]
        assert key is not None
        request = self.planner.request(plan, i)
        variable = s.counter(request.document_rest) + s.counter(request.chunk_block)
        tries = Tries()
        while True:
            if self.stop:
                # A chunk tried before the run stopped failed (with why); only an untried one was not attempted.
                if tries.last_error is None:
                    self.set(plan, i, None, "not_attempted", TokenUsage())
                else:
                    kind, detail = tries.last_error
                    self.set(plan, i, None, "failed", TokenUsage(), error=detail, error_kind=kind)
                return False
            try:
                outcome = await request_context(self, plan, request, i, variable=variable, priority=priority,
                                                tries=tries)
            except RetriesSpentError as failed:
                self.fail(plan, i, failed.kind, failed.detail, TokenUsage())
                return False
            if outcome is STOPPED:
                continue  # the run stopped (budget, or another chunk's failure) while this one waited
            if isinstance(outcome, Lost):  # a stale hold: the context may be stored, or another worker writes it
                assert self.leases is not None
                if await self.cache.wait_for_other_worker(self.leases, plan, [i], count=False):
                    continue  # its lease ended without this chunk's context: ours again, claimed
                result = self.results[plan.offset + i]
                return result is not None and result.context is not None
            assert isinstance(outcome, ProviderResponse)
            response = outcome
            self.count_usage(response.usage)
            if response.cache_reported:
                self.note_cache_use(plan, response.usage)
            else:
                self.report.cache_reads_reported = False
            if response.stop_reason == "max_tokens" and request.max_tokens == s.request_max_tokens:
                # Cut off (by thinking, or a long preamble): never stored; asked once more with room.
                self.report.retries += 1
                request = dataclasses.replace(request, max_tokens=request.max_tokens * MAX_TOKENS_RETRY_FACTOR)
                continue
            answer = read_answer(response, s.max_context_tokens, s.counter)
            if answer.problem is not None:
                self.fail(plan, i, *answer.problem, response.usage)
                return False
            await self.cache.store(key, response, plan, i)
            self.report.generated += 1
            self.set(plan, i, answer.context, "generated", response.usage)
            return True

    # -- before and after the requests -----------------------------------------------------------------

    async def sort(self, plans: list[Plan], *, refresh: bool) -> Partition:
        """The run's chunks sorted before any request: cached, reused (``versions``), empty, or to request (a
        refresh: most urgent first); the ones needing no request get their results, and the document versions are
        recorded."""
        planner = self.planner
        hits = await self.cache.call("the run", lambda: planner.lookup(plans))
        self.previous = await self.cache.call("the run", lambda: find_previous(self.settings, plans, hits,
                                                                                refreshing=refresh))
        parts = partition(plans, hits, None if refresh else self.previous)
        if refresh:
            parts.work = refresh_order(parts.work, self.previous)
        self.report.reuse_saved_usd = reuse_savings(planner, parts)
        self.settle(parts)
        await self.record_versions(plans)
        return parts

    async def wrap_up(self, parts: Partition, *, refresh: bool) -> None:
        """After the requests: repeats take their first copy's answer, a refresh's unwritten chunks keep their stale
        contexts, the versions' stale counts are brought up to date, what the cache did not take is stored."""
        self.answer_followers(parts)
        if refresh and self.previous:
            kept = self.keep_previous()
            if kept:
                message = (f"{kept} stale contexts were not rewritten (failed, or the run stopped first): they keep "
                           "their earlier contexts; refresh again to finish")
                logger.warning("%s", message)
                self.report.warnings.append(message)
            await self.record_versions(self.plans)
        await self.cache.finish()

    async def record_versions(self, plans: list[Plan]) -> None:
        """Record each document version the run saw, with how many of its chunks serve a stale context now, in the
        context cache (a cache without versions, or a read-only one, records nothing)."""
        store = versioned_store(self.settings)
        if store is None or store.read_only:
            return
        results = self.results
        previous = self.previous

        def stale(plan: Plan) -> int:  # served a reused context, or (a refresh under way) still to be rewritten
            return sum(1 for n in range(plan.offset, plan.offset + len(plan.chunks))
                       if ((r := results[n]) is not None and r.status == "reused") or (r is None and n in previous))

        versions = [plan.version(stale(plan)) for plan in plans if plan.chunks]
        await self.cache.call("the run", lambda: store.put_versions(versions))

    def note_cache_use(self, plan: Plan, usage: TokenUsage) -> None:
        """Mark the document's cache warm once a request wrote or read it; note when caching did nothing for a
        document whose provider caches explicitly (below the model's minimum cacheable length): ``finish`` says so
        once for the run, with the count."""
        traits = self.settings.traits
        if usage.cache_creation_input_tokens or usage.cache_read_input_tokens:
            plan.cache_warm = True
        if plan.cache_checked or not traits.caches_prompts or not traits.reports_cache_usage:
            return
        if traits.prefix_cache != "explicit":
            return  # automatic prefix caching (local servers, OpenAI): there is no minimum length to warn about
        plan.cache_checked = True
        if plan.cache_warm:
            return
        self.report.uncacheable_documents.append(plan.document.id)
        self.uncacheable.append(plan)

    def warn_uncacheable(self) -> None:
        """One warning for the run (and once per model for the generator) naming how many documents prompt
        caching did nothing for (it was one a document's first, in every log)."""
        traits, plans = self.settings.traits, sorted(self.uncacheable, key=lambda p: p.offset)  # in input order
        report = self.report
        report.uncacheable_documents[:] = [p.document.id for p in plans]  # the same documents, answered in any order
        if not plans or traits.model in self.warned:
            return
        self.warned.add(traits.model)
        minimum = self.planner.min_cacheable()
        stated = f"{minimum:,} tokens" if minimum is not None else "not documented"
        windowed = sum(p.windowed for p in plans)
        part = (f", {windowed} by its window's fixed part (the first {self.settings.window.num_start_chunks} chunks)"
                if windowed else "")
        message = (
            f"prompt caching did nothing for {len(plans)} of {len(self.plans)} documents (e.g. "
            f"{document_name(plans[0].document)}): each is below {traits.model}'s minimum cacheable length ({stated})"
            f"{part}, so each of their chunks pays the whole document or window (report.uncacheable_documents lists "
            "them)")
        logger.warning("%s", message)
        report.warnings.append(message)

    def count_usage(self, usage: TokenUsage, *, batch: bool = False) -> None:
        """Add one answer's usage to the report, noting whether its prompt fell into the dearer price tier."""
        report, info = self.report, self.settings.traits.info
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

    def finish(self, started: float) -> ContextRun:
        """The run's results in input order and its report; raises the run's error (with the report) if it had one."""
        settings = self.settings
        report = self.report
        self.warn_uncacheable()
        results: list[ContextResult] = []
        for plan in self.plans:
            nonempty = sum(key is not None for key in plan.keys)
            for i, chunk in enumerate(plan.chunks):
                result = self.results[plan.offset + i]
                assert result is not None, "every chunk gets a result"
                results.append(result)
                if nonempty and (result.usage.output_tokens or result.usage.prompt_tokens):
                    report.paid_document_tokens += plan.tokens / nonempty
                if result.status == "cached":
                    report.cached += 1
                elif result.status == "reused":
                    previous = self.previous[plan.offset + i]
                    report.stale.append(StaleChunk(plan.document, chunk, plan.chunks, result.written_from or "",
                                                   result.model, result.prompt_version, previous.distance,
                                                   not previous.same_settings))
                elif result.status == "empty":
                    report.empty += 1
                elif result.status == "failed":
                    report.failures.append(FailedChunk(plan.document, chunk, plan.chunks, result.error_kind or "error",
                                                       result.error or ""))
                elif result.status == "not_attempted":
                    report.skipped.append(FailedChunk(plan.document, chunk, plan.chunks, "not_attempted",
                                                      "the run stopped before this chunk"))
        info = settings.traits.info
        report.cost_usd = (self.spent_usd() + cost_usd(report.batch_usage, info, cache_ttl=settings.traits.cache_ttl,
                                                       batch=True, long_prompt_usage=report.long_prompt_batch_usage)
                           if info else None)
        report.wall_time_s = time.perf_counter() - started
        report.shared_documents = self.leases.waited if self.leases is not None else 0
        report.lease_rechecks = self.leases.rechecked if self.leases is not None else 0
        run = ContextRun(results, report)
        if self.fatal is not None:
            self.fatal.report, self.fatal.run = report, run
            raise self.fatal from self.fatal_cause
        error: ContextGenerationError | None = None
        if self.budget_hit:
            budget = settings.budget_usd or 0.0
            error = BudgetExceededError(
                f"stopped before exceeding budget_usd=${budget:.4f} (spent ${report.cost_usd or 0:.4f}); "
                f"{len(report.to_retry)} chunks have no context: raise the budget and run again (the same command, or "
                "retry_failed(error.report)); finished contexts are cached", report=report, budget_usd=budget,
                spent_usd=report.cost_usd or 0.0)
        elif self.interrupted and report.to_retry:
            error = ContextGenerationError(
                f"the run was stopped (ContextGenerator.stop(), Ctrl-C) with {report.not_attempted} chunks not "
                f"attempted and {report.failed} failed; what it finished is cached: run it again, or call "
                "retry_failed(error.report), to do the rest", report=report)
        elif report.to_retry and settings.on_error == "raise":
            first = report.failures[0] if report.failures else report.to_retry[0]
            error = ContextGenerationError(
                f"{report.failed} chunks failed and {report.not_attempted} were not attempted (first: chunk "
                f"{first.chunk.id!r} of document {first.document.id!r}: {first.message}); finished contexts are "
                "cached: run again (the same command, or retry_failed(error.report)), or finish runs past failures "
                "(on_error='skip', --on-error skip)",
                report=report)
        if error is not None:
            error.run = run
            raise error
        return run
