"""Chunks sized in the embedder's own tokens, so a chunk and its context fit the embedder's input in every language.

Characters are a poor measure: 600 characters of English are about 150 MiniLM tokens, 600 characters of Chinese
600 or more. ``split_by_tokens`` cuts text at blank lines into chunks of whole paragraphs, a longer paragraph at
line ends, then sentence ends (``.!?`` before a space, their CJK full-width forms anywhere), then clause marks
(Latin and CJK commas, semicolons, colons, the enumeration comma), then spaces, then characters, every size
counted by ``count_tokens``; the chunks concatenate back to the text.
``token_chunker`` is that for an embedder, checked against its input: ``chunk_tokens`` + ``context_tokens`` (the room
left for the context written in front) must fit ``max_tokens``. The framework adapters build their own splitters on
the same counts (``EmbedderTokenSplitter`` in ``langchain_ctx`` and in ``llama_index_ctx``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.protocols import TokenCountingEmbedder

__all__ = ["CONTEXT_TOKENS", "DEFAULT_CHUNK_TOKENS", "TokenCount", "check_chunk_tokens",
           "chunk_token_limit", "split_by_tokens", "token_chunker"]

DEFAULT_CHUNK_TOKENS = 150
"""Chunk size, in the embedder's tokens, of the CLI and the framework helpers: with a context of up to 100 tokens in
front it fits MiniLM's 256-token input (e5 reads 512)."""
CONTEXT_TOKENS = 100
"""Room left for the context: the generator's ``max_context_tokens`` default."""

# Each level cuts a piece too big for the limit into smaller ones whose concatenation is the piece.
_LEVELS = (
    re.compile(r"\n"),                                  # line ends
    re.compile(r"(?<=[.!?])\s+|(?<=[。！？])"),          # sentence ends
    re.compile(r"(?<=[,;:])\s+|(?<=[，、；：])"),         # clause marks
    re.compile(r"\s+"),                                 # spaces
)
_PARAGRAPH = re.compile(r"\n\s*\n")


def split_by_tokens(text: str, max_tokens: int, count_tokens: Callable[[str], int]) -> list[str]:
    """``text`` in chunks of at most ``max_tokens`` by ``count_tokens``: whole paragraphs merged while they fit, a
    longer paragraph cut at the finest level that makes it fit (lines, sentences, clauses, words, characters). The
    chunks concatenate back to ``text``; a single character over the limit is a chunk of its own."""
    if max_tokens < 1:
        raise ConfigurationError(f"max_tokens must be >= 1, not {max_tokens}", setting="chunk_tokens")
    pieces: list[str] = []
    for paragraph in _cut(text, _PARAGRAPH):
        pieces.extend(_fit(paragraph, max_tokens, count_tokens, 0))
    chunks: list[str] = []
    for chunk in _merge(pieces, max_tokens, count_tokens):  # whitespace alone is no chunk: it joins its neighbour
        if chunks and (not chunk.strip() or not chunks[-1].strip()):
            chunks[-1] += chunk
        else:
            chunks.append(chunk)
    return chunks


def _cut(text: str, boundary: re.Pattern[str]) -> list[str]:
    """``text`` cut after each match of ``boundary`` (the match stays with the piece before it)."""
    pieces, start = [], 0
    for match in boundary.finditer(text):
        if match.end() > start:
            pieces.append(text[start:match.end()])
            start = match.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def _fit(piece: str, limit: int, count: Callable[[str], int], level: int) -> list[str]:
    if count(piece) <= limit:
        return [piece]
    if level == len(_LEVELS):
        return _characters(piece, limit, count)
    parts = _cut(piece, _LEVELS[level])
    if len(parts) == 1:
        return _fit(piece, limit, count, level + 1)
    fitted: list[str] = []
    for part in parts:
        fitted.extend(_fit(part, limit, count, level + 1))
    return _merge(fitted, limit, count)


