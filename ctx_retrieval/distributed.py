"""Distributed ingestion on Ray Data: contexts for a dataset of documents, written by a pool of actors that share
one context cache and one rate limit, so the fleet pays each chunk once and stays under the organization's limit.

Use:
    .. code-block:: python

        import ray
        from ctx_retrieval import AnthropicProvider, RateLimit
        from ctx_retrieval.distributed import contextualize_dataset

        documents = ray.data.from_items([{"id": "acme-10q", "text": text, "chunks": chunk_texts}, ...])
        chunks = contextualize_dataset(documents, provider=AnthropicProvider(), actors=4,
                                       cache="postgresql://user@db-host/contexts",
                                       rate_limit=RateLimit(requests_per_minute=4000, input_tokens_per_minute=2e6))
        chunks.write_parquet("contexts/")  # or feed a LlamaIndex / LangChain ingestion from chunks.iter_rows()

Each input row is a document (``id``, ``text``, ``chunks``: a list of chunk texts, or of ``{"id", "text"}``;
optional ``metadata``); it goes whole to one actor, so each document's prompt cache is written once across the
fleet. Each output row is a chunk: ``document_id``, ``chunk_id``, ``position``, ``text``, ``context``, ``status``,
provenance (``provider``, ``model``, ``prompt_version``), why it failed (``error_kind``, ``error``) and its usage.
Every actor holds one ``ContextGenerator`` on the shared cache (a ``postgresql://`` URL for several machines; a
SQLite path serves actors on one machine): a document another actor is writing is waited for, not paid again
(``contextualize.leases``), and a killed actor's documents are taken over by the retried task. ``rate_limit`` is
owned by one Ray actor that every request reserves from (``SharedBudget``), so N actors do not each assume the
whole limit; the API's own rate-limit headers pace each actor as well. Needs ``ctx-retrieval[ray]``. The API key
is read from each worker's environment (``ANTHROPIC_API_KEY``), never shipped with the task.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from typing import Any

from ctx_retrieval._optional import require
from ctx_retrieval.contextualize.cache_postgres import CACHE_URL_ENV, CacheURL, is_postgres_url, redact_url
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.loaders import document_from_row
from ctx_retrieval.pacing import RateLimit, TokenBucket
from ctx_retrieval.providers.base import Provider
from ctx_retrieval.types import Chunk, SourceDocument

__all__ = ["OUTPUT_COLUMNS", "RateBudget", "contextualize_dataset"]

OUTPUT_COLUMNS = ("document_id", "chunk_id", "position", "text", "context", "status", "provider", "model",
                  "prompt_version", "error_kind", "error", "input_tokens", "output_tokens",
                  "cache_creation_input_tokens", "cache_read_input_tokens")


class RateBudget:
    """Token buckets for requests and input tokens per minute, reserved in arrival order: ``reserve`` takes a
    request's share at once and returns how long it must wait (a negative level is the queue ahead of it). Pure
    Python; ``contextualize_dataset`` runs one as a Ray actor that every worker's limiter asks. ``burst_s``: how
    many seconds' worth may go at once (a minute's by default)."""

    def __init__(self, limit: RateLimit, *, burst_s: float = 60.0) -> None:
        now = time.monotonic()  # APIs may enforce a minute's limit over shorter intervals: burst_s
        self._requests = TokenBucket(limit.requests_per_minute, now, burst_s=burst_s) if (
            limit.requests_per_minute) else None
        self._tokens = TokenBucket(limit.input_tokens_per_minute, now, burst_s=burst_s) if (
            limit.input_tokens_per_minute) else None

    def reserve(self, input_tokens: int, output_tokens: int = 0) -> float:
        now = time.monotonic()
        waits = [bucket.reserve(amount, now) for bucket, amount in ((self._requests, 1), (self._tokens, input_tokens))
                 if bucket is not None]
        return max(waits, default=0.0)


class _RayBudget:
    """The ``SharedBudget`` a worker's limiter sees: one remote call per request to the budget actor."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    async def reserve(self, input_tokens: int, output_tokens: int) -> float:
        return float(await self.actor.reserve.remote(input_tokens, output_tokens))


def _documents(rows: Sequence[dict[str, Any]]) -> list[tuple[SourceDocument, list[Chunk]]]:
    items = []
    for n, row in enumerate(rows):
        row = dict(row)
        if isinstance(row.get("metadata"), str):
            row["metadata"] = json.loads(row["metadata"])
        items.append(document_from_row(row, f"dataset row {n}", chunks_required=True))
    return items


