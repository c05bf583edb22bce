"""The no-LLM title-and-heading baseline."""

from __future__ import annotations

import pytest

from ctx_retrieval import ChunkNotInDocumentError, HeuristicContextualizer, SourceDocument, split_into_chunks

MARKDOWN = """# ACME Corp Q2 2023 report

Intro text.

## Results of Operations

The company's revenue grew by 3% over the previous quarter.

## Outlook

Guidance for Q3.
"""

CODE = """//! Executor for differential fuzzing.
use core::ptr;

pub struct DiffExecutor<A, B> {
    primary: A,
}

impl<A, B> DiffExecutor<A, B> {
    pub fn new(primary: A) -> Self {
        Self { primary }
    }
}
"""


def contexts(document: SourceDocument, texts: list[str]) -> list[str | None]:
    run = HeuristicContextualizer().contextualize(document, split_into_chunks(document, texts))
    return [r.context for r in run]


def test_markdown_title_and_nearest_heading() -> None:
    document = SourceDocument("acme", MARKDOWN)
    result = contexts(document, ["Intro text.", "The company's revenue grew by 3% over the previous quarter.",
                                 "Guidance for Q3."])
    assert result == [
        "From ACME Corp Q2 2023 report.",
        "From ACME Corp Q2 2023 report > Results of Operations.",
        "From ACME Corp Q2 2023 report > Outlook.",
    ]


def test_metadata_title_wins_and_code_definitions_are_headings() -> None:
    document = SourceDocument("exec", CODE, {"title": "libafl/src/executors/differential.rs"})
    result = contexts(document, ["    primary: A,", "        Self { primary }"])
    assert result == [
        "From libafl/src/executors/differential.rs > pub struct DiffExecutor<A, B>.",
        "From libafl/src/executors/differential.rs > pub fn new(primary: A) -> Self.",
    ]


def test_first_line_is_the_title_without_headings() -> None:
    document = SourceDocument("plain", "Quarterly memo\nSales rose.\n")
    assert contexts(document, ["Sales rose."]) == ["From Quarterly memo."]


def test_empty_chunks_and_report() -> None:
    document = SourceDocument("acme", MARKDOWN)
    heuristic = HeuristicContextualizer()
    run = heuristic.contextualize(document, split_into_chunks(document, ["Intro text.", "  "]))
    assert [r.status for r in run] == ["generated", "empty"]
    assert run.report.provider == "heuristic" and run.report.cost_usd == 0.0 and run.report.requests == 0
    assert heuristic.last_report is run.report


def test_chunk_from_another_document_is_refused() -> None:
    with pytest.raises(ChunkNotInDocumentError):
        contexts(SourceDocument("acme", MARKDOWN), ["not in this document"])
