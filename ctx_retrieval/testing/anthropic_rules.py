"""The rules the Anthropic API twin enforces, copied from Anthropic's documentation (read 2026-11-30).

This is the twin's own copy. It never reads ``ctx_retrieval.models``: the package's model table is what the twin
checks, so a wrong entry there (a retired default, a wrong cache minimum, a sampling parameter a model rejects)
fails a test instead of being mirrored back. Each rule names the page it comes from:

- MODELS_PAGE: https://platform.claude.com/docs/en/about-claude/models/overview and each model's overview page
  (context window, max output, thinking behaviour, tokenizer, lifecycle status).
- PRICING_PAGE: https://platform.claude.com/docs/en/about-claude/pricing ("Model pricing": base input, 5m cache
  writes, 1h cache writes, cache hits and refreshes, output; dollars per million tokens, in the page's column
  order).
- DEPRECATIONS_PAGE: https://platform.claude.com/docs/en/about-claude/model-deprecations (retired ids fail; a
  deprecated id is served until its retirement date) and the release notes (Claude Sonnet 4 and Opus 4 retired on
  2026-06-15; Claude Sonnet 4.5 retired on 2026-11-30).
- CACHING_PAGE: https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum cacheable length
  per model: 512 tokens for Haiku 5.5, Opus 5.5, Sonnet 5.5, Opus 5, Fable 5 and 5.1; at most 4 cache
  breakpoints, a longer TTL may not follow a shorter one, an entry is usable once the response that writes it
  has begun, the TTL is refreshed by each hit).
- THINKING_PAGES: https://platform.claude.com/docs/en/build-with-claude/extended-thinking ("Claude 4.7 and later
  models do not support it and reject requests that use it", 400), the Sonnet 5.5 page (Sonnet 5 turned thinking
  off with ``disabled``; Sonnet 5.5 cannot) and the Haiku 5.5 pages (thinking on by default and counted in
  ``max_tokens``; ``thinking: {"type": "disabled"}`` only at effort low, medium or high; ``temperature``/``top_p``/
  ``top_k`` rejected; assistant prefill rejected; the same text counts ~30% more tokens than on Claude Haiku 4.5).
- CONTEXT_WINDOWS_PAGE: https://platform.claude.com/docs/en/build-with-claude/context-windows (a prompt longer than
  the context window is refused with 400 ``invalid_request_error``) and STOP_REASONS_PAGE:
  https://platform.claude.com/docs/en/api/handling-stop-reasons (``model_context_window_exceeded``: generation
  stopped at the context window, the answer is incomplete).
- MODELS_API: https://platform.claude.com/docs/en/api/models/list (``GET /v1/models``: ``id``, ``display_name``,
  ``created_at``, ``max_input_tokens``, ``max_tokens``, ``capabilities``; newest first).
- ERRORS_PAGE: https://platform.claude.com/docs/en/api/errors (status and type of each error, ``request_id`` in
  every error body, 32 MB request limit, 256 MB for batches).
- RATE_LIMITS_PAGE: https://platform.claude.com/docs/en/api/rate-limits (token buckets refilled continuously;
  ``cache_read_input_tokens`` do not count toward input-tokens-per-minute on current models; output tokens are
  estimated from ``max_tokens`` when a request starts and corrected when it ends; the
  ``anthropic-ratelimit-*`` headers; limits may be enforced over shorter intervals than a minute).
- BATCHES_PAGE: https://platform.claude.com/docs/en/build-with-claude/batch-processing (100,000 requests or
  256 MB per batch; results within 24 hours, ``expires_at`` 24 hours after creation; results in any order;
  invalid requests end ``errored``; cache hits inside a batch are best effort, typically 30%-98%).
"""

from __future__ import annotations

import datetime
import itertools
import math
from dataclasses import dataclass
from typing import Any, Literal

# off: thinks only when asked (enabled+budget or adaptive); adaptive_on_request: only when asked, adaptive only;
# on_can_disable: adaptive by default, "disabled" accepted; always_on: cannot be disabled.
Thinking = Literal["off", "adaptive_on_request", "on_can_disable", "always_on"]
Status = Literal["active", "legacy", "deprecated"]

# The base tokenizer of the twin: ~4 ASCII characters per token, one token per other character. Deliberately
# not the package's planning estimate (3.6 characters), so a package that trusts its estimate is caught.
_ASCII_CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class TwinModel:
    min_cacheable: int
    tokenizer_ratio: float  # tokens per base-tokenizer token (1.3 for the tokenizer of Claude 4.7 and later)
    thinking: Thinking
    rejects_sampling: bool
    max_output: int
    context_window: int = 200_000
    # PRICING_PAGE columns in its order: base input, 5m cache writes, 1h cache writes, cache hits, output.
    pricing: tuple[float, float, float, float, float] | None = None
    status: Status = "active"
    retires: str | None = None  # ISO date a deprecated model stops being served
    rejects_prefill: bool = False
    one_sampling_param: bool = False  # temperature OR top_p, not both (Claude Haiku 4.5's migration guide)
    min_cacheable_stated: bool = True  # False: CACHING_PAGE gives no minimum for it; the twin assumes one


