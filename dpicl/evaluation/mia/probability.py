"""The probability attack on the token-level methods DPS-MOZO and AdaPMixED (and non-private one-shot ICL).

**Probability attack** (paper 000 §5.5 and App D.1; Duan et al. 2024, Yeom et al. 2018). A test set of n private
records; each in turn is the single demonstration (x′, y′) and every test record x_i is queried with it: the score
of (x′, i) is the mean per-token log-probability of the true output y_i (teacher-forced, at most
``max_new_tokens`` tokens) — members are the n pairs with x_i = x′, non-members the n(n−1) others, so every record
is once a member and n−1 times a non-member (000 D.1.3: equal difficulty on average). Distributions:

* ``icl`` (ε = ∞): the one-shot prompt's next-token distribution;
* ``dps-mozo`` at each ε: the DPS-MOZO distribution (000 Alg 1 up to the sampling: top-k of the zero-shot
  distribution, each one-shot row mixed in logit space with λ from the Rényi-ball search, product of the mixed
  rows) with the target's one-shot row and ``mozo_shots`` − 1 filler rows;
* ``adapmixed`` at each ε: the distribution AdaPMixED samples from (003 Alg 1: noisy screen, then the PMixED
  mean of the members mixed with p_0, or p_0 when the screen fails) with the target's prompt as one member and
  ``ada_members`` − 1 filler members.

A token outside DPS-MOZO's public top-k has probability 0; its log-probability is clipped to ``floor``. The
``-ref`` rows use the same scores minus the public zero-shot score of y_i (a difficulty calibration with a public
reference, as in LiRA-style attacks); it is not part of 000.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from dpicl.config import TaskConfig
from dpicl.evaluation.mia.common import (
    LOG_FLOOR,
    Record,
    _clear_token_cache,
    _indices,
    _one_shot_prompts,
    _timed,
)
from dpicl.evaluation.mia.scores import AttackScores, _matrix_scores
from dpicl.evaluation.mia.settings import DPSetting
from dpicl.methods.adapmixed import AdaPMixED
from dpicl.methods.dps_mozo import DPSMozo
from dpicl.privacy.mechanisms import adapmixed, dps_mozo


def _mozo_logprob(zero_lp: np.ndarray, member_rows: np.ndarray, filler_rows: np.ndarray, token: int,
                  setting: DPSetting, floor: float) -> np.ndarray:
    """log p(token) under DPS-MOZO's distribution for each member row (the product with the filler rows)."""
    top_k = int(setting.params["top_k"])
    beta, alpha = float(setting.params["beta"]), float(setting.params["alpha"])
    ids = dps_mozo.public_top_k(zero_lp, top_k)
    where = np.flatnonzero(ids == token)
    if where.size == 0:  # outside the public K: probability 0 whatever the demonstrations
        return np.full(len(member_rows), floor)
    zero = dps_mozo.truncate(zero_lp, ids)
    shots = 1 + len(filler_rows)  # the ball's radius depends on the rows of the token, as in the mechanism
    fill = [dps_mozo.mix_logits(r, zero, dps_mozo.choose_lambda(r, zero, beta, alpha, shots=shots))
            for r in dps_mozo.truncate(filler_rows, ids)] if len(filler_rows) else []
    out = np.empty(len(member_rows))
    for m, row in enumerate(dps_mozo.truncate(member_rows, ids)):
        mixed = dps_mozo.mix_logits(row, zero, dps_mozo.choose_lambda(row, zero, beta, alpha, shots=shots))
        p = dps_mozo.product_distribution(np.stack([mixed, *fill]))[where[0]]
        out[m] = math.log(p) if p > 0 else floor
    return np.maximum(out, floor)


def _ada_logprob(zero_lp: np.ndarray, member_rows: np.ndarray, filler_rows: np.ndarray, token: int,
                 setting: DPSetting, screen: Mapping[str, float], rng: np.random.Generator,
                 floor: float) -> tuple[np.ndarray, int]:
    """log p(token) under AdaPMixED's sampling distribution for each member row (members: the row + the fillers;
    a fresh noisy screen per row); also how many screens passed."""
    beta, alpha = float(setting.params["beta"]), float(setting.params["alpha"])
    p0 = adapmixed.probs_from_logprobs(zero_lp)
    mem = adapmixed.probs_from_logprobs(member_rows)
    fill = adapmixed.probs_from_logprobs(filler_rows) if len(filler_rows) else np.empty((0, p0.size))
    n = 1 + len(fill)
    lam_m = adapmixed.choose_lambdas(mem, p0, beta, alpha)
    fill_sum = 0.0
    if len(fill):
        lam_f = adapmixed.choose_lambdas(fill, p0, beta, alpha)
        fill_sum = float(np.sum(lam_f * fill[:, token] + (1 - lam_f) * p0[token]))
    out = np.empty(len(mem))
    passed = 0
    for m in range(len(mem)):
        result = adapmixed.noisy_screen(np.vstack([mem[m:m + 1], fill]), p0, top_k=int(screen["top_k"]),
                                        lam=screen["lam"], sigma=screen["sigma"], threshold=screen["threshold"],
                                        alpha=alpha, rng=rng)
        if result.passed:
            passed += 1
            p = (lam_m[m] * mem[m, token] + (1 - lam_m[m]) * p0[token] + fill_sum) / n
        else:
            p = p0[token]
        out[m] = math.log(p) if p > 0 else floor
    return np.maximum(out, floor), passed


