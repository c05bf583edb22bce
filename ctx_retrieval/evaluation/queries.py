"""Synthetic evaluation queries: for a sample of a corpus's chunks, the configured LLM writes a question each chunk
answers, so a corpus without gold queries can still be evaluated (``run_ablation``, ``ctx-retrieval eval
--generate-queries``).

The questions go through the context engine itself (``ContextGenerator`` with ``QUESTION_PROMPT``): each document
is the cached block its sampled chunks' requests share (paid once per document, as contexts are), every request is
priced, ``budget_usd`` stops cleanly, and each answer is stored in the context cache under the question prompt's own
key, so a rerun or a resumed run pays only for what is missing. A dry run (``estimate_queries``) prices it first.

The sample is stratified over documents: each document gets a share of the queries in proportion to its
eligible chunks (at least ``min_tokens`` tokens), the largest remainders rounding up, chunks drawn at random
within each document (seeded). Questions are cleaned (preambles, quotes, a leading ``Question:``), and a question
asked twice (compared case- and punctuation-blind) is kept once, for its first chunk. Each query's gold chunk is the
chunk it was written from; what that measures, and does not, is said in ``QuerySet.note``.
"""

from __future__ import annotations

import json
import random
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ctx_retrieval.contextualize.generator import ContextGenerator
from ctx_retrieval.contextualize.prompts import ENGLISH_PROMPT, clean_context
from ctx_retrieval.contextualize.results import CostEstimate
from ctx_retrieval.errors import ContextGenerationError, InvalidInputError
from ctx_retrieval.evaluation.corpus import EvalQuery
from ctx_retrieval.tokens import TokenCounter, estimate_tokens
from ctx_retrieval.types import Chunk, SourceDocument
from ctx_retrieval.usage import RunReport

QUESTION_PROMPT = replace(
    ENGLISH_PROMPT, version="q-v1", other_languages=None,
    chunk_block=(
        "{window_note}"
        "Here is a passage from that document:\n"
        "<chunk>\n{chunk}\n</chunk>\n\n"
        "Write one question that someone searching this document would ask and that this passage answers. Ask it "
        "in your own words, as a user would type it, without copying the passage; write it in the language the "
        "document is written in.\n"
        "Answer only with the question and nothing else."
    ))
QUESTION_MAX_TOKENS = 60
NOTE = ("Synthetic queries: each was written by an LLM from one chunk, which is its only gold chunk. They measure "
        "whether retrieval finds the chunk a question came from; written with the chunk in view they share more of "
        "its words than real users' questions do, which favours BM25 and makes every variant look better than it "
        "will in use. Compare variants with them, not absolute figures with other corpora.")

_QUESTION_LABEL = re.compile(
    r"^\s*(?:(?:sure|certainly|okay|ok)\b[,.!]?\s*)?(?:here(?:'s|\s+is|\s+are)\b[^:\n]{0,60}?\bquestions?\b[^:\n]{0,30}:"
    r"|(?:question|q|query)\s*[:.)-])\s*", re.IGNORECASE)
_QUESTION_END = re.compile(r"[?？؟]")


@dataclass(frozen=True)
class GeneratedQuery:
    query: str
    gold_chunk_id: str
    document_id: str


