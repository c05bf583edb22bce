"""Claude on Amazon Bedrock and Google Vertex AI (issue 26, part 4), against the twin's platform routes: the SDK's own
platform clients (``AsyncAnthropicBedrockMantle``, ``AsyncAnthropicBedrock``, ``AsyncAnthropicVertex``) and a
wrapped LangChain ``ChatBedrock`` all cache the document (one cache write, the other chunks read it), platform model
ids resolve to the model table with the platform's prices (10% more at a regional endpoint), budgets run, token
counts go where the platform offers them, batch mode is refused where it offers none, and the platforms' own error
shapes become the same typed errors."""

from __future__ import annotations

import json
import pickle
from typing import Any

import httpx
import pytest

from ctx_retrieval import ContextGenerator
from ctx_retrieval.errors import ConfigurationError, ProviderPermissionError, UnknownModelError
from ctx_retrieval.models import MODELS
from ctx_retrieval.providers import BedrockProvider, VertexProvider
from tests.helpers import make_document

pytest.importorskip("anthropic")

KEY = "bedrock-api-key-0000000000"
TOKEN = "ya29.vertex-token-000000000"


def bedrock(server: Any, model: str = "anthropic.claude-haiku-5-5", **kwargs: Any) -> BedrockProvider:
    base = server.base_url if kwargs.get("endpoint") == "invoke" else server.base_url + "/anthropic"
    return BedrockProvider(model, aws_region="us-east-1", api_key=KEY, base_url=base, endpoint_id="twin", **kwargs)


def vertex(server: Any, model: str = "claude-haiku-5-5", region: str = "global", **kwargs: Any) -> VertexProvider:
    return VertexProvider(model, project_id="ctx-project", region=region, access_token=TOKEN,
                          base_url=server.base_url + "/v1", endpoint_id="twin", **kwargs)


PROVIDERS = {
    "bedrock-messages": lambda s: bedrock(s),
    "bedrock-invoke": lambda s: bedrock(s, "global.anthropic.claude-haiku-5-5-v1:0", endpoint="invoke"),
    "vertex": lambda s: vertex(s),
}


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_each_platform_client_caches_the_document_and_prices_the_run(name: str, fake_server: Any) -> None:
    provider = PROVIDERS[name](fake_server)
    items = [make_document("handbook", paragraphs=12)]
    run = ContextGenerator(provider, cache=False, budget_usd=1.0).contextualize_many(items)
    assert run.report.generated == 12 and all(r.context for r in run)
    totals = fake_server.totals()
    assert totals["cache_writes"] == 1 and run.report.usage.cache_read_input_tokens > 0
    assert {r.platform for r in fake_server.messages} == {name.split("-")[0]}
    assert provider.model_info is not None and provider.model_info.name == "claude-haiku-5-5"
    assert run.report.cost_usd is not None and run.report.cost_usd > 0
    assert "key-0000" not in repr(provider) and "token-0000" not in repr(provider)
    assert "key-0000" not in str(pickle.dumps(provider)) and "token-0000" not in str(pickle.dumps(provider))
    assert "twin" in provider.cache_namespace and provider.name.startswith("anthropic-")


def test_regional_endpoints_bill_ten_percent_more(fake_server: Any) -> None:
    base = MODELS["claude-haiku-5-5"].input_per_mtok
    assert vertex(fake_server, region="global").model_info.input_per_mtok == base
    regional = vertex(fake_server, region="us-east5").model_info
    assert regional is not None and regional.input_per_mtok == pytest.approx(base * 1.1)
    invoke = "invoke"
    assert bedrock(fake_server, "global.anthropic.claude-haiku-5-5-v1:0",
                   endpoint=invoke).model_info.input_per_mtok == base
    assert bedrock(fake_server, "eu.anthropic.claude-haiku-5-5-v1:0",
                   endpoint=invoke).model_info.input_per_mtok == pytest.approx(base * 1.1)
    items = [make_document("handbook", paragraphs=12)]
    costs = []
    for region in ("global", "us-east5"):
        fake_server.reset()  # the twin's prompt cache too: both runs write and read the same
        costs.append(ContextGenerator(vertex(fake_server, region=region), cache=False).contextualize_many(
            items).report.cost_usd)
    assert costs[1] == pytest.approx(costs[0] * 1.1)


