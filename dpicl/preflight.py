"""Pre-flight: everything a run needs that the database can tell before it starts, checked in one pass.

The CLI runs these checks before a flow (and a temporary Prefect server) starts, so a missing dataset, an unopened
budget or a method without its public data is one `error:` line within a second or two; the flows run them again
first thing, so a deployment's run fails the same way before any work. Each check raises the exception the stage
that needs it would raise (ValueError, LookupError, BudgetError), with a message that says how to fix it.
"""

from __future__ import annotations

from collections.abc import Callable

from dpicl import methods
from dpicl.config import Config
from dpicl.storage import get_dataset
from dpicl.storage.queries import claimable_count, require_backlog


def _require_kind(con, name: str, role: str, kind: str) -> None:
    dataset = get_dataset(con, name)  # LookupError: never ingested, with the ingest command
    if dataset["kind"] != kind:
        raise ValueError(f"{role} {name!r} was ingested as {dataset['kind']}, not {kind}; point {role} at a "
                         f"dataset ingested with `--as {kind}`")


def _require_data(con, cfg: Config) -> None:
    _require_kind(con, cfg.private_dataset, "private_dataset", "private")
    if cfg.public_dataset:
        _require_kind(con, cfg.public_dataset, "public_dataset", "public")


def check_answer(con, cfg: Config, *, plan: bool = True, warn: Callable[[str], object] | None = None) -> int:
    """Raise if an `answer_backlog` run of `cfg` cannot start; else how many queries it could claim now (0: nothing
    pending, which is not an error). `plan=False` leaves out the budget and plan check (the flow's first task,
    open-run, makes it anyway); `warn` is called with each reason the plan would buy (almost) nothing."""
    from dpicl.tasks.run import checked_plan

    if methods.get(cfg.method.name).kind == "synthesis":
        raise ValueError(f"method {cfg.method.name} does not answer queries: it writes DP synthetic demonstrations "
                         "(`dpicl synthesize CONFIG`); answer with them by a config whose method is synthetic-icl")
    require_backlog(con, cfg.backlog)
    _require_data(con, cfg)
    if plan:
        _, planned, _ = checked_plan(con, cfg)  # the budget is open, the plan fits it and composes with the ledger
        for warning in methods.get(cfg.method.name).warnings(cfg.method, planned):
            if warn:
                warn(warning)
    return claimable_count(con, cfg.backlog)


def nothing_pending(con, backlog: str) -> str:
    """The one line a run on a backlog with nothing to claim says (counts only)."""
    counts = dict(con.execute("SELECT status, count(*) FROM queries WHERE backlog = ? GROUP BY status",
                              [backlog]).fetchall())
    claimed = counts.get("pending", 0)
    held = f", {claimed} held by other running runs" if claimed else ""
    return (f"nothing pending in backlog {backlog!r} ({counts.get('answered', 0)} answered, "
            f"{counts.get('refused_budget', 0)} refused for budget{held}); ingest new queries with "
            f"`dpicl ingest FILE --name {backlog} --as queries`")


def check_synthesis(con, cfg: Config) -> None:
    """Raise if a `synthesize_demos` run of `cfg` cannot start (the charge itself is checked when it is reserved)."""
    from dpicl.storage.ledger import require_budget
    from dpicl.storage.synthetic import check_new_dataset

    method = methods.get(cfg.method.name)
    if not hasattr(method, "synthesis_plan") or cfg.synthetic is None:
        synthesizers = [m.name for m in methods.all_methods() if hasattr(m, "synthesis_plan")]
        raise ValueError(f"`dpicl synthesize` needs a method that writes demonstrations ({', '.join(synthesizers)}) "
                         "and a `synthetic` section in the config")
    if cfg.task.type not in method.synthesis_task_types:
        others = [m.name for m in methods.all_methods() if hasattr(m, "synthesis_plan") and m.name != method.name
                  and cfg.task.type in m.synthesis_task_types]
        raise ValueError(f"{method.name} synthesizes {', '.join(method.synthesis_task_types)} demonstrations only; "
                         f"use one of {', '.join(others)} for this task")
    _require_data(con, cfg)
    require_budget(con, cfg.private_dataset)
    check_new_dataset(con, cfg.synthetic.name)
