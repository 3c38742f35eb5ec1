"""How teachers answer, shared by the pipeline's stages, the methods' releases and the evaluation: greedy generation
with the run's settings, and a label vote per prompt for classification."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpicl.inference.base import GenerationParams, require


def greedy_params(cfg) -> GenerationParams:
    """The run's generation settings (greedy unless the config says otherwise)."""
    gen = cfg.generation
    return GenerationParams(max_new_tokens=gen.max_new_tokens, temperature=gen.temperature, top_p=gen.top_p,
                            stop=tuple(gen.stop), empty_answers=gen.empty_answers)


def label_votes(backend, prompts: list[str], cfg, queries: Sequence[str] | None = None) -> list[int]:
    """Each prompt's most likely label (index into task.labels) by the next-token log-probabilities; with
    `task.calibrate`, contextually calibrated (`calibrated_scores`), which needs each prompt's query text."""
    require(backend, "label_logprobs")
    if not prompts:
        return []
    labels = [cfg.task.label_prefix + label for label in cfg.task.labels]
    if not cfg.task.calibrate:
        scores = np.asarray(backend.label_logprobs(prompts, labels, progress=True))
        return np.argmax(scores, axis=1).astype(int).tolist()
    if queries is None or len(queries) != len(prompts):
        raise ValueError("calibrated label votes need the query text of every prompt")
    # each prompt, then its content-free variants: one group of variants that share the demonstrations
    inputs = cfg.task.content_free_inputs
    groups = [[prompt, *(content_free_prompt(cfg.task, prompt, query, x) for x in inputs)]
              for prompt, query in zip(prompts, queries, strict=True)]
    scores = np.asarray(backend.label_logprobs([p for group in groups for p in group], labels, progress=True,
                                               variants=1 + len(inputs)))
    scores = scores.reshape(len(prompts), 1 + len(inputs), len(labels))
    return np.argmax(calibrated_scores(scores[:, 0], scores[:, 1:]), axis=1).astype(int).tolist()


def content_free_prompt(task, prompt: str, query: str, content_free: str) -> str:
    """The same prompt — the same demonstrations — with the query replaced by a content-free input ("N/A")."""
    tail = task.query_template.format(input=query)
    if not prompt.endswith(tail):
        raise ValueError("a prompt does not end with its query (task.query_template)")
    return prompt[:len(prompt) - len(tail)] + task.query_template.format(input=content_free)


def calibrated_scores(scores: np.ndarray, free_scores: np.ndarray) -> np.ndarray:
    """Contextual calibration (Zhao et al. 2021): the label distribution after a prompt, divided by the mean
    distribution its demonstrations give content-free inputs, so that a prompt's bias towards a label (its
    demonstrations' order or majority, the label's prior) no longer decides the vote. `scores`: (prompts, labels)
    log-probabilities; `free_scores`: (prompts, content-free inputs, labels). Returns log-scores.

    Privacy: a prompt's correction comes from that prompt's own demonstrations only, so a teacher's vote still
    depends on its own demonstrations (and public text) alone: the votes' sensitivity is unchanged."""
    def normalised(logp: np.ndarray) -> np.ndarray:
        return np.exp(logp - np.logaddexp.reduce(logp, axis=-1, keepdims=True))

    prior = normalised(free_scores).mean(axis=1)
    return np.log(normalised(scores)) - np.log(np.maximum(prior, 1e-12))
