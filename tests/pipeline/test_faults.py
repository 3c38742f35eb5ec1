"""Fault injection with the real database: a flow run is killed with SIGKILL at a stage boundary of `answer` (ESA and
DPS-MOZO), `synthesize` (dp-fewshot) and `rerun` (--from aggregate), then run again. After every fault:

* the killed process really died of SIGKILL at that boundary, and left no Prefect server behind;
* its run is marked `crashed` by the next run;
* the next run finishes (a synthesis whose dataset was already written refuses, charging nothing);
* every release has exactly one ledger entry, no query is answered twice, spent ε ≤ the budget's limit, and every
  ledger entry is either released or was paid by a crashed run (nothing charged without a reason);
* a charge paid and never used is taken over by the retry where nothing drawn was stored (docs/PRIVACY.md, "Crash
  recovery"), and paid again where the draw is stored (a DP aggregate, releasable by `dpicl rerun --from release`).

The kill comes from a wrapper the child process puts around one function (by module and name) before the flow runs:
SIGKILL before or after its n-th call; `mid-inference` wraps the fake LLM (tests/pipeline/fault_child.py). The
children are forked from one forkserver that imported the flows once, and share the pytest process's temporary
Prefect server (no server start per fault); each has its own database copy, so the writer slot it dies holding is
never asked for again. test_locking.py kills a writer that runs its own temporary server.

With DPICL_FAULT_REPORT=path every fault appends one JSON line (flow, boundary, outcome) to that file:
docs/RELIABILITY.md reports the counts.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver as forkserver_module
import os
import shutil
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import yaml

from dpicl.storage.db import connect
from tests.pipeline.conftest import PLANNED, ingest_tiny
from tests.pipeline.fault_child import FLOWS, forked
from tests.pipeline.serving import fake_models_pythonpath

pytestmark = pytest.mark.slow

MAX_TOKENS = 6

RESERVE = "dpicl.tasks.context:reserve_many"  # a whole batch per call (answer), one release (synthesize)
GENERATE = "tests.pipeline.fakes:FakeBackend.generate"
NEXT_TOKEN = "tests.pipeline.fakes:FakeBackend.next_token_logprobs"

# (scenario, boundary, target, before/after, call, how many unused charges the retry takes over: batches of 3 are
# paid before their first draw, and the budget pays for PLANNED = 5 queries: 3 + 2)
FAULTS = [
    ("answer-esa", "before reserve", RESERVE, "before", 2, 0),
    ("answer-esa", "after reserve", RESERVE, "after", 2, 2),
    ("answer-esa", "mid-inference", GENERATE, "before", 4, 0),
    ("answer-esa", "after draw (aggregate stored)", "dpicl.tasks.aggregate:put_artifact", "after", 2, 1),
    ("answer-esa", "before release", "dpicl.tasks.release:record_release", "before", 2, 0),
    ("answer-esa", "after release", "dpicl.tasks.release:record_release", "after", 2, 0),
    ("answer-dps-mozo", "before reserve", RESERVE, "before", 2, 0),
    ("answer-dps-mozo", "after reserve", RESERVE, "after", 2, 2),
    ("answer-dps-mozo", "mid-inference", NEXT_TOKEN, "before", 10, 3),
    ("answer-dps-mozo", "after draw (decoded)", "dpicl.methods.dps_mozo:DPSMozo.answer", "after", 2, 2),
    ("answer-dps-mozo", "before release", "dpicl.tasks.decode:record_release", "before", 2, 2),
    ("answer-dps-mozo", "after release", "dpicl.tasks.decode:record_release", "after", 2, 1),
    ("synthesize", "before reserve", RESERVE, "before", 1, 0),
    ("synthesize", "after reserve", RESERVE, "after", 1, 1),
    ("synthesize", "mid-inference", NEXT_TOKEN, "before", 5, 1),
    ("synthesize", "before release", "dpicl.tasks.synthesize:write_synthetic_dataset", "before", 1, 1),
    ("synthesize", "after release", "dpicl.tasks.synthesize:write_synthetic_dataset", "after", 1, 0),
    ("rerun", "before reserve", RESERVE, "before", 1, 0),
    ("rerun", "after reserve", RESERVE, "after", 1, 0),
    ("rerun", "after draw (aggregate stored)", "dpicl.tasks.aggregate:put_artifact", "after", 1, 0),
    ("rerun", "before release", "dpicl.tasks.release:record_release", "before", 1, 0),
    ("rerun", "after release", "dpicl.tasks.release:record_release", "after", 1, 0),
]


# ---------------------------------------------------------------------------------------------------------------
# databases to kill runs on, built once


def _base(tmp: Path, *, public: bool = False) -> tuple[Path, Path]:
    db = tmp / "template.duckdb"
    ingest_tiny(db, tmp, public=10 if public else 0)
    return db, tmp / "config.yaml"


def _write_config(path: Path, method: dict, **top) -> str:
    path.write_text(yaml.safe_dump({
        "name": "tiny", "private_dataset": "tiny", "backlog": "tiny-backlog", "method": method, "batch_queries": 3,
        "generation": {"max_new_tokens": MAX_TOKENS, "stop": ["\n"]}, **top}))
    return str(path)


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """{scenario: (template db, flow, flow kwargs without db)}."""
    from tests.pipeline.test_rerun import _build

    out = {}
    db, config = _base(tmp_path_factory.mktemp("esa"))
    out["answer-esa"] = (db, "answer", {"config": _write_config(
        config, {"name": "esa", "teachers": 4, "shots": 2, "candidates": 3, "planned_queries": PLANNED})})
    db, config = _base(tmp_path_factory.mktemp("mozo"))
    out["answer-dps-mozo"] = (db, "answer", {"config": _write_config(
        config, {"name": "dps-mozo", "shots": 3, "top_k": 10, "planned_queries": PLANNED,
                 "accept_unproven_guarantee": True})})
    db, config = _base(tmp_path_factory.mktemp("synth"), public=True)
    out["synthesize"] = (db, "synthesize", {"config": _write_config(
        config, {"name": "dp-fewshot", "splits": 3, "shots": 2, "demos": 3, "top_k": 10},
        public_dataset="tiny-public", synthetic={"name": "tiny-synthetic", "epsilon": 1.0})})
    config, db, source_run = _build(tmp_path_factory.mktemp("rerun"))
    out["rerun"] = (Path(db), "rerun", {"run_id": source_run, "from_stage": "aggregate", "max_queries": 1})
    return out


@pytest.fixture(scope="module")
def api_url():
    """The pytest process's temporary Prefect server, shared by the children."""
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    return server.api_url


