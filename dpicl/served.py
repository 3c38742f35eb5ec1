"""The flows `dpicl serve` deploys: what a call through the API may choose, and what only the deployment sets.

The deployment (the `dpicl serve` command line) fixes the config, the database, the most queries one run may
answer and where evaluation output goes. A call through the Prefect API (UI, `prefect deployment run`, any HTTP
client with the token) cannot choose a config file, a database, a seed or an output folder: these flows have no
such parameters. A query limit it gives may lower the deployment's, never exceed it.

The fixed values travel in the environment of the serving process (`ENV`), which its flow-run processes inherit.
Prefect's API has no say over it: a flow run's parameters, job variables and the deployment's stored parameters
are all ignored for these values.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

from prefect import flow

ENV = "DPICL_SERVED_DEPLOYMENT"


class NotServedError(RuntimeError):
    """A served flow ran outside `dpicl serve` (its deployment's settings are unknown)."""


@dataclass(frozen=True)
class Deployment:
    """What `dpicl serve` fixed for every run of its deployments."""

    config: str  # absolute path
    db: str  # absolute path
    out_dir: str  # absolute path of evaluation output
    max_queries: int | None = None  # most queries one run may answer (None: the whole backlog)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def current(cls) -> Deployment:
        raw = os.environ.get(ENV)
        if not raw:
            raise NotServedError(f"this flow runs only under `dpicl serve` ({ENV} is not set); run the flows of "
                                 "dpicl.flows directly instead")
        return cls(**json.loads(raw))

    def query_limit(self, asked: int | None) -> int | None:
        """The query limit of one run: the call's if it gives one within the deployment's, else the deployment's."""
        if asked is None:
            return self.max_queries
        if isinstance(asked, bool) or not isinstance(asked, int) or asked < 1:
            raise ValueError(f"max_queries must be a whole number of at least 1 (got {asked!r})")
        if self.max_queries is not None and asked > self.max_queries:
            raise ValueError(f"max_queries {asked} exceeds this deployment's limit of {self.max_queries} queries "
                             "per run (dpicl serve --max-queries)")
        return asked


def bundled_config(name: str) -> str:
    """The path of the bundled config `name`; a path or an unknown name is refused (a call never picks a file)."""
    from dpicl.config import CONFIG_DIR

    known = {path.stem: path for path in CONFIG_DIR.glob("*.yaml")}
    if name not in known:
        raise ValueError(f"configs of a served evaluation are names of bundled configs ({', '.join(sorted(known))})"
                         "; files cannot be chosen through the API")
    return str(known[name])


@flow(name="answer_backlog", persist_result=False)
def answer_backlog(max_queries: int | None = None) -> dict:
    """Answer the deployment's backlog with its config, each query paid from the budget (at most `max_queries`,
    within the deployment's limit)."""
    from dpicl.flows.answer_backlog import answer_backlog as answer

    fixed = Deployment.current()
    return answer.fn(config=fixed.config, db=fixed.db, max_queries=fixed.query_limit(max_queries))


@flow(name="rerun", persist_result=False)
def rerun(run_id: str, from_stage: str = "aggregate", max_queries: int | None = None) -> dict:
    """Re-run run `run_id` of the deployment's database from `from_stage` with the run's own stored config (a
    call chooses no config, method or override)."""
    from dpicl.flows.rerun import rerun as rerun_flow

    fixed = Deployment.current()
    return rerun_flow.fn(run_id=run_id, from_stage=from_stage, max_queries=fixed.query_limit(max_queries),
                         db=fixed.db)


@flow(name="evaluate", persist_result=False)
def evaluate(configs: list[str], epsilons: list[float] = (1.0, 3.0, 8.0), queries: int = 100,
             repetitions: int = 1, delta: float | None = None, metrics: list[str] | None = None) -> dict:
    """Privacy–utility sweep of bundled configs on benchmark data (charges no budget), into the deployment's
    database and evaluation folder; no fixed seed."""
    from dpicl.flows.evaluate import evaluate as evaluate_flow

    fixed = Deployment.current()
    paths = [bundled_config(name) for name in configs]
    return evaluate_flow.fn(configs=paths, epsilons=epsilons, queries=queries, repetitions=repetitions, seed=None,
                            delta=delta, metrics=metrics, out_dir=fixed.out_dir, db=fixed.db)
