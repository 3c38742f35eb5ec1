"""A throw-away PostgreSQL server from the machine's own binaries (`initdb`, `pg_ctl`), for the tests, the
scale-out benchmark and trying the PostgreSQL backend on one machine: a fresh cluster in a temporary folder,
listening on a free port of 127.0.0.1 with trust authentication, removed with everything in it on `stop()`.

PostgreSQL refuses to run as root; as root the server runs as the `postgres` system user (Debian's packages create
it), through `runuser`. Never for real data: nothing here is durable or protected.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server binaries on this machine (or none this user can run)."""


def find_binaries() -> Path | None:
    """The folder holding `initdb` and `pg_ctl` (PATH first, then Debian's /usr/lib/postgresql/*/bin), or None."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").exists() and (Path(folder) / "pg_ctl").exists():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThrowawayPostgres:
    """`start()` a cluster, `url(name)` of a database in it, `create_database(name)`, `stop()`."""

    def __init__(self) -> None:
        self.bin = find_binaries()
        if self.bin is None:
            raise PostgresUnavailable("no PostgreSQL server binaries (initdb, pg_ctl) on this machine; install them "
                                      "(Debian: apt-get install postgresql)")
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            if shutil.which("runuser") is None or subprocess.run(["id", "postgres"], capture_output=True).returncode:
                raise PostgresUnavailable("PostgreSQL does not run as root and there is no `postgres` user to run "
                                          "it as")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.folder = Path(tempfile.mkdtemp(prefix="dpicl-pg-"))
        if self.as_user:
            shutil.chown(self.folder, "postgres")
        self.data = self.folder / "data"
        self.port = _free_port()
        self.user = "postgres" if self.as_user else os.environ.get("USER") or "postgres"

    def _run(self, *args: str) -> None:
        done = subprocess.run([*self.as_user, *args], capture_output=True, text=True)
        if done.returncode:
            raise PostgresUnavailable(f"{Path(args[0]).name} failed: {(done.stderr or done.stdout).strip()[-2000:]}")

    def start(self) -> ThrowawayPostgres:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust",
                  "--encoding=UTF8", "--no-sync", "--locale=C")
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c unix_socket_directories={self.folder} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l",
                  str(self.folder / "server.log"), "-w", "-t", "60", "start")
        return self

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run([*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                            "stop"], capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
