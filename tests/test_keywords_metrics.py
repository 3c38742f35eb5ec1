"""KSA's word extraction (the task metrics are tested in test_metrics.py)."""

from __future__ import annotations

import pytest

from dpicl.keywords import STOPWORDS, is_keyword, keywords, words


def test_keywords_drop_stop_words_punctuation_and_contraction_pieces_and_keep_first_order():
    text = "Amanda: I baked cookies. Do you want some?\nJerry: Sure! It's great, isn't it? Cookies..."
    assert keywords(text) == ["Amanda", "baked", "cookies", "want", "Jerry", "Sure", "great", "Cookies"]
    assert words("He left. She stayed.") == ["He", "left", ".", "She", "stayed", "."]


@pytest.mark.parametrize("token", ["The", "I", "isn", "...", ",", "'s", "n't"])
def test_not_keywords(token):
    assert not is_keyword(token)


def test_the_shipped_stop_word_list_is_nltks_english_list():
    assert len(STOPWORDS) == 179 and {"the", "wouldn't", "ourselves", "ma"} <= STOPWORDS
