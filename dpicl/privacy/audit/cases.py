"""The audited mechanisms: worst-case neighbouring inputs, output statistic and claimed ε of each.

Every audit calls the shipped mechanism code (``dpicl.privacy.mechanisms``) on two neighbouring inputs D, D′ many
times and returns the samples with the ε that the repository's own accountant (``accounting.total_epsilon``)
claims for ONE invocation with the same parameters at sampling rate q = 1: the audit covers the aggregation
step itself, not the amplification by subsampling. Parameters are chosen so that the claimed ε is moderate
(≈ 2) and a deliberately broken variant is caught with the default number of trials.

Broken variants (``broken=...``) are for tests only: they run the real code with a wrong parameter (half the noise,
Δ = 1 where it must be 2, ε doubled) or with one internal function replaced for the duration of the call (a
skipped check or clamp), while the claimed ε stays that of the correct mechanism. Replacing a module attribute is
not thread-safe; never run a broken audit next to real releases in one process.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..accounting.auto import total_epsilon
from ..mechanisms import adapmixed, dp_fewshot, dpm, dps_mozo, esa, joint_em, ksa_ptr, rnm, sga
from .batch import batched_draws
from .estimate import SamplePair, pair_epsilon

DEFAULT_DELTA = 1e-5


@dataclass
class Case:
    """What one audit run produced, before the statistics: the claim, the samples and their description."""

    claimed_epsilon: float
    pairs: list[SamplePair]
    parameters: dict
    neighbours: str
    statistic: str
    note: str | None = None
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    """One registered audit: its function ``(trials, rng, delta, broken) -> Case``, the default number of trials
    per neighbouring dataset, and its broken variants (name → what is wrong)."""

    name: str
    function: Callable[[int, np.random.Generator, float, str | None], Case]
    default_trials: int
    broken_variants: dict[str, str]
    description: str


@contextlib.contextmanager
def _patched(module, name: str, value):
    """Replace ``module.name`` by ``value`` for the duration of the block (broken variants only)."""
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def _loop(draw: Callable[[], object], trials: int) -> np.ndarray:
    return np.asarray([draw() for _ in range(trials)])


def _gaussian_pair(single_d, single_dp, statistic, trials, rng, **kw) -> SamplePair:
    x = batched_draws(single_d, single_d, statistic, trials, rng, **kw)
    y = batched_draws(single_dp, single_dp, statistic, trials, rng, **kw)
    return SamplePair(x, y, "continuous")


# ------------------------------------------------------------------------------------------------------- RNM

RNM_NOISE_MULTIPLIER = 2.0


def _audit_rnm(trials: int, rng: np.random.Generator, delta: float, broken: str | None) -> Case:
    nm = RNM_NOISE_MULTIPLIER / 2 if broken == "half-noise" else RNM_NOISE_MULTIPLIER
    h_d = rnm.vote_histogram([0] * 5 + [1] * 5, 2)
    h_dp = rnm.vote_histogram([0] * 6 + [1] * 4, 2)

    def margin(out):
        out = np.asarray(out)
        return out[..., 0] - out[..., 1]

    pair = _gaussian_pair(lambda r: rnm.noisy_histogram(h_d, nm, r), lambda r: rnm.noisy_histogram(h_dp, nm, r),
                          margin, trials, rng)
    return Case(
        claimed_epsilon=total_epsilon([rnm.cost(RNM_NOISE_MULTIPLIER, 1.0)], delta),
        pairs=[pair],
        parameters={"noise_multiplier": RNM_NOISE_MULTIPLIER, "sensitivity": rnm.SENSITIVITY,
                    "sigma": rnm.SENSITIVITY * RNM_NOISE_MULTIPLIER, "teachers": 10, "classes": 2,
                    "sampling_rate": 1.0},
        neighbours="votes of 10 teachers over 2 classes, 5/5 vs 6/4: one teacher's vote moves from class 1 to "
                   "class 0 (L2 change √2)",
        statistic="noisy vote margin H̃0 − H̃1 of rnm.noisy_histogram (the released label is its sign)",
    )


# ------------------------------------------------------------------------------------------------------- ESA

ESA_NOISE_MULTIPLIER = 2.0
_ESA_TEACHERS, _ESA_DIM = 10, 4


def _esa_embeddings(first_row: np.ndarray) -> np.ndarray:
    e = np.zeros((_ESA_TEACHERS, _ESA_DIM))
    for i in range(1, _ESA_TEACHERS):
        e[i, 1 + (i - 1) % (_ESA_DIM - 1)] = 1.0
    e[0] = first_row
    return e


def _audit_esa(trials: int, rng: np.random.Generator, delta: float, broken: str | None) -> Case:
    u = np.eye(_ESA_DIM)[0]
    e_d, e_dp = _esa_embeddings(u), _esa_embeddings(-3.0 * u)  # D′'s row has norm 3: the clip brings it to 1

    def projection(out):
        return np.asarray(out)[..., 0] * _ESA_TEACHERS  # noisy sum along u

    def run():
        return _gaussian_pair(lambda r: esa.noisy_mean(e_d, ESA_NOISE_MULTIPLIER, r),
                              lambda r: esa.noisy_mean(e_dp, ESA_NOISE_MULTIPLIER, r),
                              projection, trials, rng, chunk=100_000)

    if broken == "no-clip":
        with _patched(esa, "_clip_rows_to_unit_norm", lambda e: e):
            pair = run()
    elif broken == "sensitivity-1":  # noise for Δ = 1 while cost(...) below still charges for Δ = 2
        with _patched(esa, "SENSITIVITY", 1.0):
            pair = run()
    else:
        pair = run()
    return Case(
        claimed_epsilon=total_epsilon([esa.cost(ESA_NOISE_MULTIPLIER, 1.0)], delta),
        pairs=[pair],
        parameters={"noise_multiplier": ESA_NOISE_MULTIPLIER, "sensitivity": esa.SENSITIVITY,
                    "sigma": esa.SENSITIVITY * ESA_NOISE_MULTIPLIER, "teachers": _ESA_TEACHERS,
                    "dimension": _ESA_DIM, "sampling_rate": 1.0},
        neighbours="10 teacher embeddings; teacher 0 is +u on D and −3u on D′ (clipped to −u): the sum of unit "
                   "embeddings moves by 2 along u",
        statistic="projection of the noisy sum (N × esa.noisy_mean) on u",
    )


# ------------------------------------------------------------------------------------------------ joint EM

JEM_EPSILON = 2.0
_JEM_K = 2
_JEM_DOMAIN = [f"w{i}" for i in range(13)]
# One teacher's keyword set changes from {w1..w11} to {w0, w12}: counts [3,2,1,…,1,0] → [4,1,0,…,0,1]. The pattern
# was found by exhaustive search over small histograms (d ≤ 5, counts ≤ 3) as the pair with the largest privacy
# loss of the joint EM (k = 2); the loss grows with the number of middle items (0.65ε at d = 4, 0.9ε at d = 13),
# their probability shrinks; 10 middle items detect Δ = 1 best with 10⁴ trials.
_JEM_OTHERS = [{"w0", "w1"}, {"w0"}, {"w0"}]
_JEM_CHANGED = ({f"w{i}" for i in range(1, 12)}, {"w0", "w12"})


def _jem_exact(counts: np.ndarray, k: int, epsilon: float, sensitivity: float) -> tuple[list[str], np.ndarray]:
    """Pr[s] ∝ exp(ε·u(s)/(2Δ)), u(s) = −max_i (c_(i) − c_{s_i}), by enumeration (for the report only)."""
    cs = np.sort(counts)[::-1]
    seqs = list(itertools.permutations(range(counts.size), k))
    u = np.array([-max(cs[i] - counts[s[i]] for i in range(k)) for s in seqs])
    w = np.exp(epsilon * (u - u.max()) / (2 * sensitivity))
    return [",".join(_JEM_DOMAIN[i] for i in s) for s in seqs], w / w.sum()


def _audit_joint_em(trials: int, rng: np.random.Generator, delta: float, broken: str | None) -> Case:
    counts = [joint_em.histogram_on_domain(_JEM_OTHERS + [changed], _JEM_DOMAIN) for changed in _JEM_CHANGED]

    def draw(c):
        return ",".join(joint_em.select_keywords(_JEM_DOMAIN, c, _JEM_K, JEM_EPSILON, rng))

    sensitivity = joint_em.SENSITIVITY
    if broken == "sensitivity-1":
        sensitivity = 1.0  # the sampler draws for Δ = 1 while cost(...) below still charges for Δ = 2
        with _patched(joint_em, "SENSITIVITY", sensitivity):
            samples = [_loop(lambda c=c: draw(c), trials) for c in counts]
    else:
        samples = [_loop(lambda c=c: draw(c), trials) for c in counts]
    # Statistic: each released sequence's log-likelihood ratio log P_D(s)/P_D′(s) under the specified (correct)
    # distribution — fixed before any trial, so thresholding it ranks the 156 outcomes without spending trials on it.
    (labels, p), (_, q) = (_jem_exact(c, _JEM_K, JEM_EPSILON, joint_em.SENSITIVITY) for c in counts)
    llr = dict(zip(labels, np.log(p) - np.log(q)))
    (_, p_run), (_, q_run) = (_jem_exact(c, _JEM_K, JEM_EPSILON, sensitivity) for c in counts)
    return Case(
        claimed_epsilon=total_epsilon([joint_em.cost(JEM_EPSILON, 1.0)], delta),
        pairs=[SamplePair(np.array([llr[s] for s in samples[0]]), np.array([llr[s] for s in samples[1]]))],
        parameters={"epsilon": JEM_EPSILON, "k": _JEM_K, "sensitivity": joint_em.SENSITIVITY,
                    "domain_size": len(_JEM_DOMAIN), "teachers": len(_JEM_OTHERS) + 1, "sampling_rate": 1.0},
        neighbours="keyword counts [3,2,1,…,1,0] vs [4,1,0,…,0,1] over 13 domain words: one teacher's keyword set "
                   "changes from {w1..w11} to {w0, w12}",
        statistic="log-likelihood ratio, under the specified sampling distribution, of the released ranked keyword "
                  "pair (joint_em.select_keywords)",
        details={"exact_pair_epsilon": pair_epsilon(p_run, q_run, delta)},
    )


# -------------------------------------------------------------------------------------------------- KSA-PTR

PTR_EPSILON_EM = 0.5
PTR_NOISE_MULTIPLIER = 3.0
_PTR_K_MAX = 2
# (label, teachers' keyword sets on D, index of the teacher that changes, its set on D′)
_PTR_PAIRS = [
    ("three-way tie", [{"A", "B", "C"}] * 29 + [{"A", "C"}, {"B"}], 29, {"B", "C"}),
    ("tie above a large gap", [{"A", "B"}] * 99 + [{"A"}, {"B"}], 99, {"B"}),
    ("gap at the test threshold", [{"A", "B", "C"}] * 81 + [{"A"}] * 19, 81, {"B"}),
]
_PLACEHOLDER = "\x00"


def _ptr_label(released: list[str] | None) -> str:
    if released is None:
        return "none"
    return "(" + ",".join(sorted(t for t in released if t != _PLACEHOLDER)) + ")"


def _audit_ksa_ptr(trials: int, rng: np.random.Generator, delta: float, broken: str | None) -> Case:
    delta0 = delta / 2

    def draw(tokens, counts):
        if broken == "off-by-one":  # the reference code: release the first k* tokens while testing g[k*]
            tokens = [_PLACEHOLDER] + tokens[:-1]
        return _ptr_label(ksa_ptr.release_set(tokens, counts, PTR_EPSILON_EM, PTR_NOISE_MULTIPLIER, delta0, rng,
                                              k_max=_PTR_K_MAX))

    def run() -> list[SamplePair]:
        pairs = []
        for label, sets, changed, new in _PTR_PAIRS:
            sides = []
            for teacher_sets in (sets, sets[:changed] + [new] + sets[changed + 1:]):
                tokens, counts = ksa_ptr.histogram(teacher_sets)
                sides.append(_loop(lambda t=tokens, c=counts: draw(t, c), trials))
            pairs.append(SamplePair(sides[0], sides[1], "discrete", label))
        return pairs

    if broken == "no-test":
        with _patched(ksa_ptr, "ptr_passes", lambda *args, **kwargs: True):
            pairs = run()
    else:
        pairs = run()
    return Case(
        claimed_epsilon=total_epsilon([ksa_ptr.cost(PTR_EPSILON_EM, PTR_NOISE_MULTIPLIER, delta0, 1.0)], delta),
        pairs=pairs,
        parameters={"epsilon_em": PTR_EPSILON_EM, "noise_multiplier": PTR_NOISE_MULTIPLIER, "delta0": delta0,
                    "offset": ksa_ptr.ptr_offset(PTR_NOISE_MULTIPLIER, delta0), "k_max": _PTR_K_MAX,
                    "sensitivity": ksa_ptr.SENSITIVITY, "sampling_rate": 1.0},
        neighbours="three pairs, one teacher's keyword set changed in each: counts A=B=C=30 vs 29/31/30 (a tie: no "
                   "set is stable), A=B=100 vs 99/101 (a tie above a gap of 100), A=100, B=C=81 vs 99/82/81 (the "
                   "tested gap 19 vs 17 near the test's offset)",
        statistic="the released keyword set (ksa_ptr.release_set), or none when the test fails",
    )


# ------------------------------------------------------------------------------------------------------ DPM

DPM_NOISE_MULTIPLIER = 2.0
DPM_EM_EPSILON = 0.02
DPM_COUNT_EPSILON = 0.05
_DPM_POINTS, _DPM_INTERVAL = 512, 0.5


def _audit_dpm(trials: int, rng: np.random.Generator, delta: float, broken: str | None) -> Case:
    event = sga.cost(DPM_EM_EPSILON, DPM_COUNT_EPSILON, DPM_NOISE_MULTIPLIER, 1, 1.0)
    noise_std = DPM_NOISE_MULTIPLIER if broken == "sensitivity-1" else event.sigma
    params = dpm.DPMParams(em_epsilons=event.em_epsilons, count_scales=tuple(1 / e for e in event.count_epsilons),
                           noise_std=noise_std, interval=_DPM_INTERVAL)
    base = np.tile([0.6, 0.0], (_DPM_POINTS, 1))
    points = []
    for sign in (1.0, -1.0):
        x = base.copy()
        x[0] = [0.0, sign]
        points.append(x)

    def leaf_sums(clusters):  # Σ over leaves of (noisy sum along e1) = centre · max(noisy count, 1)
        return sum(np.asarray(c.centre)[..., 1] * max(c.noisy_count, 1.0) for c in clusters)

    chunk = 5_000
    kw = dict(chunk=chunk, check_reps=1, batched_names=("normal",), passthrough=("gumbel", "laplace"))
    pair = _gaussian_pair(lambda r: dpm.cluster(points[0], params, r), lambda r: dpm.cluster(points[1], params, r),
                          leaf_sums, trials, rng, **kw)
    return Case(
        claimed_epsilon=total_epsilon([event], delta),
        pairs=[pair],
        parameters={"levels": 1, "em_epsilon": DPM_EM_EPSILON, "count_epsilon": DPM_COUNT_EPSILON,
                    "noise_multiplier": DPM_NOISE_MULTIPLIER, "sensitivity": event.sensitivity, "sigma": event.sigma,
                    "points": _DPM_POINTS, "interval": _DPM_INTERVAL, "sampling_rate": 1.0},
        neighbours="512 unit-ball points in 2-D, 511 at (0.6, 0); the last one is (0, 1) on D and (0, −1) on D′ "
                   "(one point replaced: the leaf sums move by 2)",
        statistic="noisy leaf sums along e1, recovered from the released centres × noisy counts",
        note="exercises the whole of dpm.cluster, but on these inputs the tree is a single leaf with overwhelming "
             "probability, so only the Gaussian leaf sums are stressed; the split choice and Laplace counts run "
             "(their ε is in the claim) without being tested. Within a batch of 5000 trials the tree draws are "
             "shared and the leaf noise is per trial.",
    )


# --------------------------------------------------------------------------------------- DP few-shot (002)

FEWSHOT_NOISE_MULTIPLIER = 2.0
FEWSHOT_EPSILON0 = 2.0
_FEWSHOT_SPLITS = 4
_PUBLIC = np.log(np.array([0.3, 0.25, 0.2, 0.1, 0.1, 0.05]))  # synthetic public next-token distribution
_NEG = -np.inf


def _fewshot_dists(rows: list[list[float]], mode: str) -> tuple[np.ndarray, np.ndarray]:
    """Split distributions over the public top-2 tokens K = {0, 1} (dp_fewshot.public_vocabulary), from synthetic
    per-split log-probabilities over a 6-token vocabulary (entries off K are irrelevant)."""
    vocab = dp_fewshot.public_vocabulary(_PUBLIC, 2)
    lp = np.array([r + [-1.0] * 4 for r in rows])
    return vocab, dp_fewshot.split_distributions(lp, vocab, mode)


def _audit_fewshot_gaussian(trials: int, rng: np.random.Generator, delta: float, broken: str | None) -> Case:
    nm = FEWSHOT_NOISE_MULTIPLIER / 2 if broken == "half-noise" else FEWSHOT_NOISE_MULTIPLIER
    uniform = [[0.0, 0.0]] * (_FEWSHOT_SPLITS - 1)
    _, d = _fewshot_dists([[0.0, _NEG]] + uniform, "gaussian")
    _, dp = _fewshot_dists([[_NEG, 0.0]] + uniform, "gaussian")

    def margin(out):
        out = np.asarray(out)
        return out[..., 0] - out[..., 1]

    pair = _gaussian_pair(lambda r: dp_fewshot.noisy_scores(d, "gaussian", noise_multiplier=nm, rng=r),
                          lambda r: dp_fewshot.noisy_scores(dp, "gaussian", noise_multiplier=nm, rng=r),
                          margin, trials, rng)
    event = dp_fewshot.step_event("gaussian", 1.0, _FEWSHOT_SPLITS, noise_multiplier=FEWSHOT_NOISE_MULTIPLIER)
    return Case(
        claimed_epsilon=total_epsilon([event], delta),
        pairs=[pair],
        parameters={"mechanism": "gaussian", "noise_multiplier": FEWSHOT_NOISE_MULTIPLIER, "splits": _FEWSHOT_SPLITS,
                    "top_k": 2, "sensitivity": dp_fewshot.l2_sensitivity(_FEWSHOT_SPLITS), "sigma": event.sigma,
                    "sampling_rate": 1.0},
        neighbours="4 splits' next-token distributions over the public top-2 tokens; split 0 is one-hot on token "
                   "0 on D and on token 1 on D′, the others uniform (the mean moves by √2/M)",
        statistic="noisy score margin s̃0 − s̃1 of dp_fewshot.noisy_scores (the released token is its sign)",
    )


def _audit_fewshot_exponential(trials: int, rng: np.random.Generator, delta: float, broken: str | None) -> Case:
    eps0 = 2 * FEWSHOT_EPSILON0 if broken == "half-scale" else FEWSHOT_EPSILON0
    rest = [[_NEG, 0.0], [0.0, 0.0], [0.0, 0.0]]  # max-normalised: (0, 1), (1, 1), (1, 1)
    vocab, d = _fewshot_dists([[_NEG, 0.0]] + rest, "exponential")  # split 0 = (0, 1): token 0 two steps behind
    _, dp = _fewshot_dists([[0.0, _NEG]] + rest, "exponential")  # split 0 = (1, 0): tokens tied

    def token(out):
        return vocab[np.asarray(out)]

    pairs = []
    samples = []
    for dists in (d, dp):
        samples.append(batched_draws(
            lambda r, dists=dists: dp_fewshot.exponential_token(dists, eps0, r),
            lambda g, dists=dists: np.argmax(dp_fewshot.noisy_scores(dists, "exponential", epsilon0=eps0, rng=g),
                                             axis=-1),
            token, trials, rng).astype(np.int64))
    pairs.append(SamplePair(samples[0], samples[1], "discrete"))
    event = dp_fewshot.step_event("exponential", 1.0, _FEWSHOT_SPLITS, epsilon0=FEWSHOT_EPSILON0)
    return Case(
        claimed_epsilon=total_epsilon([event], delta),
        pairs=pairs,
        parameters={"mechanism": "exponential", "epsilon0": FEWSHOT_EPSILON0, "splits": _FEWSHOT_SPLITS, "top_k": 2,
                    "sensitivity": dp_fewshot.linf_sensitivity(_FEWSHOT_SPLITS),
                    "noise_scale": 2 * dp_fewshot.linf_sensitivity(_FEWSHOT_SPLITS) / FEWSHOT_EPSILON0,
                    "sampling_rate": 1.0},
        neighbours="4 splits' max-normalised distributions over the public top-2 tokens; split 0 is (0, 1) on D and "
                   "(1, 0) on D′, the others (0, 1), (1, 1), (1, 1): token 0 is 2/M behind on D and tied on D′, "
                   "where Pr[token 0] changes by exactly e^ε0",
        statistic="the released token (dp_fewshot.exponential_token)",
    )


# ------------------------------------------------------------------------------------------------ DPS-MOZO

MOZO_BETA = 0.02
MOZO_ALPHA = 20
_MOZO_ZERO_SHOT = np.log(np.array([0.55, 0.3, 0.1, 0.05]))
_MOZO_TOP_K = 3


def _inverse_cdf(ids: np.ndarray, probs: np.ndarray, u: np.ndarray) -> np.ndarray:
    """dps_mozo.step's draw for a batch of uniforms u (the same formula, vectorised; checked against step)."""
    cdf = np.cumsum(probs)
    j = np.minimum(np.searchsorted(cdf, u * cdf[-1], side="right"), len(ids) - 1)
    nonzero = np.flatnonzero(probs > 0)
    j = nonzero[np.searchsorted(nonzero, j, side="right") - 1]  # step walks down to a token of nonzero mass
    return ids[j]


