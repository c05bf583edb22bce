"""How a contextualized chunk is laid out for an embedder with a short input.

``whole`` (the default) embeds ``context + chunk`` as one text; where it exceeds the model's input (256 tokens for
MiniLM) the chunk's tail is cut off. ``windows`` embeds such a chunk as several texts, each the context followed by
one window of the chunk that fits, and a chunk ranks by its best window (deduplicated by chunk id). The issue that
asked for it measured it helping dense retrieval on one half of the cookbook queries and hurting on the other, so
it is an option, reported in the ablation (``ctx-retrieval eval --embed-layout windows``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from ctx_retrieval.text import indexed_text

EmbedLayout = Literal["whole", "windows"]
EMBED_LAYOUTS: tuple[EmbedLayout, ...] = ("whole", "windows")
_MIN_WINDOW_TOKENS = 48


def window_texts(chunk: str, context: str | None, count_tokens: Callable[[str], int], *,
                 max_tokens: int = 256) -> list[str]:
    """The texts to embed for one chunk: ``[indexed_text]`` when it fits ``max_tokens``, else the context followed
    by each consecutive window of the chunk's words that fits (at least ``_MIN_WINDOW_TOKENS`` of chunk each)."""
    return [indexed_text(part, context) for part in chunk_windows(chunk, context, count_tokens, max_tokens=max_tokens)]


def chunk_windows(chunk: str, context: str | None, count_tokens: Callable[[str], int], *,
                  max_tokens: int = 256) -> list[str]:
    """The parts of ``chunk`` that ``window_texts`` puts after the context: ``[chunk]`` when context + chunk fit,
    else consecutive runs of its words (split and joined on single spaces, so the parts join back to it)."""
    if count_tokens(indexed_text(chunk, context)) <= max_tokens:
        return [chunk]
    budget = max(_MIN_WINDOW_TOKENS, max_tokens - count_tokens(indexed_text("", context)) - 4)
    words = chunk.split(" ")
    windows: list[str] = []
    start = 0
    while start < len(words):
        end = start + 1
        while end < len(words) and count_tokens(" ".join(words[start: end + 1])) <= budget:
            end += 1
        windows.append(" ".join(words[start:end]))
        start = end
    return windows
