"""BM25 analysis per language on question sets people wrote (issue 52): Pass@1, MRR and Pass@20 of BM25 (the
``BM25Store`` at its defaults) and, with ``--e5``, of dense e5 and hybrid e5 + BM25, one line per file.

    .venv/bin/python benchmarks/squad_languages.py xquad.de.json [xquad.zh.json ...] [--e5] [--json out.json]

The files are in SQuAD's format; measured with XQuAD (github.com/google-deepmind/xquad, CC BY-SA 4.0, not vendored
here: fetch it): 240 Wikipedia paragraphs from 48 articles and 1,190 questions crowd-written for SQuAD and translated
by professional translators into each of ten languages. Each paragraph is one chunk (no chunker: the analysis is
what is measured), a question's gold chunk the paragraph it was asked on. No contexts: plain text on both sides.
Dense search is exact (numpy); fusion is RRF at the default ``rrf_k`` over 150 candidates a side, as the stores fuse.
Intervals are 95% bootstrap intervals over the questions. The floor is Pass@1 = 100%: every question has one gold.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ctx_retrieval.evaluation.metrics import bootstrap_interval  # noqa: E402
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store  # noqa: E402
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K, chunk_key, reciprocal_rank_fusion  # noqa: E402

CANDIDATES = 150


def load(path: Path) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """Chunk ids, their texts, and (question, gold chunk id) pairs."""
    ids, texts, questions = [], [], []
    for a, article in enumerate(json.loads(path.read_text(encoding="utf-8"))["data"]):
        for p, paragraph in enumerate(article["paragraphs"]):
            ids.append(f"a{a:03d}-p{p:02d}")
            texts.append(paragraph["context"])
            questions.extend((qa["question"], ids[-1]) for qa in paragraph["qas"])
    return ids, texts, questions


def ranks_of(rankings: list[list[str]], gold: list[str]) -> list[int | None]:
    return [ranking.index(g) + 1 if g in ranking else None for ranking, g in zip(rankings, gold, strict=True)]


def scores(ranks: list[int | None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, values in (("pass@1", [1.0 if r == 1 else 0.0 for r in ranks]),
                         ("mrr", [1.0 / r if r else 0.0 for r in ranks]),
                         ("pass@20", [1.0 if r and r <= 20 else 0.0 for r in ranks])):
        lo, hi = bootstrap_interval(values)
        out[name] = (sum(values) / len(values), lo, hi)
    return out


def bm25_rankings(ids: list[str], texts: list[str], questions: list[str], language: str | None) -> list[list[str]]:
    store = BM25Store(**({"language": language} if language else {}))
    store.upsert(BM25Entry(i, t) for i, t in zip(ids, texts, strict=True))
    id_of = {chunk_key(i): i for i in ids}
    return [[id_of[key] for key in store.search(q, k=CANDIDATES).keys] for q in questions]


def dense_rankings(texts: list[str], ids: list[str], questions: list[str]) -> list[list[str]]:
    import numpy as np

    from ctx_retrieval.retrieval.e5 import E5Embedder

    e5 = E5Embedder(cache=True)
    chunks = np.asarray(e5.embed(texts))
    asked = np.asarray(e5.embed_queries(questions))
    order = np.argsort(-(asked @ chunks.T), axis=1)[:, :CANDIDATES]
    return [[ids[n] for n in row] for row in order]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--e5", action="store_true", help="also dense e5 and hybrid e5 + BM25 (slower)")
    parser.add_argument("--language", help="the BM25 index's language (default: detected from the paragraphs)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, dict[str, Any]] = {}
    print("| set | row | Pass@1 [95%] | MRR | Pass@20 | seconds |\n|---|---|---|---|---|---|")
    for path in args.files:
        ids, texts, pairs = load(path)
        questions, gold = [q for q, _ in pairs], [g for _, g in pairs]
        rows: dict[str, list[list[str]]] = {}
        t = time.perf_counter()
        rows["BM25"] = bm25_rankings(ids, texts, questions, args.language)
        took = {"BM25": time.perf_counter() - t}
        if args.e5:
            t = time.perf_counter()
            rows["dense e5"] = dense_rankings(texts, ids, questions)
            took["dense e5"] = time.perf_counter() - t
            rows["hybrid e5 + BM25"] = [[i for i, _ in reciprocal_rank_fusion([d, b], rrf_k=DEFAULT_RRF_K, limit=20)]
                                        for d, b in zip(rows["dense e5"], rows["BM25"], strict=True)]
        results[path.name] = {}
        for row, rankings in rows.items():
            got = results[path.name][row] = scores(ranks_of(rankings, gold))
            p1, lo, hi = got["pass@1"]
            print(f"| {path.name} ({len(questions)} q) | {row} | {p1:.1%} [{lo:.1%}, {hi:.1%}] | {got['mrr'][0]:.3f} "
                  f"| {got['pass@20'][0]:.1%} | {took.get(row, 0.0):.1f} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
