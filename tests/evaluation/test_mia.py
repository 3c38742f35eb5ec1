"""Membership-inference attacks (dpicl.evaluation.mia): AUROC and its bootstrap CI, the repeat attack with a fake
LLM that copies its demonstrations (members separate; ESA's zero-shot release does not), the probability attack
with fake next-token log-probabilities, and one end-to-end run on the embedded SmolLM2."""

from __future__ import annotations

import hashlib
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dpicl.config import TaskConfig
from dpicl.evaluation.mia import (
    DPSetting,
    MIAResult,
    auroc,
    cached_plan,
    markdown_table,
    probability_attack_scores,
    repeat_attack_scores,
    repeat_trials,
    roc_curve,
    roc_plot,
    similarity_scores,
    to_results,
    truncate_words,
)
from dpicl.inference.base import GenerationParams

TASK = TaskConfig(instruction="Summarize each ticket.", demo_template="Ticket:\n{input}\nSummary: {output}",
                  query_template="Ticket:\n{input}\nSummary:")
GREEDY = GenerationParams(max_new_tokens=16, stop=("\n",))
SAMPLED = GenerationParams(max_new_tokens=16, temperature=0.7, stop=("\n",))
_DEMO = re.compile(r"^Ticket:\n(.*)\nSummary: (.*)$", re.S)
_QUERY = re.compile(r"(?:Ticket|Input):\n(.*?)\n", re.S)


def _hash(*parts) -> int:
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big")


def make_records(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Tickets of 12 words; each summary repeats 1–3 of its ticket's first words and adds 5 words of its own."""
    rng = np.random.default_rng(seed)
    tickets = [f"w{w}" for w in range(300)]
    summaries = [f"s{w}" for w in range(300)]
    out = []
    for i in range(n):
        words = list(rng.choice(tickets, 12, replace=False))
        kept = words[:int(rng.integers(1, 4))]
        out.append((" ".join(words), " ".join(kept + list(rng.choice(summaries, 5, replace=False)))))
    return out


def _parse(prompt: str) -> tuple[list[tuple[str, str]], str]:
    blocks = prompt.split("\n\n")
    demos = [m.groups() for m in (_DEMO.match(b) for b in blocks[:-1]) if m]
    query = _QUERY.search(blocks[-1])
    return demos, (query.group(1) if query else "")


class CopyingLLM:
    """Repeats the output of a demonstration whose input starts with the query; otherwise answers with the
    query's first words (sampled answers add a word chosen by a hash of the prompt and its position). Token
    level: a 64-word vocabulary; the next token of a demonstration's output is boosted when that demonstration's
    input is the query, on top of a query-dependent base distribution with a query-dependent sharpness."""

    name = "copying-fake"
    vocab_size = 64
    eos_token_ids = frozenset({0})

    def __init__(self, copy_boost: float = 4.0) -> None:
        self.copy_boost = copy_boost
        self.calls: list[int] = []

    def generate(self, prompts, params, *, progress=False):
        self.calls.append(len(prompts))
        out = []
        for k, prompt in enumerate(prompts):
            demos, query = _parse(prompt)
            copied = [y for x, y in demos if query and x.startswith(query)]
            if copied:
                out.append(copied[0])
                continue
            answer = query.split()[:3]
            if params.temperature > 0:
                answer.append(f"s{_hash(prompt, k) % 300}")
            out.append(" ".join(answer))
        return out

    def encode_text(self, text):
        return [2 + _hash(w) % (self.vocab_size - 2) for w in text.split()]

    def next_token_logprobs(self, prompts, suffix=(), *, token_ids=None, cache=True):
        rows = np.empty((len(prompts), self.vocab_size))
        for r, prompt in enumerate(prompts):
            demos, query = _parse(prompt)
            scale = 0.5 + 3.0 * (_hash("scale", query) % 1000) / 1000
            logits = scale * np.random.default_rng(_hash(query, len(suffix))).normal(size=self.vocab_size)
            for x, y in demos:
                logits = logits + 0.3 * np.random.default_rng(_hash(x, query, len(suffix))).normal(
                    size=self.vocab_size)
                tokens = self.encode_text(y)
                if query and x.startswith(query) and len(suffix) < len(tokens):
                    logits[tokens[len(suffix)]] += self.copy_boost
            rows[r] = logits - np.logaddexp.reduce(logits)
        return rows.astype(np.float32)


class BagOfWords:
    """Unit vectors of hashed word counts (similar texts are close, unrelated ones nearly orthogonal)."""

    dim = 512

    def encode(self, texts, progress=False, batched=False):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, _hash("bow", w) % self.dim] += 1.0
            norm = np.linalg.norm(out[i])
            if norm > 0:
                out[i] /= norm
        return out