_NEW = 1.3
_1M = 1_000_000
_MODELS: dict[str, TwinModel] = {
    "claude-haiku-5-5": TwinModel(512, _NEW, "on_can_disable", True, 128_000, _1M, (0.10, 0.125, 0.20, 0.01, 0.50),
                                  rejects_prefill=True),
    "claude-haiku-4-5": TwinModel(4096, 1.0, "off", False, 64_000, 200_000, (1, 1.25, 2, 0.10, 5), "legacy",
                                  one_sampling_param=True),
    "claude-sonnet-5-5": TwinModel(512, _NEW, "always_on", True, 128_000, _1M, (2, 2.50, 4, 0.10, 10),
                                   rejects_prefill=True),
    "claude-sonnet-5": TwinModel(1024, _NEW, "on_can_disable", True, 128_000, _1M, (2, 2.50, 4, 0.20, 10), "legacy",
                                 rejects_prefill=True),
    "claude-opus-5-5": TwinModel(512, _NEW, "always_on", True, 128_000, _1M, (4, 5, 8, 0.20, 20),
                                 rejects_prefill=True),
    "claude-opus-5": TwinModel(512, _NEW, "on_can_disable", True, 128_000, _1M, (5, 6.25, 10, 0.50, 25), "legacy",
                               rejects_prefill=True),
    # Not stated for Fable 5.2: the twin assumes the Fable line's 512 (Fable 5 and 5.1).
    "claude-fable-5-2": TwinModel(512, _NEW, "always_on", True, 128_000, _1M, (8, 10, 16, 0.20, 40),
                                  rejects_prefill=True, min_cacheable_stated=False),
    "claude-fable-5-1": TwinModel(512, _NEW, "always_on", True, 128_000, _1M, (10, 12.50, 20, 0.25, 50), "legacy",
                                  rejects_prefill=True),
    "claude-fable-5": TwinModel(512, _NEW, "always_on", True, 128_000, _1M, (10, 12.50, 20, 1, 50), "legacy",
                                rejects_prefill=True),
    # PRICING_PAGE rows "Claude Mythos 5.x (limited availability)": the Fable rows' prices; MODELS_PAGE: same specs.
    "claude-mythos-5-2": TwinModel(512, _NEW, "always_on", True, 128_000, _1M, (8, 10, 16, 0.20, 40),
                                   rejects_prefill=True, min_cacheable_stated=False),
    "claude-mythos-5-1": TwinModel(512, _NEW, "always_on", True, 128_000, _1M, (10, 12.50, 20, 0.25, 50), "legacy",
                                   rejects_prefill=True),
    "claude-mythos-5": TwinModel(512, _NEW, "always_on", True, 128_000, _1M, (10, 12.50, 20, 1, 50), "legacy",
                                 rejects_prefill=True),
    "claude-opus-4-8": TwinModel(1024, _NEW, "adaptive_on_request", True, 128_000, _1M, (5, 6.25, 10, 0.50, 25),
                                 "legacy"),
    "claude-opus-4-7": TwinModel(2048, _NEW, "adaptive_on_request", True, 128_000, _1M, (5, 6.25, 10, 0.50, 25),
                                 "legacy"),
    "claude-opus-4-6": TwinModel(4096, 1.0, "off", False, 128_000, _1M, (5, 6.25, 10, 0.50, 25), "legacy"),
    "claude-opus-4-5": TwinModel(4096, 1.0, "off", False, 64_000, 200_000, (5, 6.25, 10, 0.50, 25), "legacy"),
    "claude-sonnet-4-6": TwinModel(1024, 1.0, "off", False, 64_000, _1M, (3, 3.75, 6, 0.30, 15), "legacy"),
    "claude-sonnet-4-5": TwinModel(1024, 1.0, "off", False, 64_000, 200_000, (3, 3.75, 6, 0.30, 15), "deprecated",
                                   retires="2026-11-30"),
}
# For ids a test declares served but the documentation pages above do not describe.
GENERIC_MODEL = TwinModel(1024, 1.0, "off", False, 64_000)

_ALIASES = {"claude-haiku-4-5-20251001": "claude-haiku-4-5", "claude-sonnet-4-5-20250929": "claude-sonnet-4-5",
            "claude-opus-4-5-20251101": "claude-opus-4-5"}