def test_token_counts_go_where_the_platform_offers_them(fake_server: Any) -> None:
    items = [make_document("handbook", paragraphs=12)]
    for provider, counts in ((bedrock(fake_server), True), (vertex(fake_server), True),
                             (bedrock(fake_server, "global.anthropic.claude-haiku-5-5-v1:0", endpoint="invoke"),
                              False)):
        fake_server.reset()
        ContextGenerator(provider, cache=False, exact_token_counts=True).contextualize_many(items)
        assert bool(fake_server.token_counts()) is counts, provider


def test_batch_mode_is_refused_where_the_platform_has_no_batches(fake_server: Any, tmp_path: Any) -> None:
    for provider in (bedrock(fake_server), vertex(fake_server)):
        generator = ContextGenerator(provider, cache=tmp_path / "c.sqlite")
        with pytest.raises(ConfigurationError, match="no Message Batches"):
            generator.contextualize_many_batched([make_document("a", paragraphs=3)])


def test_bedrock_throttling_without_retry_after_is_retried(fake_server: Any) -> None:
    fake_server.script_faults(["rate_limit", "rate_limit", None])
    run = ContextGenerator(bedrock(fake_server), cache=False).contextualize_many([make_document("a", paragraphs=3)])
    assert run.report.generated == 3 and run.report.rate_limited == 2
    throttled = [r for r in fake_server.requests if r.status == 429]
    assert len(throttled) == 2 and all(r.platform == "bedrock" for r in throttled)


def test_platform_errors_become_typed_errors_naming_the_platform(fake_server: Any) -> None:
    fake_server.script_faults(["permission"])
    with pytest.raises(ProviderPermissionError, match="Amazon Bedrock refused"):
        ContextGenerator(bedrock(fake_server), cache=False).contextualize_many([make_document("a", paragraphs=2)])
    with pytest.raises(UnknownModelError, match="Vertex AI does not know"):
        ContextGenerator(vertex(fake_server, "claude-nonesuch-9"), cache=False).contextualize_many(
            [make_document("a", paragraphs=2)])
    with pytest.raises(ConfigurationError, match="not a Bedrock model id"):
        BedrockProvider("claude-haiku-5-5", aws_region="us-east-1")