# ------------------------------------------------------------------------------------------------------ AUROC

def test_auroc_of_perfectly_separated_scores_is_one():
    a = auroc([5.0, 6.0, 7.0], [1.0, 2.0, 3.0, 4.0], rng=np.random.default_rng(0))
    assert a.value == 1.0 and a.low == 1.0 and a.high == 1.0
    assert (a.members, a.nonmembers) == (3, 4)
    assert auroc([1.0, 2.0], [3.0, 4.0], bootstrap=0).value == 0.0


def test_auroc_of_identical_distributions_is_about_one_half():
    rng = np.random.default_rng(1)
    a = auroc(rng.normal(size=2000), rng.normal(size=2000), rng=rng)
    assert abs(a.value - 0.5) < 0.03
    assert a.low < 0.5 < a.high and a.high - a.low < 0.1
    tied = auroc(np.zeros(10), np.zeros(30), bootstrap=50, rng=rng)
    assert tied.value == 0.5 and tied.low == tied.high == 0.5


def test_bootstrap_interval_brackets_the_estimate_and_narrows_with_more_trials():
    rng = np.random.default_rng(2)
    small = auroc(rng.normal(0.5, 1, 20), rng.normal(0, 1, 20), rng=rng)
    large = auroc(rng.normal(0.5, 1, 2000), rng.normal(0, 1, 2000), rng=rng)
    assert small.low <= small.value <= small.high
    assert large.low <= large.value <= large.high
    assert large.high - large.low < (small.high - small.low) / 3
    assert 0.6 < large.value < 0.7  # Φ(0.5/√2) = 0.638


def test_auroc_rejects_empty_or_non_finite_scores():
    with pytest.raises(ValueError, match="empty"):
        auroc([], [1.0])
    with pytest.raises(ValueError, match="1 of 2 scores are not finite"):
        auroc([1.0, float("nan")], [0.0])


def test_results_carry_numbers_only_and_serialise():
    r = to_results("repeat", [_scores("icl", [1.0, 0.9], [0.1, 0.2, 0.3])], bootstrap=10,
                   rng=np.random.default_rng(0))[0]
    d = json.loads(json.dumps(r.to_dict()))
    assert d["auroc"] == 1.0 and d["members"] == 2 and d["nonmembers"] == 3 and d["epsilon"] is None
    assert "| repeat | icl | ∞ |" in markdown_table([r])
    with pytest.raises(TypeError):
        MIAResult("repeat", "icl", None, None, None, 1, 1, 0.5, 0.5, 0.5, details={"answer": "private text"})


@given(st.lists(st.floats(-5, 5), min_size=1, max_size=30), st.lists(st.floats(-5, 5), min_size=1, max_size=30))
def test_the_roc_curve_runs_from_0_to_1_and_its_area_is_the_auroc(members, nonmembers):
    fpr, tpr = roc_curve(members, nonmembers)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert all(a <= b for a, b in zip(fpr, fpr[1:])) and all(a <= b for a, b in zip(tpr, tpr[1:]))
    area = sum((x1 - x0) * (y0 + y1) / 2 for x0, x1, y0, y1 in zip(fpr, fpr[1:], tpr, tpr[1:]))
    assert area == pytest.approx(auroc(members, nonmembers, bootstrap=0).value, abs=1e-9)


