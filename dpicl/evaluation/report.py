"""A sweep's table and plot: mean ± standard deviation over repetitions of each setting's metrics, and each
metric against ε with the zero-shot and non-private lines."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from dpicl.metrics import over_seeds

DIAGNOSTICS = ("ptr_passed_%",)  # tabled, not plotted: they describe a method, not the answers' quality
BASELINE_STYLES = {"zero-shot": ("tab:gray", "--"), "few-shot": ("black", ":"), "public few-shot": ("tab:brown", "-."),
                   "public 4-shot": ("tab:olive", "--"), "public consensus": ("tab:pink", "-."),
                   "zero-shot consensus": ("tab:gray", ":")}


def summarize(rows: Sequence[dict]) -> list[dict]:
    """One entry per setting (in measured order): method, ε and per metric the mean and the sample standard
    deviation over repetitions (`dpicl.metrics.over_seeds`) and the number of repetitions."""
    groups: dict[str, dict] = {}
    per_repetition: dict[str, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        groups.setdefault(r["setting"], {"setting": r["setting"], "method": r["method"], "epsilon": r["epsilon"],
                                         "metrics": {}})
        per_repetition[r["setting"]][r["repetition"]][r["metric"]] = float(r["value"])
    for setting, reps in per_repetition.items():
        for metric, (mean, std) in over_seeds(list(reps.values())).items():
            groups[setting]["metrics"][metric] = {"mean": mean, "std": std, "n": len(reps)}
    return list(groups.values())


def free_baselines_ahead(summary: Sequence[dict]) -> list[str]:
    """The DP settings (finite ε) that a free baseline — the zero-shot answer, one from public demonstrations, or
    the consensus of such answers — beats on the sweep's first metric, each named with both means: paying for those
    answers buys nothing."""
    metrics = [m for m in metric_names(summary) if m not in DIAGNOSTICS]
    if not metrics:
        return []
    metric = metrics[0]
    free = {s["setting"]: s["metrics"][metric]["mean"] for s in summary
            if s["method"] is None and metric in s["metrics"]
            and s["setting"].startswith(("zero-shot", "public "))}
    if not free:
        return []
    best, top = max(free.items(), key=lambda kv: kv[1])
    return [f"{s['setting']}: {metric} {s['metrics'][metric]['mean']:.2f} < {best} {top:.2f}" for s in summary
            if s["method"] is not None and s["epsilon"] is not None and math.isfinite(s["epsilon"])
            and metric in s["metrics"] and s["metrics"][metric]["mean"] < top]


def free_note(behind: Sequence[str]) -> str:
    """The report's sentence on the DP settings a free answer beats (`free_baselines_ahead`), and, where that answer
    comes from public data, the config that releases it at no cost."""
    note = f"A free answer scores higher than these DP settings (their answers would buy nothing): {'; '.join(behind)}."
    if "< public " in behind[0]:  # every line names the same best free answer
        note += (" The pipeline releases the free answers from public data at no cost: `method: {name: synthetic-icl, "
                 "demos_dataset: <public>, shots: 4, demonstrations: nearest}` for the public 4-shot answer, with "
                 "`consensus: <teachers>` for the public consensus.")
    return note


def metric_names(summary: Sequence[dict]) -> list[str]:
    return list(dict.fromkeys(m for s in summary for m in s["metrics"]))


def markdown_table(summary: Sequence[dict]) -> str:
    """Settings × metrics as "mean ± std" (std only with more than one repetition)."""
    metrics = metric_names(summary)
    lines = ["| setting | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
    for s in summary:
        cells = []
        for m in metrics:
            v = s["metrics"].get(m)
            cells.append("" if v is None else f"{v['mean']:.2f}" + (f" ± {v['std']:.2f}" if v["n"] > 1 else ""))
        lines.append(f"| {s['setting']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summary: Sequence[dict], path: Path, title: str, metrics: Sequence[str] | None = None) -> Path:
    """PNG with one panel per metric: each method's mean ± std against ε (log scale), its noiseless aggregation
    (ε = ∞) as a hollow marker at the right edge, and the baselines as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")  # no display on workers
    import matplotlib.pyplot as plt

    metrics = list(metrics or [m for m in metric_names(summary) if m not in DIAGNOSTICS])
    finite = sorted({s["epsilon"] for s in summary if s["epsilon"] is not None and math.isfinite(s["epsilon"])})
    x_inf = finite[-1] * 2.5 if finite else 1.0
    fig, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        by_method: dict[str, list[dict]] = defaultdict(list)
        for s in summary:
            if metric in s["metrics"]:
                by_method[s["method"] or s["setting"]].append(s)
        for name, entries in by_method.items():
            if entries[0]["method"] is None:  # a baseline
                color, style = BASELINE_STYLES.get(name, ("tab:olive", "--"))
                ax.axhline(entries[0]["metrics"][metric]["mean"], color=color, linestyle=style, label=name)
                continue
            for variant in dict.fromkeys(e["setting"].split(" ε=")[0] for e in entries):
                points = [e for e in entries if e["setting"].split(" ε=")[0] == variant]
                noisy = [e for e in points if math.isfinite(e["epsilon"])]
                line = ax.errorbar([e["epsilon"] for e in noisy], [e["metrics"][metric]["mean"] for e in noisy],
                                   yerr=[e["metrics"][metric]["std"] for e in noisy], marker="o", capsize=3,
                                   label=variant)
                for e in points:
                    if not math.isfinite(e["epsilon"]):
                        ax.plot([x_inf], [e["metrics"][metric]["mean"]], marker="o", markerfacecolor="none",
                                color=line[0].get_color())
        ax.set_xscale("log", base=2)
        ticks = [*finite, x_inf]
        ax.set_xticks(ticks, [f"{t:g}" for t in finite] + ["∞"])
        ax.minorticks_off()
        ax.set_xlabel("ε (hollow: no noise)")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path
