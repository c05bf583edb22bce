"""Whether a document is written in English: which prompt asks for its context (``PromptTemplate.for_document``).

No language-identification model: a document is taken as English (or code, or text without letters) unless more
than 8% of its letters are outside ASCII (Chinese, Japanese, Korean, Vietnamese, Thai, Cyrillic, Greek, Arabic...)
or its commonest function words are those of another Latin-script language (German, French, Spanish, Portuguese,
Italian, Dutch, Indonesian, Turkish, Polish, Swedish, Romanian) more than English ones, or Turkish's own letters
(dotless i, s with cedilla, g with breve) make up more than 0.5% of its letters (technical Turkish carries many
English terms and few function words). Read over the first 20,000 characters.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["corpus_languages", "is_latin", "latin_language", "written_in_english"]

_SAMPLE = 20_000
_NON_ASCII_SHARE = 0.08
_WORD = re.compile(r"[^\W\d_]+")
_ASCII_WORD = re.compile(r"[a-z]+")  # _WORD in lower-cased ASCII text
_ASCII_RUNS = re.compile(r"[\x00-\x7f]+")  # removed from a text: its characters outside ASCII are left
_FUNCTION_WORDS = (  # English first, then the Latin-script languages a document may be written in instead
    "the and of to in is that for it with as was on are be this by from or which an not",
    "der die und das ist nicht mit den von zu ein eine im auf für sich des dem wird sind auch",  # German
    "le la les et des est une un du que pour dans sur pas au ce qui sont avec",  # French
    "el los las y que es una por con para del se al lo su como más",  # Spanish
    "os as que do da em um uma para não dos das ao pelo você é são também seu sua",  # Portuguese ("com": URLs)
    "il di che è della per del sono gli le una nel alla",  # Italian
    "het een en van dat op te zijn niet met voor ook aan",  # Dutch
    "yang dan di ini itu dengan untuk dari dalam tidak akan pada",  # Indonesian
    "ve bir bu için ile olan gibi daha çok ne mi olarak kadar sonra veya ise her şu",  # Turkish
    "i w z na się nie do to że jest jak po od za dla są lub oraz",  # Polish
    "och att det som en är på för med av den till inte har om",  # Swedish
    "și în cu că pe nu este care din pentru sau mai fost sunt această acest",  # Romanian
)
_ENGLISH, *_OTHERS = (frozenset(words.split(" ")) for words in _FUNCTION_WORDS)
_NAMES = ("german", "french", "spanish", "portuguese", "italian", "dutch", "indonesian", "turkish", "polish",
          "swedish", "romanian")  # _OTHERS' languages, as Snowball names them
# Letters that only some Latin-script languages write, in the order they decide (a text without function words, such
# as a short query, is told by them): Turkish's own first, then German's, Spanish's, Portuguese's...
_LETTER_HINTS = (("ıİşŞğĞ", "turkish"), ("șțȘȚ", "romanian"), ("ßäÄ", "german"), ("ñÑ¿¡", "spanish"),
                 ("ãõÃÕ", "portuguese"), ("åÅ", "swedish"), ("ąęłńśźżĄĘŁŃŚŹŻ", "polish"), ("çèêëœàùîûÇÈÊË", "french"),
                 ("ìòÌÒ", "italian"), ("öüÖÜ", "german"))
_TURKISH_LETTERS = frozenset("ıİşŞğĞ")
_VIETNAMESE_LETTERS = frozenset("đơưĐƠƯ")  # and Latin Extended Additional's ạ ả ấ ... ỹ
_TURKISH_SHARE = 0.005


def is_latin(ch: str) -> bool:
    """Whether a letter is of the Latin script (Basic Latin to Latin Extended-B, and Latin Extended Additional, where
    Vietnamese's letters are)."""
    code = ord(ch)
    return code < 0x0250 or 0x1E00 <= code < 0x1F00


class _Sample:
    """What both questions read of a text's first ``_SAMPLE`` characters, each counted once at C speed: its letters,
    its characters outside ASCII, and how often each word occurs (lower-cased). Counting the function words of
    eleven languages over a word count costs 11 x ~20 lookups, not 11 passes over every word."""

    __slots__ = ("_sample", "_words", "letters", "marked", "non_ascii")

    def __init__(self, text: str) -> None:
        self._sample = sample = text[:_SAMPLE]
        self.letters = sum(map(str.isalpha, sample))
        self.non_ascii = "" if sample.isascii() else _ASCII_RUNS.sub("", sample)
        self.marked = [ch for ch in self.non_ascii if ch.isalpha()]  # its letters outside ASCII
        self._words: Counter[str] | None = None  # counted when first asked (a text outside Latin script never is)

    def count(self, words: frozenset[str]) -> int:
        """How many of the sample's words are among ``words``."""
        counts = self._words
        if counts is None:
            if not self.non_ascii:  # ASCII: the same words, lower-cased at once
                counts = self._words = Counter(_ASCII_WORD.findall(self._sample.lower()))
            else:
                counts = self._words = Counter()
                for word, times in Counter(_WORD.findall(self._sample)).items():
                    counts[word.lower()] += times
        return sum(counts[w] for w in words if w in counts)


def written_in_english(text: str) -> bool:
    """True for English, code and text without letters; False for a document in another language."""
    sample = _Sample(text)
    if not sample.letters:
        return True
    if len(sample.marked) > _NON_ASCII_SHARE * sample.letters:
        return False
    if sum(1 for ch in sample.marked if ch in _TURKISH_LETTERS) > _TURKISH_SHARE * sample.letters:
        return False
    english = sample.count(_ENGLISH)
    return all(sample.count(others) <= english for others in _OTHERS)


def latin_language(text: str, *, ascii_too: bool = False) -> str | None:
    """The Latin-script language other than English that ``text`` is written in, as Snowball names it (``german``,
    ``turkish``, ``spanish``...), or ``None`` (English, code, another script, or too little to tell): by its
    function words, else by letters only some languages write (a short query: ``Abhängigkeiten cachen`` is German,
    ``süresi doldu`` Turkish). Text in ASCII alone is ``None`` unless ``ascii_too`` (then told by its function
    words: a German chunk without an umlaut). What BM25 stems Latin-script words by."""
    if not ascii_too and text[:_SAMPLE].isascii():
        return None
    sample = _Sample(text)
    latin = sample.letters - len(sample.marked) + sum(1 for ch in sample.marked if is_latin(ch))
    if latin * 2 < sample.letters:
        return None  # mostly another script (a Chinese or Russian page with English code in it)
    if sum(1 for ch in sample.marked if ch in _VIETNAMESE_LETTERS or "\u1ea0" <= ch <= "\u1ef9") * 50 > latin:
        return None  # Vietnamese (no stemmer; its ã, ê, à are not Portuguese or French): over 2% of its letters
    english = sample.count(_ENGLISH)
    counts = [sample.count(others) for others in _OTHERS]
    best = max(range(len(counts)), key=counts.__getitem__)
    if counts[best] > english and sorted(counts)[-2] < counts[best]:
        return _NAMES[best]
    if english >= 2 and english >= counts[best]:
        return None
    for hints, language in _LETTER_HINTS:  # enough of them: one "São Paulo" does not make a page Portuguese
        if sum(1 for ch in sample.non_ascii if ch in hints) >= max(1, latin // 500):  # every hint is outside ASCII
            return language
    return None


_CORPUS_SAMPLE = 2000  # texts read, spread evenly over the corpus
_CORPUS_SHARE = 0.1  # a language stems the index's words when at least this share of the texts is written in it
_CORPUS_MOST = 3


def corpus_languages(texts: Sequence[str]) -> tuple[str, ...]:
    """The Latin-script languages (Snowball's names) a corpus is written in, commonest first: each written by at
    least a tenth of its texts (up to 2,000 read, spread evenly), at most three; ``()`` for English and code. What a
    BM25 index stems Latin-script words in, its queries too (issue 52)."""
    step = max(1, len(texts) // _CORPUS_SAMPLE)
    sample = texts[::step]
    counts = Counter(latin_language(text, ascii_too=True) for text in sample)
    return tuple(language for language, n in counts.most_common()
                 if language is not None and n >= _CORPUS_SHARE * len(sample))[:_CORPUS_MOST]
