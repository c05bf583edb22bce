"""Metadata keys the adapters write on chunks (one place, so both frameworks agree)."""

CONTEXT_KEY = "context"
CHUNK_ID_KEY = "chunk_id"
ORIGINAL_TEXT_KEY = "original_text"
CONTEXT_PROVIDER_KEY = "context_provider"
CONTEXT_MODEL_KEY = "context_model"
CONTEXT_PROMPT_VERSION_KEY = "context_prompt_version"
CONTEXT_STATUS_KEY = "context_status"
CONTEXT_WRITTEN_FROM_KEY = "context_written_from"
"""On a reused (stale) context only: the digest of the document version it was written from."""
PROVENANCE_KEYS = (CONTEXT_PROVIDER_KEY, CONTEXT_MODEL_KEY, CONTEXT_PROMPT_VERSION_KEY, CONTEXT_STATUS_KEY,
                   CONTEXT_WRITTEN_FROM_KEY)
CONTEXT_SEPARATOR = "\n\n"
CONTEXT_CHARS_KEY = "context_chars"
"""Characters before the chunk in a LangChain document's ``page_content`` (its context header): the original chunk
is ``page_content[context_chars:]``, so the chunk text is not stored twice."""
FUSED_SCORE_KEY = "fused_score"
VECTOR_RANK_KEY = "vector_rank"
BM25_RANK_KEY = "bm25_rank"
VECTOR_RANKS_KEY = "vector_ranks"
RETRIEVAL_KEYS = (FUSED_SCORE_KEY, VECTOR_RANK_KEY, BM25_RANK_KEY, VECTOR_RANKS_KEY)
"""Written on each retrieved result (never on stored chunks): its fused score and each side's rank (with a second
embedder, ``vector_rank`` is the best dense rank and ``vector_ranks`` lists each)."""
