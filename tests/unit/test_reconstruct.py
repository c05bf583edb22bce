"""Rebuilding a document from its chunks."""

from __future__ import annotations

from ctx_retrieval.reconstruct import Piece, rebuild_document

TEXT = "Alpha paragraph.\n\nBeta paragraph.\n\nGamma paragraph."


def test_offsets_place_chunks_and_merge_overlaps() -> None:
    pieces = [Piece("c", "Gamma paragraph.", 35), Piece("a", "Alpha paragraph.", 0),
              Piece("b", "paragraph.\n\nBeta paragraph.\n\n", 6)]
    document, chunks, note = rebuild_document("d", pieces, {"source": "x"})
    assert note is None and document.text == TEXT and document.metadata == {"source": "x"}
    assert [c.id for c in chunks] == ["a", "b", "c"] and [c.position for c in chunks] == [0, 1, 2]
    assert all(document.text[c.start_char:c.start_char + len(c.text)] == c.text for c in chunks)  # type: ignore[operator]


def test_gaps_keep_offsets_true() -> None:
    pieces = [Piece("a", "Alpha paragraph.", 0), Piece("c", "Gamma paragraph.", 35)]  # splitter dropped "Beta"
    document, _, note = rebuild_document("d", pieces)
    assert note is None and document.text.endswith("Gamma paragraph.") and len(document.text) == len(TEXT)
    assert document.text[35:] == "Gamma paragraph."


def test_missing_or_inconsistent_offsets_fall_back_and_say_so() -> None:
    document, chunks, note = rebuild_document("d", [Piece("a", "Alpha.", 0), Piece("b", "Beta.")])
    assert document.text == "Alpha.\n\nBeta." and note and "start offset" in note
    assert [c.start_char for c in chunks] == [0, 8]
    _, _, note = rebuild_document("d", [Piece("a", "Alpha.", 0), Piece("b", "Other.", 2)])
    assert note and "disagree" in note