def test_the_twin_keeps_each_platform_s_rules_and_error_shapes(fake_server: Any) -> None:
    message = {"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    invoke = f"{fake_server.base_url}/model/global.anthropic.claude-haiku-5-5-v1:0/invoke"
    answer = httpx.post(invoke, json={**message, "model": "claude-haiku-5-5", "anthropic_version": "x"})
    assert answer.status_code == 400 and "model is named in the URL" in answer.json()["message"]
    assert answer.headers["x-amzn-ErrorType"].startswith("ValidationException")
    assert httpx.post(invoke, json=message).status_code == 400  # no anthropic_version in the body
    ok = httpx.post(invoke, json={**message, "anthropic_version": "bedrock-2023-05-31"})
    assert ok.status_code == 200 and int(ok.headers["x-amzn-bedrock-output-token-count"]) == ok.json()[
        "usage"]["output_tokens"]
    raw = (f"{fake_server.base_url}/v1/projects/p/locations/global/publishers/anthropic/models/"
           "claude-nope@20250101:rawPredict")
    missing = httpx.post(raw, json={**message, "anthropic_version": "vertex-2023-10-16"})
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"
    batches = httpx.post(f"{fake_server.base_url}/anthropic/v1/messages/batches", json={"requests": []})
    assert batches.status_code == 404
    assert json.loads(batches.content)  # an error body, in the platform's shape


def test_a_wrapped_chat_bedrock_caches_and_is_priced(fake_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    langchain_aws = pytest.importorskip("langchain_aws")
    from langchain_ctx import LangChainChatProvider

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEFAKEFAKE0000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret-0000000000000000")
    model = langchain_aws.ChatBedrock(model_id="us.anthropic.claude-haiku-4-5-20251001-v1:0", region_name="us-east-1",
                                      endpoint_url=fake_server.base_url, provider="anthropic")
    provider = LangChainChatProvider(model)
    assert provider.cache_control and provider.model_info is not None
    run = ContextGenerator(provider, cache=False, budget_usd=1.0).contextualize_many(
        [make_document("handbook", paragraphs=60)])  # over Claude Haiku 4.5's 4,096-token cache minimum
    assert run.report.generated == 60 and fake_server.totals()["cache_writes"] == 1
    assert run.report.usage.cache_read_input_tokens > 0 and run.report.cost_usd is not None
    assert all(r.platform == "bedrock" and r.headers.get("authorization") is None for r in fake_server.messages)


@pytest.mark.parametrize("framework", ["langchain", "llama-index"])
def test_a_wrapped_converse_model_caches_through_cache_points(framework: str, fake_server: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """LangChain's ChatBedrockConverse and LlamaIndex's BedrockConverse speak the Converse API, whose breakpoint is a
    cachePoint block (LangChain: our content blocks; LlamaIndex: its own CachePoint block), not cache_control."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFAKEFAKEFAKE0000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret-0000000000000000")
    model_id = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
    provider: Any
    if framework == "langchain":
        langchain_aws = pytest.importorskip("langchain_aws")
        from langchain_ctx import LangChainChatProvider

        provider = LangChainChatProvider(langchain_aws.ChatBedrockConverse(
            model=model_id, region_name="us-east-1", endpoint_url=fake_server.base_url))
    else:
        converse = pytest.importorskip("llama_index.llms.bedrock_converse")
        from llama_index_ctx import LlamaIndexLLMProvider

        provider = LlamaIndexLLMProvider(converse.BedrockConverse(
            model=model_id, region_name="us-east-1", endpoint_url=fake_server.base_url, max_retries=1))
    assert provider.cache_control
    run = ContextGenerator(provider, cache=False).contextualize_many([make_document("handbook", paragraphs=60)])
    assert run.report.generated == 60 and all(r.context for r in run)
    assert fake_server.totals()["cache_writes"] == 1 and run.report.usage.cache_read_input_tokens > 0
    assert {r.platform for r in fake_server.messages} == {"bedrock"}
    assert run.report.cost_usd is not None  # the platform id is priced


def test_a_converse_model_gets_a_cache_point_after_the_document() -> None:
    langchain_aws = pytest.importorskip("langchain_aws")
    from langchain_aws.chat_models.bedrock_converse import _messages_to_bedrock
    from langchain_core.messages import HumanMessage

    from ctx_retrieval.types import ContextRequest
    from langchain_ctx import LangChainChatProvider

    model = langchain_aws.ChatBedrockConverse(model="us.anthropic.claude-haiku-4-5-20251001-v1:0",
                                              region_name="us-east-1", aws_access_key_id="AKIAFAKE",
                                              aws_secret_access_key="fake")
    provider = LangChainChatProvider(model)
    request = ContextRequest(document_id="d", chunk_id="c", document_prefix="<document>text</document>",
                             document_rest="", chunk_block="<chunk>x</chunk>", max_tokens=50)
    messages, _ = _messages_to_bedrock([HumanMessage(content=provider._content(request))])
    content = messages[0]["content"]
    assert content[0] == {"text": "<document>text</document>"} and "cachePoint" in content[1]


def test_aws_secrets_never_reach_a_repr_a_pickle_or_the_cache_key() -> None:
    provider = BedrockProvider("anthropic.claude-haiku-5-5", aws_region="us-east-1", aws_access_key="AKIACANARY00000",
                               aws_secret_key="secret-canary-0000000000")
    for text in (repr(provider), str(pickle.dumps(provider)), provider.cache_namespace):
        assert "secret-canary" not in text and "AKIACANARY" not in text
    assert pickle.loads(pickle.dumps(provider))._aws is None  # the worker takes them from its own chain
    assert "credentials=<chain>" in repr(pickle.loads(pickle.dumps(provider)))


def test_the_cli_writes_contexts_with_claude_on_bedrock(fake_server: Any, tmp_path: Any,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from ctx_retrieval.cli import main

    monkeypatch.setenv("AWS_BEARER_TOKEN_BEDROCK", KEY)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "handbook.md").write_text(make_document("handbook", paragraphs=12)[0].text, encoding="utf-8")
    out = tmp_path / "contexts.jsonl"
    assert main(["contextualize", str(docs), "--contextualizer", "bedrock", "--region", "us-east-1",
                 "--base-url", fake_server.base_url + "/anthropic", "--chunk-chars", "400",
                 "--cache", str(tmp_path / "c.sqlite"), "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows and all(r["context"] and r["provider"] == "anthropic-bedrock" for r in rows)
    assert rows[0]["model"] == "anthropic.claude-haiku-5-5" and fake_server.totals()["cache_writes"] == 1
    assert "Claude on Amazon Bedrock" in capsys.readouterr().err
