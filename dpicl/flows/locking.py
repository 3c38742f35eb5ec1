"""One writer per database: the lock every writing flow runs under.

DuckDB lets one process hold a database file read-write, and while it does no other process can open the file at
all (docs/STACK.md). Flows open and close the file in every task, so two flow runs on one database in two
processes would take turns at random and one of them would crash on the lock, or both would read the same
pending queries. `database_writer(db_path)` serialises them:

1. with a Prefect server (`PREFECT_API_URL` set): a Prefect global concurrency limit named `dpicl-db-<file
   name>-<sha256 of the absolute path, 8 hex>` (e.g. `dpicl-db-demo-duckdb-3fa2c1d9`) with one slot, created if
   missing (Prefect 3 *ignores* a limit that does not exist, with a warning only, so it must exist), visible in the
   UI under Concurrency; this is what makes runs queue across workers and machines that share the server. The slot
   is held with a lease of `LEASE_SECONDS` that the holder renews; the server's repossessor revokes the lease of a
   holder that died. Without a server (Prefect's temporary one, one per process) the limit is skipped: its lease
   would live in the memory of a temporary server that never expires leases, so a killed run would block the
   database for good;
2. an OS file lock (`flock`, through filelock) on `<db>.writer-lock` next to the database, for processes on this
   machine that do not share a Prefect server (e.g. two `dpicl answer` runs, each with its own temporary server).
   The kernel drops it when its process dies, so a run killed with SIGKILL frees the database at once. The holder
   writes its pid, host and start time into the file, so that a waiting run can say whom it waits for;
3. then it waits until the DuckDB file can be opened, for a process that holds it without taking part in the
   lock (a CLI command such as `dpicl ingest`), instead of crashing on "database is locked";
4. finally it marks the runs of processes that no longer exist as `crashed` (`dpicl.storage.runs`).

A PostgreSQL database needs none of this: many processes and machines write to it at once, and the database
serialises what must be serialised (a reservation locks its budget row; pending queries are claimed with
`FOR UPDATE SKIP LOCKED`: `dpicl.storage.queries`).

Order is always limit → file lock → file, so waiting never deadlocks. A waiting run logs what it waits for every
`WAIT_LOG_SECONDS`. Names, pids and paths' file names only: nothing here sees private text.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from dpicl import liveness
from dpicl.storage.db import is_file_target

LIMIT_PREFIX = "dpicl-db-"
DEFAULT_FILE_WAIT_SECONDS = 600.0
# the Prefect slot's lease: renewed by the holder; a dead holder's slot is revoked by the server this long after
# its last renewal (plus the repossessor's loop, 15 s by default)
LEASE_SECONDS = 300.0
WAIT_LOG_SECONDS = 30.0
_POLL_SECONDS = 0.5

log = logging.getLogger(__name__)


def limit_name(db_path: str | os.PathLike) -> str:
    """The name of the database's concurrency limit: its file name, for people, and a hash of its absolute path,
    so that one file has one name whatever the relative path (and two files of one name in two folders two)."""
    absolute = _absolute(db_path)
    readable = re.sub(r"[^a-z0-9]+", "-", Path(absolute).name.lower()).strip("-")[:40] or "db"
    return f"{LIMIT_PREFIX}{readable}-{hashlib.sha256(absolute.encode('utf-8')).hexdigest()[:8]}"


def _absolute(db_path: str | os.PathLike) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(db_path)))


def lock_path(db_path: str | os.PathLike) -> Path:
    return Path(_absolute(db_path) + ".writer-lock")


def uses_prefect_server() -> bool:
    """Whether flows talk to a Prefect server (`PREFECT_API_URL`), not to a temporary one of this process."""
    from prefect.settings import PREFECT_API_URL

    return bool(PREFECT_API_URL.value())


def ensure_limit(name: str) -> None:
    """Create the global concurrency limit `name` with one slot if missing; repair one that would not limit."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import (
        GlobalConcurrencyLimitCreate,
        GlobalConcurrencyLimitUpdate,
    )
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


