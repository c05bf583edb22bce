"""The report of a contextualization run: what was done, failed or not attempted, its tokens and dollars.

``TokenUsage`` lives in ``ctx_retrieval.types`` (importable from here too); dollars for a usage are computed by
``ctx_retrieval.models.cost_usd`` from the model table's prices."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ctx_retrieval.types import TokenUsage

if TYPE_CHECKING:
    from ctx_retrieval.types import Chunk, SourceDocument


@dataclass(frozen=True)
class FailedChunk:
    """A chunk left without a context, with the document needed to retry it."""

    document: SourceDocument
    chunk: Chunk
    chunks: tuple[Chunk, ...]  # the document's whole chunk list: windows and cache keys depend on it
    error_kind: str  # why, for programs: the chunk's ContextResult.error_kind ("rate_limited", "max_tokens"...)
    message: str

    def __repr__(self) -> str:
        return (
            f"FailedChunk(document_id={self.document.id!r}, chunk_id={self.chunk.id!r}, "
            f"error_kind={self.error_kind!r}, message={self.message!r})"
        )


@dataclass(frozen=True)
class StaleChunk:
    """A chunk serving a reused context (``ReusePolicy``), with what ``refresh_stale`` needs to rewrite it."""

    document: SourceDocument
    chunk: Chunk
    chunks: tuple[Chunk, ...]
    written_from: str  # the document version its context was written from
    model: str  # the model and prompt that wrote it
    prompt_version: str
    distance: float  # chunks between it and the nearest edit (inf: its document did not change: a migration)
    other_settings: bool = False  # written by another model or prompt (a migration in progress)

    def __repr__(self) -> str:
        return (f"StaleChunk(document_id={self.document.id!r}, chunk_id={self.chunk.id!r}, written_from="
                f"{self.written_from!r}, model={self.model!r}, distance={self.distance})")


@dataclass
class RunReport:
    """What a run did and cost. Every input chunk is counted in exactly one of
    ``generated``, ``cached``, ``reused``, ``empty``, ``failed`` and ``not_attempted``."""

    provider: str
    model: str
    prompt_version: str
    documents: int = 0
    chunks: int = 0
    generated: int = 0
    cached: int = 0
    empty: int = 0
    requests: int = 0  # requests that reached the server (answered, or refused with an HTTP error)
    peak_concurrency: int = 0  # the most requests the run kept in flight (it grows when latency holds it back)
    retries: int = 0
    rate_limited: int = 0
    errors_by_type: dict[str, int] = field(default_factory=dict)
    usage: TokenUsage = field(default_factory=TokenUsage)
    batch_usage: TokenUsage = field(default_factory=TokenUsage)  # billed at the Message Batches API's 50%
    batch_requests: int = 0
    long_prompt_usage: TokenUsage = field(default_factory=TokenUsage)  # ordinary requests in the dearer tier
    long_prompt_batch_usage: TokenUsage = field(default_factory=TokenUsage)
    long_prompt_requests: int = 0  # requests (ordinary and batch) whose prompt fell into the dearer price tier
    cost_usd: float | None = None
    document_tokens: int = 0
    paid_document_tokens: float = 0.0  # document tokens in proportion to the chunks requests were paid for
    windowed_documents: int = 0
    uncacheable_documents: list[str] = field(default_factory=list)
    failures: list[FailedChunk] = field(default_factory=list)
    skipped: list[FailedChunk] = field(default_factory=list)
    wall_time_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    cache_reads_reported: bool = True  # False: the server did not say how many prompt tokens it reused
    shared_documents: int = 0  # documents another worker on the shared cache was writing; their contexts came from it
    unstored: int = 0  # answers paid for and returned that the context cache could not store (a full disk, an outage)
    lease_rechecks: int = 0  # requests held back because this worker's lease was stale (a stall): re-read, re-claimed
    stale: list[StaleChunk] = field(default_factory=list)  # reused contexts (``ReusePolicy``), to refresh
    reuse_saved_usd: float | None = 0.0  # what writing the reused contexts would have cost (estimated; None: no prices)
    refreshed: int = 0  # stale contexts rewritten by this run (``refresh_stale``)

    @property
    def reused(self) -> int:
        """Chunks served an earlier context: their document changed elsewhere, or another model or prompt wrote it."""
        return len(self.stale)

    @property
    def on_previous_settings(self) -> int:
        """Reused contexts written by another model or prompt (a migration in progress)."""
        return sum(1 for s in self.stale if s.other_settings)

    def documents_to_refresh(self) -> list[tuple[SourceDocument, tuple[Chunk, ...]]]:
        """The documents with stale chunks, each once with its whole chunk list (what ``refresh_stale`` needs)."""
        items: dict[str, tuple[SourceDocument, tuple[Chunk, ...]]] = {}
        for stale in self.stale:
            items.setdefault(stale.document.id, (stale.document, stale.chunks))
        return list(items.values())

    @property
    def failed(self) -> int:
        return len(self.failures)

    @property
    def not_attempted(self) -> int:
        return len(self.skipped)

    @property
    def to_retry(self) -> list[FailedChunk]:
        """Failed and not-attempted chunks: what ``ContextGenerator.retry_failed`` runs again."""
        return [*self.failures, *self.skipped]

    def documents_to_retry(self) -> list[tuple[SourceDocument, tuple[Chunk, ...]]]:
        """The documents with chunks in ``to_retry``, each once with its whole chunk list (what a rerun needs)."""
        items: dict[str, tuple[SourceDocument, tuple[Chunk, ...]]] = {}
        for failure in self.to_retry:
            items.setdefault(failure.document.id, (failure.document, failure.chunks))
        return list(items.values())

    @property
    def cost_per_million_document_tokens(self) -> float | None:
        """Dollars per million (estimated) document tokens this run paid requests for: each document counts for
        the share of its chunks that were requested (a partial run, or one served mostly from the cache, is not
        divided by documents it did not pay for)."""
        if self.cost_usd is None or not self.paid_document_tokens:
            return None
        return self.cost_usd / self.paid_document_tokens * 1_000_000

    @property
    def cache_read_share(self) -> float:
        """Cache-read tokens as a share of all prompt tokens (ordinary and batch requests)."""
        usage = self.usage + self.batch_usage
        total = usage.prompt_tokens
        return usage.cache_read_input_tokens / total if total else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "prompt_version": self.prompt_version,
            "documents": self.documents,
            "chunks": self.chunks,
            "generated": self.generated,
            "cached": self.cached,
            "reused": self.reused,
            "refreshed": self.refreshed,
            "on_previous_settings": self.on_previous_settings,
            "reuse_saved_usd": self.reuse_saved_usd,
            "empty": self.empty,
            "failed": self.failed,
            "not_attempted": self.not_attempted,
            "requests": self.requests,
            "peak_concurrency": self.peak_concurrency,
            "retries": self.retries,
            "rate_limited": self.rate_limited,
            "errors_by_type": dict(self.errors_by_type),
            "usage": self.usage.to_dict(),
            "batch_usage": self.batch_usage.to_dict(),
            "batch_requests": self.batch_requests,
            "long_prompt_requests": self.long_prompt_requests,
            "cost_usd": self.cost_usd,
            "cost_per_million_document_tokens": self.cost_per_million_document_tokens,
            "cache_read_share": self.cache_read_share if self.cache_reads_reported else None,
            "cache_reads_reported": self.cache_reads_reported,
            "document_tokens_estimated": self.document_tokens,
            "paid_document_tokens_estimated": round(self.paid_document_tokens),
            "windowed_documents": self.windowed_documents,
            "shared_documents": self.shared_documents,
            "lease_rechecks": self.lease_rechecks,
            "unstored": self.unstored,
            "uncacheable_documents": list(self.uncacheable_documents),
            "failures": [
                {"document_id": f.document.id, "chunk_id": f.chunk.id, "error_kind": f.error_kind, "message": f.message}
                for f in self.to_retry
            ],
            "wall_time_s": round(self.wall_time_s, 3),
            "warnings": list(self.warnings),
        }

    def format(self, *, warnings: bool = True) -> str:
        """A short human-readable summary for terminals and logs; ``warnings=False`` leaves out the warnings
        (a terminal that shows the package's log lines has shown them already)."""
        u = self.usage
        dollars = ("$0.0000 (no request was made)" if self.cost_usd is None and not self.requests
                   and not self.batch_requests else
                   "unknown (no price for this model)" if self.cost_usd is None else f"${self.cost_usd:.4f}")
        per_m = self.cost_per_million_document_tokens
        lines = [
            f"provider {self.provider}, model {self.model}, prompt {self.prompt_version}",
            f"documents {self.documents}, chunks {self.chunks}: generated {self.generated}, "
            f"from context cache {self.cached}, empty {self.empty}, failed {self.failed}, "
            f"not attempted {self.not_attempted}",
            f"requests {self.requests} (retries {self.retries}, rate-limited {self.rate_limited}; up to "
            f"{self.peak_concurrency} in flight)",
            f"tokens: input {u.input_tokens:,}, output {u.output_tokens:,}, cache write "
            f"{u.cache_creation_input_tokens:,}, cache read {u.cache_read_input_tokens:,} "
            f"({self.cache_read_share:.1%} of prompt tokens)" if self.cache_reads_reported else
            f"tokens: input {u.input_tokens:,} (prompt tokens; how many the server reused from its cache is not "
            f"reported), output {u.output_tokens:,}",
            *([f"batch: {self.batch_requests} requests at half price, tokens: input "
               f"{self.batch_usage.input_tokens:,}, output {self.batch_usage.output_tokens:,}, cache write "
               f"{self.batch_usage.cache_creation_input_tokens:,}, cache read "
               f"{self.batch_usage.cache_read_input_tokens:,}"] if self.batch_requests else []),
            f"cost {dollars}"
            + (f", ${per_m:.2f} per million document tokens paid for ({self.paid_document_tokens:,.0f} estimated)"
               if per_m is not None else ""),
            f"wall time {self.wall_time_s:.2f} s",
        ]
        if self.refreshed:
            lines.append(f"refreshed {self.refreshed} stale contexts (rewritten for the current document and settings)")
        if self.stale:
            saved = "an unknown amount" if self.reuse_saved_usd is None else f"~${self.reuse_saved_usd:.4f}"
            lines.append(f"reused {self.reused} earlier contexts (stale until refreshed; reuse saved {saved})"
                         + (f", {self.on_previous_settings} ({self.on_previous_settings / self.chunks:.1%} of chunks) "
                            "written by the previous model or prompt" if self.on_previous_settings else ""))
        if self.shared_documents:
            lines.append(f"documents another worker was writing (contexts read from the shared cache): "
                         f"{self.shared_documents}")
        if self.lease_rechecks:
            lines.append(f"requests held back to re-check a stale lease (this worker stalled): {self.lease_rechecks}")
        if self.windowed_documents:
            lines.append(f"windowed documents (too large for max_document_tokens): {self.windowed_documents}")
        if self.long_prompt_requests:
            lines.append(f"requests billed at the model's dearer long-prompt tier: {self.long_prompt_requests}")
        if self.uncacheable_documents:
            lines.append(
                f"documents below the model's minimum cacheable length (no prompt caching): "
                f"{len(self.uncacheable_documents)}"
            )
        if warnings:
            lines.extend(f"warning: {warning}" for warning in self.warnings)
        elif self.warnings:
            lines.append(f"warnings: {len(self.warnings)} (shown above)")
        for failure in self.to_retry[:10]:
            document, chunk = failure.document.id, failure.chunk.id  # a chunk id that names its document says it once
            where = chunk if chunk.startswith(document) else f"{document}/{chunk}"
            lines.append(f"  no context: {where}: {failure.error_kind}: {failure.message}")
        if len(self.to_retry) > 10:
            lines.append(f"  ... and {len(self.to_retry) - 10} more without context")
        return "\n".join(lines)
