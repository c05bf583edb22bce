"""How documents and chunks are named in log lines and reports: by the file a person knows them by, and never raw.

An id or a file name can hold anything a caller put there: NUL bytes, newlines and terminal escapes would forge or
break log lines (a newline starts a fake entry). ``printable`` escapes every non-printable character and bounds
the length; ``document_name`` prefers the file name the loaders and both frameworks record (``source``,
``file_path``, ``file_name``) over an id that is often a UUID or a hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctx_retrieval.types import SourceDocument


# Where a document's file name is kept: ctx_retrieval's loaders and LangChain (``source``), LlamaIndex's readers
# (``file_path``, ``file_name``).
SOURCE_KEYS = ("source", "file_path", "file_name", "filename")
_MAX_CHARS = 160


def printable(value: object, limit: int = _MAX_CHARS) -> str:
    """``value`` as one safe line: non-printable characters escaped (``\\n``, ``\\x00``, ``\\x1b``), cut to
    ``limit`` characters with an ellipsis."""
    text = str(value)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def document_name(document: SourceDocument) -> str:
    """A document's file name when its metadata records one (with its id when they differ), else its id."""
    doc_id = printable(document.id)
    metadata = document.metadata if isinstance(document.metadata, Mapping) else {}
    for key in SOURCE_KEYS:
        source = metadata.get(key)
        if isinstance(source, str) and source.strip():
            name = printable(source)
            return name if name == doc_id or name.endswith("/" + doc_id) else f"{name} (id {doc_id})"
    return doc_id
