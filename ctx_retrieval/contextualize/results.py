"""What a run returns: its results in input order with the run's report (``ContextRun``), and a dry run's estimate
(``CostEstimate``). Shared by every contextualizer (the generator, the heuristic, recorded contexts), so none of
them imports another to describe its results."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

from ctx_retrieval.types import ContextResult, TokenUsage
from ctx_retrieval.usage import RunReport


class ContextRun(Sequence[ContextResult]):
    """The results of a run in input order (documents, then chunks), with the run's ``report``."""

    def __init__(self, results: list[ContextResult], report: RunReport) -> None:
        self._results = results
        self.report = report

    @overload
    def __getitem__(self, index: int) -> ContextResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[ContextResult]: ...
    def __getitem__(self, index: int | slice) -> ContextResult | list[ContextResult]:
        return self._results[index]

    def __len__(self) -> int:
        return len(self._results)

    def __iter__(self) -> Iterator[ContextResult]:
        return iter(self._results)

    def __repr__(self) -> str:
        r = self.report
        return (f"ContextRun({len(self)} results: generated={r.generated}, cached={r.cached}, "
                f"failed={r.failed}, not_attempted={r.not_attempted})")


@dataclass(frozen=True)
class CostEstimate:
    """A dry-run estimate: what a run would request and cost, from estimated token counts."""

    documents: int
    chunks: int
    cached_chunks: int
    empty_chunks: int
    requests: int
    usage: TokenUsage
    cost_usd: float | None
    document_tokens: int
    uncacheable_documents: list[str] = field(default_factory=list)
    windowed_documents: int = 0
    long_prompt_requests: int = 0  # requests whose prompt would fall into the model's dearer price tier
    reused_chunks: int = 0  # served an earlier context (``ReusePolicy``): no request
    reuse_saved_usd: float | None = 0.0  # what those requests would have cost (None: no prices)

    def format(self) -> str:
        dollars = "unknown (no price for this model)" if self.cost_usd is None else f"${self.cost_usd:.4f}"
        u = self.usage
        return (
            f"estimate: {self.documents} documents, {self.chunks} chunks ({self.cached_chunks} already in the "
            f"context cache, {self.empty_chunks} empty): {self.requests} requests, input {u.input_tokens:,}, "
            f"cache write {u.cache_creation_input_tokens:,}, cache read {u.cache_read_input_tokens:,}, output "
            f"~{u.output_tokens:,} tokens, cost ~{dollars}"
            + (f" ({self.long_prompt_requests} requests in the long-prompt price tier)"
               if self.long_prompt_requests else "")
            + (f"; {self.reused_chunks} chunks reuse an earlier context (stale until refreshed), saving "
               + ("an unknown amount" if self.reuse_saved_usd is None else f"~${self.reuse_saved_usd:.4f}")
               if self.reused_chunks else "")
        )
