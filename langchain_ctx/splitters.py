"""A LangChain text splitter sized in the embedder's own tokens (``ctx_retrieval.chunking``).

Not ``RecursiveCharacterTextSplitter(length_function=...)``: it adds up the sizes of the pieces it merges, which
with a SentencePiece tokenizer (e5's) undercounts merged chunks; this splitter counts every merged chunk itself.
"""

from __future__ import annotations

from typing import Any

from langchain_text_splitters import TextSplitter

from ctx_retrieval.adapting import embedder_of
from ctx_retrieval.chunking import CONTEXT_TOKENS, DEFAULT_CHUNK_TOKENS, check_chunk_tokens, split_by_tokens


class EmbedderTokenSplitter(TextSplitter):
    """Chunks of at most ``chunk_tokens`` tokens of the embedder (``MiniLMEmbeddings`` by default, ``E5Embeddings``
    or a core embedder), cut at paragraphs, lines, sentence ends and clause marks (Latin and CJK), spaces, then
    characters; ``context_tokens`` are left for the context ``ContextualDocumentTransformer`` writes in front.
    ``ConfigurationError`` when they cannot fit.

    Setup:
        pip install "ctx-retrieval[langchain,local]"              # [multilingual] for E5Embeddings

    Use:
        .. code-block:: python

            chunks = EmbedderTokenSplitter(E5Embeddings(), add_start_index=True).split_documents(documents)
    """

    def __init__(self, embeddings: Any = None, chunk_tokens: int = DEFAULT_CHUNK_TOKENS, *,
                 context_tokens: int = CONTEXT_TOKENS, **kwargs: Any) -> None:
        embedder = check_chunk_tokens(embedder_of(embeddings), chunk_tokens, context_tokens)
        kwargs.setdefault("chunk_overlap", 0)
        super().__init__(chunk_size=chunk_tokens, length_function=embedder.count_tokens, **kwargs)
        self.chunk_tokens = chunk_tokens
        self._count_tokens = embedder.count_tokens

    def split_text(self, text: str) -> list[str]:
        pieces = split_by_tokens(text, self.chunk_tokens, self._count_tokens)
        if self._strip_whitespace:
            pieces = [piece.strip() for piece in pieces]
        return [piece for piece in pieces if piece]
