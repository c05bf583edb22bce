"""Synthetic evaluation queries (issue 27, part 1): questions written for a stratified sample of chunks through the
context engine (prompt-cached per document, priced, budgeted, resumable from the context cache), cleaned and
de-duplicated, written as a queries file the evaluation reads; through the Anthropic twin, an OpenAI-compatible local
server and the CLI."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ctx_retrieval import AnthropicProvider
from ctx_retrieval.cli import main
from ctx_retrieval.evaluation import load_cookbook
from ctx_retrieval.evaluation.corpus import read_queries
from ctx_retrieval.evaluation.queries import (
    QUESTION_PROMPT,
    clean_question,
    estimate_queries,
    generate_queries,
    sample_chunks,
)
from ctx_retrieval.testing.fake_anthropic import FakeAnthropicServer
from tests.helpers import TEST_KEY, make_document


def test_the_sample_is_stratified_over_documents_and_seeded() -> None:
    items = [make_document("big", paragraphs=30), make_document("mid", paragraphs=10),
             make_document("small", paragraphs=5)]  # 30, 10 and 5 chunks
    sample = sample_chunks(items, 21, seed=3)
    per_document = {d.id: len(cs) for d, cs in sample}
    assert per_document == {"big": 14, "mid": 5, "small": 2}  # 21 x 30/45, 10/45, 5/45, largest remainder up
    assert sample == sample_chunks(items, 21, seed=3) and sample != sample_chunks(items, 21, seed=4)
    assert all([c.position for c in cs] == sorted(c.position for c in cs) for _, cs in sample)
    assert sum(len(cs) for _, cs in sample_chunks(items, 500)) == 45  # never more than there are


def test_questions_are_cleaned_to_one_question() -> None:
    assert clean_question('Question: "How much did revenue grow in Q2?"') == "How much did revenue grow in Q2?"
    assert clean_question("Here is the question: What grew? Also, why?") == "What grew?"
    assert clean_question("第二季度收入增长了多少？还有别的吗？") == "第二季度收入增长了多少？"


def test_queries_through_the_engine_cached_per_document_and_resumable(fake_server: Any, tmp_path: Path) -> None:
    corpus = load_cookbook()
    provider = AnthropicProvider(api_key=TEST_KEY, base_url=fake_server.base_url)
    cache = tmp_path / "c.sqlite"
    estimate = estimate_queries(corpus.items, 40, provider=provider, cache=cache)
    query_set = generate_queries(corpus.items, 40, provider=provider, cache=cache)
    totals = fake_server.totals()
    assert totals["requests"] == estimate.requests == 40 and len(query_set.queries) + query_set.duplicates == 40
    assert totals["cache_entries_written"] <= len({q.document_id for q in query_set.queries})  # once per document
    assert query_set.report.cost_usd and abs(query_set.report.cost_usd - estimate.cost_usd) / estimate.cost_usd < 0.5
    assert all(q.query.endswith("?") for q in query_set.queries)
    assert all(QUESTION_PROMPT.chunk_block.split("\n")[1] in r.body["messages"][-1]["content"][-1]["text"]
               for r in fake_server.messages)
    fake_server.reset()
    again = generate_queries(corpus.items, 40, provider=provider, cache=cache)
    assert fake_server.totals()["requests"] == 0 and again.queries == query_set.queries  # from the cache
    path = query_set.write(tmp_path / "q.jsonl")
    read = read_queries(path)
    chunk_ids = {c.id for c in corpus.chunks}
    assert len(read) == len(query_set.queries) and all(q.gold[0] in chunk_ids for q in read)
    assert json.loads(path.read_text(encoding="utf-8").splitlines()[0])["generated_by"] == "anthropic/claude-haiku-5-5"


def test_duplicates_are_dropped_and_a_budget_stops_cleanly(tmp_path: Path) -> None:
    with FakeAnthropicServer(responder=lambda body: "What is this report about?") as server:
        provider = AnthropicProvider(api_key=TEST_KEY, base_url=server.base_url)
        items = [make_document(f"doc-{n}", paragraphs=8) for n in range(3)]
        query_set = generate_queries(items, 12, provider=provider, cache=False)
        assert len(query_set.queries) == 1 and query_set.duplicates == 11
        tight = generate_queries(items, 12, provider=provider, cache=False, budget_usd=0.0003)
        assert 0 < tight.report.requests < 12 and tight.missing > 0  # what was written is kept


def test_an_openai_compatible_local_server_writes_them(tmp_path: Path) -> None:
    from ctx_retrieval.providers import OpenAICompatibleProvider
    from ctx_retrieval.testing import FakeOpenAIServer

    with FakeOpenAIServer(profile="llama.cpp") as server:
        server.answer = lambda prompt: "Q: Which " + prompt.split("<chunk>\n", 1)[1].split()[1] + " is it about?"
        provider = OpenAICompatibleProvider("local-model", base_url=server.base_url)
        query_set = generate_queries([make_document("manual", paragraphs=12)], 6, provider=provider, cache=False)
    assert len(query_set.queries) + query_set.duplicates == 6 and query_set.queries[0].query.startswith("Which")


def test_the_cli_writes_queries_and_evaluates_a_new_corpus_with_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(4):
        (docs / f"guide-{n}.md").write_text(make_document(f"guide-{n}", paragraphs=8)[0].text, encoding="utf-8")
    common = ["--contextualizer", "fake", "--chunk-chars", "400", "--cache", str(tmp_path / "c.sqlite"),
              "--embedder", "minilm"]  # what the test is about does not need e5 (2.3x slower)
    assert main(["queries", str(docs), "--count", "10", "--dry-run", *common], twin=FakeAnthropicServer) == 0
    assert "10 requests" in capsys.readouterr().out
    out = tmp_path / "q.jsonl"
    assert main(["queries", str(docs), "--count", "10", "--out", str(out), *common], twin=FakeAnthropicServer) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 10 and Counter(r["document_id"] for r in rows).most_common(1)[0][1] <= 3
    capsys.readouterr()
    work = tmp_path / "work"
    assert main(["eval", str(docs), "--queries", str(out), "--work-dir", str(work), *common],
                twin=FakeAnthropicServer) == 0
    printed = capsys.readouterr()
    assert "| contextual hybrid |" in printed.out and (work / "eval" / "ablation.html").exists()
    assert "per million document tokens" in printed.out and "file://" in printed.err  # the verdict, the report
    assert "No verdict: the generated questions quote their chunks" in printed.out  # the twin's are templates
    assert main(["queries", str(docs), "--contextualizer", "heuristic"]) == 2
    assert "questions need an LLM" in capsys.readouterr().err


def test_the_verdict_refuses_template_questions_that_quote_their_chunks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ctx_retrieval.evaluation.metrics import COPIED_BY_USERS, copied_share

    chunk = "The retry queue is drained by the payment workers every night at six."
    assert copied_share([("which workers empty the queue of retries nightly?", chunk)]) == 0.0  # in their own words
    assert copied_share([("is the retry queue drained by the payment workers?", chunk)]) > 3 * COPIED_BY_USERS
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(4):
        (docs / f"guide-{n}.md").write_text(make_document(f"guide-{n}", paragraphs=8)[0].text, encoding="utf-8")
    common = ["--contextualizer", "fake", "--chunk-chars", "400", "--cache", str(tmp_path / "c.sqlite"),
              "--embedder", "minilm"]  # what the test is about does not need e5 (2.3x slower)
    assert main(["eval", str(docs), "--generate-queries", "12", "--work-dir", str(tmp_path / "work"), *common],
                twin=FakeAnthropicServer) == 0
    out = capsys.readouterr().out
    # the twin's questions are templates that quote their chunk: no verdict from them, and the way out is named
    assert "No verdict: the generated questions quote their chunks" in out and "--queries" in out
    assert "Contextual retrieval helps" not in out and "Contextual retrieval hurts" not in out
    report = json.loads((tmp_path / "work" / "eval" / "ablation.json").read_text(encoding="utf-8"))
    assert report["meta"]["queries_copied"] >= 3 * COPIED_BY_USERS and report["meta"]["queries_generated"]