def _characters(piece: str, limit: int, count: Callable[[str], int]) -> list[str]:
    """``piece`` as the longest prefixes that fit (at least one character each): each found by doubling a prefix
    from the last one's length until it no longer fits, then bisecting, so a cut costs about its own length, not
    the piece's (a 200 KB line with no break to cut at used to take minutes)."""
    out = []
    guess = max(16, 4 * limit)
    start = 0
    while start < len(piece):
        lo, hi = start, min(len(piece), start + guess)  # lo fits (empty), hi is to be tried
        while count(piece[start:hi]) <= limit:
            lo = hi
            if hi == len(piece):
                break
            hi = min(len(piece), start + 2 * (hi - start))
        if lo < hi:  # the longest fitting prefix is in [lo, hi)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if count(piece[start:mid]) <= limit:
                    lo = mid
                else:
                    hi = mid
        end = max(lo, start + 1)
        out.append(piece[start:end])
        guess = max(16, 2 * (end - start))
        start = end
    return out


def _merge(pieces: list[str], limit: int, count: Callable[[str], int]) -> list[str]:
    chunks: list[str] = []
    for piece in pieces:
        if chunks and count(chunks[-1] + piece) <= limit:
            chunks[-1] += piece
        else:
            chunks.append(piece)
    return chunks


def _counting(embedder: object) -> TokenCountingEmbedder:
    if not isinstance(embedder, TokenCountingEmbedder):
        raise ConfigurationError(f"{type(embedder).__name__} does not count its tokens (it is no "
                                 "TokenCountingEmbedder, as MiniLMEmbedder and E5Embedder are): size chunks in "
                                 "characters", setting="embedder")
    return embedder


def chunk_token_limit(embedder: Any, context_tokens: int = CONTEXT_TOKENS) -> int:
    """The most tokens a chunk may have so that ``context_tokens`` more still fit ``embedder.max_tokens``."""
    return _counting(embedder).max_tokens - context_tokens


def check_chunk_tokens(embedder: Any, chunk_tokens: int, context_tokens: int = CONTEXT_TOKENS) -> TokenCountingEmbedder:
    """``embedder`` (MiniLM when ``None``), or ``ConfigurationError`` unless a ``chunk_tokens`` chunk and a
    ``context_tokens`` context fit it."""
    if embedder is None:
        from ctx_retrieval.retrieval.embeddings import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    counting = _counting(embedder)
    limit = counting.max_tokens - context_tokens
    if not 1 <= chunk_tokens <= limit:
        raise ConfigurationError(
            f"chunk_tokens={chunk_tokens} does not fit {counting.model_id!r}: its input is "
            f"{counting.max_tokens} tokens and {context_tokens} are kept for the context, so a chunk may have 1 to "
            f"{limit}; pass a smaller chunk_tokens (or context_tokens)", setting="chunk_tokens")
    return counting


def token_chunker(embedder: Any, chunk_tokens: int = DEFAULT_CHUNK_TOKENS, *,
                  context_tokens: int = CONTEXT_TOKENS) -> Callable[[str], list[str]]:
    """A splitter (text -> chunk texts) that sizes chunks in ``embedder``'s tokens, or ``ConfigurationError`` when
    ``chunk_tokens`` and ``context_tokens`` together do not fit its input."""
    check_chunk_tokens(embedder, chunk_tokens, context_tokens)
    count: Callable[[str], int] = embedder.count_tokens

    def split(text: str) -> list[str]:
        return split_by_tokens(text, chunk_tokens, count)

    return split


class TokenCount:
    """An embedder's token count, and the tokens every text costs (``overhead``: special tokens, e5's
    ``passage: ``), for limits on a part of a text (the metadata LlamaIndex embeds with a node)."""

    def __init__(self, embedder: Any) -> None:
        self.count: Callable[[str], int] = embedder.count_tokens
        self.overhead: int = self.count("")

    def without_overhead(self, text: str) -> int:
        return max(0, self.count(text) - self.overhead)
