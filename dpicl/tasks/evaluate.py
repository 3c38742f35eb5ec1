"""Tasks of flow `evaluate`: build one repetition's ensemble, sweep one method over ε, store and report.

The ensemble holds private text, so it stays in this process's memory under an opaque handle; tasks pass the
handle and return metric values only (privacy invariant 5).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from prefect import get_run_logger, task

from dpicl.evaluation import sweep
from dpicl.evaluation.report import free_baselines_ahead, free_note, markdown_table, plot, summarize
from dpicl.privacy.rng import benchmark_rng, derived_seed
from dpicl.storage.evaluations import store_evaluation
from dpicl.tasks import context
from dpicl.tasks.common import STAGE

_ENSEMBLES: dict[str, sweep.Ensemble] = {}


@task(name="ensemble", **STAGE)
def build_ensemble(config_paths: list[str], queries: int, repetition: int, seed: int | None,
                   delta: float | None) -> dict:
    """Sample, prompt and run every backend call of one repetition; returns a handle and public counts."""
    configs = [context.config(p) for p in config_paths]
    base = sweep.check_configs(configs)
    data = sweep.load_benchmark(configs, queries)
    logger = get_run_logger()
    ens = sweep.build_ensemble(configs, data, context.backend(base), context.encoder,
                               benchmark_rng(seed, repetition, "ensemble"), delta=delta,
                               teacher_key=None if seed is None else derived_seed(seed, "teacher-key"),
                               progress=lambda stage: logger.info("repetition %d: %s", repetition, stage))
    handle = uuid.uuid4().hex
    _ENSEMBLES[handle] = ens
    return {"handle": handle, "queries": len(ens.queries), "private_records": len(data[0]),
            "sampling_rate": ens.sampling_rate, "delta": ens.delta}


@task(name="baselines", **STAGE)
def score_baselines(handle: str, metrics: list[str] | None, repetition: int) -> list[dict]:
    """Zero-shot, (public) few-shot and the public k-shot prompt: a teachers' row is the mean over the individual
    teachers."""
    ens = _ENSEMBLES[handle]
    rows = []
    for name, answers in ens.answers.items():
        if isinstance(answers[0], str):  # one answer per query
            scores = sweep.score(ens.cfg, answers, ens.references, metrics)
        else:
            per_teacher = [sweep.score(ens.cfg, [a[t] for a in answers], ens.references, metrics)
                           for t in range(len(answers[0]))]
            scores = {m: sum(s[m] for s in per_teacher) / len(per_teacher) for m in per_teacher[0]}
        rows += [{"setting": name, "method": None, "epsilon": None, "repetition": repetition, "metric": m,
                  "value": v} for m, v in scores.items()]
    return rows


@task(name="sweep-method", **STAGE)
def sweep_method(handle: str, config_path: str, label: str, epsilons: list[float], metrics: list[str] | None,
                 repetition: int, seed: int | None) -> list[dict]:
    """One method at every ε and without noise, on the repetition's shared ensemble; its rows are named by
    `label` (`sweep.method_labels`)."""
    ens, cfg = _ENSEMBLES[handle], context.config(config_path)
    rng = benchmark_rng(seed, repetition, cfg.name)
    backend = context.backend(cfg)
    rows = []
    for eps in [*epsilons, sweep.INF]:
        answers, passed = sweep.method_answers(cfg, ens, eps, backend, rng)
        eps_label = "∞" if eps == sweep.INF else f"{eps:g}"
        for suffix, texts in answers.items():
            setting = f"{label}{suffix} ε={eps_label}"
            scores = sweep.score(cfg, texts, ens.references, metrics)
            if passed is not None:
                scores["ptr_passed_%"] = 100.0 * passed
            rows += [{"setting": setting, "method": f"{label}{suffix}", "epsilon": eps,
                      "repetition": repetition, "metric": m, "value": v} for m, v in scores.items()]
    return rows


@task(name="release-ensemble", **STAGE)
def drop_ensemble(handle: str) -> None:
    _ENSEMBLES.pop(handle, None)


@task(name="store-and-report", **STAGE)
def store_and_report(db_path: str, sweep_id: str, meta: dict, rows: list[dict], out_dir: str) -> dict:
    """Write the rows to DuckDB (one transaction), the plot (PNG) and the report (markdown) to `out_dir`."""
    with context.database(db_path) as con:
        store_evaluation(con, sweep_id, meta, rows)
    summary = summarize(rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = f"{meta['backlog']}: {meta['queries']} queries, δ = {meta['delta']:.2g}, {meta['repetitions']} rep."
    png = plot(summary, out / f"{sweep_id}.png", title)
    table = markdown_table(summary)
    behind = free_baselines_ahead(summary)
    note = f"\n\n{free_note(behind)}" if behind else ""
    report = out / f"{sweep_id}.md"
    report.write_text(f"## Sweep {sweep_id}\n\n{title}\n\n{table}{note}\n\nPlot: `{png}`\n")
    return {"summary": summary, "table": table, "plot": str(png), "report": str(report), "free_ahead": behind}
