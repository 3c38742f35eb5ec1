"""prefect.yaml, read by Prefect's own loader and models (the ones `prefect deploy` uses); no server needed.
`prefect deploy --all` against a real server, and a process worker running one of the deployments, are in
test_serve.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PREFECT_YAML = REPO / "prefect.yaml"
EXPECTED = {  # deployment name → (flow name, entrypoint)
    "answer-backlog": ("answer_backlog", "dpicl/flows/answer_backlog.py:answer_backlog"),
    "rerun": ("rerun", "dpicl/flows/rerun.py:rerun"),
    "evaluate": ("evaluate", "dpicl/flows/evaluate.py:evaluate"),
}


@pytest.fixture(scope="module")
def deploy_configs():
    from prefect.cli.deploy._config import _load_deploy_configs_and_actions
    from prefect.cli.deploy._models import PrefectYamlModel
    from rich.console import Console

    raw = yaml.safe_load(PREFECT_YAML.read_text())
    PrefectYamlModel.model_validate(raw)  # raises where the CLI would only warn and skip every deployment
    console = Console(record=True, width=200)
    configs, actions = _load_deploy_configs_and_actions(PREFECT_YAML, console=console)
    assert "Skipping" not in console.export_text(), console.export_text()
    assert actions["build"] == [] and actions["push"] == []
    return {c["name"]: c for c in configs}


def test_prefect_yaml_declares_the_three_deployments_on_the_process_pool(deploy_configs):
    assert set(deploy_configs) == set(EXPECTED)
    for name, (flow_name, entrypoint) in EXPECTED.items():
        config = deploy_configs[name]
        assert config["entrypoint"] == entrypoint
        assert config["work_pool"]["name"] == "dpicl-process"
        path = entrypoint.split(":")[0]
        assert (REPO / path).is_file(), f"{path} does not exist (yet)"


def test_only_the_backlog_is_scheduled_and_its_runs_are_bounded(deploy_configs):
    from prefect.cli.deploy._models import RawScheduleConfig

    schedules = deploy_configs["answer-backlog"]["schedules"]
    assert len(schedules) == 1
    schedule = RawScheduleConfig.model_validate(schedules[0])
    assert schedule.cron and schedule.timezone == "UTC"
    # several runs may drain one PostgreSQL backlog together (claims); further runs queue, never collide
    limit = deploy_configs["answer-backlog"]["concurrency_limit"]
    assert limit["limit"] > 1 and limit["collision_strategy"] == "ENQUEUE"
    assert not deploy_configs["rerun"].get("schedules") and not deploy_configs["evaluate"].get("schedules")


def test_entrypoints_load_the_named_flows_and_the_parameters_fit_them(deploy_configs, monkeypatch):
    from prefect.flows import load_flow_from_entrypoint

    monkeypatch.chdir(REPO)
    for name, (flow_name, entrypoint) in EXPECTED.items():
        flow = load_flow_from_entrypoint(entrypoint)
        assert flow.name == flow_name
        params = deploy_configs[name].get("parameters", {})
        assert set(params) <= set(flow.parameters.properties), f"{name}: unknown parameters"
        # names, paths and numbers only: never text of a dataset or a query
        for value in params.values():
            for item in value if isinstance(value, list) else [value]:
                assert item is None or isinstance(item, (int, float)) or (
                    isinstance(item, str) and len(item) < 80 and "\n" not in item), (name, item)


def test_dpicl_serve_deploys_what_prefect_yaml_defines(deploy_configs):
    """One definition: the served deployments take their names, flows, descriptions, tags, schedules and limits
    from prefect.yaml; only the file-naming parameters (config, db, out_dir) are the command line's."""
    from dpicl.serve import build_deployments

    served = {d.name: d for d in build_deployments()}
    assert set(served) == set(deploy_configs)
    for name, config in deploy_configs.items():
        deployment = served[name]
        assert deployment.flow_name == EXPECTED[name][0]
        assert deployment.description == config["description"] and deployment.tags == config["tags"]
        crons = [(c["cron"], c["timezone"]) for c in config.get("schedules") or []]
        assert [(s.schedule.cron, s.schedule.timezone) for s in deployment.schedules] == crons
        limit = config.get("concurrency_limit")
        assert deployment.concurrency_limit == (limit["limit"] if limit else None)
    # a schedule given on the command line replaces prefect.yaml's, for answer-backlog only
    (answer, *_) = build_deployments(interval=5)
    assert [s.schedule.interval.total_seconds() for s in answer.schedules] == [5.0]
