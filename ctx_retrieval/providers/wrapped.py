"""The shared part of providers that wrap a framework's model: identity, limits, errors; the adapters add the call.

``langchain_ctx.LangChainChatProvider`` and ``llama_index_ctx.LlamaIndexLLMProvider`` subclass this, so any
model the user already configured (OpenAI, Bedrock, Vertex, Ollama, Claude, ...) writes contexts with the
generator's scheduling, retries, context cache and reports.
"""

from __future__ import annotations

from typing import Any

from ctx_retrieval.errors import (
    ConfigurationError,
    CtxRetrievalError,
    ProviderAuthenticationError,
    ProviderRequestError,
    UnknownModelError,
)
from ctx_retrieval.models import ModelInfo, lookup_model_info, platform_model
from ctx_retrieval.providers.base import ProviderBase, endpoint_identity
from ctx_retrieval.providers.generic import classify_exception, server_error_type
from ctx_retrieval.types import ContextRequest, ErrorDecision, ProviderResponse


class WrappedModelProvider(ProviderBase):
    """Base of the framework-model providers. ``cache_control`` decides whether the document block is marked
    with Anthropic's ``cache_control`` (None: when the wrapped model is an Anthropic one), for ``cache_ttl``
    (``"5m"`` or ``"1h"``, priced accordingly in the report)."""

    name = "wrapped"
    _unpicklable = ("wrapped",)  # framework clients hold keys and connections; never pickled here

    def __init__(self, model: Any, *, model_name: str | None = None, model_info: ModelInfo | None = None,
                 cache_control: bool | None = None, reports_cache_usage: bool | None = None,
                 cache_ttl: str = "5m") -> None:
        if cache_ttl not in ("5m", "1h"):
            raise ConfigurationError("cache_ttl must be '5m' or '1h'", setting="cache_ttl")
        self._cache_ttl = cache_ttl
        self.wrapped = model
        self._model = model_name or self._model_name(model)
        # Kept as text: the wrapped model is not pickled, and the cache key must not change with it.
        self._wrapped_type = type(model).__name__
        self._endpoint = self._endpoint_of(model)
        self._model_info = model_info if model_info is not None else lookup_model_info(self._model)
        # Claude under any name: ChatAnthropic / Anthropic classes, and Claude ids as the Claude API, Amazon Bedrock
        # ("us.anthropic.claude-...-v1:0", behind ChatBedrock) or Vertex AI ("claude-...@date") spell them
        anthropic_model = "anthropic" in type(model).__name__.lower() or platform_model(
            self._model).claude_id.startswith("claude")
        self.cache_control = anthropic_model if cache_control is None else cache_control
        self.reports_cache_usage = anthropic_model if reports_cache_usage is None else reports_cache_usage

    @staticmethod
    def _model_name(model: Any) -> str:
        for attribute in ("model", "model_name", "model_id"):
            value = getattr(model, attribute, None)
            if isinstance(value, str) and value:
                return value
        return type(model).__name__

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self._model!r}, wrapped={type(self.wrapped).__name__})"

    @staticmethod
    def _endpoint_of(model: Any) -> str | None:
        """The endpoint a framework model is configured with, under the names LangChain's and LlamaIndex's
        integrations use for it (None: the provider's default)."""
        for attribute in ("base_url", "api_base", "anthropic_api_url", "openai_api_base", "azure_endpoint",
                          "endpoint_url"):
            value = getattr(model, attribute, None)
            if isinstance(value, str) and value:
                return endpoint_identity(value)
        return None

    @property
    def cache_ttl(self) -> str:
        return self._cache_ttl

    @property
    def cache_namespace(self) -> str:
        namespace = f"{self.name}:{self._wrapped_type}"
        return f"{namespace}@{self._endpoint}" if self._endpoint else namespace

    def check_ready(self) -> None:
        if self.wrapped is None:
            raise ProviderRequestError("the wrapped model was not restored after unpickling: build the provider "
                                       "again with the model", provider=self.name)

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:  # pragma: no cover - abstract
        raise NotImplementedError

    def classify_error(self, exc: BaseException) -> ErrorDecision | None:
        return classify_exception(exc)

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> CtxRetrievalError:
        if decision.kind in ("authentication", "permission"):
            return ProviderAuthenticationError(
                f"the wrapped model's service rejected its credentials (HTTP {decision.status_code}): check the "
                "key it was configured with", provider=self.name, status_code=decision.status_code)
        if decision.kind == "not_found":
            return UnknownModelError(f"the wrapped model's service does not know model {self._model!r} "
                                     f"(HTTP {decision.status_code})", model=self._model)
        return ProviderRequestError(f"request failed: {type(exc).__name__}", provider=self.name,
                                    status_code=decision.status_code, error_type=server_error_type(exc))

