"""Core data types: a source document, its chunks, and the context produced for each chunk."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .usage import TokenUsage

__all__ = [
    "Chunk",
    "ContextResult",
    "ResultStatus",
    "SourceDocument",
    "make_chunk_id",
    "split_into_chunks",
]

ResultStatus = Literal["generated", "cached", "failed", "not_attempted", "empty"]
"""How a chunk's result came about.

- ``generated``: written by the provider in this run (and stored in the context cache);
- ``cached``: read from the context cache, no request made;
- ``failed``: the provider failed for this chunk (``error`` says why); ``context`` is ``None``;
- ``not_attempted``: the run stopped (first failure under ``on_error="raise"``, or the budget) before it;
- ``empty``: the chunk is empty or whitespace, there is nothing to situate; ``context`` is ``None``.
"""


@dataclass(frozen=True)
class SourceDocument:
    """A whole document that chunks were cut from. ``metadata`` is carried through, never sent to the LLM."""

    id: str
    text: str
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Chunk:
    """One chunk of a document. ``position`` is its index in the document's chunk list (window order);
    ``start_char`` is its offset in the document text when known."""

    id: str
    text: str
    position: int
    start_char: int | None = None


def make_chunk_id(document_id: str, position: int, text: str) -> str:
    """A stable chunk id derived from content and position, never random."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{document_id}:{position}:{digest}"


def split_into_chunks(document: SourceDocument, texts: Iterable[str]) -> list[Chunk]:
    """Chunks for ``texts`` cut from ``document`` in order, with offsets found in the document text.

    Offsets are searched from the previous chunk's start, so overlapping splitters are handled; a text that is
    not found keeps ``start_char=None`` (the generator then reports it as not in the document).
    """
    if isinstance(texts, str):
        from .errors import InvalidInputError

        raise InvalidInputError("split_into_chunks takes a list of chunk texts, not one string (it would be cut "
                                "into characters): pass [text], or your splitter's output", document_id=document.id)
    chunks: list[Chunk] = []
    cursor = 0
    for position, text in enumerate(texts):
        start = document.text.find(text, cursor) if text else -1
        if start < 0 and text:
            start = document.text.find(text)
        chunks.append(
            Chunk(
                id=make_chunk_id(document.id, position, text),
                text=text,
                position=position,
                start_char=start if start >= 0 else None,
            )
        )
        if start >= 0:
            cursor = start
    return chunks


@dataclass(frozen=True)
class ContextResult:
    """The context for one chunk, with where it came from and what it cost."""

    document_id: str
    chunk_id: str
    position: int
    context: str | None
    status: ResultStatus
    provider: str
    model: str
    prompt_version: str
    usage: TokenUsage = field(default_factory=TokenUsage)
    windowed: bool = False
    error: str | None = None  # why it has no context, for people: "<kind>: <detail>"
    error_kind: str | None = None  # the same reason for programs: "rate_limited", "max_tokens", "unreachable"...

    @property
    def cached(self) -> bool:
        """True when the context came from the persistent context cache (no request in this run)."""
        return self.status == "cached"

    @property
    def ok(self) -> bool:
        return self.context is not None

    def contextualized_text(self, chunk_text: str) -> str:
        """``context + blank line + chunk`` as indexed by contextual embeddings and contextual BM25 (the core's
        ``indexed_text``, the same in both adapters)."""
        from .text import indexed_text

        return indexed_text(chunk_text, self.context)

