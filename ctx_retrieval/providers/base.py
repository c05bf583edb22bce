"""The provider interface: one context request in, one answer and its usage out.

A provider does no retrying and no scheduling (the generator owns both); it turns a ``ContextRequest`` into
an API call and classifies the exceptions its SDK raises by type, so the generator can decide what to do.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

from ctx_retrieval.errors import CtxRetrievalError
from ctx_retrieval.models import ModelInfo
from ctx_retrieval.types import (
    ContextRequest,
    ErrorAction,
    ErrorDecision,
    ProviderResponse,
    ServerLimit,
    ServerLimits,
)

__all__ = ["ContextRequest", "ErrorAction", "ErrorDecision", "Provider", "ProviderBase", "ProviderResponse",
           "ServerLimit", "ServerLimits", "endpoint_identity"]


def endpoint_identity(url: str) -> str:
    """An endpoint URL as it goes into a context-cache key: scheme, host, port and path; any credentials or
    query string in the URL are left out (a key must never reach the cache)."""
    parts = urlsplit(url.strip())
    if not parts.scheme or not parts.hostname:
        return url.strip()
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return f"{parts.scheme}://{host}{parts.path.rstrip('/')}"


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

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> CtxRetrievalError:
        """The typed error that stops the run for a ``fail_run`` decision."""
        ...

    async def aclose(self) -> None:
        """Release clients opened for the current event loop."""
        ...


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
