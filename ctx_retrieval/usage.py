"""Token usage, dollars, and the report of a contextualization run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import ModelInfo, Prices
    from .types import Chunk, SourceDocument

__all__ = ["FailedChunk", "RunReport", "TokenUsage", "cost_usd", "request_cost_usd"]


@dataclass(frozen=True)
class TokenUsage:
    """Tokens billed for one request or summed over many, as the provider reported them.

    ``input_tokens`` excludes cached tokens, as in Anthropic's API: the prompt is
    ``input_tokens + cache_creation_input_tokens + cache_read_input_tokens`` tokens long.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    def __sub__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens - other.input_tokens,
            self.output_tokens - other.output_tokens,
            self.cache_creation_input_tokens - other.cache_creation_input_tokens,
            self.cache_read_input_tokens - other.cache_read_input_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """All input tokens of the prompt, cached or not."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenUsage:
        return cls(
            int(data.get("input_tokens") or 0),
            int(data.get("output_tokens") or 0),
            int(data.get("cache_creation_input_tokens") or 0),
            int(data.get("cache_read_input_tokens") or 0),
        )


def _dollars(usage: TokenUsage, prices: Prices, cache_ttl: str) -> float:
    write_price = prices.cache_write_1h_per_mtok if cache_ttl == "1h" else prices.cache_write_5m_per_mtok
    return (
        usage.input_tokens * prices.input_per_mtok
        + usage.output_tokens * prices.output_per_mtok
        + usage.cache_creation_input_tokens * write_price
        + usage.cache_read_input_tokens * prices.cache_read_per_mtok
    ) / 1_000_000


def cost_usd(usage: TokenUsage, model: ModelInfo, *, cache_ttl: str = "5m", batch: bool = False,
             long_prompt_usage: TokenUsage | None = None) -> float:
    """Dollars for ``usage`` at ``model``'s list prices (cache writes priced for ``cache_ttl``).

    ``usage`` is summed over requests; ``long_prompt_usage`` is the part of it from requests whose prompt fell
    into the model's dearer prompt-length tier (billed whole at that tier). Message Batches bill 50%.
    """
    long_part = long_prompt_usage or TokenUsage()
    dollars = _dollars(usage - long_part, model.base_prices, cache_ttl)
    if long_part.prompt_tokens or long_part.output_tokens:
        dollars += _dollars(long_part, model.long_prompt_prices or model.base_prices, cache_ttl)
    return dollars * (0.5 if batch else 1.0)


def request_cost_usd(usage: TokenUsage, model: ModelInfo, *, cache_ttl: str = "5m", batch: bool = False) -> float:
    """Dollars for one request's ``usage``: its prompt length picks the price tier."""
    prices = model.prices_for(usage.prompt_tokens)
    return _dollars(usage, prices, cache_ttl) * (0.5 if batch else 1.0)


@dataclass(frozen=True)
class FailedChunk:
    """A chunk left without a context, with the document needed to retry it."""

    document: SourceDocument
    chunk: Chunk
    chunks: tuple[Chunk, ...]  # the document's whole chunk list: windows and cache keys depend on it
    error_type: str
    message: str

    def __repr__(self) -> str:
        return (
            f"FailedChunk(document_id={self.document.id!r}, chunk_id={self.chunk.id!r}, "
            f"error_type={self.error_type!r}, message={self.message!r})"
        )


@dataclass
class RunReport:
    """What a run did and cost. Every input chunk is counted in exactly one of
    ``generated``, ``cached``, ``empty``, ``failed`` and ``not_attempted``."""

    provider: str
    model: str
    prompt_version: str
    documents: int = 0
    chunks: int = 0
    generated: int = 0
    cached: int = 0
    empty: int = 0
    requests: int = 0
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
    windowed_documents: int = 0
    uncacheable_documents: list[str] = field(default_factory=list)
    failures: list[FailedChunk] = field(default_factory=list)
    skipped: list[FailedChunk] = field(default_factory=list)
    wall_time_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    cache_reads_reported: bool = True  # False: the server did not say how many prompt tokens it reused

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

    @property
    def cost_per_million_document_tokens(self) -> float | None:
        """Dollars per million (estimated) document tokens contextualized by this run."""
        if self.cost_usd is None or not self.document_tokens:
            return None
        return self.cost_usd / self.document_tokens * 1_000_000

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
            "empty": self.empty,
            "failed": self.failed,
            "not_attempted": self.not_attempted,
            "requests": self.requests,
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
            "windowed_documents": self.windowed_documents,
            "uncacheable_documents": list(self.uncacheable_documents),
            "failures": [
                {"document_id": f.document.id, "chunk_id": f.chunk.id, "error_type": f.error_type, "message": f.message}
                for f in self.to_retry
            ],
            "wall_time_s": round(self.wall_time_s, 3),
            "warnings": list(self.warnings),
        }

    def format(self) -> str:
        """A short human-readable summary for terminals and logs."""
        u = self.usage
        dollars = "unknown (no price for this model)" if self.cost_usd is None else f"${self.cost_usd:.4f}"
        per_m = self.cost_per_million_document_tokens
        lines = [
            f"provider {self.provider}, model {self.model}, prompt {self.prompt_version}",
            f"documents {self.documents}, chunks {self.chunks}: generated {self.generated}, "
            f"from context cache {self.cached}, empty {self.empty}, failed {self.failed}, "
            f"not attempted {self.not_attempted}",
            f"requests {self.requests} (retries {self.retries}, rate-limited {self.rate_limited})",
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
            + (f", ${per_m:.2f} per million document tokens (estimated tokens)" if per_m is not None else ""),
            f"wall time {self.wall_time_s:.2f} s",
        ]
        if self.windowed_documents:
            lines.append(f"windowed documents (too large for max_document_tokens): {self.windowed_documents}")
        if self.long_prompt_requests:
            lines.append(f"requests billed at the model's dearer long-prompt tier: {self.long_prompt_requests}")
        if self.uncacheable_documents:
            lines.append(
                f"documents below the model's minimum cacheable length (no prompt caching): "
                f"{len(self.uncacheable_documents)}"
            )
        for warning in self.warnings:
            lines.append(f"warning: {warning}")
        for failure in self.to_retry[:10]:
            lines.append(
                f"  no context: {failure.document.id}/{failure.chunk.id}: {failure.error_type}: {failure.message}")
        if len(self.to_retry) > 10:
            lines.append(f"  ... and {len(self.to_retry) - 10} more without context")
        return "\n".join(lines)
