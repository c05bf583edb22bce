"""Claude models: limits, list prices, request rules and retirements, for windowing, caching and cost reports.

Current as of ``PRICES_AS_OF`` (2026-11-30). Every number comes from Anthropic's documentation, read that day:

- prices: the pricing page (``PRICES_SOURCE``): base input, 5-minute and 1-hour cache writes, cache hits, output
  (US dollars per million tokens, standard tier); the Message Batches API bills 50% of these. Documented
  exceptions to the usual 1.25x / 2x / 0.1x cache multipliers are kept as listed: cache hits are 0.025x input on
  Claude Fable 5.1, 0.05x on Claude Opus 5.5 and (since 2026-10-07) Claude Sonnet 5.5.
- prompt-length price tiers: Claude Haiku 5.5 bills a request whose prompt (input + cache writes + cache reads)
  is over 100,000 tokens at 5x on every token of that request, output included (its overview page and the
  pricing page's long-context section).
- context windows and thinking behaviour: each model's overview page (``https://platform.claude.com/docs/en/
  models/<model>/overview``); Claude Haiku 5.5's thinking rules from "Prompting Claude Haiku 5.5" (thinking is
  on by default and counts against ``max_tokens``; ``thinking: {"type": "disabled"}`` turns it off at effort
  low, medium or high) and its migration guide (``temperature``, ``top_p``, ``top_k`` are rejected).
- minimum cacheable prompt lengths: the prompt-caching guide and the model overview pages. Where no page we read
  states a model's minimum it is ``None`` (unknown): the package then neither warns nor skips caching for it.
- tokenizers: Claude Haiku 5.5 "uses the same newer tokenizer as Claude 4.7 and later models, so the same text
  counts as approximately 30% more tokens than on Claude Haiku 4.5" (its overview page): ``tokenizer_ratio`` 1.3
  scales the offline estimate for those models. Billing always uses the API's own counts.
- retirements: the model-deprecations page (``DEPRECATIONS_SOURCE``). A retired id raises ``RetiredModelError``
  before any request, naming the replacement.

Prices change: pass your own ``ModelInfo`` (``AnthropicProvider(model_info=...)``) when they do.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Literal

from ctx_retrieval.errors import RetiredModelError, UnknownModelError
from ctx_retrieval.types import TokenUsage

__all__ = [
    "DEPRECATIONS_SOURCE",
    "MODELS",
    "PRICES_AS_OF",
    "PRICES_SOURCE",
    "RETIRED_MODELS",
    "ModelInfo",
    "Prices",
    "RetiredModel",
    "ThinkingMode",
    "check_not_retired",
    "cost_usd",
    "get_model_info",
    "lookup_model_info",
    "lookup_retired",
    "request_cost_usd",
]

logger = logging.getLogger(__name__)

PRICES_AS_OF = "2026-11-30"
PRICES_SOURCE = "https://platform.claude.com/docs/en/about-claude/pricing"
DEPRECATIONS_SOURCE = "https://platform.claude.com/docs/en/about-claude/model-deprecations"

# How a model thinks when a request does not say:
#   "off": no thinking unless asked (Claude 4.6 and earlier);
#   "on_can_disable": adaptive thinking by default, ``thinking: {"type": "disabled"}`` allowed (Haiku 5.5, Opus 5);
#   "always_on": thinking cannot be disabled (Opus 5.5, Fable 5.1; Sonnet 5.5 only turns off interleaved thinking).
ThinkingMode = Literal["off", "on_can_disable", "always_on"]


@dataclass(frozen=True)
class Prices:
    """List prices of one price tier, US dollars per million tokens."""

    input_per_mtok: float
    output_per_mtok: float
    cache_write_5m_per_mtok: float
    cache_write_1h_per_mtok: float
    cache_read_per_mtok: float


@dataclass(frozen=True)
class ModelInfo:
    """Limits, list prices and request rules of one model (dollars per million tokens).

    ``long_prompt_threshold`` / ``long_prompt_prices``: a request whose prompt is longer than the threshold is
    billed entirely at the second tier (None: one tier). ``min_cacheable_tokens`` is None when not documented.
    """

    name: str
    context_window: int
    min_cacheable_tokens: int | None
    input_per_mtok: float
    output_per_mtok: float
    cache_write_5m_per_mtok: float
    cache_write_1h_per_mtok: float
    cache_read_per_mtok: float
    long_prompt_threshold: int | None = None
    long_prompt_prices: Prices | None = None
    thinking: ThinkingMode = "off"
    rejects_sampling_params: bool = False
    tokenizer_ratio: float = 1.0
    status: Literal["active", "legacy"] = "active"
    max_output_tokens: int | None = None

    @classmethod
    def from_input_price(
        cls, name: str, *, input_per_mtok: float, output_per_mtok: float, min_cacheable_tokens: int | None,
        context_window: int = 200_000, **rules: object,
    ) -> ModelInfo:
        """A model priced with Anthropic's standard cache multipliers (1.25x, 2x, 0.1x of input)."""
        return cls(
            name=name,
            context_window=context_window,
            min_cacheable_tokens=min_cacheable_tokens,
            input_per_mtok=input_per_mtok,
            output_per_mtok=output_per_mtok,
            cache_write_5m_per_mtok=round(input_per_mtok * 1.25, 6),
            cache_write_1h_per_mtok=round(input_per_mtok * 2.0, 6),
            cache_read_per_mtok=round(input_per_mtok * 0.1, 6),
            **rules,  # type: ignore[arg-type]
        )

    @property
    def base_prices(self) -> Prices:
        return Prices(self.input_per_mtok, self.output_per_mtok, self.cache_write_5m_per_mtok,
                      self.cache_write_1h_per_mtok, self.cache_read_per_mtok)

    def prices_for(self, prompt_tokens: int) -> Prices:
        """The tier a request with a prompt of ``prompt_tokens`` tokens is billed at."""
        if self.long_prompt_prices is not None and self.long_prompt_threshold is not None \
                and prompt_tokens > self.long_prompt_threshold:
            return self.long_prompt_prices
        return self.base_prices

    def in_long_prompt_tier(self, prompt_tokens: int) -> bool:
        return self.long_prompt_threshold is not None and prompt_tokens > self.long_prompt_threshold


