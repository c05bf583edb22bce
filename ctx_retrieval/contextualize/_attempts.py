"""What a context request adds to the one send-and-retry loop (``ctx_retrieval.pacing.paced_call``, which the
reranker and the token counts go through too): the run's budget and its first-request probe before the limiter, a
slot (grown when latency holds the run back) and the lease's freshness after it, tracing around the call, and the
report's counts. The engine decides which chunks and documents go when; the pacing decides when a request is tried
again (429s and outages pause the whole run, using no attempt; other retryable errors back off per chunk, holding
no slot); a failure that stops the run stops it here, with the provider's typed error.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ctx_retrieval.contextualize._planning import Plan
from ctx_retrieval.contextualize._settings import RunSettings
from ctx_retrieval.contextualize._state import RunState, grow_if_bound
from ctx_retrieval.contextualize.tracing import TracedAnswer, TracedRequest
from ctx_retrieval.errors import ProviderUnavailableError
from ctx_retrieval.models import cost_usd, request_cost_usd
from ctx_retrieval.naming import document_name, printable
from ctx_retrieval.pacing import Hooks, RetriesSpentError, Send, Tries, paced_call
from ctx_retrieval.types import ContextRequest, ErrorDecision, ProviderResponse, TokenUsage
from ctx_retrieval.usage import RunReport

logger = logging.getLogger(__name__)


class Lost:
    """This run's hold on the document is stale (it stalled past its lease, or renewals failed): nothing was sent;
    the cache is read again and the document claimed again first."""

    __slots__ = ()


STOPPED = object()  # the run stopped (a budget, a failure, stop()) before this attempt was sent


class _ChunkHooks(Hooks):
    """One chunk's attempts, as the run counts, traces and gates them."""

    def __init__(self, settings: RunSettings, state: RunState, plan: Plan, request: ContextRequest, variable: int,
                 priority: int, i: int) -> None:
        self.s, self.state, self.plan, self.request, self.i = settings, state, plan, request, i
        self.priority = priority
        # in-flight cost matters only to a budget: not priced without one
        self.estimate = estimated_cost(settings, plan, variable) if settings.budget_usd is not None else 0.0
        self.probing = False
        self.reserved_cost = False
        self.slot = False
        self.traced: list[Any] = []

    async def before(self) -> object | None:
        s, state = self.s, self.state
        if state.stop:
            return STOPPED
        if state.probe is None:
            # The run's first request goes alone: a rejected key or an unknown model then stops the run after one
            # request instead of one per slot.
            state.probe, self.probing = asyncio.Event(), True
        else:
            await state.probe.wait()
            if state.stop:
                return STOPPED
        if s.budget_usd is not None and spent(s, state.report) + state.inflight_cost + self.estimate > s.budget_usd:
            state.stop = state.budget_hit = True
            self.finished()
            return STOPPED
        state.inflight_cost += self.estimate  # reserved now, so requests waiting together cannot overspend
        self.reserved_cost = True
        return None

    async def admit(self) -> object | None:
        state = self.state
        if state.stop:
            return STOPPED
        if state.tuner is not None:
            grow_if_bound(state)
        await state.slots.acquire(self.priority)
        self.slot = True
        if state.stop:  # stopped while this request waited for a slot (stop(), a failure, the budget)
            return STOPPED
        if state.leases is not None and not state.leases.trusted(self.plan):
            return Lost()
        state.report.requests += 1
        if state.tracers:
            self.traced = state.tracers.start(traced_request(self.s, self.plan, self.request))
        return None

    def answered(self, answer: Any, send: Send) -> None:
        if self.traced:
            self.state.tracers.end(self.traced, traced_answer(self.s, answer))
        if self.state.tuner is not None:
            self.state.tuner.answered(send.at)  # the client's own delays count in the latency it tunes by

    def failed(self, error: Exception, decision: ErrorDecision, detail: str) -> None:
        report = self.state.report
        if decision.kind == "unreachable":
            report.requests -= 1  # the connection was never made: nothing reached the server
        report.errors_by_type[decision.kind] = report.errors_by_type.get(decision.kind, 0) + 1
        if decision.kind == "rate_limited" and decision.action == "retry":
            report.rate_limited += 1
        logger.debug("chunk %s of document %s: %s -> %s%s", printable(self.plan.chunks[self.i].id),
                     document_name(self.plan.document), printable(detail, 400), decision.action,
                     f" after {decision.retry_after_s:.2f} s" if decision.retry_after_s else "")

    def retrying(self, decision: ErrorDecision) -> None:
        self.state.report.retries += 1

    def finished(self) -> None:
        state = self.state
        if self.slot:
            self.slot = False
            state.slots.release()
        if self.reserved_cost:
            self.reserved_cost = False
            state.inflight_cost -= self.estimate
        if self.probing:
            self.probing = False
            assert state.probe is not None
            state.probe.set()


async def request_context(settings: RunSettings, state: RunState, plan: Plan, request: ContextRequest, i: int, *,
                          variable: int, priority: int, tries: Tries) -> ProviderResponse | Lost | object:
    """One chunk's context request through the run's pacing, retried as its policy says: the answer, ``Lost`` (a
    stale lease: nothing sent), or ``STOPPED``. A chunk that fails for good raises ``RetriesSpentError`` (the run
    stopped first when the failure stops it: a rejected key, a server down past ``max_outage_s``)."""
    s = settings
    tokens = variable if plan.cache_warm else variable + plan.prefix_tokens

    def stops_the_run(decision: ErrorDecision, error: Exception) -> Exception:
        state.stop_with(s.provider.run_error(decision, error), error)
        assert tries.last_error is not None  # paced_call records the attempt before it asks for the run's error
        kind, detail = tries.last_error
        return RetriesSpentError(detail, kind=kind, detail=detail, provider=s.traits.name)

    hooks = _ChunkHooks(s, state, plan, request, variable, priority, i)

    async def call() -> ProviderResponse:
        try:
            return await s.provider.agenerate(request)
        except BaseException as exc:
            if hooks.traced:
                state.tracers.error(hooks.traced, exc)
            raise

    try:
        return await paced_call(call, pacer=state.pacer,
                                classify=s.provider.classify_error, run_error=stops_the_run,
                                limits_of=lambda answer: answer.limits, input_tokens=tokens,
                                output_tokens=request.max_tokens, what="a context request",
                                provider=s.traits.name, tries=tries, hooks=hooks)
    except RetriesSpentError as spent_error:
        if spent_error.kind == "unreachable":
            down = state.pacer.clock.monotonic() - (state.pacer.outage_since or state.pacer.clock.monotonic())
            if state.fatal is None:
                unavailable = ProviderUnavailableError(
                    f"the server at {s.traits.where} has refused connections for {down:.0f} s "
                    f"(RetryPolicy.max_outage_s={s.retry.max_outage_s:.0f}): start it and run again (the same "
                    "command, or retry_failed(error.report)); finished contexts are cached", provider=s.traits.name)
                logger.warning("%s", unavailable)
                state.stop_with(unavailable, spent_error.__cause__)
            state.stop = True
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


def spent(settings: RunSettings, report: RunReport) -> float:
    info = settings.traits.info
    return cost_usd(report.usage, info, cache_ttl=settings.traits.cache_ttl,
                    long_prompt_usage=report.long_prompt_usage) if info else 0.0
