"""Re-running a past run's stages from a chosen stage on its stored artifacts (docs/ops/rerun-and-plan.md):
what may be reused, what it costs, and the stage tasks a rerun adds to the ones of `answer_backlog`
 (`aggregate` and `release` are reused as they are).

What is free (serving or post-processing what the source run already paid for) and what is charged (every new
draw from private artifacts; without amplification on a subsample a mechanism already used, with top-ups of the
earlier uses) is the re-charging rule in dpicl/privacy/accounting/reuse.py, whose docstring gives the privacy
argument. The database reads are dpicl/storage/reruns.py; the dry run's text is the CLI's (dpicl/cli/rerun.py).

Tasks pass ids, artifact keys and event JSON only; private text stays in DuckDB.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import duckdb
import yaml
from prefect import get_run_logger, task
from pydantic import ValidationError

from dpicl import methods
from dpicl.config import Config, ConfigError, load_config
from dpicl.methods.base import Facts
from dpicl.privacy.accounting import ledger_epsilon, reuse
from dpicl.privacy.accounting.events import PublicDataEvent, event_from_json
from dpicl.privacy.accounting.guard import PrivacyGuardError
from dpicl.privacy.accounting.reuse import CHARGED, FREE
from dpicl.prompts import zero_shot_prompt
from dpicl.storage import get_dataset, get_queries, set_query_status
from dpicl.storage.artifacts import artifact_key
from dpicl.storage.ledger import (
    get_budget,
    ledger_events,
    record_release,
    stored_release,
)
from dpicl.storage.queries import copy_queries
from dpicl.storage.reruns import (
    backlog_query_ids,
    release_backlogs,
    run_artifact_keys,
    stored_aggregates,
    stored_keys,
    subsample_charges,
)
from dpicl.storage.runs import (
    create_run,
    get_run,
    link_rerun,
    recent_run_ids,
    run_source,
    store_plan,
    stored_plan,
)
from dpicl.tasks import context
from dpicl.tasks.common import STAGE
from dpicl.tasks.infer import candidates_key
from dpicl.tasks.prompt import public_ensemble_params
from dpicl.tasks.run import per_query_plan

STAGES = ("aggregate", "release")
# method settings every ensemble method shares; they shaped the stored subsamples, so a method switch keeps them
SAMPLING_FIELDS = ("teachers", "shots", "sampling_rate")
# the artifact stage behind each stage key (for messages)
_ARTIFACT = {"teachers": "teacher_embeddings", "candidates": "candidate_embeddings", "candidate_texts": "candidates",
             "public": "public_embeddings", "public_texts": "public_outputs", "zero_shot": "zero_shot_prompt"}


class RerunError(ValueError):
    """A rerun that cannot be done as asked; the message says what, where and how to fix it (no private text)."""


def derived_backlog(backlog: str, run_id: str) -> str:
    """The backlog a rerun answers: a copy of the source backlog's queries, so its releases sit beside the old."""
    return f"{backlog}@rerun-{run_id[:12]}"


# ---------------------------------------------------------------------------------------------------------------
# the effective config


