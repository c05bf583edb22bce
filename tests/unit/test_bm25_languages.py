"""BM25 analysis decided per index (issue 52): the index's languages, detected from its first chunks or given, stem
its chunks and its queries alike; German is normalised (``ue`` meets ``ü``) and its compounds split into words the
index learnt."""

from __future__ import annotations

import pytest

from ctx_retrieval.errors import InvalidInputError, SearchIndexError
from ctx_retrieval.language import corpus_languages, latin_language
from ctx_retrieval.retrieval.bm25 import tokenize
from ctx_retrieval.retrieval.bm25_store import BM25Entry, BM25Store
from ctx_retrieval.retrieval.fusion import chunk_key
from ctx_retrieval.retrieval.stemming import german_normal

pytest.importorskip("tantivy")

GERMAN = {
    "staff": "Die Firma beschäftigt heute 420 Mitarbeitern in drei Werken, die Zahl stieg seit dem Frühjahr.",
    "overview": "Ein Überblick über die Geschäftszahlen des Jahres, mit Grafiken für jeden Standort.",
    "ministry": "Das Verteidigungsministerium prüft den Vertrag, der im Herbst unterzeichnet werden soll.",
    "words": "Das Ministerium und die Verteidigung sind zwei Begriffe, die hier getrennt erklärt werden.",
    "weather": "Das Wetter war im Sommer warm und trocken, die Ernte fiel entsprechend gut aus.",
}


def _store(path: object = None, **kwargs: object) -> BM25Store:
    store = BM25Store(path, **kwargs)  # type: ignore[arg-type]
    store.upsert(BM25Entry(chunk_id, text) for chunk_id, text in GERMAN.items())
    return store


def _top(store: BM25Store, query: str) -> str | None:
    keys = store.search(query, k=3).keys
    by_key = {chunk_key(chunk_id): chunk_id for chunk_id in GERMAN}
    return by_key[keys[0]] if keys else None


def test_a_german_corpus_is_detected_and_recorded_and_an_english_one_stems_nothing(tmp_path) -> None:
    store = _store(tmp_path / "de")
    assert store.languages == ("german",)
    assert BM25Store(tmp_path / "de").languages == ("german",)  # the folder remembers; another process reads it
    english = BM25Store()
    english.upsert([BM25Entry("a", "The service restarts the worker when the queue is empty.")])
    assert english.languages == ()
    assert corpus_languages(["Đội thủ của Panthers chỉ thua 308 điểm và đứng thứ sáu trong giải đấu."]) == ()


def test_a_question_without_umlauts_is_stemmed_as_the_chunks_are() -> None:
    # ASCII alone: before, such a question was not stemmed (its language could not be told), the chunks were.
    assert latin_language("Wie viele Mitarbeiter") is None
    assert _top(_store(), "Wie viele Mitarbeiter") == "staff"


def test_ue_meets_u_umlaut_but_not_after_a_vowel_or_q() -> None:
    assert german_normal("ueberblick") == german_normal("überblick") == "uberblick"
    assert german_normal("feuer") == "feuer" and german_normal("quelle") == "quelle"
    assert german_normal("haeuser") == german_normal("häuser") == "hauser"
    assert _top(_store(), "Ueberblick der Geschaeftszahlen") == "overview"


def test_compound_parts_are_indexed_beside_the_whole_word_in_chunks_and_queries() -> None:
    store = _store()
    tokens = store._tokenize("Verteidigungsministerium")
    assert {"verteidigungsministerium", "verteidigung", "ministerium"} <= set(tokens)
    found = store.search("Ministerium", k=5).keys
    assert chunk_key("ministry") in found  # the part meets the compound
    # A compound asked for meets its parts written apart.
    assert chunk_key("words") in store.search("Verteidigungsministerium", k=5).keys


def test_compound_words_survive_a_reopen_and_a_lost_word_list_is_refused(tmp_path) -> None:
    _store(tmp_path / "de")
    reopened = BM25Store(tmp_path / "de")
    assert "ministerium" in reopened._tokenize("Verteidigungsministerium")
    (tmp_path / "de" / "compound_words.txt").unlink()
    with pytest.raises(SearchIndexError, match=r"compound_words\.txt"):
        BM25Store(tmp_path / "de")


def test_languages_given_are_checked_and_kept(tmp_path) -> None:
    with pytest.raises(InvalidInputError, match="language="):
        BM25Store(language="klingon")
    _store(tmp_path / "de", language="german")
    with pytest.raises(InvalidInputError, match="language="):
        BM25Store(tmp_path / "de", language="french")
    plain = _store(language=None)
    assert plain.languages == () and "mitarbeit" not in plain._tokenize("Mitarbeiter")


def test_english_and_code_tokens_are_those_of_the_text_alone() -> None:
    text = "DiffExecutor.run_target restarts the worker (see retries_left)"
    assert tokenize(text, languages=()) == tokenize(text)
