-- 0006: crash recovery.
-- The process that runs a run (pid, host, start time), so that the next writer marks the runs of processes that
-- died (kill -9, OOM, power loss) as 'crashed' instead of leaving them 'running' for ever (dpicl/storage/runs.py).
-- NULL for runs opened before this migration: their process cannot be checked, they are left as they are.
ALTER TABLE runs ADD COLUMN pid INTEGER;
ALTER TABLE runs ADD COLUMN host VARCHAR;
ALTER TABLE runs ADD COLUMN process_started DOUBLE PRECISION;

-- A charge paid by a crashed run and never released, taken over by a later run for the same release
-- (dpicl/storage/recovery.py). The ledger entry itself never changes; this records which runs drew on it.
CREATE TABLE ledger_reuses (
    entry_id    BIGINT NOT NULL,
    run_id      VARCHAR NOT NULL,
    created_at  TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (entry_id, run_id)
);
