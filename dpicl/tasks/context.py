"""What every stage task needs: the run's stored config and typed plan, a database connection, the models (loaded
once per process) and the reservation of a batch's releases before anything is drawn. No algorithm lives here.

A config *file* is read once, when a run opens (`config`); from then on every task of the run reads the config and
plan stored with the run (`run`), so editing the file of a scheduled run cannot change what a running one uses
(privacy invariant 9, docs/PRIVACY.md: what is charged is what is used)."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import duckdb

from dpicl import methods
from dpicl.config import Config, load_config
from dpicl.methods.base import Method, Plan
from dpicl.storage import ledger, recovery
from dpicl.storage.db import connect
from dpicl.storage.runs import get_run, stored_plan


def config(config_path: str) -> Config:
    """The config at `config_path`, parsed once per version of the file (an edited file is read again). Only
    what opens a run reads it; the run's tasks use `run(con, run_id)`."""
    stat = os.stat(config_path)
    return _config(config_path, stat.st_mtime_ns, stat.st_size)


@dataclass(frozen=True)
class Run:
    """What a run stored when it opened: its config, its per-query plan (numbers) and the event one query costs."""

    run_id: str
    cfg: Config
    plan: Plan
    event_json: str

    @property
    def method(self) -> Method:
        return methods.get(self.cfg.method.name)


_RUNS: dict[str, Run] = {}


def run(con: duckdb.DuckDBPyConnection, run_id: str) -> Run:
    """The stored config and plan of run `run_id` (they never change, so they are cached by run id)."""
    if run_id not in _RUNS:
        stored = get_run(con, run_id)
        if stored is None:
            raise LookupError(f"no run with id {run_id!r} in this database")
        numbers, event_json = stored_plan(con, run_id)
        cfg = Config.model_validate(stored["config"])
        _RUNS[run_id] = Run(run_id, cfg, methods.get(cfg.method.name).Plan.restore(numbers), event_json)
    return _RUNS[run_id]


def run_at(db_path: str, run_id: str) -> Run:
    """`run` for a task that has no connection open yet."""
    if run_id not in _RUNS:
        with database(db_path) as con:
            return run(con, run_id)
    return _RUNS[run_id]


@functools.lru_cache(maxsize=8)
def _config(config_path: str, mtime_ns: int, size: int) -> Config:
    return load_config(config_path)


# A CLI reader (`dpicl budget show`, `dpicl releases`) holds the file for moments: a task waits for it to let go
# rather than fail (writers are kept apart by the flows' one-writer limit, dpicl/flows/locking.py).
READER_WAIT_SECONDS = 60.0


@contextmanager
def database(db_path: str, wait_seconds: float = READER_WAIT_SECONDS) -> Iterator[duckdb.DuckDBPyConnection]:
    con = connect(db_path, wait_seconds=wait_seconds)
    try:
        yield con
    finally:
        con.close()


# One model load at a time in a process: tasks on Prefect's worker threads (or a caller loading the models ahead)
# that ask for a model at once wait for the first load instead of each loading it (lru_cache does not wait).
_LOADING = threading.Lock()


@functools.lru_cache(maxsize=2)
def _backend(model):  # a config.ModelConfig (frozen, hashable)
    from dpicl.inference import backend_options, load_backend

    return load_backend(model.backend, **backend_options(model))


def backend(cfg: Config):
    """The run's LLM backend, loaded once per process and reused by every task (per model config)."""
    with _LOADING:
        return _backend(cfg.model)


@functools.lru_cache(maxsize=2)
def _encoder(model: str, batch_size: int):
    from dpicl.embeddings.encoder import Encoder

    return Encoder(model, batch_size=batch_size)


def encoder(cfg: Config):
    with _LOADING:
        return _encoder(cfg.embedding.model, cfg.embedding.batch_size)


@functools.lru_cache(maxsize=2)
def public_embeddings(encoder, texts: tuple[str, ...]):
    """A public dataset's inputs embedded, once per process (every batch of a run ranks its queries against the same
    public set)."""
    return encoder.encode(texts, batched=True)


def reserve_many(con: duckdb.DuckDBPyConnection, cfg: Config, run_id: str, query_ids: Sequence[str], mechanism: str,
                 event_json: str, backlog: str | None = None) -> dict[str, ledger.Reservation]:
    """Pay for the releases of `query_ids` from the config's private dataset before anything is drawn (privacy
    invariant 3): {query id: reservation} for those paid, the others refused (the budget cannot pay). A charge that
    a crashed run paid for the very same release and never used is taken over instead of paying again (privacy
    invariant 8, dpicl/storage/recovery.py); the rest are paid in one transaction, in order, as many as the budget
    can, one ledger entry each. `backlog` defaults to the config's."""
    backlog = backlog or cfg.backlog
    taken: dict[str, ledger.Reservation] = {}
    if recovery.has_crashed_runs(con):  # the search for an unused charge reads the ledger: only after a crash
        for query_id in query_ids:
            found = recovery.take_over_unused_charge(con, dataset=cfg.private_dataset, run_id=run_id, backlog=backlog,
                                                     query_id=query_id, mechanism=mechanism, event_json=event_json)
            if found is not None:
                taken[query_id] = found
    paid = ledger.reserve_batch(con, dataset=cfg.private_dataset, run_id=run_id, backlog=backlog,
                                query_ids=[q for q in query_ids if q not in taken], mechanism=mechanism,
                                event_json=event_json)
    return {**taken, **{r.query_id: r for r in paid}}


def reserve(con: duckdb.DuckDBPyConnection, cfg: Config, run_id: str, query_id: str, mechanism: str,
            event_json: str, backlog: str | None = None) -> ledger.Reservation | None:
    """`reserve_many` for one release; None when the budget cannot pay."""
    return reserve_many(con, cfg, run_id, [query_id], mechanism, event_json, backlog).get(query_id)
