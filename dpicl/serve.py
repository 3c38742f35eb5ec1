"""`dpicl serve`: a local Prefect server plus the dpicl deployments, served from this process.

What it does, in order:

1. starts `prefect server start --host HOST --port PORT` as a child process (its own session, log file under
   `$PREFECT_HOME`), with `PREFECT_API_URL` pointing at itself so that the UI talks to the right port;
2. waits for `GET /api/health` to answer 200 (fails with the tail of the server log if it exits or times out);
3. builds the deployments and serves them in this process with `prefect.serve` (a `Runner`): `answer-backlog`
   on the schedule given (interval or cron), `evaluate` and — when `dpicl/flows/rerun.py` exists — `rerun`
   without a schedule (run them from the UI or `prefect deployment run`). Each flow run is a child process
   (`python -m prefect.engine`), at most one at a time: DuckDB takes one writer anyway, and every writing flow
   runs under the database's concurrency limit (`dpicl.flows.locking`);
4. prints the UI address and runs until Ctrl-C (SIGINT) or SIGTERM, then stops the runner (pausing the schedules)
   and the server, and returns.

Why serve instead of work pool + worker: one process to start and stop, no work pool to manage, and the flow code
is the installed package, so the same command works in a shell, under systemd and in the tests. Production
deployments with a `process` work pool are declared in `prefect.yaml` (docs/ops/deployments.md).

Parameters carry names and paths only (config, database); no private text reaches Prefect.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

DEPLOYMENT_NAMES = {"answer_backlog": "answer-backlog", "evaluate": "evaluate", "rerun": "rerun"}
HEALTH_TIMEOUT_SECONDS = 180.0
STOP_TIMEOUT_SECONDS = 30.0


class ServeError(RuntimeError):
    """`dpicl serve` cannot start (the message says why and what to do)."""


@dataclass
class LocalServer:
    """A `prefect server start` child process."""

    process: subprocess.Popen
    api_url: str
    ui_url: str
    log_path: Path
    _log_handle: object = field(repr=False, default=None)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int | None:
        """SIGTERM to the server's process group (it runs in its own session), SIGKILL after `timeout`."""
        proc = self.process
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout)
        if self._log_handle is not None:
            self._log_handle.close()
        return proc.returncode


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the group of the server we started (start_new_session: pgid == pid)
    except ProcessLookupError:
        pass


