"""Token estimates for planning: windowing decisions, rate limiting, dry-run cost estimates.

Claude's tokenizer is not available offline, so this is a deterministic estimate: about 3.6 ASCII characters
per token (English prose and code average 3.5-4) and one token per non-ASCII character (CJK, emoji and
accented text tokenize densely). Billing never uses it: reports use the ``usage`` the API returns.
"""

from __future__ import annotations

from collections.abc import Callable

TokenCounter = Callable[[str], int]

_ASCII_CHARS_PER_TOKEN = 3.6


def estimate_tokens(text: str) -> int:
    """Estimated token count of ``text`` (0 for the empty string)."""
    if not text:
        return 0
    ascii_chars = sum(1 for ch in text if ord(ch) < 128) if not text.isascii() else len(text)
    other = len(text) - ascii_chars
    return max(1, round(ascii_chars / _ASCII_CHARS_PER_TOKEN) + other)
