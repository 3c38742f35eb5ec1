"""KSA's word extraction and the task metrics."""

from __future__ import annotations

import pytest

from dpicl.keywords import STOPWORDS, is_keyword, keywords, words
from dpicl.metrics import accuracy, rouge


def test_keywords_drop_stop_words_punctuation_and_contraction_pieces_and_keep_first_order():
    text = "Amanda: I baked cookies. Do you want some?\nJerry: Sure! It's great, isn't it? Cookies..."
    assert keywords(text) == ["Amanda", "baked", "cookies", "want", "Jerry", "Sure", "great", "Cookies"]
    assert words("He left. She stayed.") == ["He", "left", ".", "She", "stayed", "."]


@pytest.mark.parametrize("token", ["The", "I", "isn", "...", ",", "'s", "n't"])
def test_not_keywords(token):
    assert not is_keyword(token)


def test_the_shipped_stop_word_list_is_nltks_english_list():
    assert len(STOPWORDS) == 179 and {"the", "wouldn't", "ourselves", "ma"} <= STOPWORDS


def test_rouge_is_100_for_identical_0_for_disjoint_and_in_between_for_overlap():
    assert rouge(["the cat sat"], ["the cat sat"]) == pytest.approx({"rouge1": 100, "rouge2": 100, "rougeL": 100})
    assert rouge(["dog runs"], ["cat sat"]) == pytest.approx({"rouge1": 0, "rouge2": 0, "rougeL": 0})
    partial = rouge(["the cat ran", "a b"], ["the cat sat", "a b"])
    assert 50 < partial["rouge1"] < 100 and partial["rouge2"] < partial["rouge1"]


def test_accuracy_and_mismatched_lengths():
    assert accuracy(["a", "b", "a", "c"], ["a", "b", "b", "c"]) == 75.0
    with pytest.raises(ValueError, match="2 predictions for 1 references"):
        rouge(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no predictions"):
        accuracy([], [])


def test_rouge_with_the_stemmer_matches_word_forms_that_plain_rouge_does_not():
    assert rouge(["cats running"], ["cat runs"])["rouge1"] == 0
    assert rouge(["cats running"], ["cat runs"], stemmer=True)["rouge1"] == pytest.approx(100)
