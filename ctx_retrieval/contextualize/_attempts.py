"""One context request's life: the budget check, the rate limit, a slot (grown when latency holds the run back), the
lease's freshness, the call and its classification; and what a failed attempt leads to. The engine decides which
chunks and documents go when; this module decides when a context request is tried again, on the pacing every
caller of a provider shares (``ctx_retrieval.pacing``: the limiter, run-wide pauses after 429s and 529s, backoff;
the reranker's requests go through its ``paced_call``).

Retries: 429s and outages pause the whole run through the limiter (waiting uses no attempt); other retryable
errors back off per chunk, holding no slot; ``fail_run`` decisions stop the run with the provider's typed error.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from ctx_retrieval.contextualize._planning import Plan
from ctx_retrieval.contextualize._settings import RunSettings
from ctx_retrieval.contextualize._state import RunState, grow_if_bound
from ctx_retrieval.contextualize.tracing import TracedAnswer, TracedRequest
from ctx_retrieval.errors import ProviderUnavailableError
from ctx_retrieval.models import cost_usd, request_cost_usd
from ctx_retrieval.naming import document_name, printable
from ctx_retrieval.pacing import pace_after
from ctx_retrieval.providers.base import ContextRequest, ErrorDecision, ProviderResponse
from ctx_retrieval.providers.generic import server_message
from ctx_retrieval.types import TokenUsage
from ctx_retrieval.usage import RunReport

__all__ = ["Answered", "Attempts", "Failed", "Lost", "Tries", "estimated_cost", "pause_for", "spent"]

logger = logging.getLogger(__name__)

# A run-wide pause at least this long is logged as a warning (the progress bar stands still meanwhile).
PAUSE_LOGGED_S = 5.0


class Answered:
    """An attempt the provider answered (the answer may still be unusable: refusal, cut off, empty)."""

    __slots__ = ("response",)

    def __init__(self, response: ProviderResponse) -> None:
        self.response = response


class Lost:
    """This run's hold on the document is stale (it stalled past its lease, or renewals failed): nothing was sent;
    the cache is read again and the document claimed again first."""

    __slots__ = ()


class Failed:
    """An attempt that raised, with what the provider's classification says to do about it."""

    __slots__ = ("decision", "error")

    def __init__(self, error: Exception, decision: ErrorDecision) -> None:
        self.error, self.decision = error, decision


@dataclass
class Tries:
    """One chunk's attempts so far."""

    failures: int = 0
    rate_limit_wait: float = 0.0
    last_error: tuple[str, str] | None = None  # the latest failed attempt (kind, detail), if any


def traced_request(s: RunSettings, plan: Plan, request: ContextRequest, *, batch: bool = False) -> TracedRequest:
    return TracedRequest(document_id=plan.document.id, chunk_id=request.chunk_id, provider=s.traits.name,
                         model=s.traits.model, prompt_version=plan.prompt.version, chunk_block=request.chunk_block,
                         document_chars=len(request.document_prefix) + len(request.document_rest),
                         max_tokens=request.max_tokens, batch=batch)


def traced_answer(s: RunSettings, response: ProviderResponse, *, batch: bool = False) -> TracedAnswer:
    info = s.traits.info
    cost = request_cost_usd(response.usage, info, cache_ttl=s.traits.cache_ttl, batch=batch) if info else None
    return TracedAnswer(response.text, response.usage, response.stop_reason, s.traits.model, cost)


