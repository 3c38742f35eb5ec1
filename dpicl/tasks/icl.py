"""The `synthetic-icl` answer stage: plain in-context learning with demonstrations of a public dataset (typically
DP synthetic demonstrations from `synthesize_demos`), drawn per query or the query's most similar ones, and with
`consensus` the answer of several such prompts that is nearest all the others. No private record is read, so every
answer is post-processing: it gets a ledger entry (every release has one) whose event costs nothing."""

from __future__ import annotations

import itertools
from dataclasses import replace

from prefect import get_run_logger, task

from dpicl.embeddings.candidates import consensus, most_similar
from dpicl.inference.teachers import greedy_params, label_votes
from dpicl.privacy.accounting.guard import require_paid
from dpicl.prompts import icl_groups, render_prompt
from dpicl.storage import get_queries, load_public_records
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
        demos = [(r.input, r.output) for r in load_public_records(con, m.demos_dataset, "demos_dataset")]
        queries = get_queries(con, cfg.backlog, query_ids)
    inputs = [queries[q].input for q in query_ids]
    ranked = [None] * len(query_ids)
    if m.demonstrations == "nearest":  # no connection is open while the encoder runs
        encoder = context.encoder(cfg)
        ranked = most_similar(encoder.encode(inputs, batched=True),
                              context.public_embeddings(encoder, tuple(d[0] for d in demos)),
                              max(m.shots, m.consensus or 0)).tolist()
    # the demonstrations shown depend on the query only (public data: deterministic)
    prompts = [[render_prompt(cfg.task, [demos[i] for i in group], text)
                for group in icl_groups(len(demos), m.shots, f"{m.demos_dataset}\0{query_id}", row, m.consensus)]
               for query_id, text, row in zip(query_ids, inputs, ranked, strict=True)]
    backend = context.backend(cfg)
    details = {"demos_dataset": m.demos_dataset, "shots": m.shots,
               **({"demonstrations": "nearest"} if m.demonstrations == "nearest" else {})}
    if cfg.task.type == "classification":  # one prompt per query (check_config refuses consensus here)
        votes = label_votes(backend, [p for (p,) in prompts], cfg, inputs)
        answers, extra = [cfg.task.labels[v] for v in votes], [{}] * len(query_ids)
    else:
        # public prompts: batched freely, the beginnings they share prefilled once
        flat = backend.generate([p for group in prompts for p in group],
                                replace(greedy_params(cfg), public_prompts=True), progress=True)
        sizes = [len(group) for group in prompts]
        groups = _split(flat, sizes)
        answers, extra = [group[-1] for group in groups], [{}] * len(query_ids)
        if m.consensus:  # public texts only: embedded together, batched
            chosen = [consensus(v) for v in _split(context.encoder(cfg).encode(flat, batched=True), sizes)]
            answers = [group[i] for group, i in zip(groups, chosen, strict=True)]
            extra = [{"consensus": m.consensus, "chosen_prompt": i} for i in chosen]
    with context.database(db_path) as con:
        reservations = context.reserve_many(con, cfg, run_id, query_ids, m.name, event_json)  # free: all of them
        for query_id, answer, more in zip(query_ids, answers, extra, strict=True):
            reservation = reservations[query_id]
            record_release(con, reservation, run_id=run_id, mechanism=m.name, answer=answer,
                           details={**details, **more})
            rows.append({"query_id": query_id, "status": "answered", "epsilon_cost": reservation.epsilon_cost})
    get_run_logger().info("answered %d queries with public demonstrations (no privacy cost)", len(rows))
    return rows


def _split(flat, sizes: list[int]) -> list:
    """`flat` (a list or an array) cut into consecutive parts of `sizes`."""
    ends = list(itertools.accumulate(sizes))
    return [flat[end - size:end] for size, end in zip(sizes, ends, strict=True)]
