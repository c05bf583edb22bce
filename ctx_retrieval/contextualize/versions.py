"""Document versions and context reuse: a chunk whose text did not change keeps the context an earlier version of its
document got, and a model or prompt migration keeps serving each chunk's previous context until its new one is
written. Both are opt-in (``ReusePolicy``); the default stays exact (a context is served only for the document text,
model, prompt and window it was written for).

How it works. Every run records, per document, the version it saw (its text digest and each chunk's digest and
token count: ``DocumentVersion``), and every stored context says which document version, model and prompt it was
written for and which chunk it belongs to (``chunk_key``: the document id and the chunk's text). When a chunk's
exact context is missing, the contexts stored for the same chunk key are candidates:

- **same settings, earlier version** (an edited document): reused while the document changed by at most
  ``max_changed_tokens`` since the version that context was written from (tokens of chunks added plus chunks
  removed, by the run's token counter), and the chunk lies more than ``rewrite_neighbours`` chunks from an edit;
- **another model or prompt** (``other_models=True``, a migration): reused while its document version is within
  the same threshold (an unchanged document always is).

The nearest candidate wins (fewest changed tokens, then same settings, then the newest). A reused context is
*stale*: ``ContextResult.status == "reused"``, ``written_from`` names the document version, and the run's report
lists it in ``stale``. ``ContextGenerator.refresh_stale`` rewrites stale contexts later (in batch mode at half
price if asked), nearest the edits first: a chunk's distance is how many chunks lie between it and the nearest
chunk added or removed since its context's version (its neighbours' text is what the context may describe);
chunks of an unchanged document (migrations) come after all edited ones, in document order. During a refresh a
chunk keeps its stale context until the new one is written, so no chunk is ever served without one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ctx_retrieval.contextualize.cache import CachedContext, DocumentVersion, _digest
from ctx_retrieval.errors import ConfigurationError

CHUNK_DIGEST_CHARS = 16  # 64 bits: chunk digests are compared within one document only


@dataclass(frozen=True)
class ReusePolicy:
    """When a missing context may be served from an earlier one (``ContextGenerator(reuse=...)``).

    ``max_changed_tokens``: an edited document's unchanged chunks keep their contexts while the document changed
    by at most this many tokens (added plus removed chunks) since the version each context was written from;
    0 reuses nothing across edits. ``other_models``: after a model or prompt change, serve each chunk's previous
    context until the new one is written (``refresh_stale`` writes them). ``rewrite_neighbours``: chunks within
    this many chunks of an edit are rewritten at once, never reused (0: only changed chunks are written)."""

    max_changed_tokens: int = 0
    other_models: bool = False
    rewrite_neighbours: int = 0

    def __post_init__(self) -> None:
        for name in ("max_changed_tokens", "rewrite_neighbours"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"ReusePolicy.{name} must be an int >= 0, got {value!r}", setting=name)
        if not isinstance(self.other_models, bool):
            raise ConfigurationError("ReusePolicy.other_models must be True or False", setting="other_models")

    @property
    def reuses(self) -> bool:
        return self.max_changed_tokens > 0 or self.other_models

    @property
    def identity(self) -> str:
        return f"reuse:{self.max_changed_tokens}:{int(self.other_models)}:{self.rewrite_neighbours}"


@dataclass(frozen=True)
class Previous:
    """A stored context chosen for a chunk whose exact one is missing."""

    context: str
    entry: CachedContext
    changed_tokens: int
    distance: float  # chunks between this one and the nearest edit; inf when its document did not change
    same_settings: bool

    @property
    def priority(self) -> tuple[float, int]:
        """Refresh order: nearest an edit first; a migration (no edit) after every edited chunk."""
        return (self.distance, self.changed_tokens)


@runtime_checkable
class VersionedStore(Protocol):
    """What reuse needs of a context cache beyond ``ContextStore`` (both built-in caches have it)."""

    read_only: bool  # a cache opened read-only records no versions

    def previous_contexts(self, chunk_keys: Iterable[str]) -> dict[str, list[CachedContext]]: ...

    def get_versions(self, versions: Iterable[tuple[str, str]]) -> dict[tuple[str, str], DocumentVersion]: ...

    def put_versions(self, versions: Sequence[DocumentVersion]) -> None: ...

    def stale_marker(self) -> str: ...

    def stale_documents(self) -> list[str]: ...


@runtime_checkable
class RefreshingContextualizer(Protocol):
    """A contextualizer that may serve stale contexts and rewrite them (``ContextGenerator``)."""

    reuse: ReusePolicy | None

    def versioned_cache(self) -> VersionedStore | None: ...

    async def arefresh_stale(self, items: Any, *, batch: bool = ..., poll_interval_s: float = ...,
                             progress: bool | None = ...) -> Any: ...


def stale_marker(contextualizer: object) -> str:
    """Text that changes whenever the stale contexts in a contextualizer's cache do (a reuse run served some, a
    refresh rewrote some); "" without a reuse policy. A framework cache keyed by it (LlamaIndex's ``IngestionCache``,
    through ``ContextualNodeTransform``) never hides a refreshed context behind a cached pipeline step."""
    if not isinstance(contextualizer, RefreshingContextualizer) or contextualizer.reuse is None:
        return ""
    cache = contextualizer.versioned_cache()
    return cache.stale_marker() if cache is not None else ""


def refreshing(contextualizer: object) -> RefreshingContextualizer:
    """``contextualizer`` when it can refresh stale contexts (a ``ContextGenerator``), else ``ConfigurationError``
    (the adapters' ``refresh_stale`` check it before a pipeline runs)."""
    if not isinstance(contextualizer, RefreshingContextualizer):
        raise ConfigurationError(f"{type(contextualizer).__name__} writes no stale contexts: refresh_stale needs a "
                                 "ContextGenerator (with a ReusePolicy)", setting="contextualizer")
    return contextualizer


def stale_documents(contextualizer: object) -> list[str]:
    """Ids of the documents with stale contexts in a contextualizer's cache (their latest version's); [] when it has
    no cache that records versions."""
    cache = contextualizer.versioned_cache() if isinstance(contextualizer, RefreshingContextualizer) else None
    return cache.stale_documents() if cache is not None else []


def chunk_key(document_id: str, chunk_text: str) -> str:
    """The key every context of one chunk shares, whatever the document version, model or prompt."""
    return _digest("chunk", document_id, chunk_text)


def chunk_digest(chunk_text: str) -> str:
    return _digest(chunk_text)[:CHUNK_DIGEST_CHARS]


def changed_tokens(old: Sequence[tuple[str, int]], new: Sequence[tuple[str, int]]) -> int:
    """Tokens of the chunks in ``new`` and not in ``old`` plus those in ``old`` and not in ``new`` (as multisets:
    a repeated chunk counts as often as it appears)."""
    before = Counter(d for d, _ in old)
    after = Counter(d for d, _ in new)
    tokens = {d: t for d, t in (*old, *new)}
    return sum(tokens[d] * n for d, n in ((after - before) + (before - after)).items())


def edit_distances(old: Sequence[tuple[str, int]], new: Sequence[tuple[str, int]]) -> list[float]:
    """For each chunk of ``new``: how far it lies from the nearest edit since ``old``, in chunks (0: it was added;
    1: it sits beside an added chunk or where a chunk was removed; inf: nothing changed)."""
    before = Counter(d for d, _ in old)
    kept = Counter(d for d, _ in new) & before
    added: list[int] = []
    seen: Counter[str] = Counter()
    for position, (d, _) in enumerate(new):
        seen[d] += 1
        if seen[d] > kept[d]:
            added.append(position)
    # Removed chunks: walk the old list, placing each removal before the next kept chunk of the new list.
    new_positions: dict[str, list[int]] = {}
    for position, (d, _) in enumerate(new):
        new_positions.setdefault(d, []).append(position)
    removal_points: list[float] = []
    used: Counter[str] = Counter()
    next_new = 0
    for d, _ in old:
        places = new_positions.get(d, [])
        if used[d] < min(kept[d], len(places)):
            next_new = places[used[d]] + 1
            used[d] += 1
        else:
            removal_points.append(next_new - 0.5)  # between new[next_new - 1] and new[next_new]
    if not added and not removal_points:
        return [math.inf] * len(new)
    return [min([abs(p - a) for a in added] + [abs(p - r) + 0.5 for r in removal_points]) for p in range(len(new))]
