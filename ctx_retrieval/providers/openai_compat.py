"""Any OpenAI-compatible chat-completions server as the context writer: llama.cpp's server, vLLM, Ollama, OpenAI.

Setup:
    pip install "ctx-retrieval[openai]"

The prompt is one user message with the document first, so servers with automatic prefix caching (vLLM, OpenAI,
llama.cpp's slot cache) reuse it across a document's chunks; the generator still sends one request per document
first. Cached prompt tokens are read from ``usage.prompt_tokens_details.cached_tokens`` when the server reports
them. Retries and scheduling are the generator's (the SDK's retries are off); errors are classified by type.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import TYPE_CHECKING, Any

from .._optional import require
from ..errors import ConfigurationError, ProviderAuthenticationError, ProviderRequestError, UnknownModelError
from ..models import ModelInfo
from ..usage import TokenUsage
from .base import ContextRequest, ErrorDecision, ProviderBase, ProviderResponse, endpoint_identity
from .generic import classify_exception, decision_for_status

if TYPE_CHECKING:
    import openai as openai_sdk

__all__ = ["OpenAICompatibleProvider"]

logger = logging.getLogger(__name__)

_API_KEY_ENV = "OPENAI_API_KEY"
_LOCAL_KEY = "not-needed"  # local servers ignore the key, the SDK wants one


class OpenAICompatibleProvider(ProviderBase):
    """Writes contexts through ``/v1/chat/completions`` of any OpenAI-compatible server.

    Instantiate:
        .. code-block:: python

            provider = OpenAICompatibleProvider("qwen2.5-coder-1.5b", base_url="http://127.0.0.1:8080/v1")
            generator = ContextGenerator(provider)

    Key init args:
        model: the server's model name; base_url: its ``.../v1`` URL.
        api_key: defaults to ``OPENAI_API_KEY``, or a placeholder for local servers that need none.
        model_info: limits and prices (unknown by default: costs are reported as unknown).
        reports_cache_usage: whether the server reports cached prompt tokens (OpenAI and vLLM do; when it
            does not, no "caching did nothing" warning is given).
    """

    name = "openai-compatible"
    _unpicklable = ("_api_key", "_user_client", "_client", "_client_loop")

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
    ) -> None:
        if not base_url:
            raise ConfigurationError("OpenAICompatibleProvider needs base_url, e.g. http://127.0.0.1:8080/v1",
                                     setting="base_url")
        self._model = model
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.timeout_s = timeout_s
        self._model_info = model_info
        self.extra_body = dict(extra_body) if extra_body else None
        self.reports_cache_usage = reports_cache_usage
        self._user_client = client
        self._client: openai_sdk.AsyncOpenAI | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"OpenAICompatibleProvider(model={self._model!r}, base_url={self.base_url!r})"


    @property
    def cache_namespace(self) -> str:
        return f"openai-compatible@{endpoint_identity(self.base_url)}"

    def _resolved_key(self) -> str:
        key = self._api_key if self._api_key is not None else os.environ.get(_API_KEY_ENV)
        return key or _LOCAL_KEY

    def check_ready(self) -> None:
        require("openai", "openai")
        if "api.openai.com" in self.base_url and self._resolved_key() == _LOCAL_KEY:
            raise ProviderAuthenticationError(f"no OpenAI API key: set {_API_KEY_ENV} or pass api_key=",
                                              provider=self.name)

    def _get_client(self) -> openai_sdk.AsyncOpenAI:
        if self._user_client is not None:
            return self._user_client
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            openai = require("openai", "openai")
            self._client = openai.AsyncOpenAI(api_key=self._resolved_key(), base_url=self.base_url, max_retries=0,
                                              timeout=self.timeout_s)
            self._client_loop = loop
        return self._client

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        prompt = request.document_prefix + request.document_rest + "\n\n" + request.chunk_block
        messages: Any = [{"role": "user", "content": prompt}]
        response = await self._get_client().chat.completions.create(
            model=self._model, messages=messages, max_tokens=request.max_tokens, extra_body=self.extra_body)
        text = response.choices[0].message.content or "" if response.choices else ""
        usage = response.usage
        prompt_tokens = getattr(usage, "prompt_tokens", 0) or 0
        details = getattr(usage, "prompt_tokens_details", None)
        cached = (getattr(details, "cached_tokens", 0) or 0) if details is not None else 0
        return ProviderResponse(text=text, usage=TokenUsage(
            input_tokens=prompt_tokens - cached, output_tokens=getattr(usage, "completion_tokens", 0) or 0,
            cache_read_input_tokens=cached))

    def classify_error(self, exc: BaseException) -> ErrorDecision | None:
        import openai

        if isinstance(exc, openai.APIStatusError):
            return decision_for_status(exc.status_code, exc.response.headers)
        if isinstance(exc, openai.APIResponseValidationError):
            return ErrorDecision("retry", "invalid_response")
        return classify_exception(exc)

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> Exception:
        if decision.kind in ("authentication", "permission"):
            return ProviderAuthenticationError(
                f"the server at {self.base_url} rejected the API key (HTTP {decision.status_code}): check "
                f"{_API_KEY_ENV} or api_key=", provider=self.name, status_code=decision.status_code)
        if decision.kind == "not_found":
            return UnknownModelError(f"the server at {self.base_url} does not serve model {self._model!r} (HTTP 404): "
                                     "pass a model it lists at /v1/models", model=self._model)
        return ProviderRequestError(f"request failed: {type(exc).__name__}", provider=self.name,
                                    status_code=decision.status_code)

    async def aclose(self) -> None:
        client, self._client, self._client_loop = self._client, None, None
        if client is not None:
            await client.close()
