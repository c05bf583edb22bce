"""What part of a document goes into the prompt for one chunk.

A document within ``max_document_tokens`` goes whole: one block, identical for all its chunks, cached once.
A larger one is replaced by a window (the seeds' strategy): its first ``num_start_chunks`` chunks plus the
``num_prev_chunks`` chunks right before the target, and the target itself, each chunk at most once, in
document order, ``[...]`` marking gaps. The first-chunks block comes first and is the same for every chunk of
the document, so it still carries the cache breakpoint; the varying part follows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctx_retrieval.contextualize.prompts import PromptTemplate
from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.tokens import TokenCounter
from ctx_retrieval.types import Chunk, SourceDocument

# Share of a price-tier threshold a document may fill: the rest is room for the chunk, the prompt's own text and
# the error of a token estimate (the API counts exactly; planning estimates).
PRICE_TIER_FILL = 0.9


@dataclass(frozen=True)
class WindowConfig:
    """Windowing settings. ``max_document_tokens=None`` sizes the limit from the model: 3/4 of its context
    window and, with ``stay_in_price_tier`` (default), within its cheaper prompt-length price tier (Claude Haiku
    5.5 bills a prompt over 100k tokens at 5x, output included), so a large document is windowed instead."""

    max_document_tokens: int | None = None
    num_start_chunks: int = 2
    num_prev_chunks: int = 2
    stay_in_price_tier: bool = True

    def __post_init__(self) -> None:
        if self.max_document_tokens is not None and self.max_document_tokens < 1:
            raise ConfigurationError("max_document_tokens must be a positive token count or None",
                                     setting="max_document_tokens")
        if self.num_start_chunks < 0 or self.num_prev_chunks < 0:
            raise ConfigurationError("num_start_chunks and num_prev_chunks must be >= 0",
                                     setting="num_start_chunks" if self.num_start_chunks < 0 else "num_prev_chunks")

    def resolved_limit(self, context_window: int, price_tier_threshold: int | None = None) -> int:
        """The document-token limit: the setting, or 3/4 of the context window (room for chunk and answer),
        kept to ``PRICE_TIER_FILL`` of the cheaper price tier's threshold when ``stay_in_price_tier``."""
        if self.max_document_tokens is not None:
            return self.max_document_tokens
        limit = (context_window * 3) // 4
        if self.stay_in_price_tier and price_tier_threshold is not None:
            limit = min(limit, int(price_tier_threshold * PRICE_TIER_FILL))
        return limit

    def cache_key_part(self, limit: int) -> str:
        return f"window:{limit}:{self.num_start_chunks}:{self.num_prev_chunks}"


@dataclass(frozen=True)
class DocumentView:
    """The document part of one prompt: ``prefix`` carries the cache breakpoint, ``rest`` follows it."""

    prefix: str
    rest: str
    windowed: bool
    positions: tuple[int, ...] = ()


def _run_text(document: SourceDocument, run: Sequence[Chunk], shown_until: int | None = None,
              gap_marker: str = "\n[...]\n") -> tuple[str, int | None]:
    """Text of chunks that follow each other in the chunk list, and where it ends in the document.

    With offsets, overlapping or touching chunks are taken from the document once (``shown_until``: where the
    text right before ends), and text the chunks skip in the document is marked with ``gap_marker``; without
    offsets the chunk texts are joined by newlines.
    """
    pieces: list[str] = []
    for chunk in run:
        start = chunk.start_char
        if start is None or shown_until is None:
            if pieces:
                pieces.append("\n")
            pieces.append(chunk.text)
            shown_until = None if start is None else start + len(chunk.text)
            continue
        end = start + len(chunk.text)
        if start > shown_until:
            pieces.append(gap_marker + chunk.text)
        elif end > shown_until:
            pieces.append(document.text[shown_until:end])
        shown_until = max(shown_until, end)
    return "".join(pieces), shown_until


def _window_positions(
    chunks: Sequence[Chunk], index: int, config: WindowConfig, limit: int, count: TokenCounter
) -> list[int]:
    start = list(range(min(config.num_start_chunks, len(chunks))))
    prev = [p for p in range(max(0, index - config.num_prev_chunks), index) if p not in start]
    keep_start = [p for p in start if p != index]

    def total() -> int:
        return sum(count(chunks[p].text) for p in (*keep_start, *prev, index))

    while total() > limit and (prev or keep_start):
        if prev:
            prev.pop(0)  # farthest previous chunk first
        else:
            keep_start.pop()  # then start chunks from the end; the target is never dropped
    return sorted({*keep_start, *prev, index})


def document_view(
    document: SourceDocument,
    chunks: Sequence[Chunk],
    index: int,
    *,
    prompt: PromptTemplate,
    config: WindowConfig,
    limit: int,
    document_tokens: int,
    count: TokenCounter,
) -> DocumentView:
    """The document block(s) for the chunk at ``chunks[index]``."""
    if document_tokens <= limit:
        return DocumentView(prefix=prompt.document_open + document.text + prompt.document_close, rest="",
                            windowed=False)
    positions = _window_positions(chunks, index, config, limit, count)
    runs: list[list[int]] = []
    for p in positions:
        if runs and runs[-1][-1] == p - 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    # The stable prefix: the leading run's part within the start chunks (the same for every target).
    start_run = [p for p in runs[0] if p < config.num_start_chunks] if positions[0] == 0 else []
    if start_run:
        rest_first = runs[0][len(start_run):]
        runs = ([rest_first] if rest_first else []) + runs[1:]
    start_text, shown_until = _run_text(document, [chunks[p] for p in start_run], gap_marker=prompt.gap_marker)
    prefix = prompt.document_open + start_text
    pieces: list[str] = []
    previous_end = start_run[-1] if start_run else -1
    for run in runs:
        adjacent = run[0] == previous_end + 1
        if not adjacent:
            pieces.append(prompt.gap_marker)
        text, shown_until = _run_text(document, [chunks[p] for p in run], shown_until if adjacent else None,
                                      gap_marker=prompt.gap_marker)
        pieces.append(text)
        previous_end = run[-1]
    if previous_end != len(chunks) - 1:
        pieces.append(prompt.gap_marker)
    rest = "".join(pieces) + prompt.document_close
    return DocumentView(prefix=prefix, rest=rest, windowed=True, positions=tuple(positions))
