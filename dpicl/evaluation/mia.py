"""Membership-inference attacks (MIA) against in-context learning, non-private and with the DP mechanisms.

Three attacks, each reported as the AUROC of a score that should be higher for *members* (records placed in the
demonstrations the system uses) than for *non-members* (records never shown):

**Repeat attack** (paper 004 §5.4 and App D; Wen et al. 2024). The attacker picks a target record, truncates its
input (the first ``truncate_fraction`` of its words) and sends the truncated text as the query; the score is the
cosine similarity of the sentence embeddings of the system's answer and the target's output (the one-line
summary a ticket was paired with). A model that sees the target among its demonstrations tends to repeat the
target's output. For every trial the private ensemble is ``teachers`` × ``shots`` demonstrations; a member's
target sits in one teacher (a random slot), the other slots — and all slots of a non-member trial — are fillers
drawn from a pool disjoint from all targets, so that every target is exposed in at most its own query. Answers:

* ``icl`` (ε = ∞): the answer of the teacher that holds the target (plain ``shots``-shot ICL; for a non-member
  the teacher at a random index);
* ``icl-full`` (ε = ∞, optional): one prompt with all teachers × shots demonstrations (004's "20-shot" model);
* ``agg-nonprivate`` (ε = ∞): the teacher answer nearest the exact mean of the teachers' answer embeddings (004's
  "non-private aggregation");
* every sample-level method — ``esa``, ``ksa-jem``, ``ksa-ptr``, ``sga`` (and ``sga top-1``, its first public
  candidate), ``ksa-public`` — at ε = ∞ (the aggregate without noise) and at each ε, released exactly as the
  pipeline does (``tasks.aggregate.aggregate_as_planned`` and the release post-processing, through
  ``evaluation.sweep``; SGA and KSA-public run their public ensemble on the config's public data);
* ``synthetic-icl`` at each ε: DP few-shot generation (002) writes one synthetic demonstration whose public input
  is the attack's query, from the trial's teachers as its M splits (the target in one split at every token),
  and the LLM answers the query with it (one-shot ICL).

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

**Label attack** (000's probability attack on a classification task, as 000 does on AG News): the same n × n
design with one-shot prompts; ``icl`` scores the log-probability of the true label, ``rnm`` releases a label per
pair by Report-Noisy-Max over the x′ teacher and ``teachers`` − 1 filler teachers and scores 1 when it is y_i.

**What the ε columns mean.** ``epsilon`` is the guarantee the mechanism is planned for as deployed
(``dpicl.planning``): the sample-level methods, DP few-shot generation and RNM Poisson-subsampled at
q = teachers·shots/|D| over as many queries (demonstrations) as the attack sends; DPS-MOZO drawing ``mozo_shots`` of |D| records per token over n queries of ``max_new_tokens`` tokens;
AdaPMixED over n queries. The attacks *force* the target into the demonstrations (as 004 and 000 do), i.e. they
condition on the target being sampled, which subsampling amplification does not cover; ``epsilon_experiment`` is
the bound that holds for the experiment as run (the same mechanism parameters with sampling rate 1: the target is
in its one query of a sample-level method, in every token of its one synthetic demonstration, or in every
query (token) of the n label / DPS-MOZO / AdaPMixED queries). It can be ∞: KSA-PTR's failure probability δ0,
planned for subsampled queries, exceeds δ once the target is forced in. DPS-MOZO's bound is the
paper's claim for substitution neighbours (see its module). The probability attack scores with the mechanism's
*distribution*, which the deployed system never releases (it releases one sampled token per step): it is a
stronger adversary than DP's threat model, and a small deterministic shift can be detected when the per-record
difficulty is calibrated away.

Privacy of this module: prompts, records and answers stay inside these functions. Results (``MIAResult``) carry
scores, AUROCs, counts and mechanism parameters only; exceptions name counts, never text; nothing is logged.
"""

from __future__ import annotations

import functools
import math
import numbers
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from dpicl.config import Config, TaskConfig
from dpicl.inference.teachers import greedy_params
from dpicl.privacy.mechanisms import adapmixed, dps_mozo
from dpicl.prompts import render_prompt, zero_shot_prompt

Record = tuple[str, str]  # (input, output) of one private record

LOG_FLOOR = -30.0


# ------------------------------------------------------------------------------------------------------ AUROC

