"""The `synthesize_demos` stage: DP synthetic demonstrations (paper 002's DP few-shot generation, or DPS-MOZO+Off
of paper 000) written as a public dataset, paid for by **one** ledger entry reserved before the first token.

* classification (dp-fewshot): `demos` texts per label, each label generated from its own pool of private
  records (disjoint pools: parallel composition, so the charge is that of the most expensive pool);
* open-form: the outputs of `demos` inputs of the public dataset, generated from the whole private pool.
"""

from __future__ import annotations

import uuid

from prefect import get_run_logger, runtime, task
from tqdm.auto import tqdm

from dpicl import planning
from dpicl.config import Config
from dpicl.decoding import dp_fewshot_text, dps_mozo_answer
from dpicl.inference.base import require
from dpicl.privacy.accounting.events import ComposedEvent
from dpicl.privacy.accounting.guard import require_paid
from dpicl.privacy.mechanisms import dp_fewshot
from dpicl.privacy.rng import make_rng
from dpicl.privacy.sampling import assign_teachers
from dpicl.prompts import render_prompt, zero_shot_prompt
from dpicl.storage import get_dataset, load_records
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


def _plan(cfg: Config, pools: dict, epsilon: float, delta: float) -> tuple[dict, object]:
    """Per-token parameters for the whole synthesis and its one privacy event."""
    m, tokens = cfg.method, cfg.generation.max_new_tokens
    if m.name == "dp-fewshot":
        rate = m.sampling_rate or dp_fewshot.pool_sampling_rate([len(p) for p in pools.values()], m.splits, m.shots)
        result = planning.plan("dp-fewshot", sampling_rate=rate, queries=m.demos, epsilon=epsilon, delta=delta,
                               max_new_tokens=tokens, splits=m.splits, mechanism=m.mechanism)
        return result, planning.METHODS["dp-fewshot"].event(result)
    n = len(pools[None])  # dps-mozo, offline: `demos` answers of DPS-MOZO, charged together
    result = planning.plan("dps-mozo", sampling_rate=min(1.0, m.shots / n), queries=m.demos, epsilon=epsilon,
                           delta=delta, dataset_size=n, max_new_tokens=tokens, shots=m.shots, alpha=m.alpha,
                           accept_unproven_guarantee=m.accept_unproven_guarantee)
    if m.beta is not None:
        result["beta"] = m.beta
    return result, ComposedEvent(planning.METHODS["dps-mozo"].event(result), m.demos)


def _public_inputs(con, cfg: Config, count: int) -> list[str]:
    dataset = get_dataset(con, cfg.public_dataset)
    if dataset["kind"] != "public":
        raise ValueError(f"public_dataset {cfg.public_dataset!r} was ingested as {dataset['kind']!r}; synthetic "
                         "demonstrations answer inputs of a dataset ingested with kind public")
    inputs = [r.input for r in load_records(con, cfg.public_dataset)][:count]
    if len(inputs) < count:
        raise ValueError(f"public dataset {cfg.public_dataset!r} has {len(inputs)} inputs; {count} needed (lower "
                         "method.demos)")
    return inputs


def _check_paid(cfg: Config, plan: dict, event, pools: dict, jobs: list) -> None:
    """Before the first token: the event of what is about to be used — the sampling rate, the splits, the noise,
    the tokens and the number of texts generated from each pool — must be the event the ledger reserved."""
    m, tokens = cfg.method, cfg.generation.max_new_tokens
    for label, pool in pools.items():
        texts = sum(job_label == label for job_label, _ in jobs)
        if m.name == "dp-fewshot":
            used = dp_fewshot.cost({**plan, "sampling_rate": plan["sampling_rate"], "splits": m.splits,
                                    "mechanism": m.mechanism, "tokens": texts * tokens})
        else:
            step = planning.METHODS["dps-mozo"].event({**plan, "sampling_rate": min(1.0, m.shots / len(pool)),
                                                       "tokens_per_query": tokens})
            used = ComposedEvent(step, texts)
        require_paid(event, used, what="this synthesis")


