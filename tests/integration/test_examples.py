"""Every example runs top to bottom, offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
REPORT = re.compile(r"chunks (\d+): generated (\d+), from context cache \d+, empty \d+, failed 0, not attempted 0")
# What each example must show: its report with every chunk generated, and the revenue fact found through it.
SHOWS = {
    "contextualize_offline": [
        r"indexed text of the revenue chunk:\nThis chunk is from .*\n\nThe company's revenue grew by 3%",
        r"second run: 0 requests, (\d+) contexts from the cache"],
    "edits_and_migrations": [r"edit: 1 request, (\d+) contexts reused", r"refresh: (\d+) stale contexts rewritten",
                             r"migration: 0 requests, (\d+) of \1 chunks still on the previous model, 0 without",
                             r"models now \['claude-haiku-5-5'\]"],
    "langchain_quickstart": [r"\d+ chunks contextualized"],
    "llama_index_quickstart": [r"\d+ nodes contextualized"],
    # both frameworks write into Milvus (Lite) through their own ingestion APIs and read both engine sides back
    "engine_quickstart": [r"\d+ chunks contextualized", r"'num_added': [1-9]\d*",
                          r"[1-9]\d* nodes written by the LlamaIndex pipeline",
                          r"LangChain, Q: .*\n  1\. \[vector #\d+, bm25 #\d+\]",
                          r"LlamaIndex, Q: .*\n  1\. \[vector #\d+, bm25 #\d+\]"],
    # a second process opens the job's store, warms up before its first request and answers over HTTP
    "query_service": [r"\d+ chunks contextualized", r"service ready on port \d+ \(open \+ warm-up [\d.]+ s\)",
                      r"Q: Who is ACME's new chief financial officer\? \(answered in \d+ ms\)"],
    # The fleet wrote every context once; both frameworks' steps then found all of them in the shared cache.
    "distributed_ingestion": [r"the fleet wrote (\d+) contexts \((\d+) of \2 chunks have one\)",
                              r"LlamaIndex pipeline: \d+ nodes, requests 0, from the cache [1-9]\d*",
                              r"LangChain flow: \d+ documents, requests 0, from the cache [1-9]\d*"],
}


# the engine quickstart runs on Milvus Lite by default, and once more on the test's PostgreSQL server
RUNS = [(p, None) for p in EXAMPLES] + [(p, "postgres") for p in EXAMPLES if p.stem == "engine_quickstart"]


@pytest.mark.parametrize(("example", "engine"), RUNS, ids=[p.stem + (f"-{e}" if e else "") for p, e in RUNS])
def test_example_runs(example: Path, engine: str | None, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    env = {**os.environ, "CTX_RETRIEVAL_CACHE_DIR": str(tmp_path)}
    env.pop("ANTHROPIC_API_KEY", None)
    arguments = [request.getfixturevalue("postgres").new_database()] if engine == "postgres" else []
    done = subprocess.run([sys.executable, str(example), *arguments], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    if example.stem != "distributed_ingestion":  # it prints the frameworks' cache reads instead of a report
        report = REPORT.search(out)
        assert report and report[1] == report[2] and int(report[1]) > 10, out[-3000:]  # every chunk got a context
    for pattern in SHOWS[example.stem]:
        assert re.search(pattern, out), f"{pattern!r} not in:\n{out[-3000:]}"
    if example.stem.endswith(("quickstart", "service")):  # the revenue question's top 3 hold the revenue figures
        answer = out.split("Q: How much did ACME's revenue grow", 1)[1].split("\nQ: ", 1)[0]
        assert "revenue grew by 3%" in answer or "Revenue was $314.2 million" in answer, answer


def test_there_are_examples() -> None:
    assert EXAMPLES
