"""Security (issue: hardening; docs/SECURITY.md): owner-only database files, the served API's token, loopback-only
binds unless allowed, and served flows whose config, database and query limit are the deployment's."""

from __future__ import annotations

import io
import os
import stat
import sys
from pathlib import Path

import httpx
import pytest

from tests.pipeline.serving import free_port


@pytest.fixture
def open_umask():
    """A permissive umask (022, the usual default) for the test, as a fresh process would have."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- database files ----------------------------------------------------------------------------------------------

def test_a_new_database_and_its_wal_are_created_owner_only(tmp_path, open_umask):
    from dpicl.storage.db import connect

    db = tmp_path / "new.duckdb"
    con = connect(db)
    try:
        con.execute("CREATE TABLE private_rows AS SELECT 'secret' AS text")  # DuckDB writes its WAL now
        wal = Path(f"{db}.wal")
        assert wal.exists()
        assert _mode(db) == 0o600 and _mode(wal) == 0o600
        spill = tmp_path / "spill"  # what the process creates afterwards (DuckDB's spill files, caches) too
        spill.mkdir()
        assert _mode(spill) == 0o700
    finally:
        con.close()


def test_an_existing_world_readable_database_is_made_owner_only(tmp_path, open_umask):
    from dpicl.storage.db import connect

    db = tmp_path / "old.duckdb"
    connect(db).close()
    db.chmod(0o644)  # as the code before this rule created it
    connect(db).close()
    assert _mode(db) == 0o600


# --- the served API's token ---------------------------------------------------------------------------------------

def test_the_token_is_created_once_owner_only_and_then_reused(tmp_path, open_umask):
    from dpicl.serve import ServeError, load_or_create_token, token_path

    path = token_path(tmp_path / "x.duckdb")
    assert path == tmp_path / "x.duckdb.serve-token"
    token, created = load_or_create_token(path)
    assert created and len(token) >= 43 and _mode(path) == 0o600  # 32 random bytes, URL-safe base64
    assert load_or_create_token(path) == (token, False)
    assert load_or_create_token(tmp_path / "other-token")[0] != token
    path.chmod(0o644)
    with pytest.raises(ServeError, match="readable by other users"):
        load_or_create_token(path)


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("0.0.0.0", False), ("::", False), ("", False), ("192.168.1.10", False), ("10.0.0.1", False),
    ("example.com", False), ("*", False)])
def test_only_loopback_addresses_count_as_local(host, loopback):
    from dpicl.serve import is_loopback

    assert is_loopback(host) is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1"])
def test_serve_refuses_a_non_loopback_bind_unless_allowed(tmp_path, host, monkeypatch):
    from dpicl import serve as serving

    started = []
    monkeypatch.setattr(serving, "start_server", lambda *a, **k: started.append(k))
    with pytest.raises(serving.ServeError, match="not a loopback address.*--allow-remote"):
        serving.serve("demo", str(tmp_path / "x.duckdb"), host=host, echo=lambda line: None)
    assert not started and not serving.token_path(tmp_path / "x.duckdb").exists()


def test_serve_with_allow_remote_warns_and_starts_the_server_with_the_token_shown_once(tmp_path, monkeypatch):
    from dpicl import serve as serving

    calls = []

    def start(host, port, home, timeout, **kwargs):
        calls.append((host, kwargs))
        raise KeyboardInterrupt  # stops serve() right there, as Ctrl-C during start-up would

    monkeypatch.setattr(serving, "start_server", start)

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())  # shown on a terminal only (test_serve: never into a file)
    db = tmp_path / "x.duckdb"
    first, second = [], []
    serving.serve("demo", str(db), host="0.0.0.0", allow_remote=True, echo=first.append)
    token = serving.token_path(db.resolve()).read_text().strip()
    assert calls[0] == ("0.0.0.0", {"auth": f"dpicl:{token}", "allow_remote": True})
    assert any(line.startswith("warning:") and "reachable from other machines" in line for line in first)
    assert sum(token in line for line in first) == 1  # shown on the first start ...
    serving.serve("demo", str(db), echo=second.append)
    assert calls[1] == ("127.0.0.1", {"auth": f"dpicl:{token}", "allow_remote": False})
    assert not any(token in line for line in second) and not any("warning" in line for line in second)  # ... only


def test_the_cli_refuses_a_non_loopback_host_with_one_error_line(tmp_path):
    from typer.testing import CliRunner

    from dpicl.cli import app

    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0", "--db", str(tmp_path / "x.duckdb")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --host 0.0.0.0 is not a loopback address") and result.stdout == ""


# --- what a call may choose ---------------------------------------------------------------------------------------

def test_served_flows_take_neither_config_nor_database_from_a_call():
    from dpicl import served

    assert set(served.answer_backlog.parameters.properties) == {"max_queries"}
    assert set(served.rerun.parameters.properties) == {"run_id", "from_stage", "max_queries"}
    assert not {"seed", "out_dir", "db"} & set(served.evaluate.parameters.properties)


def test_a_calls_query_limit_cannot_exceed_the_deployments(monkeypatch, tmp_path):
    from dpicl import served
    from dpicl.flows import answer_backlog as flow_module

    fixed = served.Deployment(config=str(tmp_path / "c.yaml"), db=str(tmp_path / "d.duckdb"),
                              out_dir=str(tmp_path / "out"), max_queries=5)
    monkeypatch.setenv(served.ENV, fixed.to_env())
    seen = []
    monkeypatch.setattr(flow_module.answer_backlog, "fn", lambda **kwargs: seen.append(kwargs) or {})
    served.answer_backlog.fn()
    served.answer_backlog.fn(max_queries=2)
    assert seen == [{"config": fixed.config, "db": fixed.db, "max_queries": 5},
                    {"config": fixed.config, "db": fixed.db, "max_queries": 2}]
    for asked in (6, 10**9, 0, -1, True):
        with pytest.raises(ValueError, match="max_queries"):
            served.answer_backlog.fn(max_queries=asked)
    assert len(seen) == 2
    unlimited = served.Deployment(config="c", db="d", out_dir="o")
    assert unlimited.query_limit(None) is None and unlimited.query_limit(10**6) == 10**6


def test_a_served_evaluation_takes_bundled_config_names_only(monkeypatch):
    from dpicl import served

    assert served.bundled_config("demo").endswith("configs/demo.yaml")
    for name in ("../../etc/passwd", "/etc/passwd", "demo.yaml", "dpicl/configs/demo.yaml", ""):
        with pytest.raises(ValueError, match="bundled configs"):
            served.bundled_config(name)
    monkeypatch.delenv(served.ENV, raising=False)
    with pytest.raises(served.NotServedError):
        served.Deployment.current()


# --- the API itself (a real Prefect server) -------------------------------------------------------------------------

@pytest.mark.slow
def test_the_api_refuses_requests_without_the_token(tmp_path, open_umask):
    import secrets

    from dpicl.serve import auth_string, start_server

    token = secrets.token_urlsafe(32)
    home = tmp_path / "prefect-home"
    server = start_server("127.0.0.1", free_port(), home, auth=auth_string(token))
    try:
        url = f"{server.api_url}/flows/filter"
        assert httpx.post(url, json={}, timeout=10).status_code == 401
        assert httpx.post(url, json={}, auth=("dpicl", "not-the-token"), timeout=10).status_code == 401
        assert httpx.post(url, json={}, auth=("dpicl", token), timeout=10).status_code == 200
        assert httpx.get(f"{server.api_url}/health", timeout=10).status_code == 200  # probes need no token
        assert _mode(home) == 0o700 and _mode(server.log_path) == 0o600
    finally:
        server.stop()
