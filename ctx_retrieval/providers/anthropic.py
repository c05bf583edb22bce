"""Claude through the official ``anthropic`` SDK (Messages API, prompt caching in its GA form).

Setup:
    pip install "ctx-retrieval[anthropic]" and set ``ANTHROPIC_API_KEY`` (or pass ``api_key=``).

Key init args:
    model: a Claude model id (default ``claude-3-haiku-20240307``, the cookbook's model).
    cache_ttl: ``"5m"`` (default) or ``"1h"`` for the document block's cache entry.
    base_url: another endpoint (a proxy, or ``ctx_retrieval.testing.FakeAnthropicServer`` in tests).
    extra_body: extra Messages API fields sent with every request (e.g. ``{"temperature": 0}`` for models
        that accept it); they are part of the context-cache key.

The SDK's own retries are switched off (``max_retries=0``): the generator owns retries, so a request waiting
to retry does not hold a concurrency slot. Errors are classified by exception type and status code, never by
message text.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
from typing import TYPE_CHECKING, Any, Literal

from .._optional import require
from ..errors import ProviderAuthenticationError, UnknownModelError
from ..models import ModelInfo, lookup_model_info
from ..usage import TokenUsage
from .base import ContextRequest, ErrorDecision, ProviderBase, ProviderResponse
from .generic import classify_exception, decision_for_status, server_limits

if TYPE_CHECKING:
    import anthropic as anthropic_sdk

__all__ = ["DEFAULT_ANTHROPIC_MODEL", "AnthropicProvider"]

logger = logging.getLogger(__name__)

DEFAULT_ANTHROPIC_MODEL = "claude-3-haiku-20240307"
DEFAULT_TIMEOUT_S = 60.0
_API_KEY_ENV = "ANTHROPIC_API_KEY"
_AUTH_TOKEN_ENV = "ANTHROPIC_AUTH_TOKEN"
_MIN_KEY_LENGTH = 16


class AnthropicProvider(ProviderBase):
    """Writes contexts with Claude; the document block carries ``cache_control`` so it is paid once.

    Instantiate:
        .. code-block:: python

            from ctx_retrieval import AnthropicProvider, ContextGenerator
            generator = ContextGenerator(AnthropicProvider("claude-3-haiku-20240307"))

    The API key is held privately: it is not in ``repr``, pickles, cache keys or logs.
    """

    name = "anthropic"
    _unpicklable = ("_api_key", "_user_client", "_client", "_client_loop")  # pickles never carry the key

    def __init__(
        self,
        model: str = DEFAULT_ANTHROPIC_MODEL,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        cache_ttl: Literal["5m", "1h"] = "5m",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        extra_body: dict[str, Any] | None = None,
        model_info: ModelInfo | None = None,
        client: anthropic_sdk.AsyncAnthropic | None = None,
    ) -> None:
        if cache_ttl not in ("5m", "1h"):
            from ..errors import ConfigurationError

            raise ConfigurationError("cache_ttl must be '5m' or '1h'", setting="cache_ttl")
        self._model = model
        self._api_key = api_key
        self.base_url = base_url
        self._cache_ttl = cache_ttl
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body) if extra_body else None
        self._model_info = model_info if model_info is not None else lookup_model_info(model)
        self._user_client = client
        self._client: anthropic_sdk.AsyncAnthropic | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        if self._model_info is None:
            logger.warning(
                "no limits or prices known for model %r: costs will be reported as unknown; pass "
                "model_info=ModelInfo(...) to set them",
                model,
            )

    def __repr__(self) -> str:
        key_state = "set" if self._resolved_key() else "unset"
        return (f"AnthropicProvider(model={self._model!r}, base_url={self.base_url!r}, "
                f"cache_ttl={self._cache_ttl!r}, api_key=<{key_state}>)")

    @property
    def cache_ttl(self) -> str:
        return self._cache_ttl

    @property
    def cache_namespace(self) -> str:
        namespace = f"anthropic@{self.base_url}" if self.base_url else "anthropic"
        if self.extra_body:
            namespace += ":" + json.dumps(self.extra_body, sort_keys=True, default=str)
        return namespace

    def _resolved_key(self) -> str | None:
        return self._api_key if self._api_key is not None else os.environ.get(_API_KEY_ENV)

    def check_ready(self) -> None:
        """Fail before any work when the key is missing or visibly malformed (the message never shows it)."""
        require("anthropic", "anthropic")
        if self._user_client is not None:
            return
        key = self._resolved_key()
        if not key:
            if self._api_key is None and os.environ.get(_AUTH_TOKEN_ENV):
                return  # the SDK authenticates with the token itself
            raise ProviderAuthenticationError(
                f"no Anthropic API key: set the {_API_KEY_ENV} environment variable or pass "
                "AnthropicProvider(api_key=...)",
                provider=self.name,
            )
        if key != key.strip():
            raise ProviderAuthenticationError(
                "the Anthropic API key has leading or trailing whitespace (a pasted newline?): strip it",
                provider=self.name,
            )
        if not key.isascii() or not key.isprintable() or " " in key or len(key) < _MIN_KEY_LENGTH:
            raise ProviderAuthenticationError(
                "the Anthropic API key is malformed (too short, or it has spaces or non-ASCII characters): "
                "copy it again from the Anthropic console",
                provider=self.name,
            )

    def _get_client(self) -> anthropic_sdk.AsyncAnthropic:
        if self._user_client is not None:
            return self._user_client
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            anthropic = require("anthropic", "anthropic")
            # Async clients belong to the loop they were made on; each sync call runs its own loop.
            self._client = anthropic.AsyncAnthropic(
                api_key=self._resolved_key(), base_url=self.base_url, max_retries=0, timeout=self.timeout_s
            )
            self._client_loop = loop
        return self._client

    def build_message_content(self, request: ContextRequest) -> list[dict[str, Any]]:
        cache_control: dict[str, str] = {"type": "ephemeral"}
        if self._cache_ttl == "1h":
            cache_control["ttl"] = "1h"
        first: dict[str, Any] = {"type": "text", "text": request.document_prefix}
        if request.cache_prefix:
            first["cache_control"] = cache_control
        content: list[dict[str, Any]] = [first]
        if request.document_rest:
            content.append({"type": "text", "text": request.document_rest})
        content.append({"type": "text", "text": request.chunk_block})
        return content

    def _params(self, request: ContextRequest) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self._model, "max_tokens": request.max_tokens,
                                  "messages": [{"role": "user", "content": self.build_message_content(request)}]}
        if self.extra_body:
            params.update(self.extra_body)
        return params

    @staticmethod
    def _usage(u: Any) -> TokenUsage:
        return TokenUsage(input_tokens=u.input_tokens or 0, output_tokens=u.output_tokens or 0,
                          cache_creation_input_tokens=u.cache_creation_input_tokens or 0,
                          cache_read_input_tokens=u.cache_read_input_tokens or 0)

    # -- Message Batches (half price; results within 24 hours) -------------------------------------------

    supports_batches = True

    async def asubmit_batch(self, entries: list[tuple[str, ContextRequest]]) -> str:
        """Submit ``(custom_id, request)`` pairs as one Message Batch; its id."""
        requests: Any = [{"custom_id": custom_id, "params": self._params(request)} for custom_id, request in entries]
        batch = await self._get_client().messages.batches.create(requests=requests)
        return str(batch.id)

    async def abatch_ended(self, batch_id: str) -> bool:
        batch = await self._get_client().messages.batches.retrieve(batch_id)
        return bool(batch.processing_status == "ended")

    async def abatch_results(self, batch_id: str) -> list[tuple[str, ProviderResponse | None, str | None]]:
        """``(custom_id, response, None)`` for succeeded requests, ``(custom_id, None, why)`` for the others
        (``errored:<error type>``, ``expired``, ``canceled``)."""
        out: list[tuple[str, ProviderResponse | None, str | None]] = []
        async for entry in await self._get_client().messages.batches.results(batch_id):
            result = entry.result
            if result.type == "succeeded":
                message = result.message
                text = "".join(getattr(b, "text", "") for b in message.content if b.type == "text")
                out.append((entry.custom_id, ProviderResponse(text=text, usage=self._usage(message.usage)), None))
            elif result.type == "errored":
                error = getattr(getattr(result.error, "error", None), "type", "error")
                out.append((entry.custom_id, None, f"errored:{error}"))
            else:
                out.append((entry.custom_id, None, str(result.type)))
        return out

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        client = self._get_client()
        messages: Any = [{"role": "user", "content": self.build_message_content(request)}]
        # The raw response carries the anthropic-ratelimit-* headers the generator paces the run by.
        raw = await client.messages.with_raw_response.create(
            model=self._model,
            max_tokens=request.max_tokens,
            messages=messages,
            extra_body=self.extra_body,
        )
        parsed: Any = raw.parse()
        message = await parsed if inspect.isawaitable(parsed) else parsed  # SDKs < 1 parse synchronously
        text = "".join(getattr(block, "text", "") for block in message.content if block.type == "text")
        return ProviderResponse(text=text, usage=self._usage(message.usage), limits=server_limits(raw.headers))

    def classify_error(self, exc: BaseException) -> ErrorDecision | None:
        import anthropic

        if isinstance(exc, anthropic.APIStatusError):
            return decision_for_status(exc.status_code, exc.response.headers)
        if isinstance(exc, (anthropic.APIResponseValidationError, json.JSONDecodeError)):
            return ErrorDecision("retry", "invalid_response")  # e.g. a truncated body that still said 200
        return classify_exception(exc)  # timeouts and dropped connections, by the SDK's transport error types

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> Exception:
        """The typed error that stops a run for a ``fail_run`` decision (the key is never in the message)."""
        from ..errors import ProviderRequestError

        if decision.kind == "authentication":
            return ProviderAuthenticationError(
                f"Anthropic rejected the API key (HTTP {decision.status_code}): check {_API_KEY_ENV} or "
                "api_key=, and that the key's workspace may use this model",
                provider=self.name, status_code=decision.status_code,
            )
        if decision.kind == "not_found":
            return UnknownModelError(
                f"Anthropic does not know model {self._model!r} (HTTP 404): pass a valid model id to "
                "AnthropicProvider(model=...)",
                model=self._model,
            )
        return ProviderRequestError(f"Anthropic request failed: {type(exc).__name__}", provider=self.name,
                                    status_code=decision.status_code)

    async def aclose(self) -> None:
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.close()
