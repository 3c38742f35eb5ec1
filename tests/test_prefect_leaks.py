"""Privacy invariant 5 on the real demo flow: no private record text, no canary and no teacher output or
private prompt ever reaches Prefect (its database and files, logs, parameters, results, artifacts)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.model]


def _paged(read, **kwargs):
    items, offset = [], 0
    while True:
        page = read(limit=200, offset=offset, **kwargs)
        items += page
        if len(page) < 200:
            return items
        offset += 200


def _needles(texts):
    """Each text as it would appear in a file: raw UTF-8 and JSON-escaped."""
    out = set()
    for t in texts:
        if len(t) >= 12:  # short strings ("summary") are not private content
            out.add(t)
            out.add(json.dumps(t)[1:-1])
    return out


def test_demo_flow_leaks_no_private_text_to_prefect(tmp_path):
    from prefect.client.orchestration import get_client

    from dpicl.config import resolve_config_path
    from dpicl.demo.run import canaries, data_file
    from dpicl.flows.answer_backlog import answer_backlog
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_dataset, ingest_queries
    from dpicl.storage.ledger import open_budget

    # the demo flow on the demo data, made lighter for the test suite
    cfg = yaml.safe_load(resolve_config_path("demo").read_text())
    cfg["method"].update(teachers=4, planned_queries=4)
    cfg["generation"]["max_new_tokens"] = 16
    cfg["batch_queries"] = 3
    config = tmp_path / "demo-light.yaml"
    config.write_text(yaml.safe_dump(cfg))
    db = tmp_path / "demo.duckdb"
    con = connect(db)
    tickets = FieldMap(id="ticket_id", input="ticket", output="summary")
    ingest_dataset(con, data_file("private_tickets.jsonl"), cfg["private_dataset"], "private", "summarization", tickets)
    ingest_dataset(con, data_file("public_tickets.jsonl"), cfg["public_dataset"], "public", "summarization", tickets)
    ingest_queries(con, data_file("backlog.jsonl"), cfg["backlog"], FieldMap(id="query_id", input="ticket", output=None))
    open_budget(con, cfg["private_dataset"], 4.0, 1e-4)
    con.close()

    result = answer_backlog(config=str(config), db=str(db), max_queries=6)
    assert result["answered"] == 4 and result["refused_budget"] == 2

    con = connect(db, read_only=True)
    records = con.execute("SELECT input, output FROM records").fetchall()
    private_payloads = [json.loads(p) for (p,) in con.execute(
        "SELECT payload FROM artifacts WHERE private AND format = 'json'").fetchall()]
    con.close()
    generated = [t for p in private_payloads if isinstance(p, list) for t in p if isinstance(t, str)]
    assert generated, "the flow stored no private teacher outputs/prompts to check"
    needles = _needles([t for r in records for t in r] + generated) | set(canaries())

    # 1. every file Prefect wrote (its SQLite database, result storage, logs)
    home = Path(os.environ["PREFECT_HOME"])
    files = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    assert any(p.name.startswith("prefect.db") for p in files), "Prefect's database was not where we looked"
    # 2. what the Prefect API serves: logs, artifacts, flow-run parameters, task runs
    with get_client(sync_client=True) as client:
        served = [
            *_paged(client.read_logs),
            *_paged(client.read_artifacts),
            *_paged(client.read_flow_runs),
            *_paged(client.read_task_runs),
        ]
    api_text = "\n".join(item.model_dump_json() for item in served)
    # the scan sees what the flow did publish (so a leak would be seen too)
    assert "refused_budget" in api_text and "sampled" in api_text

    for needle in needles:
        assert needle not in api_text, "private text reached the Prefect API"
        encoded = needle.encode()
        for path, blob in files.items():
            assert encoded not in blob, f"private text found in {path.relative_to(home)}"
