"""What one context run reads: the generator's settings as they stood when the run started (``RunSettings``, handed
to the run explicitly: no part of the run reads the generator), and what its provider can do (``ProviderTraits``),
read once through the Protocols of ``ctx_retrieval.protocols`` when the run is set up and never probed again.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ctx_retrieval.contextualize.prompts import PromptTemplate
from ctx_retrieval.contextualize.stores import ContextStore
from ctx_retrieval.contextualize.tracing import RequestTracer
from ctx_retrieval.contextualize.versions import ReusePolicy
from ctx_retrieval.contextualize.windowing import WindowConfig
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.models import ModelInfo
from ctx_retrieval.pacing import Clock, Limiter, Pacer, RateLimit, RetryPolicy, SharedBudget
from ctx_retrieval.protocols import (
    BatchProvider,
    CacheReportingProvider,
    EndpointProvider,
    ServerDescribingProvider,
    TokenCountingProvider,
)
from ctx_retrieval.providers.base import Provider
from ctx_retrieval.tokens import TokenCounter


@dataclass(frozen=True)
class ProviderTraits:
    """What a run reads of its provider, found once: who it is (``name``, ``model``, ``info``: limits and prices,
    ``cache_ttl``, ``caches_prompts``), and what it can do beyond ``Provider``, by its Protocols.

    ``described``: it asks its server about itself (slots, context size, how prefixes are cached; read live, the
    answer comes in ``aprepare``); ``batches``: it has a batch API; ``counter``: its API counts tokens; ``where``:
    the server named in outage messages; ``reports_cache_usage``: its answers say what the prompt cache did."""

    name: str
    model: str
    info: ModelInfo | None
    cache_ttl: str
    caches_prompts: bool
    described: ServerDescribingProvider | None
    batches: BatchProvider | None
    counter: TokenCountingProvider | None
    where: str
    reports_cache_usage: bool

    @classmethod
    def of(cls, provider: object) -> ProviderTraits:
        """The traits of ``provider``; ``ConfigurationError`` when it is not a ``Provider`` at all."""
        if not isinstance(provider, Provider):
            raise ConfigurationError(
                f"provider= takes a ctx_retrieval Provider (AnthropicProvider, OpenAICompatibleProvider, or a class "
                f"with the methods of ctx_retrieval.providers.base.Provider), not {type(provider).__name__}",
                setting="provider")
        endpoint = provider.base_url if isinstance(provider, EndpointProvider) else None
        return cls(name=provider.name, model=provider.model, info=provider.model_info, cache_ttl=provider.cache_ttl,
                   caches_prompts=provider.supports_prompt_caching,
                   described=provider if isinstance(provider, ServerDescribingProvider) else None,
                   batches=provider if isinstance(provider, BatchProvider) else None,
                   counter=provider if isinstance(provider, TokenCountingProvider) else None,
                   where=endpoint or provider.name,
                   reports_cache_usage=(provider.reports_cache_usage if isinstance(provider, CacheReportingProvider)
                                        else True))

    @property
    def slots(self) -> int | None:
        """Requests the server serves at once, when it says (a positive whole number), else None."""
        slots = self.described.slots if self.described is not None else None
        return slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None

    @property
    def context_tokens(self) -> int | None:
        """The server's context size per request, when it says."""
        served = self.described.context_tokens if self.described is not None else None
        return served if isinstance(served, int) and served > 0 else None

    @property
    def prefix_cache(self) -> str:
        """``explicit`` (the prompt marks what is cached: Anthropic's ``cache_control``), else the server's own
        (``per_slot``, ``shared``, ``unknown``)."""
        return self.described.prefix_cache if self.described is not None else "explicit"


@dataclass(frozen=True)
class RunSettings:
    """The settings one run reads, fixed when it starts (``ContextGenerator`` makes them; a setting changed
    between runs applies to the next). ``cache`` is the opened context cache (None: none)."""

    provider: Provider
    traits: ProviderTraits
    prompt: PromptTemplate
    window: WindowConfig
    max_context_tokens: int
    request_max_tokens: int
    max_concurrency: int | None
    max_documents_in_flight: int | None
    retry: RetryPolicy
    rate_limit: RateLimit | None
    shared_rate_limit: SharedBudget | None
    on_error: str
    budget_usd: float | None
    check_chunks_in_document: bool
    count_tokens: TokenCounter
    exact_token_counts: bool | None
    clock: Clock
    reuse: ReusePolicy | None
    tracers: Sequence[RequestTracer]
    cache: ContextStore | None

    def pacer(self, seed: int | None = None) -> Pacer:
        """A run's one pacing (``pacing.Pacer``): its limiter on the run's clock and under the fleet's shared limit,
        its retry policy and random source; its token counts and its context requests all go through it (the
        planner's counts once had a limiter of their own, on neither)."""
        limiter = Limiter(self.rate_limit, shared=self.shared_rate_limit, clock=self.clock)
        return Pacer(limiter, self.retry, random.Random(seed), where=self.traits.where)
