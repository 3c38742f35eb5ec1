"""The `synthetic-icl` answer stage: plain in-context learning with demonstrations of a public dataset (typically
DP synthetic demonstrations from `synthesize_demos`). No private record is read, so every answer is
post-processing: it gets a ledger entry (every release has one) whose event costs nothing."""

from __future__ import annotations

from prefect import get_run_logger, task

from dpicl.inference.teachers import greedy_params, label_votes
from dpicl.privacy.accounting.guard import require_paid
from dpicl.prompts import public_teacher_groups, render_prompt
from dpicl.storage import get_dataset, get_queries, load_records
from dpicl.storage.ledger import record_release
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


@task(name="icl", **STAGE)
def icl(db_path: str, run_id: str, query_ids: list[str]) -> list[dict]:
    """Returns one row per answered query (ids, status, ε cost 0)."""
    rows = []
    with context.database(db_path) as con:
        run = context.run(con, run_id)
        cfg, m, event_json = run.cfg, run.cfg.method, run.event_json
        require_paid(event_json, run.plan.event(), what="these answers")  # no private data is read: free
        dataset = get_dataset(con, m.demos_dataset)
        if dataset["kind"] != "public":
            raise ValueError(f"demos_dataset {m.demos_dataset!r} was ingested as {dataset['kind']!r}; synthetic-icl "
                             "uses public demonstrations only (e.g. those written by synthesize_demos)")
        demos = [(r.input, r.output) for r in load_records(con, m.demos_dataset)]
        queries = get_queries(con, cfg.backlog, query_ids)
        prompts = []
        for query_id in query_ids:
            # the demonstrations shown depend on the query only (public data: deterministic, cacheable)
            (chosen,) = public_teacher_groups(len(demos), 1, m.shots, f"{m.demos_dataset}\0{query_id}")
            prompts.append(render_prompt(cfg.task, [demos[i] for i in chosen], queries[query_id].input))
    backend = context.backend(cfg)  # no connection is open while the model runs
    if cfg.task.type == "classification":
        votes = label_votes(backend, prompts, cfg, [queries[q].input for q in query_ids])
        answers = [cfg.task.labels[v] for v in votes]
    else:
        answers = backend.generate(prompts, greedy_params(cfg), progress=True)
    with context.database(db_path) as con:
        reservations = context.reserve_many(con, cfg, run_id, query_ids, m.name, event_json)  # free: all of them
        for query_id, answer in zip(query_ids, answers, strict=True):
            reservation = reservations[query_id]
            record_release(con, reservation, run_id=run_id, mechanism=m.name, answer=answer,
                           details={"demos_dataset": m.demos_dataset, "shots": m.shots})
            rows.append({"query_id": query_id, "status": "answered", "epsilon_cost": reservation.epsilon_cost})
    get_run_logger().info("answered %d queries with public demonstrations (no privacy cost)", len(rows))
    return rows
