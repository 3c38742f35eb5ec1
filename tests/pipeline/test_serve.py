"""Deployments for real, in child processes: `dpicl serve` picks up queries added to the backlog after it started,
refuses API calls without its token, takes neither config nor database from a call, and stops cleanly on Ctrl-C; two flow runs in two processes on one database queue on the one-writer concurrency
limit and never answer or charge twice; a process holding the DuckDB file makes flow runs wait, not crash.

Models are the fakes of tests/pipeline/fakes.py, installed in the child processes by
tests/pipeline/fake_models_site/sitecustomize.py.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
import yaml

from tests.pipeline.conftest import write_jsonl
from tests.pipeline.serving import (
    REPO,
    assert_no_private_text,
    child_env,
    flow_run_artifacts,
    free_port,
    make_backlog,
    query_rows,
    read_db,
    served_auth,
    statuses,
    wait_for,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    """A Prefect server on a free port of 127.0.0.1 that requires a token (started and stopped as `dpicl serve`
    does); `server.auth` is what its clients send."""
    from dpicl.serve import auth_string, start_server

    server = start_server("127.0.0.1", free_port(), tmp_path_factory.mktemp("server-home"),
                          auth=auth_string(secrets.token_urlsafe(16)))
    try:
        yield server
    finally:
        server.stop()


_KEEP_A_SERVER = """
import sys, time
from pathlib import Path
from dpicl.serve import start_server
server = start_server("127.0.0.1", int(sys.argv[1]), Path(sys.argv[2]))
print(server.process.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux only")
def test_a_server_started_by_a_process_killed_with_sigkill_stops_too(tmp_path):
    port = free_port()
    owner = subprocess.Popen([sys.executable, "-c", _KEEP_A_SERVER, str(port), str(tmp_path / "home")],
                             env=child_env(tmp_path / "home"), stdout=subprocess.PIPE, text=True)
    try:
        server_pid = int(owner.stdout.readline())
        health = f"http://127.0.0.1:{port}/api/health"
        assert httpx.get(health, timeout=5).status_code == 200
        owner.kill()  # SIGKILL: no handler of ours runs
        owner.wait(timeout=10)

        def server_gone() -> bool:
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_for(server_gone, timeout=60, interval=0.5, what="the orphaned Prefect server to exit")
        with pytest.raises(httpx.HTTPError):
            httpx.get(health, timeout=2)
    finally:
        owner.kill()
        try:
            os.killpg(server_pid, signal.SIGKILL)
        except (ProcessLookupError, UnboundLocalError, PermissionError):
            pass


def _client(api_url: str, auth: str):
    from prefect.client.orchestration import get_client

    class _Client:
        def __enter__(self):
            self._settings = _settings(api_url, auth)
            self._settings.__enter__()
            self._client = get_client(sync_client=True)
            return self._client.__enter__()

        def __exit__(self, *exc):
            self._client.__exit__(*exc)
            self._settings.__exit__(*exc)

    return _Client()


def _settings(api_url: str, auth: str):
    """Prefect settings of a client of the server at `api_url` that sends the token."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    return temporary_settings(updates={PREFECT_API_URL: api_url, PREFECT_API_AUTH_STRING: auth})


def _ledger(db: str) -> list[tuple]:
    return read_db(db, "SELECT entry_id, run_id, query_id, epsilon_before, epsilon_after FROM ledger "
                       "WHERE dataset = 'tiny' ORDER BY entry_id")


def _budget(db: str) -> dict:
    from dpicl.storage.db import connect
    from dpicl.storage.ledger import budget_summary

    read_db(db, "SELECT 1")  # waits until no process holds the file
    con = connect(db, read_only=True)
    try:
        return budget_summary(con, "tiny")
    finally:
        con.close()


def test_served_deployment_answers_queries_added_after_it_started_and_stops_on_ctrl_c(tmp_path):
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowRunFilter,
        FlowRunFilterDeploymentId,
    )
    from dpicl.flows.locking import database_writer, limit_name
    from dpicl.serve import token_path
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_queries

    config, db = make_backlog(tmp_path, queries=3, planned=20)
    port = free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    out_path = tmp_path / "serve.out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("dpicl")), "serve", config, "--db", db,
             "--interval", "5", "--port", str(port)],
            env=child_env(tmp_path / "serve-home"), stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_for(lambda: proc.poll() is not None or "Prefect UI: http://127.0.0.1:" in out_path.read_text(),
                 180, 0.5, "dpicl serve to print the UI address")
        assert proc.poll() is None, out_path.read_text()[-3000:]
        assert httpx.get(f"{api_url}/health", timeout=5).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 200  # the UI
        # the API needs the token: generated on this first start, kept owner-only beside the database, and, the
        # output being a file here (a log, a service's journal), never printed: its file is named instead
        auth = served_auth(db)
        token = auth.split(":", 1)[1]
        assert token_path(Path(db).resolve()).stat().st_mode & 0o777 == 0o600
        assert token not in out_path.read_text() and str(token_path(Path(db).resolve())) in out_path.read_text()
        assert httpx.post(f"{api_url}/deployments/filter", json={}, timeout=5).status_code == 401
        assert httpx.post(f"{api_url}/deployments/filter", json={}, auth=("dpicl", "wrong"),
                          timeout=5).status_code == 401
        assert httpx.post(f"{api_url}/deployments/filter", json={}, auth=tuple(auth.split(":", 1)),
                          timeout=5).status_code == 200

        def locked(read):
            # read under the database's writer slot: a bare read could hold the file just when a flow run's task
            # opens it, and crash that run (DuckDB: one process at a time)
            with _settings(api_url, auth):
                with database_writer(db, timeout_seconds=120):
                    return read(db)

        # the first scheduled run drains the initial backlog
        wait_for(lambda: set(locked(statuses).values()) == {"answered"}, 150, 3, "the initial backlog to be answered")
        initial = locked(_ledger)
        assert len(initial) == 3
        initial_runs = {run_id for _, run_id, _, _, _ in initial}

        # queries arrive while the deployment is served; a test process writes them under the same limit
        added_at = datetime.now(timezone.utc)
        more = write_jsonl(tmp_path / "more.jsonl", query_rows(3, 7))
        with _settings(api_url, auth):
            with database_writer(db, timeout_seconds=120):
                con = connect(db)
                try:
                    assert ingest_queries(con, more, "tiny-backlog", FieldMap(id="id", input="text")).rows_added == 4
                finally:
                    con.close()
        wait_for(lambda: set(locked(statuses).values()) == {"answered"}, 150, 3,
                 "the queries added later to be answered")

        ledger = locked(_ledger)
        assert len(ledger) == 7 and len({row[2] for row in ledger}) == 7  # one charge per query
        later_runs = {run_id for _, run_id, query_id, _, _ in ledger if query_id in {"q3", "q4", "q5", "q6"}}
        flow_run_ids = dict(locked(lambda d: read_db(d, "SELECT run_id, flow_run_id FROM runs")))
        assert len(locked(statuses)) == 7

        with _client(api_url, auth) as client:
            deployments = client.read_deployments(deployment_filter=DeploymentFilter(
                name=DeploymentFilterName(any_=["answer-backlog"])))
            assert len(deployments) == 1
            deployment = deployments[0]
            # config and database are the deployment's (dpicl.served): a call can give neither
            assert deployment.parameters == {}
            assert set(deployment.parameter_openapi_schema["properties"]) == {"max_queries"}
            assert [s.schedule.interval.total_seconds() for s in deployment.schedules] == [5.0]
            runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(
                deployment_id=FlowRunFilterDeploymentId(any_=[deployment.id])))
            by_id = {str(r.id): r for r in runs}
            # answered by later scheduled runs of the served deployment, not those of the initial backlog; a run may
            # start a moment before the queries arrive and still read them (its backlog is read after its start)
            assert later_runs and later_runs.isdisjoint(initial_runs)
            for run_id in later_runs:
                run = by_id[flow_run_ids[run_id]]
                assert run.state.is_completed() and run.end_time > added_at
            completed = [r for r in runs if r.state.is_completed()]
            assert len(completed) >= 2
            progress = [a for r in runs for a in flow_run_artifacts(client, r.id) if a.type == "progress"]
            per_run: dict[str, list] = {}
            for a in progress:
                per_run.setdefault(str(a.flow_run_id), []).append(a.data)
            # one progress artifact per run, at 100 % once the run has drained its share of the backlog
            assert all(per_run.get(str(r.id)) == [100] for r in completed), per_run
            assert all(isinstance(a.data, (int, float)) and 0 <= a.data <= 100 for a in progress)
            limit = client.read_global_concurrency_limit_by_name(limit_name(db))
            assert limit.limit == 1 and limit.active
            assert_no_private_text(*(a.data for a in progress), *(a.description for a in progress),
                                   *(r.parameters for r in runs))
            # a call that tries to choose its own config (the server takes it: its schema check allows extra keys
            # and a caller may switch it off) fails before the flow's body runs: nothing answered, nothing charged
            rogue = client.create_flow_run_from_deployment(
                deployment.id, parameters={"config": str(tmp_path / "other.yaml")})
            # the served process polls, then starts the run in a subprocess: minutes on a loaded 2-core machine
            final = wait_for(lambda: (r := client.read_flow_run(rogue.id)).state.is_final() and r, 300, 2,
                             "the run with a config of its own to end")
            assert not final.state.is_completed(), final.state
        assert len(locked(_ledger)) == 7
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            rc = proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    output = out_path.read_text()
    assert rc == 0, output[-3000:]
    assert "stopped the Prefect server" in output
    with pytest.raises(httpx.HTTPError):  # the server went with it
        httpx.get(f"{api_url}/health", timeout=3)


_RUN_FLOW = """
import json, sys
from dpicl.flows.answer_backlog import answer_backlog
r = answer_backlog(config=sys.argv[1], db=sys.argv[2], max_queries=int(sys.argv[3]))
print("RESULT " + json.dumps({"answered": r["answered"], "refused": r["refused_budget"]}), flush=True)
"""

_HOLD_FILE = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])  # held read-write, as a CLI command would, outside the concurrency limit
print("held", flush=True)
sys.stdin.readline()
con.close()
"""


def test_two_flow_runs_in_two_processes_queue_on_one_database_and_charge_each_release_once(
        tmp_path, prefect_server):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from dpicl.flows.locking import limit_name

    config, db = make_backlog(tmp_path, queries=12, planned=8)
    env = child_env(tmp_path / "client-home", prefect_server.api_url, prefect_server.auth)

    # a process outside the limit holds the file: the flow runs must wait for it, not crash on DuckDB's lock
    holder = subprocess.Popen([sys.executable, "-c", _HOLD_FILE, db], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    outs = [tmp_path / f"flow-{i}.out" for i in range(2)]
    procs = []
    for out_path in outs:
        with open(out_path, "wb") as out:
            procs.append(subprocess.Popen([sys.executable, "-c", _RUN_FLOW, config, db, "6"], env=env,
                                          stdout=out, stderr=subprocess.STDOUT, cwd=REPO))
    try:
        wait_for(lambda: any("waiting for another process to release" in p.read_text() for p in outs)
                 or any(p.poll() is not None for p in procs), 150, 0.5, "a flow run to wait for the file")
        assert all(p.poll() is None for p in procs), "a flow run ended while another process held the file"
        time.sleep(2)
        holder.stdin.write("release\n")
        holder.stdin.flush()
        assert holder.wait(timeout=30) == 0
        codes = [p.wait(timeout=150) for p in procs]
    finally:
        for p in (*procs, holder):
            if p.poll() is None:
                p.kill()
    texts = [p.read_text() for p in outs]
    assert codes == [0, 0], "\n---\n".join(t[-3000:] for t in texts)

    import json

    results = [json.loads(t.split("RESULT ", 1)[1].splitlines()[0]) for t in texts]
    # each run took six pending queries in turn: 6 + 6 of 12; the budget pays for 8, refuses the other 4
    assert sorted(r["answered"] + r["refused"] for r in results) == [6, 6]
    assert sum(r["answered"] for r in results) == 8 and sum(r["refused"] for r in results) == 4

    final = statuses(db)
    assert len(final) == 12 and sorted(final.values()).count("answered") == 8
    assert set(final.values()) == {"answered", "refused_budget"}
    releases = read_db(db, "SELECT query_id, entry_id FROM releases WHERE backlog = 'tiny-backlog'")
    ledger = _ledger(db)
    assert len(releases) == len({q for q, _ in releases}) == 8  # each query answered once
    assert len(ledger) == 8 and sorted(e for _, e in releases) == [row[0] for row in ledger]  # one charge each
    assert {q for q, _ in releases} == {q for q, s in final.items() if s == "answered"}
    # serialised: one run's charges all come before the other's, each charge starts where the last one ended
    run_order = [row[1] for row in ledger]
    assert len(set(run_order)) == 2 and run_order == sorted(run_order, key=run_order.index)
    for previous, entry in zip(ledger, ledger[1:]):
        assert entry[3] == pytest.approx(previous[4], rel=1e-12, abs=1e-12)
    summary = _budget(db)
    assert ledger[0][3] == 0
    assert summary["epsilon_spent"] == pytest.approx(sum(a - b for *_, b, a in ledger), rel=1e-9)
    assert summary["epsilon_spent"] <= summary["epsilon_limit"] and summary["unreleased_entries"] == 0

    flow_run_ids = [r[0] for r in read_db(db, "SELECT flow_run_id FROM runs ORDER BY started_at")]
    with _client(prefect_server.api_url, prefect_server.auth) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=flow_run_ids)))
        assert len(runs) == 2 and all(r.state.is_completed() for r in runs)
        first, second = sorted(runs, key=lambda r: r.start_time)
        assert second.start_time < first.end_time, "the two flow runs did not overlap: nothing was tested"
        limit = client.read_global_concurrency_limit_by_name(limit_name(db))
        assert limit.limit == 1 and limit.active_slots == 0
        artifacts = [a for r in runs for a in flow_run_artifacts(client, r.id)]
        progress = [a for a in artifacts if a.type == "progress"]
        assert sorted(a.data for a in progress) == [100.0, 100.0]
        assert_no_private_text(*(a.data for a in artifacts), *(a.description for a in artifacts))


