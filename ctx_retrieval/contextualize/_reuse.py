"""The run side of context reuse (``versions`` explains the policy): which earlier context each chunk without an
exact one may be served, what serving them saved, and the order a refresh rewrites stale contexts in."""

from __future__ import annotations

import math

from ctx_retrieval.contextualize._planning import Partition, Plan, Planner, partition
from ctx_retrieval.contextualize._settings import RunSettings
from ctx_retrieval.contextualize.prompts import clean_context
from ctx_retrieval.contextualize.results import CostEstimate
from ctx_retrieval.contextualize.versions import (
    Previous,
    ReusePolicy,
    VersionedStore,
    changed_tokens,
    edit_distances,
)

# What a refresh keeps until a chunk's new context is written: any earlier context of the same chunk.
REFRESH_FALLBACK = ReusePolicy(max_changed_tokens=2**62, other_models=True)


def versioned_store(settings: RunSettings) -> VersionedStore | None:
    """The run's context cache when it records versions (both built-in caches do; a store of yours may not)."""
    cache = settings.cache
    return cache if isinstance(cache, VersionedStore) else None


def find_previous(settings: RunSettings, plans: list[Plan], hits: dict[str, str], *,
                  refreshing: bool = False) -> dict[int, Previous]:
    """For each chunk without an exact context (by its index in the run's results), the earlier context the
    reuse policy allows; with ``refreshing``, any earlier context of the same chunk, kept by a refresh until the
    new one is written (so no chunk is left without one). Nearest wins: fewest changed tokens, then the same
    settings, then the newest."""
    s = settings
    store = versioned_store(s)
    policy = REFRESH_FALLBACK if refreshing else s.reuse
    if store is None or policy is None:
        return {}
    missing = [(plan, i) for plan in plans for i, key in enumerate(plan.keys) if key is not None and key not in hits]
    if not missing:
        return {}
    candidates = store.previous_contexts(str(plan.chunk_keys[i]) for plan, i in missing)
    wanted = {(plan.document.id, str(e.document_digest)) for plan, i in missing
              for e in candidates.get(str(plan.chunk_keys[i]), ()) if e.document_digest}
    versions = store.get_versions(wanted)
    # Per (document, old version): the tokens changed and each chunk's distance to an edit, computed once for all its
    # chunks (they are the same for every chunk of the document).
    edits: dict[tuple[int, str], tuple[int, list[float]]] = {}
    chosen: dict[int, Previous] = {}
    for plan, i in missing:
        best: Previous | None = None
        for entry in candidates.get(str(plan.chunk_keys[i]), ()):
            same = entry.settings_key == plan.settings_key
            if not same and not policy.other_models:
                continue
            if entry.document_digest == plan.digest:
                changed, distance = 0, math.inf
            else:
                old = versions.get((plan.document.id, str(entry.document_digest)))
                if old is None:
                    continue  # written before versions were recorded: how much changed is unknown
                if (plan.offset, old.digest) not in edits:
                    edits[(plan.offset, old.digest)] = (changed_tokens(old.chunks, plan.parts),
                                                        edit_distances(old.chunks, plan.parts))
                changed, distances = edits[(plan.offset, old.digest)]
                distance = distances[i]
                if changed > policy.max_changed_tokens or distance <= policy.rewrite_neighbours:
                    continue
            if best is not None and (changed, not same, -(entry.created_at or 0)) >= (
                    best.changed_tokens, not best.same_settings, -(best.entry.created_at or 0)):
                continue
            context = clean_context(entry.raw_text, max_tokens=s.max_context_tokens, count_tokens=s.counter)
            if context:
                best = Previous(context, entry, changed, distance, same)
        if best is not None:
            chosen[plan.offset + i] = best
    return chosen


def reuse_savings(planner: Planner, parts: Partition) -> float | None:
    """What the reused contexts of ``parts`` would have cost to write, as ``Planner.price`` estimates it: the run's
    requests with and without them (a document whose cache this run writes anyway reads it for them)."""
    if not parts.reused:
        return 0.0
    merged: dict[int, tuple[Plan, set[int]]] = {}
    for plan, pending in parts.work:
        merged.setdefault(plan.offset, (plan, set()))[1].update(pending)
    for plan, i, _ in parts.reused:
        merged.setdefault(plan.offset, (plan, set()))[1].add(i)
    touched = {plan.offset for plan, _, _ in parts.reused}
    with_reused = [(plan, sorted(indices)) for offset, (plan, indices) in merged.items() if offset in touched]
    without = [(plan, pending) for plan, pending in parts.work if plan.offset in touched]
    cost_full = planner.price(with_reused)[1]
    cost_actual = planner.price(without)[1]
    return None if cost_full is None or cost_actual is None else cost_full - cost_actual


def estimate(planner: Planner, plans: list[Plan]) -> CostEstimate:
    """A dry run's estimate: the run's partition, reuse included, priced (``Planner.estimate``)."""
    hits = planner.lookup(plans)
    parts = partition(plans, hits, find_previous(planner.settings, plans, hits))
    return planner.estimate(plans, parts, reuse_savings(planner, parts))


def refresh_order(work: list[tuple[Plan, list[int]]], previous: dict[int, Previous]) -> list[tuple[Plan, list[int]]]:
    """A refresh's work, most urgent first: a chunk with no context at all, then stale ones by distance to the
    nearest edit (``Previous.priority``); documents by their most urgent chunk."""
    def urgency(plan: Plan, i: int) -> tuple[float, int]:
        found = previous.get(plan.offset + i)
        return (-1.0, 0) if found is None else found.priority

    ordered = [(plan, sorted(pending, key=lambda i: (urgency(plan, i), i))) for plan, pending in work]
    return sorted(ordered, key=lambda item: urgency(item[0], item[1][0]))
