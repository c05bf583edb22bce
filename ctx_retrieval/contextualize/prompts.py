"""The context-writing prompt, its version, and cleanup of what the model answers.

The default is the prompt from Anthropic's course on contextual retrieval, restructured so that the document
is the first content block on its own (it carries the cache breakpoint and is shared by every chunk of the
document) and the chunk and the instruction follow in a second block. The template text is part of the
context-cache key, and a snapshot test pins it: any change is a reviewed diff and a new ``PROMPT_VERSION``.

Contexts in the document's language: ``DEFAULT_PROMPT`` asks for English documents (and code) exactly as the
course does, and for a document in another language (``language.written_in_english``) switches to
``DOCUMENT_LANGUAGE_PROMPT``, the same text plus one sentence asking for the context in the document's language,
under its own version (``ctx-v1-lang``) and cache key. ``ENGLISH_PROMPT`` never switches, ``DOCUMENT_LANGUAGE_PROMPT``
always asks.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace

from ctx_retrieval.errors import ConfigurationError
from ctx_retrieval.language import written_in_english
from ctx_retrieval.tokens import TokenCounter, estimate_tokens

PROMPT_VERSION = "ctx-v1"
LANGUAGE_PROMPT_VERSION = "ctx-v1-lang"


@dataclass(frozen=True)
class PromptTemplate:
    """The prompt as pieces: the document block, then the chunk block.

    ``document_open``/``document_close`` wrap the document text (or its window); ``chunk_block`` must contain
    ``{chunk}`` and may contain ``{window_note}``, which is ``window_note`` for a windowed document and empty
    otherwise. Change ``version`` whenever the text changes. ``other_languages``: the template for a document not
    written in English (``for_document``), or None to ask every document alike.
    """

    version: str
    document_open: str
    document_close: str
    chunk_block: str
    window_note: str
    gap_marker: str
    other_languages: PromptTemplate | None = None

    def __post_init__(self) -> None:
        if "{chunk}" not in self.chunk_block:
            raise ConfigurationError("PromptTemplate.chunk_block must contain '{chunk}'", setting="prompt")
        try:
            self.chunk_block.format(chunk="", window_note="")
        except (KeyError, IndexError, ValueError) as exc:
            raise ConfigurationError(
                f"PromptTemplate.chunk_block may only use the fields {{chunk}} and {{window_note}} "
                f"(escape other braces as '{{{{' and '}}}}'): {exc!r}",
                setting="prompt",
            ) from None

    @property
    def fingerprint(self) -> str:
        """Hash of the version and every piece of text: part of the context-cache key."""
        parts = (self.version, self.document_open, self.document_close, self.chunk_block, self.window_note,
                 self.gap_marker)
        return hashlib.sha256("\x00".join(parts).encode("utf-8")).hexdigest()[:16]

    @property
    def identity(self) -> str:
        """``fingerprint``, and the other-language template's: what changes the contexts of some document."""
        other = self.other_languages
        return self.fingerprint if other is None else f"{self.fingerprint}+{other.identity}"

    def for_document(self, text: str) -> PromptTemplate:
        """The template that asks for the context of a document with this text."""
        if self.other_languages is None or written_in_english(text):
            return self
        return self.other_languages.for_document(text)

    def render_chunk_block(self, chunk_text: str, *, windowed: bool) -> str:
        return self.chunk_block.format(chunk=chunk_text, window_note=self.window_note if windowed else "")


ENGLISH_PROMPT = PromptTemplate(
    version=PROMPT_VERSION,
    document_open="Here is the original source document:\n<document>\n",
    document_close="\n</document>",
    chunk_block=(
        "{window_note}"
        "Here is the chunk we want to situate within the whole document:\n"
        "<chunk>\n{chunk}\n</chunk>\n\n"
        "Write a short and succinct snippet of text to situate this chunk within the overall source document "
        "for the purposes of improving search retrieval of the chunk.\n"
        "Answer only with the succinct context and nothing else."
    ),
    window_note=(
        "The document above is too long to show whole: it shows the document's beginning and the part right "
        "before the chunk; [...] marks text left out.\n\n"
    ),
    gap_marker="\n[...]\n",
)
DOCUMENT_LANGUAGE_PROMPT = replace(
    ENGLISH_PROMPT, version=LANGUAGE_PROMPT_VERSION,
    chunk_block=ENGLISH_PROMPT.chunk_block.replace(
        "Answer only with", "Write it in the language the document is written in.\nAnswer only with"))
DEFAULT_PROMPT = replace(ENGLISH_PROMPT, other_languages=DOCUMENT_LANGUAGE_PROMPT)

_PREAMBLE = re.compile(
    r"^\s*(?:(?:sure|certainly|okay|ok)\b[,.!]?\s*)?"
    r"(?:here(?:'s|\s+is|\s+are)\b[^:\n]{0,80}?\b(?:context|snippet)\b[^:\n]{0,40}:"
    # small local models restate the task: "Here is a concise snippet of text to situate the chunk within the
    # overall source document for improving search retrieval:"
    r"|here(?:'s|\s+is|\s+are)\b[^:\n]{0,120}?\b(?:situate|retriev)\w*\b[^:\n]{0,120}:"
    r"|(?:(?:succinct|short|brief)\s+)?context\s*:)\s*",
    re.IGNORECASE,
)
_FENCE = re.compile(r"^```[\w+-]*\s*|\s*```$")
_TAGS = re.compile(r"</?(?:context|snippet|answer)>", re.IGNORECASE)
_QUOTES = ('"', "'", "\u201c", "\u201d", "`")


def clean_context(text: str, *, max_tokens: int = 100, count_tokens: TokenCounter = estimate_tokens) -> str:
    """The model's answer as a bare context: preambles, tags, wrapping quotes and extra whitespace removed,
    cut to ``max_tokens`` (at a sentence end when one is close enough, else at a word boundary)."""
    text = _TAGS.sub(" ", text)
    text = " ".join(text.split())
    previous = None
    while previous != text:
        previous = text
        text = _PREAMBLE.sub("", text, count=1).strip()
        text = _FENCE.sub("", text).strip()  # an answer wrapped in a code fence
        if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
            text = text[1:-1].strip()
    if count_tokens(text) <= max_tokens:
        return text
    words = text.split(" ")
    lo, hi = 0, len(words)
    while lo < hi:  # longest word prefix within the cap
        mid = (lo + hi + 1) // 2
        if count_tokens(" ".join(words[:mid])) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    cut = " ".join(words[:lo])
    sentence_end = max(cut.rfind(". "), cut.rfind("! "), cut.rfind("? "))
    if sentence_end >= len(cut) * 0.6:
        return cut[: sentence_end + 1]
    return cut
