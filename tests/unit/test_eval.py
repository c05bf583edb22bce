"""Evaluation: corpus loading, the cookbook's Pass@k, and the ablation on a small corpus (exact numpy index)."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ctx_retrieval import InvalidInputError
from ctx_retrieval.evaluation import EvalQuery, load_cookbook, load_corpus, pass_at_k, run_ablation
from ctx_retrieval.text import indexed_text
from tests.helpers import make_document, write_corpus


def test_bundled_cookbook_corpus_loads_whole() -> None:
    corpus = load_cookbook()
    assert len(corpus.items) == 90 and len(corpus.chunks) == 737 and len(corpus.queries) == 124
    for document, chunks in corpus.items:
        assert "".join(c.text for c in chunks) == document.text
    assert corpus.queries[0].gold[0].endswith("_0")


def test_the_first_documents_keep_only_the_queries_they_answer() -> None:
    whole = load_cookbook()
    first = whole.first_documents(45)
    assert first.items == whole.items[:45] and (len(first.chunks), len(first.queries)) == (324, 65)
    kept = {c.id for c in first.chunks}
    assert [q for q in whole.queries if set(q.gold) <= kept] == first.queries
    first.validate()  # every gold chunk of every kept query is in it
    assert whole.first_documents(500).items == whole.items
    with pytest.raises(InvalidInputError, match="at least one document"):
        whole.first_documents(0)


def test_pass_at_k_counts_gold_texts_found_per_query() -> None:
    text_of = {"a": "alpha", "b": "beta", "c": "gamma", "d": " alpha "}
    queries = [EvalQuery("q1", ("a", "b")), EvalQuery("q2", ("c",))]
    results = [["d", "x", "b"], ["a", "b", "c"]]  # "d" has the same text as gold "a", as in the cookbook
    text_of["x"] = "other"
    assert pass_at_k(results, queries, text_of, 1) == pytest.approx((0.5 + 0) / 2)
    assert pass_at_k(results, queries, text_of, 3) == pytest.approx((1.0 + 1.0) / 2)


def test_generic_corpus_and_its_errors(tmp_path: Path) -> None:
    docs, queries = write_corpus(tmp_path)
    corpus = load_corpus(docs, queries)
    assert [c.id for c in corpus.chunks][:2] == ["acme-0", "acme-1"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"query": "q", "gold_chunk_ids": ["missing"]}), encoding="utf-8")
    with pytest.raises(InvalidInputError, match="not in the corpus"):
        load_corpus(docs, bad)
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(InvalidInputError, match=r"bad.jsonl:1: not a JSON line"):
        load_corpus(docs, bad)
    with pytest.raises(InvalidInputError, match="no such file"):
        load_corpus(tmp_path / "nope.jsonl", queries)


class BagOfWordsEmbedder:
    """A deterministic stand-in for the model: hashed word counts, unit length."""

    model_id = "bag-of-words"

    def embed(self, texts: list[str]) -> Any:
        vectors = np.zeros((len(texts), 64), dtype=np.float32)
        for n, text in enumerate(texts):
            for word in text.lower().replace("'", " ").split():
                vectors[n, zlib.crc32(word.strip(".,?%").encode()) % 64] += 1
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)

    def embed_query(self, text: str) -> Any:
        return self.embed([text])[0]


def test_ablation_finds_the_context_only_chunk_with_contexts(tmp_path: Path) -> None:
    docs, queries = write_corpus(tmp_path)
    corpus = load_corpus(docs, queries)
    contexts = {"acme-1": "From ACME Corp's Q2 2023 filing: revenue.",
                "globex-1": "From Globex Corporation's Q2 2023 filing: revenue."}
    result = run_ablation(corpus, contexts, contextualizer_label="test", embedder=BagOfWordsEmbedder(),
                          vector_store="numpy")
    names = [r.name for r in result.rows]
    assert names == ["plain dense", "contextual dense", "plain BM25", "contextual BM25", "plain hybrid",
                     "contextual hybrid"]
    assert result.rankings["contextual BM25"][0][0] == "acme-1"
    assert result.rankings["plain BM25"][0][0] != "acme-1"
    rows = {r.name: r for r in result.rows}
    assert rows["contextual BM25"].pass_at[5] == 1.0
    assert result.contexts["acme-1"] == contexts["acme-1"] and result.contexts["acme-0"] is None
    assert "| contextual hybrid |" in result.to_markdown()
    data = json.loads(json.dumps(result.to_dict()))
    assert data["rows"][0]["name"] == "plain dense" and data["meta"]["vector_store"] == "numpy"
    # Pass@1 and MRR, for question answering, in the table, the JSON and the report
    contextual = next(r for r in data["rows"] if r["name"] == "contextual BM25")
    plain = next(r for r in data["rows"] if r["name"] == "plain BM25")
    assert contextual["pass_at"]["1"] == 1.0 and contextual["mrr"] == 1.0 and plain["mrr"] < 1.0
    assert "| Pass@1 |" in result.to_markdown() and "| 100.0% | 100.0% | 100.0% | 100.0% | 1.000 |" in \
        result.to_markdown()
    assert "<th>MRR</th>" in result.to_html(tmp_path / "report.html").read_text(encoding="utf-8")


def test_mrr_reads_the_rank_of_the_first_gold_chunk() -> None:
    from ctx_retrieval.evaluation.metrics import mean_reciprocal_rank

    text_of = {"a": "alpha", "b": "beta", "c": "gamma", "a2": "alpha "}  # a2: the same text as a
    queries = [EvalQuery("q1", ("a",)), EvalQuery("q2", ("c",)), EvalQuery("q3", ("b",))]
    results = [["b", "a2", "c"], ["c"], ["a", "c"]]  # ranks 2 (by text), 1, none
    assert mean_reciprocal_rank(results, queries, text_of) == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert pass_at_k(results, queries, text_of, 1) == pytest.approx(1 / 3)


def test_ablation_with_a_reranker_adds_a_row(tmp_path: Path) -> None:
    docs, queries = write_corpus(tmp_path)
    corpus = load_corpus(docs, queries)

    def reverse(queries: list[str], rankings: list[list[str]], text_of: dict[str, str]) -> list[list[str]]:
        return [list(reversed(r)) for r in rankings]

    result = run_ablation(corpus, {}, contextualizer_label="none", embedder=BagOfWordsEmbedder(),
                          vector_store="numpy", reranker=reverse)
    assert result.rows[-1].name == "contextual hybrid + rerank"
    assert result.rankings["contextual hybrid + rerank"][0] == list(reversed(result.rankings["contextual hybrid"][0]))


def test_chart_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    docs, queries = write_corpus(tmp_path)
    result = run_ablation(load_corpus(docs, queries), {}, contextualizer_label="none",
                          embedder=BagOfWordsEmbedder(), vector_store="numpy")
    path = result.chart(tmp_path / "chart.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_bootstrap_intervals_are_seeded_and_cover_the_mean() -> None:
    from ctx_retrieval.evaluation import bootstrap_interval

    values = [1.0] * 20 + [0.0] * 80  # a 20% failure rate over 100 queries
    lo, hi = bootstrap_interval(values)
    assert 0.1 < lo < 0.2 < hi < 0.3
    assert bootstrap_interval(values) == (lo, hi)  # seeded: the same on every run
    same = bootstrap_interval(values, against=values)
    assert same == (0.0, 0.0)  # paired: a variant against itself differs by nothing, in every resample
    better = [0.0] * 100
    d_lo, d_hi = bootstrap_interval(better, against=values)
    assert d_hi < 0 and d_lo == pytest.approx(-0.2, abs=0.1)


def test_eval_tables_carry_intervals_and_two_concurrent_runs_agree(tmp_path: Path) -> None:
    """Exact search by default: two evaluations at the same time give the same figures (Chroma's approximate
    HNSW search could differ between runs under load)."""
    import subprocess
    import sys

    documents, queries = write_corpus(tmp_path)
    outs = [tmp_path / f"run{n}.json" for n in range(2)]
    command = [sys.executable, "-m", "ctx_retrieval", "eval", "--documents", str(documents), "--queries",
               str(queries), "--contextualizer", "heuristic", "--work-dir", str(tmp_path / "work")]
    runs = [subprocess.Popen([*command, "--json", str(out), "--chart", str(out.with_suffix(".png"))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for out in outs]
    printed = [run.communicate(timeout=600)[0] for run in runs]
    assert all(run.returncode == 0 for run in runs)
    first, second = (json.loads(out.read_text(encoding="utf-8")) for out in outs)
    assert first["rows"] == second["rows"] and first["meta"]["exact_search"] is True
    assert "failure@20 [95% CI]" in printed[0] and "bootstrap" in printed[0]
    contextual = next(r for r in first["rows"] if r["name"] == "contextual hybrid")
    assert contextual["compared_with"] == "plain hybrid" and len(contextual["difference_interval"]) == 2


def test_windows_layout_splits_only_what_overflows_and_keeps_the_context_in_each_window() -> None:
    from ctx_retrieval.retrieval.layout import window_texts
    from ctx_retrieval.tokens import estimate_tokens

    short = window_texts("A short chunk.", "Its context.", estimate_tokens)
    assert short == ["Its context.\n\nA short chunk."]
    chunk = " ".join(f"token{n}" for n in range(400))
    windows = window_texts(chunk, "The context of this chunk.", estimate_tokens, max_tokens=256)
    assert len(windows) > 1 and all(w.startswith("The context of this chunk.\n\n") for w in windows)
    assert all(estimate_tokens(w) <= 256 for w in windows)
    assert " ".join(w.split("\n\n", 1)[1] for w in windows) == chunk  # every word in exactly one window


def test_ablation_reports_the_windows_layout_against_the_whole_one(tmp_path: Path) -> None:
    documents, queries = write_corpus(tmp_path)
    corpus = load_corpus(documents, queries)

    class Embedder(BagOfWordsEmbedder):  # a TokenCountingEmbedder, as the windows layout needs
        max_tokens = 256

        def count_tokens(self, text: str) -> int:
            return len(text.split()) * 20  # a tiny input: the context + chunk overflow it

        def warn_if_truncated(self, texts: Sequence[str], what: str = "") -> int:
            return sum(self.count_tokens(t) > self.max_tokens for t in texts)

        def warn_if_corpus_truncated(self, texts: Sequence[str], names: Sequence[str], what: str = "") -> int:
            return self.warn_if_truncated(texts)

    result = run_ablation(corpus, {"acme-1": "ACME 10-Q, Q2 2023 revenue."}, contextualizer_label="t",
                          embedder=Embedder(), embed_layout="windows")
    rows = {r.name: r for r in result.rows}
    assert result.meta["embed_layout"] == "windows"
    assert all(len(ranking) == len(set(ranking)) for ranking in result.rankings["contextual dense (windows)"])
    assert rows["contextual dense (windows)"].compared_with == "contextual dense"
    assert rows["contextual hybrid (windows)"].compared_with == "contextual hybrid"
    with pytest.raises(InvalidInputError, match="whole' or 'windows"):
        run_ablation(corpus, {}, contextualizer_label="t", embedder=Embedder(), embed_layout="sliding")


def test_a_huge_context_is_cut_and_a_query_that_is_not_text_still_renders(tmp_path: Path,
                                                                           embedder: Any) -> None:
    from ctx_retrieval.evaluation import EvalCorpus
    from ctx_retrieval.evaluation.html import SNIPPET_CHARS, render_html

    items = [make_document("guide", paragraphs=4)]
    chunks = items[0][1]
    corpus = EvalCorpus("guides", items, [EvalQuery("odd \ud800 query", (chunks[0].id,))])
    huge = "x" * 200_000  # 625 snippets long: cut in the page (it was 2 MB: 15 s of CPU for the same check)
    result = run_ablation(corpus, {c.id: huge for c in chunks}, contextualizer_label="recorded", embedder=embedder)
    page = render_html(result)
    assert len(page) < 50_000 and "x" * SNIPPET_CHARS in page and "x" * (SNIPPET_CHARS + 1) not in page
    written = result.to_html(tmp_path / "r.html")  # a lone surrogate in a query never breaks writing the report
    assert "odd \ufffd query" in written.read_text(encoding="utf-8")


def test_the_verdict_says_when_a_single_side_beats_the_hybrid_beyond_chance_and_what_fixes_it() -> None:
    from ctx_retrieval.evaluation.report import EvalResult, VariantScore

    queries = [EvalQuery(f"question {n}", (f"g{n}",)) for n in range(100)]
    texts = {**{f"g{n}": f"gold {n}" for n in range(100)}, "other": "another chunk"}

    def row(name: str, failure: float, **kwargs: Any) -> VariantScore:
        return VariantScore(name, {1: 1 - failure, 5: 1 - failure, 10: 1 - failure, 20: 1 - failure}, failure,
                            **kwargs)

    def ranked(failure: float) -> list[list[str]]:  # the first failures * 100 queries miss their gold chunk
        return [["other"] if n < round(failure * 100) else [f"g{n}"] for n in range(100)]

    def result(bm25: float) -> EvalResult:
        failures = {"plain dense": 0.40, "contextual dense": 0.35, "plain BM25": 0.28, "contextual BM25": bm25,
                    "plain hybrid": 0.30, "contextual hybrid": 0.25}
        rows = [row(name, f) for name, f in failures.items() if name != "contextual hybrid"]
        rows.append(row("contextual hybrid", 0.25, compared_with="plain hybrid", difference=-0.05,
                        difference_interval=(-0.09, -0.01)))
        return EvalResult("zh docs", "recorded", 100, 400, rows,
                          rankings={name: ranked(f) for name, f in failures.items()}, query_list=queries,
                          chunk_texts=texts)

    text = result(bm25=0.14).verdict()  # Chinese with MiniLM: BM25 alone beat both hybrids, by 11 of 100
    assert text.startswith("Contextual retrieval helps")
    assert "But contextual BM25 alone misses the right chunk for only 14.0% of the queries, 11 fewer" in text
    assert "--embedder e5" in text
    assert "But" not in result(bm25=0.26).verdict()  # no variant beats the hybrid by a query: nothing to add
    assert "But" not in result(bm25=0.24).verdict()  # one question of 100: within chance, no advice


def test_questions_people_wrote_do_not_draw_the_quoting_warning() -> None:
    from ctx_retrieval.evaluation.metrics import COPIED_WARNING
    from ctx_retrieval.evaluation.report import EvalResult, VariantScore

    def result(copied: float) -> EvalResult:
        row = VariantScore("plain hybrid", {1: 0.5, 5: 0.8, 10: 0.9, 20: 0.95}, 0.05)
        contextual = VariantScore("contextual hybrid", {1: 0.6, 5: 0.9, 10: 0.95, 20: 0.97}, 0.03,
                                  compared_with="plain hybrid", difference=-0.02, difference_interval=(-0.04, 0.0))
        return EvalResult("covid", "heuristic", 185, 993, [row, contextual], meta={"queries_copied": copied})

    for human in (0.049, 0.149, 0.194):  # the cookbook's, COVID-QA's experts', the multilingual set's Hindi
        assert "quote their chunks" not in result(human).verdict()
    assert human < COPIED_WARNING and "quote their chunks more than people's" in result(0.30).verdict()


def test_the_baseline_row_embeds_only_texts_not_embedded_and_says_so(tmp_path: Path) -> None:
    docs, queries = write_corpus(tmp_path)
    corpus = load_corpus(docs, queries)
    contexts = {"acme-1": "From ACME Corp's Q2 2023 filing: revenue."}
    said: list[str] = []
    calls: list[tuple[int, list[str]]] = []  # (messages said before the call, texts)

    class Counting(BagOfWordsEmbedder):
        def embed(self, texts: list[str]) -> Any:
            calls.append((len(said), list(texts)))
            return super().embed(texts)

    # The baseline's contexts: one the same as the LLM's, one new, the rest none (the plain texts).
    baseline = {"acme-1": contexts["acme-1"], "globex-1": "From Globex's filing."}
    result = run_ablation(corpus, contexts, contextualizer_label="t", embedder=Counting(), progress=said.append,
                          baseline=("heuristic", baseline))
    told = next(n for n, line in enumerate(said) if "heuristic contexts" in line)
    assert said[told] == (f"embedding 1 chunk texts with the heuristic contexts for its row "
                          f"({len(corpus.chunks) - 1} already embedded)")
    globex = next(c for c in corpus.chunks if c.id == "globex-1")
    assert [texts for n, texts in calls if n > told] == [[indexed_text(globex.text, baseline["globex-1"])]]
    assert "contextual hybrid (heuristic)" in [r.name for r in result.rows]
