"""BM25 over numpy arrays: an inverted index of precomputed term weights, queried by one ``bincount``.

Scoring is Okapi BM25 with Lucene's idf, ``log(1 + (N - df + 0.5) / (df + 0.5))`` (never negative), k1=1.5,
b=0.75. The tokenizer lower-cases and splits identifiers on camelCase, digits and non-alphanumerics
(``DiffExecutor.run_target`` -> ``diff executor run target``), which code and technical text need; non-Latin
runs are kept whole. The index saves into a folder of ``.npy`` arrays + JSON (never pickle) and loads back
exactly, memory-mapped if asked.
"""

from __future__ import annotations

import functools
import json
import math
import re
import unicodedata
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctx_retrieval._optional import require
from ctx_retrieval.errors import DuplicateChunkIdError, InvalidInputError
from ctx_retrieval.language import latin_language
from ctx_retrieval.retrieval.stemming import Compounds, compounding, fold_accents, german_normal, stems

if TYPE_CHECKING:
    import numpy as np


_WORD_PARTS = re.compile(r"[^\W_]+", re.UNICODE)  # the ``parts`` tokenizer's words, as before issue 35
_ASCII_WORD = re.compile(r"\w+")  # in ASCII text, what ``_word_patterns`` finds
_PIECE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_FORMAT_VERSION = 2  # 1 was path.npz + path.json; 2 is a folder of .npy arrays + meta.json
_ARRAYS = ("indptr", "docs", "weights")
_META = "meta.json"


def _parts(word: str) -> list[str]:
    if not word.isascii():
        return [word.lower()]  # CJK, accented and other scripts: the whole run
    if word.islower() or word.isdigit():
        return [word]
    return [piece.lower() for piece in _PIECE.findall(word)]


def tokenize_parts(text: str) -> list[str]:
    """Lower-cased tokens with identifiers split on camelCase, digits and underscores, and only the parts
    (``DiffExecutor.run_target`` -> ``diff executor run target``): the tokenizer before issue 16."""
    return [part for word in _WORD_PARTS.findall(text) for part in _parts(word)]


@functools.cache
def _word_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Words and identifiers whose letters keep their combining marks (categories Mn, Mc, Me: Devanagari and
    Bengali vowel signs, Tamil and Telugu marks, Arabic harakat, Hebrew points), which the word class of regular
    expressions does not match: without them ``फ़ाइलें`` fell apart at every vowel sign (issue 35). Built once, from
    this Python's Unicode tables."""
    ranges: list[str] = []
    start = None
    for code in range(0x0300, 0x20000):
        mark = unicodedata.category(chr(code)).startswith("M")
        if mark and start is None:
            start = code
        elif not mark and start is not None:
            ranges.append(f"{chr(start)}-{chr(code - 1)}" if code - 1 > start else chr(start))
            start = None
    marks = "".join(ranges)
    return re.compile(f"(?:[^\\W_]|[{marks}])+"), re.compile(f"[\\w{marks}]+")


# Han (with extensions and compatibility ideographs), Hiragana, Katakana (and its phonetic extensions), Hangul:
# the scripts written without spaces between words that Lucene's CJK analyzer indexes as bigrams.
_CJK = re.compile("([\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
                  "\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\U00020000-\U0003134f]+)")


def _cjk_grams(run: str) -> list[str]:
    """A run of CJK characters as its single characters and its overlapping bigrams, in order
    (``营收增长`` -> ``营 营收 收 收增 增 增长 长``): a query of any length matches inside words never spaced apart."""
    grams: list[str] = []
    for n, char in enumerate(run):
        grams.append(char)
        if n + 1 < len(run):
            grams.append(run[n:n + 2])
    return grams


# Thai (and Lao) is written without spaces between words and with combining vowel and tone marks, which ``\w``
# does not match: its runs are cut out first, whole.
_THAI = re.compile("([\u0e00-\u0eff]+)")
# A Thai or Lao letter with the vowel and tone marks written above or below it.
_THAI_LETTER = re.compile("[\u0e00-\u0eff][\u0e31\u0e34-\u0e3a\u0e47-\u0e4e\u0eb1\u0eb4-\u0ebc\u0ec8-\u0ecd]*")


