"""``ContextualNodeTransform``: an ``IngestionPipeline`` step that writes a situating context into each node."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, TextNode, TransformComponent
from pydantic import ConfigDict, Field, PrivateAttr

from ctx_retrieval._aio import run_sync
from ctx_retrieval.adapting import (
    acontextualize,
    contextualizer_for,
    estimate_of,
    grouped,
    identity,
    provenance,
    served_report,
)
from ctx_retrieval.contextualize.results import CostEstimate
from ctx_retrieval.contextualize.versions import refreshing, stale_documents
from ctx_retrieval.contextualize.versions import stale_marker as cache_stale_marker
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.keys import CONTEXT_KEY, CONTEXT_SEPARATOR, CONTEXT_WRITTEN_FROM_KEY, PROVENANCE_KEYS
from ctx_retrieval.protocols import ProviderContextualizer, ServerDescribingProvider
from ctx_retrieval.reconstruct import Piece
from ctx_retrieval.types import Chunk, SourceDocument
from ctx_retrieval.usage import RunReport

from .tracing import LlamaIndexRequestTracer

logger = logging.getLogger(__name__)


class ContextualNodeTransform(TransformComponent):
    """Adds a context to every node, right after any node parser in an ``IngestionPipeline``.

    Setup:
        pip install "ctx-retrieval[llama-index,anthropic]"

    Key init args:
        context_key: the metadata key of the context (``"context"``). It reaches the embedding text and
            the BM25 side (``MetadataMode.EMBED``).
        context_for_llm: whether the answering LLM also sees the context (default False: it is added to
            ``excluded_llm_metadata_keys``). Provenance keys are stored but excluded from both.
        indexed_metadata_keys: metadata keys whose values also enter the indexed text, after the context
            (default none: the embedding and BM25 see ``context + blank line + chunk``, exactly the core's
            ``indexed_text``, so the published figures describe this path). Every other key is added to
            ``excluded_embed_metadata_keys``; nodes render metadata as values (``metadata_template="{value}"``).
        contextualize_whole_documents: a node that is its whole document has nothing to situate (default
            False: it gets no context).
        show_progress: a progress bar over the chunks (not part of the ingestion-cache key).

    Instantiate:
        .. code-block:: python

            transform = ContextualNodeTransform(llm=AnthropicProvider())  # or from_generator(ContextGenerator(...))
            pipeline = IngestionPipeline(transformations=[SentenceSplitter(), transform, embed_model],
                                         cache=IngestionCache())

    Use:
        .. code-block:: python

            nodes = pipeline.run(documents=docs)             # or: await pipeline.arun(...)
            nodes[0].metadata["context"]; transform.last_report.format()

    Async:
        ``acall`` runs the provider's requests concurrently (LlamaIndex's default would run ``__call__`` on the
        event loop).

    Only stable configuration is a pydantic field (fields are the ingestion-cache key): the contextualizer,
    its client and API key, the docstore and run state are private attributes.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    context_key: str = CONTEXT_KEY
    context_for_llm: bool = False
    indexed_metadata_keys: tuple[str, ...] = ()
    contextualize_whole_documents: bool = False
    contextualizer_id: str = Field(default="", description="the contextualizer's identity: every setting that "
                                   "changes its contexts (LlamaIndex's ingestion-cache key)")
    show_progress: bool = Field(default=False, exclude=True, description="progress bar; not part of the cache key")
    stale_marker: str = Field(default="", description="changes when the context cache's stale contexts do (with a "
                              "ReusePolicy): a refreshed context is never hidden behind the IngestionCache")

    _contextualizer: Any = PrivateAttr(default=None)
    _docstore: Any = PrivateAttr(default=None)
    _last_report: RunReport | None = PrivateAttr(default=None)
    _notes: list[str] = PrivateAttr(default_factory=list)
    _refresh: dict[str, Any] | None = PrivateAttr(default=None)  # set by refresh_stale for one pipeline run

    def __init__(self, llm: Any = None, *, contextualizer: Any = None, docstore: Any = None, **data: Any) -> None:
        """``llm``: who writes the contexts: a ``ctx_retrieval`` provider (``AnthropicProvider(...)``,
        ``OpenAICompatibleProvider(...)``), a LlamaIndex LLM, or a ready contextualizer (``ContextGenerator``,
        ``HeuristicContextualizer``); Claude (``ContextGenerator()``) when omitted. A missing or malformed key
        fails here, not when the pipeline runs. ``docstore`` (optional) holds the source documents."""
        if llm is not None and contextualizer is not None:
            raise ConfigurationError("pass llm= or contextualizer=, not both", setting="llm")
        chosen = _contextualizer_for(llm if llm is not None else contextualizer)
        data.setdefault("contextualizer_id", identity(chosen))
        super().__init__(**data)
        self._contextualizer = chosen
        self._docstore = docstore
        self._learn_server()  # the key is final from the start: the same before, during and after a run

    @property
    def last_report(self) -> RunReport:
        """What this transform's last call did and cost: tokens, cache hits, dollars, failures. Before any call,
        and after a run whose ``IngestionCache`` served this step (LlamaIndex then does not call the transform), it
        is an empty report that says so."""
        return self._last_report if self._last_report is not None else served_report(
            self._contextualizer, "the run's IngestionCache served its nodes")

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        # IngestionPipeline hashes each step with to_dict() right before it either calls the step or serves the
        # step's nodes from its IngestionCache: forgetting the last report here keeps it from going stale, and
        # the key is taken only once the server said what it is (its context size decides the window).
        self._last_report = None
        self._learn_server()
        # a refresh must run this step (never its cached output); otherwise the key follows the stale contexts
        self.stale_marker = f"refresh:{time.time_ns()}" if self._refresh is not None else cache_stale_marker(
            self._contextualizer)
        return super().to_dict(**kwargs)

    def _learn_server(self) -> None:
        """Ask a server-describing provider about its server before the key is taken: two local servers with
        different context sizes window differently, so they must not share an ingestion-cache key."""
        chosen = self._contextualizer
        provider = chosen.provider if isinstance(chosen, ProviderContextualizer) else None
        if not isinstance(provider, ServerDescribingProvider) or provider.prepared:
            return
        automatic = self.contextualizer_id == identity(self._contextualizer)
        run_sync(_prepared(provider))
        if automatic:  # a contextualizer_id the user set stays as set
            self.contextualizer_id = identity(self._contextualizer)

    @classmethod
    def from_generator(cls, contextualizer: Any = None, *, docstore: Any = None,
                       **kwargs: Any) -> ContextualNodeTransform:
        """Wrap a ``ContextGenerator`` (Claude by default) or ``HeuristicContextualizer``; ``docstore`` (optional)
        holds the source documents."""
        return cls(contextualizer=contextualizer, docstore=docstore, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "ContextualNodeTransform"

    def __setstate__(self, state: dict[str, Any]) -> None:
        # LlamaIndex rebuilds a component from its public fields only; the contextualizer (and docstore) travel
        # as private state: a worker process (IngestionPipeline(num_workers=...)) gets them back. Keys never
        # travel: providers drop them when pickled and read the environment again in the worker.
        super().__setstate__(state)
        private = state.get("__pydantic_private__") or {}
        for name in ("_contextualizer", "_docstore"):
            if private.get(name) is not None:
                setattr(self, name, private[name])

    # -- finding the source documents --------------------------------------------------------------------

    def _plan(self, nodes: Sequence[BaseNode]) -> list[tuple[SourceDocument, list[Chunk]]]:
        pieces: list[tuple[str, Piece]] = []
        whole = 0
        for node in nodes:
            ref = node.ref_doc_id
            if ref is None and not self.contextualize_whole_documents:
                whole += 1  # a whole document: nothing to situate it in
                continue
            pieces.append((ref or node.node_id, Piece(node.node_id, node.get_content(metadata_mode=MetadataMode.NONE),
                                                      getattr(node, "start_char_idx", None))))
        self._notes = []
        if whole:
            self._notes.append(
                f"{whole} of {len(nodes)} nodes are whole documents (no source document: was a node parser such as "
                "SentenceSplitter left out before ContextualNodeTransform?) and got no context; "
                "contextualize_whole_documents=True gives them one")
            logger.warning("%s", self._notes[-1])
        items = grouped(pieces, text_of=self._docstore_text)
        single = sum(1 for _, chunks in items if len(chunks) == 1)
        if single:
            self._notes.append(f"{single} documents are a single node: each got a context written from a document "
                               "no larger than the node")
        return items

    def _docstore_text(self, ref: str) -> str | None:
        document = self._docstore.get_document(ref, raise_error=False) if self._docstore is not None else None
        return None if document is None else str(document.get_content(metadata_mode=MetadataMode.NONE))

    def _apply(self, nodes: Sequence[BaseNode], results: Sequence[Any]) -> list[BaseNode]:
        by_id = {r.chunk_id: r for r in results}
        for node in nodes:
            result = by_id.get(node.node_id)
            if result is None:
                continue
            # The indexed text is the core's indexed_text: the context first, then the keys asked for, in order.
            rest = {k: v for k, v in node.metadata.items() if k != self.context_key}
            first = {self.context_key: result.context} if result.context else {}
            asked = {k: rest.pop(k) for k in self.indexed_metadata_keys if k in rest}
            rest.pop(CONTEXT_WRITTEN_FROM_KEY, None)
            node.metadata = {**first, **asked, **rest, **provenance(result)}
            if isinstance(node, TextNode):
                node.metadata_template, node.metadata_separator = "{value}", "\n"
                node.text_template = "{metadata_str}" + CONTEXT_SEPARATOR + "{content}"
            shown = {self.context_key, *self.indexed_metadata_keys}
            node.excluded_embed_metadata_keys = _with(node.excluded_embed_metadata_keys,
                                                      [k for k in node.metadata if k not in shown])
            llm_hidden = list(PROVENANCE_KEYS)
            if not self.context_for_llm:
                llm_hidden.append(self.context_key)
            node.excluded_llm_metadata_keys = _with(node.excluded_llm_metadata_keys, llm_hidden)
        return list(nodes)

    # -- the transform API -------------------------------------------------------------------------------

    def estimate(self, nodes: Sequence[BaseNode]) -> CostEstimate:
        """What running this step over ``nodes`` (a node parser's output) would request and cost, with no context
        request: the same documents and node ids the run would use, so nodes already in the context cache cost
        nothing."""
        if self._contextualizer is None:
            raise ConfigurationError("build the transform with ContextualNodeTransform.from_generator(...)",
                                     setting="contextualizer")
        return estimate_of(self._contextualizer, self._plan(nodes))

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        # Read here, on the pipeline's own stack: acall runs in an event loop (or on a helper thread) whose frames
        # do not lead back to run_transformations.
        if "show_progress" not in kwargs and _pipeline_shows_progress():
            kwargs["show_progress"] = True
        return run_sync(self.acall(nodes, **kwargs))

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        if self._contextualizer is None:
            raise ConfigurationError("build the transform with ContextualNodeTransform.from_generator(...)",
                                     setting="contextualizer")
        if "show_progress" not in kwargs and _pipeline_shows_progress():
            kwargs["show_progress"] = True
        items = self._plan(nodes)
        if not items:
            self._last_report = None
            return list(nodes)
        show = self.show_progress or bool(kwargs.get("show_progress"))
        # each request is traced as an LLM call (instrumentation events, and the callback manager's LLM events)
        results, report = await acontextualize(self._contextualizer, items, progress=show, refresh=self._refresh,
                                               tracer=LlamaIndexRequestTracer(kwargs.get("callback_manager")))
        if report is not None:
            report.warnings.extend(self._notes)
        self._last_report = report
        return self._apply(nodes, results)


def _pipeline_shows_progress() -> bool:
    """Whether ``IngestionPipeline.run(show_progress=True)`` is running this transform: LlamaIndex's
    ``run_transformations`` keeps ``show_progress`` for its own bar over the transformations and does not pass it on,
    so it is read from that caller's frame (a few frames up; ``False`` when called any other way)."""
    import sys

    frame = sys._getframe(1)
    for _ in range(8):
        frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return False
        if (frame.f_code.co_name in ("run_transformations", "arun_transformations")
                and frame.f_globals.get("__name__") == "llama_index.core.ingestion.pipeline"):
            return bool(frame.f_locals.get("show_progress"))
    return False


def _contextualizer_for(given: Any) -> Any:
    """A contextualizer for what ``ContextualNodeTransform`` was given, checked now (key present and well-formed)."""
    from llama_index.core.llms import LLM

    from .providers import LlamaIndexLLMProvider

    return contextualizer_for(given, wrap=lambda m: LlamaIndexLLMProvider(m) if isinstance(m, LLM) else None,
                              what="llm")


async def _prepared(provider: Any) -> None:
    """``provider.aprepare()`` on a loop of its own, its client closed after (the run reopens one)."""
    try:
        await provider.aprepare()
    finally:
        await provider.aclose()


def _with(keys: list[str] | None, extra: Sequence[str]) -> list[str]:
    current = list(keys or [])
    return current + [k for k in extra if k not in current]


def _refresh_setup(pipeline: Any, documents: Sequence[Any], batch: bool, poll_interval_s: float
                   ) -> tuple[ContextualNodeTransform, list[Any]]:
    """The pipeline's contextual step and the documents with stale contexts, marked changed in its docstore (so its
    own upserts replace their nodes in the vector store)."""
    steps = [t for t in pipeline.transformations if isinstance(t, ContextualNodeTransform)]
    if len(steps) != 1:
        raise ConfigurationError("refresh_stale needs a pipeline with one ContextualNodeTransform step",
                                 setting="transformations")
    step = steps[0]
    stale = set(stale_documents(refreshing(step._contextualizer)))
    chosen = [d for d in documents if d.id_ in stale]
    if pipeline.docstore is not None:
        for document in chosen:  # a hash that matches nothing: the pipeline deletes and rewrites its nodes
            pipeline.docstore.set_document_hash(document.id_, "ctx-retrieval:stale")
    step._refresh = {"batch": batch, "poll_interval_s": poll_interval_s}
    return step, chosen


def refresh_stale(pipeline: Any, documents: Sequence[Any], *, batch: bool = False, poll_interval_s: float = 30.0,
                  **run_kwargs: Any) -> Sequence[BaseNode]:
    """Rewrite the stale contexts (``ReusePolicy``) of ``documents`` through the ``IngestionPipeline`` that indexed
    them: the documents with stale contexts run through it again, nearest the edits first, at half price with
    ``batch=True``, and its docstore upserts replace their nodes in the vector store; the rest are not touched.
    Returns the new nodes (none when nothing is stale)."""
    step, chosen = _refresh_setup(pipeline, documents, batch, poll_interval_s)
    try:
        return list(pipeline.run(documents=chosen, **run_kwargs)) if chosen else []
    finally:
        step._refresh = None


async def arefresh_stale(pipeline: Any, documents: Sequence[Any], *, batch: bool = False,
                         poll_interval_s: float = 30.0, **run_kwargs: Any) -> Sequence[BaseNode]:
    """The async twin of ``refresh_stale`` (``IngestionPipeline.arun``)."""
    step, chosen = _refresh_setup(pipeline, documents, batch, poll_interval_s)
    try:
        return list(await pipeline.arun(documents=chosen, **run_kwargs)) if chosen else []
    finally:
        step._refresh = None
