"""Claude models: limits, list prices, request rules and lifecycle, for windowing, caching and cost reports.

Current as of ``PRICES_AS_OF`` (2026-12-01). Every number comes from Anthropic's documentation, read that day:

- prices: the pricing page (``PRICES_SOURCE``): base input, 5-minute and 1-hour cache writes, cache hits, output
  (US dollars per million tokens, standard tier); the Message Batches API bills 50% of these. Documented
  exceptions to the usual 1.25x / 2x / 0.1x cache multipliers are kept as listed: cache hits are 0.025x input on
  Claude Fable 5.1 and 5.2, 0.05x on Claude Opus 5.5 and (since 2026-10-07) Claude Sonnet 5.5.
- prompt-length price tiers: Claude Haiku 5.5 bills a request whose prompt (input + cache writes + cache reads)
  is over 100,000 tokens at 5x on every token of that request, output included (its overview page and the
  pricing page's long-context section).
- context windows, output limits and thinking: each model's overview page (``https://platform.claude.com/docs/en/
  models/<model>/overview``) and the extended-thinking page ("Claude 4.7 and later models do not support
  ``thinking: {type: "enabled", budget_tokens}`` and reject requests that use it", HTTP 400). Claude Haiku 5.5
  and Claude Sonnet 5 think adaptively by default and accept ``thinking: {"type": "disabled"}`` (at effort low,
  medium or high; the Sonnet 5.5 page: "in Claude Sonnet 5 you turned thinking off with disabled"); Opus 5.5,
  Sonnet 5.5 and the Fable models always think; Opus 4.7 and 4.8 think only when asked, adaptively.
- minimum cacheable prompt lengths: the prompt-caching guide and the model overview pages (512 tokens for Claude
  Haiku 5.5, Opus 5.5, Sonnet 5.5, Opus 5, Fable 5 and 5.1). Where no page we read states a model's minimum it is
  ``None`` (unknown): the package then neither warns nor skips caching for it (Claude Fable 5.2).
- tokenizers: Claude 4.7 and later use a newer tokenizer that counts the same text as ~30% more tokens (the
  overview pages): ``tokenizer_ratio`` 1.3 scales the offline estimate for those models. Billing always uses the
  API's own counts.
- lifecycle: the model-deprecations page (``DEPRECATIONS_SOURCE``): active, legacy (served, no longer updated),
  deprecated (served until its retirement date) and retired (every request fails). A retired id, or a deprecated
  one past its date, raises ``RetiredModelError`` before any request, naming the replacement; a deprecated one
  before its date is used with a warning naming the date. Claude Sonnet 4 and Opus 4 retired on 2026-06-15 (the
  release notes); Claude Sonnet 4.5 retired on 2026-11-30.

Only a real snapshot date extends an id (``claude-haiku-4-5-20251001``): ``claude-fable-5-2`` is its own model,
never Claude Fable 5 with a suffix. The cloud platforms' ids resolve to the same entries (``platform_model``):
Amazon Bedrock's ``[global.|us.|eu.|jp.|apac.|au.]anthropic.<id>[-v1[:0]]`` (and inference-profile ARNs that name
one), Google Vertex AI's ``<id>[@YYYYMMDD]``; on both, regional endpoints bill 10% over the global endpoint
(``platform_prices``). Prices change: pass your own ``ModelInfo`` (``AnthropicProvider(model_info=
...)``) when they do; ``drift(listing)`` compares the table with the Models API (``GET /v1/models``).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ctx_retrieval.errors import RetiredModelError, UnknownModelError
from ctx_retrieval.types import TokenUsage

__all__ = [
    "DEPRECATIONS_SOURCE",
    "MODELS",
    "PRICES_AS_OF",
    "PRICES_SOURCE",
    "RETIRED_MODELS",
    "Lifecycle",
    "ModelInfo",
    "Prices",
    "RetiredModel",
    "ThinkingMode",
    "check_not_retired",
    "cost_usd",
    "drift",
    "get_model_info",
    "lookup_model_info",
    "lookup_retired",
    "platform_model",
    "platform_prices",
    "request_cost_usd",
]

logger = logging.getLogger(__name__)

PRICES_AS_OF = "2026-12-01"
PRICES_SOURCE = "https://platform.claude.com/docs/en/about-claude/pricing"
DEPRECATIONS_SOURCE = "https://platform.claude.com/docs/en/about-claude/model-deprecations"

# How a model thinks when a request does not say, and what it accepts:
#   "off": no thinking unless asked; ``enabled`` with ``budget_tokens`` or ``adaptive`` (Claude 4.6 and earlier);
#   "adaptive_on_request": no thinking unless asked, and then only ``adaptive`` (Claude Opus 4.7, 4.8);
#   "on_can_disable": adaptive thinking by default, ``thinking: {"type": "disabled"}`` allowed (Haiku 5.5,
#       Sonnet 5, Opus 5);
#   "always_on": thinking cannot be disabled (Opus 5.5, Sonnet 5.5, the Fable models).
# Every mode but "off" rejects ``thinking: {"type": "enabled", "budget_tokens": N}`` with HTTP 400.
ThinkingMode = Literal["off", "adaptive_on_request", "on_can_disable", "always_on"]
Lifecycle = Literal["active", "legacy", "deprecated", "retired"]


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
    """Limits, list prices, request rules and lifecycle of one model (dollars per million tokens).

    ``long_prompt_threshold`` / ``long_prompt_prices``: a request whose prompt is longer than the threshold is
    billed entirely at the second tier (None: one tier). ``min_cacheable_tokens`` is None when not documented.
    ``status`` is the deprecations page's lifecycle; a ``"deprecated"`` model carries ``retires_on`` (ISO date)
    and ``replacement``.
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
    status: Lifecycle = "active"
    max_output_tokens: int | None = None
    retires_on: str | None = None
    replacement: str | None = None
    limited_availability: bool = False  # served only to verified organizations (the Mythos models)

    @classmethod
    def from_input_price(
        cls, name: str, *, input_per_mtok: float, output_per_mtok: float, min_cacheable_tokens: int | None,
        context_window: int = 200_000, **rules: Any,
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
            **rules,
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

    def lifecycle_on(self, day: datetime.date) -> Lifecycle:
        """The status on ``day``: a deprecated model is retired from its retirement date on."""
        if self.status == "deprecated" and self.retires_on and day >= datetime.date.fromisoformat(self.retires_on):
            return "retired"
        return self.status


@dataclass(frozen=True)
class RetiredModel:
    """A model the API no longer serves: requests to it fail (HTTP 404)."""

    name: str
    retired_on: str | None  # ISO date, None where the deprecations page gives the status without a date
    replacement: str
    aliases: tuple[str, ...] = field(default=())


def _standard(name: str, inp: float, out: float, min_cache: int | None, window: int, max_out: int,
              **rules: Any) -> ModelInfo:
    return ModelInfo.from_input_price(name, input_per_mtok=inp, output_per_mtok=out, min_cacheable_tokens=min_cache,
                                      context_window=window, max_output_tokens=max_out, **rules)


_NEW_TOKENIZER: dict[str, Any] = {"tokenizer_ratio": 1.3, "rejects_sampling_params": True}
_M = 1_000_000

# Keys are model ids; only a dated snapshot id resolves to its undated key ("claude-haiku-4-5-20251001").
MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in (
        # Claude Haiku 5.5 (released 2026-10-07): $0.10 / $0.50, 5m write $0.125, 1h write $0.20, hit $0.01;
        # prompts over 100k tokens: $0.50 / $2.50, $0.625, $1.00, $0.05. Cache minimum 512 tokens.
        ModelInfo("claude-haiku-5-5", _M, 512, 0.10, 0.50, 0.125, 0.20, 0.01, long_prompt_threshold=100_000,
                  long_prompt_prices=Prices(0.50, 2.50, 0.625, 1.00, 0.05), thinking="on_can_disable",
                  max_output_tokens=128_000, **_NEW_TOKENIZER),
        # Claude Haiku 4.5: legacy, still served; cache minimum 4,096 tokens.
        _standard("claude-haiku-4-5", 1.00, 5.00, 4096, 200_000, 64_000, status="legacy"),
        # Claude Sonnet 5.5: $2 / $10, writes $2.50 / $4, hits $0.10 (0.05x, cut from $0.20 on 2026-10-07).
        ModelInfo("claude-sonnet-5-5", _M, 512, 2.00, 10.00, 2.50, 4.00, 0.10, thinking="always_on",
                  max_output_tokens=128_000, **_NEW_TOKENIZER),
        # Claude Sonnet 5 (released 2026-06-30): legacy; adaptive thinking by default, "disabled" accepted.
        _standard("claude-sonnet-5", 2.00, 10.00, 1024, _M, 128_000, thinking="on_can_disable", status="legacy",
                  **_NEW_TOKENIZER),
        # Claude Opus 5.5: $4 / $20, writes $5 / $8, hits $0.20 (0.05x); thinking always on.
        ModelInfo("claude-opus-5-5", _M, 512, 4.00, 20.00, 5.00, 8.00, 0.20, thinking="always_on",
                  max_output_tokens=128_000, **_NEW_TOKENIZER),
        _standard("claude-opus-5", 5.00, 25.00, 512, _M, 128_000, thinking="on_can_disable", status="legacy",
                  **_NEW_TOKENIZER),
        # Claude Fable 5.2 (released 2026-11-09): $8 / $40, writes $10 / $16, hits $0.20 (0.025x); thinking always
        # on; its minimum cacheable length is not stated on the pages read.
        ModelInfo("claude-fable-5-2", _M, None, 8.00, 40.00, 10.00, 16.00, 0.20, thinking="always_on",
                  max_output_tokens=128_000, **_NEW_TOKENIZER),
        # Claude Fable 5.1: legacy since 5.2; $10 / $50, writes $12.50 / $20, hits $0.25 (0.025x).
        ModelInfo("claude-fable-5-1", _M, 512, 10.00, 50.00, 12.50, 20.00, 0.25, thinking="always_on",
                  status="legacy", max_output_tokens=128_000, **_NEW_TOKENIZER),
        # Claude Fable 5: hits $1 (0.1x).
        ModelInfo("claude-fable-5", _M, 512, 10.00, 50.00, 12.50, 20.00, 1.00, thinking="always_on",
                  status="legacy", max_output_tokens=128_000, **_NEW_TOKENIZER),
        # Claude Mythos 5.2, 5.1 and 5 (limited availability): the specifications and prices of the Fable model of
        # the same number (the pricing page lists them row by row; the Fable pages: "same specs and pricing").
        ModelInfo("claude-mythos-5-2", _M, None, 8.00, 40.00, 10.00, 16.00, 0.20, thinking="always_on",
                  max_output_tokens=128_000, limited_availability=True, **_NEW_TOKENIZER),
        ModelInfo("claude-mythos-5-1", _M, 512, 10.00, 50.00, 12.50, 20.00, 0.25, thinking="always_on",
                  status="legacy", max_output_tokens=128_000, limited_availability=True, **_NEW_TOKENIZER),
        ModelInfo("claude-mythos-5", _M, 512, 10.00, 50.00, 12.50, 20.00, 1.00, thinking="always_on",
                  status="legacy", max_output_tokens=128_000, limited_availability=True, **_NEW_TOKENIZER),
        _standard("claude-opus-4-8", 5.00, 25.00, 1024, _M, 128_000, thinking="adaptive_on_request",
                  status="legacy", **_NEW_TOKENIZER),
        _standard("claude-opus-4-7", 5.00, 25.00, 2048, _M, 128_000, thinking="adaptive_on_request",
                  status="legacy", **_NEW_TOKENIZER),
        _standard("claude-opus-4-6", 5.00, 25.00, 4096, _M, 128_000, status="legacy"),
        _standard("claude-opus-4-5", 5.00, 25.00, 4096, 200_000, 64_000, status="legacy"),
        _standard("claude-sonnet-4-6", 3.00, 15.00, 1024, _M, 64_000, status="legacy"),
        # Claude Sonnet 4.5: deprecated, retired on 2026-11-30 (kept for its prices in old reports).
        _standard("claude-sonnet-4-5", 3.00, 15.00, 1024, 200_000, 64_000, status="deprecated",
                  retires_on="2026-11-30", replacement="claude-sonnet-5-5"),
    )
}
MODEL_ALIASES: dict[str, str] = {}

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
        # Claude Sonnet 4 and Opus 4 were retired on 2026-06-15 (release notes; the caching page lists Sonnet 4
        # as retired); Opus 4.1 is retired on the Claude API (served on partner clouds only, the pricing page).
        RetiredModel("claude-sonnet-4-20250514", "2026-06-15", "claude-sonnet-5-5", ("claude-sonnet-4-0",)),
        RetiredModel("claude-opus-4-20250514", "2026-06-15", "claude-opus-5-5", ("claude-opus-4-0",)),
        RetiredModel("claude-opus-4-1", None, "claude-opus-5-5", ("claude-opus-4-1-20250805",)),
    )
}
_RETIRED_BY_ALIAS = {alias: r for r in RETIRED_MODELS.values() for alias in r.aliases}
# A snapshot id: the model id and an eight-digit date (models overview: "claude-haiku-4-5-20251001").
_SNAPSHOT = re.compile(r"-(\d{8})")
_warned_deprecated: set[str] = set()