def test_roc_curves_are_plotted_one_panel_per_attack(tmp_path):
    results = [*to_results("repeat", [_scores("icl", [1.0, 0.4], [0.1, 0.5, 0.3])], bootstrap=0),
               *to_results("label", [_scores("rnm", [0.2, 0.9], [0.1, 0.5])], bootstrap=0)]
    assert json.loads(json.dumps(results[0].to_dict()))["roc"]["tpr"][-1] == 1.0
    roc_plot(results, tmp_path / "roc.png")
    assert (tmp_path / "roc.png").read_bytes().startswith(b"\x89PNG")


def _scores(method, members, nonmembers):
    from dpicl.evaluation.mia import AttackScores

    return AttackScores(method, np.asarray(members), np.asarray(nonmembers))


# ----------------------------------------------------------------------------------------------- repeat attack

def test_truncate_words_keeps_a_prefix_and_drops_at_least_one_word():
    assert truncate_words("a b c d e f g h", 0.5) == "a b c d"
    assert truncate_words("a b c", 0.5) == "a b"
    assert truncate_words("a b c d e f g h", 1.0) == "a b c d e f g"


def test_repeat_trials_place_each_member_once_and_never_a_non_member():
    rng = np.random.default_rng(3)
    trials = repeat_trials(range(0, 5), range(5, 10), range(10, 60), teachers=4, shots=2, rng=rng)
    assert len(trials) == 10 and [t.member for t in trials] == [True] * 5 + [False] * 5
    for t in trials:
        shown = [j for g in t.teachers for j in g]
        assert len(t.teachers) == 4 and all(len(g) == 2 for g in t.teachers)
        assert len(set(shown)) == 8 and not set(shown) & (set(range(10)) - {t.target})
        assert (t.target in shown) == t.member
        if t.member:
            assert t.target in t.teachers[t.target_teacher]
    with pytest.raises(ValueError, match="disjoint"):
        repeat_trials([1], [1], range(10, 20), teachers=2, shots=1, rng=rng)
    with pytest.raises(ValueError, match="cannot fill"):
        repeat_trials([1], [2], range(10, 13), teachers=2, shots=2, rng=rng)


def test_similarity_scores_are_cosines():
    enc = BagOfWords()
    s = similarity_scores(enc, ["a b c", "x y", ""], ["a b c", "p q", "a"])
    np.testing.assert_allclose(s, [1.0, 0.0, 0.0], atol=1e-6)


class TokenCopyingLLM(CopyingLLM):
    """A CopyingLLM whose token-level texts round-trip: `decode` writes token ids as words "tok<id>", which
    `encode_text` reads back (for DP few-shot generation)."""

    def encode_text(self, text):
        return [int(w[3:]) if re.fullmatch(r"tok\d+", w) else 2 + _hash(w) % (self.vocab_size - 2)
                for w in text.split()]

    def decode(self, token_ids):
        return " ".join(f"tok{i}" for i in token_ids)


class TokenBag(BagOfWords):
    """BagOfWords over the LLM's token ids (a generated "tok<id>" and the word it stands for coincide)."""

    def __init__(self, llm) -> None:
        self.llm = llm

    def encode(self, texts, progress=False, batched=False):
        return super().encode([" ".join(f"tok{i}" for i in self.llm.encode_text(t)) for t in texts])


REPEAT_METHODS = [{"name": "esa", "candidates": 4}, {"name": "ksa-jem"}, {"name": "ksa-ptr"}, {"name": "sga"},
                  {"name": "ksa-public"}]


def method_configs(methods, teachers: int = 4, shots: int = 2):
    from dpicl.config import Config

    base = {"name": "mia", "private_dataset": "p", "public_dataset": "pub", "backlog": "b",
            "data": [{"name": "p", "kind": "private", "path": "unused.jsonl"}],
            "task": TASK.model_dump(), "generation": {"max_new_tokens": 8, "stop": ["\n"]},
            "synthetic": {"name": "s"}}
    size = lambda m: {"splits": teachers} if m["name"] == "dp-fewshot" else {"teachers": teachers}  # noqa: E731
    return [Config.model_validate({**base, "method": {**m, **size(m), "shots": shots}}) for m in methods]


