"""The deployments of dpicl, as `prefect.yaml` defines them: the one definition that `prefect deploy --all` (work
pools, any number of workers) and `dpicl serve` (one machine) both use.

`prefect.yaml` sits at the repository root, where `prefect deploy` reads it, and is packaged inside `dpicl` for
installs from a wheel. `dpicl serve` takes from it each deployment's name, flow, description, tags, schedule and
concurrency limit; what it does not take are the parameters that name files (`config`, `db`, `out_dir`): a served
deployment fixes them on the command line instead, so that a call through the API cannot choose a file
(`dpicl.served`).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import yaml

_PACKAGE = Path(__file__).resolve().parent
CANDIDATES = (_PACKAGE / "prefect.yaml", _PACKAGE.parent / "prefect.yaml")


def prefect_yaml_path() -> Path:
    for path in CANDIDATES:
        if path.is_file():
            return path
    raise FileNotFoundError("prefect.yaml is missing from this installation of dpicl (looked in "
                            f"{', '.join(str(p) for p in CANDIDATES)}); reinstall dpicl")


@functools.cache
def definitions() -> dict[str, dict[str, Any]]:
    """{flow name: its deployment's definition in prefect.yaml} (the flow name is the entrypoint's function)."""
    raw = yaml.safe_load(prefect_yaml_path().read_text(encoding="utf-8"))
    return {d["entrypoint"].rsplit(":", 1)[1]: d for d in raw["deployments"]}


def schedule(flow_name: str) -> dict[str, Any] | None:
    """The deployment's first schedule as `to_deployment` keywords ({"cron": …, "timezone": …} or {"interval": …}),
    or None for a deployment run on demand."""
    schedules = definitions()[flow_name].get("schedules") or []
    if not schedules:
        return None
    first = schedules[0]
    if "cron" in first:
        return {"cron": first["cron"], "timezone": first.get("timezone")}
    return {"interval": first["interval"]}