def _fewshot_demo(cfg: Config, backend, plan: dict, pool: list, teacher_key: bytes, label: str | None,
                  public_input: str | None, rng) -> tuple[str, str]:
    m, gen, syn = cfg.method, cfg.generation, cfg.synthetic
    ids = [r.record_id for r in pool]
    by_id = {r.record_id: r for r in pool}
    # every pool is sampled at the charged rate: the largest pool rate, or the configured one (_plan)
    rate = plan["sampling_rate"]
    if label is None:  # open-form: the demonstration's output for a public input
        public_prompt = zero_shot_prompt(cfg.task, public_input)

        def render(split):
            return render_prompt(cfg.task, [(by_id[r].input, by_id[r].output) for r in split], public_input)
    else:  # classification: an input for the label, demonstrations in the label template
        prefix = syn.label_template.format(output=label, input="").rstrip()
        head = [syn.instruction] if syn.instruction else []
        public_prompt = cfg.task.separator.join([*head, prefix])

        def render(split):
            shown = [syn.label_template.format(output=label, input=by_id[r].input) for r in split]
            return cfg.task.separator.join([*head, *shown, prefix])

    def private_prompts() -> list[str]:  # a fresh Poisson sample for every token
        return [render(split) for split in assign_teachers(ids, teacher_key, m.splits, m.shots, rate, rng)]

    text = dp_fewshot_text(backend, public_prompt, private_prompts, mechanism=m.mechanism, top_k=m.top_k,
                           noise_multiplier=plan.get("noise_multiplier"), epsilon0=plan.get("epsilon0"),
                           max_new_tokens=gen.max_new_tokens, stop=gen.stop, rng=rng).text
    return (public_input, text) if label is None else (text, label)


@task(name="synthesize", **STAGE)
def synthesize(config_path: str, db_path: str) -> dict:
    """Plan, pay (one ledger entry), generate, write the public dataset; returns names, counts and ε only."""
    cfg = context.config(config_path)
    m, syn = cfg.method, cfg.synthetic
    if m.name not in ("dp-fewshot", "dps-mozo") or syn is None:
        raise ValueError("synthesize_demos needs method dp-fewshot or dps-mozo and a `synthetic` section")
    backend = context.backend(cfg)
    require(backend, "next_token_logprobs")
    run_id = uuid.uuid4().hex
    with context.database(db_path) as con:
        check_new_dataset(con, syn.name)
        budget = require_budget(con, cfg.private_dataset)
        dataset = get_dataset(con, cfg.private_dataset)
        pools = _pools(cfg, load_records(con, cfg.private_dataset))
        if m.name == "dps-mozo" and cfg.task.type == "classification":
            raise ValueError("DPS-MOZO synthesizes open-form demonstrations only; use dp-fewshot for labels")
        inputs = _public_inputs(con, cfg, m.demos) if cfg.task.type != "classification" else []
        plan, event = _plan(cfg, pools, syn.epsilon or budget.epsilon, budget.delta)
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
        _check_paid(cfg, plan, event, pools, jobs)
        for label, public_input in tqdm(jobs, desc=f"synthesize ({m.name})", unit="demo"):
            if m.name == "dp-fewshot":
                rows.append(_fewshot_demo(cfg, backend, plan, pools[label], dataset["teacher_key"], label,
                                          public_input, rng))
            else:
                pool = pools[None]
                demos = [(r.input, r.output) for r in pool]
                text = dps_mozo_answer(
                    backend, zero_shot_prompt(cfg.task, public_input),
                    lambda i, x=public_input: render_prompt(cfg.task, [demos[i]], x), len(demos), shots=m.shots,
                    top_k=m.top_k, beta=plan["beta"], alpha=plan["alpha"], max_new_tokens=cfg.generation.max_new_tokens,
                    stop=cfg.generation.stop, rng=rng).text
                rows.append((public_input, text))
        n = write_synthetic_dataset(con, syn.name, cfg.task.type, rows, source_dataset=cfg.private_dataset,
                                    run_id=run_id, entry_id=reservation.entry_id)
        finish_run(con, run_id, "completed")
    numbers = {k: v for k, v in plan.items() if isinstance(v, (int, float, str))}
    get_run_logger().info("synthesized %d demonstrations into %r for ε %.4f: %s", n, syn.name,
                          reservation.epsilon_cost, numbers)
    return {"run_id": run_id, "dataset": syn.name, "demonstrations": n, "epsilon_cost": reservation.epsilon_cost,
            "epsilon_spent": reservation.epsilon_after, "plan": numbers}