REPEAT_TIMINGS: dict = {}


@pytest.fixture(scope="module")
def repeat_run():
    """Every sample-level method and DP few-shot → synthetic ICL at ε = ∞ and 1 (a few PRV calibrations)."""
    records = make_records(200)
    rng = np.random.default_rng(4)
    trials = repeat_trials(range(0, 40), range(40, 80), range(80, 180), teachers=4, shots=2, rng=rng)
    llm = TokenCopyingLLM()
    fewshot = method_configs([{"name": "dp-fewshot", "top_k": 64}])[0]
    scores = repeat_attack_scores(llm, TokenBag(llm), method_configs(REPEAT_METHODS), records, trials,
                                  epsilons=(1.0,), delta=1e-5, public=make_records(20, seed=1), fewshot=fewshot,
                                  full_icl=True, rng=rng, timings=REPEAT_TIMINGS)
    return llm, {(r.method, r.epsilon): r for r in to_results("repeat", scores, rng=rng)}


@pytest.mark.slow
def test_repeat_attack_separates_members_of_non_private_icl(repeat_run):
    _, results = repeat_run
    for method in ("icl", "icl-full"):
        r = results[(method, None)]
        assert r.auroc > 0.9 and (r.members, r.nonmembers) == (40, 40)


@pytest.mark.slow
def test_repeat_attack_does_not_separate_dp_releases(repeat_run):
    _, results = repeat_run
    icl = results[("icl", None)].auroc
    for method in ("esa", "ksa-jem", "ksa-ptr", "sga", "ksa-public"):
        for eps in (None, 1.0):
            assert (method, eps) in results
        assert results[(method, 1.0)].auroc < icl - 0.2, method
        assert abs(results[(method, 1.0)].auroc - 0.5) < 0.25, method
    # ESA post-processes zero-shot candidates: even without noise nothing of the target can come out
    assert abs(results[("esa", None)].auroc - 0.5) < 0.2
    assert ("agg-nonprivate", None) in results and ("sga top-1", 1.0) in results


@pytest.mark.slow
def test_repeat_attack_settings_are_the_pipeline_plans(repeat_run):
    from dpicl import planning
    from dpicl.privacy.accounting import total_epsilon

    _, results = repeat_run
    rate = 4 * 2 / 200
    for cfg in method_configs(REPEAT_METHODS):
        method = cfg.method.name
        for eps in (1.0,):
            r = results[(method, eps)]
            # the fixture's own plan (cached): calibrating again would take minutes
            plan = cached_plan(method, rate, 80, eps, 1e-5, tuple(sorted(planning.options_of(cfg).items())))
            assert r.details["sampling_rate"] == pytest.approx(rate)
            forced = total_epsilon([plan.event(sampling_rate=1.0)], 1e-5)
            assert r.epsilon_experiment == pytest.approx(forced)
    # one forced query is far weaker than the subsampled plan: the experiment's bound is larger
    assert results[("esa", 1.0)].epsilon_experiment > 2.0
    assert "ptr_pass_rate" in results[("ksa-ptr", 1.0)].details


@pytest.mark.slow
def test_synthetic_icl_leaks_less_than_icl(repeat_run):
    from dpicl.privacy.accounting import total_epsilon

    _, results = repeat_run
    r = results[("synthetic-icl", 1.0)]
    assert (r.members, r.nonmembers) == (40, 40)
    assert r.auroc < results[("icl", None)].auroc - 0.2
    # as run, the target is in every token of its own demonstration only (8 tokens, sampling rate 1)
    plan = cached_plan("dp-fewshot", 8 / 200, 80, 1.0, 1e-5,
                       tuple(sorted({"max_new_tokens": 8, "splits": 4, "mechanism": "gaussian"}.items())))
    one_demo = plan.event(sampling_rate=1.0, tokens=8)
    assert r.epsilon_experiment == pytest.approx(total_epsilon([one_demo], 1e-5))


