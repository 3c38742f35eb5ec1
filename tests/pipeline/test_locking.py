"""The pieces of the one-writer lock that need no Prefect server: the limit's name, waiting for the DuckDB file,
the machine-local file lock. (The Prefect limit itself, across processes, is tested in test_serve.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from dpicl.flows.locking import (
    LIMIT_PREFIX,
    _file_lock,
    limit_name,
    wait_until_openable,
)
from dpicl.storage.db import DatabaseLockedError, connect

_HOLD = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("held", flush=True)
sys.stdin.readline()
"""

_FLOCK = """
import sys
from pathlib import Path
from dpicl.flows.locking import _file_lock
with _file_lock(Path(sys.argv[1]), print):
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_one_database_file_one_limit_name_whatever_the_path_spelling(tmp_path, monkeypatch):
    db = tmp_path / "x.duckdb"
    link = tmp_path / "link.duckdb"
    link.symlink_to(db)
    monkeypatch.chdir(tmp_path)
    name = limit_name(db)
    assert re.fullmatch(LIMIT_PREFIX + r"x-duckdb-[0-9a-f]{8}", name), name  # says which database it guards
    assert limit_name("x.duckdb") == limit_name("./sub/../x.duckdb") == limit_name(link) == name
    assert limit_name(tmp_path / "y.duckdb") != name
    assert str(tmp_path) not in name  # the name says nothing about where the data lives


def _start(code: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)


def test_waits_while_another_process_holds_the_file_and_goes_on_when_it_lets_go(tmp_path):
    db = tmp_path / "held.duckdb"
    connect(db).close()
    holder = _start(_HOLD, str(db))
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(DatabaseLockedError):
            wait_until_openable(db, timeout_seconds=1.5)
        assert time.monotonic() - started >= 1.5
        messages: list[str] = []
        holder.stdin.write("go\n")
        holder.stdin.flush()
        wait_until_openable(db, timeout_seconds=60, on_wait=messages.append)
    finally:
        holder.kill()
        holder.wait()
    connect(db).close()  # openable now
    assert all(str(tmp_path) not in m for m in messages)  # the file's name, not its path


def test_the_machine_local_writer_lock_excludes_a_second_process(tmp_path):
    lock = tmp_path / "db.writer-lock"
    other = _start(_FLOCK, str(lock))
    try:
        assert other.stdout.readline().strip() == "locked"
        got = []

        def acquire():
            with _file_lock(lock, got.append):
                got.append("acquired")

        import threading

        thread = threading.Thread(target=acquire)
        thread.start()
        time.sleep(1.5)
        assert got and "acquired" not in got and got[0].startswith("waiting")  # blocked while the other holds it
        other.stdin.write("go\n")
        other.stdin.flush()
        thread.join(timeout=30)
        assert got[-1] == "acquired"
    finally:
        other.kill()
        other.wait()


def test_a_task_waits_for_a_reader_to_let_go_of_the_file(tmp_path):
    import threading

    from dpicl.tasks import context

    db = tmp_path / "read.duckdb"
    connect(db).close()
    holder = _start(_HOLD, str(db))
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(DatabaseLockedError):
            with context.database(str(db), wait_seconds=0.5):
                pass

        def let_go():
            time.sleep(1.0)
            holder.stdin.write("go\n")
            holder.stdin.flush()

        threading.Thread(target=let_go).start()
        started = time.monotonic()
        with context.database(str(db), wait_seconds=60) as con:
            assert con.execute("SELECT 1").fetchone() == (1,)
        assert time.monotonic() - started >= 0.9
    finally:
        holder.kill()
        holder.wait()


_READ_BRIEFLY = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
print("held", flush=True)
time.sleep(1.5)
"""


def test_a_reader_that_opens_the_file_as_the_writer_gets_it_delays_the_writer_and_does_not_fail_it(tmp_path,
                                                                                                   monkeypatch):
    """The writer's first step after waiting for the file (marking crashed runs) waits again: a `dpicl budget
    show` may open the file between the two (it made a flow exit with DatabaseLockedError)."""
    from dpicl.flows import locking

    db = tmp_path / "raced.duckdb"
    connect(db).close()
    readers = []

    def openable_then_a_reader_opens(*args, **kwargs):
        wait_until_openable(*args, **kwargs)
        readers.append(_start(_READ_BRIEFLY, str(db)))
        assert readers[-1].stdout.readline().strip() == "held"

    monkeypatch.setattr(locking, "wait_until_openable", openable_then_a_reader_opens)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    try:
        with locking.database_writer(db):
            assert readers and readers[0].poll() is not None  # it waited for the reader to let go
    finally:
        for reader in readers:
            reader.kill()
            reader.wait()


# --------------------------------------------------------------------------------------------------------------
# crash recovery: a writer killed with SIGKILL (no Prefect server: each process has Prefect's temporary one)

_HOLD_WRITER = """
import sys, time
from prefect import flow
from dpicl.flows.locking import database_writer

@flow
def hold(db: str):
    with database_writer(db):
        print("held", flush=True)
        time.sleep(600)

hold(sys.argv[1])
"""


def _temporary_servers_of(pid: int) -> list:
    import psutil

    return [p for p in psutil.Process(pid).children(recursive=True)
            if "prefect.server.api.server:create_app" in " ".join(p.cmdline())]


@pytest.mark.slow
def test_a_writer_killed_with_sigkill_frees_the_database_within_seconds_and_leaves_no_server(tmp_path):
    """Both processes use temporary Prefect servers over one PREFECT_HOME, as two `dpicl answer` runs do."""
    import logging
    import signal
    import threading

    import psutil

    from dpicl.flows.locking import database_writer

    db = tmp_path / "killed.duckdb"
    connect(db).close()
    holder = _start(_HOLD_WRITER, str(db))
    try:
        assert holder.stdout.readline().strip() == "held"
        servers = _temporary_servers_of(holder.pid)
        assert len(servers) == 1, "the holder should have started its temporary Prefect server"
        acquired, failures = threading.Event(), []

        def second_writer():
            try:
                with database_writer(db, timeout_seconds=90):
                    acquired.set()
            except BaseException as error:  # noqa: BLE001 (reported by the assertion below)
                failures.append(error)

        messages: list[str] = []
        capture = logging.Handler(logging.INFO)
        capture.emit = lambda record: messages.append(record.getMessage())
        locking_log = logging.getLogger("dpicl.flows.locking")
        locking_log.addHandler(capture)
        level = locking_log.level
        locking_log.setLevel(logging.INFO)
        try:
            waiter = threading.Thread(target=second_writer)
            waiter.start()
            deadline = time.monotonic() + 60
            while not messages and time.monotonic() < deadline and waiter.is_alive():
                time.sleep(0.2)
            assert not acquired.is_set(), "a second writer got in while the first held the database"
            # the waiting run says what it waits for: the database's lock file and the holder's pid
            said = "\n".join(messages)
            assert "killed.duckdb.writer-lock" in said and f"pid {holder.pid}" in said, said
            assert str(tmp_path) not in said  # file names, not paths
            holder.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            waiter.join(timeout=120)
        finally:
            locking_log.removeHandler(capture)
            locking_log.setLevel(level)
        assert not failures, failures
        assert acquired.is_set() and time.monotonic() - killed_at < 15, "the killed writer's slot was not freed"
        # its temporary server went with it (parent-death signal), no orphan
        _, alive = psutil.wait_procs(servers, timeout=20)
        assert not alive, f"orphaned temporary Prefect server(s): {[p.pid for p in alive]}"
    finally:
        holder.kill()
        holder.wait()