def _set_path(tree: dict, dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value


def _ensemble(name: str):
    """The registered ensemble method `name` (it stores teacher outputs to re-run from), else None."""
    try:
        method = methods.get(name)
    except ValueError:
        return None
    return method if method.kind == "ensemble" else None


def _ensemble_names() -> str:
    return ", ".join(m.name for m in methods.all_methods() if m.kind == "ensemble")


def parse_overrides(overrides: list[str] | None) -> list[tuple[str, Any]]:
    """`KEY=VALUE` pairs (KEY dotted, e.g. method.planned_queries; VALUE read as YAML: 50, 0.5, true, null, [a])."""
    pairs = []
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise RerunError(f"--set takes KEY=VALUE with a dotted KEY, e.g. --set method.planned_queries=50 "
                             f"(got {item!r})")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        pairs.append((key.strip(), value))
    return pairs


def _stored_config(con: duckdb.DuckDBPyConnection, run: dict) -> dict:
    """A run's stored config, with the backlog of a rerun's copy mapped back to the backlog it copied."""
    config = json.loads(json.dumps(run["config"]))  # a deep copy: overrides must never touch the stored one
    config["backlog"] = base_backlog(con, run)
    return config


def base_backlog(con: duckdb.DuckDBPyConnection, run: dict) -> str:
    source = run_source(con, run["run_id"])
    if source is None:
        return run["backlog"]
    root = get_run(con, source["root_run_id"])
    return root["backlog"] if root else run["backlog"]


def effective_config(con: duckdb.DuckDBPyConnection, source_run: dict, config: str | None = None,
                     method: str | None = None, overrides: list[str] | None = None) -> Config:
    """The rerun's config: `config` (a file or bundled name) or else the source run's stored config, then
    `method` (a switch keeps the sampling settings teachers/shots/sampling_rate, which shaped the stored
    subsamples), then the `--set KEY=VALUE` overrides. The backlog is the source backlog (not yet the copy)."""
    if config is not None:
        try:
            tree = load_config(config).model_dump(mode="json")
        except ConfigError as err:
            raise RerunError(str(err)) from None
    else:
        tree = _stored_config(con, source_run)
    pairs = parse_overrides(overrides)
    method = method or next((v for k, v in pairs if k == "method.name"), None)
    if method is not None and method != tree["method"]["name"]:
        old, switched = tree["method"], _ensemble(method)
        accepted = set(switched.Settings.model_fields) if switched else set()
        tree["method"] = {"name": method, **{k: old[k] for k in SAMPLING_FIELDS if k in old and k in accepted}}
    for key, value in pairs:
        if key != "method.name":
            _set_path(tree, key, value)
    try:
        return Config.model_validate(tree)
    except ValidationError as err:  # names the keys, never private text
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise RerunError(f"the rerun's config is not valid ({problems}); fix --config/--method/--set") from None


# ---------------------------------------------------------------------------------------------------------------
# the analysis: shared by the dry run and the flow; reads only


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def feature_keys(cfg: Config, query: str, teacher_key: str | None) -> dict[str, str]:
    """The stage keys of one query as `answer_backlog`'s tasks name them (after embed): the private teacher
    artifact comes from the stored run, the public ones are content-addressed and recomputed here."""
    method, model = cfg.method, cfg.model.model_dump()
    emb = cfg.embedding.model_dump()
    zero_shot = artifact_key("zero_shot_prompt", [], {"prompt_sha256": _sha(zero_shot_prompt(cfg.task, query))})
    teacher_stage = "teacher_votes" if cfg.task.type == "classification" else "teacher_outputs"
    keys = {"zero_shot": zero_shot}
    if teacher_key is not None:
        keys[teacher_stage] = teacher_key
    registered = methods.get(method.name)
    if registered.samples_candidates:
        keys["candidates"] = candidates_key(cfg, registered, zero_shot)
    if registered.needs_public:
        params = public_ensemble_params(cfg, query)
        prompts = artifact_key("public_prompts", [], params)
        outputs = artifact_key("public_outputs", [prompts],
                               {"model": model, "generation": cfg.generation.model_dump()})
        keys.update(public_outputs=outputs, public_example=artifact_key("public_example", [], params))
        if method.public_fewshot is not None:
            keys["public_demos"] = artifact_key("public_demos", [], params)
    public = registered.public_texts
    if public is not None:  # as the embed task names them
        texts = keys[public.source]
        keys.update({public.embeddings: artifact_key(public.stage, [texts], emb), public.texts: texts})
        if teacher_key is not None:
            keys["teachers"] = artifact_key("teacher_embeddings", [teacher_key], emb)
    return keys


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def analyse(con: duckdb.DuckDBPyConnection, source_run_id: str, from_stage: str, cfg: Config | None = None, *,
            config: str | None = None, method: str | None = None, overrides: list[str] | None = None,
            max_queries: int | None = None) -> dict[str, Any]:
    """What a rerun would do, per query, and what it would cost; changes nothing. Raises RerunError when it cannot
    be done (the message says what, where and how to fix it).

    Returns ids, counts, artifact keys and event JSON only: `queries` (ids in backlog order), `category` per
    query (fresh | reused | served | post-processed), `features` and (--from release) `aggregates` per query,
    `top_ups` per query, the plan and events, and the budget before/after.
    """
    if from_stage not in STAGES:
        raise RerunError(f"--from must be one of {', '.join(STAGES)} (got {from_stage!r}); the stages before "
                         "aggregate call the LLM and draw fresh subsamples: answer the backlog with `dpicl answer`")
    source = get_run(con, source_run_id)
    if source is None:
        known = recent_run_ids(con)
        raise RerunError(f"no run with id {source_run_id!r} in this database"
                         + (f"; recent runs: {', '.join(known)}" if known else " (it has no runs)")
                         + ". Check --db and the run id (the Prefect UI shows it in the open-run task's log)")
    link = run_source(con, source_run_id)
    root_id = link["root_run_id"] if link else source_run_id
    root = get_run(con, root_id)
    if root is None:
        raise RerunError(f"run {source_run_id!r} re-ran run {root_id!r}, which is no longer in this database")
    if cfg is None:
        cfg = effective_config(con, source, config, method, overrides)
    try:
        source_cfg = Config.model_validate(_stored_config(con, source))
        root_cfg = Config.model_validate(_stored_config(con, root))
    except ValidationError:
        raise RerunError(f"the stored config of run {source_run_id!r} (or of the run it re-ran) is not valid for this "
                         "version of dpicl; answer the backlog again with `dpicl answer`") from None
    name = cfg.method.name
    if _ensemble(source["method"]) is None:
        raise RerunError(f"run {source_run_id!r} used method {source['method']!r}, which decodes token by token (or "
                         "uses public data only) and stores no teacher outputs or aggregates to re-run from; its "
                         f"releases are served for free by `dpicl releases {source['backlog']}`")
    registered = _ensemble(name)
    if registered is None:
        raise RerunError(f"method {name!r} cannot re-run from stored teacher outputs (it decodes token by token or "
                         f"needs no private data); choose one of {_ensemble_names()}, or answer with "
                         "`dpicl answer CONFIG`")
    if cfg.private_dataset != source["dataset"]:
        raise RerunError(f"the rerun's config names private dataset {cfg.private_dataset!r} but run "
                         f"{source_run_id!r} drew its teacher outputs from {source['dataset']!r}; a rerun reuses "
                         "them, so it must use (and is charged to) that dataset: drop --config, or set "
                         f"private_dataset: {source['dataset']}")
    if cfg.backlog != root["backlog"]:
        raise RerunError(f"the rerun's config names backlog {cfg.backlog!r} but run {source_run_id!r} answered "
                         f"{root['backlog']!r}; set backlog: {root['backlog']} (the rerun answers a copy of it)")
    dataset = get_dataset(con, cfg.private_dataset)
    if dataset["created_at"] > root["started_at"]:
        raise RerunError(f"dataset {cfg.private_dataset!r} was ingested again after run {root_id!r} started; its "
                         "stored teacher outputs come from the old records: answer the backlog again instead")
    budget = get_budget(con, cfg.private_dataset)
    if budget is None:
        raise RerunError(f"dataset {cfg.private_dataset!r} has no privacy budget: open one with "
                         f"`dpicl budget open {cfg.private_dataset} --epsilon E --delta D`")
    base = root["backlog"]

    if from_stage == "aggregate":
        changed = [part for part in ("task", "model", "generation") if not _same(
            getattr(cfg, part).model_dump(mode="json"), getattr(root_cfg, part).model_dump(mode="json"))]
        changed += [f"method.{f}" for f in SAMPLING_FIELDS
                    if getattr(cfg.method, f, None) != getattr(root_cfg.method, f, None)]
        if changed:
            raise RerunError(f"{', '.join(changed)} differ(s) from run {root_id!r}, whose stored subsamples and "
                             "teacher outputs the rerun reuses; these settings shaped them and cannot change without "
                             "new LLM calls: keep them (drop those --set/--config changes) or answer the backlog "
                             "again with `dpicl answer`")
        stage = "teacher_votes" if cfg.task.type == "classification" else "teacher_outputs"
        stored = run_artifact_keys(con, root_id, stage)
        missing_what = f"stored {stage.replace('_', ' ')} of run {root_id!r}"
    else:
        if name != source["method"]:
            raise RerunError(f"--from release keeps the mechanism of run {source_run_id!r} ({source['method']}): its "
                             f"stored DP aggregates are what is post-processed. To answer with {name!r}, re-run "
                             "--from aggregate (a new release, charged)")
        changed = _aggregate_changes(cfg, source_cfg, registered)
        if changed:
            raise RerunError(f"{', '.join(changed)} shape(s) the DP aggregate, which --from release reuses as run "
                             f"{source_run_id!r} drew it; change only release settings "
                             f"({', '.join(sorted(registered.release_only)) or 'none for ' + name}, model, generation), "
                             "or re-run --from aggregate (a new release, charged)")
        stored = stored_aggregates(con, source_run_id)
        missing_what = f"stored DP aggregates of run {source_run_id!r}"

    backlog_ids = backlog_query_ids(con, base)
    query_ids = [q for q in backlog_ids if q in stored]
    not_in_source = len(backlog_ids) - len(query_ids)
    if max_queries is not None:
        query_ids = query_ids[:max(0, max_queries)]
    if not query_ids:
        raise RerunError(f"nothing to re-run: backlog {base!r} has no {missing_what} (the budget refused every "
                         "query before it was sampled, or the run failed early); answer it with `dpicl answer`")
    queries = get_queries(con, base, query_ids)
    features = {}
    for q in query_ids:
        teacher = stored[q] if from_stage == "aggregate" else None
        features[q] = feature_keys(cfg, queries[q].input, teacher)
    needs = set(registered.release_needs) | (set(registered.inputs) if from_stage == "aggregate" else set())
    wanted = {features[q][n] for q in query_ids for n in needs if n in features[q]}
    present = stored_keys(con, wanted)
    lacking: dict[str, int] = {}
    for q in query_ids:
        for n in sorted(needs):
            if features[q].get(n) not in present:
                lacking[n] = lacking.get(n, 0) + 1
    if lacking:
        what = ", ".join(f"{_ARTIFACT.get(n, n)} ({c} of {len(query_ids)} queries)" for n, c in sorted(lacking.items()))
        raise RerunError(
            f"the stored artifacts that {name} needs are missing: {what}. A rerun makes no LLM or encoder calls "
            f"before the {from_stage} stage, so it can only use what run {root_id!r} (or an earlier run with the "
            "same model, generation, embedding and method settings) stored. Keep those settings as they were, "
            f"or answer the backlog with `dpicl answer` using the {name} config")

    category: dict[str, str] = {}
    top_ups: dict[str, list[tuple[str, str]]] = {}
    aggregates: dict[str, dict] = {}
    served_from: dict[str, str] = {}  # query id -> backlog of the stored release served again
    if from_stage == "aggregate":
        plan, event_json = _plan(con, cfg)
        rate = event_from_json(event_json).sampling_rate
        root_rate = methods.get(root_cfg.method.name).sampling_rate(  # as open-run planned it
            root_cfg.method, Facts(dataset_size=dataset["n_records"]))
        if abs(rate - root_rate) > 1e-12:
            raise RerunError(f"the rerun's sampling rate {rate:.6g} differs from the rate {root_rate:.6g} at which "
                             f"run {root_id!r} drew its subsamples; keep teachers, shots and sampling_rate as they were")
        charges = subsample_charges(con, root_id, query_ids)
        try:
            reused_event = reuse.unamplified(event_json)
            uses = reuse.uses_of_subsamples(charges, query_ids)
            for q in query_ids:
                category[q] = reuse.category(uses[q])
                top_ups[q] = reuse.top_ups(uses[q])
        except PrivacyGuardError as err:
            raise RerunError(str(err)) from None
    else:
        plan, reused_event = _source_plan(con, source_run_id, source_cfg), None
        unchanged = _same({k: v for k, v in cfg.model_dump(mode="json").items() if k != "batch_queries"},
                          {k: v for k, v in source_cfg.model_dump(mode="json").items() if k != "batch_queries"})
        released = release_backlogs(con, source_run_id)
        for q in query_ids:
            category[q] = "served" if unchanged and q in released else "post-processed"
            if category[q] == "served":
                served_from[q] = released[q]
            else:
                aggregates[q] = stored[q]
        event_json = PublicDataEvent(f"{name}:post-processing").to_json()
    adds = reuse.new_charges(query_ids, category, top_ups, event_json, reused_event)
    spent_events = ledger_events(con, cfg.private_dataset)
    before = ledger_epsilon(spent_events, budget.delta)
    after = ledger_epsilon([*spent_events, *adds], budget.delta)
    affordable, top_ups_after = len(query_ids), None  # the top-ups' share: worked out for a refusal only
    if after > budget.epsilon:
        affordable = reuse.affordable_prefix(query_ids, category, top_ups, event_json, reused_event, spent_events,
                                             budget.epsilon, budget.delta)
        owed = [e for q in query_ids for _, e in top_ups.get(q, [])]  # what no setting of the new releases changes
        top_ups_after = ledger_epsilon([*spent_events, *owed], budget.delta) if owed else before
    counts = {c: sum(category[q] == c for q in query_ids) for c in (*CHARGED, *FREE)}
    # a charged rerun that changes release settings only: --from release answers the queries whose DP aggregates
    # the source run stored with these settings for free (how many)
    free_instead = 0
    if from_stage == "aggregate" and name == source["method"] and not _aggregate_changes(cfg, source_cfg, registered):
        free_instead = len(set(query_ids) & set(stored_aggregates(con, source_run_id)))
    return {
        "free_from_release": free_instead,
        "source_run": source_run_id, "root_run": root_id, "from_stage": from_stage, "method": name,
        "source_method": source["method"], "dataset": cfg.private_dataset, "backlog": base,
        "config": cfg.model_dump(mode="json"), "queries": query_ids, "category": category,
        "not_in_source": not_in_source, "counts": counts,
        "top_up_entries": sum(len(t) for t in top_ups.values()), "top_ups": top_ups,
        "features": features, "aggregates": aggregates, "served_from": served_from, "plan": plan,
        "event_json": event_json, "reused_event_json": reused_event,
        "epsilon_limit": budget.epsilon, "delta": budget.delta, "epsilon_before": before, "epsilon_after": after,
        "epsilon_charged": after - before, "payable": after <= budget.epsilon, "affordable_queries": affordable,
        "epsilon_top_ups": None if top_ups_after is None else top_ups_after - before,
    }


def _aggregate_changes(cfg: Config, source_cfg: Config, registered) -> list[str]:
    """The settings that shape the DP aggregate (method settings other than release-only ones, and the task) in
    which `cfg` differs from `source_cfg`."""
    aggregate_side = {k: v for k, v in cfg.method.model_dump(mode="json").items() if k not in registered.release_only}
    source_side = {k: v for k, v in source_cfg.method.model_dump(mode="json").items()
                   if k not in registered.release_only}
    changed = [f"method.{k}" for k in sorted(set(aggregate_side) | set(source_side))
               if not _same(aggregate_side.get(k), source_side.get(k))]
    if not _same(cfg.task.model_dump(mode="json"), source_cfg.task.model_dump(mode="json")):
        changed.append("task")
    return changed


def refusal(report: dict[str, Any]) -> str:
    """Why a rerun the budget cannot pay for is refused, and what would fit."""
    fits = report["affordable_queries"]
    if report["epsilon_before"] + report["epsilon_top_ups"] > report["epsilon_limit"]:
        advice = (f"the top-ups it owes for reusing the run's subsamples alone (ε {report['epsilon_top_ups']:.4f}) "
                  "exceed what remains, whatever the new releases' settings: "
                  + (f"--max-queries {fits}, or " if fits else "") + "--from release (free)")
    else:
        advice = ("use " + (f"--max-queries {fits}, " if fits else "")
                  + "a cheaper setting (e.g. a larger method.planned_queries), or --from release (free)")
    return (f"the budget of {report['dataset']!r} cannot pay for this rerun: it would charge ε "
            f"{report['epsilon_charged']:.4f} (ε {report['epsilon_before']:.4f} of {report['epsilon_limit']:g} "
            f"spent, → {report['epsilon_after']:.4f}); nothing was charged. {advice[0].upper()}{advice[1:]}")


_PLANS: dict[tuple, tuple[dict, str]] = {}


def _plan(con: duckdb.DuckDBPyConnection, cfg: Config) -> tuple[dict, str]:
    """`per_query_plan` (the numbers tasks take, and the event JSON), cached in-process by everything it reads:
    the method settings, the tokens per answer, the budget and the dataset size (a calibration can take a minute)."""
    budget = get_budget(con, cfg.private_dataset)
    n_records = get_dataset(con, cfg.private_dataset)["n_records"]
    key = (json.dumps(cfg.method.model_dump(mode="json"), sort_keys=True), cfg.generation.max_new_tokens,
           cfg.private_dataset, budget.epsilon, budget.delta, n_records)
    if key not in _PLANS:
        plan, event_json = per_query_plan(con, cfg)
        _PLANS[key] = (plan.numbers(), event_json)
    plan, event_json = _PLANS[key]
    return dict(plan), event_json


def _source_plan(con: duckdb.DuckDBPyConnection, source_run_id: str, source_cfg: Config) -> dict:
    """The plan the source run drew its aggregates with (stored when it opened), else planned again from its
    config (the same computation; runs stored no plan before dpicl 0.5)."""
    try:
        return stored_plan(con, source_run_id)[0]
    except LookupError:
        return _plan(con, source_cfg)[0]


# ---------------------------------------------------------------------------------------------------------------
# the tasks a rerun adds


@task(name="open-rerun", **STAGE)
def open_rerun(config_path: str, db_path: str, run_id: str, source_run_id: str, root_run_id: str, from_stage: str,
               backlog: str, query_ids: list[str], plan: dict, event_json: str) -> dict:
    """Records the rerun (run row linked to its source, with the config and plan its tasks read) and copies its
    queries into the rerun's own backlog."""
    cfg = context.config(config_path)
    from prefect import runtime

    with context.database(db_path) as con:
        flow_run_id = runtime.flow_run.id
        create_run(con, run_id, cfg.method.name, cfg.private_dataset, cfg.backlog, cfg.model_dump(mode="json"),
                   str(flow_run_id) if flow_run_id else None)
        store_plan(con, run_id, cfg.backlog, plan, event_json)
        link_rerun(con, run_id, source_run_id, root_run_id, from_stage)
        copied = copy_queries(con, backlog, cfg.backlog, query_ids, f"rerun of run {source_run_id}")
    get_run_logger().info("rerun %s of run %s from %s: %d queries copied into backlog %s", run_id, source_run_id,
                          from_stage, copied, cfg.backlog)
    return {"run_id": run_id, "copied": copied}


@task(name="top-up", **STAGE)
def top_up(db_path: str, run_id: str, top_ups: dict[str, list[list[str]]]) -> list[str]:
    """Pays, before any new draw, the top-ups of reused subsamples (earlier amplified uses re-charged at rate 1).
    Returns the queries whose top-ups were all paid; the others are refused (budget) and get no new draw."""
    paid, refused = [], []
    with context.database(db_path) as con:
        cfg = context.run(con, run_id).cfg
        for query_id, entries in top_ups.items():
            ok = True
            for mechanism, event_json in entries:
                if context.reserve(con, cfg, run_id, query_id, mechanism, event_json) is None:
                    ok = False
                    break
            (paid if ok else refused).append(query_id)
        if refused:
            set_query_status(con, cfg.backlog, refused, "refused_budget")
    get_run_logger().info("top-ups paid for %d reused subsamples; %d refused (budget cannot pay)", len(paid),
                          len(refused))
    return paid


@task(name="reserve-free", **STAGE)
def reserve_free(db_path: str, run_id: str, aggregates: dict[str, dict]) -> dict:
    """Ledger entries (ε 0, a PublicDataEvent) for releases post-processed from stored DP aggregates; returns the
    aggregates in the form the release task takes."""
    out = {}
    with context.database(db_path) as con:
        run = context.run(con, run_id)
        cfg, event_json = run.cfg, run.event_json
        for query_id, stored in aggregates.items():
            reservation = context.reserve(con, cfg, run_id, query_id, cfg.method.name, event_json)
            if reservation is None:  # cannot happen for a zero-cost event unless the budget is already overspent
                continue
            out[query_id] = {"aggregate": stored["aggregate"], "entry_id": reservation.entry_id,
                             "epsilon_before": reservation.epsilon_before, "epsilon_after": reservation.epsilon_after}
    return out


@task(name="serve", **STAGE)
def serve(db_path: str, run_id: str, served_from: dict[str, str]) -> list[dict]:
    """Serves the source run's stored releases again (free): each is copied into the rerun's backlog with a
    ledger entry of ε 0. `served_from`: {query id: backlog of the stored release}."""
    rows = []
    with context.database(db_path) as con:
        run = context.run(con, run_id)
        cfg, event_json = run.cfg, run.event_json
        for query_id, backlog in served_from.items():
            stored = stored_release(con, backlog, query_id)
            if stored is None:
                continue
            reservation = context.reserve(con, cfg, run_id, query_id, cfg.method.name, event_json)
            if reservation is None:
                continue
            record_release(con, reservation, run_id=run_id, mechanism=stored["mechanism"], answer=stored["answer"],
                           details={**stored["details"], "served_from_entry": stored["entry_id"]})
            rows.append({"query_id": query_id, "status": "answered", "epsilon_cost": reservation.epsilon_cost})
    get_run_logger().info("served %d stored releases again (free)", len(rows))
    return rows
