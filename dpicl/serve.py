"""`dpicl serve`: a local Prefect server plus the dpicl deployments, served from this process.

What it does, in order:

1. starts `prefect server start --host HOST --port PORT` as a child process (its own session, log file under
   `$PREFECT_HOME`), with `PREFECT_API_URL` pointing at itself so that the UI talks to the right port;
2. waits for `GET /api/health` to answer 200 (fails with the tail of the server log if it exits or times out);
3. builds the deployments prefect.yaml defines (names, descriptions, tags, schedules, concurrency limits:
   `dpicl.deployments`) and serves them in this process with `prefect.serve` (a `Runner`): `answer-backlog` on
   prefect.yaml's schedule or the interval or cron given, `evaluate` and `rerun` without a schedule (run them
   from the UI or `prefect deployment run`). Each flow run is a child process (`python -m prefect.engine`), at most one at a
   time: DuckDB takes one writer anyway, and every writing flow runs under the database's concurrency limit
   (`dpicl.flows.locking`);
4. prints the UI address and runs until Ctrl-C (SIGINT) or SIGTERM, then stops the runner (pausing the schedules)
   and the server, and returns.

Why serve instead of work pool + worker: one process to start and stop, no work pool to manage, and the flow code
is the installed package, so the same command works in a shell, under systemd and in the tests. Production
deployments with a `process` work pool are declared in `prefect.yaml` (docs/ops/deployments.md).

Parameters carry names and paths only (config, database); no private text reaches Prefect.

Security (docs/SECURITY.md): the API requires a token, sent as HTTP basic auth `dpicl:<token>` (Prefect's own
`server.api.auth_string`, compared in constant time). It is generated on the first start for a database, stored
owner-only (0600) beside it as `<db>.serve-token`, and printed that once, on a terminal only (never into a
log). The server binds the loopback unless `--allow-remote` is given (with a warning). The deployed flows are
those of `dpicl.served`: config, database and the per-run query limit are the deployment's; a call cannot choose a
config file or exceed the limit.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

TOKEN_USER = "dpicl"  # the user part of the basic-auth string; the token is the password
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
    auth: str | None = field(repr=False, default=None)  # the basic-auth string its API requires

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


def is_loopback(host: str) -> bool:
    """Whether a server bound to `host` is reachable from this machine only (`localhost` or a loopback address;
    wildcards such as 0.0.0.0 and other names are not)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, allow_remote: bool) -> None:
    """ServeError for a non-loopback bind unless `allow_remote`."""
    if not allow_remote and not is_loopback(host):
        raise ServeError(f"--host {host} is not a loopback address: the API would be reachable from other "
                         "machines. Bind 127.0.0.1 (the default), or pass --allow-remote if that is intended "
                         "(put a TLS proxy in front: the token travels in every request)")


def token_path(db_path: str | Path) -> Path:
    """Where the API token of the server for database `db_path` is kept: beside it, `<db>.serve-token`; for a
    PostgreSQL database in Prefect's home, named by a hash of the URL."""
    from dpicl.storage.postgres import is_url

    if is_url(str(db_path)):
        from prefect.settings import get_current_settings

        digest = hashlib.sha256(str(db_path).encode()).hexdigest()[:12]
        return Path(get_current_settings().home).expanduser() / f"dpicl-postgres-{digest}.serve-token"
    return Path(f"{db_path}.serve-token")


