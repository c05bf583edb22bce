"""The provider interface: one context request in, one answer and its usage out.

A provider does no retrying and no scheduling (the generator owns both); it turns a ``ContextRequest`` into
an API call and classifies the exceptions its SDK raises by type, so the generator can decide what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable
from urllib.parse import urlsplit

from ..models import ModelInfo
from ..usage import TokenUsage

__all__ = ["ContextRequest", "ErrorDecision", "Provider", "ProviderBase", "ProviderResponse", "ServerLimit",
           "ServerLimits", "TokenCountingProvider", "endpoint_identity"]


def endpoint_identity(url: str) -> str:
    """An endpoint URL as it goes into a context-cache key: scheme, host, port and path; any credentials or
    query string in the URL are left out (a key must never reach the cache)."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.hostname:
        return url.strip()
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{host}{parts.path.rstrip('/')}"


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
    limits: ServerLimits | None = None  # set by providers whose API reports its rate-limit state
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


@runtime_checkable
class Provider(Protocol):
    """What the generator needs from an LLM provider."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def model_info(self) -> ModelInfo | None:
        """Limits and prices, or None when unknown (costs are then reported as unknown)."""
        ...

    @property
    def cache_namespace(self) -> str:
        """Provider identity for the context-cache key (name, and endpoint when not the default)."""
        ...

    @property
    def supports_prompt_caching(self) -> bool: ...

    @property
    def cache_ttl(self) -> str: ...

    def check_ready(self) -> None:
        """Raise a typed error (missing or malformed key, ...) before any work starts."""
        ...

    async def agenerate(self, request: ContextRequest) -> ProviderResponse: ...

    def classify_error(self, exc: BaseException) -> ErrorDecision | None:
        """The decision for ``exc``, or None if it is not a provider error (it then propagates)."""
        ...

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> Exception:
        """The typed error that stops the run for a ``fail_run`` decision."""
        ...

    async def aclose(self) -> None:
        """Release clients opened for the current event loop."""
        ...


@runtime_checkable
class TokenCountingProvider(Protocol):
    """A provider whose API counts tokens exactly (Anthropic's free ``messages.count_tokens``)."""

    @property
    def model(self) -> str: ...

    @property
    def can_count_tokens(self) -> bool:
        """Whether counting is possible now (a key or client is set)."""
        ...

    async def acount_tokens(self, text: str) -> int: ...


class ProviderBase:
    """What every provider here shares: model identity and limits, and pickling without credentials or
    clients (the attributes named in ``_unpicklable`` are dropped; keys are re-read from the environment)."""

    _model: str
    _model_info: ModelInfo | None
    _unpicklable: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        state.update(dict.fromkeys(self._unpicklable))
        return state

    @property
    def model(self) -> str:
        return self._model

    @property
    def model_info(self) -> ModelInfo | None:
        return self._model_info

    @property
    def cache_ttl(self) -> str:
        return "5m"

    @property
    def supports_prompt_caching(self) -> bool:
        return True

    async def aclose(self) -> None:
        return None