def _thai_grams(run: str) -> list[str]:
    """A Thai or Lao run as overlapping character bigrams plus single letters (marks stay with the letter before
    them), the same approach as for CJK where no word segmenter is installed."""
    letters = _THAI_LETTER.findall(run)
    grams: list[str] = []
    for n, letter in enumerate(letters):
        grams.append(letter)
        if n + 1 < len(letters):
            grams.append(letter + letters[n + 1])
    return grams


def tokenize(text: str, *, languages: Sequence[str] | None = None, compounds: Compounds | None = None) -> list[str]:
    """``tokenize_parts`` plus each whole identifier, lower-cased, where it has several parts
    (``DiffExecutor.run_target`` -> ``diff executor diffexecutor run target run_target``): a query naming the
    identifier matches it exactly, one naming its words still matches the parts. The default since issue 16
    (dev queries, recorded contexts: plain hybrid failure@20 13.7% -> 12.1%, contextual 8.1% -> 7.3%).

    Text is width-folded first (NFKC: full-width digits and letters are the ASCII ones), and runs
    of Han, Kana and Hangul become single characters plus overlapping bigrams (issue 25, as Lucene's CJK analyzer
    indexes them); other scripts keep their words whole, as before, and a word with diacritics is also emitted
    without them (``công`` -> ``công cong``, as Lucene's ASCII folding with ``preserve_original``): a query typed
    without them still matches, one typed with them matches both (issue 25: Vietnamese queries typed without
    diacritics, contextual BM25 failure@5 19% -> 0%). Thai and Lao runs become letter bigrams plus letters
    (``tokenize_thai`` segments Thai into words instead).

    ``languages``: the Latin-script languages words are stemmed in (``retrieval.stemming``), an index's own
    (``BM25Store(language=)``), so its chunks and its queries are analysed alike; ``None``: the language of this one
    text (``ctx_retrieval.language.latin_language``; none for ASCII text). ``compounds``: German compounds are also
    indexed as their parts (``retrieval.stemming.Compounds``)."""
    return _tokenize(text, _thai_grams, _tuple(languages), compounds)


def tokenize_thai(text: str, *, languages: Sequence[str] | None = None,
                  compounds: Compounds | None = None) -> list[str]:
    """``tokenize`` with Thai runs cut into words by PyThaiNLP's dictionary segmenter (``newmm``; the ``[thai]``
    extra, offline) instead of letter bigrams."""
    return _tokenize(text, _thai_words, _tuple(languages), compounds)


def _tuple(languages: Sequence[str] | None) -> tuple[str, ...] | None:
    if languages is None:
        return None
    return (languages,) if isinstance(languages, str) else tuple(languages)


def _thai_words(run: str) -> list[str]:
    from pythainlp.tokenize import word_tokenize

    return [word for word in word_tokenize(run, engine="newmm", keep_whitespace=False) if word.strip()]


def _tokenize(text: str, thai: Callable[[str], list[str]], languages: tuple[str, ...] | None,
              compounds: Compounds | None = None) -> list[str]:
    text = unicodedata.normalize("NFKC", text)
    if languages is None:  # the language Latin-script words are stemmed in: this text's (none for English)
        found = None if text.isascii() else latin_language(text)
        languages = (found,) if found else ()
    if _THAI.search(text):
        tokens = []
        for piece in _THAI.split(text):
            if piece:
                tokens.extend(thai(piece) if _THAI.fullmatch(piece) else _tokenize(piece, thai, languages, compounds))
        return tokens
    tokens = []
    ascii_only = text.isascii() and not languages
    if ascii_only:  # English and code: what follows, with less work a word (the same tokens, tested)
        for identifier in _ASCII_WORD.findall(text):
            if "_" not in identifier and (identifier.islower() or identifier.isdigit()):
                tokens.append(identifier)
            else:
                tokens.extend(_ascii_identifier(identifier))
        return tokens
    for identifier in _word_patterns()[1].findall(text):
        if _CJK.search(identifier):
            for piece in _CJK.split(identifier):
                if _CJK.fullmatch(piece):
                    tokens.extend(_cjk_grams(piece))
                elif piece:
                    tokens.extend(_words(piece, languages, ascii_only, compounds))
            continue
        tokens.extend(_words(identifier, languages, ascii_only, compounds))
    return tokens


