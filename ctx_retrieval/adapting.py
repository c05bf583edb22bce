"""What both framework adapters do alike, once: choosing who writes the contexts (checked when given, not at the first
chunk), grouping a framework's chunks into the documents they are contextualized against, the metadata a
contextualized chunk records, and the report of a step the framework's own cache served.

The adapters convert their types (LangChain ``Document``, LlamaIndex nodes) to and from what these take.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ctx_retrieval.contextualize.results import ContextRun, CostEstimate
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.keys import (
    CONTEXT_MODEL_KEY,
    CONTEXT_PROMPT_VERSION_KEY,
    CONTEXT_PROVIDER_KEY,
    CONTEXT_STATUS_KEY,
    CONTEXT_WRITTEN_FROM_KEY,
)
from ctx_retrieval.naming import SOURCE_KEYS
from ctx_retrieval.protocols import (
    Contextualizer,
    EstimatingContextualizer,
    ProviderContextualizer,
    TokenCountingEmbedder,
    WrapsEmbedder,
)
from ctx_retrieval.reconstruct import Piece, source_document
from ctx_retrieval.types import Chunk, ContextResult, SourceDocument, make_chunk_id
from ctx_retrieval.usage import RunReport

logger = logging.getLogger(__name__)


def contextualizer_for(given: Any, *, wrap: Callable[[Any], Any] | None = None, what: str = "contextualizer") -> Any:
    """Who writes the contexts for what an adapter was given: Claude (``ContextGenerator()``) for ``None``; a
    contextualizer as it is; a ``ctx_retrieval`` provider in a ``ContextGenerator``; a framework model through
    ``wrap`` (which returns a provider, or ``None`` for what it does not take). A provider's key is checked here:
    a missing or malformed one fails now, in both frameworks, not at the first chunk."""
    from ctx_retrieval.contextualize.generator import ContextGenerator
    from ctx_retrieval.providers.base import Provider

    if given is None:
        chosen: Any = ContextGenerator()
    elif isinstance(given, Contextualizer):
        chosen = given
    elif isinstance(given, Provider):
        chosen = ContextGenerator(given)
    else:
        provider = wrap(given) if wrap is not None else None
        if provider is None:
            raise TypeError(f"{what}= takes a ctx_retrieval provider (AnthropicProvider(...)), a contextualizer "
                            f"(ContextGenerator(...)) or the framework's chat model, not {type(given).__name__}")
        chosen = ContextGenerator(provider)
    if isinstance(chosen, ProviderContextualizer):
        chosen.provider.check_ready()
    return chosen


def embedder_of(model: Any) -> Any:
    """The core embedder a framework embedding model of ours wraps (``MiniLMEmbeddings``, ``E5Embedding``... all
    expose it as ``embedder``), else the model itself."""
    return model.embedder if isinstance(model, WrapsEmbedder) else model


def counting_embedder(model: Any) -> TokenCountingEmbedder | None:
    """The embedder behind ``model`` when it counts its own tokens (the offline ones), else ``None``."""
    embedder = embedder_of(model)
    return embedder if isinstance(embedder, TokenCountingEmbedder) else None


def warn_truncated(model: Any, texts: Sequence[str], names: Sequence[str]) -> None:
    """One warning per indexing call, naming documents by ``names`` (file names), when the offline embedder behind
    ``model`` would truncate some of ``texts``."""
    embedder = counting_embedder(model)
    if embedder is not None and texts:
        embedder.warn_if_corpus_truncated(list(texts), list(names))


def stable_id(chunk_id: str, source: str | None, start: int | None, text: str) -> str:
    """A chunk id derived from its source, offset and text where the splitter drew a random UUID (the same chunk
    indexed twice would be two entries); ids without a source, and ids that are not UUIDs (chosen by you), are
    kept."""
    try:
        uuid.UUID(chunk_id)
    except ValueError:
        return chunk_id
    return chunk_id if source is None else make_chunk_id(source, start if start is not None else -1, text)


def identity(contextualizer: Any) -> str:
    """Everything that changes a contextualizer's contexts, as text without secrets (a framework cache's key)."""
    if isinstance(contextualizer, Contextualizer):
        return contextualizer.identity
    return type(contextualizer).__name__  # a user's own contextualizer: its class is all we know


def grouped(chunks: Iterable[tuple[str, Piece]], *, text_of: Callable[[str], str | None] = lambda _: None,
            metadata_of: Callable[[str], Mapping[str, Any] | None] = lambda _: None
            ) -> list[tuple[SourceDocument, list[Chunk]]]:
    """``(source id, piece)`` pairs grouped by source, in first-seen order, each with its document: the text
    ``text_of`` gives (a docstore, ``source_documents=``), else rebuilt from the pieces' offsets."""
    groups: dict[str, list[Piece]] = {}
    for source, piece in chunks:
        groups.setdefault(source, []).append(piece)
    return [source_document(source, pieces, text=text_of(source), metadata=metadata_of(source))
            for source, pieces in groups.items()]


