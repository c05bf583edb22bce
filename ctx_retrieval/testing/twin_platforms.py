"""The twin's cloud-platform routes: Amazon Bedrock and Google Vertex AI, answered by the twin's Messages API.

Its own copy of Anthropic's platform pages (never the package's model table or id parser):

- BEDROCK_LEGACY_PAGE (https://platform.claude.com/docs/en/build-with-claude/claude-on-amazon-bedrock-legacy):
  InvokeModel, ``POST /model/{modelId}/invoke``; the model is named in the URL, not the body; ``anthropic_version``
  goes in the body; model ids are ``anthropic.<model>`` with a version (``-v1``, ``-v1:0``), usually behind a
  geography prefix (``global.``, ``us.``, ``eu.``, ``jp.``, ``apac.``, ``au.``). Token counting and Message Batches
  are not offered there.
- CONVERSE_REFERENCE (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html), the other
  API the legacy page covers: ``POST /model/{modelId}/converse`` with AWS's own body (``messages`` of ``{"text"}``
  and ``{"cachePoint": {"type": "default"}}`` blocks, ``system``, ``inferenceConfig.maxTokens``,
  ``additionalModelRequestFields``), answered as ``{"output": {"message"}, "stopReason", "usage": {"inputTokens",
  "outputTokens", "totalTokens", "cacheReadInputTokens", "cacheWriteInputTokens"}}``; a ``cachePoint`` marks the
  end of the content to cache, as ``cache_control`` does on the Messages API.
- BEDROCK_PAGE (https://platform.claude.com/docs/en/build-with-claude/claude-on-amazon-bedrock): the Messages API at
  ``/anthropic/v1/messages`` (and ``/anthropic/v1/messages/count_tokens``), model ids ``anthropic.<model>``;
  Message Batches and the Models API are not supported.
- VERTEX_PAGE (https://platform.claude.com/docs/en/build-with-claude/claude-on-vertex-ai): ``POST /projects/{project}
  /locations/{region}/publishers/anthropic/models/{model}:rawPredict``; the model is in the URL, not the body;
  ``anthropic_version`` is in the body (rather than a header); model ids ``<model>@<YYYYMMDD>`` for dated models,
  bare for the newer ones; token counting at ``.../models/count-tokens:rawPredict``; no Message Batches.

Errors keep each platform's shape: Bedrock answers ``{"message": ...}`` with the exception name in
``x-amzn-ErrorType`` (429 ``ThrottlingException``, 400 ``ValidationException``, 404
``ResourceNotFoundException``), Vertex AI Google's ``{"error": {"code", "message", "status"}}`` (429
``RESOURCE_EXHAUSTED``, 400 ``INVALID_ARGUMENT``, 404 ``NOT_FOUND``); neither sends ``retry-after`` or the
``anthropic-ratelimit-*`` headers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

_GEOGRAPHIES = ("global", "us", "us-gov", "eu", "jp", "apac", "au", "ca")
_GEOGRAPHY = "|".join(re.escape(g) for g in _GEOGRAPHIES)
_BEDROCK_MODEL = re.compile(rf"(?:(?:{_GEOGRAPHY})\.)?anthropic\.(claude-[a-z0-9-]+?)(?:-v\d+(?::\d+)?)?")
_VERTEX_MODEL = re.compile(r"(claude-[a-z0-9-]+?)(?:@(\d{8}))?")
_VERTEX_PATH = re.compile(r"(?:/v1)?/projects/([^/]+)/locations/([^/]+)/publishers/anthropic/models/([^/:]+):(\w+)")
_INVOKE_PATH = re.compile(r"/model/([^/]+)/(invoke|invoke-with-response-stream|converse)")
_STATUS_NAMES = {
    "bedrock": {400: "ValidationException", 401: "UnrecognizedClientException", 403: "AccessDeniedException",
                404: "ResourceNotFoundException", 413: "ValidationException", 429: "ThrottlingException",
                500: "InternalServerException", 503: "ServiceUnavailableException", 529: "ServiceUnavailableException"},
    "vertex": {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
               413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
               529: "UNAVAILABLE"},
}


@dataclass
class PlatformCall:
    """A platform request read as the Messages API call it stands for."""

    platform: str  # "bedrock" (both Bedrock endpoints) or "vertex"
    route: str  # "/v1/messages" or "/v1/messages/count_tokens"
    body: dict[str, Any]  # the Messages API body, ``model`` set to the Claude id the platform id names
    problem: tuple[int, str] | None = None  # (status, message) to refuse it with
    invoke: bool = False  # Bedrock's InvokeModel: token counts also in x-amzn-bedrock-* response headers
    converse: bool = False  # Bedrock's Converse API: the answer goes back in its shape (``converse_answer``)


def _bedrock_model(model_id: str) -> str | None:
    match = _BEDROCK_MODEL.fullmatch(model_id)
    return match[1] if match else None


def _vertex_model(model_id: str) -> str | None:
    match = _VERTEX_MODEL.fullmatch(model_id)
    if not match:
        return None
    return f"{match[1]}-{match[2]}" if match[2] else match[1]


def _needs_version(platform: str, body: dict[str, Any]) -> tuple[int, str] | None:
    if not isinstance(body.get("anthropic_version"), str) or not body["anthropic_version"]:
        return 400, f"{platform}: anthropic_version is required in the request body"
    if "model" in body:
        return 400, f"{platform}: model is named in the URL, not the request body"
    return None


def parse(path: str, body: dict[str, Any]) -> PlatformCall | None:
    """The platform call a request path makes, or None for the twin's own Messages API routes."""
    route = path.split("?")[0]
    if route in ("/anthropic/v1/messages", "/anthropic/v1/messages/count_tokens"):
        model = _bedrock_model(str(body.get("model", "")))
        call = PlatformCall("bedrock", route.removeprefix("/anthropic"), dict(body))
        if model is None:
            call.problem = 404, f"the model {body.get('model')!r} is not a Bedrock model id (anthropic.<model>)"
        else:
            call.body["model"] = model
        return call
    invoke = _INVOKE_PATH.fullmatch(route)
    model_id = unquote(invoke[1]) if invoke else ""  # the SDK leaves ":" as it is; other clients escape it
    if invoke and invoke[2] == "converse":
        model = _bedrock_model(model_id)
        call = PlatformCall("bedrock", "/v1/messages", {}, converse=True)
        if model is None:
            call.problem = 404, f"the model {invoke[1]!r} is not a Bedrock model id"
        else:
            call.body, call.problem = _from_converse(body)
            call.body["model"] = model
        return call
    if invoke:
        call = PlatformCall("bedrock", "/v1/messages", dict(body), invoke=True)
        model = _bedrock_model(model_id)
        if invoke[2] != "invoke":
            call.problem = 400, f"the twin serves InvokeModel and Converse, not {invoke[2]}"
        elif model is None:
            call.problem = 404, f"the model {invoke[1]!r} is not a Bedrock model id"
        else:
            call.problem = _needs_version("bedrock", body)
            call.body.pop("anthropic_version", None)
            call.body["model"] = model
        return call
    vertex = _VERTEX_PATH.fullmatch(route)
    if vertex:
        counting = vertex[3] == "count-tokens"
        call = PlatformCall("vertex", "/v1/messages/count_tokens" if counting else "/v1/messages", dict(body))
        named = str(body.get("model", "")) if counting else vertex[3]
        model = _vertex_model(named)
        if vertex[4] != "rawPredict":
            call.problem = 400, f"the twin serves rawPredict only, not {vertex[4]}"
        elif model is None:
            call.problem = 404, f"Publisher model {named!r} was not found"
        else:
            if not counting:
                call.problem = _needs_version("vertex", body)
            call.body.pop("anthropic_version", None)
            call.body["model"] = model
        return call
    return None


