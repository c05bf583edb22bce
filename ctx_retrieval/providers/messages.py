"""What every provider sends and reads, written once: Anthropic's content blocks (the document block marked for
caching, with its TTL), the single prompt of chat APIs without blocks, and usage under each API's field names.

Used by the Anthropic and OpenAI-compatible providers and by the framework-model providers of both adapters (each
had its own copy; the LangChain one dropped the 1-hour TTL).
"""

from __future__ import annotations

from typing import Any

from ctx_retrieval.types import ContextRequest, TokenUsage


def cache_control(ttl: str = "5m") -> dict[str, str]:
    """Anthropic's ``cache_control`` for a block: ephemeral, with ``ttl`` when it is the 1-hour one."""
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


def anthropic_blocks(request: ContextRequest, *, ttl: str = "5m") -> list[dict[str, Any]]:
    """The document prefix (marked for caching unless the request says not to), the rest of a windowed document,
    then the chunk: the order that lets every chunk of a document read one cache entry."""
    first: dict[str, Any] = {"type": "text", "text": request.document_prefix}
    if request.cache_prefix:
        first["cache_control"] = cache_control(ttl)
    blocks = [first]
    if request.document_rest:
        blocks.append({"type": "text", "text": request.document_rest})
    blocks.append({"type": "text", "text": request.chunk_block})
    return blocks


def converse_blocks(request: ContextRequest) -> list[dict[str, Any]]:
    """The same order for Amazon Bedrock's Converse API, whose cache breakpoint is a ``cachePoint`` block after the
    content to cache (the Converse ``ContentBlock`` union), not a ``cache_control`` field: LangChain's
    ``ChatBedrockConverse`` passes such blocks through."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": request.document_prefix}]
    if request.cache_prefix:
        blocks.append({"cachePoint": {"type": "default"}})
    if request.document_rest:
        blocks.append({"type": "text", "text": request.document_rest})
    blocks.append({"type": "text", "text": request.chunk_block})
    return blocks


def plain_prompt(request: ContextRequest) -> str:
    """The request as one text, document first (servers with automatic prefix caching reuse it per document)."""
    return request.document_prefix + request.document_rest + "\n\n" + request.chunk_block


def field(source: Any, name: str) -> Any:
    """``source[name]`` or ``source.name``: SDK objects and plain dicts alike; None when absent."""
    if source is None:
        return None
    return source.get(name) if isinstance(source, dict) else getattr(source, name, None)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def usage_from_fields(usage: Any) -> TokenUsage:
    """Usage reported under any of the three conventions, as Anthropic counts it (``input_tokens`` without the
    cached part):

    - Anthropic: ``input_tokens`` (uncached), ``cache_creation_input_tokens``, ``cache_read_input_tokens``;
    - OpenAI: ``prompt_tokens`` (all), ``prompt_tokens_details.cached_tokens``, ``completion_tokens``;
    - LangChain's ``usage_metadata``: ``input_tokens`` (all), ``input_token_details.cache_read`` and
      ``cache_creation``, ``output_tokens``;
    - Amazon Bedrock's Converse API (LlamaIndex ``BedrockConverse`` returns it raw): ``inputTokens`` (uncached),
      ``cacheWriteInputTokens``, ``cacheReadInputTokens``, ``outputTokens``.
    """
    if field(usage, "inputTokens") is not None:  # Converse names
        return TokenUsage(input_tokens=_int(field(usage, "inputTokens")),
                          output_tokens=_int(field(usage, "outputTokens")),
                          cache_creation_input_tokens=_int(field(usage, "cacheWriteInputTokens")),
                          cache_read_input_tokens=_int(field(usage, "cacheReadInputTokens")))
    prompt = field(usage, "prompt_tokens")
    if prompt is not None:  # OpenAI names
        cached = _int(field(field(usage, "prompt_tokens_details"), "cached_tokens"))
        return TokenUsage(input_tokens=max(0, _int(prompt) - cached), cache_read_input_tokens=cached,
                          output_tokens=_int(field(usage, "completion_tokens")))
    details = field(usage, "input_token_details")
    if details is not None:  # LangChain's usage_metadata: input_tokens include the cached part
        read, write = _int(field(details, "cache_read")), _int(field(details, "cache_creation"))
        return TokenUsage(input_tokens=max(0, _int(field(usage, "input_tokens")) - read - write),
                          output_tokens=_int(field(usage, "output_tokens")), cache_creation_input_tokens=write,
                          cache_read_input_tokens=read)
    return TokenUsage(input_tokens=_int(field(usage, "input_tokens")),
                      output_tokens=_int(field(usage, "output_tokens")),
                      cache_creation_input_tokens=_int(field(usage, "cache_creation_input_tokens")),
                      cache_read_input_tokens=_int(field(usage, "cache_read_input_tokens")))
