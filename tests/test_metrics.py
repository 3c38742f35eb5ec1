"""Task metrics (dpicl.metrics) against hand-computed values and known properties."""

from __future__ import annotations

import math

import pytest

from dpicl import metrics
from dpicl.metrics import (
    CORPUS_METRICS,
    METRICS,
    MetricUnavailable,
    accuracy,
    bleu1,
    corpus_sacrebleu,
    evaluate,
    levenshtein,
    meteor,
    over_seeds,
    rouge,
    rouge_per_query,
    score,
    sentence_sacrebleu,
    summarize,
)

SECRET = "patient Alice Zygmunt has diagnosis X"


def _wordnet_present() -> bool:
    try:
        metrics._wordnet()
    except MetricUnavailable:
        return False
    return True


class _NoSynonyms:
    """A WordNet stand-in without synonyms: METEOR then matches exact words and Porter stems only."""

    def synsets(self, word):
        return []


# ---------------------------------------------------------------------------------------------- ROUGE


def test_rouge_is_100_for_identical_0_for_disjoint_and_in_between_for_overlap():
    assert rouge(["the cat sat"], ["the cat sat"]) == pytest.approx({"rouge1": 100, "rouge2": 100, "rougeL": 100})
    assert rouge(["dog runs"], ["cat sat"]) == pytest.approx({"rouge1": 0, "rouge2": 0, "rougeL": 0})
    partial = rouge(["the cat ran", "a b"], ["the cat sat", "a b"])
    assert 50 < partial["rouge1"] < 100 and partial["rouge2"] < partial["rouge1"]


def test_rouge_hand_computed_and_per_query_mean_is_the_rouge_mean():
    # "a b c d" vs "a c b d": unigrams all match, no bigram matches, LCS = 3 -> P = R = F = 3/4
    per = rouge_per_query(["a b c d", "a b"], ["a c b d", "a b"])
    assert per["rouge1"] == pytest.approx([100, 100])
    assert per["rouge2"] == pytest.approx([0, 100])
    assert per["rougeL"] == pytest.approx([75, 100])
    assert rouge(["a b c d", "a b"], ["a c b d", "a b"]) == pytest.approx({"rouge1": 100, "rouge2": 50, "rougeL": 87.5})
    assert score(["rougeL"], ["a b c d"], ["a c b d"]) == {"rougeL": pytest.approx([75])}


def test_rouge_with_the_stemmer_matches_word_forms_that_plain_rouge_does_not():
    assert rouge(["cats running"], ["cat runs"])["rouge1"] == 0
    assert rouge(["cats running"], ["cat runs"], stemmer=True)["rouge1"] == pytest.approx(100)
    got = score(["rouge1", "rouge1_stem"], ["cats running"], ["cat runs"])
    assert got == {"rouge1": [0.0], "rouge1_stem": [pytest.approx(100)]}


def test_scoring_rouge_leaves_the_root_logger_alone():
    """rouge_score logged "Using default tokenizer." through absl, which then put a handler on the root logger:
    `dpicl evaluate` printed every Prefect log line a second time, in the bare `INFO:prefect...` format."""
    import logging

    saved = logging.root.handlers[:]
    logging.root.handlers.clear()  # as in a command line run (pytest keeps its own handler there)
    try:
        metrics._scorer.cache_clear()
        rouge(["cats running"], ["cat runs"], stemmer=True)
        assert logging.root.handlers == []
    finally:
        logging.root.handlers[:] = saved


def test_rouge_takes_the_best_of_several_references():
    assert rouge_per_query(["the cat"], [["a dog", "the cat"]])["rouge1"] == pytest.approx([100])
    assert rouge_per_query(["the cat"], [["a dog", "the"]])["rouge1"] == pytest.approx([100 * 2 / 3])


# ---------------------------------------------------------------------------------------------- BLEU


