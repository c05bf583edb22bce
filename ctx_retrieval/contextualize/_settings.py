"""What a context run reads: its generator's settings, frozen and checked when the generator is built
(``RunSettings``, handed to each run: no part of a run reads the generator), and what its provider can do
(``ProviderTraits``), read once through the Protocols of ``ctx_retrieval.protocols`` and never probed again.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Literal

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
from ctx_retrieval.tokens import TokenCounter, estimate_tokens

OnError = Literal["raise", "skip"]
DEFAULT_LEASE_TTL_S = 60.0  # how long a worker's claim on a document lasts unless renewed (``contextualize.leases``)


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
class ScaledEstimate:
    """The offline estimate times a tokenizer ratio; a class, not a lambda, so a generator pickles (LlamaIndex's
    ``num_workers`` sends it to worker processes)."""

    ratio: float

    def __call__(self, text: str) -> int:
        return round(estimate_tokens(text) * self.ratio)


def model_token_estimate(info: ModelInfo | None) -> TokenCounter:
    """The offline token estimate scaled by the model's tokenizer ratio (newer tokenizers count ~30% more)."""
    ratio = info.tokenizer_ratio if info is not None else 1.0
    return estimate_tokens if ratio == 1.0 else ScaledEstimate(ratio)


@dataclass(frozen=True)
class RunSettings:
    """A generator's settings, frozen: made and checked once when it is built (``ConfigurationError`` names the
    setting), read by every run it starts; ``ContextGenerator.with_options`` makes a generator with some changed (the
    anthropic SDK's pattern), nothing changes them in place. The fields are ``ContextGenerator``'s arguments (see its
    docstring; its defaults are the only ones); ``cache`` is the opened context cache, set for a run when it starts
    (None: none)."""

    provider: Provider
    prompt: PromptTemplate
    window: WindowConfig
    max_context_tokens: int
    max_concurrency: int | None
    max_documents_in_flight: int | None
    retry: RetryPolicy
    rate_limit: RateLimit | None
    on_error: OnError
    budget_usd: float | None
    check_chunks_in_document: bool
    progress: bool
    count_tokens: TokenCounter | None  # None: the model's estimate (``counter``)
    exact_token_counts: bool | None
    seed: int | None
    lease_ttl_s: float | None
    shared_rate_limit: SharedBudget | None
    clock: Clock
    tracers: Sequence[RequestTracer]
    reuse: ReusePolicy | None
    cache: ContextStore | None = None

    def __post_init__(self) -> None:
        info = self.traits.info  # not a Provider: ConfigurationError first, naming what provider= takes
        for name, value, kind in (("prompt", self.prompt, PromptTemplate), ("window", self.window, WindowConfig),
                                  ("retry", self.retry, RetryPolicy)):
            if not isinstance(value, kind):
                raise ConfigurationError(f"{name} takes a {kind.__name__}, not {type(value).__name__}", setting=name)
        if self.reuse is not None and not isinstance(self.reuse, ReusePolicy):
            raise ConfigurationError(f"reuse takes a ReusePolicy or None, not {type(self.reuse).__name__}",
                                     setting="reuse")
        if self.on_error not in ("raise", "skip"):
            raise ConfigurationError("on_error must be 'raise' or 'skip'", setting="on_error")
        for name, count, least in (("max_concurrency", self.max_concurrency, 1),
                                   ("max_context_tokens", self.max_context_tokens, 8),
                                   ("max_documents_in_flight", self.max_documents_in_flight, 1)):
            if count is None and name != "max_context_tokens":
                continue
            if isinstance(count, bool) or not isinstance(count, int) or count < least:
                raise ConfigurationError(f"{name} must be an int >= {least}, got {count!r}", setting=name)
        if info is not None and info.max_output_tokens and self.request_max_tokens > info.max_output_tokens:
            raise ConfigurationError(
                f"max_context_tokens={self.max_context_tokens} asks for up to {self.request_max_tokens} output "
                f"tokens, more than {info.name}'s maximum output ({info.max_output_tokens:,}): lower "
                "max_context_tokens", setting="max_context_tokens")
        for name, number, floor in (("budget_usd", self.budget_usd, ">= 0"), ("lease_ttl_s", self.lease_ttl_s, "> 0")):
            if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float))
                                       or not math.isfinite(number) or number < 0 or (number == 0 and floor == "> 0")):
                raise ConfigurationError(f"{name} must be a finite number {floor} or None, got {number!r}",
                                         setting=name)
        object.__setattr__(self, "tracers", tuple(self.tracers))
        if self.reuse is not None and not self.reuse.reuses:
            object.__setattr__(self, "reuse", None)

    @functools.cached_property
    def traits(self) -> ProviderTraits:
        """What the run reads of its provider, found once (``ProviderTraits``)."""
        return ProviderTraits.of(self.provider)

    @functools.cached_property
    def counter(self) -> TokenCounter:
        """The planning token counter: ``count_tokens``, else the offline estimate scaled for the model."""
        return self.count_tokens or model_token_estimate(self.traits.info)

    @functools.cached_property
    def request_max_tokens(self) -> int:
        """``max_tokens`` sent with each request: room above the cap for a preamble that cleanup removes."""
        return max(64, (self.max_context_tokens * 3) // 2)

    def pacer(self) -> Pacer:
        """A run's one pacing (``pacing.Pacer``): its limiter on the run's clock and under the fleet's shared limit,
        its retry policy and random source; its token counts and its context requests all go through it (the
        planner's counts once had a limiter of their own, on neither)."""
        limiter = Limiter(self.rate_limit, shared=self.shared_rate_limit, clock=self.clock)
        return Pacer(limiter, self.retry, random.Random(self.seed), where=self.traits.where)


OPTIONS = frozenset(f.name for f in fields(RunSettings)) - {"cache"}  # what ContextGenerator.with_options takes
