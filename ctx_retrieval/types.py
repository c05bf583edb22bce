"""Core data types: a source document, its chunks, the context produced for each chunk, token usage, and what
passes between the generator and a provider (request, response, rate-limit state, error decision)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ResultStatus = Literal["generated", "cached", "reused", "failed", "not_attempted", "empty"]
"""How a chunk's result came about.

- ``generated``: written by the provider in this run (and stored in the context cache);
- ``cached``: read from the context cache, no request made;
- ``reused``: an earlier context of the same chunk (another version of its document, or another model or prompt),
  served by an opt-in ``ReusePolicy`` until ``refresh_stale`` writes the new one: stale; ``written_from`` names the
  document version, ``model`` and ``prompt_version`` the settings it was written with;
- ``failed``: the provider failed for this chunk (``error`` says why); ``context`` is ``None``;
- ``not_attempted``: the run stopped (first failure under ``on_error="raise"``, or the budget) before it;
- ``empty``: the chunk is empty or whitespace, there is nothing to situate; ``context`` is ``None``.
"""


@dataclass(frozen=True)
class TokenUsage:
    """Tokens billed for one request or summed over many, as the provider reported them.

    ``input_tokens`` excludes cached tokens, as in Anthropic's API: the prompt is
    ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens`` tokens long.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    def __sub__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
            self.cache_creation_input_tokens - other.cache_creation_input_tokens,
            self.cache_read_input_tokens - other.cache_read_input_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """All input tokens of the prompt, cached or not."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenUsage:
        return cls(
            int(data.get("input_tokens") or 0),
            int(data.get("output_tokens") or 0),
            int(data.get("cache_creation_input_tokens") or 0),
            int(data.get("cache_read_input_tokens") or 0),
        )


@dataclass(frozen=True)
class SourceDocument:
    """A whole document that chunks were cut from. ``metadata`` is carried through, never sent to the LLM."""

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Chunk:
    """One chunk of a document. ``position`` is its index in the document's chunk list (window order);
    ``start_char`` is its offset in the document text when known."""

    id: str
    text: str
    position: int
    start_char: int | None = None


def make_chunk_id(document_id: str, position: int, text: str) -> str:
    """A stable chunk id derived from content and position, never random."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{document_id}:{position}:{digest}"


@dataclass(frozen=True)
class ContextResult:
    """The context for one chunk, with where it came from and what it cost."""

    document_id: str
    chunk_id: str
    position: int
    context: str | None
    status: ResultStatus
    provider: str
    model: str
    prompt_version: str
    usage: TokenUsage = field(default_factory=TokenUsage)
    windowed: bool = False
    error: str | None = None  # why it has no context, for people: "<kind>: <detail>"
    error_kind: str | None = None  # the same reason for programs: "rate_limited", "max_tokens", "unreachable"...
    written_from: str | None = None  # a reused context: the digest of the document version it was written from

    @property
    def stored_status(self) -> str:
        """The status the adapters write on an indexed chunk (``context_status``): ``cached`` is written as
        ``generated`` (the same context, written by the LLM in an earlier run), so rerunning an unchanged corpus
        leaves every chunk's metadata as it was and the frameworks' incremental ingestion (LangChain's record
        manager, LlamaIndex's ingestion cache) re-embeds nothing."""
        return "generated" if self.status == "cached" else self.status

    @property
    def stale(self) -> bool:
        """True when the context was written for another version of the document, or by another model or prompt
        (``status == "reused"``): ``ContextGenerator.refresh_stale`` rewrites it."""
        return self.status == "reused"

    @property
    def cached(self) -> bool:
        """True when the context came from the persistent context cache (no request in this run)."""
        return self.status == "cached"

    @property
    def ok(self) -> bool:
        return self.context is not None

    def contextualized_text(self, chunk_text: str) -> str:
        """``context + blank line + chunk`` as indexed by contextual embeddings and contextual BM25 (the core's
        ``indexed_text``, the same in both adapters)."""
        from ctx_retrieval.text import indexed_text

        return indexed_text(chunk_text, self.context)


# -- what passes between the generator and a provider ------------------------------------------------------


@dataclass(frozen=True)
class ContextRequest:
    """One prompt: ``document_prefix`` carries the cache breakpoint; ``document_rest`` (windowed documents
    only) and ``chunk_block`` follow it."""

    document_id: str
    chunk_id: str
    document_prefix: str
    document_rest: str
    chunk_block: str
    max_tokens: int
    cache_prefix: bool = True  # False for one-off prompts (reranking): a cache write would cost 1.25x for nothing

    def __repr__(self) -> str:  # never dump document text into logs or tracebacks
        return (
            f"ContextRequest(document_id={self.document_id!r}, chunk_id={self.chunk_id!r}, "
            f"prefix_chars={len(self.document_prefix)}, max_tokens={self.max_tokens})"
        )


@dataclass(frozen=True)
class ServerLimit:
    """One of the account's rate limits as the server reported it with an answer: the bucket's capacity, what
    was left after the request, and the seconds until it is full again (None when not reported or implausible)."""

    limit: float
    remaining: float
    full_in_s: float | None = None


@dataclass(frozen=True)
class ServerLimits:
    """The rate-limit state an answer carried (Anthropic's ``anthropic-ratelimit-*`` headers); the generator
    paces the run by it so requests wait on our side instead of earning 429s."""

    requests: ServerLimit | None = None
    input_tokens: ServerLimit | None = None
    output_tokens: ServerLimit | None = None


@dataclass(frozen=True)
class ProviderResponse:
    """One answer: its text blocks joined (thinking blocks are never part of it), usage, and why it stopped
    (``"end_turn"``, ``"max_tokens"``, ``"refusal"``, ...; None where the provider does not say)."""

    text: str
    usage: TokenUsage
    # Set by providers whose API reports its rate-limit state; such a provider calls
    # ``ctx_retrieval.pacing.departing()`` as the request leaves, so the report is read from then on.
    limits: ServerLimits | None = None
    stop_reason: str | None = None
    cache_reported: bool = True  # False: the server says nothing about reused prompt tokens (not "0 reused")


ErrorAction = Literal["retry", "fail_chunk", "fail_run"]


@dataclass(frozen=True)
class ErrorDecision:
    """What the generator does with an exception: retry it, fail this chunk, or stop the run.

    ``kind`` is a short stable name for reports ("rate_limited", "overloaded", "server_error", "timeout",
    "connection", "invalid_response", "bad_request", "request_too_large", "authentication", "permission",
    "billing", "spend_limit", "not_found").
    """

    action: ErrorAction
    kind: str
    retry_after_s: float | None = None
    status_code: int | None = None