def test_prefect_deploy_all_registers_the_yaml_and_a_process_worker_runs_the_backlog(tmp_path, prefect_server):
    """The production path of docs/ops/deployments.md: work pool, `prefect deploy --all`, `prefect worker start`."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterDeploymentId
    from prefect.deployments import run_deployment

    config, db = make_backlog(tmp_path, queries=4, planned=20)
    env = child_env(tmp_path / "cli-home", prefect_server.api_url, prefect_server.auth)
    prefect = str(Path(sys.executable).with_name("prefect"))

    def cli(*args: str, timeout: float = 180) -> str:
        done = subprocess.run([prefect, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
        return done.stdout

    cli("work-pool", "create", "dpicl-process", "--type", "process", "--overwrite")
    cli("--no-prompt", "deploy", "--all")
    with _client(prefect_server.api_url, prefect_server.auth) as client:
        deployments = {d.name: d for d in client.read_deployments()}
        assert set(deployments) == {"answer-backlog", "rerun", "evaluate"}
        assert all(d.work_pool_name == "dpicl-process" for d in deployments.values())
        backlog = deployments["answer-backlog"]
        assert backlog.entrypoint == "dpicl/flows/answer_backlog.py:answer_backlog"
        assert [s.schedule.cron for s in backlog.schedules] == ["0 * * * *"]
        # as prefect.yaml declares it: several runs may share a backlog (PostgreSQL), the rest queue
        declared = yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"][0]["concurrency_limit"]["limit"]
        assert backlog.global_concurrency_limit.limit == declared > 1
        assert not deployments["rerun"].schedules and not deployments["evaluate"].schedules
        # the test must not run the hourly schedule (the demo config on ./dpicl.duckdb): pause it, drop its runs
        client.pause_deployment(backlog.id)
        for run in client.read_flow_runs(flow_run_filter=FlowRunFilter(
                deployment_id=FlowRunFilterDeploymentId(any_=[backlog.id]))):
            client.delete_flow_run(run.id)

    worker_out = tmp_path / "worker.out"
    with open(worker_out, "wb") as out:
        worker = subprocess.Popen([prefect, "worker", "start", "--pool", "dpicl-process", "--limit", "1"], env=env,
                                  cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        with _client(prefect_server.api_url, prefect_server.auth) as client:
            run = run_deployment("answer_backlog/answer-backlog", parameters={"config": config, "db": db}, timeout=0)
            final = wait_for(lambda: (r := client.read_flow_run(run.id)).state.is_final() and r, 170, 2,
                             "the worker to run the deployment")
            assert final.state.is_completed(), (final.state, worker_out.read_text()[-3000:])
            artifacts = flow_run_artifacts(client, final.id)
            assert [a.data for a in artifacts if a.type == "progress"] == [100]
            assert_no_private_text(*(a.data for a in artifacts), *(a.description for a in artifacts),
                                   final.parameters)
    finally:
        worker.send_signal(signal.SIGINT)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
    assert set(statuses(db).values()) == {"answered"} and len(_ledger(db)) == 4
