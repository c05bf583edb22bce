"""A run through Message Batches, at half price: cache-writing warm-ups first, then the rest in batches that read
the cache, collected as they end; what did not succeed is retried as ordinary requests through the run.

Submitted batch ids are stored in the context cache at once, so a run that crashes while waiting collects them on
restart instead of paying again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from ctx_retrieval.contextualize._planning import Plan
from ctx_retrieval.contextualize._run import Run, read_answer, traced_answer, traced_request
from ctx_retrieval.contextualize._settings import RunSettings
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.naming import printable
from ctx_retrieval.protocols import BatchProvider
from ctx_retrieval.types import ContextRequest, TokenUsage

logger = logging.getLogger(__name__)

# Message Batches limits (https://platform.claude.com/docs/en/build-with-claude/batch-processing): 100,000
# requests or 256 MB per batch, whichever comes first. We split below both, with room for the envelope.
MAX_BATCH_REQUESTS = 100_000
MAX_BATCH_BYTES = 200_000_000


@dataclass(frozen=True)
class BatchOptions:
    poll_interval_s: float
    max_batch_requests: int
    max_batch_bytes: int = MAX_BATCH_BYTES
    warm_up: Literal["batch", "ordinary"] = "batch"

    def checked(self, settings: RunSettings) -> BatchOptions:
        """These options, once ``check`` passed."""
        self.check(settings)
        return self

    def check(self, settings: RunSettings) -> BatchProvider:
        """The provider as a batch provider, after checking that this run can go through batches."""
        if self.warm_up not in ("batch", "ordinary"):
            raise ConfigurationError("warm_up must be 'batch' or 'ordinary'", setting="warm_up")
        if not 1 <= self.max_batch_requests <= MAX_BATCH_REQUESTS:
            raise ConfigurationError(f"max_batch_requests must be 1..{MAX_BATCH_REQUESTS:,} (the API's limit)",
                                     setting="max_batch_requests")
        if not 1 <= self.max_batch_bytes <= 256_000_000:
            raise ConfigurationError("max_batch_bytes must be 1..256,000,000 (the API's limit is 256 MB)",
                                     setting="max_batch_bytes")
        provider = settings.traits.batches
        if provider is None:
            raise ConfigurationError(f"{type(settings.provider).__name__} has no batch API (no Message Batches: it is "
                                     "not a BatchProvider); use contextualize_many", setting="provider")
        if settings.cache is None:
            raise ConfigurationError("batch mode needs the context cache (cache=True or a path): it records the "
                                     "submitted batches so a restart collects them instead of paying again",
                                     setting="cache")
        if settings.budget_usd is not None:
            raise ConfigurationError("budget_usd is not supported in batch mode yet: run contextualize_many, or "
                                     "check estimate() first", setting="budget_usd")
        return provider


async def run_batched(run: Run, work: list[tuple[Plan, list[int]]], options: BatchOptions) -> None:
    """Each cacheable document's first chunk writes its cache (a warm-up batch by default, else ordinary
    requests); once those are answered the rest go as Message Batches and read it."""
    cache, provider = run.settings.cache, run.settings.traits.batches
    assert cache is not None and provider is not None  # BatchOptions.check said so before planning
    wanted = {str(plan.keys[i]): (plan, i) for plan, pending in work for i in pending}
    in_flight = cache.batches_in_flight()  # earlier runs' batches: paid for, collected, never resubmitted
    waiting = {key for keys in in_flight.values() for key in keys}
    await run.count_prefixes([plan for plan, pending in work if len(pending) > 1])
    warm_ups: list[tuple[Plan, int]] = []
    to_batch: list[tuple[Plan, int]] = []
    for plan, pending in work:
        fresh = [i for i in pending if plan.keys[i] not in waiting]
        warming = len(fresh) < len(pending)  # an earlier run's batch holds some of its requests already
        if len(fresh) > 1 and run.planner.cacheable(plan) and not warming:
            warm_ups.append((plan, fresh[0]))
            fresh = fresh[1:]
        to_batch.extend((plan, i) for i in fresh)
    if options.warm_up == "batch":
        # Half price for the cache writes too; the other requests wait for these answers, not for a racing
        # write inside one batch (hits within a batch are best effort).
        retry = await _batch_phase(run, provider, warm_ups, options, wanted, in_flight)
        in_flight = {}
    else:
        retry = warm_ups
    await asyncio.gather(*(run.generate(plan, i, priority=1) for plan, i in retry))
    if run.stop:
        for plan, i in to_batch:
            run.set(plan, i, None, "not_attempted", TokenUsage())
        return
    retry = await _batch_phase(run, provider, to_batch, options, wanted, in_flight)
    await asyncio.gather(*(run.generate(plan, i, priority=0) for plan, i in retry))


async def _batch_phase(run: Run, provider: BatchProvider, items: list[tuple[Plan, int]], options: BatchOptions,
                       wanted: dict[str, tuple[Plan, int]], in_flight: dict[str, list[str]]) -> list[tuple[Plan, int]]:
    """Submit ``items`` as batches (with ``in_flight``, earlier runs' batches), wait for all of them to end and
    collect the answers; the items to retry as ordinary requests."""
    s, report = run.settings, run.report
    cache = s.cache
    assert cache is not None
    pending_batches = dict(in_flight)
    for group in _batch_groups(run, provider, items, options):
        keys = [key for key, _ in group]
        batch_id = await provider.asubmit_batch(group)
        cache.record_batch(batch_id, keys)  # at once: a crash from here on collects, never resubmits
        pending_batches[batch_id] = keys
        report.batch_requests += len(keys)
    retry: list[tuple[Plan, int]] = []
    while pending_batches:
        for batch_id in list(pending_batches):
            if not await provider.abatch_ended(batch_id):
                continue
            for key, response, why in await provider.abatch_results(batch_id):
                item = wanted.get(key)
                if response is not None:
                    run.count_usage(response.usage, batch=True)
                    answer = read_answer(response, s.max_context_tokens, s.counter)
                    if answer.problem is None:  # a refused, cut-off or empty answer is never cached
                        await run.cache.store(key, response, *(item or (None, 0)))
                    if item is None:
                        continue
                    plan, i = item
                    if run.tracers:  # a batch result is traced as a request that started and ended now
                        traced = run.tracers.start(traced_request(s, plan, run.planner.request(plan, i), batch=True))
                        run.tracers.end(traced, traced_answer(s, response, batch=True))
                    run.note_cache_use(plan, response.usage)
                    if answer.problem is None:
                        report.generated += 1
                        run.set(plan, i, answer.context, "generated", response.usage)
                    elif answer.problem[0] == "max_tokens":
                        retry.append(item)  # asked again as an ordinary request, with room to finish
                    else:
                        run.fail(plan, i, *answer.problem, response.usage)
                elif item is not None and why is not None and why.startswith("errored:invalid_request"):
                    # The API rejected the request itself: sending it again cannot succeed.
                    report.errors_by_type["bad_request"] = report.errors_by_type.get("bad_request", 0) + 1
                    run.fail(*item, "bad_request", f"the batch answered {why}", TokenUsage())
                elif item is not None:
                    logger.info("batch request for chunk %s ended %s: retrying it as an ordinary request",
                                printable(item[0].chunks[item[1]].id), printable(why))
                    retry.append(item)
            cache.forget_batch(batch_id)
            del pending_batches[batch_id]
        if pending_batches:
            await asyncio.sleep(options.poll_interval_s)
    return retry


def _batch_groups(run: Run, provider: BatchProvider, items: list[tuple[Plan, int]],
                  options: BatchOptions) -> Iterator[list[tuple[str, ContextRequest]]]:
    """``(custom_id, request)`` groups within both batch limits: request count and serialized bytes."""
    group: list[tuple[str, ContextRequest]] = []
    size = 0
    for plan, i in items:
        entry = (str(plan.keys[i]), run.planner.request(plan, i))
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
