"""Several answer flows in separate processes drain one backlog on a real PostgreSQL, with a budget that runs out
midway, while one of them is killed with SIGKILL right after it paid for a batch. Afterwards (docs/SCALING.md):

* every query is answered at most once, and every release has exactly one ledger entry;
* ε spent (the ledger's accountant over every entry) is within the limit, and the budget did run out;
* an entry without a release was paid by the run that was killed (now marked crashed);
* nothing is lost: the runs still working mark the killed run crashed and finish its queries, so none stays
  pending.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from dpicl.storage.db import connect
from tests.pipeline.conftest import ingest_tiny
from tests.pipeline.serving import REPO, fake_models_pythonpath
from tests.pipeline.test_faults import RESERVE, api_url  # noqa: F401 (a fixture)

pytestmark = pytest.mark.slow

QUERIES = 60
WORKERS = 3


def _setup(tmp_path, url: str) -> str:
    ingest_tiny(url, tmp_path, queries=QUERIES)
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({
        "name": "tiny", "private_dataset": "tiny", "backlog": "tiny-backlog", "batch_queries": 3,
        # the budget is planned for half the queries: it runs out midway
        "method": {"name": "esa", "teachers": 4, "shots": 2, "candidates": 3, "planned_queries": QUERIES // 2},
        "generation": {"max_new_tokens": 6, "stop": ["\n"]}}))
    return str(config)


# every worker's fake model takes a while per call, so that workers overlap (inference holds no lock)
_SLOW = ("import time\nfrom tests.pipeline.fakes import FakeBackend\n_generate = FakeBackend.generate\n"
         "FakeBackend.generate = lambda self, *a, **k: (time.sleep(0.4), _generate(self, *a, **k))[1]\n"
         "from tests.pipeline.fault_child import main\nmain()\n")


def _start(config: str, url: str, api: str, fault: dict | None) -> subprocess.Popen:
    # without a fault the wrapper never fires (call 0 is never reached)
    spec = fault or {"target": RESERVE, "when": "before", "call": 0}
    env = {**os.environ, "DPICL_FAULT": json.dumps(spec), "DPICL_TEST_FAKE_MODELS": "1", "PREFECT_API_URL": api,
           "PYTHONPATH": fake_models_pythonpath()}
    return subprocess.Popen([sys.executable, "-c", _SLOW, "answer",
                             json.dumps({"config": config, "db": url})],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)



def test_workers_drain_one_backlog_and_survive_a_kill(tmp_path, postgres_url, api_url):  # noqa: F811
    from dpicl.privacy.accounting import ledger_epsilon
    from dpicl.storage.ledger import ledger_events

    config = _setup(tmp_path, postgres_url)
    # four workers start together; one dies right after paying for its second batch, while the others work
    # beside it: its claims and charges are left behind
    killed = _start(config, postgres_url, api_url, {"target": RESERVE, "when": "after", "call": 2})
    workers = [_start(config, postgres_url, api_url, None) for _ in range(WORKERS)]
    out = killed.communicate(timeout=420)[0].decode(errors="replace")
    beside = [w.poll() is None for w in workers]  # which others were still at work when it died
    assert killed.returncode == -9, out[-3000:]
    # the others mark its run crashed when they run out of queries, take its queries over, and finish the backlog
    outputs = [w.communicate(timeout=420)[0].decode(errors="replace") for w in workers]
    for w, out in zip(workers, outputs):
        assert w.returncode == 0 and "FINISHED" in out, out[-3000:]

    con = connect(postgres_url, read_only=True)
    try:
        releases = con.execute("SELECT backlog, query_id, entry_id FROM releases").fetchall()
        entries = dict(con.execute("SELECT entry_id, run_id FROM ledger").fetchall())
        statuses = dict(con.execute("SELECT query_id, status FROM queries").fetchall())
        runs = dict(con.execute("SELECT run_id, status FROM runs").fetchall())
        spans = {r: (first, last) for r, first, last in con.execute(
            "SELECT run_id, min(created_at), max(created_at) FROM ledger GROUP BY run_id").fetchall()}
        limit, delta = con.execute("SELECT epsilon, delta FROM budgets WHERE dataset = 'tiny'").fetchone()
        spent = ledger_epsilon(ledger_events(con, "tiny"), delta)
    finally:
        con.close()
    assert len({q for _, q, _ in releases}) == len(releases)  # no query answered twice
    assert len({e for *_, e in releases}) == len(releases) and all(e in entries for *_, e in releases)
    assert {q for q, s in statuses.items() if s == "answered"} == {q for _, q, _ in releases}
    assert "pending" not in statuses.values()  # nothing lost
    assert "refused_budget" in statuses.values() and 0 < len(releases) < QUERIES  # the budget ran out midway
    assert spent <= limit
    unreleased = {entries[e] for e in entries} - {entries[e] for *_, e in releases}
    assert all(runs[r] == "crashed" for r in unreleased), (unreleased, runs)
    assert list(runs.values()).count("crashed") == 1
    # it died beside working runs: they were running when it was killed, and, where its charges are still its own
    # (another run may have taken its unused ones over: dpicl.storage.recovery), it was still paying after another
    # run had started paying
    assert all(beside), beside
    (dead,) = [r for r, status in runs.items() if status == "crashed"]
    if dead in spans:
        assert spans[dead][1] > min(first for r, (first, _) in spans.items() if r != dead)
    # the work was shared: more than one run released answers
    assert len({entries[e] for *_, e in releases}) >= 2


@pytest.mark.parametrize("engine", ["duckdb", "postgres"])
def test_budget_show_and_releases_work_while_a_flow_runs(tmp_path, engine, request, api_url):  # noqa: F811
    """No connection is held while the model runs: the read-only commands get in between a running flow's tasks,
    on a DuckDB file (which one process opens at a time) as on PostgreSQL."""
    from typer.testing import CliRunner

    from dpicl.cli import app

    db = str(tmp_path / "busy.duckdb") if engine == "duckdb" else request.getfixturevalue("postgres_url")
    config = _setup(tmp_path, db)
    worker = _start(config, db, api_url, None)
    try:
        deadline = time.monotonic() + 120
        while worker.poll() is None and time.monotonic() < deadline:
            con = connect(db, read_only=True, wait_seconds=30)
            try:
                paid = con.execute("SELECT count(*) FROM ledger").fetchone()[0]
            finally:
                con.close()
            if paid:
                break
            time.sleep(0.3)
        if worker.poll() is not None:
            out = worker.communicate()[0].decode(errors="replace")
            pytest.fail(f"the flow ended before anything was checked:\n{out[-3000:]}")
        show = CliRunner().invoke(app, ["budget", "show", "tiny", "--db", db, "--json"])
        releases = CliRunner().invoke(app, ["releases", "tiny-backlog", "--db", db])
        assert show.exit_code == 0, show.output
        assert json.loads(show.output.strip().splitlines()[-1])["ledger_entries"] > 0
        assert releases.exit_code == 0, releases.output
        assert worker.poll() is None, "the flow ended before the commands ran: nothing was tested"
    finally:
        out = worker.communicate(timeout=420)[0].decode(errors="replace")
    assert worker.returncode == 0 and "FINISHED" in out, out[-3000:]
