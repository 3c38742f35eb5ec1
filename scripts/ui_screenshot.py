"""Screenshot of the Prefect UI after a demo run: the flow run page of `answer_backlog` with its artifacts.

    .venv/bin/python scripts/ui_screenshot.py [--out docs/images/prefect-flow-run.png] [--fake-models]

1. starts a Prefect server on 127.0.0.1 (a free port, a throw-away PREFECT_HOME), as `dpicl serve` does;
2. ingests the bundled demo data into a throw-away DuckDB file, opens the demo budget and runs the demo flow
   (`answer_backlog`, SGA on the embedded SmolLM2, made lighter: 4 teachers, 12 queries) in a child
   process against that server — `--fake-models` uses the test fakes instead (seconds instead of minutes);
3. opens the flow run's page in headless Chromium (the Debian package, /usr/bin/chromium, driven by the Python
   `playwright` package: no browser download) on its Artifacts tab and saves a full-page PNG;
4. stops the server.

The page shows ids, counts and ε only: private text never reaches Prefect (privacy invariant 5).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

_RUN_DEMO_FLOW = """
import sys
from dpicl.flows.answer_backlog import answer_backlog
result = answer_backlog(config=sys.argv[1], db=sys.argv[2])
print("answered", result["answered"], "refused", result["refused_budget"], flush=True)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prepare_demo(workdir: Path, queries: int) -> tuple[Path, Path]:
    """A lighter copy of the demo config and a DuckDB file with the demo data and budget."""
    import yaml

    from dpicl.config import resolve_config_path
    from dpicl.demo.run import DEMO_DELTA, DEMO_EPSILON, data_file
    from dpicl.storage.db import connect
    from dpicl.storage.ingest import FieldMap, ingest_dataset, ingest_queries
    from dpicl.storage.ledger import open_budget

    cfg = yaml.safe_load(resolve_config_path("demo").read_text())
    cfg["method"].update(teachers=4, planned_queries=max(1, queries - 2))
    cfg["generation"]["max_new_tokens"] = 16
    cfg["batch_queries"] = 4
    config = workdir / "demo-ui.yaml"
    config.write_text(yaml.safe_dump(cfg))
    backlog = workdir / "backlog.jsonl"
    backlog.write_text("".join(data_file("backlog.jsonl").read_text().splitlines(keepends=True)[:queries]))
    db = workdir / "demo-ui.duckdb"
    con = connect(db)
    try:
        tickets = FieldMap(id="ticket_id", input="ticket", output="summary")
        ingest_dataset(con, data_file("private_tickets.jsonl"), cfg["private_dataset"], "private", "summarization",
                       tickets)
        ingest_dataset(con, data_file("public_tickets.jsonl"), cfg["public_dataset"], "public", "summarization",
                       tickets)
        ingest_queries(con, backlog, cfg["backlog"], FieldMap(id="query_id", input="ticket", output=None))
        open_budget(con, cfg["private_dataset"], DEMO_EPSILON, DEMO_DELTA)
    finally:
        con.close()
    return config, db


@contextmanager
def browser_page():
    """A page of headless Chromium (the Debian package, driven by playwright; no browser download)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1440, "height": 1150}, device_scale_factor=1)
        finally:
            browser.close()


def open_artifacts(page, url: str, wait_text: str, timeout_s: float = 60) -> bool:
    """Open the flow run page at `url` on its Artifacts tab; whether `wait_text` appeared within `timeout_s`."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(url, wait_until="networkidle", timeout=timeout_s * 1000)
    tab = page.get_by_role("tab", name="Artifacts")
    if not tab.count():
        tab = page.get_by_text("Artifacts", exact=True)
    tab.first.click(timeout=timeout_s * 1000)
    try:
        page.get_by_text(wait_text).first.wait_for(timeout=timeout_s * 1000)
    except PlaywrightTimeout:
        return False
    page.wait_for_timeout(2000)  # let charts and tables settle
    return True


@contextmanager
def demo_run_on_server(workdir: Path, queries: int, fake_models: bool) -> Iterator[str]:
    """A Prefect server with one completed demo flow run on it; yields the run page's URL; stops the server."""
    from dpicl.serve import start_server

    config, db = prepare_demo(workdir, queries)
    server = start_server("127.0.0.1", _free_port(), workdir / "prefect-home")
    print(f"Prefect server at {server.ui_url}", flush=True)
    try:
        env = {**os.environ, "PREFECT_API_URL": server.api_url, "PREFECT_HOME": str(workdir / "prefect-home")}
        if fake_models:
            env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests" / "pipeline" / "fake_models_site"), str(REPO)])
            env["DPICL_TEST_FAKE_MODELS"] = "1"
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", _RUN_DEMO_FLOW, str(config), str(db)], env=env, check=True)
        print(f"demo flow finished in {time.monotonic() - started:.0f} s", flush=True)

        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL, temporary_settings

        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            with get_client(sync_client=True) as client:
                runs = [r for r in client.read_flow_runs() if r.state and r.state.is_completed()]
        if not runs:
            raise SystemExit("no completed flow run on the server")
        run = max(runs, key=lambda r: r.start_time)
        yield f"{server.ui_url}/runs/flow-run/{run.id}"
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "prefect-flow-run.png")
    parser.add_argument("--queries", type=int, default=12, help="demo queries to answer (default 12)")
    parser.add_argument("--fake-models", action="store_true", help="the test fakes instead of SmolLM2/MiniLM")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="dpicl-ui-"))
    os.environ["PREFECT_HOME"] = str(workdir / "prefect-home")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("DPICL_CACHE", str(REPO / ".cache" / "dpicl"))  # as the Makefile: the converted model
    with demo_run_on_server(workdir, args.queries, args.fake_models) as url, browser_page() as page:
        if not open_artifacts(page, url, wait_text="progress-"):
            print("warning: the artifacts did not appear within 60 s; saving what the page shows", file=sys.stderr)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(args.out), full_page=True)
        print(f"saved {args.out} ({url})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
