"""Windowing boundaries: whole documents, the first-N + previous-M window, the stable prefix, budgets."""

from __future__ import annotations

import pytest

from ctx_retrieval import DEFAULT_PROMPT, ConfigurationError, SourceDocument, WindowConfig, split_into_chunks
from ctx_retrieval.contextualize.windowing import document_view
from ctx_retrieval.tokens import estimate_tokens

PARTS = [f"<p{i}> " + "x" * 90 + "\n" for i in range(10)]  # ~27 tokens each
DOC = SourceDocument("d", "".join(PARTS))
CHUNKS = split_into_chunks(DOC, PARTS)


def view(index: int, *, limit: int = 100, start: int = 2, prev: int = 2, chunks=CHUNKS, doc=DOC):  # type: ignore[no-untyped-def]
    return document_view(doc, chunks, index, prompt=DEFAULT_PROMPT,
                         config=WindowConfig(num_start_chunks=start, num_prev_chunks=prev), limit=limit,
                         document_tokens=estimate_tokens(doc.text), count=estimate_tokens)


def shown(v) -> list[int]:  # type: ignore[no-untyped-def]
    text = v.prefix + v.rest
    return [i for i in range(10) if f"<p{i}>" in text]


def test_document_within_the_limit_goes_whole() -> None:
    v = view(5, limit=10_000)
    assert not v.windowed and v.rest == ""
    assert v.prefix == DEFAULT_PROMPT.document_open + DOC.text + DEFAULT_PROMPT.document_close


@pytest.mark.parametrize(
    ("index", "expected"),
    [(0, [0, 1]), (1, [0, 1]), (2, [0, 1, 2]), (3, [0, 1, 2, 3]), (4, [0, 1, 2, 3, 4]), (5, [0, 1, 3, 4, 5]),
     (9, [0, 1, 7, 8, 9])],
)
def test_window_is_first_n_plus_previous_m_and_the_target(index: int, expected: list[int]) -> None:
    v = view(index, limit=200)
    assert v.windowed and list(v.positions) == expected and shown(v) == expected


def test_no_chunk_twice_and_prefix_is_stable() -> None:
    prefixes = set()
    for index in range(10):
        v = view(index, limit=200)
        text = v.prefix + v.rest
        for i in range(10):
            assert text.count(f"<p{i}>") <= 1
        assert f"<p{index}>" in text
        prefixes.add(v.prefix)
    assert prefixes == {DEFAULT_PROMPT.document_open + PARTS[0] + PARTS[1]}


def test_gaps_are_marked_and_adjacent_runs_are_not() -> None:
    assert view(4, limit=200).rest.count("[...]") == 1  # only the tail after chunk 4
    v = view(6, limit=200)
    assert v.rest.count("[...]") == 2  # between 1 and 4, and after 6
    assert v.rest.endswith(DEFAULT_PROMPT.document_close)
    assert not view(9, limit=200).rest.removesuffix(DEFAULT_PROMPT.document_close).endswith("[...]\n")


def test_budget_drops_far_previous_chunks_then_start_chunks_never_the_target() -> None:
    assert list(view(9, limit=110).positions) == [0, 1, 8, 9]
    assert list(view(9, limit=60).positions) == [0, 9]
    assert list(view(9, limit=1).positions) == [9]


def test_zero_start_chunks_puts_everything_after_the_prefix() -> None:
    v = view(5, limit=200, start=0, prev=1)
    assert v.prefix == DEFAULT_PROMPT.document_open and list(v.positions) == [4, 5]
    assert v.rest.startswith(DEFAULT_PROMPT.gap_marker)


def test_overlapping_chunks_are_shown_once_from_the_document() -> None:
    text = "".join(PARTS)
    doc = SourceDocument("o", text)
    overlapping = [text[max(0, i * 100 - 20): (i + 1) * 100] for i in range(10)]
    chunks = split_into_chunks(doc, overlapping)
    v = view(3, limit=200, chunks=chunks, doc=doc)
    assert (v.prefix + v.rest).count("<p1>") == 1
    assert text[:400] in v.prefix + v.rest


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="max_document_tokens"):
        WindowConfig(max_document_tokens=0)
    with pytest.raises(ConfigurationError, match="num_prev_chunks"):
        WindowConfig(num_prev_chunks=-1)
    assert WindowConfig().resolved_limit(200_000) == 150_000


def test_chunks_that_skip_document_text_never_pull_it_in() -> None:
    # Only some chunks of the document are given: neighbours in the list are not neighbours in the text.
    subset = [CHUNKS[0], CHUNKS[4], CHUNKS[8], CHUNKS[9]]
    v = view(3, limit=200, chunks=subset)
    assert v.windowed and shown(v) == [0, 4, 8, 9]
    assert (v.prefix + v.rest).count("[...]") == 2  # between p0 and p4, and between p4 and p8