def _audit_dps_mozo(trials: int, rng: np.random.Generator, delta: float, broken: str | None) -> Case:
    # one shot per token: the configuration whose bound is proven (more shots rest on the paper's unproven claim)
    shots = [np.array([[10.0, 0.0, 0.0, 0.0]]), np.array([[0.0, 0.0, 10.0, 0.0]])]
    kwargs = dict(top_k=_MOZO_TOP_K, beta=MOZO_BETA, alpha=MOZO_ALPHA)

    def run():
        samples, dists = [], []
        for one_shot in shots:
            ids, probs, _ = dps_mozo.next_token_distribution(_MOZO_ZERO_SHOT, one_shot, **kwargs)
            for seed in range(5):  # the vectorised draw is dps_mozo.step's own
                expected, _ = dps_mozo.step(_MOZO_ZERO_SHOT, one_shot, rng=np.random.default_rng(seed), **kwargs)
                if _inverse_cdf(ids, probs, np.random.default_rng(seed).random(1))[0] != expected:
                    raise RuntimeError("the vectorised draw does not reproduce dps_mozo.step")
            samples.append(_inverse_cdf(ids, probs, rng.random(trials)))
            dists.append(probs)
        return samples, dists

    if broken == "no-ball":
        with _patched(dps_mozo, "_choose_lambda", lambda one, zero, radius, order, upper: (upper, math.nan)):
            samples, dists = run()
    else:
        samples, dists = run()
    return Case(
        claimed_epsilon=total_epsilon([dps_mozo.cost(MOZO_BETA, MOZO_ALPHA, 1.0, 1, shots=1)], delta),
        pairs=[SamplePair(samples[0], samples[1], "discrete")],
        parameters={"beta": MOZO_BETA, "alpha": MOZO_ALPHA, "top_k": _MOZO_TOP_K, "shots": 1, "tokens": 1,
                    "radius": dps_mozo.ball_radius(MOZO_BETA, MOZO_ALPHA, 1),
                    "ball_order": dps_mozo.ball_order(MOZO_ALPHA), "sampling_rate": 1.0},
        neighbours="substitution of the token's one demonstration: its one-shot logits peak at token 0 (+10) on D "
                   "and at token 2 on D′; zero-shot distribution (0.55, 0.3, 0.1, 0.05), top-3",
        statistic="the released token (dps_mozo.step: next_token_distribution, then its inverse-CDF draw)",
        note="one shot per token, the ball at order 2α: the claimed ε is proven (4βα per token by the weak triangle "
             "inequality; docs/PRIVACY.md). Several shots per token rest on the paper's unproven claim (000 Thm B.3) "
             "and are not audited here",
        details={"exact_pair_epsilon": pair_epsilon(dists[0], dists[1], delta),
                 "distributions": [np.round(p, 6).tolist() for p in dists]},
    )


