"""Model table look-ups, retirements, price tiers and dollar arithmetic; the table checked against the twin."""

from __future__ import annotations

import dataclasses
import datetime
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
    ModelInfo,
    check_not_retired,
    cost_usd,
    drift,
    get_model_info,
    lookup_model_info,
    request_cost_usd,
)
from ctx_retrieval.testing import FakeAnthropicServer, anthropic_rules

MILLION = 1_000_000


def test_lookup_by_id_alias_and_dated_id() -> None:
    assert lookup_model_info("claude-haiku-5-5") is MODELS["claude-haiku-5-5"]
    assert lookup_model_info("claude-haiku-4-5-20251001") is MODELS["claude-haiku-4-5"]
    assert lookup_model_info("claude-sonnet-4-5-20250929") is MODELS["claude-sonnet-4-5"]
    # A dated id matches its own model, never a shorter id that happens to be its prefix.
    assert lookup_model_info("claude-opus-4-5-20251101") is MODELS["claude-opus-4-5"]
    assert lookup_model_info("claude-opus-4-50") is None
    assert lookup_model_info("gpt-4o") is None
    with pytest.raises(UnknownModelError, match="model_info=ModelInfo"):
        get_model_info("gpt-4o")
    assert PRICES_AS_OF == "2026-12-01" and PRICES_SOURCE.startswith("https://platform.claude.com/")


@pytest.mark.parametrize("model", ["claude-sonnet-5-6", "claude-opus-5-6", "claude-fable-5-3", "claude-fable-5-9-1",
                                   "claude-fable-5-20261399", "claude-haiku-5-5-2026"])
def test_only_a_real_snapshot_date_extends_a_model_id(model: str) -> None:
    # Any other suffix is another model: it must not be priced as its prefix (Fable 5.2 is not Fable 5).
    assert lookup_model_info(model) is None


def test_claude_fable_5_2_is_priced_as_itself() -> None:
    fable = lookup_model_info("claude-fable-5-2")
    assert fable is MODELS["claude-fable-5-2"] and fable is not MODELS["claude-fable-5"]
    assert (fable.input_per_mtok, fable.output_per_mtok, fable.cache_write_5m_per_mtok, fable.cache_write_1h_per_mtok,
            fable.cache_read_per_mtok) == (8.0, 40.0, 10.0, 16.0, 0.20)
    assert cost_usd(TokenUsage(input_tokens=MILLION, cache_read_input_tokens=MILLION), fable) == pytest.approx(8.20)
    assert lookup_model_info("claude-fable-5-2-20261109") is fable


@pytest.mark.parametrize(("model", "setting", "value"), [
    ("claude-opus-5-5", "min_cacheable_tokens", 512), ("claude-sonnet-5-5", "min_cacheable_tokens", 512),
    ("claude-fable-5-1", "min_cacheable_tokens", 512), ("claude-sonnet-5", "thinking", "on_can_disable"),
    ("claude-opus-4-7", "thinking", "adaptive_on_request"), ("claude-opus-4-8", "thinking", "adaptive_on_request"),
])
def test_documented_rules_of_current_models(model: str, setting: str, value: object) -> None:
    assert getattr(MODELS[model], setting) == value