def _blocks_from_converse(content: Any) -> list[dict[str, Any]] | None:
    """Converse content blocks as Messages API blocks: a ``cachePoint`` puts ``cache_control`` on the block before
    it; None for a block the twin does not take (images, documents, tools)."""
    blocks: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and isinstance(block.get("text"), str):
            blocks.append({"type": "text", "text": block["text"]})
        elif isinstance(block, dict) and "cachePoint" in block and blocks:
            blocks[-1]["cache_control"] = {"type": "ephemeral"}
        else:
            return None
    return blocks


def _from_converse(body: dict[str, Any]) -> tuple[dict[str, Any], tuple[int, str] | None]:
    """A Converse request as the Messages API request it stands for, or why it is refused (400)."""
    messages = []
    for message in body.get("messages") or []:
        blocks = _blocks_from_converse(message.get("content") if isinstance(message, dict) else None)
        if blocks is None or not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            return {}, (400, "messages: each needs a role and text or cachePoint content blocks")
        messages.append({"role": message["role"], "content": blocks})
    config = body.get("inferenceConfig") or {}
    converted: dict[str, Any] = {"messages": messages, "max_tokens": int(config.get("maxTokens") or 4096)}
    if body.get("system"):
        system = _blocks_from_converse(body["system"])
        if system is None:
            return {}, (400, "system: text or cachePoint blocks only")
        converted["system"] = system
    for name, field_name in (("temperature", "temperature"), ("topP", "top_p"), ("stopSequences", "stop_sequences")):
        if name in config:
            converted[field_name] = config[name]
    converted.update(body.get("additionalModelRequestFields") or {})
    return converted, None


