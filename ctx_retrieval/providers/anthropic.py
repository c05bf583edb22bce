"""Claude through the official ``anthropic`` SDK (Messages API, prompt caching in its GA form).

Setup:
    pip install "ctx-retrieval[anthropic]" and set ``ANTHROPIC_API_KEY`` (or pass ``api_key=``).

Key init args:
    model: a Claude model id (default ``claude-haiku-5-5``, the current Haiku; the cookbook's
        ``claude-3-haiku-20240307`` was retired on 2026-04-20 and raises ``RetiredModelError``).
    cache_ttl: ``"5m"`` (default) or ``"1h"`` for the document block's cache entry.
    base_url: another endpoint (a proxy, or ``ctx_retrieval.testing.FakeAnthropicServer`` in tests); without it
        ``$ANTHROPIC_BASE_URL`` applies, as in the SDK. The endpoint, however set, is part of the context-cache
        key: contexts written by one endpoint are never served for another.
    endpoint_id: a stable name for the endpoint in the context-cache key instead of its URL (for a server whose
        port changes from run to run, such as the twin).
    extra_body: extra Messages API fields sent with every request (e.g. ``{"output_config": {"effort": "low"}}``);
        they are part of the context-cache key. A field the model table says the model rejects (sampling
        parameters on Claude 4.7 and later, ``thinking`` it cannot honour) raises ``UnsupportedSettingError``.

What each request carries follows the model's documented rules (``ctx_retrieval.models``): thinking is switched
off where the model allows it (Claude Haiku 5.5 thinks by default, and thinking counts against ``max_tokens``);
where thinking cannot be switched off the request asks for low effort and leaves room for it in ``max_tokens``;
no sampling parameters are sent. A ``refusal`` or ``max_tokens`` stop reason is reported to the generator, which
never stores such an answer as a context.

The SDK's own retries are switched off (``max_retries=0``): the generator owns retries, so a request waiting
to retry does not hold a concurrency slot. Errors are classified by exception type and status code, never by
message text.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any, Literal

from ctx_retrieval._optional import require
from ctx_retrieval.errors import (
    CtxRetrievalError,
    ProviderAuthenticationError,
    ProviderBillingError,
    ProviderPermissionError,
    UnknownModelError,
    UnsupportedSettingError,
)
from ctx_retrieval.models import ModelInfo, check_not_retired, lookup_model_info
from ctx_retrieval.pacing import departing
from ctx_retrieval.providers.base import (
    DEADLINE_GRACE_S,
    DEFAULT_REQUEST_THREADS,
    AnswerTooLarge,
    SDKProvider,
    endpoint_identity,
    parse_json_answer,
    read_capped,
    read_capped_in_thread,
)
from ctx_retrieval.providers.generic import (
    MalformedAnswer,
    classify_exception,
    decision_for_status,
)
from ctx_retrieval.providers.messages import anthropic_blocks
from ctx_retrieval.types import ContextRequest, ErrorDecision, ProviderResponse, ServerLimit, ServerLimits, TokenUsage

if TYPE_CHECKING:
    import anthropic as anthropic_sdk


logger = logging.getLogger(__name__)

DEFAULT_ANTHROPIC_MODEL = "claude-haiku-5-5"
DEFAULT_TIMEOUT_S = 60.0
# Room for thinking on models that always think (asked for low effort): thinking counts against max_tokens.
THINKING_HEADROOM_TOKENS = 4096
_SAMPLING_PARAMS = ("temperature", "top_p", "top_k")
_warned_unknown_models: set[str] = set()
_API_KEY_ENV = "ANTHROPIC_API_KEY"
_AUTH_TOKEN_ENV = "ANTHROPIC_AUTH_TOKEN"
_BASE_URL_ENV = "ANTHROPIC_BASE_URL"
_MIN_KEY_LENGTH = 16


class AnthropicMessages(SDKProvider["anthropic_sdk.AsyncAnthropic"]):
    """Claude through the Messages API wherever it is served (Anthropic's API, Amazon Bedrock, Vertex AI): the
    request, the answer, the errors. ``AnthropicProvider`` adds Message Batches, which only Anthropic's API has, so
    only it satisfies ``BatchProvider``."""

    name = "anthropic"
    _key_env = _API_KEY_ENV

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
        endpoint_id: str | None = None,
        request_threads: int = DEFAULT_REQUEST_THREADS,
    ) -> None:
        if cache_ttl not in ("5m", "1h"):
            from ctx_retrieval.errors import ConfigurationError

            raise ConfigurationError("cache_ttl must be '5m' or '1h'", setting="cache_ttl")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
            from ctx_retrieval.errors import ConfigurationError

            raise ConfigurationError(f"timeout_s must be a number of seconds > 0, got {timeout_s!r}",
                                     setting="timeout_s")
        check_not_retired(model)  # before any client exists: a retired id never reaches the network
        self._model = model
        self._init_client(api_key, client, request_threads=request_threads)
        self.base_url = base_url
        self.endpoint_id = endpoint_id
        self._cache_ttl = cache_ttl
        self.timeout_s = timeout_s
        self.extra_body = dict(extra_body) if extra_body else None
        self._model_info = model_info if model_info is not None else lookup_model_info(model)
        if self._model_info is None and model not in _warned_unknown_models:
            _warned_unknown_models.add(model)
            logger.warning(
                "model %r is not in ctx_retrieval's model table: it is used as given, but its cost figures are "
                "unknown and its request rules are not checked; pass model_info=ModelInfo(...) to set them",
                model,
            )
        _check_extra_body(model, self._model_info, self.extra_body)

    def __repr__(self) -> str:
        key_state = "set" if self._resolved_key() else "unset"
        return (f"AnthropicProvider(model={self._model!r}, base_url={self.base_url!r}, "
                f"cache_ttl={self._cache_ttl!r}, api_key=<{key_state}>)")

    @property
    def cache_ttl(self) -> str:
        return self._cache_ttl

    @property
    def endpoint(self) -> str | None:
        """The endpoint requests go to, however it was set: ``base_url=``, else ``$ANTHROPIC_BASE_URL`` (which the
        SDK reads), else None (Anthropic's API)."""
        return self.base_url or os.environ.get(_BASE_URL_ENV) or None

    @property
    def cache_namespace(self) -> str:
        endpoint = self.endpoint_id or (endpoint_identity(self.endpoint) if self.endpoint else None)
        namespace = f"anthropic@{endpoint}" if endpoint else "anthropic"
        if self.extra_body:
            namespace += ":" + json.dumps(self.extra_body, sort_keys=True, default=str)
        return namespace

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

    def _new_client(self) -> anthropic_sdk.AsyncAnthropic:
        anthropic = require("anthropic", "anthropic")
        client: anthropic_sdk.AsyncAnthropic = anthropic.AsyncAnthropic(
            api_key=self._resolved_key(), base_url=self.base_url, max_retries=0,  # retries are the generator's
            timeout=self.timeout_s)
        return client

    def _new_sync_client(self) -> anthropic_sdk.Anthropic:
        anthropic = require("anthropic", "anthropic")
        client: anthropic_sdk.Anthropic = anthropic.Anthropic(
            api_key=self._resolved_key(), base_url=self.base_url, max_retries=0, timeout=self.timeout_s)
        return client

    def build_message_content(self, request: ContextRequest) -> list[dict[str, Any]]:
        return anthropic_blocks(request, ttl=self._cache_ttl)

    def _model_fields(self, request: ContextRequest) -> dict[str, Any]:
        """The fields the model's rules call for (thinking, effort, the ``max_tokens`` that leaves room for
        thinking), then the user's ``extra_body``, which wins."""
        info = self._model_info
        fields: dict[str, Any] = {"max_tokens": request.max_tokens}
        extra = self.extra_body or {}
        if info is not None and info.thinking == "on_can_disable" and _effort(extra) not in ("xhigh", "max"):
            fields["thinking"] = {"type": "disabled"}  # a context needs no thinking; it would eat max_tokens
        elif info is not None and info.thinking == "always_on":
            fields["output_config"] = {"effort": "low"}
            fields["max_tokens"] = request.max_tokens + THINKING_HEADROOM_TOKENS
        fields.update(extra)
        return fields

    def _params(self, request: ContextRequest) -> dict[str, Any]:
        return {"model": self._model, "messages": [{"role": "user", "content": self.build_message_content(request)}],
                **self._model_fields(request)}

    def _response(self, message: Any, limits: ServerLimits | None = None) -> ProviderResponse:
        """The answer's text blocks (selected by type: thinking blocks are not the answer), usage and stop
        reason, from the message as JSON (a dict); ``MalformedAnswer`` when it is not a usable message."""
        if not isinstance(message, dict):
            raise MalformedAnswer(f"an answer that is not a message ({type(message).__name__})")
        content, usage = message.get("content"), message.get("usage")
        if not isinstance(content, list) or not isinstance(usage, dict):
            raise MalformedAnswer(f"an answer without {'content' if not isinstance(content, list) else 'usage'}")
        texts: list[str] = []
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text":
                text = block.get("text")
                if not isinstance(text, str):
                    raise MalformedAnswer("a text block without text")
                texts.append(text)
        counts = [usage.get(name) for name in ("input_tokens", "output_tokens")]
        cached = [usage.get(name) for name in ("cache_creation_input_tokens", "cache_read_input_tokens")]
        if any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in counts) or any(
                n is not None and (not isinstance(n, int) or n < 0) for n in cached):
            raise MalformedAnswer("usage without sound token counts (missing or negative)")
        reason = message.get("stop_reason")
        usage_counts = TokenUsage(input_tokens=int(counts[0] or 0), output_tokens=int(counts[1] or 0),
                                  cache_creation_input_tokens=int(cached[0] or 0),
                                  cache_read_input_tokens=int(cached[1] or 0))
        return ProviderResponse(text="".join(texts), usage=usage_counts, limits=limits,
                                stop_reason=reason if isinstance(reason, str) else None)

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        # The request a batch would hold (``_params``), as the SDK's create takes it: the fields it names, the
        # model's other fields as extra_body. The same from the loop or from a thread.
        fields = self._params(request)
        params: Any = {name: fields.pop(name) for name in ("model", "max_tokens", "messages")}
        params["extra_body"] = fields or None

        sent: list[datetime.datetime] = []

        # Streamed, so the body is read with a cap; the headers carry the anthropic-ratelimit-* values the
        # generator paces the run by, as they stood when the server admitted the request: about when it was sent.
        async def send_from_loop(deadline: float) -> tuple[bytes, Any]:
            client = self._get_client()
            departing()
            sent.append(_utc_now())
            async with client.messages.with_streaming_response.create(**params, timeout=deadline) as raw:
                return await read_capped(raw.iter_bytes()), raw.headers

        async def send_from_thread(deadline: float) -> tuple[bytes, Any]:
            client = self._thread_client()

            def call() -> tuple[bytes, Any]:
                until = time.monotonic() + deadline + DEADLINE_GRACE_S
                departing()  # the limiter reads the report from when the request left, not when it was queued
                sent.append(_utc_now())
                with client.messages.with_streaming_response.create(**params, timeout=deadline) as raw:
                    return read_capped_in_thread(raw.iter_bytes(), until), raw.headers

            result: tuple[bytes, Any] = await self.in_thread(call)
            return result

        body, headers = await self.bounded(send_from_thread if self.request_threads else send_from_loop)
        return self._response(parse_json_answer(body), server_limits(headers, at=sent[-1]))

    @property
    def can_count_tokens(self) -> bool:
        return self._user_client is not None or bool(self._resolved_key()) or bool(os.environ.get(_AUTH_TOKEN_ENV))

    async def acount_tokens(self, text: str) -> int:
        """The API's exact count of ``text`` as one user message (``messages.count_tokens``, free of charge)."""
        # One attempt: a count is an optimisation (the planner keeps its estimate when it fails), not worth the SDK's
        # retries and their backoff against an endpoint that is down.
        result = await self._get_client().with_options(max_retries=0).messages.count_tokens(
            model=self._model, messages=[{"role": "user", "content": text}])
        tokens = vars(result).get("input_tokens")  # a gateway's {} or null is read without validation
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise MalformedAnswer(f"a token count without input_tokens ({tokens!r})")
        return tokens

    def classify_error(self, exc: BaseException) -> ErrorDecision | None:
        import anthropic

        if isinstance(exc, anthropic.APIStatusError):
            return decision_for_status(exc.status_code, exc.response.headers, getattr(exc, "body", None))
        if isinstance(exc, (anthropic.APIResponseValidationError, json.JSONDecodeError, AnswerTooLarge)):
            return ErrorDecision("retry", "invalid_response")  # e.g. a truncated body that still said 200
        return classify_exception(exc)  # timeouts and dropped connections, by the SDK's transport error types

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> CtxRetrievalError:
        """The typed error that stops a run for a ``fail_run`` decision (the key is never in the message)."""
        if decision.kind == "authentication":
            return ProviderAuthenticationError(
                f"Anthropic rejected the API key (HTTP {decision.status_code}): check {_API_KEY_ENV} or "
                "api_key=, and that the key's workspace may use this model",
                provider=self.name, status_code=decision.status_code,
            )
        if decision.kind == "permission":
            return ProviderPermissionError(
                f"Anthropic refused the request (HTTP 403 permission_error): the key's workspace may not use model "
                f"{self._model!r}; allow it in the console or pass another model", provider=self.name,
                status_code=decision.status_code)
        if decision.kind in ("billing", "spend_limit"):
            what = ("the organization reached its monthly spend limit (429 enforced_spend_limit_reached): raise "
                    "the limit or move to a higher usage tier" if decision.kind == "spend_limit" else
                    "the account cannot be billed (HTTP 402 billing_error): check the console's billing settings")
            return ProviderBillingError(f"Anthropic stopped the run: {what}; finished contexts are cached",
                                        provider=self.name, status_code=decision.status_code)
        if decision.kind == "not_found":
            return UnknownModelError(
                f"Anthropic does not know model {self._model!r} (HTTP 404): pass a valid model id to "
                "AnthropicProvider(model=...)",
                model=self._model,
            )
        return self._request_failed(decision, exc, "Anthropic request failed")


def _check_extra_body(model: str, info: ModelInfo | None, extra_body: dict[str, Any] | None) -> None:
    """Refuse, before any request, an ``extra_body`` field the model table says this model answers with 400."""
    if not extra_body or info is None:
        return
    if info.rejects_sampling_params:
        for name in _SAMPLING_PARAMS:
            if name in extra_body:
                raise UnsupportedSettingError(
                    f"model {model!r} rejects sampling parameters (HTTP 400): remove {name!r} from extra_body",
                    setting=f"extra_body[{name!r}]", model=model)
    thinking = extra_body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    effort = _effort(extra_body)
    if kind == "disabled" and info.thinking == "always_on":
        raise UnsupportedSettingError(
            f"model {model!r} always thinks: thinking cannot be disabled; remove 'thinking' from extra_body",
            setting="extra_body['thinking']", model=model)
    if kind == "disabled" and effort in ("xhigh", "max"):
        raise UnsupportedSettingError(
            f"thinking can be disabled only at effort low, medium or high, not {effort!r}: lower "
            "extra_body['output_config']['effort'] or remove 'thinking'",
            setting="extra_body['output_config']", model=model)
    if kind == "enabled" and info.thinking != "off":  # Claude 4.7 and later: HTTP 400 (the extended-thinking page)
        raise UnsupportedSettingError(
            f"model {model!r} rejects thinking {{'type': 'enabled', 'budget_tokens': ...}} (HTTP 400): use "
            "{'type': 'adaptive'} with extra_body['output_config']['effort'], or remove 'thinking'",
            setting="extra_body['thinking']", model=model)


def _effort(fields: dict[str, Any]) -> Any:
    config = fields.get("output_config")
    return config.get("effort") if isinstance(config, dict) else None


# -- rate-limit headers ---------------------------------------------------------------------------------

_MAX_PLAUSIBLE_RESET_S = 600.0  # a reset further away than this means a skewed clock: ignore it


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _server_limit(headers: Any, name: str, at: datetime.datetime) -> ServerLimit | None:
    try:
        limit = float(headers.get(f"anthropic-ratelimit-{name}-limit") or "")
        remaining = float(headers.get(f"anthropic-ratelimit-{name}-remaining") or "")
    except ValueError:
        return None
    if not (math.isfinite(limit) and math.isfinite(remaining)) or limit < 1 or remaining < 0:
        return None  # no bucket holds less than one request or token: a value like nan or 1e-300 is not a limit
    full_in: float | None = None
    reset = headers.get(f"anthropic-ratelimit-{name}-reset")
    if reset:
        try:
            reset_at: datetime.datetime | None = datetime.datetime.fromisoformat(reset.replace("Z", "+00:00"))
        except ValueError:
            reset_at = None
        if reset_at is not None and reset_at.tzinfo is not None:
            seconds = (reset_at - at).total_seconds()
            full_in = seconds if 0 < seconds <= _MAX_PLAUSIBLE_RESET_S else None
    return ServerLimit(limit=limit, remaining=min(remaining, limit), full_in_s=full_in)


def server_limits(headers: Any, *, at: datetime.datetime | None = None) -> ServerLimits | None:
    """The ``anthropic-ratelimit-{requests,input-tokens,output-tokens}-{limit,remaining,reset}`` headers of an
    answer (https://platform.claude.com/docs/en/api/rate-limits), or None when it has none (malformed values
    are ignored, never guessed). ``at``: when the request was sent (UTC), the moment the values describe; each
    reset becomes the seconds from then until the bucket is full. Measured from when the answer is read instead,
    a bucket that refills faster than the answer takes (a few requests' deficit) looked full already, so its
    refill rate was never learned and the run paced itself by the per-minute figure (a tenth of the real rate
    on a server that refills every 6 s)."""
    if headers is None:
        return None
    at = at or _utc_now()
    requests, tokens = _server_limit(headers, "requests", at), _server_limit(headers, "input-tokens", at)
    output = _server_limit(headers, "output-tokens", at)
    return ServerLimits(requests, tokens, output) if requests or tokens or output else None


class AnthropicProvider(AnthropicMessages):
    """Writes contexts with Claude; the document block carries ``cache_control`` so it is paid once.

    Instantiate:
        .. code-block:: python

            from ctx_retrieval import AnthropicProvider, ContextGenerator
            generator = ContextGenerator(AnthropicProvider("claude-haiku-5-5"))

    The API key is held privately: it is not in ``repr``, pickles, cache keys or logs.
    """

    # -- Message Batches (half price; results within 24 hours) -------------------------------------------

    async def asubmit_batch(self, entries: list[tuple[str, ContextRequest]]) -> str:
        """Submit ``(custom_id, request)`` pairs as one Message Batch; its id."""
        requests: Any = [{"custom_id": custom_id, "params": self._params(request)} for custom_id, request in entries]
        batch = await self._get_client().messages.batches.create(requests=requests)
        return str(batch.id)

    def batch_request_bytes(self, custom_id: str, request: ContextRequest) -> int:
        """Serialized size of one batch entry, for splitting batches under the API's 256 MB limit."""
        return len(json.dumps({"custom_id": custom_id, "params": self._params(request)}).encode())

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
                try:
                    out.append((entry.custom_id, self._response(result.message.model_dump()), None))
                except MalformedAnswer:
                    out.append((entry.custom_id, None, "invalid_response"))  # retried as an ordinary request
            elif result.type == "errored":
                error = getattr(getattr(result.error, "error", None), "type", "error")
                out.append((entry.custom_id, None, f"errored:{error}"))
            else:
                out.append((entry.custom_id, None, str(result.type)))
        return out