def probability_attack_scores(backend, task: TaskConfig, records: Sequence[Record], test: Sequence[int],
                              fillers: Sequence[int], *, max_new_tokens: int, mozo_settings: Sequence[DPSetting] = (),
                              ada_settings: Sequence[DPSetting] = (), mozo_shots: int = 1, ada_members: int = 4,
                              ada_top_k: int = adapmixed.TOP_K, ada_screen_lambda: float = adapmixed.SCREEN_LAMBDA,
                              ada_screen_sigma: float = adapmixed.SCREEN_SIGMA,
                              ada_threshold: float = adapmixed.THRESHOLD, floor: float = LOG_FLOOR,
                              rng: np.random.Generator, timings: dict | None = None) -> list[AttackScores]:
    """The probability attack (000 App D.1) with every record of ``test`` once the demonstration: per query x_i
    one prompt set — the n one-shot prompts (x′, y′, x_i), the zero-shot prompt and the filler one-shot prompts
    (``fillers`` drawn per query) — decoded teacher-forced along y_i with ``backend.next_token_logprobs`` (KV
    cache kept), then the score matrices S[x′, i] of every method. Also the ``-ref`` variants (S minus the
    public zero-shot score of y_i)."""
    test = _indices("test", test)
    fillers = _indices("fillers", fillers)
    if len(test) < 2:
        raise ValueError("the probability attack needs at least 2 test records")
    if set(test) & set(fillers):
        raise ValueError("test records and fillers must be disjoint")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    n_fill = max(mozo_shots - 1 if mozo_settings else 0, ada_members - 1 if ada_settings else 0)
    if len(fillers) < n_fill:
        raise ValueError(f"{len(fillers)} fillers, {n_fill} needed")
    screen = {"top_k": ada_top_k, "lam": ada_screen_lambda, "sigma": ada_screen_sigma, "threshold": ada_threshold}
    n = len(test)
    icl = np.zeros((n, n))
    zero = np.zeros(n)
    mozo = [np.zeros((n, n)) for _ in mozo_settings]
    ada = [np.zeros((n, n)) for _ in ada_settings]
    passed = [0 for _ in ada_settings]
    steps = 0
    for i, target in enumerate(test):
        query, answer = records[target]
        chosen = [int(f) for f in rng.choice(fillers, size=n_fill, replace=False)] if n_fill else []
        prompts = _one_shot_prompts(task, records, test, query, chosen)
        tokens = backend.encode_text(" " + answer)[:max_new_tokens]
        if not tokens:
            raise ValueError(f"test record {i} has an empty output")
        for t, token in enumerate(tokens):
            with _timed(timings, "next-token log-probabilities (LLM)"):
                lp = np.asarray(backend.next_token_logprobs(prompts, tokens[:t]), dtype=np.float64)
            rows, z, fill = lp[:n], lp[n], lp[n + 1:]
            icl[:, i] += np.maximum(rows[:, token], floor)
            zero[i] += max(z[token], floor)
            with _timed(timings, "mechanisms"):
                for k, setting in enumerate(mozo_settings):
                    mozo[k][:, i] += _mozo_logprob(z, rows, fill[:mozo_shots - 1], token, setting, floor)
                for k, setting in enumerate(ada_settings):
                    scores, ok = _ada_logprob(z, rows, fill[:ada_members - 1], token, setting, screen, rng, floor)
                    ada[k][:, i] += scores
                    passed[k] += ok
            steps += 1
        for matrix in [icl, *mozo, *ada]:
            matrix[:, i] /= len(tokens)
        zero[i] /= len(tokens)
        _clear_token_cache(backend)
    out: list[AttackScores] = []
    for name, matrix, setting, details in (
        [("icl", icl, None, {"shots": 1})]
        + [(DPSMozo.name, m, s, {}) for m, s in zip(mozo, mozo_settings)]
        + [(AdaPMixED.name, m, s, {"screen_pass_rate": p / (steps * n)}) for m, s, p in zip(ada, ada_settings, passed)]
    ):
        out += _matrix_scores(name, matrix, setting, details, reference=zero)
    return out
