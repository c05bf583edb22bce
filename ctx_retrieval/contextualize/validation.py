"""Input checks shared by every contextualizer: typed errors that name the fix, before any work starts."""

from __future__ import annotations

from collections.abc import Sequence

from ctx_retrieval.errors import ChunkNotInDocumentError, DuplicateChunkIdError, InvalidInputError, InvalidTextError
from ctx_retrieval.types import Chunk, SourceDocument


def check_text(text: object, what: str, *, document_id: str, chunk_id: str | None = None) -> None:
    """Raise unless ``text`` is a str that can be sent as UTF-8 JSON."""
    if not isinstance(text, str):
        raise InvalidInputError(f"{what} text must be str, got {type(text).__name__}: decode bytes first",
                                document_id=document_id, chunk_id=chunk_id)
    if "\x00" in text:
        raise InvalidTextError(
            f"{what} contains NUL bytes (a binary file?): drop binary files or extract their text first",
            document_id=document_id, chunk_id=chunk_id)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidTextError(
            f"{what} is not valid Unicode (lone surrogates from decoding invalid UTF-8): read the file with "
            "encoding='utf-8', errors='replace'", document_id=document_id, chunk_id=chunk_id) from None


def locate_chunks(document: SourceDocument, chunks: Sequence[Chunk], *, require_found: bool = True) -> list[int | None]:
    """Check the document and its chunks, and return each chunk's offset in the document text.

    The offset is ``start_char`` when it matches, else the first occurrence at or after the previous chunk's
    offset, else anywhere; None for empty chunks and for chunks found only after whitespace normalization
    (splitters that strip or join lines). A chunk not found at all raises ``ChunkNotInDocumentError``
    unless ``require_found`` is False.
    """
    if not isinstance(document, SourceDocument):
        raise InvalidInputError(
            f"expected a SourceDocument, got {type(document).__name__}: wrap text as "
            "SourceDocument(id=..., text=...)")
    if not isinstance(document.id, str) or not document.id:
        raise InvalidInputError(
            f"a document id must be a non-empty str, got {document.id!r}: ids 7 and '7' would collide; pass "
            "SourceDocument(id=str(...), ...)")
    check_text(document.text, f"document {document.id!r}", document_id=document.id)
    seen: set[str] = set()
    offsets: list[int | None] = []
    cursor = 0
    normalized_doc: str | None = None
    for chunk in chunks:
        if not isinstance(chunk, Chunk):
            raise InvalidInputError(
                f"expected a Chunk in document {document.id!r}, got {type(chunk).__name__}: build chunks with "
                "Chunk(id=..., text=..., position=...) or split_into_chunks(document, texts)",
                document_id=document.id)
        if not isinstance(chunk.id, str) or not chunk.id:
            raise InvalidInputError(
                f"a chunk id in document {document.id!r} must be a non-empty str, got {chunk.id!r}: pass "
                "Chunk(id=str(...), ...) or use make_chunk_id", document_id=document.id)
        if isinstance(chunk.position, bool) or not isinstance(chunk.position, int) or chunk.position < 0:
            raise InvalidInputError(
                f"chunk {chunk.id!r} of document {document.id!r}: position must be an int >= 0 (its index in the "
                f"document's chunk list), got {chunk.position!r}", document_id=document.id, chunk_id=chunk.id)
        where = f"chunk {chunk.id!r} of document {document.id!r}"
        if chunk.id in seen:
            raise DuplicateChunkIdError(
                f"{where}: two chunks share this id; give each chunk a unique id (make_chunk_id derives one "
                "from position and text)", document_id=document.id, chunk_id=chunk.id)
        seen.add(chunk.id)
        check_text(chunk.text, where, document_id=document.id, chunk_id=chunk.id)
        if not chunk.text.strip():
            offsets.append(None)
            continue
        start = chunk.start_char
        if start is None or not document.text.startswith(chunk.text, start):
            start = document.text.find(chunk.text, cursor)
            if start < 0:
                start = document.text.find(chunk.text)
        if start >= 0:
            offsets.append(start)
            cursor = start
            continue
        if normalized_doc is None:
            normalized_doc = " ".join(document.text.split())
        if " ".join(chunk.text.split()) in normalized_doc or not require_found:
            offsets.append(None)
            continue
        raise ChunkNotInDocumentError(
            f"{where}: its text does not occur in the document"
            + (" (the document is empty)" if not document.text.strip() else "")
            + "; pass each chunk with the document it was cut from, or set check_chunks_in_document=False "
            "if your splitter rewrites text", document_id=document.id, chunk_id=chunk.id)
    return offsets
