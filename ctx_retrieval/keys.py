"""Metadata keys the adapters write on chunks (one place, so both frameworks agree)."""

CONTEXT_KEY = "context"
CHUNK_ID_KEY = "chunk_id"
ORIGINAL_TEXT_KEY = "original_text"
CONTEXT_PROVIDER_KEY = "context_provider"
CONTEXT_MODEL_KEY = "context_model"
CONTEXT_PROMPT_VERSION_KEY = "context_prompt_version"
CONTEXT_STATUS_KEY = "context_status"
PROVENANCE_KEYS = (CONTEXT_PROVIDER_KEY, CONTEXT_MODEL_KEY, CONTEXT_PROMPT_VERSION_KEY, CONTEXT_STATUS_KEY)
CONTEXT_SEPARATOR = "\n\n"
