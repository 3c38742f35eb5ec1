"""Flow `evaluate`: a privacy–utility sweep of the configs' methods × ε on their benchmark data, with zero-shot
and non-private baselines; results go to DuckDB (table `evaluations`), a PNG plot and a markdown report (also a
Prefect artifact). Numbers only leave the process: answers, prompts and teacher outputs stay in memory. Only the
final write to the database runs under its single-writer concurrency limit (`dpicl.flows.locking`): the sweep
itself works on an in-memory copy of the benchmark data.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from prefect.runtime import flow_run

from dpicl.config import resolve_config_path
from dpicl.evaluation.sweep import check_configs, method_labels, unavailable_metrics
from dpicl.flows.locking import database_writer
from dpicl.storage.db import default_db_path
from dpicl.tasks import context
from dpicl.tasks.evaluate import build_ensemble, drop_ensemble, score_baselines, store_and_report, sweep_method


@flow(name="evaluate", persist_result=False)
def evaluate(configs: list[str], epsilons: list[float] = (1.0, 3.0, 8.0), queries: int = 100,
             repetitions: int = 1, seed: int | None = None, delta: float | None = None,
             metrics: list[str] | None = None, out_dir: str = "evaluation", db: str | None = None) -> dict:
    """Sweep and report; returns the sweep id, the summary table and the paths of the plot and the report."""
    if queries < 1 or repetitions < 1:
        raise ValueError(f"need queries ≥ 1 and repetitions ≥ 1 (got {queries} and {repetitions})")
    if not epsilons or any(not e > 0 for e in epsilons):
        raise ValueError(f"epsilons must be positive numbers (got {list(epsilons)})")
    paths = [str(resolve_config_path(c)) for c in configs]
    configs_read = [context.config(p) for p in paths]
    base, labels = check_configs(configs_read), method_labels(configs_read)
    skipped = unavailable_metrics(base, metrics)  # also rejects unknown names before any model runs
    for name, reason in skipped.items():
        get_run_logger().warning("metric %s skipped: %s", name, reason)
    db_path = str(db or default_db_path())
    # where the results go must take them: a bad path fails now, not after the sweep's work, which it would lose
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    with database_writer(db_path), context.database(db_path):
        pass
    sweep_id = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S-") + uuid.uuid4().hex[:6]
    rows: list[dict] = []
    info: dict = {}
    for repetition in range(repetitions):
        info = build_ensemble(paths, queries, repetition, seed, delta)
        try:
            rows += score_baselines(info["handle"], metrics, repetition)
            for path, label in zip(paths, labels, strict=True):
                rows += sweep_method(info["handle"], path, label, sorted(epsilons), metrics, repetition, seed)
        finally:
            drop_ensemble(info["handle"])
    meta = {"dataset": base.private_dataset, "backlog": base.backlog, "queries": info["queries"],
            "delta": info["delta"], "repetitions": repetitions, "flow_run_id": flow_run.get_id()}
    with database_writer(db_path):
        result = store_and_report(db_path, sweep_id, meta, rows, out_dir)
    create_markdown_artifact(
        f"### Sweep `{sweep_id}`\n\n{info['queries']} queries of `{base.backlog}`, δ = {info['delta']:.2g}, "
        f"q = {info['sampling_rate']:.4g}, {repetitions} repetition(s)\n\n{result['table']}\n\n"
        f"Plot: `{result['plot']}`", key="evaluation", description="privacy–utility sweep (numbers only)")
    return {"sweep_id": sweep_id, **meta, **result, "skipped_metrics": skipped}
