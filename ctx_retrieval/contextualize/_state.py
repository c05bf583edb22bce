"""One run's state: its report, results, plans, limiter, request and document slots, progress bar and leases, and
what stopped it. Made by ``RunState.start`` from the generator's settings; read and changed by the engine, the
batches and the cache side of the run (``runcache``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any

from ctx_retrieval.contextualize._planning import Plan
from ctx_retrieval.contextualize._scheduling import DOCUMENTS_PER_SLOT, server_shape
from ctx_retrieval.contextualize._settings import RunSettings
from ctx_retrieval.contextualize.leases import DocumentLeases
from ctx_retrieval.contextualize.tracing import RunTracers, current_tracers
from ctx_retrieval.contextualize.versions import Previous
from ctx_retrieval.errors import CtxRetrievalError
from ctx_retrieval.pacing import ConcurrencyTuner, Pacer, PrioritySlots
from ctx_retrieval.progress import NoBar, make_bar
from ctx_retrieval.types import ContextResult
from ctx_retrieval.usage import RunReport

logger = logging.getLogger(__name__)


@dataclass
class RunState:
    report: RunReport
    results: list[ContextResult | None]
    plans: list[Plan]
    pacer: Pacer  # the limiter, clock, retry policy, random source and run-wide streaks every request goes through
    slots: PrioritySlots
    doc_slots: asyncio.Semaphore
    progress: Any
    stop: bool = False
    fatal: CtxRetrievalError | None = None
    fatal_cause: BaseException | None = None
    budget_hit: bool = False
    interrupted: bool = False  # stop() (Ctrl-C in the CLI): requests in flight finish, the rest are not attempted
    abandoned: bool = False  # stop(at_once=True): requests in flight were cancelled too
    task: Any = None  # the run's task and loop, which stop(at_once=True) cancels from a signal handler
    loop: Any = None
    inflight_cost: float = 0.0
    probe: asyncio.Event | None = None
    per_slot: bool = False  # the server caches one prefix per slot: each document's chunks go one at a time
    leases: DocumentLeases | None = None  # other workers share the cache: documents are claimed before writing
    failures_logged: int = 0
    tuner: ConcurrencyTuner | None = None  # finds how many requests to keep in flight (None: fixed)
    documents_capacity: int = 0
    documents_per_slot: float = 2.0
    tracers: RunTracers = field(default_factory=lambda: RunTracers(()))  # who sees each request (tracing.py)
    previous: dict[int, Previous] = field(default_factory=dict)  # earlier contexts served or kept (``versions``)

    @classmethod
    def start(cls, plans: list[Plan], settings: RunSettings, *, progress: bool, notes: list[str],
              fatal: CtxRetrievalError | None, pacer: Pacer, leases: DocumentLeases | None = None) -> RunState:
        """A run's state: its report, limiter, request and document slots (shaped by the server), progress bar;
        the provider's ``notes`` are logged and reported."""
        versions = sorted({p.prompt.version for p in plans if p.chunks}) or [settings.prompt.version]
        report = RunReport(provider=settings.traits.name, model=settings.traits.model,
                           prompt_version=", ".join(versions), documents=len(plans),
                           chunks=sum(len(p.chunks) for p in plans),
                           document_tokens=sum(p.tokens for p in plans if p.chunks),
                           windowed_documents=sum(p.windowed for p in plans))
        for note in notes:
            logger.warning("%s", note)
            report.warnings.append(note)
        shape = server_shape(settings.traits, settings.max_concurrency, settings.max_documents_in_flight)
        concurrency, documents, per_slot = shape.concurrency, shape.documents, shape.per_slot
        state = cls(report=report, results=[None] * report.chunks, plans=plans,
                    pacer=pacer,
                    slots=PrioritySlots(concurrency), doc_slots=asyncio.Semaphore(documents),
                    per_slot=per_slot, progress=progress_bar(progress, report.chunks),
                    leases=leases, tracers=RunTracers(current_tracers(settings.tracers)),
                    documents_per_slot=0.0 if settings.max_documents_in_flight else float(DOCUMENTS_PER_SLOT))
        report.peak_concurrency = concurrency
        state.documents_capacity = documents
        if shape.grow_to is not None:
            state.tuner = ConcurrencyTuner(state.slots, settings.clock, shape.grow_to)
        if fatal is not None:
            state.stop_with(fatal, fatal.__cause__)
        return state

    def stop_with(self, error: CtxRetrievalError, cause: BaseException | None = None) -> None:
        """Stop the run; the first fatal error is the one raised at the end (``from`` its cause)."""
        if self.fatal is None:
            self.fatal, self.fatal_cause = error, cause
        self.stop = True


def progress_bar(enabled: bool, total: int) -> Any:
    return make_bar(total, "contextualizing", enabled=enabled)


def logs_above(bar: Any) -> contextlib.AbstractContextManager[Any]:
    """While a progress bar runs, log lines go above it (through ``tqdm.write``) instead of breaking it."""
    if isinstance(bar, NoBar):
        return contextlib.nullcontext()
    from tqdm.contrib.logging import logging_redirect_tqdm

    redirect: contextlib.AbstractContextManager[Any] = logging_redirect_tqdm()
    return redirect


def grow_if_bound(state: RunState) -> None:
    """A request the rate limits let through is about to take a slot: the tuner (``pacing.ConcurrencyTuner``)
    decides whether more requests go in flight; documents in flight follow the slots."""
    if state.tuner is None or not state.tuner.bound():
        return
    slots = state.slots
    wanted = int(slots.capacity * state.documents_per_slot)
    while state.documents_capacity < wanted:
        state.documents_capacity += 1
        state.doc_slots.release()  # one more document may start
    state.report.peak_concurrency = max(state.report.peak_concurrency, slots.capacity)
