"""Every context request as a traced call: what the frameworks' tracing (LangChain callbacks, LlamaIndex
instrumentation, OpenTelemetry) records for an LLM call, for any provider.

A ``RequestTracer`` sees each request start, then end with its answer (text, usage with cache reads and writes,
stop reason, dollars) or fail with its error; a Message Batch result is seen when it arrives. Tracers come from
``ContextGenerator(tracers=...)`` and, for one call, from ``tracing(...)`` (a context variable: the adapters pass
the caller's callbacks this way, and it reaches the run's tasks and the helper thread of a synchronous call). A
tracer that raises is logged once and left out of the rest of the run: tracing never fails an ingestion.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ctx_retrieval.types import TokenUsage

TRACED_TEXT_CHARS = 2_000  # what one traced event carries of a chunk or an answer: a 1 MB chunk is not a 1 MB event


def bounded(text: str) -> str:
    """``text`` cut to ``TRACED_TEXT_CHARS``, saying how much was left out."""
    if len(text) <= TRACED_TEXT_CHARS:
        return text
    return f"{text[:TRACED_TEXT_CHARS]} [... {len(text) - TRACED_TEXT_CHARS:,} more characters]"

logger = logging.getLogger(__name__)

_TRACERS: contextvars.ContextVar[tuple[RequestTracer, ...]] = contextvars.ContextVar("ctx_retrieval_tracers",
                                                                                       default=())


@dataclass(frozen=True)
class TracedRequest:
    """One context request, as traced: the chunk block is the prompt's text; the document (the cached block,
    the same for every chunk) is named by id and size, not repeated in every trace."""

    document_id: str
    chunk_id: str
    provider: str
    model: str
    prompt_version: str
    chunk_block: str
    document_chars: int
    max_tokens: int
    batch: bool = False

    @property
    def prompt(self) -> str:
        """What a trace shows of the prompt: the document named, the chunk block cut to ``TRACED_TEXT_CHARS``."""
        return f"[document {self.document_id}: {self.document_chars:,} characters]\n\n{bounded(self.chunk_block)}"


@dataclass(frozen=True)
class TracedAnswer:
    """A request's answer: its text, the usage the provider reported, why it stopped, its list price."""

    text: str
    usage: TokenUsage
    stop_reason: str | None
    model: str
    cost_usd: float | None

    @property
    def shown(self) -> str:
        """What a trace shows of the answer: cut to ``TRACED_TEXT_CHARS`` like the prompt."""
        return bounded(self.text)


@runtime_checkable
class RequestTracer(Protocol):
    """Sees every context request: ``start`` returns a handle that ``end`` or ``error`` receives."""

    def start(self, request: TracedRequest) -> Any: ...

    def end(self, handle: Any, answer: TracedAnswer) -> None: ...

    def error(self, handle: Any, error: BaseException) -> None: ...


@contextlib.contextmanager
def tracing(*tracers: RequestTracer) -> Iterator[None]:
    """Add ``tracers`` for the runs started inside the block (in this thread or task)."""
    token = _TRACERS.set(_TRACERS.get() + tuple(tracers))
    try:
        yield
    finally:
        _TRACERS.reset(token)


def current_tracers(configured: Sequence[RequestTracer] = ()) -> list[RequestTracer]:
    """The tracers of a run starting now: the generator's and those of ``tracing`` blocks around the call."""
    return [*configured, *_TRACERS.get()]


class RunTracers(list[RequestTracer]):
    """A run's tracers (a list: empty when none, as most runs), each call guarded: one that raises is logged and
    dropped."""

    def start(self, request: TracedRequest) -> list[tuple[RequestTracer, Any]]:
        handles = []
        for tracer in list(self):
            try:
                handles.append((tracer, tracer.start(request)))
            except Exception as exc:
                self._drop(tracer, exc)
        return handles

    def end(self, handles: list[tuple[RequestTracer, Any]], answer: TracedAnswer) -> None:
        self._each(handles, lambda tracer, handle: tracer.end(handle, answer))

    def error(self, handles: list[tuple[RequestTracer, Any]], error: BaseException) -> None:
        self._each(handles, lambda tracer, handle: tracer.error(handle, error))

    def _each(self, handles: list[tuple[RequestTracer, Any]], call: Callable[[RequestTracer, Any], None]) -> None:
        for tracer, handle in handles:
            if tracer in self:  # not one dropped since the request started
                try:
                    call(tracer, handle)
                except Exception as exc:  # tracing never fails the run
                    self._drop(tracer, exc)

    def _drop(self, tracer: RequestTracer, exc: Exception) -> None:
        logger.warning("tracer %s raised %r; it is left out of the rest of this run (the run goes on)",
                       type(tracer).__name__, exc)
        self.remove(tracer)