def load_or_create_token(path: Path) -> tuple[str, bool]:
    """(token, created): the token stored at `path`, or a new one written there owner-only (0600) if none is."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # 0600 from the start: never readable
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            raise ServeError(f"the API token file {path} is readable by other users; make it owner-only "
                             f"(chmod 600 {path}) or delete it to get a new token") from None
        token = path.read_text(encoding="utf-8").strip()
        if not token:
            raise ServeError(f"the API token file {path} is empty; delete it to get a new token") from None
        return token, False
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(token + "\n")
    return token, True


def auth_string(token: str) -> str:
    """The basic-auth credentials Prefect's server checks and its clients send (`PREFECT_API_AUTH_STRING`)."""
    return f"{TOKEN_USER}:{token}"


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
                 health_timeout: float = HEALTH_TIMEOUT_SECONDS, *, auth: str | None = None,
                 allow_remote: bool = False) -> LocalServer:
    """Start a Prefect server bound to host:port and wait until its health endpoint answers.

    `auth`: the basic-auth string every API call must carry (`auth_string`); the health check needs none. A
    non-loopback `host` is refused unless `allow_remote`. The server stops with the calling thread (Linux): call
    this from a thread that outlives the server's use.
    """
    import httpx
    from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

    check_bind(host, allow_remote)
    if port_in_use(host, port):
        raise ServeError(f"port {port} on {host} is already in use (another Prefect server?): choose another "
                         "with --port")
    base = f"http://{client_host(host)}:{port}"
    api_url = f"{base}/api"
    prefect_home.mkdir(parents=True, exist_ok=True, mode=0o700)  # the server's database: runs, logs, token use
    log_path = prefect_home / f"dpicl-serve-server-{port}.log"
    log_handle = os.fdopen(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab")
    env = {**os.environ, "PREFECT_API_URL": api_url, "PREFECT_HOME": str(prefect_home)}
    if auth is not None:
        env["PREFECT_SERVER_API_AUTH_STRING"] = env["PREFECT_API_AUTH_STRING"] = auth
    process = subprocess.Popen(
        [sys.executable, "-c", _STOP_WITH_PARENT, str(os.getpid()),
         "-m", "prefect", "server", "start", "--host", host, "--port", str(port)],
        env=env, stdout=log_handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C reaches us only; we stop the server after the runner
    )
    server = LocalServer(process, api_url, base, log_path, log_handle, auth)

    def healthy() -> bool:
        if process.poll() is not None:
            raise ServeError(f"the Prefect server exited during start-up (code {process.returncode}); its "
                             f"log {log_path} ends with:\n{server.log_tail()}")
        try:
            return httpx.get(f"{api_url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        Retrying(retry=retry_if_result(lambda ok: not ok), wait=wait_fixed(0.5),
                 stop=stop_after_delay(health_timeout))(healthy)
        return server
    except RetryError:
        error = ServeError(f"the Prefect server did not answer {api_url}/health within {health_timeout:.0f} s; "
                           f"its log {log_path} ends with:\n{server.log_tail()}")
        server.stop()
        raise error from None
    except BaseException:  # also Ctrl-C / SIGTERM while waiting: never leave the server behind
        server.stop()
        raise


def build_deployments(interval: float | None = None, cron: str | None = None) -> list:
    """RunnerDeployments of the `dpicl.served` flows, defined by prefect.yaml (`dpicl.deployments`): its names,
    descriptions, tags, schedules and concurrency limits. `interval` or `cron` replaces answer-backlog's schedule.
    Config, database and limits are not parameters: `dpicl.served.Deployment` fixes them."""
    from prefect.schedules import Cron, Interval
    from prefect.types.entrypoint import EntrypointType

    from dpicl import deployments, served

    if interval is not None and cron is not None:
        raise ServeError("give at most one of --interval SECONDS and --cron EXPRESSION")
    # enforce_parameter_schema: the server refuses a call whose parameters the flow does not take (e.g. config)
    common = {"entrypoint_type": EntrypointType.MODULE_PATH, "paused": False, "enforce_parameter_schema": True}
    built = []
    for flow in (served.answer_backlog, served.evaluate, served.rerun):
        definition = deployments.definitions()[flow.name]
        planned = deployments.schedule(flow.name)
        if flow.name == "answer_backlog" and (interval is not None or cron is not None):
            planned = {"interval": interval} if interval is not None else {"cron": cron, "timezone": "UTC"}
        schedule = None if planned is None else (
            Interval(planned["interval"]) if "interval" in planned else Cron(planned["cron"],
                                                                             timezone=planned["timezone"]))
        limit = definition.get("concurrency_limit")
        built.append(flow.to_deployment(
            definition["name"], description=definition.get("description"), tags=definition.get("tags"),
            schedule=schedule, concurrency_limit=None if limit is None else limit["limit"], **common))
    return built


def serve(config: str, db: str | None, *, interval: float | None = None, cron: str | None = None,
          host: str = "127.0.0.1", port: int = 4200, echo: Callable[[str], None] = print,
          health_timeout: float = HEALTH_TIMEOUT_SECONDS, allow_remote: bool = False,
          max_queries: int | None = None, out_dir: str = "evaluation") -> None:
    """Start the server, serve the deployments until Ctrl-C or SIGTERM, stop everything. Blocks.

    `max_queries`: the most queries one run may answer (a call may ask for fewer); `out_dir`: where served
    evaluations write their plot and report."""
    from prefect.settings import (
        PREFECT_API_AUTH_STRING,
        PREFECT_API_URL,
        get_current_settings,
        temporary_settings,
    )

    from dpicl.config import load_config, resolve_config_path
    from dpicl.served import ENV, Deployment
    from dpicl.storage.db import default_db_path, is_file_target, restrict_new_files

    if interval is not None and not interval > 0:
        raise ServeError(f"--interval must be a positive number of seconds (got {interval})")
    if max_queries is not None and max_queries < 1:
        raise ServeError(f"--max-queries must be at least 1 (got {max_queries})")
    check_bind(host, allow_remote)
    config_path = str(Path(resolve_config_path(config)).resolve())
    load_config(config_path)  # a config that does not parse fails here, not in every scheduled run
    target = db or default_db_path()
    db_path = str(Path(target).resolve()) if is_file_target(target) else str(target)
    prefect_home = Path(get_current_settings().home).expanduser().resolve()
    restrict_new_files()  # the server's database (flow runs, logs) and the token: owner-only
    token, created = load_or_create_token(token_path(db_path))
    auth = auth_string(token)
    if not is_loopback(host):
        echo(f"warning: --allow-remote: the API on {host}:{port} is reachable from other machines; every call "
             "needs the token, which travels unencrypted over HTTP: put a TLS proxy in front")
    if created and sys.stdout.isatty():
        echo(f"API token (shown this once; kept owner-only in {token_path(db_path)}): {token}")
    else:  # never into a log file or a service's journal
        echo(f"API token: in {token_path(db_path)} (owner-only; `cat` it)")
    echo(f"clients send it as HTTP basic auth {TOKEN_USER}:<token> (Prefect clients: "
         f"PREFECT_API_AUTH_STRING={TOKEN_USER}:<token>; in the UI's login box type {TOKEN_USER}:<token>, "
         "the user name too)")
    fixed = Deployment(config=config_path, db=db_path, out_dir=str(Path(out_dir).resolve()), max_queries=max_queries)

    main_thread = threading.current_thread() is threading.main_thread()
    previous_handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    if main_thread:
        # Ctrl-C even when started with SIGINT ignored (a background job of a non-interactive shell), and SIGTERM
        # the same way from here on (the runner later installs an equivalent handler of its own)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        server = start_server(host, port, prefect_home, health_timeout, auth=auth, allow_remote=allow_remote)
    except KeyboardInterrupt:
        _restore(previous_handlers)
        echo("interrupted while the Prefect server was starting; stopped it")
        return
    except BaseException:
        _restore(previous_handlers)
        raise
    exported = {"PREFECT_API_URL": server.api_url, "PREFECT_API_AUTH_STRING": auth, ENV: fixed.to_env()}
    previous_env = {key: os.environ.get(key) for key in exported}
    try:
        # our flow runs are child processes: they read the server's address, the token and the deployment's
        # settings from the environment
        os.environ.update(exported)
        with temporary_settings(updates={PREFECT_API_URL: server.api_url, PREFECT_API_AUTH_STRING: auth}):
            deployments = build_deployments(interval=interval, cron=cron)
            when = f"every {interval:g} s" if interval is not None else f"on cron {cron!r}"
            echo(f"Prefect UI: {server.ui_url}  (API {server.api_url}; server log {server.log_path})")
            limit = f"at most {max_queries} queries a run" if max_queries else "the whole backlog each run"
            echo(f"serving {', '.join(f'{d.flow_name}/{d.name}' for d in deployments)}; answer-backlog runs "
                 f"{when} on {db_path} ({limit}). Ctrl-C stops everything.")
            runner = _make_runner(pause_on_shutdown=True, limit=1,
                             query_seconds=max(1.0, min(10.0, (interval or 20.0) / 2)))
            for deployment in deployments:
                runner.add_deployment(deployment)
            asyncio.run(runner.start())
    except KeyboardInterrupt:
        echo("stopping: the runner (schedules paused), then the Prefect server")
    finally:
        _restore(previous_handlers)
        for key, value in previous_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
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