def _match(table_keys: Iterable[str], model: str) -> str | None:
    """The key equal to ``model`` or, for a snapshot id, the key it extends with ``-YYYYMMDD`` (a real date).
    Any other suffix is another model: ``claude-fable-5-2`` is not ``claude-fable-5``."""
    keys = set(table_keys)
    if model in keys:
        return model
    for key in keys:
        if model.startswith(key) and _SNAPSHOT.fullmatch(model[len(key):]):
            try:
                datetime.datetime.strptime(model[len(key) + 1:], "%Y%m%d")
            except ValueError:
                continue
            return key
    return None


def lookup_retired(model: str, *, today: datetime.date | None = None) -> RetiredModel | None:
    """The retirement record for ``model`` (id, alias or snapshot id, also a platform's id), or None if it is
    served on ``today`` (default: today, UTC). A deprecated table entry past its retirement date counts as retired.
    The records are the Claude API's: a cloud platform may serve a model longer (its own deprecations apply)."""
    model = platform_model(model).claude_id
    if model in _RETIRED_BY_ALIAS:
        return _RETIRED_BY_ALIAS[model]
    key = _match(RETIRED_MODELS, model)
    if key:
        return RETIRED_MODELS[key]
    info = lookup_model_info(model)
    day = today or datetime.datetime.now(datetime.timezone.utc).date()
    if info is not None and info.lifecycle_on(day) == "retired":
        return RetiredModel(info.name, info.retires_on, info.replacement or "", ())
    return None


