"""What the package's parts can do, as Protocols, checked with ``isinstance`` where a part is given (a context run
reads its provider's once, into ``contextualize._settings.ProviderTraits``); nothing probes a trait with
``getattr``: a new trait is declared here.

- ``Contextualizer``: writes contexts for (document, chunks) pairs (``ContextGenerator``,
  ``HeuristicContextualizer``, ``RecordedContextualizer``, or yours); what the framework adapters take.
- ``EstimatingContextualizer``: a ``Contextualizer`` that prices a run before making it (``estimate(items)``).
- ``ProviderContextualizer``: one that writes with a provider and a prompt (``ContextGenerator``): reports and key
  checks name them.
- ``TokenCountingProvider``: a provider whose API counts tokens exactly (Anthropic's ``count_tokens``).
- ``BatchProvider``: a provider with a batch API at a discount (Anthropic's Message Batches).
- ``ServerDescribingProvider``: a provider that asks its server about itself before a run (an OpenAI-compatible
  server's context size, slots and model list); settings that depend on the answer wait for it.
- ``EndpointProvider``: a provider that talks to a server at a URL (outage messages name it).
- ``CacheReportingProvider``: a provider that says whether its answers report prompt-cache use (a server that
  never does is not warned about caching that did nothing).
- ``Embedder``: turns texts into unit vectors (``MiniLMEmbedder``, or yours); ``TokenCountingEmbedder`` also counts
  its own tokens (what chunk sizes and the windows layout are measured in) and says when texts overflow its input;
  ``QueryEmbedder`` embeds many queries at once (E5's query prefix); ``WrapsEmbedder``: a framework embedding model
  of ours around a core embedder.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ctx_retrieval.contextualize.prompts import PromptTemplate
    from ctx_retrieval.contextualize.results import CostEstimate
    from ctx_retrieval.providers.base import Provider
    from ctx_retrieval.types import Chunk, ContextRequest, ContextResult, ProviderResponse, SourceDocument
    from ctx_retrieval.usage import RunReport

__all__ = ["BatchProvider", "CacheReportingProvider", "Contextualizer", "Embedder", "EndpointProvider",
           "EstimatingContextualizer", "ProviderContextualizer", "QueryEmbedder", "ServerDescribingProvider",
           "TokenCountingEmbedder", "TokenCountingProvider", "WrapsEmbedder"]


@runtime_checkable
class Contextualizer(Protocol):
    """Writes one context per chunk. The adapters pass ``progress=True`` (a progress bar for this call only) when
    the user asks for one, and nothing otherwise: a contextualizer of yours without the argument still works."""

    last_report: RunReport | None

    @property
    def identity(self) -> str:
        """Everything that changes its contexts, as text without secrets (frameworks key their caches by it)."""
        ...

    def contextualize_many(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]], *,
                           progress: bool | None = None) -> Sequence[ContextResult]: ...

    async def acontextualize_many(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]], *,
                                  progress: bool | None = None) -> Sequence[ContextResult]: ...


@runtime_checkable
class EstimatingContextualizer(Protocol):
    """A contextualizer that prices a run without making it: cache-aware (chunks the cache holds cost nothing), no
    context request."""

    def estimate(self, items: Iterable[tuple[SourceDocument, Sequence[Chunk]]]) -> CostEstimate: ...


@runtime_checkable
class ProviderContextualizer(Protocol):
    """A contextualizer that writes with a provider and a prompt (``ContextGenerator``)."""

    provider: Provider
    prompt: PromptTemplate


@runtime_checkable
class TokenCountingProvider(Protocol):
    """A provider whose API counts tokens exactly (Anthropic's free ``messages.count_tokens``)."""

    @property
    def model(self) -> str: ...

    @property
    def can_count_tokens(self) -> bool:
        """Whether counting is possible now (a key or client is set)."""
        ...

    async def acount_tokens(self, text: str) -> int: ...


@runtime_checkable
class BatchProvider(Protocol):
    """A provider with a batch API: submit many requests, poll, collect answers in any order."""

    async def asubmit_batch(self, entries: list[tuple[str, ContextRequest]]) -> str:
        """Submit ``(custom_id, request)`` pairs as one batch; its id."""
        ...

    def batch_request_bytes(self, custom_id: str, request: ContextRequest) -> int:
        """Serialized size of one batch entry (batches are split under the API's size limit)."""
        ...

    async def abatch_ended(self, batch_id: str) -> bool: ...

    async def abatch_results(self, batch_id: str) -> list[tuple[str, ProviderResponse | None, str | None]]:
        """``(custom_id, response, None)`` for answered requests, ``(custom_id, None, why)`` for the others."""
        ...


@runtime_checkable
class ServerDescribingProvider(Protocol):
    """A provider that learns about its server before a run (``aprepare``); until then (``prepared`` False) the
    window it can use, and so any cache key holding it, is not known."""

    @property
    def prepared(self) -> bool: ...

    async def aprepare(self) -> list[str]:
        """Ask the server once; notes for the run's report."""
        ...

    @property
    def slots(self) -> int | None:
        """Requests the server serves at once (None: it did not say)."""
        ...

    @property
    def context_tokens(self) -> int | None:
        """The server's context size per request (None: it did not say)."""
        ...

    @property
    def prefix_cache(self) -> str:
        """How the server caches prompt prefixes: ``per_slot``, ``shared`` or ``unknown``."""
        ...


@runtime_checkable
class EndpointProvider(Protocol):
    """A provider that talks to a server at a URL (None: the provider's default endpoint)."""

    base_url: str | None


@runtime_checkable
class CacheReportingProvider(Protocol):
    """A provider that says whether its answers report prompt-cache use."""

    reports_cache_usage: bool


@runtime_checkable
class Embedder(Protocol):
    """Texts in, unit vectors out (rows of a float array)."""

    model_id: str

    def embed(self, texts: Sequence[str]) -> Any: ...

    def embed_query(self, text: str) -> Any: ...


@runtime_checkable
class TokenCountingEmbedder(Embedder, Protocol):
    """An embedder that counts its own tokens and warns, once per call, when texts overflow its input
    (``MiniLMEmbedder``, ``E5Embedder``): the windows layout and the chunkers measure in its tokens."""

    max_tokens: int  # the most tokens one text may have before the model truncates it

    def count_tokens(self, text: str) -> int: ...

    def warn_if_truncated(self, texts: Sequence[str], what: str = ...) -> int: ...

    def warn_if_corpus_truncated(self, texts: Sequence[str], names: Sequence[str], what: str = ...) -> int: ...


@runtime_checkable
class QueryEmbedder(Embedder, Protocol):
    """An embedder that embeds many queries in one call, as queries (E5 prefixes ``query: ``)."""

    def embed_queries(self, texts: Sequence[str]) -> Any: ...


@runtime_checkable
class WrapsEmbedder(Protocol):
    """A framework embedding model of ours around a core embedder (``MiniLMEmbeddings``, ``E5Embedding``...)."""

    @property
    def embedder(self) -> Embedder: ...
