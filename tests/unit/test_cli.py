"""The demo command: heuristic without a key, the fake API on request."""

from __future__ import annotations

import pytest

from ctx_retrieval.cli import load_sample, main, split_paragraphs


def test_sample_splits_back_into_the_document() -> None:
    document, chunks = load_sample()
    assert "".join(c.text for c in chunks) == document.text
    assert len(chunks) >= 8 and all(c.start_char is not None for c in chunks)
    assert split_paragraphs("a\n\nb\n\nc", max_chars=3) == ["a\n\n", "b\n\n", "c"]


def test_demo_without_a_key_uses_the_heuristic_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "contextualizer: heuristic" in out and "no ANTHROPIC_API_KEY" in out
    assert "From ACME Corp" in out and "usage report:" in out


def test_demo_against_the_fake_api_shows_caching(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--provider", "fake"]) == 0
    out = capsys.readouterr().out
    assert "FAKE server" in out and "estimate:" in out
    assert "cache read" in out and "cache write 0," not in out
    assert "failed 0" in out


def test_demo_with_claude_and_no_key_fails_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--provider", "anthropic"]) == 2
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err