@pytest.mark.slow
def test_repeat_attack_batches_backend_calls(repeat_run):
    llm, _ = repeat_run
    # teachers, zero-shot, public teachers, esa candidates in one call each; then per method its LLM step
    assert llm.calls[:4] == [80 * 4, 80, 80 * 4, 80 * 4]
    assert max(llm.calls) == 80 * 4


# ------------------------------------------------------------------------------------------ probability attack

MOZO = [DPSetting(1.0, {"beta": 0.0033, "alpha": 17, "top_k": 32}), DPSetting(8.0, {"beta": 0.19, "alpha": 4,
                                                                                   "top_k": 32})]
ADA = [DPSetting(1.0, {"beta": 2e-4, "alpha": 18})]


@pytest.fixture(scope="module")
def probability_run():
    records = make_records(60, seed=5)
    scores = probability_attack_scores(CopyingLLM(), TASK, records, range(12), range(12, 60), max_new_tokens=6,
                                       mozo_settings=MOZO, ada_settings=ADA, mozo_shots=3, ada_members=3,
                                       ada_top_k=20, rng=np.random.default_rng(6))
    return scores, {(r.method, r.epsilon): r for r in to_results("probability", scores,
                                                                  rng=np.random.default_rng(7))}


def test_probability_attack_counts_every_record_once_as_member(probability_run):
    scores, results = probability_run
    assert {(r.members, r.nonmembers) for r in results.values()} == {(12, 132)}
    assert {s.method for s in scores} == {"icl", "icl-ref", "dps-mozo", "dps-mozo-ref", "adapmixed",
                                          "adapmixed-ref"}
    assert all(np.isfinite(s.members).all() and np.isfinite(s.nonmembers).all() for s in scores)


def test_probability_attack_separates_members_of_one_shot_icl_more_than_dp(probability_run):
    _, results = probability_run
    icl = results[("icl", None)].auroc
    assert icl > 0.9
    for key in [("dps-mozo", 1.0), ("adapmixed", 1.0)]:
        assert results[key].auroc < icl - 0.2, key
        assert abs(results[key].auroc - 0.5) < 0.25, key
    assert results[("dps-mozo", 1.0)].auroc <= results[("dps-mozo", 8.0)].auroc + 0.05


def test_probability_attack_without_copying_is_chance():
    records = make_records(40, seed=8)
    scores = probability_attack_scores(CopyingLLM(copy_boost=0.0), TASK, records, range(10), range(10, 40),
                                       max_new_tokens=5, rng=np.random.default_rng(9))
    icl = to_results("probability", scores, bootstrap=0)[0]
    assert icl.method == "icl" and abs(icl.auroc - 0.5) < 0.2


def test_planned_settings_and_the_epsilon_of_the_experiment_as_run():
    from dpicl.evaluation.mia import plan_probability_settings

    plans = plan_probability_settings([1.0, 8.0], 1e-5, n_records=300, queries=8, max_new_tokens=20)
    mozo, ada = plans["dps-mozo"], plans["adapmixed"]
    assert [s.epsilon for s in mozo] == [1.0, 8.0] and mozo[0].params["beta"] < mozo[1].params["beta"]
    # forcing the target into every token voids DPS-MOZO's subsampling amplification
    assert all(s.epsilon_experiment > 10 * s.epsilon for s in mozo)
    # AdaPMixED is not subsampled: the planned guarantee holds as run
    assert all(s.epsilon_experiment == pytest.approx(s.epsilon, rel=1e-6) for s in ada)


# ----------------------------------------------------------------------------------------- label attack (RNM)