@dataclass(frozen=True)
class AUROC:
    """AUROC of members vs non-members (sklearn), with a percentile bootstrap CI over the trials (members and
    non-members resampled separately; ``bootstrap`` = 0 gives no CI)."""

    value: float
    low: float
    high: float
    members: int
    nonmembers: int
    confidence: float
    bootstrap: int


def _scores(name: str, scores) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64).ravel()
    if s.size < 1:
        raise ValueError(f"{name} is empty: need at least one score")
    bad = int((~np.isfinite(s)).sum())
    if bad:
        raise ValueError(f"{name}: {bad} of {s.size} scores are not finite")
    return s


def auroc(member_scores, nonmember_scores, *, bootstrap: int = 1000, confidence: float = 0.95,
          rng: np.random.Generator | None = None) -> AUROC:
    """AUROC of ``member_scores`` (positives) against ``nonmember_scores`` with ``sklearn.metrics.roc_auc_score``
    (ties count ½), and a ``confidence`` percentile-bootstrap interval from ``bootstrap`` resamples.

    The bootstrap is exact and vectorised: with C[i, j] = 1{m_i > n_j} + ½·1{m_i = n_j}, a resample with
    multiplicities w (members) and v (non-members) has AUROC wᵀCv / (M·N). ``rng`` only drives the resampling (not
    a privacy mechanism); default: a fresh unseeded generator.
    """
    from sklearn.metrics import roc_auc_score

    m = _scores("member_scores", member_scores)
    n = _scores("nonmember_scores", nonmember_scores)
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, numbers.Integral) or bootstrap < 0:
        raise ValueError(f"bootstrap must be an integer >= 0, got {bootstrap!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    labels = np.r_[np.ones(m.size), np.zeros(n.size)]
    value = float(roc_auc_score(labels, np.r_[m, n]))
    low = high = math.nan
    if bootstrap:
        rng = np.random.default_rng() if rng is None else rng
        c = (m[:, None] > n[None, :]) + 0.5 * (m[:, None] == n[None, :])
        stats = np.empty(bootstrap)
        for start in range(0, bootstrap, 256):
            b = min(256, bootstrap - start)
            w = rng.multinomial(m.size, np.full(m.size, 1.0 / m.size), size=b)
            v = rng.multinomial(n.size, np.full(n.size, 1.0 / n.size), size=b)
            stats[start:start + b] = np.einsum("bi,ij,bj->b", w, c, v) / (m.size * n.size)
        low, high = (float(x) for x in np.quantile(stats, [(1 - confidence) / 2, (1 + confidence) / 2]))
    return AUROC(value, low, high, int(m.size), int(n.size), float(confidence), int(bootstrap))


# ---------------------------------------------------------------------------------------------------- results

def _number(value) -> bool:
    return isinstance(value, (numbers.Real, np.generic)) and not isinstance(value, str)


@dataclass(frozen=True)
class DPSetting:
    """One DP configuration of a method: the planned ε (as deployed), the mechanism parameters (numbers), and the
    ε that bounds the experiment as run (the target always in the demonstrations)."""

    epsilon: float
    params: Mapping[str, float]
    epsilon_experiment: float | None = None
    delta: float | None = None


@dataclass(frozen=True)
class AttackScores:
    """Scores of one attack on one method: members and non-members (numbers only)."""

    method: str
    members: np.ndarray
    nonmembers: np.ndarray
    setting: DPSetting | None = None
    details: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class MIAResult:
    """One row of the MIA table. ``epsilon`` None means non-private (ε = ∞). Numbers only: ``details`` may hold
    mechanism parameters and mean scores, never text (checked)."""

    attack: str
    method: str
    epsilon: float | None
    epsilon_experiment: float | None
    delta: float | None
    members: int
    nonmembers: int
    auroc: float
    ci_low: float
    ci_high: float
    details: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("epsilon", "epsilon_experiment", "delta"):
            value = getattr(self, name)
            if value is not None and not _number(value):
                raise TypeError(f"{name} must be a number or None")
        for key, value in self.details.items():
            if not isinstance(key, str) or not _number(value):
                raise TypeError("details must map names to numbers")

    def to_dict(self) -> dict:
        return {
            "attack": self.attack,
            "method": self.method,
            "epsilon": None if self.epsilon is None else float(self.epsilon),
            "epsilon_experiment": None if self.epsilon_experiment is None else float(self.epsilon_experiment),
            "delta": None if self.delta is None else float(self.delta),
            "members": int(self.members),
            "nonmembers": int(self.nonmembers),
            "auroc": float(self.auroc),
            "ci_low": float(self.ci_low),
            "ci_high": float(self.ci_high),
            "details": {k: float(v) for k, v in self.details.items()},
        }


def to_results(attack: str, scores: Sequence[AttackScores], *, bootstrap: int = 1000, confidence: float = 0.95,
               rng: np.random.Generator | None = None) -> list[MIAResult]:
    """One ``MIAResult`` per ``AttackScores``: AUROC with its bootstrap CI and the trial counts."""
    out = []
    for s in scores:
        a = auroc(s.members, s.nonmembers, bootstrap=bootstrap, confidence=confidence, rng=rng)
        setting = s.setting
        details = {**s.details, "mean_member_score": float(np.mean(s.members)),
                   "mean_nonmember_score": float(np.mean(s.nonmembers))}
        if setting is not None:
            details.update({k: float(v) for k, v in setting.params.items()})
        out.append(MIAResult(
            attack=attack, method=s.method,
            epsilon=None if setting is None else float(setting.epsilon),
            epsilon_experiment=None if setting is None or setting.epsilon_experiment is None
            else float(setting.epsilon_experiment),
            delta=None if setting is None else setting.delta,
            members=a.members, nonmembers=a.nonmembers, auroc=a.value, ci_low=a.low, ci_high=a.high,
            details=details,
        ))
    return out


# ---------------------------------------------------------------------------------------------------- planning

@functools.lru_cache(maxsize=64)  # plans are frozen: the cached one is shared
def cached_plan(method: str, sampling_rate: float, queries: int, epsilon: float, delta: float, options: tuple = ()):
    """``dpicl.planning.plan``, computed once per arguments: a calibration can take a minute."""
    from dpicl import planning

    return planning.plan(method, sampling_rate=sampling_rate, queries=queries, epsilon=epsilon, delta=delta,
                         **dict(options))


def planned_setting(method: str, epsilon: float, delta: float, *, sampling_rate: float, queries: int,
                    forced_queries: int = 1, forced: Mapping[str, float] | None = None,
                    **options) -> tuple[dict, DPSetting]:
    """The pipeline's plan of ``method`` for ``queries`` queries at ``sampling_rate`` (``dpicl.planning``) and
    its ``DPSetting``: the plan's numbers, and as ``epsilon_experiment`` the accountant's ε of ``forced_queries``
    invocations of the same mechanism at sampling rate 1 (the target forced into each of them; ``forced``
    overrides other entries of the plan for that event, e.g. dp-fewshot's tokens of one demonstration)."""
    from dpicl.privacy.accounting import total_epsilon

    plan = cached_plan(method, sampling_rate, queries, epsilon, delta, tuple(sorted(options.items())))
    event = plan.event(sampling_rate=1.0, **(forced or {}))
    params = {k: float(v) for k, v in plan.numbers().items() if _number(v) and not isinstance(v, bool)}
    return plan, DPSetting(epsilon, params, total_epsilon([event] * forced_queries, delta), delta)


def plan_probability_settings(epsilons: Sequence[float], delta: float, *, n_records: int, queries: int,
                              max_new_tokens: int, mozo_shots: int = 1, mozo_top_k: int = dps_mozo.DEFAULT_TOP_K,
                              ada_members: int = 4, ada_alpha: int = adapmixed.ALPHA) -> dict[str, list[DPSetting]]:
    """DPS-MOZO and AdaPMixED settings for each ε, planned for ``queries`` queries of ``max_new_tokens`` tokens.
    ``epsilon_experiment``: DPS-MOZO with the target in every token of every query (sampling rate 1); AdaPMixED
    has no subsampling, so its planned ε already holds (the target is one member throughout)."""
    from dpicl import planning
    from dpicl.privacy.accounting import total_epsilon
    from dpicl.privacy.accounting.events import DPSMozoEvent

    out: dict[str, list[DPSetting]] = {"dps-mozo": [], "adapmixed": []}
    for eps in epsilons:
        p = planning.plan("dps-mozo", sampling_rate=mozo_shots / n_records, queries=queries, epsilon=eps,
                          delta=delta, dataset_size=n_records, max_new_tokens=max_new_tokens, shots=mozo_shots,
                          # an attack measures the mechanism as configured, proven or not; it charges no budget
                          accept_unproven_guarantee=mozo_shots > 1)
        forced = [DPSMozoEvent(p.beta, p.alpha, 1.0, max_new_tokens)] * queries
        out["dps-mozo"].append(DPSetting(eps, {"beta": p.beta, "alpha": p.alpha, "top_k": mozo_top_k,
                                               "shots": mozo_shots, "sampling_rate": p.sampling_rate},
                                         total_epsilon(forced, delta), delta))
        p = planning.plan("adapmixed", sampling_rate=1.0, queries=queries, epsilon=eps, delta=delta,
                          max_new_tokens=max_new_tokens, members=ada_members, alpha=ada_alpha)
        events = [p.event()] * queries
        out["adapmixed"].append(DPSetting(eps, {"beta": p.beta, "alpha": p.alpha,
                                                "members": ada_members}, total_epsilon(events, delta), delta))
    return out


# ---------------------------------------------------------------------------------------------- repeat attack

@dataclass(frozen=True)
class RepeatTrial:
    """One query of the repeat attack: the target (index into the records), whether it is a member, the record
    indices each teacher shows, and the teacher that holds the target (a random one for a non-member)."""

    target: int
    member: bool
    teachers: tuple[tuple[int, ...], ...]
    target_teacher: int


def _indices(name: str, values: Sequence[int]) -> list[int]:
    out = [int(v) for v in values]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} holds repeated indices")
    return out


