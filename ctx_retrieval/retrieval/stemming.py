"""Light stemming for BM25 (issue 35): a word is indexed as it is written and, beside it, as its Snowball stem
(PyStemmer), so ``запросов`` meets ``запрос`` and ``Dateien`` meets ``Datei`` while an exact form
still ranks above a mere relative (it matches both tokens), as Lucene's KeywordRepeat + Snowball filters do.

The stemmer is chosen per word: by its script where the script names the language (Cyrillic: Russian; Greek;
Arabic; Devanagari: Hindi; Tamil), and for Latin-script words by the languages of the index (``BM25Store(language=)``,
detected from its corpus by ``ctx_retrieval.language.latin_language``: German, French, Spanish, Portuguese, Italian,
Dutch, Turkish, Swedish, Indonesian), so a query and the chunks it should meet are stemmed alike whether or not they
carry an umlaut (issue 52). English and code are not stemmed: the English figures stay as they were measured.
German words are first normalised as Lucene's ``GermanNormalizationFilter`` does (``ä ö ü ß`` -> ``a o u ss``,
``ae oe`` -> ``a o``, ``ue`` -> ``u`` but not after a vowel or ``q``), so ``Ueberblick`` meets ``Überblick``.
Words with digits or underscores (identifiers) are never stemmed.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence
from typing import Any

from ctx_retrieval._optional import require
from ctx_retrieval.errors import InvalidInputError
from ctx_retrieval.language import is_latin

# The first letter's script decides, for scripts that one Snowball stemmer covers.
_SCRIPTS = ((0x0400, 0x04FF, "russian"), (0x0370, 0x03FF, "greek"), (0x0600, 0x06FF, "arabic"),
            (0x0900, 0x097F, "hindi"), (0x0B80, 0x0BFF, "tamil"))
LATIN_STEMMED = frozenset(("german", "french", "spanish", "portuguese", "italian", "dutch", "turkish", "swedish",
                           "indonesian", "romanian"))
_SHORTEST = 4  # shorter words are left whole: Hindi's particles की, के, का would all become क
_local = threading.local()  # PyStemmer's stemmers are not to be shared between threads


# Latin diacritics; Arabic harakat, superscript alef and tatweel, and the hamza a decomposed alef carries (as
# Lucene's Arabic normaliser: أ إ آ -> ا); Hebrew points and cantillation. Indic vowel signs are letters' parts, kept.
_MARKS = re.compile("[\u0300-\u036f\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7\u0610-\u061a"
                    "\u0640\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e8\u06ea-\u06ed]")
_UNMARKED = str.maketrans({"đ": "d", "Đ": "D", "ß": "ss", "ø": "o", "Ø": "O", "ł": "l", "Ł": "L", "æ": "ae",
                           "Æ": "AE", "œ": "oe", "Œ": "OE", "ı": "i", "ى": "ي", "ة": "ه"})


def fold_accents(text: str) -> str:
    """Text without diacritics (``Tổng doanh thu`` -> ``Tong doanh thu``, ``Grüße`` -> ``Grusse``), for users
    who type queries without them: Turkish dotless and dotted i as ``i``, Arabic without harakat or tatweel and with one
    alef (``المُستخدِم`` -> ``المستخدم``), Hebrew without points; CJK, Indic and other scripts are left as they are."""
    decomposed = unicodedata.normalize("NFKD", text.translate(_UNMARKED))
    return unicodedata.normalize("NFC", _MARKS.sub("", decomposed))


def stemmed_in(language: str | Sequence[str] | None) -> tuple[str, ...]:
    """``language=`` as a tuple of the languages Latin-script words are stemmed in, each checked."""
    languages = () if language is None else (language,) if isinstance(language, str) else tuple(language)
    unknown = [name for name in languages if name not in LATIN_STEMMED]
    if unknown:
        raise InvalidInputError(f"BM25 cannot stem in {unknown[0]!r}: pass language= one or more of "
                                f"{', '.join(sorted(LATIN_STEMMED))}, None (no stemming, as English), or \"auto\" "
                                "(detected from the chunks); Cyrillic, Greek, Arabic, Hindi and Tamil words are "
                                "stemmed by their script without it")
    return languages


def recorded_languages(recorded: Sequence[str] | None, asked: tuple[str, ...] | None, where: str
                       ) -> tuple[str, ...] | None:
    """The languages an index recorded when its first chunks were written (``None``: not yet), refused with the fix
    when others were asked for: one rule for ``BM25Store``, ``MilvusStore`` and ``PostgresStore``."""
    if recorded is None:
        return None
    if asked is not None and tuple(recorded) != asked:
        raise InvalidInputError(f"{where} was analysed stemming {said(recorded)}, not {said(asked)}: pass "
                                f"language={tuple(recorded)!r} (or \"auto\"), or build it anew")
    return tuple(recorded)


def said(languages: Sequence[str]) -> str:
    """Languages in a sentence (``german and french``; ``no language``)."""
    return " and ".join(languages) if languages else "no language"


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


def stems(token: str, latin: tuple[str, ...], folded: str) -> list[str]:
    """The stems of one token that differ from it, each also without diacritics: a non-Latin word's by its script,
    a Latin-script word's in each of ``latin`` (the index's languages; none: not stemmed); identifiers (digits,
    underscores) never. ``folded``: the token without its marks (Arabic is stemmed in that form)."""
    if len(token) < _SHORTEST or "_" in token or any(ch.isdigit() for ch in token):
        return []
    language = script_language(token)
    if language is not None:
        found = [_light10(folded) if language == "arabic" else _stemmer(language).stemWord(token)]
    elif is_latin(token[0]):
        found = [_stemmer(language).stemWord(german_normal(token) if language == "german" else token)
                 for language in latin if language in LATIN_STEMMED]
    else:
        return []
    out = []
    for stem in found:
        if stem and stem != token:
            out.append(stem)
            if not stem.isascii():
                out.append(fold_accents(stem))
    return out


_GERMAN_PAIRS = re.compile("ae|oe|(?<![aeiouyäöüq])ue")


def german_normal(word: str) -> str:
    """A lower-cased German word as Lucene's ``GermanNormalizationFilter`` writes it (the German2 Snowball variant's
    heuristic): ``ae``, ``oe`` and ``ue`` (not after a vowel or ``q``: ``Feuer``, ``Quelle``) as ``a``, ``o``,
    ``u``, then without diacritics (``ß`` -> ``ss``): ``Ueberblick`` and ``Überblick`` -> ``uberblick``."""
    return fold_accents(_GERMAN_PAIRS.sub(lambda m: m.group()[0], word))


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


_COMPOUNDING = frozenset(("german",))  # measured (benchmarks/squad_languages.py); Dutch and Swedish link otherwise
_LINKS = ("", "s", "es", "n", "en", "e", "er")  # German linking elements: Verteidigung-s-ministerium
_PART = 4  # the shortest part a compound is split into
_COMPOUND = 8  # the shortest word tried


class Compounds:
    """German compounds split into parts the index's own chunks use as words (a corpus-based splitter, Koehn and
    Knight 2003, with no dictionary): ``verteidigungsministerium`` -> ``verteidigung ministerium`` when both occur
    alone in the chunks the index learnt from. The parts are indexed beside the whole word, in queries too, so
    ``Ministerium`` meets ``Verteidigungsministerium`` and ``Tastenkürzel`` meets ``Tastaturkürzel`` (issue 52).
    ``words``: the German-normalised words of at least four letters of the index's first chunks, frozen with it."""

    def __init__(self, words: frozenset[str]) -> None:
        self.words = words
        self._found: dict[str, tuple[str, ...]] = {}

    def parts(self, word: str) -> tuple[str, ...]:
        """``word`` (German-normalised) as its parts, left to right; ``(word,)`` where it does not split."""
        if len(word) < _COMPOUND or not word.isalpha():
            return (word,)
        found = self._found.get(word)
        if found is None:
            found = self._found[word] = self._split(word, 0)
            if len(self._found) > 200_000:
                self._found.clear()
        return found

    def _split(self, word: str, depth: int) -> tuple[str, ...]:
        best: tuple[int, str, str] | None = None
        for at in range(_PART, len(word) - _PART + 1):
            head, rest = word[:at], word[at:]
            for link in _LINKS:
                if not head.endswith(link):
                    continue
                body = head[: len(head) - len(link)]
                if len(body) < _PART or body not in self.words:
                    continue
                if rest in self.words or (depth < 2 and len(self._split(rest, depth + 1)) > 1):
                    score = min(len(body), len(rest))
                    if best is None or score > best[0]:
                        best = (score, body, rest)
        if best is None:
            return (word,)
        _, body, rest = best
        return (body, *((rest,) if rest in self.words else self._split(rest, depth + 1)))


def compounding(languages: tuple[str, ...]) -> bool:
    """Whether an index in these languages splits compounds (German)."""
    return any(language in _COMPOUNDING for language in languages)