def provenance(result: ContextResult) -> dict[str, Any]:
    """The metadata a contextualized chunk records of its context: who wrote it, with which prompt, and how it was
    obtained (``written_from`` only for a reused, stale context)."""
    out = {CONTEXT_PROVIDER_KEY: result.provider, CONTEXT_MODEL_KEY: result.model,
           CONTEXT_PROMPT_VERSION_KEY: result.prompt_version, CONTEXT_STATUS_KEY: result.stored_status}
    if result.written_from:
        out[CONTEXT_WRITTEN_FROM_KEY] = result.written_from
    return out


def served_report(contextualizer: Any, served_by: str = "the framework's cache served its chunks") -> RunReport:
    """The report of a step that wrote no context: the framework's cache served it, or it has not run yet."""
    if isinstance(contextualizer, ProviderContextualizer):
        provider, model = contextualizer.provider.name, contextualizer.provider.model
        version = contextualizer.prompt.version
    else:  # a contextualizer of yours: its class is all we know
        provider, model, version = type(contextualizer).__name__, "-", "-"
    return RunReport(provider=provider, model=model, prompt_version=version,
                     warnings=[f"this step generated no contexts in its last run: {served_by} (0 requests, $0), "
                               "or it has not run yet"])


def file_name(metadata: Mapping[str, Any], fallback: str) -> str:
    """A chunk's file name, for warnings that name documents by their file (else ``fallback``)."""
    for key in SOURCE_KEYS:
        if metadata.get(key):
            return Path(str(metadata[key])).name
    return fallback


def estimate_of(contextualizer: Any, items: list[tuple[SourceDocument, list[Chunk]]]) -> CostEstimate:
    """The adapters' ``estimate``: the contextualizer's own dry run over the items the step would send it (the same
    documents and chunk ids, so the cache is read as the run reads it), every document counted with the API's free
    token counter where there is one; the counts stay with the generator (and its cache), so the run that follows
    does not count them again."""
    from ctx_retrieval.contextualize.generator import ContextGenerator

    if not isinstance(contextualizer, EstimatingContextualizer):
        raise ConfigurationError(f"{type(contextualizer).__name__} cannot price a run (it has no estimate(items)): "
                                 "estimates come from ContextGenerator and HeuristicContextualizer",
                                 setting="contextualizer")
    if isinstance(contextualizer, ContextGenerator):  # a dry run asked for by name: every document counted (free)
        return contextualizer.estimate(items, exact=True)
    return contextualizer.estimate(items)


async def acontextualize(contextualizer: Any, items: list[tuple[SourceDocument, list[Chunk]]], *,
                         tracer: Any = None, progress: bool = False, refresh: Mapping[str, Any] | None = None
                         ) -> tuple[Sequence[ContextResult], RunReport | None]:
    """What both adapters' steps run: the contextualizer over ``items`` with the framework's request ``tracer`` (when
    one listens) and a progress bar for this call only (a shared generator keeps its own setting), or, with
    ``refresh`` (``batch=``...), its stale contexts rewritten; the results and the run's report."""
    from ctx_retrieval.contextualize.tracing import tracing
    from ctx_retrieval.contextualize.versions import refreshing

    shown = {"progress": True} if progress else {}
    with tracing(*([tracer] if tracer else [])):
        if refresh is not None:
            results = await refreshing(contextualizer).arefresh_stale(items, **refresh, **shown)
        else:
            results = await contextualizer.acontextualize_many(items, **shown)
    return results, report_of(results, contextualizer)


def report_of(results: Sequence[ContextResult] | Any, contextualizer: Any) -> RunReport | None:
    """The report a contextualizer's call returned (a ``ContextRun``), else its last one."""
    if isinstance(results, ContextRun):
        return results.report
    return contextualizer.last_report if isinstance(contextualizer, Contextualizer) else None
