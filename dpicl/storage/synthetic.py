"""DP synthetic demonstrations as a public dataset (written by the `synthesize_demos` flow).

The demonstrations are a DP release paid for by one ledger entry, so they may be used like any public data
(post-processing). They are written in one transaction, after the charge: never half a dataset.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence

import duckdb

from dpicl.names import name_problem
from dpicl.storage.db import transaction


class SyntheticDatasetError(ValueError):
    """The synthetic dataset cannot be written as asked (the message says how to fix it)."""


def check_new_dataset(con: duckdb.DuckDBPyConnection, name: str) -> None:
    """Refuse a name that is unusable (dpicl.names) or taken (checked before paying, so a typo costs nothing)."""
    problem = name_problem(name, "synthetic.name")
    if problem is not None:
        raise SyntheticDatasetError(problem)
    if con.execute("SELECT 1 FROM datasets WHERE name = ?", [name]).fetchone():
        raise SyntheticDatasetError(f"a dataset named {name!r} already exists; choose another synthetic.name (DP "
                                    "synthetic demonstrations are never written over existing data)")


def write_synthetic_dataset(con: duckdb.DuckDBPyConnection, name: str, task: str, rows: Sequence[tuple[str, str]],
                            *, source_dataset: str, run_id: str, entry_id: int) -> int:
    """Store (input, output) demonstrations as the public dataset `name`; returns the number of records."""
    payload = json.dumps([list(r) for r in rows], ensure_ascii=False).encode()
    field_map = json.dumps({"synthetic_from": source_dataset, "run_id": run_id, "ledger_entry": entry_id})
    with transaction(con):
        check_new_dataset(con, name)
        con.execute(
            "INSERT INTO datasets (name, kind, task, source_path, source_sha256, field_map, n_records, teacher_key) "
            "VALUES (?, 'public', ?, ?, ?, ?, ?, ?)",
            [name, task, f"dpicl:synthesize_demos/{run_id}", hashlib.sha256(payload).hexdigest(), field_map,
             len(rows), secrets.token_bytes(32)],
        )
        con.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?)",
                        [[name, f"synthetic-{i}", i, inp, out] for i, (inp, out) in enumerate(rows)])
    return len(rows)
