"""The repeat attack: what every sample-level method (and non-private ICL) answers to a truncated target.

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
  pipeline does (``methods.base.aggregate_as_planned`` and the release post-processing, through
  ``evaluation.sweep``; SGA and KSA-public run their public ensemble on the config's public data);
* ``synthetic-icl`` at each ε: DP few-shot generation (002) writes one synthetic demonstration whose public input
  is the attack's query, from the trial's teachers as its M splits (the target in one split at every token),
  and the LLM answers the query with it (one-shot ICL).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpicl.config import Config
from dpicl.evaluation.mia.common import Record, _clear_token_cache, _indices, _timed
from dpicl.evaluation.mia.scores import AttackScores
from dpicl.evaluation.mia.settings import DPSetting, planned_setting
from dpicl.inference.teachers import greedy_params
from dpicl.methods.dp_fewshot import DPFewShot
from dpicl.methods.synthetic_icl import SyntheticICL
from dpicl.prompts import render_prompt, zero_shot_prompt


@dataclass(frozen=True)
class RepeatTrial:
    """One query of the repeat attack: the target (index into the records), whether it is a member, the record
    indices each teacher shows, and the teacher that holds the target (a random one for a non-member)."""

    target: int
    member: bool
    teachers: tuple[tuple[int, ...], ...]
    target_teacher: int


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
                    method, eps, ens.delta, sampling_rate=ens.sampling_rate, queries=len(trials),
                    **planning.options_of(cfg))
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
        plan, setting = planned_setting(DPFewShot.name, eps, ens.delta, sampling_rate=ens.sampling_rate,
                                        queries=len(trials), forced={"tokens": gen.max_new_tokens},
                                        max_new_tokens=gen.max_new_tokens, splits=m.splits, mechanism=m.mechanism)
        demos = []
        for t, q in zip(trials, queries):
            prompts = [render_prompt(task, [records[j] for j in g], q) for g in t.teachers]
            demos.append(dp_fewshot_text(backend, zero_shot_prompt(task, q), lambda: prompts, mechanism=m.mechanism,
                                         top_k=m.top_k, noise_multiplier=plan.noise_multiplier,
                                         epsilon0=plan.epsilon0, max_new_tokens=gen.max_new_tokens,
                                         stop=gen.stop, rng=rng, fixed_private=True).text)
            _clear_token_cache(backend)
        answers = backend.generate([render_prompt(task, [(q, d)], q) for q, d in zip(queries, demos)],
                                   greedy_params(cfg))
        rows.append((SyntheticICL.name, setting, {"splits": m.splits, "shots": m.shots}, answers))
    return rows