def test_bleu1_hand_computed_with_brevity_penalty_clipping_and_tokenized_punctuation():
    # P1 = 3/3, BP = exp(1 - 6/3)
    assert bleu1(["the cat sat"], ["the cat sat on the mat"]) == pytest.approx([100 * math.exp(-1)])
    # clipped: "the" counts once against the reference; hypothesis longer than reference -> BP = 1
    assert bleu1(["the the the"], ["the cat"]) == pytest.approx([100 / 3])
    # word tokens split punctuation: 2 of 4 hypothesis tokens match, BP = 1
    assert bleu1(["Hello, world."], ["Hello world"]) == pytest.approx([50])
    assert bleu1(["the dog sat", "the cat sat", "x y", ""], ["the cat sat"] * 3 + ["a"]) == pytest.approx(
        [100 * 2 / 3, 100, 0, 0])


def test_bleu1_with_several_references_uses_the_closest_reference_length():
    # P1 = 1 in both; the closest reference length (3) gives BP = 1
    assert bleu1(["a b c"], [["a b c d e f", "a b c"]]) == pytest.approx([100])


def test_corpus_sacrebleu_is_corpus_level_and_hand_computable():
    assert corpus_sacrebleu(["the cat sat on the mat"], ["the cat sat on the mat"]) == pytest.approx(100)
    assert corpus_sacrebleu(["w x y z"], ["a b c d"]) == 0
    # all n-gram precisions 1, BP = exp(1 - 8/4)
    assert corpus_sacrebleu(["a b c d"], ["a b c d e f g h"]) == pytest.approx(100 * math.exp(-1))
    # counts pooled over the corpus: precisions 4/8, 3/6, 2/4, 1/2 -> 50, not the mean of sentence scores
    preds, refs = ["a b c d", "w x y z"], ["a b c d", "p q r s"]
    assert corpus_sacrebleu(preds, refs) == pytest.approx(50)
    sentences = sentence_sacrebleu(preds, refs)
    assert sentences[0] == pytest.approx(100) and sentences[1] < 50


def test_corpus_sacrebleu_allows_a_different_number_of_references_per_prediction():
    assert corpus_sacrebleu(["a b c d", "e f g h"], [["x", "a b c d"], ["e f g h"]]) == pytest.approx(100)


# ---------------------------------------------------------------------------------------------- METEOR


def test_meteor_hand_computed_with_a_wordnet_without_synonyms(monkeypatch):
    monkeypatch.setattr(metrics, "_wordnet", _NoSynonyms)
    got = meteor(["the cat sat", "cats running", "sat cat the", "dog"], ["the cat sat", "cat runs", "the cat sat",
                                                                       "cat"])
    # F = 1 with 1, 1, 3 chunks of 3, 2, 3 matches: penalty 0.5 * (chunks / matches) ** 3; no match -> 0
    assert got == pytest.approx([100 * (1 - 0.5 / 27), 100 * (1 - 0.5 / 8), 50, 0])


def test_meteor_uses_wordnet_or_says_how_to_get_it_and_never_downloads(monkeypatch):
    import nltk

    def no_download(*args, **kwargs):
        raise AssertionError("nltk.download called")

    monkeypatch.setattr(nltk, "download", no_download)
    if _wordnet_present():
        assert meteor(["the cat sat"], ["the cat sat"]) == pytest.approx([100 * (1 - 0.5 / 27)])
        assert "meteor" not in evaluate(["a b"], ["a b"]).skipped
        return
    with pytest.raises(MetricUnavailable) as err:
        meteor(["the cat sat"], ["the cat sat"])
    assert err.value.metric == "meteor"
    assert "NLTK_DATA" in err.value.reason and "nltk.downloader" in err.value.reason
    with pytest.raises(MetricUnavailable):
        score(["meteor"], ["a"], ["a"])
    result = evaluate(["a b"], ["a b"], names=["meteor", "bleu1"])
    assert result.skipped == {"meteor": err.value.reason}
    assert result.scores == {"bleu1": pytest.approx(100)}


# ---------------------------------------------------------------------------------------------- others


