"""Contextual calibration of label votes (Zhao et al. 2021): a prompt's bias towards a label, which its
content-free inputs reveal, no longer decides its vote; the correction reads that prompt's demonstrations only."""

from __future__ import annotations

import numpy as np
import pytest

from dpicl.config import TaskConfig
from dpicl.inference.teachers import calibrated_scores, content_free_prompt, label_votes
from dpicl.prompts import render_prompt

TASK = TaskConfig(type="classification", labels=["negative", "positive"], demo_template="Review: {input}\nSentiment: "
                  "{output}", query_template="Review: {input}\nSentiment:", calibrate=True)


class BiasedModel:
    """Label log-probabilities = a bias towards `favoured` set by the demonstrations (the prompt without its last
    part) + the query's own evidence: "good" in the query's text says positive, anything else negative."""

    name = "biased"

    def __init__(self, strength: float):
        self.strength = strength
        self.prompts: list[str] = []

    def label_logprobs(self, prompts, continuations, *, progress=False, variants=1):
        self.prompts += prompts
        out = []
        for prompt in prompts:
            demos, _, query = prompt.rpartition("\n\n")
            bias = self.strength if "negative" in demos else -self.strength  # a demo's label tilts the prompt
            evidence = 1.0 if "good" in query else (-1.0 if "bad" in query else 0.0)
            logits = np.array([bias - evidence, evidence - bias])
            out.append(logits - np.logaddexp.reduce(logits) - 2.0)  # unnormalised over the labels, as a model's
        return np.array(out)


class _Cfg:
    task = TASK


class _Uncalibrated:
    task = TASK.model_copy(update={"calibrate": False})


def test_calibration_removes_the_demonstrations_bias():
    demos = [("a bad film", "negative")]  # one negative demonstration: the prompt leans negative
    queries = ["good", "so good", "bad", "quite bad"]
    prompts = [render_prompt(TASK, demos, q) for q in queries]
    plain = label_votes(BiasedModel(3.0), prompts, _Uncalibrated())
    assert plain == [0, 0, 0, 0]  # the bias outweighs the evidence: every vote negative
    calibrated = label_votes(BiasedModel(3.0), prompts, _Cfg(), queries)
    assert calibrated == [1, 1, 0, 0]


def test_content_free_prompts_keep_the_demonstrations_and_drop_the_query():
    model = BiasedModel(1.0)
    prompt = render_prompt(TASK, [("SECRET demo", "negative")], "the query text")
    label_votes(model, [prompt], _Cfg(), ["the query text"])
    free = model.prompts[1:]
    assert len(free) == len(TASK.content_free_inputs)
    assert all("SECRET demo" in p and "the query text" not in p for p in free)
    assert free[0].endswith(TASK.query_template.format(input="N/A"))
    with pytest.raises(ValueError, match="does not end with its query"):
        content_free_prompt(TASK, prompt, "another query", "N/A")
    with pytest.raises(ValueError, match="query text of every prompt"):
        label_votes(model, [prompt], _Cfg())


def test_calibrated_argmax_is_the_likelihoods_when_scores_are_prior_times_likelihood():
    """If a prompt's label distribution is prior × likelihood (normalised) and its content-free inputs show the
    prior, calibration recovers the likelihood's argmax, whatever the prior."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        k = rng.integers(2, 6)
        prior, likelihood = rng.dirichlet(np.ones(k) * 0.3), rng.dirichlet(np.ones(k))
        mixed = prior * likelihood
        scores = np.log(mixed / mixed.sum())[None, :] - 1.0
        free = np.log(np.stack([prior, prior]))[None, :, :] - 0.5
        assert np.argmax(calibrated_scores(scores, free)[0]) == np.argmax(likelihood)


def test_calibrate_is_for_classification_only():
    with pytest.raises(ValueError, match="task.calibrate needs a classification task"):
        TaskConfig(type="summarization", calibrate=True)
