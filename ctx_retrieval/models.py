"""Model limits and list prices used for windowing, cache warnings and cost reports.

Prices are US dollars per million tokens, standard (non-batch) tier, from Anthropic's pricing page
(https://docs.anthropic.com/en/docs/about-claude/pricing) as recorded on ``PRICES_AS_OF``; cache writes cost
1.25x input (5-minute TTL) or 2x input (1-hour TTL), cache reads 0.1x input (Claude 3 Haiku's are listed
rounded: $0.30, $0.50, $0.03), the Message Batches API 50%.
Minimum cacheable prompt lengths are from Anthropic's prompt-caching guide. Prices change: pass your own
``ModelInfo`` (``AnthropicProvider(model_info=...)``) when they do.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import UnknownModelError

__all__ = ["MODELS", "PRICES_AS_OF", "PRICES_SOURCE", "ModelInfo", "get_model_info", "lookup_model_info"]

PRICES_AS_OF = "2026-11-29"
PRICES_SOURCE = "https://docs.anthropic.com/en/docs/about-claude/pricing"


@dataclass(frozen=True)
class ModelInfo:
    """Limits and list prices of one model (dollars per million tokens)."""

    name: str
    context_window: int
    min_cacheable_tokens: int
    input_per_mtok: float
    output_per_mtok: float
    cache_write_5m_per_mtok: float
    cache_write_1h_per_mtok: float
    cache_read_per_mtok: float

    @classmethod
    def from_input_price(
        cls, name: str, *, input_per_mtok: float, output_per_mtok: float, min_cacheable_tokens: int,
        context_window: int = 200_000,
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
        )


def _m(name: str, inp: float, out: float, min_cache: int) -> ModelInfo:
    return ModelInfo.from_input_price(name, input_per_mtok=inp, output_per_mtok=out, min_cacheable_tokens=min_cache)


# Keys are model ids or id prefixes (aliases such as "claude-haiku-4-5" and dated ids both resolve).
MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in (
        # Haiku 3's cache prices are listed rounded: $0.30 write (5m), $0.50 write (1h), $0.03 read.
        ModelInfo("claude-3-haiku-20240307", 200_000, 2048, 0.25, 1.25, 0.30, 0.50, 0.03),
        _m("claude-3-5-haiku", 0.80, 4.00, 2048),
        _m("claude-haiku-4-5", 1.00, 5.00, 4096),
        _m("claude-3-5-sonnet", 3.00, 15.00, 1024),
        _m("claude-3-7-sonnet", 3.00, 15.00, 1024),
        _m("claude-sonnet-4-20250514", 3.00, 15.00, 1024),
        _m("claude-sonnet-4-5", 3.00, 15.00, 1024),
        _m("claude-sonnet-4-6", 3.00, 15.00, 2048),
        _m("claude-opus-4-20250514", 15.00, 75.00, 1024),
        _m("claude-opus-4-1", 15.00, 75.00, 1024),
        _m("claude-opus-4-5", 5.00, 25.00, 4096),
        _m("claude-opus-4-6", 5.00, 25.00, 4096),
    )
}


def lookup_model_info(model: str) -> ModelInfo | None:
    """The table entry for ``model`` (exact id, or the longest known prefix of a dated id), or None."""
    if model in MODELS:
        return MODELS[model]
    matches = [key for key in MODELS if model.startswith(key)]
    return MODELS[max(matches, key=len)] if matches else None


def get_model_info(model: str) -> ModelInfo:
    """Like ``lookup_model_info`` but raises ``UnknownModelError`` naming the fix."""
    info = lookup_model_info(model)
    if info is None:
        known = ", ".join(sorted(MODELS))
        raise UnknownModelError(
            f"no limits or prices are known for model {model!r}; pass model_info=ModelInfo(...) with its "
            f"context window, minimum cacheable tokens and prices, or use one of: {known}",
            model=model,
        )
    return info
