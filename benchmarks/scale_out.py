"""Backlog throughput with 1, 2 and 4 worker processes on one PostgreSQL database, and the store's overhead per
query on DuckDB and on PostgreSQL.

    .venv/bin/python benchmarks/scale_out.py [--workers 1 2 4] [--queries 160] [--latency 0.5] [--json]

Throughput: each row drains a fresh backlog (synthetic tickets, KSA joint-EM, 6 teachers, batches of 4 queries) on
a throw-away PostgreSQL with that many `answer_backlog` processes at once, sharing one Prefect server. Inference is
an OpenAI-compatible stub server that answers every request after a fixed `--latency` (concurrent requests in
parallel, as a GPU server batches them), so the figure measures the pipeline — claims, reservations, Prefect tasks,
the store — and not this machine's CPU. Throughput is answered queries per second of the drain (first ledger entry
to last release, from the database); the process start-up (imports, the flow run) is reported beside it.

Store overhead: the database work one query costs with inference and accounting taken out — claim it, reserve it
(a cheap RDP-priced event), record its release — one query at a time, on a DuckDB file and on PostgreSQL.

With --json the last line is one JSON object: {"throughput": [...], "store": [...]}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
WORDS = ("refund", "delivery", "password", "invoice", "upgrade", "login", "courier", "receipt", "account", "router")


class StubCompletions:
    """`POST /v1/completions` answered after a fixed latency with a short text derived from the prompt."""

    def __init__(self, latency: float):
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(stub.latency)
                digest = hashlib.sha256(str(body.get("prompt")).encode()).digest()
                text = " " + " ".join(WORDS[b % len(WORDS)] for b in digest[:6])
                payload = json.dumps({"id": "stub", "object": "text_completion", "model": body.get("model"),
                                      "choices": [{"index": 0, "text": text, "finish_reason": "length"}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.latency = latency
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _prepare(db: str, folder: Path, queries: int, base_url: str) -> str:
    """A private dataset, a backlog of `queries`, a budget that pays for all of them; returns the config path."""
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_dataset, ingest_queries
    from dpicl.storage.ledger import open_budget

    private = _write_jsonl(folder / "private.jsonl", [
        {"id": f"r{i}", "text": f"ticket {i}: my {WORDS[i % 10]} and {WORDS[(i * 3) % 10]} need help",
         "summary": f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]} issue"} for i in range(600)])
    backlog = _write_jsonl(folder / "backlog.jsonl", [
        {"id": f"q{i}", "text": f"incoming ticket {i} about {WORDS[i % 10]}"} for i in range(queries)])
    con = connect(db)
    try:
        ingest_dataset(con, private, "tickets", "private", "summarization",
                       FieldMap(id="id", input="text", output="summary"))
        ingest_queries(con, backlog, "inbox", FieldMap(id="id", input="text", output=None))
        open_budget(con, "tickets", 8.0, 1e-6)
    finally:
        con.close()
    config = folder / "scale.yaml"
    config.write_text(yaml.safe_dump({
        "name": "scale", "private_dataset": "tickets", "backlog": "inbox", "batch_queries": 4,
        "model": {"llm": "stub", "backend": "openai", "base_url": base_url, "batch_invariant": False,
                  "max_concurrency": 64},
        "generation": {"max_new_tokens": 16, "temperature": 0.0, "stop": ["\n"]},
        "method": {"name": "ksa-jem", "teachers": 6, "shots": 1, "k": 5, "planned_queries": queries}}))
    return str(config)


_WORKER = ("import sys; from dpicl.flows.answer_backlog import answer_backlog; "
           "answer_backlog(config=sys.argv[1], db=sys.argv[2])")


def throughput(pg, workers: int, queries: int, base_url: str, api_url: str, folder: Path) -> dict:
    db = pg.create_database(f"scale_{workers}_{int(time.time() * 1000)}")
    config = _prepare(db, folder, queries, base_url)
    env = {**os.environ, "PREFECT_API_URL": api_url}
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, config, db], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(workers)]
    for p in procs:
        _, err = p.communicate()
        if p.returncode:
            raise SystemExit(f"a worker failed (exit {p.returncode}):\n{err.decode(errors='replace')[-3000:]}")
    wall = time.monotonic() - started
    from dpicl.storage.db import connect

    con = connect(db, read_only=True)
    try:
        answered, first, last, runs = con.execute(
            "SELECT count(*), (SELECT min(created_at) FROM ledger), max(r.created_at), count(DISTINCT r.run_id) "
            "FROM releases r").fetchone()
        pending = con.execute("SELECT count(*) FROM queries WHERE status = 'pending'").fetchone()[0]
    finally:
        con.close()
    drain = (last - first).total_seconds()
    return {"workers": workers, "queries": queries, "answered": answered, "pending_left": pending,
            "runs_that_released": runs, "drain_s": drain, "queries_per_s": answered / drain, "wall_s": wall}


def store_overhead(target: str, n: int) -> dict:
    """ms per query of claim → reserve → record_release, one query at a time (nothing else)."""
    from dpicl.privacy.accounting.events import SubsampledExponentialEvent
    from dpicl.storage.db import connect, dialect
    from dpicl.storage.ledger import open_budget, record_release, reserve_batch
    from dpicl.storage.queries import claim_pending

    con = connect(target)
    con.execute("INSERT INTO datasets VALUES ('d', 'private', 'text', 'x', 'x', '{}', 10, ?, current_timestamp)",
                [b"k" * 32])
    con.execute("INSERT INTO queries (backlog, query_id, row_no, input, source_path) "
                "SELECT 'b', 'q' || i, i, 'text', 'x' FROM generate_series(1, ?) t(i)", [n])
    open_budget(con, "d", 100.0, 1e-6)
    event = SubsampledExponentialEvent(0.01, 0.01, 1.0, "ksa-jem").to_json()
    started = time.perf_counter()
    for _ in range(n):
        (query,) = claim_pending(con, "b", "bench", 1)
        (paid,) = reserve_batch(con, dataset="d", run_id="bench", backlog="b", query_ids=[query], mechanism="m",
                                event_json=event)
        record_release(con, paid, run_id="bench", mechanism="m", answer="a", details={})
    ms = (time.perf_counter() - started) * 1000 / n
    engine = dialect(con)
    con.close()
    return {"engine": engine, "queries": n, "ms_per_query": ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--queries", type=int, default=160)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the stub server takes per request")
    parser.add_argument("--store-queries", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no network here: no telemetry
    from prefect.server.api.server import SubprocessASGIServer

    from dpicl.storage.throwaway_postgres import ThrowawayPostgres

    stub = StubCompletions(args.latency)
    prefect_server = SubprocessASGIServer()
    prefect_server.start()
    rows, store = [], []
    with ThrowawayPostgres() as pg, tempfile.TemporaryDirectory() as tmp:
        print(f"{'workers':>7} {'answered':>8} {'drain s':>8} {'queries/s':>9} {'speed-up':>8} {'wall s':>7}")
        for workers in args.workers:
            folder = Path(tmp) / f"w{workers}"
            folder.mkdir()
            row = throughput(pg, workers, args.queries, stub.base_url, prefect_server.api_url, folder)
            row["speedup"] = row["queries_per_s"] / rows[0]["queries_per_s"] if rows else 1.0
            rows.append(row)
            print(f"{workers:>7} {row['answered']:>8} {row['drain_s']:>8.1f} {row['queries_per_s']:>9.2f} "
                  f"{row['speedup']:>7.2f}× {row['wall_s']:>7.1f}", flush=True)
        for target in (str(Path(tmp) / "store.duckdb"), pg.create_database("store")):
            store.append(store_overhead(target, args.store_queries))
            print(f"store overhead, {store[-1]['engine']}: {store[-1]['ms_per_query']:.2f} ms per query "
                  "(claim, reserve, record the release)", flush=True)
    prefect_server.stop()
    if args.json:
        print(json.dumps({"throughput": rows, "store": store, "latency_s": args.latency}))


if __name__ == "__main__":
    main()