# DEPRECATIONS_PAGE and the release notes: requests to these fail.
_RETIRED = frozenset({
    "claude-3-haiku-20240307", "claude-3-5-haiku-20241022", "claude-3-5-haiku-latest",
    "claude-3-7-sonnet-20250219", "claude-3-7-sonnet-latest", "claude-3-5-sonnet-20241022",
    "claude-3-5-sonnet-20240620", "claude-3-5-sonnet-latest", "claude-3-opus-20240229", "claude-3-opus-latest",
    "claude-3-sonnet-20240229", "claude-2.1", "claude-2.0", "claude-instant-1.2", "claude-opus-4-1",
    "claude-opus-4-1-20250805", "claude-opus-4-20250514", "claude-opus-4-0", "claude-sonnet-4-20250514",
    "claude-sonnet-4-0",
})

MAX_BREAKPOINTS = 4
MAX_REQUEST_BYTES = 32 * 1024 * 1024
MAX_BATCH_REQUESTS = 100_000
MAX_BATCH_BYTES = 256 * 1024 * 1024
BATCH_EXPIRY_S = 24 * 3600
_TTL_S = {"5m": 300.0, "1h": 3600.0}


def _today() -> datetime.date:
    return datetime.datetime.now(datetime.timezone.utc).date()


def retired(model: str, today: datetime.date | None = None) -> bool:
    """True when requests to ``model`` fail: a retired id, or a deprecated one on or after its retirement date."""
    if model in _RETIRED:
        return True
    rules = _MODELS.get(_ALIASES.get(model, model))
    return bool(rules and rules.retires and (today or _today()) >= datetime.date.fromisoformat(rules.retires))


def lookup(model: str) -> TwinModel | None:
    """The twin's documented rules for ``model`` (served or not), or None for an id the pages do not describe."""
    return _MODELS.get(_ALIASES.get(model, model))


def served_models(today: datetime.date | None = None) -> list[str]:
    """The ids the API serves on ``today`` (the Models API lists them)."""
    return [name for name in _MODELS if not retired(name, today)]


def count_tokens(text: str, model: str) -> int:
    """The twin's token count of ``text`` for ``model`` (its "real" tokenizer)."""
    if not text:
        return 0
    rules = lookup(model)
    ascii_chars = len(text) if text.isascii() else sum(1 for ch in text if ord(ch) < 128)
    base = ascii_chars / _ASCII_CHARS_PER_TOKEN + (len(text) - ascii_chars)
    return max(1, math.ceil(base * (rules.tokenizer_ratio if rules else 1.0)))


def ttl_seconds(control: dict[str, Any]) -> float:
    return _TTL_S.get(str(control.get("ttl", "5m")), 300.0)


def _blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str):
        blocks.append({"type": "text", "text": system})
    elif isinstance(system, list):
        blocks.extend(b for b in system if isinstance(b, dict))
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(b for b in content if isinstance(b, dict))
    return blocks


def prompt_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    return _blocks(body)


def validate_request(body: dict[str, Any], rules: TwinModel) -> str | None:
    """The message of the 400 ``invalid_request_error`` the API answers this request with, or None if valid."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens: required, a positive integer"
    if max_tokens > rules.max_output:
        return f"max_tokens: {max_tokens} > {rules.max_output}, the maximum allowed for this model"
    if rules.rejects_sampling:
        for name in ("temperature", "top_p", "top_k"):
            if name in body:
                return f"{name}: sampling parameters are not supported for this model; remove {name}"
    elif rules.one_sampling_param and "temperature" in body and "top_p" in body:
        return "temperature and top_p cannot both be specified for this model"
    if rules.rejects_prefill and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
        return "this model does not support assistant message prefill; end messages with a user turn"
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    config = body.get("output_config")
    effort = config.get("effort") if isinstance(config, dict) else None
    if kind == "disabled" and rules.thinking == "always_on":
        return "thinking: this model always thinks; thinking.type 'disabled' is not supported"
    if kind == "disabled" and effort in ("xhigh", "max"):
        return "thinking: thinking can be disabled only at effort low, medium or high"
    if kind == "enabled" and rules.thinking != "off":
        return "thinking: type 'enabled' with budget_tokens is not supported for this model; use 'adaptive'"
    breakpoints = [b["cache_control"] for b in _blocks(body) if isinstance(b.get("cache_control"), dict)]
    if len(breakpoints) > MAX_BREAKPOINTS:
        return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {len(breakpoints)}."
    ttls = [ttl_seconds(c) for c in breakpoints]
    if any(later > earlier for earlier, later in itertools.pairwise(ttls)):
        return "cache_control: a 1h TTL entry must not come after a 5m TTL entry"
    return None


def thinks(body: dict[str, Any], rules: TwinModel) -> bool:
    """Whether this request's answer begins with thinking (the model's default unless disabled)."""
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if rules.thinking in ("off", "adaptive_on_request"):
        return kind in ("enabled", "adaptive")
    return kind != "disabled"