class LabelCopyingLLM:
    """Scores labels: a prompt whose demonstration input is the query puts its log-probability mass on that
    demonstration's label; other prompts get a random preference of their own."""

    name = "label-fake"

    def label_logprobs(self, prompts, continuations, *, progress=False, variants=1):
        labels = [c.strip() for c in continuations]
        out = np.empty((len(prompts), len(labels)))
        for r, prompt in enumerate(prompts):
            demos, query = _parse(prompt)
            logits = np.random.default_rng(_hash("label", prompt)).normal(size=len(labels))
            for x, y in demos:
                if x == query:
                    logits[labels.index(y)] += 6.0
            out[r] = logits - np.logaddexp.reduce(logits)
        return out


def test_label_attack_separates_one_shot_icl_but_not_rnm():
    from dpicl.config import Config
    from dpicl.evaluation.mia import label_attack_scores

    labels = ["World", "Sports", "Business", "Technology"]
    cfg = Config.model_validate({"name": "x", "private_dataset": "p", "backlog": "b", "method": {"name": "rnm"},
                                 "task": {**TASK.model_dump(), "type": "classification", "labels": labels}})
    rng = np.random.default_rng(12)
    records = [(x, labels[int(rng.integers(4))]) for x, _ in make_records(60, seed=13)]
    settings = [DPSetting(1.0, {"noise_multiplier": 3.0}), DPSetting(8.0, {"noise_multiplier": 0.3})]
    scores = label_attack_scores(LabelCopyingLLM(), cfg, records, range(16), range(16, 60), teachers=10,
                                 rnm_settings=settings, rng=rng)
    results = {(r.method, r.epsilon): r for r in to_results("label", scores, rng=rng)}
    assert {(r.members, r.nonmembers) for r in results.values()} == {(16, 240)}
    assert {s.method for s in scores} == {"icl", "icl-ref", "rnm"}
    icl = results[("icl", None)].auroc
    assert icl > 0.9
    # a member's teacher always votes its label; noise large against one vote hides it
    assert results[("rnm", None)].auroc > 0.55  # one vote of ten sometimes decides the plain vote
    assert results[("rnm", 1.0)].auroc < icl - 0.2 and abs(results[("rnm", 1.0)].auroc - 0.5) < 0.15
    # the released labels are 0/1 scores
    assert set(np.unique(np.r_[scores[2].members, scores[2].nonmembers])) <= {0.0, 1.0}


# --------------------------------------------------------------------------------------------- the real models

@pytest.mark.slow
@pytest.mark.model
def test_demo_mia_end_to_end_on_the_embedded_models():
    from dpicl.evaluation.mia import run_demo_mia
    from dpicl.inference import ModelNotAvailableError
    from dpicl.inference.models import resolve_encoder, resolve_llm

    try:
        resolve_llm("smollm2")
        resolve_encoder("all-MiniLM-L6-v2")
    except ModelNotAvailableError as err:
        pytest.skip(f"embedded models not installed: {err}")
    timings: dict = {}
    results = run_demo_mia(members=2, nonmembers=2, teachers=2, shots=1, candidates=2, epsilons=(8.0,),
                           methods=("esa", "ksa-ptr"), probability_examples=3, mozo_shots=2, ada_members=2, seed=0,
                           bootstrap=20, max_new_tokens=10, timings=timings)
    rows = {(r.attack, r.method, r.epsilon) for r in results}
    assert {("repeat", "icl", None), ("repeat", "esa", 8.0), ("repeat", "ksa-ptr", 8.0),
            ("probability", "icl", None), ("probability", "dps-mozo", 8.0), ("probability", "adapmixed", 8.0)} <= rows
    for r in results:
        d = r.to_dict()
        assert 0.0 <= d["auroc"] <= 1.0 and math.isfinite(d["ci_low"]) and math.isfinite(d["ci_high"])
        assert (d["members"], d["nonmembers"]) == ((2, 2) if r.attack == "repeat" else (3, 6))
        assert all(math.isfinite(v) for v in d["details"].values())
    assert timings and all(v >= 0 for v in timings.values())
