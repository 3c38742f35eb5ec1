"""The label attack on Report-Noisy-Max (and non-private one-shot ICL) on a classification task.

**Label attack** (000's probability attack on a classification task, as 000 does on AG News): the same n × n
design with one-shot prompts; ``icl`` scores the log-probability of the true label, ``rnm`` releases a label per
pair by Report-Noisy-Max over the x′ teacher and ``teachers`` − 1 filler teachers and scores 1 when it is y_i.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpicl.config import Config
from dpicl.evaluation.mia.common import LOG_FLOOR, Record, _indices, _one_shot_prompts
from dpicl.evaluation.mia.scores import AttackScores, _matrix_scores
from dpicl.evaluation.mia.settings import DPSetting
from dpicl.methods.rnm import RNM


def label_attack_scores(backend, cfg: Config, records: Sequence[Record], test: Sequence[int],
                        fillers: Sequence[int], *, teachers: int, rnm_settings: Sequence[DPSetting] = (),
                        floor: float = LOG_FLOOR, rng: np.random.Generator) -> list[AttackScores]:
    """The probability attack (000 App D.1) on a classification task: every record x′ of ``test`` in turn is
    the one-shot demonstration of each test query x_i. ``icl``: the score of (x′, i) is the LLM's log-probability
    of the true label y_i's first token (``icl-ref``: minus the public zero-shot prompt's). ``rnm``: the x′
    teacher votes with ``teachers`` − 1 filler teachers (one-shot, fillers drawn per query) and RNM releases a
    label, once per pair, at ε = ∞ (the plain vote, ties broken at random) and for each setting; the score is
    1 when the release is y_i. RNM's score is computed from what it releases, not from its exact release
    probabilities: those are never released, and a deterministic shift in them is visible to an attacker who
    had them whatever the noise (see ``dpicl.evaluation.mia``)."""
    from dpicl.privacy.mechanisms import rnm

    test, fillers = _indices("test", test), _indices("fillers", fillers)
    if len(test) < 2:
        raise ValueError("the label attack needs at least 2 test records")
    if set(test) & set(fillers) or len(fillers) < teachers - 1:
        raise ValueError(f"need {teachers - 1} fillers disjoint from the test records")
    task = cfg.task
    index = {label: k for k, label in enumerate(task.labels)}
    if any(records[j][1] not in index for j in [*test, *fillers]):
        raise ValueError("a test record or filler has an output outside the task's labels")
    n, classes = len(test), len(task.labels)
    sigmas = [0.0] + [rnm.SENSITIVITY * float(s.params["noise_multiplier"]) for s in rnm_settings]
    icl, zero = np.zeros((n, n)), np.zeros(n)
    released = [np.zeros((n, n)) for _ in sigmas]
    for i, target in enumerate(test):
        query, y = records[target][0], index[records[target][1]]
        chosen = [int(f) for f in rng.choice(fillers, size=teachers - 1, replace=False)]
        prompts = _one_shot_prompts(task, records, test, query, chosen)
        lp = np.asarray(backend.label_logprobs(prompts, [task.label_prefix + label for label in task.labels]))
        icl[:, i], zero[i] = np.maximum(lp[:n, y], floor), max(lp[n, y], floor)
        votes = np.argmax(lp, axis=1)
        histograms = np.bincount(votes[n + 1:], minlength=classes)[None, :] + np.eye(classes)[votes[:n]]
        for k, sigma in enumerate(sigmas):
            # the release; a tiny jitter breaks ties of the plain vote at random
            noisy = histograms + rng.normal(0.0, sigma if sigma > 0 else 1e-9, size=histograms.shape)
            released[k][:, i] = np.argmax(noisy, axis=1) == y
    out = _matrix_scores("icl", icl, None, {"shots": 1}, reference=zero)
    for matrix, setting in zip(released, [None, *rnm_settings]):
        out += _matrix_scores(RNM.name, matrix, setting, {"teachers": teachers, "shots": 1})
    return out
