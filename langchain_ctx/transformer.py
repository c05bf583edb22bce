"""``ContextualDocumentTransformer``: a LangChain document transformer that prepends a situating context to chunks."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.documents import BaseDocumentTransformer, Document

from ctx_retrieval._aio import run_sync
from ctx_retrieval.adapting import acontextualize, contextualizer_for, estimate_of, grouped, provenance
from ctx_retrieval.contextualize.results import CostEstimate
from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.keys import (
    CHUNK_ID_KEY,
    CONTEXT_CHARS_KEY,
    CONTEXT_KEY,
    CONTEXT_SEPARATOR,
    CONTEXT_STATUS_KEY,
    CONTEXT_WRITTEN_FROM_KEY,
    ORIGINAL_TEXT_KEY,
)
from ctx_retrieval.reconstruct import Piece
from ctx_retrieval.text import indexed_header, indexed_text
from ctx_retrieval.types import Chunk, ContextResult, SourceDocument, make_chunk_id
from ctx_retrieval.usage import RunReport

from .tracing import LangChainRequestTracer

logger = logging.getLogger(__name__)


class UnplaceableChunkError(InvalidInputError):
    """A chunk whose source document cannot be found."""


class ContextualDocumentTransformer(BaseDocumentTransformer):
    """Adds a situating context to chunks from any LangChain text splitter.

    Setup:
        pip install "ctx-retrieval[langchain,anthropic]"

    Key init args:
        contextualizer: a ``ctx_retrieval.ContextGenerator`` (Claude by default) or ``HeuristicContextualizer``.
        source_key: the metadata key naming each chunk's source document (``"source"``).
        on_unplaceable: ``"raise"`` (default) or ``"skip"`` (pass the chunk through without a context).
        progress: show a progress bar (needs ``tqdm``: ``ctx-retrieval[progress]``).
        indexed_metadata_keys: metadata keys whose values also enter ``page_content`` after the context (default
            none: ``page_content`` is the core's ``indexed_text``, context + blank line + chunk).
        keep_original_text: also store the chunk text in ``metadata["original_text"]`` (default False: it is
            ``page_content[metadata["context_chars"]:]``, and ``for_answering`` recovers it).

    Instantiate:
        .. code-block:: python

            splitter = RecursiveCharacterTextSplitter(chunk_size=800, add_start_index=True)
            transformer = ContextualDocumentTransformer(ContextGenerator(AnthropicProvider()))

    Use:
        .. code-block:: python

            contextual = transformer.transform_documents(splitter.split_documents(docs))
            contextual[0].page_content        # context + blank line + chunk
            contextual[0].metadata["context"], contextual[0].metadata["context_status"]
            for_answering(contextual)         # the chunks without their contexts, for the answering model
            transformer.last_report.format()  # tokens, cache hits, dollars

    Async:
        .. code-block:: python

            contextual = await transformer.atransform_documents(chunks)   # requests run concurrently

    The source document of each chunk is ``source_documents`` when given (matched by ``source_key``), otherwise
    it is rebuilt from the chunks that share a source, placed by their ``start_index``. Input documents are not
    changed; new ``Document``s are returned in input order.
    """

    def __init__(self, contextualizer: Any = None, *, source_key: str = "source",
                 on_unplaceable: Literal["raise", "skip"] = "raise", progress: bool = False,
                 indexed_metadata_keys: Sequence[str] = (), keep_original_text: bool = False) -> None:
        from langchain_core.language_models import BaseChatModel

        from .providers import LangChainChatProvider

        self.contextualizer = contextualizer_for(  # a missing or malformed key fails here, as in LlamaIndex
            contextualizer, wrap=lambda m: LangChainChatProvider(m) if isinstance(m, BaseChatModel) else None)
        self.progress = progress  # a progress bar over the chunks, per call (a shared generator is not changed)
        self.source_key = source_key
        self.on_unplaceable = on_unplaceable
        self.indexed_metadata_keys = tuple(indexed_metadata_keys)
        self.keep_original_text = keep_original_text
        self.last_report: RunReport | None = None

    def __repr__(self) -> str:
        return f"ContextualDocumentTransformer(contextualizer={self.contextualizer!r}, source_key={self.source_key!r})"

    def _plan(self, documents: Sequence[Document], source_documents: Sequence[Document] | None
              ) -> tuple[list[tuple[SourceDocument, list[Chunk]]], list[tuple[str, str] | None]]:
        """(document, chunks) items, and for each input its (document id, chunk id), or None if passed through."""
        sources = {_source_id(whole.metadata.get(self.source_key, whole.id or n)): whole
                   for n, whole in enumerate(source_documents or [])}
        placement: list[tuple[str, str] | None] = [None] * len(documents)
        pieces: list[tuple[str, Piece]] = []
        positions: dict[str, int] = {}
        for i, doc in enumerate(documents):
            if CONTEXT_STATUS_KEY in doc.metadata and CONTEXT_CHARS_KEY in doc.metadata:
                continue  # this transformer's own output: passed through as it is, never given a second context
            source = doc.metadata.get(self.source_key)
            if source is None or (source_documents is not None and _source_id(source) not in sources):
                why = (f"chunk {i} has no metadata[{self.source_key!r}]" if source is None else
                       f"chunk {i} names source {source!r}, which is not among source_documents")
                if self.on_unplaceable == "raise":
                    raise UnplaceableChunkError(
                        f"{why}: keep the loader's {self.source_key!r} metadata on every chunk (or pass "
                        "source_documents=), or on_unplaceable='skip' to pass such chunks through without a context")
                logger.warning("%s: passed through without a context", why)
                continue
            source_id = _source_id(source)
            position = positions[source_id] = positions.get(source_id, -1) + 1
            start = doc.metadata.get("start_index")
            chunk_id = str(doc.metadata.get(CHUNK_ID_KEY) or make_chunk_id(source_id, position, doc.page_content))
            pieces.append((source_id, Piece(chunk_id, doc.page_content, start if isinstance(start, int) else None)))
            placement[i] = (source_id, chunk_id)
        items = grouped(pieces, text_of=lambda s: sources[s].page_content if s in sources else None,
                        metadata_of=lambda s: sources[s].metadata if s in sources else None)
        return items, placement

    def _documents(self, documents: Sequence[Document], placement: list[tuple[str, str] | None],
                   results: Sequence[ContextResult]) -> list[Document]:
        by_id = {(r.document_id, r.chunk_id): r for r in results}
        out: list[Document] = []
        for doc, where in zip(documents, placement, strict=True):
            if where is None:  # passed through, or contextualized already
                out.append(Document(page_content=doc.page_content, metadata=dict(doc.metadata), id=doc.id))
                continue
            result = by_id[where]
            content = indexed_text(doc.page_content, result.context, doc.metadata, self.indexed_metadata_keys)
            header = indexed_header(result.context, doc.metadata, self.indexed_metadata_keys)
            metadata = {k: v for k, v in doc.metadata.items() if k != CONTEXT_WRITTEN_FROM_KEY}
            metadata.update({CHUNK_ID_KEY: where[1], CONTEXT_CHARS_KEY: len(header) + len(CONTEXT_SEPARATOR)
                             if header else 0, **provenance(result)})
            if result.context:
                metadata[CONTEXT_KEY] = result.context
            if self.keep_original_text:
                metadata[ORIGINAL_TEXT_KEY] = doc.page_content
            out.append(Document(page_content=content, metadata=metadata, id=where[1]))
        return out

    # -- the transformer API -----------------------------------------------------------------------------

    def estimate(self, documents: Sequence[Document], *, source_documents: Sequence[Document] | None = None
                 ) -> CostEstimate:
        """What ``transform_documents(documents)`` would request and cost, with no context request: the same
        documents and chunk ids the run would use, so chunks already in the context cache cost nothing."""
        items, _ = self._plan(documents, source_documents)
        return estimate_of(self.contextualizer, items)

    def transform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        """Contextualized copies of ``documents`` (chunks), in input order."""
        return run_sync(self.atransform_documents(documents, **kwargs))

    async def atransform_documents(self, documents: Sequence[Document], **kwargs: Any) -> Sequence[Document]:
        """Like ``transform_documents``, with the provider's requests running concurrently. ``callbacks``
        (LangChain's, and those LangChain configures from the environment, such as LangSmith) see each context
        request as a chat-model run with its usage and cost."""
        items, placement = self._plan(documents, kwargs.get("source_documents"))
        tracer = LangChainRequestTracer(kwargs.get("callbacks"), tags=kwargs.get("tags"),
                                        metadata=kwargs.get("metadata"))
        refresh = {"batch": bool(kwargs.get("batch"))} if kwargs.get("refresh_stale") else None
        results, self.last_report = await acontextualize(self.contextualizer, items, tracer=tracer,
                                                         progress=self.progress, refresh=refresh)
        return self._documents(documents, placement, results)

    def refresh_stale(self, documents: Sequence[Document], *, batch: bool = False,
                      **kwargs: Any) -> Sequence[Document]:
        """``transform_documents`` that rewrites the stale contexts of these chunks (reused by a ``ReusePolicy``
        after an edit or a model change), nearest the edits first, at half price with ``batch=True``; a chunk keeps
        its stale context until the new one is written. Pass the output to ``index()`` as usual: the record manager
        sees the changed contexts and rewrites those chunks."""
        return run_sync(self.arefresh_stale(documents, batch=batch, **kwargs))

    async def arefresh_stale(self, documents: Sequence[Document], *, batch: bool = False,
                             **kwargs: Any) -> Sequence[Document]:
        if any(CONTEXT_STATUS_KEY in d.metadata and CONTEXT_CHARS_KEY in d.metadata for d in documents):
            raise InvalidInputError("refresh_stale takes the chunks given to transform_documents (the splitter's "
                                    "output), not its contextualized output")
        return await self.atransform_documents(documents, refresh_stale=True, batch=batch, **kwargs)


def _source_id(source: Any) -> str:
    """A document id for a source value: strings as they are; other values keep their type, so sources ``1`` and
    ``"1"`` stay two documents."""
    return source if isinstance(source, str) else f"{type(source).__name__}:{source!r}"


def split_and_contextualize(
    documents: Sequence[Document], splitter: Any, transformer: ContextualDocumentTransformer
) -> Sequence[Document]:
    """Split whole ``documents`` with any LangChain text splitter and contextualize the chunks in one call.

    Documents without ``metadata[source_key]`` get their ``id`` or their position as the source.
    """
    key = transformer.source_key
    named = [doc if key in doc.metadata else Document(page_content=doc.page_content, id=doc.id,
                                                      metadata={**doc.metadata, key: doc.id or f"document-{n}"})
             for n, doc in enumerate(documents)]
    chunks = splitter.split_documents(named)
    return transformer.transform_documents(chunks, source_documents=named)


def for_answering(documents: Sequence[Document], *, with_context: bool = False) -> list[Document]:
    """Retrieved chunks as the answering model should see them: the original chunk text, with or without its
    context (the index holds context + chunk; the context helps finding, the model may not need it)."""
    out = []
    for doc in documents:
        original = original_text(doc)
        context = doc.metadata.get(CONTEXT_KEY)
        text = f"{context}{CONTEXT_SEPARATOR}{original}" if with_context and context else original
        out.append(Document(page_content=text, metadata=dict(doc.metadata), id=doc.id))
    return out


def original_text(document: Document) -> str:
    """The chunk a contextualized document was made from: its ``page_content`` without the context header (the
    chunk's trailing whitespace aside, which the indexed text strips, as LlamaIndex's node rendering does)."""
    if ORIGINAL_TEXT_KEY in document.metadata:
        return str(document.metadata[ORIGINAL_TEXT_KEY])
    chars = document.metadata.get(CONTEXT_CHARS_KEY)
    return document.page_content[chars:] if isinstance(chars, int) and chars >= 0 else document.page_content
