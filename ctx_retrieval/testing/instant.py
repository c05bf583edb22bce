"""A provider that answers at once, in process: it measures the engine's own overhead, not an LLM's."""

from __future__ import annotations

from ctx_retrieval.errors import CtxRetrievalError
from ctx_retrieval.providers.base import ContextRequest, ErrorDecision, ProviderBase, ProviderResponse
from ctx_retrieval.usage import TokenUsage

__all__ = ["InstantProvider"]


class InstantProvider(ProviderBase):
    """Answers every request immediately with a short context derived from the chunk (no network, no SDK)."""

    name = "instant"
    reports_cache_usage = False

    def __init__(self, model: str = "instant") -> None:
        self._model = model
        self._model_info = None
        self.requests = 0

    @property
    def cache_namespace(self) -> str:
        return "instant"

    def check_ready(self) -> None:
        return None

    async def agenerate(self, request: ContextRequest) -> ProviderResponse:
        self.requests += 1
        words = request.chunk_block.split("<chunk>\n", 1)[-1].split()[:6]
        return ProviderResponse(text="Situates: " + " ".join(words), usage=TokenUsage(input_tokens=1, output_tokens=1))

    def classify_error(self, exc: BaseException) -> ErrorDecision | None:
        return None

    def run_error(self, decision: ErrorDecision, exc: BaseException) -> CtxRetrievalError:  # pragma: no cover - never
        return CtxRetrievalError(decision.kind)
