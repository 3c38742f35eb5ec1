"""Token-level methods' answer stage (dps-mozo, adapmixed): replaces infer → aggregate → release with a decode
loop per query. Pay first, check that what is about to be used is what was paid for, then decode: the query's
data-independent cost for `generation.max_new_tokens` tokens is reserved in the ledger (committed) before the first
token is drawn, and the answer is stored with its ledger entry. Returns ids, statuses and ε only."""

from __future__ import annotations

from prefect import get_run_logger, task
from tqdm.auto import tqdm

from dpicl import planning
from dpicl.config import Config
from dpicl.decoding import Decoded, adapmixed_answer, dps_mozo_answer
from dpicl.inference.base import require
from dpicl.privacy.accounting.guard import PrivacyGuardError, require_paid
from dpicl.privacy.mechanisms.adapmixed import cost as adapmixed_cost
from dpicl.privacy.rng import make_rng
from dpicl.privacy.sampling import assign_teachers
from dpicl.prompts import render_prompt, zero_shot_prompt
from dpicl.storage import get_dataset, get_queries, load_records, set_query_status
from dpicl.storage.artifacts import artifact_key, put_artifact
from dpicl.storage.ledger import record_release
from dpicl.tasks import context
from dpicl.tasks.common import STAGE

# the per-query parameters kept with each release
PLAN_DETAILS = {"dps-mozo": ("beta", "alpha", "sampling_rate"), "adapmixed": ("beta", "alpha", "rdp_per_query")}


def _answer(cfg: Config, backend, plan: dict, records: list, teacher_key: bytes, query: str, paid, rng) -> Decoded:
    """Decode one answer; `paid(event)` is called with the event of the parameters actually used, before any draw."""
    m, gen = cfg.method, cfg.generation
    demos = [(r.input, r.output) for r in records]
    zero_shot = zero_shot_prompt(cfg.task, query)
    if m.name == "dps-mozo":
        rate = min(1.0, m.shots / len(demos))
        paid(planning.METHODS["dps-mozo"].event({**plan, "sampling_rate": rate,
                                                 "tokens_per_query": gen.max_new_tokens}))
        return dps_mozo_answer(backend, zero_shot, lambda i: render_prompt(cfg.task, [demos[i]], query), len(demos),
                               shots=m.shots, top_k=m.top_k, beta=plan["beta"], alpha=plan["alpha"],
                               max_new_tokens=gen.max_new_tokens, stop=gen.stop, rng=rng)
    # adapmixed: every record in one member's part (keyed hash of the record), `shots` of them in its prompt
    index = {r.record_id: i for i, r in enumerate(records)}
    paid(adapmixed_cost(plan["alpha"], plan["beta"], m.members, gen.max_new_tokens, m.screen_lambda, m.screen_sigma))
    parts = assign_teachers([r.record_id for r in records], teacher_key, m.members, m.shots, 1.0, rng)
    members = [render_prompt(cfg.task, [demos[index[r]] for r in part], query) for part in parts]
    if len(members) != m.members:  # one record must reach one member of the `members` charged for
        raise PrivacyGuardError(f"{len(members)} members were built where {m.members} were charged for")
    return adapmixed_answer(backend, zero_shot, members, beta=plan["beta"], alpha=plan["alpha"], top_k=m.top_k,
                            screen_lambda=m.screen_lambda, screen_sigma=m.screen_sigma, threshold=m.threshold,
                            max_new_tokens=gen.max_new_tokens, stop=gen.stop, rng=rng)


@task(name="decode", **STAGE)
def decode(db_path: str, run_id: str, query_ids: list[str]) -> list[dict]:
    """Returns one row per answered query: query id, status and ε cost (no text); unpaid queries are refused.
    Every parameter comes from the run's stored config and plan (privacy invariant 9, docs/PRIVACY.md)."""
    rows, refused = [], []
    with context.database(db_path) as con:
        run = context.run(con, run_id)
        cfg, plan, event_json, method = run.cfg, run.plan, run.event_json, run.cfg.method.name
        backend = context.backend(cfg)
        require(backend, "next_token_logprobs")
        shared = {k: plan[k] for k in PLAN_DETAILS[method]}
        records = load_records(con, cfg.private_dataset)
        teacher_key = get_dataset(con, cfg.private_dataset)["teacher_key"]
        queries = get_queries(con, cfg.backlog, query_ids)
        for query_id in tqdm(query_ids, desc=f"{method} decode", unit="query"):
            reservation = context.reserve(con, cfg, run_id, query_id, method, event_json)
            if reservation is None:
                refused.append(query_id)
                continue

            def paid(used, query_id=query_id):
                require_paid(event_json, used, what=f"query {query_id!r}")

            decoded = _answer(cfg, backend, plan, records, teacher_key, queries[query_id].input, paid, make_rng())
            # numbers computed from private data (AdaPMixED's data-dependent RDP, DPS-MOZO's λ's) stay private
            put_artifact(con, artifact_key("settlement", [], {"entry_id": reservation.entry_id}), "settlement",
                         cfg.backlog, query_id, decoded.private, private=True, run_id=run_id)
            record_release(con, reservation, run_id=run_id, mechanism=method, answer=decoded.text,
                           details={**decoded.info, **shared})
            rows.append({"query_id": query_id, "status": "answered", "epsilon_cost": reservation.epsilon_cost})
        set_query_status(con, cfg.backlog, refused, "refused_budget")
    get_run_logger().info("decoded %d answers; %d refused (budget cannot pay)", len(rows), len(refused))
    return rows