def check_not_retired(model: str, *, today: datetime.date | None = None) -> None:
    """Raise ``RetiredModelError`` naming the replacement when ``model`` is retired (no request is made); warn
    once, naming the date, when it is deprecated and still served."""
    retired = lookup_retired(model, today=today)
    if retired is not None:
        when = f" on {retired.retired_on}" if retired.retired_on else ""
        raise RetiredModelError(
            f"model {model!r} was retired by Anthropic{when} and every request to it fails; use "
            f"{retired.replacement!r} instead (see {DEPRECATIONS_SOURCE})",
            model=model, replacement=retired.replacement, retired_on=retired.retired_on,
        )
    info = lookup_model_info(model)
    if info is not None and info.status == "deprecated" and model not in _warned_deprecated:
        _warned_deprecated.add(model)
        logger.warning("model %r is deprecated: Anthropic retires it on %s, after which every request fails; move "
                       "to %r (see %s)", model, info.retires_on, info.replacement, DEPRECATIONS_SOURCE)


# Cloud platforms' model ids (their pages on platform.claude.com: build-with-claude/claude-on-amazon-bedrock-legacy,
# claude-on-amazon-bedrock, claude-on-vertex-ai). Bedrock: an optional geography prefix (``global.`` routes
# anywhere; ``us.``, ``eu.``, ``jp.``, ``apac.``, ``au.`` are cross-region inference profiles within one), then
# ``anthropic.``, the model id, and on the InvokeModel endpoint a version suffix ``-v1`` or ``-v1:0``; an ARN of
# a foundation model or system inference profile ends with such an id. Vertex AI: the model id, with ``@`` and the
# snapshot date for dated models (``claude-haiku-4-5@20251001``).
_BEDROCK_ID = re.compile(
    r"(?:arn:aws[\w-]*:bedrock:[\w-]*:\d*:(?:foundation-model|inference-profile)/)?"
    r"(?:(?P<geo>global|us|us-gov|eu|jp|apac|au|ca)\.)?anthropic\.(?P<id>claude-[a-z0-9-]+?)(?:-v\d+(?::\d+)?)?")