def repeat_trials(members: Sequence[int], nonmembers: Sequence[int], fillers: Sequence[int], *, teachers: int,
                  shots: int, rng: np.random.Generator) -> list[RepeatTrial]:
    """Member trials, then non-member trials. Each trial shows ``teachers`` × ``shots`` records: a member's target
    in a random slot, fillers (drawn without replacement per trial) everywhere else."""
    members, nonmembers, fillers = _indices("members", members), _indices("nonmembers", nonmembers), \
        _indices("fillers", fillers)
    if set(members) & set(nonmembers) or (set(members) | set(nonmembers)) & set(fillers):
        raise ValueError("members, non-members and fillers must be disjoint sets of records")
    if teachers < 1 or shots < 1:
        raise ValueError(f"teachers and shots must be >= 1, got {teachers} and {shots}")
    slots = teachers * shots
    if len(fillers) < slots:
        raise ValueError(f"{len(fillers)} fillers cannot fill {slots} demonstration slots")
    trials = []
    for target, member in [(t, True) for t in members] + [(t, False) for t in nonmembers]:
        shown = [int(f) for f in rng.choice(fillers, size=slots - int(member), replace=False)]
        position = int(rng.integers(slots))
        if member:
            shown.insert(position, target)
        groups = tuple(tuple(shown[k * shots:(k + 1) * shots]) for k in range(teachers))
        trials.append(RepeatTrial(target, member, groups, position // shots))
    return trials


def truncate_words(text: str, fraction: float = 0.5, min_words: int = 3) -> str:
    """The first ``fraction`` of the words of ``text`` (at least ``min_words``, at most all but one)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    words = text.split()
    keep = max(min_words, round(fraction * len(words)))
    keep = min(keep, max(1, len(words) - 1))
    return " ".join(words[:keep])


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return v / np.where(norm > 0, norm, 1.0)


def similarity_scores(encoder, released: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """The repeat attack's score: cosine similarity of each released answer's embedding with its target's."""
    if len(released) != len(references):
        raise ValueError(f"{len(released)} answers but {len(references)} references")
    vectors = _unit(encoder.encode(list(released) + list(references)))
    return np.sum(vectors[:len(released)] * vectors[len(released):], axis=1)


@contextmanager
def _timed(timings: dict | None, stage: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        if timings is not None:
            timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start


def _split(scores: np.ndarray, member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return scores[member], scores[~member]


@dataclass(frozen=True)
class _Row:
    """A private record as ``evaluation.sweep.build_ensemble`` reads it."""

    record_id: str
    input: str
    output: str


def repeat_attack_scores(backend, encoder, configs: Sequence[Config], records: Sequence[Record],
                         trials: Sequence[RepeatTrial], *, epsilons: Sequence[float], delta: float,
                         public: Sequence[Record] = (), fewshot: Config | None = None,
                         truncate_fraction: float = 0.5, full_icl: bool = False, rng: np.random.Generator,
                         timings: dict | None = None) -> list[AttackScores]:
    """The repeat attack on every answer kind of the module docstring. The teachers' answers are computed once
    by ``evaluation.sweep.build_ensemble`` with the trials' demonstrations (batched backend calls), and each
    method of ``configs`` (sample-level; they share task, model, teachers and shots) releases its answers with
    the pipeline's aggregator and post-processing at ε = ∞ and at each of ``epsilons``, planned by
    ``dpicl.planning`` for as many queries as trials at the pipeline's sampling rate. ``fewshot`` (a dp-fewshot
    config) adds DP few-shot generation → synthetic ICL. ``rng`` draws the mechanisms' noise (pass
    ``make_rng()`` outside tests and benchmarks)."""
    from dpicl import planning
    from dpicl.evaluation import sweep

    if not trials:
        raise ValueError("no trials")
    n_teachers, shots = len(trials[0].teachers), len(trials[0].teachers[0])
    if any(len(t.teachers) != n_teachers for t in trials):
        raise ValueError("every trial must have the same number of teachers")
    if not configs:
        raise ValueError("give at least one method config")
    if any((c.method.teachers, c.method.shots) != (n_teachers, shots) for c in configs):
        raise ValueError(f"the configs must have teachers = {n_teachers} and shots = {shots}, as the trials")
    member = np.array([t.member for t in trials])
    queries = [truncate_words(records[t.target][0], truncate_fraction) for t in trials]
    references = [records[t.target][1] for t in trials]
    private = [_Row(str(i), x, y) for i, (x, y) in enumerate(records)]
    groups = [[[str(j) for j in g] for g in t.teachers] for t in trials]
    with _timed(timings, "teachers and candidates (LLM, embeddings)"):
        ens = sweep.build_ensemble(configs, (private, list(public), {}, list(zip(queries, references))), backend,
                                   lambda cfg: encoder, rng, delta=delta, groups=groups)
    task, base = ens.cfg.task, {"teachers": n_teachers, "shots": shots}
    teacher_answers = ens.answers["few-shot"]
    rows: list[tuple[str, DPSetting | None, dict, list[str]]] = [
        ("icl", None, {"shots": shots}, [teacher_answers[i][t.target_teacher] for i, t in enumerate(trials)])]
    with _timed(timings, "embeddings"):
        vecs = [f.get("teachers") for f in ens.features]
        if any(v is None for v in vecs):
            flat = _unit(encoder.encode([a for answers in teacher_answers for a in answers]))
            vecs = [flat[i * n_teachers:(i + 1) * n_teachers] for i in range(len(trials))]
    nearest_mean = [int(np.argmax(v @ v.mean(axis=0))) for v in (_unit(v) for v in vecs)]
    rows.append(("agg-nonprivate", None, base, [a[k] for a, k in zip(teacher_answers, nearest_mean)]))
    for cfg in configs:
        method = cfg.method.name
        for eps in (sweep.INF, *epsilons):
            with _timed(timings, "planning"):
                plan, setting = (None, None) if eps == sweep.INF else planned_setting(
                    method, eps, ens.delta, sampling_rate=ens.sampling_rate, queries=len(trials), **planning.options_of(cfg))
            with _timed(timings, f"{method} (mechanism, LLM)"):
                answers, passed = sweep.method_answers(cfg, ens, eps, backend, rng, plan=plan)
            details = base if passed is None else {**base, "ptr_pass_rate": passed}
            rows += [(method + suffix, setting, details, texts) for suffix, texts in answers.items()]
    if fewshot is not None:
        with _timed(timings, "dp-fewshot → synthetic ICL (LLM, mechanism)"):
            rows += _synthetic_icl_rows(backend, fewshot, records, trials, queries, epsilons, ens, rng)
    if full_icl:
        with _timed(timings, "full-prompt ICL (LLM)"):
            full = backend.generate([render_prompt(task, [records[j] for g in t.teachers for j in g], q)
                                     for t, q in zip(trials, queries)], greedy_params(ens.cfg))
        rows.append(("icl-full", None, {"shots": n_teachers * shots}, full))
    with _timed(timings, "embeddings"):
        vectors = _unit(encoder.encode([a for *_, texts in rows for a in texts] + references))
    refs = vectors[len(rows) * len(trials):]
    out = []
    for k, (name, setting, details, _) in enumerate(rows):
        scores = np.sum(vectors[k * len(trials):(k + 1) * len(trials)] * refs, axis=1)
        out.append(AttackScores(name, *_split(scores, member), setting, details=details))
    return out


def _synthetic_icl_rows(backend, cfg: Config, records: Sequence[Record], trials: Sequence[RepeatTrial],
                        queries: Sequence[str], epsilons: Sequence[float], ens, rng: np.random.Generator) -> list:
    """DP few-shot generation (002) → synthetic ICL: per trial, one synthetic demonstration for the public input
    = the attack's query, generated from the trial's teachers as the M splits (the target forced into one of them
    at every token, the attacker's best case), then the answer of one-shot ICL with it."""
    from dpicl.decoding import dp_fewshot_text

    m, gen, task = cfg.method, cfg.generation, cfg.task
    rows = []
    for eps in epsilons:
        plan, setting = planned_setting("dp-fewshot", eps, ens.delta, sampling_rate=ens.sampling_rate,
                                        queries=len(trials), forced={"tokens": gen.max_new_tokens},
                                        max_new_tokens=gen.max_new_tokens, splits=m.splits, mechanism=m.mechanism)
        demos = []
        for t, q in zip(trials, queries):
            prompts = [render_prompt(task, [records[j] for j in g], q) for g in t.teachers]
            demos.append(dp_fewshot_text(backend, zero_shot_prompt(task, q), lambda: prompts, mechanism=m.mechanism,
                                         top_k=m.top_k, noise_multiplier=plan.noise_multiplier,
                                         epsilon0=plan.epsilon0, max_new_tokens=gen.max_new_tokens,
                                         stop=gen.stop, rng=rng, fixed_private=True).text)
            clear = getattr(backend, "clear_token_cache", None)
            if callable(clear):
                clear()
        answers = backend.generate([render_prompt(task, [(q, d)], q) for q, d in zip(queries, demos)],
                                   greedy_params(cfg))
        rows.append(("synthetic-icl", setting, {"splits": m.splits, "shots": m.shots}, answers))
    return rows


# ----------------------------------------------------------------------------------------- probability attack

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
        prompts = ([render_prompt(task, [records[m]], query) for m in test] + [zero_shot_prompt(task, query)]
                   + [render_prompt(task, [records[f]], query) for f in chosen])
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
        clear = getattr(backend, "clear_token_cache", None)
        if callable(clear):
            clear()
    diagonal = np.eye(n, dtype=bool)
    out: list[AttackScores] = []
    for name, matrix, setting, details in (
        [("icl", icl, None, {"shots": 1})]
        + [("dps-mozo", m, s, {}) for m, s in zip(mozo, mozo_settings)]
        + [("adapmixed", m, s, {"screen_pass_rate": p / (steps * n)}) for m, s, p in zip(ada, ada_settings, passed)]
    ):
        calibrated = matrix - zero[None, :]
        out.append(AttackScores(name, matrix[diagonal], matrix[~diagonal], setting, details))
        out.append(AttackScores(name + "-ref", calibrated[diagonal], calibrated[~diagonal], setting, details))
    return out


# --------------------------------------------------------------------------------------- label attack (RNM)

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
    had them whatever the noise (see the module docstring)."""
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
        prompts = ([render_prompt(task, [records[m]], query) for m in test] + [zero_shot_prompt(task, query)]
                   + [render_prompt(task, [records[f]], query) for f in chosen])
        lp = np.asarray(backend.label_logprobs(prompts, [task.label_prefix + label for label in task.labels]))
        icl[:, i], zero[i] = np.maximum(lp[:n, y], floor), max(lp[n, y], floor)
        votes = np.argmax(lp, axis=1)
        histograms = np.bincount(votes[n + 1:], minlength=classes)[None, :] + np.eye(classes)[votes[:n]]
        for k, sigma in enumerate(sigmas):
            # the release; a tiny jitter breaks ties of the plain vote at random
            noisy = histograms + rng.normal(0.0, sigma if sigma > 0 else 1e-9, size=histograms.shape)
            released[k][:, i] = np.argmax(noisy, axis=1) == y
    diagonal = np.eye(n, dtype=bool)
    out = [AttackScores("icl", icl[diagonal], icl[~diagonal], None, {"shots": 1}),
           AttackScores("icl-ref", (icl - zero)[diagonal], (icl - zero)[~diagonal], None, {"shots": 1})]
    for matrix, setting in zip(released, [None, *rnm_settings]):
        out.append(AttackScores("rnm", matrix[diagonal], matrix[~diagonal], setting,
                                {"teachers": teachers, "shots": 1}))
    return out


# ------------------------------------------------------------------------------------------------- the demo

REPEAT_METHODS = ("esa", "ksa-jem", "ksa-ptr", "sga", "ksa-public", "synthetic-icl")


def _load_records(cfg: Config) -> tuple[list[Record], list[Record], str | None]:
    """(input, output) of the config's private records and of its public ones, and the public dataset's name,
    read into a scratch in-memory database (as a sweep does)."""
    from dpicl.storage import load_records
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import ingest_source

    public_name = cfg.public_dataset or next((d.name for d in cfg.data if d.kind == "public"), None)
    con = connect(":memory:")
    try:
        for source in cfg.data:
            if source.name in (cfg.private_dataset, public_name):
                ingest_source(con, source)
        private = [(r.input, r.output) for r in load_records(con, cfg.private_dataset)]
        public = [(r.input, r.output) for r in load_records(con, public_name)] if public_name else []
    finally:
        con.close()
    if not private:
        raise ValueError(f"config {cfg.name!r}: its private dataset has no records")
    return private, public, public_name


def method_config(cfg: Config, name: str, public_dataset: str | None = None, **method) -> Config:
    """``cfg`` with another method (its defaults, then ``method``); ``public_dataset`` for sga and ksa-public."""
    raw = cfg.model_dump()
    raw["method"] = {**(raw["method"] if cfg.method.name == name else {}), "name": name, **method}
    if public_dataset is not None:
        raw["public_dataset"] = public_dataset
    if name == "dp-fewshot" and not raw.get("synthetic"):
        raw["synthetic"] = {"name": "mia-synthetic"}  # required by the config; the attack writes nothing
    return Config.model_validate(raw)


def run_demo_mia(*, members: int = 40, nonmembers: int = 40, teachers: int = 10, shots: int = 1,
                 candidates: int | None = None, epsilons: Sequence[float] = (1.0, 8.0), delta: float = 1e-5,
                 truncate_fraction: float = 0.5, methods: Sequence[str] = REPEAT_METHODS,
                 probability_examples: int = 11, mozo_shots: int = 1, ada_members: int = 4,
                 label_examples: int = 20, label_teachers: int = 10, label_config: str = "agnews-rnm",
                 attacks: Sequence[str] = ("repeat", "probability"), full_icl: bool = False, seed: int | None = None,
                 bootstrap: int = 1000, config: str = "demo", backend=None, encoder=None, timings: dict | None = None,
                 progress: Callable[[str], None] | None = None) -> list[MIAResult]:
    """The attacks on real data with the real mechanisms (``backend`` / ``encoder`` default to the config's
    models: SmolLM2-135M and all-MiniLM-L6-v2). ``repeat`` and ``probability`` run on the ``config``'s private
    records (the demo's tickets), split at random into repeat-attack targets (``members`` + ``nonmembers``), the
    probability attack's test set (``probability_examples``) and fillers; ``label`` runs RNM on
    ``label_config``'s records (default AG News, as paper 000). ``seed`` fixes every draw (benchmark mode); None
    draws from the OS. ``progress`` receives stage names (no data). One ``MIAResult`` per attack × method × ε."""
    from dpicl.config import load_config
    from dpicl.privacy.rng import make_rng
    from dpicl.tasks import context

    unknown = set(attacks) - {"repeat", "probability", "label"}
    if unknown:
        raise ValueError(f"unknown attacks {sorted(unknown)}; known: repeat, probability, label")
    if set(methods) - set(REPEAT_METHODS):
        raise ValueError(f"unknown repeat-attack methods {sorted(set(methods) - set(REPEAT_METHODS))}; known: "
                         f"{', '.join(REPEAT_METHODS)}")
    say = progress or (lambda message: None)
    cfg = load_config(config)
    rng = make_rng(seed, test_mode=True) if seed is not None else make_rng()
    results: list[MIAResult] = []
    if backend is None:
        say("loading the LLM")
        with _timed(timings, "model loading"):
            backend = context.backend(cfg)
    if "repeat" in attacks or "probability" in attacks:
        records, public, public_name = _load_records(cfg)
        n_repeat = (members + nonmembers) if "repeat" in attacks else 0
        n_prob = probability_examples if "probability" in attacks else 0
        if n_repeat + n_prob >= len(records):
            raise ValueError(f"{n_repeat + n_prob} targets leave no fillers among {len(records)} records")
        order = [int(i) for i in rng.permutation(len(records))]
        repeat_targets, prob_targets = order[:n_repeat], order[n_repeat:n_repeat + n_prob]
        fillers = order[n_repeat + n_prob:]
    if "repeat" in attacks:
        if encoder is None:
            say("loading the encoder")
            with _timed(timings, "model loading"):
                encoder = context.encoder(cfg)
        size = {"teachers": teachers, "shots": shots}
        configs = [method_config(cfg, name, public_name if name in ("sga", "ksa-public") else None,
                                 **size, **({"candidates": candidates} if name == "esa" and candidates else {}))
                   for name in methods if name != "synthetic-icl"]
        fewshot = (method_config(cfg, "dp-fewshot", public_name, splits=teachers, shots=shots)
                   if "synthetic-icl" in methods else None)
        trials = repeat_trials(repeat_targets[:members], repeat_targets[members:], fillers, teachers=teachers,
                               shots=shots, rng=rng)
        say(f"repeat attack: {len(trials)} queries × {teachers} teachers, methods {', '.join(methods)}")
        scores = repeat_attack_scores(backend, encoder, configs or [method_config(cfg, "esa", **size)], records,
                                      trials, epsilons=epsilons, delta=delta, public=public, fewshot=fewshot,
                                      truncate_fraction=truncate_fraction, full_icl=full_icl, rng=rng,
                                      timings=timings)
        results += to_results("repeat", scores, bootstrap=bootstrap, rng=rng)
    if "probability" in attacks:
        gen = cfg.generation
        with _timed(timings, "planning"):
            settings = plan_probability_settings(epsilons, delta, n_records=len(records), queries=n_prob,
                                                 max_new_tokens=gen.max_new_tokens, mozo_shots=mozo_shots,
                                                 ada_members=ada_members)
        say(f"probability attack: {n_prob} queries × {n_prob} demonstrations")
        scores = probability_attack_scores(backend, cfg.task, records, prob_targets, fillers,
                                           max_new_tokens=gen.max_new_tokens, mozo_settings=settings["dps-mozo"],
                                           ada_settings=settings["adapmixed"], mozo_shots=mozo_shots,
                                           ada_members=ada_members, rng=rng, timings=timings)
        results += to_results("probability", scores, bootstrap=bootstrap, rng=rng)
    if "label" in attacks:
        label_cfg = load_config(label_config)
        labelled, _, _ = _load_records(label_cfg)
        if label_examples + label_teachers >= len(labelled):
            raise ValueError(f"{label_config}: {len(labelled)} records are too few for the label attack")
        order = [int(i) for i in rng.permutation(len(labelled))]
        test, label_fillers = order[:label_examples], order[label_examples:]
        rate = label_teachers / len(labelled)  # one-shot teachers
        settings = [planned_setting("rnm", eps, delta, sampling_rate=rate, queries=label_examples,
                                    forced_queries=label_examples)[1] for eps in epsilons]
        say(f"label attack ({label_config}): {label_examples} queries × {label_examples} demonstrations")
        with _timed(timings, "label attack (LLM)"):
            scores = label_attack_scores(backend, label_cfg, labelled, test, label_fillers, teachers=label_teachers,
                                         rnm_settings=settings, rng=rng)
        results += to_results("label", scores, bootstrap=bootstrap, rng=rng)
    return results


def markdown_table(results: Sequence[MIAResult]) -> str:
    """The results as a markdown table (numbers only)."""
    def eps(value: float | None, private: bool) -> str:
        if value is None:
            return "—" if private else "∞"
        return f"{value:.3g}"

    lines = ["| attack | method | ε (planned) | ε (as run) | members | non-members | AUROC | 95% CI |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        ci = "—" if math.isnan(r.ci_low) else f"[{r.ci_low:.3f}, {r.ci_high:.3f}]"
        as_run = eps(r.epsilon_experiment, r.epsilon is not None)
        lines.append(f"| {r.attack} | {r.method} | {eps(r.epsilon, False)} | {as_run} | {r.members} | "
                     f"{r.nonmembers} | {r.auroc:.3f} | {ci} |")
    return "\n".join(lines)
