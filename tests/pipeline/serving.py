"""Helpers of the deployment tests: a backlog sized to run fast, child-process environments with fake models,
reading a database that a flow run may be holding, and Prefect API look-ups."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import yaml

from tests.pipeline.conftest import ingest_tiny

REPO = Path(__file__).resolve().parents[2]
FAKE_SITE = Path(__file__).resolve().parent / "fake_models_site"
PRIVATE_WORDS = ("private ticket", "private summary", "incoming ticket")  # texts of the records and queries


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query_rows(start: int, stop: int) -> list[dict]:
    return [{"id": f"q{i}", "text": f"incoming ticket {i}"} for i in range(start, stop)]


def make_backlog(tmp_path: Path, *, queries: int, planned: int, epsilon: float = 2.0) -> tuple[str, str]:
    """A private dataset, a backlog of `queries`, a budget for `planned` ESA queries; returns (config, db).

    `sampling_rate: 1.0` keeps the noise calibration (PRV accountant, once per flow-run process) at a few seconds
    instead of tens: these tests are about orchestration, not about the mechanism."""
    db = tmp_path / "serve.duckdb"
    ingest_tiny(db, tmp_path, epsilon=epsilon, query_rows=query_rows(0, queries))
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "name": "tiny",
        "private_dataset": "tiny",
        "backlog": "tiny-backlog",
        "method": {"name": "esa", "teachers": 4, "shots": 2, "candidates": 3, "planned_queries": planned,
                   "sampling_rate": 1.0},
        "batch_queries": 3,
    }))
    return str(config), str(db)


def fake_models_pythonpath() -> str:
    """PYTHONPATH of a child process with fake models: their site folder and the repository before the rest."""
    return os.pathsep.join([str(FAKE_SITE), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])


def child_env(prefect_home: Path, api_url: str | None = None, auth: str | None = None) -> dict[str, str]:
    """Environment of a child process: fake models (tests/pipeline/fake_models_site), its own PREFECT_HOME, and
    with `auth` the API token (`dpicl.serve.auth_string`) its Prefect client sends."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "PREFECT_API_AUTH_STRING")}
    env.update({
        "PREFECT_HOME": str(prefect_home),
        "PYTHONPATH": fake_models_pythonpath(),
        "DPICL_TEST_FAKE_MODELS": "1",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PYTHONUNBUFFERED": "1",
    })
    if api_url:
        env["PREFECT_API_URL"] = api_url
    if auth:
        env["PREFECT_API_AUTH_STRING"] = auth
    return env


def served_auth(db: str) -> str:
    """The basic-auth string of the server `dpicl serve` started for database `db` (its token file)."""
    from dpicl.serve import auth_string, token_path

    return auth_string(token_path(Path(db).resolve()).read_text().strip())


def prefect_bin() -> str:
    return str(Path(sys.executable).with_name("prefect"))


def read_db(db: str, query: str, params: list | None = None, timeout: float = 120.0) -> list[tuple]:
    """Rows of a read-only query, retried while a flow run holds the file (DuckDB: one process at a time)."""
    from dpicl.storage.db import connect

    con = connect(db, read_only=True, wait_seconds=timeout)
    try:
        return con.execute(query, params or []).fetchall()
    finally:
        con.close()


def statuses(db: str) -> dict[str, str]:
    return dict(read_db(db, "SELECT query_id, status FROM queries WHERE backlog = 'tiny-backlog'"))


def wait_for(predicate, timeout: float, interval: float = 1.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def flow_run_artifacts(client, flow_run_id) -> list:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    return client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(
        any_=[flow_run_id])))


def assert_no_private_text(*texts) -> None:
    blob = " ".join(str(t) for t in texts)
    for word in PRIVATE_WORDS:
        assert word not in blob, f"private text ({word!r}…) reached Prefect"
