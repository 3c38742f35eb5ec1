"""The `synthesize_demos` stage: DP synthetic demonstrations (paper 002's DP few-shot generation, or DPS-MOZO+Off
of paper 000) written as a public dataset, paid for by **one** ledger entry reserved before the first token.

* classification (dp-fewshot): `demos` texts per label, each label generated from its own pool of private
  records (disjoint pools: parallel composition, so the charge is that of the most expensive pool);
* open-form: the outputs of `demos` inputs of the public dataset, generated from the whole private pool.
"""

from __future__ import annotations

import uuid

from prefect import get_run_logger, runtime, task

from dpicl import methods
from dpicl.config import Config
from dpicl.inference.base import require
from dpicl.planning import for_people
from dpicl.preflight import check_synthesis
from dpicl.privacy.accounting.guard import require_paid
from dpicl.privacy.rng import make_rng
from dpicl.progress import track
from dpicl.storage import get_dataset, load_public_records, load_records
from dpicl.storage.ledger import BudgetError, require_budget
from dpicl.storage.runs import create_run, finish_run
from dpicl.storage.synthetic import check_new_dataset, write_synthetic_dataset
from dpicl.tasks import context
from dpicl.tasks.common import STAGE


class BudgetCannotPayError(BudgetError):
    """The privacy budget cannot pay for the synthesis (nothing was charged or generated)."""


def _pools(cfg: Config, records: list) -> dict[str | None, list]:
    """Private records per label (classification) or all of them under None (open-form)."""
    if cfg.task.type != "classification":
        return {None: records}
    pools = {label: [r for r in records if r.output == label] for label in cfg.task.labels}
    empty = [label for label, pool in pools.items() if not pool]
    if empty:
        raise ValueError(f"no private records with the labels {empty}: every label needs its own pool")
    return pools


def _public_inputs(con, cfg: Config, count: int) -> list[str]:
    inputs = [r.input for r in load_public_records(con, cfg.public_dataset, "public_dataset")][:count]
    if len(inputs) < count:
        raise ValueError(f"public dataset {cfg.public_dataset!r} has {len(inputs)} inputs; {count} needed (lower "
                         "method.demos)")
    return inputs


def _check_paid(cfg: Config, method, plan, event, pools: dict, jobs: list) -> None:
    """Before the first token: the event of what is about to be used — the sampling rate, the splits, the noise,
    the tokens and the number of texts generated from each pool — must be the event the ledger reserved."""
    for label, pool in pools.items():
        texts = sum(job_label == label for job_label, _ in jobs)
        require_paid(event, method.synthesis_used(cfg, plan, pool, texts), what="this synthesis")


@task(name="synthesize", **STAGE)
def synthesize(config_path: str, db_path: str) -> dict:
    """Plan, pay (one ledger entry), generate, write the public dataset; returns names, counts and ε only."""
    cfg = context.config(config_path)
    m, syn = cfg.method, cfg.synthetic
    method = methods.get(m.name)
    with context.database(db_path) as con:
        check_synthesis(con, cfg)  # the method, the task type, the datasets' kinds, the budget, the new name
    backend = context.backend(cfg)
    require(backend, "next_token_logprobs")
    run_id = uuid.uuid4().hex
    with context.database(db_path) as con:
        check_new_dataset(con, syn.name)  # again: the name may have been taken while the model loaded
        budget = require_budget(con, cfg.private_dataset)
        dataset = get_dataset(con, cfg.private_dataset)
        pools = _pools(cfg, load_records(con, cfg.private_dataset))
        inputs = _public_inputs(con, cfg, m.demos) if cfg.task.type != "classification" else []
        plan, event = method.synthesis_plan(cfg, pools, syn.epsilon or budget.epsilon, budget.delta)
        flow_run_id = runtime.flow_run.id
        create_run(con, run_id, m.name, cfg.private_dataset, f"synthetic:{syn.name}", cfg.model_dump(mode="json"),
                   str(flow_run_id) if flow_run_id else None)
        reservation = context.reserve(con, cfg, run_id, run_id, f"synthesize-{m.name}", event.to_json(),
                                      backlog=f"synthetic:{syn.name}")
        if reservation is None:
            finish_run(con, run_id, "refused_budget")
            raise BudgetCannotPayError(
                f"the budget of {cfg.private_dataset!r} cannot pay for this synthesis (ε {budget.epsilon:g} in all); "
                "lower synthetic.epsilon, method.demos or generation.max_new_tokens")
    rng = make_rng()
    rows = []
    jobs = [(label, None) for label in pools for _ in range(m.demos)] if inputs == [] else \
        [(None, x) for x in inputs]
    _check_paid(cfg, method, plan, event, pools, jobs)
    for label, public_input in track(jobs, f"synthesize ({m.name})"):  # no connection open
        rows.append(method.synthesize_text(cfg, backend, plan, pools[label], dataset["teacher_key"], label,
                                           public_input, rng))
    with context.database(db_path) as con:
        n = write_synthetic_dataset(con, syn.name, cfg.task.type, rows, source_dataset=cfg.private_dataset,
                                    run_id=run_id, entry_id=reservation.entry_id)
        finish_run(con, run_id, "completed")
    numbers = plan.numbers()
    get_run_logger().info("synthesized %d demonstrations into %r for ε %.4f: %s", n, syn.name,
                          reservation.epsilon_cost, for_people(numbers))
    return {"run_id": run_id, "dataset": syn.name, "demonstrations": n, "epsilon_cost": reservation.epsilon_cost,
            "epsilon_spent": reservation.epsilon_after, "plan": numbers}