_VERTEX_ID = re.compile(r"(?P<id>claude-[a-z0-9-]+?)@(?P<date>\d{8})")
# Regional endpoints bill 10% over the global endpoint, "for Claude Sonnet 4.5 and future models" (the Bedrock
# and Vertex AI pages, "Global vs regional endpoints"); every model in the table is one of those.
REGIONAL_PREMIUM = 1.10


@dataclass(frozen=True)
class PlatformModel:
    """A model id as a cloud platform spells it, read: the Claude API id it names (``claude_id``, with its snapshot
    date when the platform id has one), the platform, and whether it names a regional endpoint (Bedrock's
    geography prefixes and bare in-region ids; None when the id does not say, as on Vertex AI, where the client's
    region does)."""

    claude_id: str
    platform: Literal["anthropic", "bedrock", "vertex"]
    regional: bool | None = None


def platform_model(model: str) -> PlatformModel:
    """``model`` read as a Bedrock, Vertex AI or Claude API id (see ``PlatformModel``)."""
    bedrock = _BEDROCK_ID.fullmatch(model)
    if bedrock:
        return PlatformModel(bedrock["id"], "bedrock", bedrock["geo"] != "global")
    vertex = _VERTEX_ID.fullmatch(model)
    if vertex:
        return PlatformModel(f"{vertex['id']}-{vertex['date']}", "vertex")
    return PlatformModel(model, "anthropic")