class _ContextualizeBatch:
    """One actor of the pool: one generator on the shared cache for its whole life."""

    def __init__(self, provider: Provider, cache: str, budget: Any, generator_kwargs: dict[str, Any]) -> None:
        from ctx_retrieval.contextualize.generator import ContextGenerator

        kwargs = dict(generator_kwargs)
        kwargs.setdefault("on_error", "skip")  # one bad chunk must not fail the whole batch: it reports why
        self.generator = ContextGenerator(provider, cache=cache, progress=False,
                                          shared_rate_limit=_RayBudget(budget) if budget is not None else None,
                                          **kwargs)

    def __call__(self, batch: Any) -> Any:
        pa = require("pyarrow", "ray")
        rows = batch.to_pylist()
        items = _documents(rows)
        run = self.generator.contextualize_many(items)
        text_of = {(d.id, c.id): c.text for d, chunks in items for c in chunks}
        out = [{"document_id": r.document_id, "chunk_id": r.chunk_id, "position": r.position,
                "text": text_of[(r.document_id, r.chunk_id)], "context": r.context, "status": r.status,
                "provider": r.provider, "model": r.model, "prompt_version": r.prompt_version,
                "error_kind": r.error_kind, "error": r.error, **r.usage.to_dict()} for r in run]
        return pa.Table.from_pylist(out, schema=_schema(pa))


def _schema(pa: Any) -> Any:
    text, number = pa.string(), pa.int64()
    return pa.schema([(name, number if name == "position" or name.endswith("_tokens") else text)
                      for name in OUTPUT_COLUMNS])


def _actor_cache(cache: str) -> str:
    """The cache setting every actor receives: a PostgreSQL URL without its password (Ray keeps and logs actor
    arguments). Each actor takes the password from ``$CTX_RETRIEVAL_CACHE_URL`` (a local cluster inherits this
    process's environment) or libpq's ``$PGPASSWORD`` / ``~/.pgpass``; a password the actors could not learn that
    way is refused here rather than sent."""
    if not is_postgres_url(cache) or redact_url(cache) == cache:
        return cache
    if os.environ.get(CACHE_URL_ENV) != cache and not os.environ.get("PGPASSWORD"):
        raise ConfigurationError(
            f"the cache URL carries a password, which Ray would store and log with every actor's arguments: set "
            f"${CACHE_URL_ENV} to the full URL (or $PGPASSWORD, or ~/.pgpass on each machine) and pass "
            f"cache={redact_url(cache)!r}", setting="cache")
    return CacheURL(cache)


def contextualize_dataset(ds: Any, *, provider: Provider | None = None, cache: str | None = None, actors: int = 4,
                          documents_per_batch: int = 8, rate_limit: RateLimit | None = None,
                          rate_burst_s: float = 60.0, **generator_kwargs: Any) -> Any:
    """A Ray Dataset of chunks with their contexts, from a Ray Dataset of documents (see the module docstring).

    ``cache``: the shared context cache (default ``$CTX_RETRIEVAL_CACHE_URL``); ``actors``: the pool's size;
    ``documents_per_batch``: documents per task (a killed actor's task is retried on another actor, which finds in
    the cache what was already written); ``rate_limit``: the fleet's limit, owned by one budget actor, of which
    ``rate_burst_s`` seconds' worth may go at once; other
    keyword arguments go to each actor's ``ContextGenerator`` (``max_concurrency``, ``prompt``, ``window``, ...).
    Lazy, like every Ray Data transformation: it runs when the result is consumed."""
    ray = require("ray", "ray")
    cache = cache or os.environ.get(CACHE_URL_ENV)
    if not cache:
        raise ConfigurationError(f"contextualize_dataset needs a cache every actor shares: cache='postgresql://...' "
                                 f"(or ${CACHE_URL_ENV}); a SQLite path serves actors on one machine",
                                 setting="cache")
    if actors < 1 or documents_per_batch < 1:
        raise ConfigurationError("actors and documents_per_batch must be >= 1", setting="actors")
    if provider is None:
        from ctx_retrieval.providers.anthropic import AnthropicProvider

        provider = AnthropicProvider()
    budget = None
    if rate_limit is not None:
        budget = ray.remote(num_cpus=0)(RateBudget).remote(rate_limit, burst_s=rate_burst_s)
    return ds.map_batches(
        _ContextualizeBatch, batch_format="pyarrow", batch_size=documents_per_batch,
        compute=ray.data.ActorPoolStrategy(size=actors),
        fn_constructor_kwargs={"provider": provider, "cache": _actor_cache(cache), "budget": budget,
                               "generator_kwargs": generator_kwargs},
        num_cpus=0.5)
