"""The pieces of the one-writer lock that need no Prefect server: the limit's name, waiting for the DuckDB file,
the machine-local file lock. (The Prefect limit itself, across processes, is tested in test_serve.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from dpicl.flows.locking import LIMIT_PREFIX, _file_lock, limit_name, wait_until_openable
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
    assert name.startswith(LIMIT_PREFIX) and len(name) == len(LIMIT_PREFIX) + 12
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