def holder(lock: Path) -> liveness.ProcessId | None:
    """The process that last took the writer lock `lock` and has not let go (None: nobody, or unreadable)."""
    try:
        record = json.loads(lock.read_text(encoding="utf-8") or "null")
        return liveness.ProcessId(int(record["pid"]), str(record["host"]), float(record["started"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def describe_holder(lock: Path) -> str:
    """Who holds the writer lock, for a waiting message: pid, host and whether that process still runs."""
    found = holder(lock)
    if found is None:
        return "holder unknown"
    state = {True: "running", False: "no longer running", None: "cannot be checked from this host"}
    return f"held by {found.describe()} ({state[liveness.alive(found)]})"


def _write_holder(fd: int) -> None:
    """filelock's `on_acquired` hook: the new holder's record in the lock file (it now holds the lock)."""
    me = liveness.this_process()
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": me.pid, "host": me.host, "started": me.started}).encode("utf-8"), 0)


@contextmanager
def _file_lock(lock_path: Path, on_wait: Callable[[str], None]) -> Iterator[None]:
    """The kernel's `flock` on `lock_path`, through filelock: a waiter never truncates the holder's record, and the
    file goes when its holder lets go (also when it is killed: the kernel drops the lock with the process)."""
    from filelock import UnixFileLock

    # no soft-lock fallback: a marker file would outlive a killed holder and block the database for good
    lock = UnixFileLock(lock_path, thread_local=False, fallback_to_soft=False, on_acquired=_write_holder)

    def describe() -> str:
        return (f"waiting for the writer lock {lock_path.name} ({describe_holder(lock_path)}); it is freed when "
                "that process ends, also when it is killed")

    with _reporting_wait(describe, on_wait, grace_seconds=0.5):
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def wait_until_openable(db_path: str | os.PathLike, timeout_seconds: float = DEFAULT_FILE_WAIT_SECONDS,
                        on_wait=None) -> None:
    """Block until no other process holds the DuckDB file (it may be opened now); DatabaseLockedError after
    `timeout_seconds`. A missing file is openable (it will be created)."""
    from dpicl.storage.db import DatabaseLockedError, connect

    path = Path(db_path)

    def try_open() -> None:
        if path.exists():  # a missing file is created by the flow
            # read-write, as the flow will open it; migrations are idempotent and would be applied by it anyway
            connect(path).close()

    waiting = _now_and_then(lambda: on_wait and on_wait(f"waiting for another process to release {path.name}"))
    Retrying(retry=retry_if_exception_type(DatabaseLockedError), wait=wait_fixed(_POLL_SECONDS),
             stop=stop_after_delay(timeout_seconds), before_sleep=waiting, reraise=True)(try_open)


def _now_and_then(say: Callable[[], object]) -> Callable[[object], None]:
    """A tenacity `before_sleep` that calls `say()` before the first wait and then at most every
    WAIT_LOG_SECONDS."""
    next_time = 0.0

    def before_sleep(_state) -> None:
        nonlocal next_time
        if time.monotonic() >= next_time:
            say()
            next_time = time.monotonic() + WAIT_LOG_SECONDS

    return before_sleep


def _logger():
    try:
        from prefect import get_run_logger

        return get_run_logger()
    except Exception:  # noqa: BLE001 (outside a flow or task run: MissingContextError)
        return log


@contextmanager
def _reporting_wait(describe: Callable[[], str], on_wait: Callable[[str], None],
                    grace_seconds: float = 3.0) -> Iterator[None]:
    """Log `describe()` every WAIT_LOG_SECONDS (after a short grace) while the body blocks."""
    done = threading.Event()

    def report() -> None:
        delay = grace_seconds
        while not done.wait(delay):
            on_wait(describe())
            delay = WAIT_LOG_SECONDS

    reporter = threading.Thread(target=report, name="dpicl-writer-wait", daemon=True)
    reporter.start()
    try:
        yield
    finally:
        done.set()
        reporter.join()


@contextmanager
def _prefect_slot(name: str, lock: Path, db_name: str, timeout_seconds: float | None, on_wait) -> Iterator[None]:
    from prefect.concurrency.sync import concurrency

    ensure_limit(name)

    def describe() -> str:
        return (f"waiting for the writer slot of {db_name} (Prefect concurrency limit {name}; last writer on "
                f"this machine: {describe_holder(lock)}); a holder that died loses the slot when its lease "
                f"expires, {LEASE_SECONDS / 60:g} minutes after its last renewal")

    with ExitStack() as stack:
        with _reporting_wait(describe, on_wait):
            # strict: the limit must exist (we just made sure); a renewal failure must not kill a half-done run
            stack.enter_context(concurrency(name, occupy=1, timeout_seconds=timeout_seconds, strict=True,
                                            lease_duration=LEASE_SECONDS, raise_on_lease_renewal_failure=False))
        yield


def _mark_crashed_runs(db_path: str, logger) -> None:
    """Runs left `running` by processes that no longer exist become `crashed` (we hold the writer lock now)."""
    from dpicl.storage.runs import mark_crashed_runs
    from dpicl.tasks.context import database

    if is_file_target(db_path) and not Path(db_path).exists():
        return
    # waits: a CLI reader may have opened the file since wait_until_openable closed it
    with database(db_path) as con:
        crashed = mark_crashed_runs(con)
    if crashed:
        logger.warning("marked %d run(s) of processes that no longer run as crashed: %s", len(crashed),
                       ", ".join(crashed))


@contextmanager
def database_writer(db_path: str | os.PathLike, *, timeout_seconds: float | None = None,
                    file_wait_seconds: float = DEFAULT_FILE_WAIT_SECONDS) -> Iterator[str]:
    """Hold the database's single writer slot for the body of the `with` (yields the limit's name).

    `timeout_seconds`: how long to wait for the Prefect slot (None: as long as it takes; TimeoutError after).
    Uses the Prefect limit only with a Prefect server (see the module docstring); `:memory:` needs no lock.
    """
    target = os.fspath(db_path)
    if target == ":memory:":
        yield ""
        return
    if not is_file_target(target):  # PostgreSQL: concurrency is the database's (row locks, claims)
        _mark_crashed_runs(target, _logger())
        yield ""
        return
    name, lock = limit_name(target), lock_path(target)
    logger = _logger()
    started = time.monotonic()
    slot = _prefect_slot(name, lock, Path(target).name, timeout_seconds, logger.info) if uses_prefect_server() \
        else nullcontext()
    with slot, _file_lock(lock, logger.info):
        wait_until_openable(target, file_wait_seconds, logger.info)
        waited = time.monotonic() - started
        if waited > 5:  # an uncontended acquisition takes a second or two (API calls)
            logger.info("database writer slot %s acquired after %.1f s", name, waited)
        _mark_crashed_runs(target, logger)
        yield name