@pytest.fixture(scope="module")
def forkserver(api_url):
    """A multiprocessing forkserver that has imported the flows, with fake models and the shared Prefect server:
    each child is forked from it instead of importing them again (fault_child.py's `forked`). Its processes
    carry `tag` in their environment."""
    tag = uuid.uuid4().hex
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.pipeline.fault_child", *FLOWS])
    with pytest.MonkeyPatch.context() as mp:  # the environment the forkserver starts with
        mp.setenv("PREFECT_API_URL", api_url)
        mp.setenv("DPICL_TEST_FAKE_MODELS", "1")
        mp.setenv("DPICL_FAULT_TAG", tag)
        mp.setenv("PYTHONPATH", fake_models_pythonpath())
        forkserver_module.ensure_running()
    return context, tag


# ---------------------------------------------------------------------------------------------------------------
# what is checked


def _rows(db: str, sql: str, params: list | None = None) -> list[tuple]:
    con = connect(db, read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _unreleased(db: str) -> int:
    return _rows(db, "SELECT count(*) FROM ledger l WHERE NOT EXISTS (SELECT 1 FROM releases r WHERE r.entry_id = "
                     "l.entry_id) AND NOT EXISTS (SELECT 1 FROM datasets d WHERE TRY_CAST(json_extract_string("
                     "d.field_map, '$.ledger_entry') AS BIGINT) = l.entry_id) AND l.mechanism NOT LIKE '%top-up'")[0][0]


def _check_invariants(db: str) -> dict:
    from dpicl.privacy.accounting import ledger_epsilon
    from dpicl.storage.ledger import ledger_events

    releases = _rows(db, "SELECT backlog, query_id, entry_id FROM releases")
    entries = dict(_rows(db, "SELECT entry_id, run_id FROM ledger"))
    # every release has exactly one ledger entry, and no entry pays for two releases
    assert all(entry in entries for *_, entry in releases)
    assert len({entry for *_, entry in releases}) == len(releases)
    # no query answered twice; answered ⇔ released
    assert len({(b, q) for b, q, _ in releases}) == len(releases)
    answered = set(_rows(db, "SELECT backlog, query_id FROM queries WHERE status = 'answered'"))
    assert answered == {(b, q) for b, q, _ in releases}
    # spent ≤ limit, by the ledger's accountant over every entry
    con = connect(db, read_only=True)
    try:
        limit, delta = con.execute("SELECT epsilon, delta FROM budgets WHERE dataset = 'tiny'").fetchone()
        spent = ledger_epsilon(ledger_events(con, "tiny"), delta)
    finally:
        con.close()
    assert spent <= limit
    # an entry without a release (top-ups of reused subsamples aside) was paid by a run that crashed
    unreleased_runs = {r for (r,) in _rows(
        db, "SELECT l.run_id FROM ledger l WHERE NOT EXISTS (SELECT 1 FROM releases r WHERE r.entry_id = l.entry_id) "
            "AND NOT EXISTS (SELECT 1 FROM datasets d WHERE TRY_CAST(json_extract_string(d.field_map, "
            "'$.ledger_entry') AS BIGINT) = l.entry_id) AND l.mechanism NOT LIKE '%top-up'")}
    statuses = dict(_rows(db, "SELECT run_id, status FROM runs"))
    assert all(statuses[r] == "crashed" for r in unreleased_runs), (unreleased_runs, statuses)
    return {"releases": len(releases), "entries": len(entries), "spent": spent, "limit": limit}


def _servers_with(tag: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if "create_app" in " ".join(process.info["cmdline"] or []) and \
                    process.environ().get("DPICL_FAULT_TAG") == tag:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _kill_child(forkserver, db: str, flow: str, kwargs: dict, spec: dict, tmp: Path) -> tuple[int, str]:
    context, tag = forkserver
    log = tmp / "child.log"
    child = context.Process(target=forked, args=(spec, flow, {**kwargs, "db": db}, str(tmp), str(log)))
    child.start()
    child.join(timeout=300)
    deadline = time.monotonic() + 20
    while _servers_with(tag) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _servers_with(tag), "a killed run left a Prefect server behind"
    return child.exitcode, log.read_text(errors="replace")


def _rerun_in_process(flow: str, kwargs: dict, db: str, fake_models) -> dict | str:
    if flow == "answer":
        from dpicl.flows.answer_backlog import answer_backlog

        return answer_backlog(**kwargs, db=db)
    if flow == "synthesize":
        from dpicl.flows.synthesize_demos import synthesize_demos

        try:
            return synthesize_demos(**kwargs, db=db)
        except ValueError as error:
            assert "already exists" in str(error)
            return "refused: the synthetic dataset already exists"
    from dpicl.flows.rerun import rerun

    return rerun(**kwargs, db=db)


def _report(row: dict) -> None:
    path = os.environ.get("DPICL_FAULT_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")


# ---------------------------------------------------------------------------------------------------------------

IDS = [f"{s}-{b.split(' (')[0].replace(' ', '-')}" for s, b, *_ in FAULTS]
CHILDREN_AT_ONCE = 3  # the children mostly wait for Prefect: run a few side by side


@pytest.fixture(scope="module")
def killed(request, templates, forkserver, tmp_path_factory):
    """Every selected fault's child, started up front: {fault id: future of (exit code, log)} and the database
    copy each one ran on with the runs it held before. An xdist worker selects the whole module: run it on one
    worker (`--dist loadscope`, the suite's default), or each worker starts and waits for all the children."""
    selected = {item.callspec.id for item in request.session.items
                if getattr(item, "originalname", "") == "test_kill_9_then_run_again"}
    pool = ThreadPoolExecutor(CHILDREN_AT_ONCE)
    out = {}
    for (scenario, _, target, when, call, _), fault_id in zip(FAULTS, IDS, strict=True):
        if fault_id not in selected:
            continue
        template, flow, kwargs = templates[scenario]
        tmp = tmp_path_factory.mktemp("fault")
        db = str(tmp / "faulty.duckdb")
        shutil.copy(template, db)
        runs_before = {r for (r,) in _rows(db, "SELECT run_id FROM runs")}
        future = pool.submit(_kill_child, forkserver, db, flow, kwargs, {"target": target, "when": when, "call": call},
                             tmp)
        out[fault_id] = (future, db, runs_before)
    yield out
    pool.shutdown(wait=True)


@pytest.mark.parametrize(("scenario", "boundary", "target", "when", "call", "takes_over"), FAULTS, ids=IDS)
def test_kill_9_then_run_again(request, templates, killed, fake_models, scenario, boundary, target, when, call,
                               takes_over):
    _, flow, kwargs = templates[scenario]
    future, db, runs_before = killed[request.node.callspec.id]
    code, log = future.result(timeout=600)
    assert code == -signal.SIGKILL, f"the fault at {boundary} was not reached (exit {code}):\n{log[-3000:]}"
    killed = {r for (r,) in _rows(db, "SELECT run_id FROM runs")} - runs_before
    at_kill = _unreleased(db)

    result = _rerun_in_process(flow, kwargs, db, fake_models)
    state = _check_invariants(db)
    statuses = dict(_rows(db, "SELECT run_id, status FROM runs"))
    assert all(statuses[r] == "crashed" for r in killed), "the killed run was not marked crashed"
    taken_over = _rows(db, "SELECT count(*) FROM ledger_reuses")[0][0]
    # charges paid with nothing drawn from them stored are taken over instead of paid again; the others stay spent
    assert taken_over == takes_over, f"the retry took over {taken_over} charges, not {takes_over}"
    assert _unreleased(db) == at_kill - takes_over, "the retry paid again"
    if flow == "answer":
        # the budget pays for PLANNED queries over both runs, minus charges lost to the crash
        assert state["releases"] == PLANNED - _unreleased(db)
    _report({"scenario": scenario, "boundary": boundary, "killed": True, "killed_runs": len(killed),
             "unreleased_at_kill": at_kill, "taken_over": taken_over, "paid_again": _unreleased(db),
             "rerun": result if isinstance(result, str) else "finished", **state})
