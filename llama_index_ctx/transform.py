"""``ContextualNodeTransform``: an ``IngestionPipeline`` step that writes a situating context into each node."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode, TransformComponent
from pydantic import ConfigDict, Field, PrivateAttr

from ctx_retrieval._aio import run_sync
from ctx_retrieval.keys import CHUNK_ID_KEY, CONTEXT_KEY, PROVENANCE_KEYS
from ctx_retrieval.reconstruct import Piece, source_document
from ctx_retrieval.types import Chunk, SourceDocument
from ctx_retrieval.usage import RunReport

__all__ = ["ContextualNodeTransform"]

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
        contextualize_whole_documents: a node that is its whole document has nothing to situate (default
            False: it gets no context).
        show_progress: a progress bar over the chunks (not part of the ingestion-cache key).

    Instantiate:
        .. code-block:: python

            transform = ContextualNodeTransform.from_generator(ContextGenerator(AnthropicProvider()))
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
    contextualize_whole_documents: bool = False
    contextualizer_id: str = Field(default="", description="the contextualizer's identity: every setting that "
                                   "changes its contexts (LlamaIndex's ingestion-cache key)")
    show_progress: bool = Field(default=False, exclude=True, description="progress bar; not part of the cache key")

    _contextualizer: Any = PrivateAttr(default=None)
    _docstore: Any = PrivateAttr(default=None)
    _last_report: RunReport | None = PrivateAttr(default=None)

    @property
    def last_report(self) -> RunReport | None:
        """The report of the last call: tokens, cache hits, dollars, failures."""
        return self._last_report

    @classmethod
    def from_generator(cls, contextualizer: Any = None, *, docstore: Any = None,
                       **kwargs: Any) -> ContextualNodeTransform:
        """Wrap a ``ContextGenerator`` (Claude by default) or ``HeuristicContextualizer``; ``docstore`` (optional)
        holds the source documents."""
        if contextualizer is None:
            from ctx_retrieval.generator import ContextGenerator

            contextualizer = ContextGenerator()
        # The serialized fields are LlamaIndex's IngestionCache key: the contextualizer's identity covers every
        # setting that changes its contexts (endpoint, extra_body, model, prompt, windowing, context length).
        transform = cls(contextualizer_id=_identity(contextualizer), **kwargs)
        transform._contextualizer = contextualizer
        transform._docstore = docstore
        return transform

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
        groups: dict[str, list[BaseNode]] = {}
        for node in nodes:
            ref = node.ref_doc_id
            if ref is None:
                if self.contextualize_whole_documents:
                    groups.setdefault(node.node_id, []).append(node)
                continue  # a whole document: nothing to situate it in
            groups.setdefault(ref, []).append(node)
        items: list[tuple[SourceDocument, list[Chunk]]] = []
        for ref, members in groups.items():
            pieces = [Piece(n.node_id, n.get_content(metadata_mode=MetadataMode.NONE),
                            getattr(n, "start_char_idx", None)) for n in members]
            items.append(source_document(ref, pieces, text=self._docstore_text(ref)))
        return items

    def _docstore_text(self, ref: str) -> str | None:
        if self._docstore is None:
            return None
        document = self._docstore.get_document(ref, raise_error=False)
        return None if document is None else str(document.get_content(metadata_mode=MetadataMode.NONE))

    def _apply(self, nodes: Sequence[BaseNode], results: Sequence[Any]) -> list[BaseNode]:
        by_id = {r.chunk_id: r for r in results}
        hidden = [k for k in PROVENANCE_KEYS if k != CHUNK_ID_KEY]
        for node in nodes:
            result = by_id.get(node.node_id)
            if result is None:
                continue
            node.metadata[self.context_key] = result.context
            node.metadata.update({"context_provider": result.provider, "context_model": result.model,
                                  "context_prompt_version": result.prompt_version, "context_status": result.status})
            node.excluded_embed_metadata_keys = _with(node.excluded_embed_metadata_keys, hidden)
            llm_hidden = hidden if self.context_for_llm else [*hidden, self.context_key]
            node.excluded_llm_metadata_keys = _with(node.excluded_llm_metadata_keys, llm_hidden)
        return list(nodes)

    # -- the transform API -------------------------------------------------------------------------------

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        return run_sync(self.acall(nodes, **kwargs))

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        if self._contextualizer is None:
            raise ValueError("build the transform with ContextualNodeTransform.from_generator(...)")
        items = self._plan(nodes)
        if not items:
            return list(nodes)
        show = self.show_progress or bool(kwargs.get("show_progress"))
        previous = getattr(self._contextualizer, "progress", None)
        if show and previous is not None:
            self._contextualizer.progress = True
        try:
            results = await self._contextualizer.acontextualize_many(items)
        finally:
            if show and previous is not None:
                self._contextualizer.progress = previous
        self._last_report = getattr(results, "report", None)
        return self._apply(nodes, results)


def _identity(contextualizer: Any) -> str:
    identity = getattr(contextualizer, "identity", None)
    if isinstance(identity, str) and identity:
        return identity
    return type(contextualizer).__name__  # a user's own contextualizer: its class is all we know


def _with(keys: list[str] | None, extra: Sequence[str]) -> list[str]:
    current = list(keys or [])
    return current + [k for k in extra if k not in current]