def client_host(host: str) -> str:
    """Where clients reach a server bound to `host` (a wildcard bind is reached on the loopback)."""
    if host in ("0.0.0.0", "", "*"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def port_in_use(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a port in TIME_WAIT is free
        try:
            sock.bind((host.strip("[]"), port))
        except OSError:
            return True
    return False


# Run in the server's process before it execs Prefect: on Linux the server gets SIGTERM when the thread that
# started it dies, so a `dpicl serve` killed with SIGKILL (or by the OOM killer) leaves no server behind. A
# parent-death signal survives exec; a parent already gone before it was set is checked for by pid.
_STOP_WITH_PARENT = """
import ctypes, os, signal, sys
if sys.platform == "linux":
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
if os.getppid() != int(sys.argv[1]):
    sys.exit("dpicl serve exited before its Prefect server started")
os.execv(sys.executable, [sys.executable, *sys.argv[2:]])
"""


def start_server(host: str, port: int, prefect_home: Path,
                 health_timeout: float = HEALTH_TIMEOUT_SECONDS) -> LocalServer:
    """Start a Prefect server bound to host:port and wait until its health endpoint answers.

    The server stops with the calling thread (Linux): call this from a thread that outlives the server's use.
    """
    import httpx

    if port_in_use(host, port):
        raise ServeError(f"port {port} on {host} is already in use (another Prefect server?): choose another "
                         "with --port")
    base = f"http://{client_host(host)}:{port}"
    api_url = f"{base}/api"
    prefect_home.mkdir(parents=True, exist_ok=True)
    log_path = prefect_home / f"dpicl-serve-server-{port}.log"
    log_handle = open(log_path, "ab")
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(prefect_home)}
    process = subprocess.Popen(
        [sys.executable, "-c", _STOP_WITH_PARENT, str(os.getpid()),
         "-m", "prefect", "server", "start", "--host", host, "--port", str(port)],
        env=env, stdout=log_handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C reaches us only; we stop the server after the runner
    )
    server = LocalServer(process, api_url, base, log_path, log_handle)
    try:
        deadline = time.monotonic() + health_timeout
        while True:
            if process.poll() is not None:
                raise ServeError(f"the Prefect server exited during start-up (code {process.returncode}); its "
                                 f"log {log_path} ends with:\n{server.log_tail()}")
            try:
                if httpx.get(f"{api_url}/health", timeout=2).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise ServeError(f"the Prefect server did not answer {api_url}/health within "
                                 f"{health_timeout:.0f} s; its log {log_path} ends with:\n{server.log_tail()}")
            time.sleep(0.5)
    except BaseException:  # also Ctrl-C / SIGTERM while waiting: never leave the server behind
        server.stop()
        raise


def _rerun_flow():
    """The `rerun` flow when its module exists (it is optional here)."""
    try:
        from dpicl.flows.rerun import rerun
    except ImportError:
        return None
    return rerun


def build_deployments(config: str, db: str, interval: float | None = None, cron: str | None = None) -> list:
    """RunnerDeployments: answer-backlog on the schedule, evaluate and rerun (if present) on demand.

    `config` and `db` must already be absolute paths (flow runs start in child processes)."""
    from prefect.types.entrypoint import EntrypointType

    from dpicl.flows.answer_backlog import answer_backlog
    from dpicl.flows.evaluate import evaluate

    if (interval is None) == (cron is None):
        raise ServeError("give exactly one of --interval SECONDS and --cron EXPRESSION")
    common = dict(entrypoint_type=EntrypointType.MODULE_PATH, tags=["dpicl"], paused=False)
    schedule = {"interval": interval} if interval is not None else {"cron": cron}
    deployments = [
        answer_backlog.to_deployment(
            DEPLOYMENT_NAMES["answer_backlog"], parameters={"config": config, "db": db},
            description="Answer the backlog's pending queries, each paid from the privacy budget.",
            **schedule, **common),
        evaluate.to_deployment(
            DEPLOYMENT_NAMES["evaluate"], parameters={"db": db},
            description="Privacy–utility sweep on benchmark data (give `configs`); charges no budget.", **common),
    ]
    rerun = _rerun_flow()
    if rerun is not None:
        # the database only: `run_id` (required) and `config` (default: the run's own) are given per run
        params = {"db": db} if "db" in rerun.parameters.properties else {}
        deployments.append(rerun.to_deployment(
            DEPLOYMENT_NAMES["rerun"], parameters=params,
            description="Re-aggregate from stored artifacts (charged where it makes a new release).", **common))
    return deployments


def serve(config: str, db: str | None, *, interval: float | None = None, cron: str | None = None,
          host: str = "127.0.0.1", port: int = 4200, echo: Callable[[str], None] = print,
          health_timeout: float = HEALTH_TIMEOUT_SECONDS) -> None:
    """Start the server, serve the deployments until Ctrl-C or SIGTERM, stop everything. Blocks."""
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from dpicl.config import load_config, resolve_config_path
    from dpicl.storage.db import default_db_path

    if interval is None and cron is None:
        interval = 3600.0
    if interval is not None and not interval > 0:
        raise ServeError(f"--interval must be a positive number of seconds (got {interval})")
    config_path = str(Path(resolve_config_path(config)).resolve())
    load_config(config_path)  # a config that does not parse fails here, not in every scheduled run
    db_path = str(Path(db or default_db_path()).resolve())
    prefect_home = Path(get_current_settings().home).expanduser().resolve()

    main_thread = threading.current_thread() is threading.main_thread()
    previous_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    if main_thread:
        # Ctrl-C even when started with SIGINT ignored (a background job of a non-interactive shell), and SIGTERM
        # the same way from here on (the runner later installs an equivalent handler of its own)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        server = start_server(host, port, prefect_home, health_timeout)
    except KeyboardInterrupt:
        _restore(previous_handlers)
        echo("interrupted while the Prefect server was starting; stopped it")
        return
    except BaseException:
        _restore(previous_handlers)
        raise
    previous_api_url = os.environ.get("PREFECT_API_URL")
    try:
        # our flow runs are child processes: they read the server's address from the environment
        os.environ["PREFECT_API_URL"] = server.api_url
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            deployments = build_deployments(config_path, db_path, interval=interval, cron=cron)
            when = f"every {interval:g} s" if interval is not None else f"on cron {cron!r}"
            echo(f"Prefect UI: {server.ui_url}  (API {server.api_url}; server log {server.log_path})")
            echo(f"serving {', '.join(f'{d.flow_name}/{d.name}' for d in deployments)}; answer-backlog runs "
                 f"{when} on {db_path}. Ctrl-C stops everything.")
            runner = _make_runner(pause_on_shutdown=True, limit=1,
                             query_seconds=max(1.0, min(10.0, (interval or 20.0) / 2)))
            for deployment in deployments:
                runner.add_deployment(deployment)
            asyncio.run(runner.start())
    except KeyboardInterrupt:
        echo("stopping: the runner (schedules paused), then the Prefect server")
    finally:
        _restore(previous_handlers)
        if previous_api_url is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = previous_api_url
        code = server.stop()
        echo(f"stopped the Prefect server (exit code {code})")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _restore(handlers: dict) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _runner_class():
    from prefect.runner import Runner

    class DpiclRunner(Runner):
        """Prefect's Runner, with SIGTERM handled like Ctrl-C (its own handler exits from inside the event loop
        and leaves an un-awaited coroutine and a traceback behind)."""

        def handle_sigterm(self, *args, **kwargs) -> None:
            raise KeyboardInterrupt

    return DpiclRunner


def _make_runner(**kwargs):
    return _runner_class()(**kwargs)
