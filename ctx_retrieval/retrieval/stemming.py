"""Light stemming for BM25 (issue 35): a word is indexed as it is written and, beside it, as its Snowball stem
(PyStemmer), so ``запросов`` meets ``запрос`` and ``Dateien`` meets ``Datei`` while an exact form
still ranks above a mere relative (it matches both tokens), as Lucene's KeywordRepeat + Snowball filters do.

The stemmer is chosen per word with no setting: by its script where the script names the language (Cyrillic:
Russian; Greek; Arabic; Devanagari: Hindi; Tamil), and for Latin-script words by the language of the whole text
(``ctx_retrieval.language.latin_language``: German, French, Spanish, Portuguese, Italian, Dutch, Turkish, Swedish,
Indonesian). English, code and text written in ASCII only are not stemmed: the English figures stay as they were
measured, and a text of ASCII alone cannot tell its language cheaply. Words with digits or underscores
(identifiers) are never stemmed.
"""

from __future__ import annotations

import threading
from typing import Any

from ctx_retrieval._optional import require
from ctx_retrieval.language import is_latin

__all__ = ["script_language", "stem"]

# The first letter's script decides, for scripts that one Snowball stemmer covers.
_SCRIPTS = ((0x0400, 0x04FF, "russian"), (0x0370, 0x03FF, "greek"), (0x0600, 0x06FF, "arabic"),
            (0x0900, 0x097F, "hindi"), (0x0B80, 0x0BFF, "tamil"))
_LATIN_STEMMED = frozenset(("german", "french", "spanish", "portuguese", "italian", "dutch", "turkish", "swedish",
                            "indonesian"))
_SHORTEST = 4  # shorter words are left whole: Hindi's particles की, के, का would all become क
_local = threading.local()  # PyStemmer's stemmers are not to be shared between threads


def script_language(word: str) -> str | None:
    """The stemmer a non-Latin word's script names (``None`` for Latin, CJK and scripts without one)."""
    first = ord(word[0]) if word else 0
    if first < 0x0370:
        return None
    for low, high, language in _SCRIPTS:
        if low <= first <= high:
            return language
    return None


def _stemmer(language: str) -> Any:
    stemmers: dict[str, Any] | None = getattr(_local, "stemmers", None)
    if stemmers is None:
        stemmers = _local.stemmers = {}
    if language not in stemmers:
        stemmers[language] = require("Stemmer", "bm25").Stemmer(language)
    return stemmers[language]


def stem(token: str, latin: str | None, folded: str | None = None) -> str | None:
    """The Snowball stem of one token where it differs from the token: a non-Latin word by its script, a
    Latin-script word by ``latin`` (its text's language; ``None``: not stemmed); identifiers (digits, underscores)
    never. ``folded``: the token without its marks (Arabic is stemmed in that form)."""
    if len(token) < _SHORTEST or "_" in token or any(ch.isdigit() for ch in token):
        return None
    language = script_language(token)
    if language is None and latin in _LATIN_STEMMED and is_latin(token[0]):
        language = latin
    if language is None:
        return None
    found: str = _light10(folded or token) if language == "arabic" else _stemmer(language).stemWord(token)
    return found if found and found != token else None


# Arabic: Larkey's light10 (the light stemmer Lucene's Arabic analyzer uses) over the folded word, rather than
# Snowball's, which strips a suffix only when it also strips the article (``الإيرادات`` -> ``ايراد`` but
# ``إيرادات`` -> ``ايرادا``), so a question without the article never met the text with it.
_AR_PREFIXES = ("ال", "وال", "بال", "كال", "فال", "لل", "و")
_AR_SUFFIXES = ("ها", "ان", "ات", "ون", "ين", "يه", "ه", "ي")  # after folding, teh marbuta is heh


def _light10(word: str) -> str:
    """``word`` (folded: one alef, no harakat, teh marbuta as heh) without one article or conjunction prefix and
    its plural, dual, possessive and feminine suffixes."""
    for prefix in _AR_PREFIXES:
        if word.startswith(prefix) and len(word) - len(prefix) >= (3 if prefix == "و" else 2):
            word = word[len(prefix):]
            break
    for suffix in _AR_SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            word = word[: -len(suffix)]
    return word
