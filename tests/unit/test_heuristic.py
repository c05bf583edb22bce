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


def test_path_is_the_title_of_code_without_a_heading_and_imports_are_skipped() -> None:
    code = "use std::mem;\n\n/// Maps registers to their values.\npub struct Registers {\n    map: u8,\n}\n"
    with_path = SourceDocument("r", code, {"source": "/repo/src/arch/registers.rs"})
    assert contexts(with_path, ["    map: u8,"]) == ["From arch/registers.rs > pub struct Registers."]
    without = SourceDocument("r", code)
    assert contexts(without, ["    map: u8,"]) == ["From Maps registers to their values. > pub struct Registers."]


def test_mkdocs_heading_anchors_stay_out_of_the_context() -> None:
    text = ("# Settings { #settings-and-environment-variables }\n\nIntro.\n\n"
            "## Pydantic settings {#pydantic-settings .tab}\n\nUse BaseSettings.\n\n## A dict {a: b}\n\nKept.\n")
    document = SourceDocument("advanced/settings.md", text)
    assert contexts(document, ["Use BaseSettings.", "Kept."]) == [
        "From Settings > Pydantic settings.", "From Settings > A dict {a: b}."]


def test_a_document_in_another_language_gets_no_english_word() -> None:
    text = "# Dosya yükleme\n\nBu sayfada dosya yükleme işlemini anlatıyoruz.\n\n## UploadFile\n\nDosyaları kaydedin.\n"
    document = SourceDocument("tr/upload.md", text)
    assert contexts(document, ["Dosyaları kaydedin."]) == ["Dosya yükleme > UploadFile."]
    chinese = SourceDocument("zh/upload.md", "# 上传文件\n\n本页介绍如何上传文件。\n\n## 保存\n\n保存文件到服务器。\n")
    assert contexts(chinese, ["保存文件到服务器。"]) == ["上传文件 > 保存."]