def test_levenshtein_similarity():
    assert levenshtein(["kitten"], ["sitting"]) == pytest.approx([100 * (1 - 3 / 7)])
    assert levenshtein(["", "abc", "abc", "A"], ["", "", "abc", "a"]) == pytest.approx([100, 0, 100, 0])
    assert levenshtein(["kitten"], [["mitten", "sitting"]]) == pytest.approx([100 * (1 - 1 / 6)])


def test_accuracy_and_per_query_exact_match():
    assert accuracy(["a", "b", "a", "c"], ["a", "b", "b", "c"]) == 75.0
    assert score(["accuracy"], ["a", "b", "c"], ["a", "x", ["y", "c"]]) == {"accuracy": [100, 0, 100]}


# ---------------------------------------------------------------------------------------------- sweeps API


def test_evaluate_reports_means_and_the_corpus_score():
    preds, refs = ["a b c d", "w x y z"], ["a b c d", "p q r s"]
    result = evaluate(preds, refs, names=["rouge1", "sacrebleu", "levenshtein"])
    # Levenshtein counts the three matching spaces of "w x y z" / "p q r s": 3/7
    assert result.scores == {"rouge1": pytest.approx(50), "sacrebleu": pytest.approx(50),
                             "levenshtein": pytest.approx((100 + 300 / 7) / 2)}
    assert result.per_query == {"rouge1": pytest.approx([100, 0]), "levenshtein": pytest.approx([100, 300 / 7])}
    assert set(evaluate(preds, refs).scores) | set(evaluate(preds, refs).skipped) == set(METRICS) | set(CORPUS_METRICS)


def test_summarize_and_over_seeds_against_hand_computed_values():
    assert summarize([0, 100]) == {"mean": 50, "std": 50}
    assert summarize([0, 100], ddof=1) == {"mean": 50, "std": pytest.approx(50 * math.sqrt(2))}
    # [1, 2, 4]: mean 7/3, sample variance ((4/3)^2 + (1/3)^2 + (5/3)^2) / 2 = 7/3
    got = over_seeds([{"rouge1": 1, "bleu1": 10}, {"rouge1": 2, "bleu1": 10}, {"rouge1": 4, "bleu1": 10}])
    assert got["rouge1"] == pytest.approx((7 / 3, math.sqrt(7 / 3)))
    assert got["bleu1"] == pytest.approx((10, 0))
    assert over_seeds([{"rouge1": 3.5}]) == {"rouge1": (3.5, 0.0)}
    with pytest.raises(ValueError, match="seed 1 reports different metrics than seed 0: meteor"):
        over_seeds([{"rouge1": 1, "meteor": 2}, {"rouge1": 1}])
    with pytest.raises(ValueError, match="no seeds"):
        over_seeds([])
    with pytest.raises(ValueError, match="no scores"):
        summarize([])


# ---------------------------------------------------------------------------------------------- errors


def test_bad_input_errors_name_counts_and_metrics_never_the_text():
    with pytest.raises(ValueError, match="2 predictions for 1 references"):
        rouge(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no predictions"):
        accuracy([], [])
    errors = []
    for call in (
        lambda: score(["rouge1"], [SECRET, SECRET], [SECRET]),
        lambda: score(["bleu"], [SECRET], [SECRET]),
        lambda: score(["sacrebleu"], [SECRET], [SECRET]),
        lambda: evaluate([SECRET], [[]]),
        lambda: levenshtein([SECRET], [[SECRET, 3]]),
        lambda: bleu1([1], [SECRET]),
        lambda: score([], [SECRET], [SECRET]),
    ):
        with pytest.raises((ValueError, TypeError)) as err:
            call()
        errors.append(str(err.value))
    assert all("Alice" not in e and "diagnosis" not in e for e in errors)
    assert errors[0] == "2 predictions for 1 references"
    assert "unknown per-query metric 'bleu'" in errors[1] and "bleu1" in errors[1] and "levenshtein" in errors[1]
    assert "corpus-level" in errors[2]
    assert errors[3] == "query 0 has no reference"
    assert errors[5] == "prediction 0 is a int, not a str"
