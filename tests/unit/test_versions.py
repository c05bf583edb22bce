"""What reuse decides from two versions of a document: how many tokens changed and how far each chunk lies from an
edit (``contextualize.versions``), and the policy's checks."""

from __future__ import annotations

import math

import pytest

from ctx_retrieval.contextualize.versions import ReusePolicy, changed_tokens, chunk_digest, chunk_key, edit_distances
from ctx_retrieval.errors import ConfigurationError

OLD = [("a", 10), ("b", 20), ("c", 30), ("d", 40), ("e", 50)]


def test_an_unchanged_document_changed_nothing_and_has_no_edit() -> None:
    assert changed_tokens(OLD, OLD) == 0
    assert edit_distances(OLD, OLD) == [math.inf] * 5


def test_a_replaced_chunk_counts_both_texts_and_its_neighbours_are_one_away() -> None:
    new = [("a", 10), ("b", 20), ("X", 33), ("d", 40), ("e", 50)]
    assert changed_tokens(OLD, new) == 30 + 33
    assert edit_distances(OLD, new) == [2, 1, 0, 1, 2]


def test_a_removal_sits_between_its_neighbours() -> None:
    new = [("a", 10), ("b", 20), ("d", 40), ("e", 50)]
    assert changed_tokens(OLD, new) == 30
    assert edit_distances(OLD, new) == [2.0, 1.0, 1.0, 2.0]
    assert edit_distances(OLD, OLD[1:]) == [1.0, 2.0, 3.0, 4.0]  # the first chunk removed


def test_an_appended_chunk_and_repeated_chunks_count_as_often_as_they_appear() -> None:
    appended = [*OLD, ("f", 7)]
    assert changed_tokens(OLD, appended) == 7 and edit_distances(OLD, appended)[-1] == 0
    doubled = [("a", 10), ("a", 10), *OLD[1:]]
    assert changed_tokens(OLD, doubled) == 10  # one more copy of "a"
    assert min(edit_distances(OLD, doubled)) == 0


def test_keys_and_digests_depend_on_the_document_and_the_text_only() -> None:
    assert chunk_key("doc", "text") == chunk_key("doc", "text") != chunk_key("other", "text")
    assert chunk_key("doc", "text") != chunk_key("doc", "text2") and len(chunk_digest("text")) == 16


def test_the_policy_refuses_what_it_cannot_mean() -> None:
    assert not ReusePolicy().reuses and ReusePolicy(other_models=True).reuses
    assert ReusePolicy(max_changed_tokens=5).identity != ReusePolicy(max_changed_tokens=6).identity
    for bad in ({"max_changed_tokens": -1}, {"rewrite_neighbours": 1.5}, {"max_changed_tokens": True},
                {"other_models": "yes"}):
        with pytest.raises(ConfigurationError):
            ReusePolicy(**bad)  # type: ignore[arg-type]
