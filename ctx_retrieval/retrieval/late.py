"""Late chunking: the no-LLM way to give chunks their document's context, for the embedding side only.

The whole document is run through the embedding model (in overlapping windows of its input, each token averaged
over the windows that hold it) and each chunk's vector is the mean of its own tokens' outputs, so a chunk carries
what the tokens around it said through attention, without an LLM call. BM25 gains nothing from it (the chunk's words
are unchanged). After Günther et al., "Late Chunking: Contextual Chunk Embeddings Using Long-Context Embedding
Models" (2024), which the contextual-retrieval literature names beside title prefixes as the cheap alternatives.

    vectors = late_chunk_embeddings(document, chunks, MiniLMEmbedder())   # one unit vector per chunk
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctx_retrieval.contextualize.validation import locate_chunks
from ctx_retrieval.types import Chunk, SourceDocument


def late_chunk_embeddings(document: SourceDocument, chunks: Sequence[Chunk], embedder: Any, *,
                          window: int | None = None, stride: int | None = None) -> Any:
    """One L2-normalised vector per chunk (a ``len(chunks) x dim`` array), pooled from the document's token outputs
    (``embedder.token_states``, e.g. ``MiniLMEmbedder``: 254-token windows every 127 tokens by default). A chunk
    whose place in the document cannot be found raises ``ChunkNotInDocumentError``; one found only after
    whitespace normalisation, or without tokens, gets its own embedding instead."""
    import numpy as np

    kwargs = {k: v for k, v in (("window", window), ("stride", stride)) if v is not None}
    states, spans = embedder.token_states(document.text, **kwargs)
    offsets = locate_chunks(document, chunks, require_found=True)
    starts = np.asarray([a for a, _ in spans], dtype=np.int64)
    ends = np.asarray([b for _, b in spans], dtype=np.int64)
    vectors = []
    for chunk, offset in zip(chunks, offsets, strict=True):
        inside = ((starts >= offset) & (ends <= offset + len(chunk.text)) & (ends > starts)
                  if offset is not None else np.zeros(len(starts), dtype=bool))
        if inside.any():
            vector = states[inside].mean(axis=0)
            vectors.append(vector / max(float(np.linalg.norm(vector)), 1e-12))
        else:
            vectors.append(embedder.embed([chunk.text])[0])
    return np.asarray(vectors, dtype=np.float32)
