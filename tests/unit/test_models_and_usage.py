"""Model table look-ups, retirements, price tiers and dollar arithmetic; the table checked against the twin."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest

from ctx_retrieval import MODELS, AnthropicProvider, RetiredModelError, TokenUsage, UnknownModelError
from ctx_retrieval.models import (
    DEPRECATIONS_SOURCE,
    PRICES_AS_OF,
    PRICES_SOURCE,
    RETIRED_MODELS,
    check_not_retired,
    cost_usd,
    get_model_info,
    lookup_model_info,
    request_cost_usd,
)
from ctx_retrieval.testing import anthropic_rules

MILLION = 1_000_000


def test_lookup_by_id_alias_and_dated_id() -> None:
    assert lookup_model_info("claude-haiku-5-5") is MODELS["claude-haiku-5-5"]
    assert lookup_model_info("claude-haiku-4-5-20251001") is MODELS["claude-haiku-4-5"]
    assert lookup_model_info("claude-sonnet-4-5-20250929") is MODELS["claude-sonnet-4-5"]
    assert lookup_model_info("claude-sonnet-4-0") is MODELS["claude-sonnet-4-20250514"]
    # A dated id matches its own model, never a shorter id that happens to be its prefix.
    assert lookup_model_info("claude-opus-4-5-20251101") is MODELS["claude-opus-4-5"]
    assert lookup_model_info("claude-opus-4-50") is None
    assert lookup_model_info("gpt-4o") is None
    with pytest.raises(UnknownModelError, match="model_info=ModelInfo"):
        get_model_info("gpt-4o")
    assert PRICES_AS_OF == "2026-11-30" and PRICES_SOURCE.startswith("https://platform.claude.com/")


def test_default_model_is_the_current_haiku() -> None:
    assert AnthropicProvider(api_key="sk-ant-test-000000000000").model == "claude-haiku-5-5"
    assert AnthropicProvider(api_key="sk-ant-test-000000000000").model_info is MODELS["claude-haiku-5-5"]


@pytest.mark.parametrize("model", ["claude-3-haiku-20240307", "claude-3-5-haiku-20241022", "claude-3-5-haiku-latest",
                                   "claude-3-7-sonnet-20250219", "claude-opus-4-1-20250805"])
def test_retired_model_raises_before_any_socket_opens(model: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a socket was opened for a retired model")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    with pytest.raises(RetiredModelError) as caught:
        AnthropicProvider(model, api_key="sk-ant-test-000000000000")
    error = caught.value
    assert isinstance(error, ValueError) and error.model == model and error.setting == "model"
    assert error.replacement in MODELS and error.replacement in str(error) and DEPRECATIONS_SOURCE in str(error)
    with pytest.raises(RetiredModelError):
        get_model_info(model)


def test_retirement_dates_and_replacements() -> None:
    haiku3 = RETIRED_MODELS["claude-3-haiku-20240307"]
    assert (haiku3.retired_on, haiku3.replacement) == ("2026-04-20", "claude-haiku-5-5")
    with pytest.raises(RetiredModelError, match=r"retired by Anthropic on 2026-04-20.*'claude-haiku-5-5'"):
        check_not_retired("claude-3-haiku-20240307")
    check_not_retired("claude-haiku-5-5")  # active: no error
    assert all(r.replacement in MODELS and r.name not in MODELS for r in RETIRED_MODELS.values())


def test_unknown_model_passes_through_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ctx_retrieval.providers.anthropic"):
        first = AnthropicProvider("claude-experimental-7", api_key="sk-ant-test-000000000000")
        AnthropicProvider("claude-experimental-7", api_key="sk-ant-test-000000000000")
    assert first.model == "claude-experimental-7" and first.model_info is None
    assert sum("cost figures are unknown" in r.getMessage() for r in caplog.records) == 1


def test_haiku_5_5_prices_minimum_and_rules() -> None:
    haiku = MODELS["claude-haiku-5-5"]
    assert (haiku.input_per_mtok, haiku.output_per_mtok) == (0.10, 0.50)
    assert (haiku.cache_write_5m_per_mtok, haiku.cache_write_1h_per_mtok, haiku.cache_read_per_mtok) == (
        0.125, 0.20, 0.01)
    assert haiku.min_cacheable_tokens == 512 and haiku.context_window == 1_000_000
    assert haiku.long_prompt_threshold == 100_000 and haiku.long_prompt_prices is not None
    assert haiku.long_prompt_prices.input_per_mtok == pytest.approx(5 * haiku.input_per_mtok)
    assert haiku.thinking == "on_can_disable" and haiku.rejects_sampling_params and haiku.tokenizer_ratio == 1.3
    legacy = MODELS["claude-haiku-4-5"]
    assert (legacy.input_per_mtok, legacy.output_per_mtok, legacy.min_cacheable_tokens) == (1.0, 5.0, 4096)
    # Documented exceptions to the 0.1x cache-hit multiplier are kept as listed.
    assert MODELS["claude-opus-5-5"].cache_read_per_mtok == pytest.approx(0.05 * 4.0)
    assert MODELS["claude-fable-5-1"].cache_read_per_mtok == pytest.approx(0.025 * 10.0)


def test_cost_of_each_token_kind_and_the_batch_discount() -> None:
    haiku = MODELS["claude-haiku-5-5"]
    assert cost_usd(TokenUsage(input_tokens=MILLION), haiku) == pytest.approx(0.10)
    assert cost_usd(TokenUsage(output_tokens=MILLION), haiku) == pytest.approx(0.50)
    assert cost_usd(TokenUsage(cache_creation_input_tokens=MILLION), haiku) == pytest.approx(0.125)
    assert cost_usd(TokenUsage(cache_creation_input_tokens=MILLION), haiku, cache_ttl="1h") == pytest.approx(0.20)
    assert cost_usd(TokenUsage(cache_read_input_tokens=MILLION), haiku) == pytest.approx(0.01)
    assert cost_usd(TokenUsage(input_tokens=MILLION), haiku, batch=True) == pytest.approx(0.05)
    sonnet = MODELS["claude-sonnet-4-5"]
    assert (sonnet.cache_write_5m_per_mtok, sonnet.cache_read_per_mtok) == (3.75, 0.30)


def test_a_long_prompt_is_billed_whole_at_the_dearer_tier() -> None:
    haiku = MODELS["claude-haiku-5-5"]
    at_threshold = TokenUsage(input_tokens=100_000, output_tokens=100)
    over = TokenUsage(input_tokens=60_000, cache_read_input_tokens=40_001, output_tokens=100)
    assert request_cost_usd(at_threshold, haiku) == pytest.approx((100_000 * 0.10 + 100 * 0.50) / MILLION)
    assert request_cost_usd(over, haiku) == pytest.approx((60_000 * 0.50 + 40_001 * 0.05 + 100 * 2.50) / MILLION)
    # Summed usage keeps the dearer requests apart.
    total = at_threshold + over
    assert cost_usd(total, haiku, long_prompt_usage=over) == pytest.approx(
        request_cost_usd(at_threshold, haiku) + request_cost_usd(over, haiku))


def test_usage_adds_subtracts_and_round_trips() -> None:
    a, b = TokenUsage(1, 2, 3, 4), TokenUsage(10, 20, 30, 40)
    assert a + b == TokenUsage(11, 22, 33, 44) and (a + b) - b == a
    assert (a + b).prompt_tokens == 11 + 33 + 44
    assert TokenUsage.from_dict(a.to_dict()) == a


def test_the_table_agrees_with_the_twins_own_copy_of_the_documentation() -> None:
    """Two copies of the documented rules, kept apart on purpose: a wrong entry in either fails here."""
    for name, info in MODELS.items():
        rules = anthropic_rules.lookup(name)
        assert rules is not None, f"{name} is in the table but the twin does not serve it"
        if info.min_cacheable_tokens is not None:
            assert info.min_cacheable_tokens == rules.min_cacheable, name
        assert info.tokenizer_ratio == rules.tokenizer_ratio, name
        assert info.rejects_sampling_params == rules.rejects_sampling, name
        assert info.thinking == rules.thinking, name
        assert info.max_output_tokens == rules.max_output, name
    for name, retired in RETIRED_MODELS.items():
        assert anthropic_rules.retired(name), f"{name} is retired in the table but served by the twin"
        assert all(anthropic_rules.retired(alias) for alias in retired.aliases)


def test_usage_is_read_under_each_apis_field_names() -> None:
    from ctx_retrieval.providers.messages import usage_from_fields

    anthropic = {"input_tokens": 50, "output_tokens": 20, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 900}
    openai = {"prompt_tokens": 950, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 900}}
    langchain = {"input_tokens": 950, "output_tokens": 20, "input_token_details": {"cache_read": 900}}
    expected = TokenUsage(input_tokens=50, output_tokens=20, cache_read_input_tokens=900)
    assert usage_from_fields(anthropic) == usage_from_fields(openai) == usage_from_fields(langchain) == expected
    assert usage_from_fields(None) == TokenUsage()  # an answer without usage counts nothing, invents nothing