# ----------------------------------------------------------------------------------------------- AdaPMixED

ADAP_BETA = 0.05
ADAP_ALPHA = 18
_ADAP_PUBLIC = np.log(np.array([0.6, 0.3, 0.1]))


def _audit_adapmixed(trials: int, rng: np.random.Generator, delta: float, broken: str | None) -> Case:
    members = [np.array([[0.0, _NEG, _NEG]]), np.array([[_NEG, _NEG, 0.0]])]  # one member, one-hot on 0 or on 2
    screen = dict(top_k=3, lam=adapmixed.SCREEN_LAMBDA, sigma=adapmixed.SCREEN_SIGMA,
                  threshold=adapmixed.THRESHOLD, alpha=ADAP_ALPHA)
    p_0 = adapmixed.probs_from_logprobs(_ADAP_PUBLIC)

    def token(private: np.ndarray, p: np.ndarray, r: np.random.Generator) -> int:
        """adapmixed.step with the (deterministic) PMixED mixture computed once: the screen, then the draw."""
        passed = adapmixed.noisy_screen(private, p_0, rng=r, **screen).passed
        return adapmixed._sample(p if passed else p_0, r)

    def run():
        samples, dists = [], []
        for lp in members:
            private = adapmixed.probs_from_logprobs(lp)
            p, _ = adapmixed.pmixed(private, p_0, ADAP_BETA, ADAP_ALPHA)
            for seed in range(3):  # the same as the shipped step, draw for draw
                expected, _ = adapmixed.step(lp, _ADAP_PUBLIC, beta=ADAP_BETA, alpha=ADAP_ALPHA, top_k=3,
                                             rng=np.random.default_rng(seed))
                if token(private, p, np.random.default_rng(seed)) != expected:
                    raise RuntimeError("the audit's step does not reproduce adapmixed.step")
            samples.append(_loop(lambda: token(private, p, rng), trials))
            dists.append(p)
        return samples, dists

    if broken == "no-ball":
        with _patched(adapmixed, "choose_lambdas", lambda private, p_0, beta, alpha: np.ones(len(private))):
            samples, dists = run()
    else:
        samples, dists = run()
    return Case(
        claimed_epsilon=total_epsilon([adapmixed.cost(ADAP_ALPHA, ADAP_BETA, 1, 1)], delta),
        pairs=[SamplePair(samples[0], samples[1], "discrete")],
        parameters={"alpha": ADAP_ALPHA, "beta": ADAP_BETA, "members": 1, "tokens": 1, "top_k": 3,
                    "screen_lambda": adapmixed.SCREEN_LAMBDA, "screen_sigma": adapmixed.SCREEN_SIGMA,
                    "threshold": adapmixed.THRESHOLD, "radius": ADAP_BETA * ADAP_ALPHA},
        neighbours="one ensemble member replaced: one-hot on token 0 on D, on token 2 on D′; public distribution "
                   "(0.6, 0.3, 0.1)",
        statistic="the released token (adapmixed.noisy_screen, then the draw from the PMixED mixture or p_0)",
        details={"exact_pair_epsilon_if_screen_passes": pair_epsilon(dists[0], dists[1], delta),
                 "distributions_if_screen_passes": [np.round(p, 6).tolist() for p in dists]},
    )