@functools.lru_cache(maxsize=1 << 16)
def _ascii_identifier(identifier: str) -> tuple[str, ...]:
    """An ASCII identifier's tokens where it is more than a lower-case word: with underscores, its parts and the
    whole; Capitalised, camelCase or UPPER, its pieces and the whole where there are several. Remembered: code
    repeats its identifiers (the cookbook's 737 chunks: 157 -> 94 us a chunk analysed)."""
    if "_" in identifier:
        return tuple(_identifier_tokens(identifier))
    parts = _PIECE.findall(identifier)
    return (identifier.lower(),) if len(parts) == 1 else (*map(str.lower, parts), identifier.lower())


def _words(identifier: str, languages: tuple[str, ...], ascii_only: bool, compounds: Compounds | None) -> list[str]:
    """An identifier's tokens, each word also as its stems (not in ASCII-only text without a language: English and
    code are not stemmed), written with diacritics also without them, and a compound also as its parts."""
    tokens = _identifier_tokens(identifier)
    if ascii_only:
        return tokens
    out: list[str] = []
    for token in tokens:
        folded = _folded(token)
        forms = [token, folded, *stems(token, languages, folded)]
        parts = compounds.parts(german_normal(token)) if compounds is not None else ()
        if len(parts) > 1:
            for part in parts:
                forms.extend((part, *stems(part, languages, part)))
        out.extend(dict.fromkeys(forms))  # each form once
    return out


def _folded(token: str) -> str:
    return token if token.isascii() else fold_accents(token)


def _identifier_tokens(identifier: str) -> list[str]:
    parts = [part for word in _word_patterns()[0].findall(identifier) for part in _parts(word)]
    whole = identifier.strip("_").lower()
    return [*parts, whole] if len(parts) > 1 and whole else parts


def tokenize_folded(text: str, *, languages: Sequence[str] | None = None,
                    compounds: Compounds | None = None) -> list[str]:
    """``tokenize`` on ``fold_accents(text)``: a query with or without accents matches (Vietnamese, German...); words
    are stemmed in ``languages`` (``None``: the language of the text as written)."""
    if languages is None:
        found = latin_language(unicodedata.normalize("NFKC", text))
        languages = (found,) if found else ()
    return _tokenize(fold_accents(text), _thai_grams, _tuple(languages), compounds)


TOKENIZERS: dict[str, Callable[[str], list[str]]] = {"identifiers": tokenize, "folded": tokenize_folded,
                                                     "thai": tokenize_thai, "parts": tokenize_parts}
"""The BM25 tokenizers by name: ``identifiers`` (the default: identifier parts and wholes, CJK and Thai bigrams,
words with diacritics also without them), ``folded`` (only without diacritics), ``thai`` (Thai segmented into
words, ``[thai]``) and ``parts`` (the one before issue 16)."""
_NEEDS = {"thai": ("pythainlp", "thai")}

ANALYSIS_VERSIONS: dict[str, int] = {"identifiers": 6, "folded": 5, "thai": 4, "parts": 1}
"""Bumped when a named tokenizer changes what it emits (``identifiers`` 2: CJK bigrams and width folding; 3: words
with diacritics also without them, Thai runs as bigrams; ``folded`` 2: Thai; issue 25; ``identifiers`` 4, ``folded``
3, ``thai`` 2: letters keep their combining marks, Turkish, Arabic and Hebrew folding; ``identifiers`` 5, ``folded``
4, ``thai`` 3: words also as their Snowball stems, ``retrieval.stemming``; issue 35; ``identifiers`` 6, ``folded`` 5,
``thai`` 4: Latin-script words stemmed in the index's languages, German normalised first, Romanian; issue 52), so an
index on disk built with the former tokens is refused instead of silently mismatching its queries."""
_BY_LANGUAGE = frozenset(("identifiers", "folded", "thai"))  # the named tokenizers that stem in given languages


def analyser(tokenizer: str | Callable[[str], list[str]], languages: Sequence[str],
             compounds: Compounds | None = None) -> Callable[[str], list[str]]:
    """What an index analyses every text with, its chunks and its queries alike: a named tokenizer stemming
    Latin-script words in the index's ``languages`` (``ctx_retrieval.language.corpus_languages``) and splitting
    compounds into ``compounds``' words; ``parts`` and a callable as they are."""
    found: Callable[..., list[str]] = resolve_tokenizer(tokenizer)
    if isinstance(tokenizer, str) and tokenizer in _BY_LANGUAGE:
        return functools.partial(found, languages=tuple(languages), compounds=compounds)
    return found