@dataclass(frozen=True)
class RetiredModel:
    """A model the API no longer serves: requests to it fail (HTTP 404)."""

    name: str
    retired_on: str | None  # ISO date, None where the deprecations page gives the status without a date
    replacement: str
    aliases: tuple[str, ...] = field(default=())


def _standard(name: str, inp: float, out: float, min_cache: int | None, window: int, **rules: object) -> ModelInfo:
    return ModelInfo.from_input_price(name, input_per_mtok=inp, output_per_mtok=out, min_cacheable_tokens=min_cache,
                                      context_window=window, **rules)


_NEW_TOKENIZER = {"tokenizer_ratio": 1.3, "rejects_sampling_params": True}

# Keys are model ids; a dated id resolves to its undated key ("claude-haiku-4-5-20251001" -> "claude-haiku-4-5").
MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in (
        # Claude Haiku 5.5 (released 2026-10-07): $0.10 / $0.50, 5m write $0.125, 1h write $0.20, hit $0.01;
        # prompts over 100k tokens: $0.50 / $2.50, $0.625, $1.00, $0.05. Cache minimum 512 tokens.
        ModelInfo("claude-haiku-5-5", 1_000_000, 512, 0.10, 0.50, 0.125, 0.20, 0.01,
                  long_prompt_threshold=100_000, long_prompt_prices=Prices(0.50, 2.50, 0.625, 1.00, 0.05),
                  thinking="on_can_disable", **_NEW_TOKENIZER),  # type: ignore[arg-type]
        # Claude Haiku 4.5: legacy, still served; cache minimum 4,096 tokens.
        _standard("claude-haiku-4-5", 1.00, 5.00, 4096, 200_000, status="legacy"),
        # Claude Sonnet 5.5: $2 / $10, writes $2.50 / $4, hits $0.10 (0.05x, cut from $0.20 on 2026-10-07).
        ModelInfo("claude-sonnet-5-5", 1_000_000, None, 2.00, 10.00, 2.50, 4.00, 0.10, thinking="always_on",
                  **_NEW_TOKENIZER),  # type: ignore[arg-type]
        _standard("claude-sonnet-5", 2.00, 10.00, 1024, 1_000_000, thinking="always_on", **_NEW_TOKENIZER),
        # Claude Opus 5.5: $4 / $20, writes $5 / $8, hits $0.20 (0.05x); thinking always on.
        ModelInfo("claude-opus-5-5", 1_000_000, None, 4.00, 20.00, 5.00, 8.00, 0.20, thinking="always_on",
                  **_NEW_TOKENIZER),  # type: ignore[arg-type]
        _standard("claude-opus-5", 5.00, 25.00, 512, 1_000_000, thinking="on_can_disable", status="legacy",
                  **_NEW_TOKENIZER),
        # Claude Fable 5.1: $10 / $50, writes $12.50 / $20, hits $0.25 (0.025x); thinking always on.
        ModelInfo("claude-fable-5-1", 1_000_000, None, 10.00, 50.00, 12.50, 20.00, 0.25, thinking="always_on",
                  **_NEW_TOKENIZER),  # type: ignore[arg-type]
        # Claude Fable 5: hits $1 (0.1x).
        ModelInfo("claude-fable-5", 1_000_000, 512, 10.00, 50.00, 12.50, 20.00, 1.00, thinking="always_on",
                  status="legacy", **_NEW_TOKENIZER),  # type: ignore[arg-type]
        _standard("claude-opus-4-8", 5.00, 25.00, 1024, 1_000_000, status="legacy", **_NEW_TOKENIZER),
        _standard("claude-opus-4-7", 5.00, 25.00, 2048, 1_000_000, status="legacy", **_NEW_TOKENIZER),
        _standard("claude-opus-4-6", 5.00, 25.00, 4096, 1_000_000, status="legacy"),
        _standard("claude-opus-4-5", 5.00, 25.00, 4096, 200_000, status="legacy"),
        _standard("claude-sonnet-4-6", 3.00, 15.00, 1024, 1_000_000, status="legacy"),
        _standard("claude-sonnet-4-5", 3.00, 15.00, 1024, 200_000, status="legacy"),
        _standard("claude-sonnet-4-20250514", 3.00, 15.00, 1024, 200_000, status="legacy"),
    )
}
# Maximum output per request (each model's overview page; the Batch API's 300K beta is not used here).
_MAX_OUTPUT = {"claude-haiku-5-5": 128_000, "claude-haiku-4-5": 64_000, "claude-sonnet-5-5": 128_000,
               "claude-sonnet-5": 128_000, "claude-opus-5-5": 128_000, "claude-opus-5": 128_000,
               "claude-fable-5-1": 128_000, "claude-fable-5": 128_000, "claude-opus-4-8": 128_000,
               "claude-opus-4-7": 128_000, "claude-opus-4-6": 128_000, "claude-opus-4-5": 64_000,
               "claude-sonnet-4-6": 64_000, "claude-sonnet-4-5": 64_000, "claude-sonnet-4-20250514": 64_000}
