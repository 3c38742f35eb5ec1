"""Content-addressed stage artifacts: every stage output is stored under a key derived from what produced it.

key = sha256 of the canonical JSON of {stage, parent keys, parameters}, so a stage re-run with the same inputs
finds its output instead of recomputing it (docs/ops/rerun-and-plan.md). Payloads
are JSON values or numpy arrays (stored as .npy bytes, never pickled). Private artifacts (teacher outputs,
private embeddings) live only here; tasks pass their keys around.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import duckdb
import numpy as np


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def artifact_key(stage: str, parents: Sequence[str], params: Mapping) -> str:
    """The content key of a stage output: sha256 hex of canonical JSON of {stage, parents, params}."""
    blob = canonical_json({"stage": stage, "parents": list(parents), "params": dict(params)})
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def put_artifact(con: duckdb.DuckDBPyConnection, key: str, stage: str, backlog: str, query_id: str,
                 payload: Any, *, private: bool, run_id: str | None = None) -> str:
    """Store `payload` under `key` unless the key is already stored (then nothing changes). Returns the key."""
    if isinstance(payload, np.ndarray):
        buffer = io.BytesIO()
        np.save(buffer, payload, allow_pickle=False)
        fmt, blob = "npy", buffer.getvalue()
    else:
        fmt, blob = "json", json.dumps(payload, ensure_ascii=False).encode("utf-8")
    con.execute(
        "INSERT INTO artifacts (key, stage, backlog, query_id, private, format, payload, run_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
        [key, stage, backlog, query_id, private, fmt, blob, run_id],
    )
    return key


def get_artifact(con: duckdb.DuckDBPyConnection, key: str) -> Any:
    """The payload stored under `key` (a JSON value or an ndarray); KeyError if there is none."""
    row = con.execute("SELECT format, payload FROM artifacts WHERE key = ?", [key]).fetchone()
    if row is None:
        raise KeyError(key)
    return _decode(*row)


def has_artifact(con: duckdb.DuckDBPyConnection, key: str) -> bool:
    return con.execute("SELECT count(*) FROM artifacts WHERE key = ?", [key]).fetchone()[0] > 0


def get_artifacts(con: duckdb.DuckDBPyConnection, keys: Iterable[str]) -> dict[str, Any]:
    """The payloads of the stored ones among `keys`, in one query (missing keys are absent from the dict)."""
    rows = con.execute("SELECT key, format, payload FROM artifacts WHERE key = ANY(?)",
                       [list(keys)]).fetchall()
    return {key: _decode(fmt, payload) for key, fmt, payload in rows}


def _decode(fmt: str, payload: bytes) -> Any:
    if fmt == "npy":
        return np.load(io.BytesIO(payload), allow_pickle=False)
    return json.loads(bytes(payload).decode("utf-8"))
