"""Scoring: the AUROC of members vs non-members with its bootstrap CI, the attacks' scores (``AttackScores``),
the result rows (``MIAResult``, numbers only) and their markdown table."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dpicl.evaluation.mia.common import _number
from dpicl.evaluation.mia.settings import DPSetting


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
            # w C as a matrix product first: a three-operand einsum runs an unoptimised b·M·N loop (~40× slower);
            # the sums are of halves below 2^53, exact either way
            stats[start:start + b] = np.einsum("bi,bi->b", w @ c, v) / (m.size * n.size)
        low, high = (float(x) for x in np.quantile(stats, [(1 - confidence) / 2, (1 + confidence) / 2]))
    return AUROC(value, low, high, int(m.size), int(n.size), float(confidence), int(bootstrap))


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
    # the ROC curve: false-positive rates and true-positive rates at every threshold (numbers only)
    roc: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())

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
            "roc": {"fpr": [float(x) for x in self.roc[0]], "tpr": [float(x) for x in self.roc[1]]},
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
            details=details, roc=roc_curve(s.members, s.nonmembers),
        ))
    return out


def roc_curve(member_scores, nonmember_scores) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(false-positive rates, true-positive rates) of members (positives) vs non-members (sklearn's roc_curve)."""
    from sklearn.metrics import roc_curve as sklearn_roc_curve

    m = _scores("member_scores", member_scores)
    n = _scores("nonmember_scores", nonmember_scores)
    fpr, tpr, _ = sklearn_roc_curve(np.r_[np.ones(m.size), np.zeros(n.size)], np.r_[m, n])
    return tuple(float(x) for x in fpr), tuple(float(x) for x in tpr)


def roc_plot(results: Sequence[MIAResult], path) -> None:
    """PNG with one panel per attack: each method's ROC curve (ε in the legend, with its AUROC) and chance."""
    import matplotlib

    matplotlib.use("Agg")  # no display on workers
    import matplotlib.pyplot as plt

    attacks = list(dict.fromkeys(r.attack for r in results))
    fig, axes = plt.subplots(1, len(attacks), figsize=(5 * len(attacks), 4.6), squeeze=False)
    try:
        for ax, attack in zip(axes[0], attacks):
            for r in (r for r in results if r.attack == attack):
                eps = "∞" if r.epsilon is None else f"{r.epsilon:g}"
                ax.plot(r.roc[0], r.roc[1], label=f"{r.method}, ε={eps} (AUROC {r.auroc:.2f})")
            ax.plot([0, 1], [0, 1], color="grey", linestyle=":", label="chance")
            ax.set(title=f"{attack} attack", xlabel="false-positive rate (non-members flagged)",
                   ylabel="true-positive rate (members found)", xlim=(0, 1), ylim=(0, 1))
            ax.legend(fontsize="x-small", loc="lower right")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


def _matrix_scores(method: str, matrix: np.ndarray, setting: DPSetting | None, details: Mapping[str, float], *,
                   reference: np.ndarray | None = None) -> list[AttackScores]:
    """The scores of the n × n design (probability and label attacks): ``matrix[x′, i]`` scores query i with
    record x′ as the demonstration; members are the diagonal (x′ = x_i), non-members the rest. With
    ``reference`` (the public zero-shot score of each query's y_i) also ``method-ref``: the matrix minus it."""
    diagonal = np.eye(len(matrix), dtype=bool)
    out = [AttackScores(method, matrix[diagonal], matrix[~diagonal], setting, details)]
    if reference is not None:
        calibrated = matrix - reference[None, :]
        out.append(AttackScores(method + "-ref", calibrated[diagonal], calibrated[~diagonal], setting, details))
    return out


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