MODELS = {name: replace(info, max_output_tokens=_MAX_OUTPUT[name]) for name, info in MODELS.items()}
MODEL_ALIASES: dict[str, str] = {"claude-sonnet-4-0": "claude-sonnet-4-20250514"}

# The deprecations page's retired models (Claude API), with the current model of the same class as replacement.
RETIRED_MODELS: dict[str, RetiredModel] = {
    r.name: r
    for r in (
        RetiredModel("claude-3-haiku-20240307", "2026-04-20", "claude-haiku-5-5"),
        RetiredModel("claude-3-5-haiku-20241022", "2026-02-19", "claude-haiku-5-5", ("claude-3-5-haiku-latest",)),
        RetiredModel("claude-3-7-sonnet-20250219", "2026-02-19", "claude-sonnet-5-5",
                     ("claude-3-7-sonnet-latest",)),
        RetiredModel("claude-3-5-sonnet-20241022", "2025-10-22", "claude-sonnet-5-5",
                     ("claude-3-5-sonnet-latest",)),
        RetiredModel("claude-3-5-sonnet-20240620", "2025-10-22", "claude-sonnet-5-5"),
        RetiredModel("claude-3-opus-20240229", "2026-01-05", "claude-opus-5-5", ("claude-3-opus-latest",)),
        RetiredModel("claude-3-sonnet-20240229", "2025-07-21", "claude-sonnet-5-5"),
        RetiredModel("claude-2.1", "2025-07-21", "claude-sonnet-5-5"),
        RetiredModel("claude-2.0", "2025-07-21", "claude-sonnet-5-5"),
        RetiredModel("claude-instant-1.2", "2024-11-06", "claude-haiku-5-5"),
        # The pricing page lists Opus 4.1 and Opus 4 as retired on the Claude API (served on partner clouds only).
        RetiredModel("claude-opus-4-1", None, "claude-opus-5-5", ("claude-opus-4-1-20250805",)),
        RetiredModel("claude-opus-4-20250514", None, "claude-opus-5-5", ("claude-opus-4-0",)),
    )
}
_RETIRED_BY_ALIAS = {alias: r for r in RETIRED_MODELS.values() for alias in r.aliases}


