"""Model table look-ups and dollar arithmetic."""

from __future__ import annotations

import pytest

from ctx_retrieval import MODELS, TokenUsage, UnknownModelError
from ctx_retrieval.models import PRICES_AS_OF, PRICES_SOURCE, get_model_info, lookup_model_info
from ctx_retrieval.usage import cost_usd


def test_lookup_by_id_alias_and_dated_id() -> None:
    assert lookup_model_info("claude-3-haiku-20240307") is MODELS["claude-3-haiku-20240307"]
    assert lookup_model_info("claude-haiku-4-5-20251001") is MODELS["claude-haiku-4-5"]
    assert lookup_model_info("claude-sonnet-4-5") is MODELS["claude-sonnet-4-5"]
    assert lookup_model_info("gpt-4o") is None
    with pytest.raises(UnknownModelError, match="model_info=ModelInfo"):
        get_model_info("gpt-4o")
    assert PRICES_AS_OF and PRICES_SOURCE.startswith("https://")


def test_haiku_3_prices_and_minimum() -> None:
    haiku = MODELS["claude-3-haiku-20240307"]
    assert (haiku.input_per_mtok, haiku.output_per_mtok) == (0.25, 1.25)
    assert (haiku.cache_write_5m_per_mtok, haiku.cache_write_1h_per_mtok, haiku.cache_read_per_mtok) == (
        0.30, 0.50, 0.03)
    assert haiku.min_cacheable_tokens == 2048


def test_cost_of_each_token_kind() -> None:
    haiku = MODELS["claude-3-haiku-20240307"]
    million = 1_000_000
    assert cost_usd(TokenUsage(input_tokens=million), haiku) == pytest.approx(0.25)
    assert cost_usd(TokenUsage(output_tokens=million), haiku) == pytest.approx(1.25)
    assert cost_usd(TokenUsage(cache_creation_input_tokens=million), haiku) == pytest.approx(0.30)
    assert cost_usd(TokenUsage(cache_creation_input_tokens=million), haiku, cache_ttl="1h") == pytest.approx(0.5)
    assert cost_usd(TokenUsage(cache_read_input_tokens=million), haiku) == pytest.approx(0.03)
    sonnet = MODELS["claude-sonnet-4-5"]
    assert (sonnet.cache_write_5m_per_mtok, sonnet.cache_read_per_mtok) == (3.75, 0.30)
    assert cost_usd(TokenUsage(input_tokens=million), haiku, batch=True) == pytest.approx(0.125)


def test_usage_adds_and_round_trips() -> None:
    a, b = TokenUsage(1, 2, 3, 4), TokenUsage(10, 20, 30, 40)
    assert a + b == TokenUsage(11, 22, 33, 44)
    assert (a + b).prompt_tokens == 11 + 33 + 44
    assert TokenUsage.from_dict(a.to_dict()) == a