SPECS: dict[str, Spec] = {s.name: s for s in [
    Spec("rnm", _audit_rnm, 1_000_000, {"half-noise": "noise multiplier halved"},
         "RNM-Gaussian vote (001 §3.1)"),
    Spec("esa", _audit_esa, 1_000_000,
         {"sensitivity-1": "noise calibrated to Δ = 1 instead of 2 (the papers' ESA code, §12.1 item 5)",
          "no-clip": "teacher embeddings not clipped to unit norm"},
         "Gaussian on the sum of unit embeddings (001 §3.2.1)"),
    Spec("ksa-jem", _audit_joint_em, 10_000,
         {"sensitivity-1": "joint EM with Δ = 1 instead of 2 (the papers' neighbor_type=1, §12.1 item 4)"},
         "KSA joint exponential mechanism (001 §3.2.2)"),
    Spec("ksa-ptr", _audit_ksa_ptr, 6_000,
         {"no-test": "the PTR test skipped (always passes)",
          "off-by-one": "the first k* tokens released while g[k*] is tested (the reference code, §12.1 item 1)"},
         "KSA propose-test-release with FindBestK (001 App A.3.2)"),
    Spec("sga", _audit_dpm, 1_000_000,
         {"sensitivity-1": "leaf-sum noise calibrated to Δ = 1 (add/remove) instead of 2 (one point replaced)"},
         "DPM private clustering for SGA (004)"),
    Spec("dp-fewshot-gaussian", _audit_fewshot_gaussian, 1_000_000, {"half-noise": "noise multiplier halved"},
         "DP few-shot generation, Gaussian token step (002)"),
    Spec("dp-fewshot-exponential", _audit_fewshot_exponential, 200_000,
         {"half-scale": "exponential noise of scale Δ/ε0 instead of 2Δ/ε0 (ε0 doubled)"},
         "DP few-shot generation, report-noisy-max token step with exponential noise (002)"),
    Spec("dps-mozo", _audit_dps_mozo, 200_000,
         {"no-ball": "the Rényi-ball λ search skipped (λ = λ_max for every demonstration)"},
         "DPS-MOZO token step (000)"),
    Spec("adapmixed", _audit_adapmixed, 4_000,
         {"no-ball": "the Rényi-ball λ search skipped (λ = 1 for every member)"},
         "AdaPMixED token step with noisy screening (003)"),
]}