def test_lifecycle_sonnet_4_retired_sonnet_4_5_retired_at_its_date(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(RetiredModelError, match=r"on 2026-06-15.*'claude-sonnet-5-5'") as caught:
        check_not_retired("claude-sonnet-4-20250514")
    assert caught.value.retired_on == "2026-06-15"
    with pytest.raises(RetiredModelError):
        check_not_retired("claude-sonnet-4-0")  # its alias
    sonnet_45 = MODELS["claude-sonnet-4-5"]
    assert (sonnet_45.status, sonnet_45.retires_on, sonnet_45.replacement) == (
        "deprecated", "2026-11-30", "claude-sonnet-5-5")
    with caplog.at_level(logging.WARNING, logger="ctx_retrieval.models"):
        check_not_retired("claude-sonnet-4-5-20250929", today=datetime.date(2026, 11, 29))  # still served: a warning
    assert any("retires it on 2026-11-30" in r.getMessage() for r in caplog.records)
    for day in (datetime.date(2026, 11, 30), datetime.date(2026, 12, 1)):
        with pytest.raises(RetiredModelError, match="retired by Anthropic on 2026-11-30"):
            check_not_retired("claude-sonnet-4-5", today=day)
    assert sonnet_45.lifecycle_on(datetime.date(2026, 11, 29)) == "deprecated"
    assert MODELS["claude-haiku-5-5"].lifecycle_on(datetime.date(2030, 1, 1)) == "active"


def test_a_retired_deprecated_model_fails_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    # Sonnet 4.5 retired on 2026-11-30: from then on every request 404s; the package refuses before the first.
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: (_ for _ in ()).throw(AssertionError("socket")))
    if datetime.datetime.now(datetime.timezone.utc).date() >= datetime.date(2026, 11, 30):
        with pytest.raises(RetiredModelError):
            AnthropicProvider("claude-sonnet-4-5", api_key="sk-ant-test-000000000000")
    with FakeAnthropicServer(today=datetime.date(2026, 12, 1)) as twin:
        assert "claude-sonnet-4-5" not in [row["id"] for row in twin.models_listing()["data"]]
        assert twin.model_rules("claude-sonnet-4-5") is None
    with FakeAnthropicServer(today=datetime.date(2026, 11, 29)) as twin:
        assert twin.model_rules("claude-sonnet-4-5") is not None  # the twin served it until its date


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


def table_mismatches(models: dict[str, ModelInfo], twin_rules: dict[str, anthropic_rules.TwinModel]) -> list[str]:
    """Where the package's table and the twin's own copy of the documentation disagree: prices, windows, output
    limits, thinking, sampling, tokenizer, cache minimum (where stated) and lifecycle."""
    problems = []
    for name in sorted(set(models) | set(twin_rules)):
        info, rules = models.get(name), twin_rules.get(name)
        if info is None or rules is None:
            problems.append(f"{name}: only in the {'twin' if info is None else 'table'}")
            continue
        prices = (info.input_per_mtok, info.cache_write_5m_per_mtok, info.cache_write_1h_per_mtok,
                  info.cache_read_per_mtok, info.output_per_mtok)
        if rules.pricing is None or any(abs(a - b) > 1e-9 for a, b in zip(prices, rules.pricing, strict=True)):
            problems.append(f"{name}: prices {prices} vs {rules.pricing}")
        if info.min_cacheable_tokens is not None and info.min_cacheable_tokens != rules.min_cacheable:
            problems.append(f"{name}: cache minimum {info.min_cacheable_tokens} vs {rules.min_cacheable}")
        if (info.min_cacheable_tokens is None) == rules.min_cacheable_stated:
            problems.append(f"{name}: the cache minimum is stated in one copy only")
        for mine, theirs, what in ((info.context_window, rules.context_window, "window"),
                                   (info.max_output_tokens, rules.max_output, "max output"),
                                   (info.thinking, rules.thinking, "thinking"),
                                   (info.rejects_sampling_params, rules.rejects_sampling, "sampling"),
                                   (info.tokenizer_ratio, rules.tokenizer_ratio, "tokenizer"),
                                   (info.status, rules.status, "status"), (info.retires_on, rules.retires, "retires")):
            if mine != theirs:
                problems.append(f"{name}: {what} {mine!r} vs {theirs!r}")
    return problems


