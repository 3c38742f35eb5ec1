"""How fast and how short `dpicl answer` fails on the expected mistakes (issue target: one `error:` line, exit code 2,
in under 3 s, before any Prefect server starts).

    .venv/bin/python benchmarks/preflight.py [--repetitions 3] [--json]

Cases, on a fresh DuckDB file with the demo data ingested: a config path that does not exist, a budget that was
never opened, a misspelled setting in a copied demo config, a backlog name with a typo, and a backlog with nothing
pending (one line, exit code 0). Each runs the installed `dpicl` in a subprocess, as a user would.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DPICL = str(Path(sys.executable).with_name("dpicl"))


def run(args: list[str], cwd: Path) -> tuple[float, int, list[str]]:
    started = time.perf_counter()
    done = subprocess.run([DPICL, *args], cwd=cwd, capture_output=True, text=True)
    lines = (done.stdout + done.stderr).strip().splitlines()
    return time.perf_counter() - started, done.returncode, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="end with one JSON object")
    args = parser.parse_args()

    from dpicl.config import CONFIG_DIR

    work = Path(tempfile.mkdtemp(prefix="dpicl-preflight-"))
    db = str(work / "bench.duckdb")
    subprocess.run([DPICL, "ingest", "demo", "--db", db], cwd=work, check=True, capture_output=True)
    demo = (CONFIG_DIR / "demo.yaml").read_text()
    (work / "misspelled.yaml").write_text(demo.replace("  teachers:", "  teacher:"))
    (work / "typo-backlog.yaml").write_text(demo.replace("backlog: demo-backlog", "backlog: demo-backlogg"))
    (work / "drained.yaml").write_text(demo)
    cases = {
        "config path that does not exist": ["answer", "no-such.yaml", "--db", db],
        "budget never opened": ["answer", "demo", "--db", db],
        "misspelled setting": ["answer", "misspelled.yaml", "--db", db],
        "backlog name with a typo": ["answer", "typo-backlog.yaml", "--db", db],
    }
    rows = []
    for name, argv in cases.items():
        timings = []
        for _ in range(args.repetitions):
            seconds, code, lines = run(argv, work)
            timings.append(seconds)
        rows.append({"case": name, "seconds": round(statistics.median(timings), 2), "exit_code": code,
                     "lines": len(lines), "first_line": lines[0][:100] if lines else ""})
    # a backlog with nothing pending: every query marked answered directly (counts only matter here)
    import duckdb

    con = duckdb.connect(db)
    con.execute("UPDATE queries SET status = 'answered'")
    con.close()
    subprocess.run([DPICL, "budget", "open", "demo-tickets", "--epsilon", "4", "--delta", "1e-4", "--db", db],
                   cwd=work, check=True, capture_output=True)
    seconds, code, lines = run(["answer", "drained.yaml", "--db", db], work)
    rows.append({"case": "nothing pending", "seconds": round(seconds, 2), "exit_code": code, "lines": len(lines),
                 "first_line": lines[0][:100] if lines else ""})

    print(f"{'case':<34} {'median s':>8} {'exit':>4} {'lines':>5}  first line")
    for r in rows:
        print(f"{r['case']:<34} {r['seconds']:>8.2f} {r['exit_code']:>4} {r['lines']:>5}  {r['first_line']}")
    if args.json:
        print(json.dumps({"repetitions": args.repetitions, "rows": rows}))


if __name__ == "__main__":
    main()
