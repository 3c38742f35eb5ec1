"""The claims of a run that drains a backlog, kept alive while it works and given back when it ends.

A run claims its queries batch by batch (`dpicl.storage.queries.claim_pending`). While it runs, a daemon thread
renews its claims every third of the lease over a connection of its own, so that a long batch (LLM inference
holds no connection and no lock) keeps them; when the run ends, normally or by an exception, the queries it left
pending are given back. A run killed outright (kill -9, a lost machine) renews nothing: its claims expire after
`CLAIM_LEASE_SECONDS` and other runs take its queries over. Ids and counts only: nothing here sees text.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from dpicl.storage.queries import CLAIM_LEASE_SECONDS, release_claims, renew_claims
from dpicl.tasks.context import database

log = logging.getLogger(__name__)


@contextmanager
def claims_kept(db_path: str, run_id: str, lease_seconds: float = CLAIM_LEASE_SECONDS) -> Iterator[None]:
    stop = threading.Event()

    def renew() -> None:
        # a try every lease/5 that waits at most lease/20 for a reader to let go of the file: three tries fit in
        # one lease, so two missed renewals in a row leave the claims held
        while not stop.wait(lease_seconds / 5):
            try:
                with database(db_path, wait_seconds=lease_seconds / 20) as con:
                    renew_claims(con, run_id, lease_seconds)
            except Exception as error:  # noqa: BLE001 (a missed renewal is retried)
                log.warning("could not renew the claims of run %s (%s); retrying", run_id, type(error).__name__)

    renewer = threading.Thread(target=renew, name="dpicl-claims", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        with database(db_path) as con:
            release_claims(con, run_id)