@dataclass
class QuerySet:
    """Generated queries with the run's report: how many chunks were sampled, how many questions were dropped as
    duplicates, how many chunks got none (failed, or the run stopped)."""

    queries: list[GeneratedQuery]
    report: RunReport
    sampled: int
    duplicates: int = 0
    missing: int = 0
    model: str = ""
    note: str = NOTE
    estimate: CostEstimate | None = field(default=None, repr=False)

    def eval_queries(self) -> list[EvalQuery]:
        return [EvalQuery(q.query, (q.gold_chunk_id,)) for q in self.queries]

    def write(self, path: str | Path) -> Path:
        """The queries as the evaluation reads them (JSONL: ``query``, ``gold_chunk_ids``; with ``document_id`` and
        ``generated_by``)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as out:
            for q in self.queries:
                out.write(json.dumps({"query": q.query, "gold_chunk_ids": [q.gold_chunk_id],
                                      "document_id": q.document_id, "generated_by": self.model},
                                     ensure_ascii=False) + "\n")
        return path

    def format(self) -> str:
        dollars = "unknown" if self.report.cost_usd is None else f"${self.report.cost_usd:.4f}"
        return (f"{len(self.queries)} queries from {self.sampled} sampled chunks ({self.duplicates} duplicates "
                f"dropped, {self.missing} chunks without a question); {self.report.requests} requests, {dollars}, "
                f"{self.report.wall_time_s:.1f} s")


def clean_question(text: str, *, max_tokens: int = QUESTION_MAX_TOKENS,
                   count_tokens: TokenCounter = estimate_tokens) -> str:
    """The model's answer as one question: the context cleanup (preambles, tags, quotes), a leading ``Question:``
    removed, and only the first question when it wrote several."""
    text = clean_context(text, max_tokens=max_tokens, count_tokens=count_tokens)
    text = _QUESTION_LABEL.sub("", text).strip().strip("\"'\u201c\u201d").strip()
    end = _QUESTION_END.search(text)
    return text[: end.end()].strip() if end else text


def _normalised(question: str) -> str:
    folded = unicodedata.normalize("NFKC", question).casefold()
    return " ".join("".join(ch if ch.isalnum() else " " for ch in folded).split())


def sample_chunks(items: Sequence[tuple[SourceDocument, Sequence[Chunk]]], count: int, *, seed: int = 0,
                  min_tokens: int = 16, count_tokens: TokenCounter = estimate_tokens
                  ) -> list[tuple[SourceDocument, list[Chunk]]]:
    """Up to ``count`` chunks, stratified over documents (see the module docstring), as (document, chunks) items in
    corpus order; each document keeps its chunks' order."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise InvalidInputError(f"count must be a whole number >= 1, got {count!r}")
    eligible = [(document, [c for c in chunks if count_tokens(c.text) >= min_tokens]) for document, chunks in items]
    eligible = [(d, cs) for d, cs in eligible if cs]
    total = sum(len(cs) for _, cs in eligible)
    if total == 0:
        raise InvalidInputError(f"no chunk has at least {min_tokens} tokens: nothing to write questions for")
    count = min(count, total)
    rng = random.Random(seed)
    shares = [count * len(cs) / total for _, cs in eligible]
    quota = [int(s) for s in shares]
    order = sorted(range(len(eligible)), key=lambda n: (-(shares[n] - quota[n]), rng.random()))
    for n in order[: count - sum(quota)]:
        quota[n] += 1
    out = []
    for (document, chunks), wanted in zip(eligible, quota, strict=True):
        if wanted:
            picked = set(rng.sample(range(len(chunks)), wanted))
            out.append((document, [c for n, c in enumerate(chunks) if n in picked]))
    return out


def question_generator(provider: Any = None, **settings: Any) -> ContextGenerator:
    """A ``ContextGenerator`` that writes questions (``QUESTION_PROMPT``, short answers, failures recorded per chunk
    rather than stopping the run); ``settings`` as for ``ContextGenerator`` (``cache``, ``budget_usd``, ...)."""
    settings.setdefault("on_error", "skip")
    settings.setdefault("max_context_tokens", QUESTION_MAX_TOKENS)
    return ContextGenerator(provider, prompt=QUESTION_PROMPT, **settings)


def estimate_queries(items: Sequence[tuple[SourceDocument, Sequence[Chunk]]], count: int, *, provider: Any = None,
                     seed: int = 0, **settings: Any) -> CostEstimate:
    """What ``generate_queries`` would request and cost (a dry run: no question is asked)."""
    generator = question_generator(provider, **settings)
    try:
        return generator.estimate(sample_chunks(items, count, seed=seed))
    finally:
        generator.close()


def generate_queries(items: Sequence[tuple[SourceDocument, Sequence[Chunk]]], count: int = 100, *,
                     provider: Any = None, seed: int = 0, generator: ContextGenerator | None = None,
                     **settings: Any) -> QuerySet:
    """Questions for a stratified sample of ``count`` chunks (see the module docstring), written by ``provider``
    (Claude by default) through the context engine; or pass a ``generator`` from ``question_generator``."""
    own = generator is None
    generator = generator or question_generator(provider, **settings)
    try:
        sample = sample_chunks(items, count, seed=seed)
        try:
            run = generator.contextualize_many(sample)
        except ContextGenerationError as exc:  # the budget, or Ctrl-C: keep the questions written so far
            if exc.run is None:
                raise
            run = exc.run
    finally:
        if own:
            generator.close()
    queries: list[GeneratedQuery] = []
    seen: set[str] = set()
    duplicates = missing = 0
    for result in run:
        question = clean_question(result.context) if result.context else ""
        if not question:
            missing += 1
            continue
        key = _normalised(question)
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        queries.append(GeneratedQuery(question, result.chunk_id, result.document_id))
    return QuerySet(queries, run.report, sum(len(c) for _, c in sample), duplicates, missing,
                    model=f"{run.report.provider}/{run.report.model}")