class Attempts:
    """Sends one chunk's requests for a run (``settings``, ``state``), by the run's clock."""

    def __init__(self, settings: RunSettings, state: RunState) -> None:
        self.settings, self.state = settings, state
        self.clock = state.limiter.clock

    async def send(self, plan: Plan, request: ContextRequest, variable: int,
                   priority: int) -> Answered | Failed | Lost | None:
        """One request: budget check, rate limit, a slot, the call. None when the run stopped first."""
        s, state = self.settings, self.state
        estimate = estimated_cost(s, plan, variable)
        if s.budget_usd is not None and spent(s, state.report) + state.inflight_cost + estimate > s.budget_usd:
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
            grow_if_bound(state)
            await state.slots.acquire(priority)
            try:
                if state.stop:  # stopped while this request waited for a slot (stop(), a failure, the budget)
                    return None
                if state.leases is not None and not state.leases.trusted(plan):
                    return Lost()
                state.report.requests += 1
                send, reserved = state.limiter.sent(tokens, request.max_tokens), False
                traced = state.tracers.start(traced_request(s, plan, request)) if state.tracers else []
                try:
                    response = await s.provider.agenerate(request)
                except BaseException as exc:
                    state.tracers.error(traced, exc)
                    raise
                state.tracers.end(traced, traced_answer(s, response))
                if state.outage_since is not None:
                    logger.warning("the server answers again after %.0f s; the run goes on",
                                   state.limiter.clock.monotonic() - state.outage_since)
                state.overload_streak = state.outage_streak = 0
                state.outage_since = None
                if response.limits is not None:
                    state.limiter.observe(response.limits, send)
                if state.tuner is not None:
                    state.tuner.answered(send.at)  # the client's own delays count in the latency it tunes by
                return Answered(response)
            except Exception as exc:  # classified by type; anything unknown propagates
                decision = s.provider.classify_error(exc)
                if decision is None:
                    raise
                if decision.kind == "unreachable":
                    state.report.requests -= 1  # the connection was never made: nothing reached the server
                rate_limited, decision = pause_for(s, state, decision)
                return Failed(exc, decision)
            finally:
                state.slots.release()
        finally:
            state.inflight_cost -= estimate
            if reserved:  # passed the limiter but never sent (the run stopped, or cancelled)
                state.limiter.unsent(tokens, request.max_tokens)
            if probe:
                state.limiter.answered(rate_limited=rate_limited)

    async def after(self, outcome: Failed, tries: Tries, plan: Plan, i: int) -> tuple[str, str] | None:
        """What a failed attempt leads to: None to try again (after any wait), else ``(kind, detail)``: the chunk
        failed (the engine records it)."""
        s, state, report = self.settings, self.state, self.state.report
        error, decision = outcome.error, outcome.decision
        report.errors_by_type[decision.kind] = report.errors_by_type.get(decision.kind, 0) + 1
        said = server_message(error)  # the server's own reason, once ("exceeds the context size of 8192")
        detail = (f"{type(error).__name__}" + (f" (HTTP {decision.status_code})" if decision.status_code else "")
                  + (f": {said}" if said else ""))
        tries.last_error = (decision.kind, detail)
        logger.debug("chunk %s of document %s: %s -> %s%s", printable(plan.chunks[i].id), document_name(plan.document),
                     printable(detail, 400),
                     decision.action, f" after {decision.retry_after_s:.2f} s" if decision.retry_after_s else "")
        if decision.action == "fail_run":
            state.stop_with(s.provider.run_error(decision, error), error)
        elif decision.action == "retry" and decision.kind == "unreachable":
            now = self.clock.monotonic()
            down = now - (state.outage_since or now)
            if down <= s.retry.max_outage_s and not state.stop:
                report.retries += 1
                return None  # the run is paused, one probe at a time: waiting uses no attempt
            if state.fatal is None:
                unavailable = ProviderUnavailableError(
                    f"the server at {s.traits.where} has refused connections for {down:.0f} s "
                    f"(RetryPolicy.max_outage_s={s.retry.max_outage_s:.0f}): start it and run again (the same "
                    "command, or retry_failed(error.report)); finished contexts are cached", provider=s.traits.name)
                logger.warning("%s", unavailable)
                state.stop_with(unavailable, error)
            state.stop = True
            detail += f", unreachable for {down:.0f} s"
        elif decision.action == "retry" and decision.kind == "rate_limited":
            report.rate_limited += 1
            delay = decision.retry_after_s or 0.0  # set by attempt(), which paused the run for it
            if tries.rate_limit_wait + delay <= s.retry.max_rate_limit_wait_s:
                tries.rate_limit_wait += delay
                report.retries += 1
                return None  # the run is paused already; the next acquire waits it out, holding no slot
            detail += (f", the server asked for {delay:.0f} s more after {tries.rate_limit_wait:.0f} s of waiting, "
                       f"over RetryPolicy.max_rate_limit_wait_s ({s.retry.max_rate_limit_wait_s:.0f} s)")
        elif decision.action == "retry":
            tries.failures += 1
            if tries.failures < s.retry.max_attempts:
                report.retries += 1
                delay = max(s.retry.backoff(tries.failures, state.rng), decision.retry_after_s or 0.0)
                await self.clock.sleep(delay)  # holding no slot: the rest of the run goes on
                return None
            detail += f", failed {tries.failures} attempts (RetryPolicy.max_attempts)"
        return decision.kind, detail


def pause_for(settings: RunSettings, state: RunState, decision: ErrorDecision) -> tuple[bool, ErrorDecision]:
    """Pause the whole run before the probe's answer releases the others, where the error says so: a 429; a
    529 storm (overloaded answers with no success between them: paced like a 429 without retry-after; a lone
    529 is retried by its chunk alone); refused connections (the server is down: one probe at a time finds
    out when it is back, instead of every chunk burning its attempts). True when the run was paused."""
    if decision.kind == "rate_limited":
        paced = pace_after(decision, state.limiter, settings.retry, state.report.rate_limited, state.rng)
        if (paced.retry_after_s or 0.0) >= PAUSE_LOGGED_S:  # a pause a person would notice: say why the bar stops
            logger.warning("rate limited (HTTP 429): the run waits %.0f s before its next request",
                           paced.retry_after_s)
        return True, paced
    if decision.kind == "unreachable":
        state.outage_streak += 1
        now = state.limiter.clock.monotonic()
        if state.outage_since is None:
            state.outage_since = now
        delay = settings.retry.backoff(state.outage_streak, state.rng)
        logger.log(logging.WARNING if state.outage_streak == 1 else logging.INFO,
                   "the server at %s refuses connections (down %.0f s): the run waits %.1f s and tries one request; "
                   "it gives up after %.0f s (RetryPolicy.max_outage_s)", settings.traits.where,
                   now - state.outage_since, delay, settings.retry.max_outage_s)
        state.limiter.pause(delay)
        return True, dataclasses.replace(decision, retry_after_s=delay)
    if decision.kind == "overloaded":
        state.overload_streak += 1
        if state.overload_streak >= 2:
            return True, pace_after(decision, state.limiter, settings.retry, state.overload_streak - 2, state.rng)
    return False, decision


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


