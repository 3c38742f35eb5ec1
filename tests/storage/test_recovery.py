"""Crash recovery in the store: runs of dead processes become `crashed`, and only an unused charge of a crashed run,
for exactly the same release, with nothing drawn from it stored, is taken over (dpicl/storage/recovery.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

from dpicl.storage.db import connect
from dpicl.storage.recovery import take_over_unused_charge
from dpicl.storage.runs import create_run, mark_crashed_runs

EVENT = json.dumps({"kind": "subsampled_gaussian", "noise_multiplier": 1.0, "sampling_rate": 0.1})


@pytest.fixture
def con():
    con = connect(":memory:")
    yield con
    con.close()


def _dead_process() -> tuple[int, float]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started = psutil.Process(child.pid).create_time()
    child.kill()
    child.wait()
    return child.pid, started


def _run(con, run_id: str, *, status: str = "running", dead: bool = True) -> None:
    create_run(con, run_id, "dps-mozo", "tiny", "b", {"x": 1}, None)
    if dead:
        pid, started = _dead_process()
        con.execute("UPDATE runs SET pid = ?, process_started = ? WHERE run_id = ?", [pid, started, run_id])
    if status != "running":
        con.execute("UPDATE runs SET status = ? WHERE run_id = ?", [status, run_id])


def _charge(con, run_id: str, query_id: str = "q1", *, mechanism: str = "dps-mozo", event: str = EVENT,
            backlog: str = "b") -> int:
    return con.execute("INSERT INTO ledger (dataset, run_id, backlog, query_id, mechanism, event, epsilon_before, "
                       "epsilon_after) VALUES ('tiny', ?, ?, ?, ?, ?, 0.1, 0.3) RETURNING entry_id",
                       [run_id, backlog, query_id, mechanism, event]).fetchone()[0]


def _take(con, run_id: str = "retry", query_id: str = "q1", **kw):
    args = {"dataset": "tiny", "backlog": "b", "mechanism": "dps-mozo", "event_json": EVENT, **kw}
    return take_over_unused_charge(con, run_id=run_id, query_id=query_id, **args)


def test_runs_of_dead_processes_are_marked_crashed_and_no_other(con):
    _run(con, "dead")
    _run(con, "alive", dead=False)  # this process
    _run(con, "elsewhere")
    con.execute("UPDATE runs SET host = 'another-host' WHERE run_id = 'elsewhere'")
    _run(con, "old")
    con.execute("UPDATE runs SET pid = NULL WHERE run_id = 'old'")  # opened before its process was recorded
    _run(con, "done", status="completed")
    assert mark_crashed_runs(con) == ["dead"]
    statuses = dict(con.execute("SELECT run_id, status FROM runs").fetchall())
    assert statuses == {"dead": "crashed", "alive": "running", "elsewhere": "running", "old": "running",
                        "done": "completed"}
    assert mark_crashed_runs(con) == []


def test_an_unused_charge_of_a_crashed_run_is_taken_over_once_and_recorded(con):
    _run(con, "crashed", status="crashed")
    _run(con, "retry", dead=False)
    entry = _charge(con, "crashed")
    reservation = _take(con)
    assert (reservation.entry_id, reservation.query_id, reservation.epsilon_cost) == (entry, "q1", pytest.approx(0.2))
    assert con.execute("SELECT entry_id, run_id FROM ledger_reuses").fetchall() == [(entry, "retry")]
    assert _take(con) is None  # the same run never takes it twice
    _run(con, "third", dead=False)
    assert _take(con, "third") is None  # a live run took it over: nobody else may
    assert con.execute("SELECT count(*) FROM ledger").fetchone()[0] == 1  # the ledger itself is unchanged


@pytest.mark.parametrize("case", ["live run", "released", "aggregate stored", "other event", "other query",
                                  "top-up", "other backlog"])
def test_a_charge_is_not_taken_over_when(con, case):
    _run(con, "payer", status="running" if case == "live run" else "crashed", dead=case != "live run")
    _run(con, "retry", dead=False)
    entry = _charge(con, "payer", mechanism="dps-mozo:reuse-top-up" if case == "top-up" else "dps-mozo",
                    backlog="other" if case == "other backlog" else "b")
    if case == "released":
        con.execute("INSERT INTO releases (backlog, query_id, entry_id, run_id, mechanism, answer, details) VALUES "
                    "('b', 'q1', ?, 'payer', 'dps-mozo', 'a', '{}')", [entry])
    if case == "aggregate stored":  # the draw was stored: it stays releasable, paid for by this entry
        con.execute("INSERT INTO artifacts (key, stage, backlog, query_id, private, format, payload, run_id) VALUES "
                    "('k', 'aggregate', 'b', 'q1', true, 'json', '1', 'payer')")
    kw = {"event_json": EVENT.replace("1.0", "2.0")} if case == "other event" else {}
    assert _take(con, query_id="q2" if case == "other query" else "q1", **kw) is None
    assert con.execute("SELECT count(*) FROM ledger_reuses").fetchone()[0] == 0


def test_a_retried_synthesis_matches_a_crashed_synthesis_by_backlog_until_its_dataset_exists(con):
    _run(con, "synth-1", status="crashed")
    _run(con, "synth-2", dead=False)
    entry = _charge(con, "synth-1", "synth-1", mechanism="synthesize-dp-fewshot", backlog="synthetic:s")
    args = {"backlog": "synthetic:s", "mechanism": "synthesize-dp-fewshot"}
    assert _take(con, "synth-2", "synth-2", **args).entry_id == entry
    con.execute("DELETE FROM ledger_reuses")
    con.execute("INSERT INTO datasets (name, kind, task, source_path, source_sha256, field_map, n_records, "
                "teacher_key) VALUES ('s', 'public', 'summarization', '', '', ?, 3, ''::BLOB)",
                [json.dumps({"ledger_entry": entry})])
    assert _take(con, "synth-2", "synth-2", **args) is None  # the crashed one wrote its dataset after all
