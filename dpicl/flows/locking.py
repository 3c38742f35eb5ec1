"""One writer per database: the Prefect global concurrency limit every writing flow runs under.

DuckDB lets one process hold a database file read-write, and while it does no other process can open the file at
all (docs/STACK.md). Flows open and close the file in every task, so two flow runs on one database in two
processes would take turns at random and one of them would crash on the lock, or both would read the same
pending queries. `database_writer(db_path)` serialises them:

1. a Prefect global concurrency limit named `dpicl-db-<sha256 of the absolute path, 12 hex>` with one slot,
   created if missing (Prefect 3 *ignores* a limit that does not exist, with a warning only, so it must exist),
   visible in the UI under Concurrency; this is what makes runs queue across workers and machines that share the
   Prefect server;
2. inside it, an OS file lock on `<db>.writer-lock` next to the database, for processes on this machine that do
   not share the Prefect server (e.g. two `dpicl answer` runs, each with its own temporary server);
3. then it waits until the DuckDB file can be opened, for a process that holds it without taking part in the
   limit (a CLI command such as `dpicl ingest`), instead of crashing on "database is locked".

Order is always limit → file lock → file, so waiting never deadlocks. Names and paths only: nothing here sees
private text.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LIMIT_PREFIX = "dpicl-db-"
DEFAULT_FILE_WAIT_SECONDS = 600.0
_POLL_SECONDS = 0.5

log = logging.getLogger(__name__)


def limit_name(db_path: str | os.PathLike) -> str:
    """The name of the database's concurrency limit (same file → same name, whatever the relative path)."""
    absolute = os.path.realpath(os.path.abspath(os.fspath(db_path)))
    return LIMIT_PREFIX + hashlib.sha256(absolute.encode("utf-8")).hexdigest()[:12]


def ensure_limit(name: str) -> None:
    """Create the global concurrency limit `name` with one slot if missing; repair one that would not limit."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate, GlobalConcurrencyLimitUpdate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            existing = client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1, active=True))
            except ObjectAlreadyExists:  # another process created it in between
                pass
            return
        if existing.limit != 1 or not existing.active or existing.slot_decay_per_second:
            # DuckDB cannot have two writing processes: a limit above one (or an inactive one) would not protect it
            log.warning("concurrency limit %s had limit=%s active=%s; setting it to one active slot", name,
                        existing.limit, existing.active)
            client.update_global_concurrency_limit(
                name, GlobalConcurrencyLimitUpdate(limit=1, active=True, slot_decay_per_second=0.0))


@contextmanager
def _file_lock(lock_path: Path, on_wait) -> Iterator[None]:
    with open(lock_path, "a+b") as handle:
        waited = False
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited:
                    on_wait(f"waiting for the writer lock {lock_path.name} (another process on this machine)")
                    waited = True
                time.sleep(_POLL_SECONDS)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def wait_until_openable(db_path: str | os.PathLike, timeout_seconds: float = DEFAULT_FILE_WAIT_SECONDS,
                        on_wait=None) -> None:
    """Block until no other process holds the DuckDB file (it may be opened now); DatabaseLockedError after
    `timeout_seconds`. A missing file is openable (it will be created)."""
    from dpicl.storage.db import DatabaseLockedError, connect

    path = Path(db_path)
    deadline = time.monotonic() + timeout_seconds
    waited = False
    while True:
        if not path.exists():
            return
        try:
            # read-write, as the flow will open it; migrations are idempotent and would be applied by it anyway
            connect(path).close()
            return
        except DatabaseLockedError:
            if time.monotonic() >= deadline:
                raise
            if not waited and on_wait is not None:
                on_wait(f"waiting for another process to release {path.name}")
            waited = True
            time.sleep(_POLL_SECONDS)


def _logger():
    try:
        from prefect import get_run_logger

        return get_run_logger()
    except Exception:  # noqa: BLE001 (outside a flow or task run: MissingContextError)
        return log


@contextmanager
def database_writer(db_path: str | os.PathLike, *, timeout_seconds: float | None = None,
                    file_wait_seconds: float = DEFAULT_FILE_WAIT_SECONDS) -> Iterator[str]:
    """Hold the database's single writer slot for the body of the `with` (yields the limit's name).

    `timeout_seconds`: how long to wait for the Prefect slot (None: as long as it takes; TimeoutError after).
    Needs a Prefect API (a server, or the temporary one Prefect starts); `:memory:` databases need no lock.
    """
    target = os.fspath(db_path)
    if target == ":memory:":
        yield ""
        return
    from prefect.concurrency.sync import concurrency

    name = limit_name(target)
    logger = _logger()
    ensure_limit(name)
    started = time.monotonic()
    # strict: the limit must exist (we just made sure); a renewal failure must not kill a half-done run silently
    with concurrency(name, occupy=1, timeout_seconds=timeout_seconds, strict=True,
                     raise_on_lease_renewal_failure=False):
        lock_path = Path(os.path.realpath(os.path.abspath(target)) + ".writer-lock")
        with _file_lock(lock_path, logger.info):
            wait_until_openable(target, file_wait_seconds, logger.info)
            waited = time.monotonic() - started
            if waited > 5:  # an uncontended acquisition takes a second or two (API calls)
                logger.info("database writer slot %s acquired after %.1f s", name, waited)
            yield name
