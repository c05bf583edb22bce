"""Any OpenAI-compatible chat-completions server as the context writer: llama.cpp's server, vLLM, Ollama, OpenAI.

Setup:
    pip install "ctx-retrieval[openai]"

The prompt is one user message with the document first, so servers with automatic prefix caching (vLLM, OpenAI,
llama.cpp's slot cache) reuse it across a document's chunks. Before a run the provider asks the server about itself
(``ctx_retrieval.providers.servers``): the model name is checked against ``/v1/models`` (servers that answer any
name with their loaded model would otherwise cache contexts under a wrong name), and llama.cpp's slots and context
size size the run: a per-slot prefix cache gets one document per slot at a time, so each document is read once.
Cached prompt tokens are read from ``usage.prompt_tokens_details.cached_tokens`` (or llama.cpp's
``timings.cache_n``); a server that reports neither is "not reported", never "0". Retries and scheduling are the
generator's (the SDK's retries are off); errors are classified by type and keep the server's message.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ctx_retrieval._optional import require
from ctx_retrieval.errors import (
    ConfigurationError,
    CtxRetrievalError,
    ProviderAuthenticationError,
    ProviderBillingError,
    UnknownModelError,
)
from ctx_retrieval.models import ModelInfo
from ctx_retrieval.providers.base import AnswerTooLarge, SDKProvider, endpoint_identity, parse_json_answer, read_capped
from ctx_retrieval.providers.generic import MalformedAnswer, classify_exception, decision_for_status
from ctx_retrieval.providers.messages import field, plain_prompt, usage_from_fields
from ctx_retrieval.providers.servers import PrefixCache, ServerInfo, describe_server
from ctx_retrieval.types import ContextRequest, ErrorDecision, ProviderResponse

if TYPE_CHECKING:
    import openai as openai_sdk


logger = logging.getLogger(__name__)

_API_KEY_ENV = "OPENAI_API_KEY"
_LOCAL_KEY = "not-needed"  # local servers ignore the key, the SDK wants one


class OpenAICompatibleProvider(SDKProvider["openai_sdk.AsyncOpenAI"]):
    """Writes contexts through ``/v1/chat/completions`` of any OpenAI-compatible server.

    Instantiate:
        .. code-block:: python

            provider = OpenAICompatibleProvider("qwen2.5-coder-1.5b", base_url="http://127.0.0.1:8080/v1")
            generator = ContextGenerator(provider)

    Key init args:
        model: the server's model name; base_url: its ``.../v1`` URL.
        api_key: defaults to ``OPENAI_API_KEY``, or a placeholder for local servers that need none.
        model_info: limits and prices (unknown by default: costs are reported as unknown).
        reports_cache_usage: False to never read cached-token counts (they are read where the server sends
            them, and "not reported" where it does not; no "caching did nothing" warning either way).
        slots: requests the server runs at once (llama.cpp's ``--parallel``, Ollama's ``OLLAMA_NUM_PARALLEL``);
            asked from the server when it can tell (llama.cpp ``/props``), else the generator's ``max_concurrency``.
        context_tokens: the server's context size per request, for windowing; asked from the server when it can
            tell (llama.cpp ``/props``, vLLM's ``max_model_len``).
        check_model: check ``model`` against ``GET /v1/models`` once before a run (default True).
        endpoint_id: a stable name for the endpoint in the context-cache key instead of its URL (the same server
            moved to another host or port keeps its cached contexts).
    """

    name = "openai-compatible"
    _key_env = _API_KEY_ENV

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        model_info: ModelInfo | None = None,
        extra_body: dict[str, Any] | None = None,
        reports_cache_usage: bool = True,
        client: openai_sdk.AsyncOpenAI | None = None,
        slots: int | None = None,
        context_tokens: int | None = None,
        check_model: bool = True,
        endpoint_id: str | None = None,
    ) -> None:
        for name, value in (("slots", slots), ("context_tokens", context_tokens)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigurationError(f"{name} must be a positive whole number or None, not {value!r}",
                                         setting=name)
        if not base_url:
            raise ConfigurationError("OpenAICompatibleProvider needs base_url, e.g. http://127.0.0.1:8080/v1",
                                     setting="base_url")
        self._model = model
        self.base_url = base_url.rstrip("/")
        self._init_client(api_key, client)
        self.timeout_s = timeout_s
        self._model_info = model_info
        self.extra_body = dict(extra_body) if extra_body else None
        self.reports_cache_usage = reports_cache_usage
        self._slots = slots
        self._context_tokens = context_tokens
        self.check_model = check_model
        self.endpoint_id = endpoint_id
        self.server: ServerInfo | None = None

    # -- what the server says about itself ---------------------------------------------------------------

    @property
    def slots(self) -> int | None:
        """Requests the server runs at once: as given, else as the server said, else None (unknown)."""
        return self._slots if self._slots is not None else (self.server.slots if self.server else None)

    @property
    def context_tokens(self) -> int | None:
        return self._context_tokens if self._context_tokens is not None else (
            self.server.context_tokens if self.server else None)

    @property
    def prefix_cache(self) -> PrefixCache:
        """``per_slot``: keep a slot on one document until its chunks are done (llama.cpp, llama-cpp-python,
        Ollama); ``shared``: any request reuses any cached prefix (vLLM, OpenAI); ``unknown``."""
        return self.server.prefix_cache if self.server else "unknown"

    @property
    def prepared(self) -> bool:
        """Whether the server was asked about itself (``aprepare``): its context size, and so the window, is known."""
        return self.server is not None

    async def aprepare(self) -> list[str]:
        """Ask the server about itself once (model list, slots, context size) and check the model name; returns
        notes for the run's report. ``UnknownModelError`` lists the served models."""
        if self.server is not None:
            return []
        info = await describe_server(self._get_client(), self.base_url, self._model)
        self.server = info
        notes = list(info.notes)
        if self.check_model and info.models and self._model not in info.models:
            served = ", ".join(repr(m) for m in info.models[:10])
            raise UnknownModelError(
                f"the server at {self.base_url} ({info.kind}) serves {served}, not {self._model!r}"
                + (": it would answer with its loaded model under the name you gave, and contexts would be cached "
                   "under that name" if info.accepts_any_model else "")
                + "; pass one of the served ids as the model (or check_model=False)", model=self._model)
        if self.slots is None and info.prefix_cache != "shared":
            notes.append(f"the server at {self.base_url} does not say how many requests it runs at once: pass "
                         "OpenAICompatibleProvider(slots=N) (llama.cpp --parallel, OLLAMA_NUM_PARALLEL) so requests "
                         "do not queue into timeouts, and each slot keeps one document's prefix")
        logger.info("server at %s: %s, slots %s, context %s tokens, prefix cache %s", self.base_url, info.kind,
                    self.slots, self.context_tokens, self.prefix_cache)
        return notes

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider(model={self._model!r}, base_url={self.base_url!r})"

    @property
    def cache_namespace(self) -> str:
        return f"openai-compatible@{self.endpoint_id or endpoint_identity(self.base_url)}"

    def _resolved_key(self) -> str:
        return super()._resolved_key() or _LOCAL_KEY  # local servers take any key

    def check_ready(self) -> None:
        require("openai", "openai")
        if "api.openai.com" in self.base_url and self._resolved_key() == _LOCAL_KEY:
            raise ProviderAuthenticationError(f"no OpenAI API key: set {_API_KEY_ENV} or pass api_key=",
                                              provider=self.name)

    def _new_client(self) -> openai_sdk.AsyncOpenAI:
        openai = require("openai", "openai")
        client: openai_sdk.AsyncOpenAI = openai.AsyncOpenAI(api_key=self._resolved_key(), base_url=self.base_url,
                                                            max_retries=0, timeout=self.timeout_s)
        return client

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        messages: Any = [{"role": "user", "content": plain_prompt(request)}]
        client = self._get_client()

        async def send(deadline: float) -> tuple[bytes, Any]:
            async with client.chat.completions.with_streaming_response.create(
                    model=self._model, messages=messages, max_tokens=request.max_tokens, extra_body=self.extra_body,
                    timeout=deadline) as raw:
                return await read_capped(raw.iter_bytes()), raw.headers

        body, _ = await self.bounded(send)
        response = parse_json_answer(body)
        choices = field(response, "choices")
        if not isinstance(choices, list) or not isinstance(field(response, "usage"), dict):
            raise MalformedAnswer("an answer without choices or usage")
        choice = choices[0] if choices else None
        content = field(field(choice, "message"), "content")
        if content is not None and not isinstance(content, str):
            raise MalformedAnswer("a message whose content is not text")
        text = content or ""
        cached = self._cached_tokens(response) if self.reports_cache_usage else None
        usage = {"prompt_tokens": field(response["usage"], "prompt_tokens") or 0,
                 "completion_tokens": field(response["usage"], "completion_tokens") or 0,
                 "prompt_tokens_details": {"cached_tokens": cached or 0}}
        finish = field(choice, "finish_reason")
        return ProviderResponse(text=text, usage=usage_from_fields(usage), cache_reported=cached is not None,
                                stop_reason="max_tokens" if finish == "length" else finish)

    @staticmethod
    def _cached_tokens(response: Any) -> int | None:
        """Prompt tokens the server reused: ``usage.prompt_tokens_details.cached_tokens`` (OpenAI, vLLM,
        llama.cpp), else llama.cpp's ``timings.cache_n``; None when the server reports neither."""
        cached = field(field(field(response, "usage"), "prompt_tokens_details"), "cached_tokens")
        if isinstance(cached, int):
            return cached
        cache_n = field(field(response, "timings"), "cache_n")
        return cache_n if isinstance(cache_n, int) else None

    def classify_error(self, exc: BaseException) -> ErrorDecision | None:
        import openai

        if isinstance(exc, openai.APIStatusError):
            return decision_for_status(exc.status_code, exc.response.headers, getattr(exc, "body", None))
        if isinstance(exc, (openai.APIResponseValidationError, AnswerTooLarge)):
            return ErrorDecision("retry", "invalid_response")
        return classify_exception(exc)

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> CtxRetrievalError:
        if decision.kind in ("authentication", "permission"):
            return ProviderAuthenticationError(
                f"the server at {self.base_url} rejected the API key (HTTP {decision.status_code}): check "
                f"{_API_KEY_ENV} or api_key=", provider=self.name, status_code=decision.status_code)
        if decision.kind == "billing":
            return ProviderBillingError(
                f"the server at {self.base_url} says the account has no quota left (HTTP {decision.status_code} "
                "insufficient_quota): add credit or raise the plan's limit; finished contexts are cached",
                provider=self.name, status_code=decision.status_code, error_type="insufficient_quota")
        if decision.kind == "not_found":
            return UnknownModelError(f"the server at {self.base_url} does not serve model {self._model!r} (HTTP 404): "
                                     "pass a model it lists at /v1/models", model=self._model)
        return self._request_failed(decision, exc, "request failed")