def _match(table_keys: list[str], model: str) -> str | None:
    """The key equal to ``model`` or, for a dated id, the longest key it extends with ``-<suffix>``."""
    if model in table_keys:
        return model
    matches = [key for key in table_keys if model.startswith(key + "-")]
    return max(matches, key=len) if matches else None


def lookup_retired(model: str) -> RetiredModel | None:
    """The retirement record for ``model`` (id, alias or dated id), or None if it is not retired."""
    if model in _RETIRED_BY_ALIAS:
        return _RETIRED_BY_ALIAS[model]
    key = _match(list(RETIRED_MODELS), model)
    return RETIRED_MODELS[key] if key else None


def check_not_retired(model: str) -> None:
    """Raise ``RetiredModelError`` naming the replacement when ``model`` is retired (no request is made)."""
    retired = lookup_retired(model)
    if retired is not None:
        when = f" on {retired.retired_on}" if retired.retired_on else ""
        raise RetiredModelError(
            f"model {model!r} was retired by Anthropic{when} and every request to it fails; use "
            f"{retired.replacement!r} instead (see {DEPRECATIONS_SOURCE})",
            model=model, replacement=retired.replacement, retired_on=retired.retired_on,
        )


def lookup_model_info(model: str) -> ModelInfo | None:
    """The table entry for ``model`` (exact id, alias, or a dated id of a listed model), or None."""
    model = MODEL_ALIASES.get(model, model)
    key = _match(list(MODELS), model)
    return MODELS[key] if key else None


def get_model_info(model: str) -> ModelInfo:
    """Like ``lookup_model_info`` but raises: ``RetiredModelError`` for a retired id, ``UnknownModelError``
    naming the fix for an id not in the table."""
    check_not_retired(model)
    info = lookup_model_info(model)
    if info is None:
        known = ", ".join(sorted(MODELS))
        raise UnknownModelError(
            f"no limits or prices are known for model {model!r}; pass model_info=ModelInfo(...) with its "
            f"context window, minimum cacheable tokens and prices, or use one of: {known}",
            model=model,
        )
    return info


# -- dollars ---------------------------------------------------------------------------------------------


def _dollars(usage: TokenUsage, prices: Prices, cache_ttl: str) -> float:
    write_price = prices.cache_write_1h_per_mtok if cache_ttl == "1h" else prices.cache_write_5m_per_mtok
    return (
        usage.input_tokens * prices.input_per_mtok
        + usage.output_tokens * prices.output_per_mtok
        + usage.cache_creation_input_tokens * write_price
        + usage.cache_read_input_tokens * prices.cache_read_per_mtok
    ) / 1_000_000


def cost_usd(usage: TokenUsage, model: ModelInfo, *, cache_ttl: str = "5m", batch: bool = False,
             long_prompt_usage: TokenUsage | None = None) -> float:
    """Dollars for ``usage`` at ``model``'s list prices (cache writes priced for ``cache_ttl``).

    ``usage`` is summed over requests; ``long_prompt_usage`` is the part of it from requests whose prompt fell
    into the model's dearer prompt-length tier (billed whole at that tier). Message Batches bill 50%.
    """
    long_part = long_prompt_usage or TokenUsage()
    dollars = _dollars(usage - long_part, model.base_prices, cache_ttl)
    if long_part.prompt_tokens or long_part.output_tokens:
        dollars += _dollars(long_part, model.long_prompt_prices or model.base_prices, cache_ttl)
    return dollars * (0.5 if batch else 1.0)


def request_cost_usd(usage: TokenUsage, model: ModelInfo, *, cache_ttl: str = "5m", batch: bool = False) -> float:
    """Dollars for one request's ``usage``: its prompt length picks the price tier."""
    prices = model.prices_for(usage.prompt_tokens)
    return _dollars(usage, prices, cache_ttl) * (0.5 if batch else 1.0)
