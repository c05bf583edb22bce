"""The text both indexes hold for a chunk: its context (and any metadata the user asked for), a blank line, the
chunk. One formatter, used by the core store, the evaluation and both adapters, so a figure measured on one path
describes the others (``tests/integration/test_indexed_text.py`` checks they agree character for character).

The layout is LlamaIndex's node rendering with ``metadata_template="{value}"``: header lines joined by newlines,
a blank line, the chunk, the whole stripped when there is a header; a chunk without a header is left as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctx_retrieval.keys import CONTEXT_SEPARATOR


def indexed_header(context: str | None, metadata: Mapping[str, Any] | None = None,
                   metadata_keys: Sequence[str] = ()) -> str:
    """The lines put before a chunk: the context, then the value of each of ``metadata_keys`` the chunk's
    ``metadata`` holds (in that order); ``""`` when there is nothing to add."""
    lines = [context] if context else []
    lines += [str(metadata[key]) for key in metadata_keys if metadata is not None and key in metadata]
    return "\n".join(lines).strip()


def indexed_text(chunk: str, context: str | None, metadata: Mapping[str, Any] | None = None,
                 metadata_keys: Sequence[str] = ()) -> str:
    """What the embedding and BM25 indexes hold for ``chunk``: ``header + blank line + chunk`` (see
    ``indexed_header``), or the chunk unchanged when there is no header."""
    header = indexed_header(context, metadata, metadata_keys)
    return f"{header}{CONTEXT_SEPARATOR}{chunk}".strip() if header else chunk
