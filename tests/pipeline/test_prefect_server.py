"""answer_backlog against a real Prefect server (PREFECT_API_URL), as ops teams run it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def prefect_server(tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "server-home"), "PREFECT_API_URL": url}
    prefect = Path(sys.executable).with_name("prefect")
    proc = subprocess.Popen([str(prefect), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None:
                pytest.fail("the Prefect server exited during start-up")
            time.sleep(1)
        else:
            pytest.fail("the Prefect server did not answer within 180 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_flow_runs_and_publishes_artifacts_on_the_configured_server(pipeline_env, prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from dpicl.flows.answer_backlog import answer_backlog

    config, db = pipeline_env
    with temporary_settings(updates={PREFECT_API_URL: prefect_server}):
        result = answer_backlog(config=config, db=db)
        with get_client(sync_client=True) as client:
            assert str(client.api_url).rstrip("/") == prefect_server
            runs = client.read_flow_runs()
            artifacts = client.read_artifacts()
    assert result["answered"] > 0
    assert [r.name for r in runs] and all(r.state.is_completed() for r in runs)
    keys = {a.key for a in artifacts}
    assert {"releases-tiny-backlog", "budget-tiny"} <= keys
    table = next(a for a in artifacts if a.key == "releases-tiny-backlog")
    assert "epsilon_cost" in str(table.data) and "refused_budget" in str(table.data)