def compound_words(texts: Iterable[str], languages: Sequence[str]) -> frozenset[str]:
    """The words of ``texts`` German compounds may be split into (``Compounds``): each word of four letters or more,
    German-normalised; none where no language of the index compounds."""
    languages = tuple(languages)
    if not compounding(languages):
        return frozenset()
    return frozenset(german_normal(token) for text in texts for token in _tokenize(text, _thai_grams, languages)
                     if len(token) >= 4 and token.isalpha())


def resolve_tokenizer(tokenizer: str | Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """A tokenizer given by name (``TOKENIZERS``) or as a callable."""
    if callable(tokenizer):
        return tokenizer
    if tokenizer not in TOKENIZERS:
        from ctx_retrieval.errors import ConfigurationError

        raise ConfigurationError(f"unknown BM25 tokenizer {tokenizer!r}: use one of {', '.join(TOKENIZERS)} or a "
                                 "callable text -> list of tokens", setting="tokenizer")
    if tokenizer in _NEEDS:
        require(*_NEEDS[tokenizer])
    return TOKENIZERS[tokenizer]


class BM25Index:
    """A static BM25 index over ``ids``/``texts``; rebuild it (``BM25Index(...)``) when the corpus changes.

    The exact BM25 the tests and benchmarks check the engines against; no part of the package indexes with it (not
    exported at the top level): index with ``BM25Store`` (in memory with ``path=None``, on disk, incremental).

    Use:
        .. code-block:: python

            index = BM25Index(ids, texts)
            index.search("DiffExecutor run_target", k=20)   # [(id, score), ...] best first
    """

    def __init__(
        self,
        ids: Sequence[str],
        texts: Sequence[str],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        tokenizer: str | Callable[[str], list[str]] = tokenize,
    ) -> None:
        np = require("numpy", "bm25")
        tokenizer = resolve_tokenizer(tokenizer)
        if len(ids) != len(texts):
            raise InvalidInputError(f"ids and texts differ in length ({len(ids)} != {len(texts)}): pass one id "
                                    "per text")
        if len(set(ids)) != len(ids):
            repeated = next(i for i, n in Counter(ids).items() if n > 1)
            raise DuplicateChunkIdError(f"ids must be unique; {repeated!r} appears twice: give each text its own id")
        self.ids = list(ids)
        self.k1, self.b = k1, b
        self.tokenizer = tokenizer
        # Postings are appended to compact typed buffers (12 bytes each) one text at a time, then grouped by term
        # with one stable sort: no per-posting Python objects, so peak memory stays near the final arrays'.
        vocab: dict[str, int] = {}
        terms, docs_buf, tfs_buf, lengths_buf = array("i"), array("i"), array("f"), array("f")
        for doc, text in enumerate(texts):
            counter = Counter(tokenizer(text))
            lengths_buf.append(sum(counter.values()))
            for term, tf in counter.items():
                terms.append(vocab.setdefault(term, len(vocab)))
                docs_buf.append(doc)
                tfs_buf.append(tf)
        n = len(self.ids)
        lengths = np.frombuffer(lengths_buf, dtype=np.float32) if n else np.zeros(0, dtype=np.float32)
        avg = float(lengths.mean()) if n and lengths.sum() else 1.0
        term_ids = np.frombuffer(terms, dtype=np.int32) if terms else np.zeros(0, dtype=np.int32)
        order = np.argsort(term_ids, kind="stable")  # by term; within a term, documents stay in order
        indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
        indptr[1:] = np.cumsum(np.bincount(term_ids, minlength=len(vocab)))
        del term_ids, terms
        docs = np.frombuffer(docs_buf, dtype=np.int32)[order] if len(order) else np.zeros(0, dtype=np.int32)
        del docs_buf
        tfs = np.frombuffer(tfs_buf, dtype=np.float32)[order] if len(order) else np.zeros(0, dtype=np.float32)
        del tfs_buf, order
        df = np.diff(indptr).astype(np.float32)
        idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
        norm = k1 * (1 - b + b * lengths[docs] / avg) if len(docs) else np.zeros(0, dtype=np.float32)
        weights = np.repeat(idf, np.diff(indptr)) * tfs * (k1 + 1) / (tfs + norm)
        self._vocab = vocab
        self._indptr, self._docs, self._weights = indptr, docs, weights.astype(np.float32)
        self._avg_length = avg

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"BM25Index({len(self.ids)} texts, {len(self._vocab)} terms)"

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every text for ``query`` (repeated query terms count again)."""
        import numpy as np

        slices = [slice(self._indptr[t], self._indptr[t + 1])
                  for t in (self._vocab.get(term) for term in self.tokenizer(query)) if t is not None]
        if not slices:
            return np.zeros(len(self.ids), dtype=np.float32)
        docs = np.concatenate([self._docs[s] for s in slices])
        weights = np.concatenate([self._weights[s] for s in slices])
        return np.bincount(docs, weights=weights, minlength=len(self.ids)).astype(np.float32)

    def search(self, query: str, k: int = 10, *, allowed: Any = None) -> list[tuple[str, float]]:
        """The ``k`` best (id, score) pairs, best first; texts without any query term are not returned.

        ``allowed`` (a boolean array, one entry per text) restricts the search to some texts, e.g. those that pass
        a metadata filter: the ``k`` best among them, not a filtered top ``k``."""
        import numpy as np

        scores = self.scores(query)
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=bool)
            if allowed.shape != scores.shape:
                raise InvalidInputError(f"allowed has {allowed.size} entries for {len(self.ids)} texts: pass one "
                                        "flag per indexed text")
            scores = np.where(allowed, scores, np.float32(0))
        k = min(k, len(self.ids))
        if k <= 0:
            return []
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.lexsort((top, -scores[top]))]  # by score, ties by insertion order
        return [(self.ids[i], float(scores[i])) for i in top if scores[i] > 0]

    def search_many(self, queries: Iterable[str], k: int = 10) -> list[list[tuple[str, float]]]:
        return [self.search(q, k) for q in queries]

    # -- persistence (no pickle) -------------------------------------------------------------------------

    def save(self, directory: str | Path) -> None:
        """Write the index into ``directory``: one ``.npy`` file per array (loadable memory-mapped) and
        ``meta.json`` (ids, vocabulary, parameters). Never pickle."""
        np = require("numpy", "bm25")
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        for name in _ARRAYS:
            np.save(folder / f"{name}.npy", getattr(self, f"_{name}"), allow_pickle=False)
        meta = {"format": _FORMAT_VERSION, "k1": self.k1, "b": self.b, "avg_length": self._avg_length,
                "ids": self.ids, "vocab": self._vocab}
        (folder / _META).write_text(json.dumps(meta), encoding="utf-8")

    @staticmethod
    def saved_at(directory: str | Path) -> bool:
        """Whether ``directory`` holds a complete saved index."""
        folder = Path(directory)
        return (folder / _META).is_file() and all((folder / f"{name}.npy").is_file() for name in _ARRAYS)

    @classmethod
    def load(cls, directory: str | Path, *, tokenizer: str | Callable[[str], list[str]] = tokenize,
             mmap: bool = False) -> BM25Index:
        """An index saved by ``save``. ``mmap=True`` maps the arrays read-only instead of reading them: a large
        index opens at once, the OS pages in what queries touch, and processes on one machine share it."""
        np = require("numpy", "bm25")
        tokenizer = resolve_tokenizer(tokenizer)
        folder = Path(directory)
        if not cls.saved_at(folder):
            raise InvalidInputError(f"{folder} holds no saved BM25 index ({_META} and {', '.join(_ARRAYS)} .npy "
                                    "files): save one with BM25Index.save, or rebuild it")
        meta: dict[str, Any] = json.loads((folder / _META).read_text(encoding="utf-8"))
        if meta.get("format") != _FORMAT_VERSION:
            raise InvalidInputError(f"{folder}: unsupported BM25 index format {meta.get('format')!r}; rebuild the "
                                    "index")
        index = cls.__new__(cls)
        index.ids, index.k1, index.b, index.tokenizer = list(meta["ids"]), meta["k1"], meta["b"], tokenizer
        index._vocab = dict(meta["vocab"])
        for name in _ARRAYS:
            setattr(index, f"_{name}", np.load(folder / f"{name}.npy", mmap_mode="r" if mmap else None,
                                               allow_pickle=False))
        index._avg_length = float(meta["avg_length"])
        return index


def idf(n: int, df: int) -> float:
    """Lucene's BM25 idf (exposed for tests)."""
    return math.log1p((n - df + 0.5) / (df + 0.5))
