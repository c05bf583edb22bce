"""A provider that answers at once, in process: it measures the engine's own overhead, not an LLM's, and is the
engine's one-method test seam (as httpx's ``MockTransport(handler)``): ``InstantProvider(handler)`` answers each
request with what ``handler(request)`` returns, or refuses it as a server would when the handler raises
``RefusedError``."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

from ctx_retrieval.errors import CtxRetrievalError, ProviderRequestError
from ctx_retrieval.providers.base import ProviderBase
from ctx_retrieval.types import ContextRequest, ErrorAction, ErrorDecision, ProviderResponse, TokenUsage

Handler = Callable[[ContextRequest], "ProviderResponse | Awaitable[ProviderResponse]"]


class RefusedError(Exception):
    """What a handler raises to refuse a request as a server does: ``kind`` ("rate_limited", "overloaded",
    "authentication"...), what the engine does with it (``action``: retry it, fail the chunk, stop the run), and
    the server's ``retry_after_s`` and ``status_code``."""

    def __init__(self, kind: str, *, action: ErrorAction = "retry", retry_after_s: float | None = None,
                 status_code: int | None = None) -> None:
        super().__init__(kind)
        self.decision = ErrorDecision(action, kind, retry_after_s, status_code)


def situating(request: ContextRequest) -> ProviderResponse:
    """The default answer: a short context made of the chunk's first words."""
    words = request.chunk_block.split("<chunk>\n", 1)[-1].split()[:6]
    return ProviderResponse(text="Situates: " + " ".join(words), usage=TokenUsage(input_tokens=1, output_tokens=1))


class InstantProvider(ProviderBase):
    """Answers every request at once with ``handler(request)`` (a function or a coroutine function; by default a
    short context derived from the chunk): no network, no SDK. ``requests`` counts what it was sent."""

    name = "instant"
    reports_cache_usage = False

    def __init__(self, handler: Handler = situating, *, model: str = "instant") -> None:
        self._model = model
        self._model_info = None
        self.handler = handler
        self.requests = 0

    @property
    def cache_namespace(self) -> str:
        return "instant"

    def check_ready(self) -> None:
        return None

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        self.requests += 1
        answer = self.handler(request)
        return await answer if inspect.isawaitable(answer) else answer

    def classify_error(self, exc: BaseException) -> ErrorDecision | None:
        return exc.decision if isinstance(exc, RefusedError) else None

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> CtxRetrievalError:
        return ProviderRequestError(f"the handler refused the request: {decision.kind}", provider=self.name,
                                    status_code=decision.status_code)