def test_the_table_agrees_with_the_twins_own_copy_of_the_documentation() -> None:
    """Two copies of the documented rules, kept apart on purpose: a wrong entry in either fails here."""
    twin_rules = {name: rules for name in MODELS if (rules := anthropic_rules.lookup(name)) is not None}
    twin_rules.update({name: anthropic_rules.lookup(name) for name in anthropic_rules.served_models(  # type: ignore[misc]
        datetime.date(2026, 1, 1))})
    assert table_mismatches(MODELS, twin_rules) == []
    for name, retired in RETIRED_MODELS.items():
        assert anthropic_rules.retired(name), f"{name} is retired in the table but served by the twin"
        assert all(anthropic_rules.retired(alias) for alias in retired.aliases)
    # A wrong price, window or lifecycle in either copy is caught.
    wrong = dict(MODELS)
    wrong["claude-fable-5-2"] = dataclasses.replace(MODELS["claude-fable-5-2"], cache_read_per_mtok=1.0)
    wrong["claude-opus-5-5"] = dataclasses.replace(MODELS["claude-opus-5-5"], context_window=200_000)
    wrong["claude-sonnet-4-6"] = dataclasses.replace(MODELS["claude-sonnet-4-6"], status="active")
    found = table_mismatches(wrong, twin_rules)
    assert [p.split(":")[0] for p in found] == ["claude-fable-5-2", "claude-opus-5-5", "claude-sonnet-4-6"]
    twin_wrong = dict(twin_rules)
    twin_wrong["claude-haiku-5-5"] = dataclasses.replace(twin_rules["claude-haiku-5-5"],
                                                         pricing=(0.10, 0.125, 0.20, 0.01, 0.55))
    assert [p.split(":")[0] for p in table_mismatches(MODELS, twin_wrong)] == ["claude-haiku-5-5"]


def test_drift_against_the_models_api_of_the_twin() -> None:
    today = datetime.date(2026, 12, 1)
    with FakeAnthropicServer(today=today) as twin:
        listing = twin.models_listing()["data"]
    assert drift(listing, today=today) == []
    bad = [dict(row, max_input_tokens=200_000) if row["id"] == "claude-opus-5-5" else row for row in listing]
    bad.append({"id": "claude-sonnet-4-20250514", "max_input_tokens": 200_000})
    bad = [row for row in bad if row["id"] != "claude-haiku-4-5"]
    assert sorted(drift(bad, today=today)) == [
        "claude-haiku-4-5: in the table, not served by the API",
        "claude-opus-5-5: context window 200,000 per the API, 1,000,000 in the table",
        "claude-sonnet-4-20250514: served by the API, but the table says it is retired",
    ]


def test_usage_is_read_under_each_apis_field_names() -> None:
    from ctx_retrieval.providers.messages import usage_from_fields

    anthropic = {"input_tokens": 50, "output_tokens": 20, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 900}
    openai = {"prompt_tokens": 950, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 900}}
    langchain = {"input_tokens": 950, "output_tokens": 20, "input_token_details": {"cache_read": 900}}
    expected = TokenUsage(input_tokens=50, output_tokens=20, cache_read_input_tokens=900)
    assert usage_from_fields(anthropic) == usage_from_fields(openai) == usage_from_fields(langchain) == expected
    assert usage_from_fields(None) == TokenUsage()  # an answer without usage counts nothing, invents nothing


def test_a_report_names_a_chunk_once_and_a_run_without_requests_costs_nothing() -> None:
    from ctx_retrieval import SourceDocument, split_into_chunks
    from ctx_retrieval.usage import FailedChunk, RunReport

    document = SourceDocument("advanced/x.md", "Alpha paragraph.\n\nBeta paragraph.")
    chunks = split_into_chunks(document, ["Alpha paragraph.", "Beta paragraph."])
    assert chunks[0].id.startswith("advanced/x.md")
    report = RunReport(provider="p", model="served-by-cache", prompt_version="v", chunks=2, skipped=[
        FailedChunk(document, chunks[0], tuple(chunks), "not_attempted", "the run stopped before this chunk")])
    text = report.format()
    assert f"no context: {chunks[0].id}: not_attempted" in text and "advanced/x.md/advanced" not in text
    assert "cost $0.0000 (no request was made)" in text and "unknown" not in text
    report.requests = 1
    assert "cost unknown (no price for this model)" in report.format()
