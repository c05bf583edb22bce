"""How a context run schedules its requests: how many in flight, how many documents, one chunk at a time per
document for servers with a per-slot prefix cache. Pacing itself (limits, pauses, retries) is ``ctx_retrieval.pacing``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctx_retrieval.contextualize._settings import ProviderTraits


# With max_concurrency=None the run finds how many requests to keep in flight: it starts with this many and grows
# while a request the rate limits let through has to wait for a slot and each step raises the throughput (then
# latency, not the account's limit, holds the run back: Little's law, in flight = throughput x latency), up to the
# cap; a step that does not pay is given back (``pacing.ConcurrencyTuner``).
AUTO_START_CONCURRENCY = 8
AUTO_MAX_CONCURRENCY = 256
DOCUMENTS_PER_SLOT = 2  # documents in flight per request in flight, by default


@dataclass(frozen=True)
class Shape:
    """How a run schedules: requests and documents in flight, whether each document's chunks go one at a time,
    and the most requests in flight it may grow to (None: fixed)."""

    concurrency: int
    documents: int
    per_slot: bool
    grow_to: int | None


def server_shape(traits: ProviderTraits, max_concurrency: int | None, max_documents_in_flight: int | None) -> Shape:
    """How a run against a provider with ``traits`` schedules.

    A server that keeps one cached prefix per slot (llama.cpp, llama-cpp-python, Ollama) gets one document per
    slot: its chunks one after another, so the slot still holds the document when the next chunk comes; B's
    first request interleaved between A's chunks would make the server read A whole again. Where the server
    says how many slots it has, concurrency follows them (more would only queue into timeouts). Otherwise
    ``max_concurrency`` fixes it, or None lets the run grow it from ``AUTO_START_CONCURRENCY``."""
    served = traits.slots
    concurrency: int = (min(max_concurrency or served, served) if served is not None
                        else max_concurrency or AUTO_START_CONCURRENCY)
    grow_to = AUTO_MAX_CONCURRENCY if max_concurrency is None and served is None else None
    if traits.prefix_cache == "per_slot":
        return Shape(concurrency, concurrency, True, None)
    return Shape(concurrency, max_documents_in_flight or DOCUMENTS_PER_SLOT * concurrency, False, grow_to)