_CONVERSE_STOP = {"end_turn": "end_turn", "max_tokens": "max_tokens", "stop_sequence": "stop_sequence",
                  "refusal": "content_filtered", "model_context_window_exceeded": "model_context_window_exceeded"}


def converse_answer(message: dict[str, Any]) -> dict[str, Any]:
    """A Messages API answer in the Converse API's shape (text blocks only; thinking as ``reasoningContent``)."""
    content: list[dict[str, Any]] = []
    for block in message.get("content") or []:
        if block.get("type") == "text":
            content.append({"text": block["text"]})
        elif block.get("type") == "thinking":
            content.append({"reasoningContent": {"reasoningText": {"text": block.get("thinking", "")}}})
    usage = message.get("usage") or {}
    uncached, output = int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))
    read, write = int(usage.get("cache_read_input_tokens", 0)), int(usage.get("cache_creation_input_tokens", 0))
    return {"output": {"message": {"role": "assistant", "content": content}},
            "stopReason": _CONVERSE_STOP.get(str(message.get("stop_reason")), "end_turn"),
            "usage": {"inputTokens": uncached, "outputTokens": output, "totalTokens": uncached + output + read + write,
                      "cacheReadInputTokens": read, "cacheWriteInputTokens": write},
            "metrics": {"latencyMs": 1}}


def error_body(platform: str, status: int, message: str) -> tuple[bytes, dict[str, str]]:
    """An error in the platform's own shape, and its headers."""
    name = _STATUS_NAMES[platform].get(status, "InternalServerException" if platform == "bedrock" else "UNKNOWN")
    if platform == "bedrock":
        return json.dumps({"message": message}).encode(), {"x-amzn-ErrorType": f"{name}:http://internal.amazon.com/"}
    return json.dumps({"error": {"code": status, "message": message, "status": name}}).encode(), {}


def invoke_usage_headers(usage: dict[str, int]) -> dict[str, str]:
    """InvokeModel's token counts as response headers (the AWS InvokeModel reference: ``X-Amzn-Bedrock-Input-Token-
    Count``, ``-Output-Token-Count``, ``-Cache-Read-Input-Token-Count``, ``-Cache-Write-Input-Token-Count``), which
    AWS SDK users read rather than the body."""
    return {"x-amzn-bedrock-input-token-count": str(usage["input_tokens"]),
            "x-amzn-bedrock-output-token-count": str(usage["output_tokens"]),
            "x-amzn-bedrock-cache-read-input-token-count": str(usage["cache_read_input_tokens"]),
            "x-amzn-bedrock-cache-write-input-token-count": str(usage["cache_creation_input_tokens"])}


def platform_headers(headers: dict[str, str] | None) -> dict[str, str]:
    """Response headers as a platform sends them: no ``retry-after``, no ``anthropic-ratelimit-*``."""
    return {k: v for k, v in (headers or {}).items()
            if k.lower() != "retry-after" and not k.lower().startswith("anthropic-ratelimit")}