def platform_prices(info: ModelInfo, *, regional: bool) -> ModelInfo:
    """``info`` with the prices a platform bills: 10% more on every token at a regional endpoint."""
    if not regional:
        return info

    def scaled(prices: Prices) -> Prices:
        return Prices(*(round(p * REGIONAL_PREMIUM, 6) for p in (
            prices.input_per_mtok, prices.output_per_mtok, prices.cache_write_5m_per_mtok,
            prices.cache_write_1h_per_mtok, prices.cache_read_per_mtok)))

    base = scaled(info.base_prices)
    return dataclasses.replace(
        info, input_per_mtok=base.input_per_mtok, output_per_mtok=base.output_per_mtok,
        cache_write_5m_per_mtok=base.cache_write_5m_per_mtok, cache_write_1h_per_mtok=base.cache_write_1h_per_mtok,
        cache_read_per_mtok=base.cache_read_per_mtok,
        long_prompt_prices=scaled(info.long_prompt_prices) if info.long_prompt_prices else None)


def lookup_model_info(model: str) -> ModelInfo | None:
    """The table entry for ``model`` (exact id, alias, or a snapshot id of a listed model, also as a cloud
    platform spells it: ``platform_model``), or None."""
    model = platform_model(model).claude_id
    model = MODEL_ALIASES.get(model, model)
    key = _match(MODELS, model)
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


def drift(listing: Iterable[Mapping[str, Any]], *, today: datetime.date | None = None) -> list[str]:
    """Where the table disagrees with the Models API's own description of the models it serves (``GET
    /v1/models``: ``id``, ``max_input_tokens``, ``max_tokens``, ``capabilities``): a served model the table
    says is retired, a listed model the API no longer serves, a wrong context window or output limit, thinking
    rules the capabilities contradict. Empty when they agree."""
    day = today or datetime.datetime.now(datetime.timezone.utc).date()
    problems: list[str] = []
    served: set[str] = set()
    for row in listing:
        model_id = str(row.get("id", ""))
        info = lookup_model_info(model_id)
        served.add(info.name if info is not None else model_id)
        if lookup_retired(model_id, today=day) is not None:
            problems.append(f"{model_id}: served by the API, but the table says it is retired")
            continue
        if info is None:
            problems.append(f"{model_id}: served by the API, not in the table")
            continue
        window, output = row.get("max_input_tokens"), row.get("max_tokens")
        if isinstance(window, int) and window != info.context_window:
            problems.append(f"{model_id}: context window {window:,} per the API, {info.context_window:,} in the table")
        if isinstance(output, int) and info.max_output_tokens is not None and output != info.max_output_tokens:
            problems.append(f"{model_id}: max output {output:,} per the API, {info.max_output_tokens:,} in the table")
        types = ((row.get("capabilities") or {}).get("thinking") or {}).get("types") or {}
        enabled = (types.get("enabled") or {}).get("supported") if isinstance(types, Mapping) else None
        if enabled is not None and bool(enabled) != (info.thinking == "off"):
            problems.append(f"{model_id}: thinking type 'enabled' {'supported' if enabled else 'rejected'} per the "
                            f"API, the table's thinking mode is {info.thinking!r}")
    for name, info in MODELS.items():  # a limited-availability model is listed only for organizations let in
        if info.lifecycle_on(day) != "retired" and name not in served and not info.limited_availability:
            problems.append(f"{name}: in the table, not served by the API")
    return problems


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
