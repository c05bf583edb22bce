"""Rebuild a source document from its chunks, for pipelines that keep chunks but not the whole document.

Framework splitters record where each chunk starts (LangChain's ``start_index``, LlamaIndex's
``start_char_idx``). With those offsets every chunk is placed where it was cut from: overlapping chunks are
merged, and gaps (separators a splitter dropped, most often newlines) are filled with newlines so that every
offset stays true. Without
complete, consistent offsets the chunks are joined in order by blank lines, and the returned note says so.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ctx_retrieval.types import Chunk, SourceDocument

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Piece:
    """A chunk as a framework holds it: its id, text and start offset in the source (None when unknown)."""

    id: str
    text: str
    start: int | None = None


def rebuild_document(
    document_id: str, pieces: Sequence[Piece], metadata: Mapping[str, Any] | None = None
) -> tuple[SourceDocument, list[Chunk], str | None]:
    """The document, its chunks in document order (with offsets), and a note when offsets could not be used."""
    if pieces and all(p.start is not None and p.start >= 0 for p in pieces):
        ordered = sorted(pieces, key=lambda p: (p.start, -len(p.text)))
        buffer: list[str] = []
        length = 0
        consistent = True
        for piece in ordered:
            start = piece.start
            assert start is not None
            if start > length:
                buffer.append("\n" * (start - length))
                length = start
            overlap = min(length - start, len(piece.text))
            if overlap and "".join(buffer)[start:start + overlap] != piece.text[:overlap]:
                consistent = False
                break
            buffer.append(piece.text[overlap:])
            length = max(length, start + len(piece.text))
        if consistent:
            text = "".join(buffer)
            chunks = [Chunk(p.id, p.text, n, p.start) for n, p in enumerate(ordered)]
            return SourceDocument(document_id, text, dict(metadata or {})), chunks, None
        note = (f"document {document_id!r}: chunk offsets disagree with each other, so the document was rebuilt by "
                "joining its chunks in order")
    else:
        note = (f"document {document_id!r}: {'some ' if any(p.start is not None for p in pieces) else ''}chunks "
                "have no start offset, so the document was rebuilt by joining its chunks in order (splitters: "
                "add_start_index=True in LangChain; LlamaIndex node parsers record offsets)")
    texts: list[str] = []
    chunks = []
    position = 0
    for n, piece in enumerate(pieces):
        chunks.append(Chunk(piece.id, piece.text, n, position))
        texts.append(piece.text)
        position += len(piece.text) + 2
    return SourceDocument(document_id, "\n\n".join(texts), dict(metadata or {})), chunks, note


def source_document(
    document_id: str, pieces: Sequence[Piece], *, text: str | None = None, metadata: Mapping[str, Any] | None = None
) -> tuple[SourceDocument, list[Chunk]]:
    """The document the adapters contextualize ``pieces`` against: its ``text`` when the caller has it (a
    docstore, ``source_documents=``), else rebuilt from the pieces, logging how when offsets could not be used."""
    if text is not None:
        document = SourceDocument(document_id, text, dict(metadata or {}))
        return document, [Chunk(p.id, p.text, n, p.start) for n, p in enumerate(pieces)]
    document, chunks, note = rebuild_document(document_id, pieces, metadata)
    if note:
        logger.warning("%s", note)
    return document, chunks
