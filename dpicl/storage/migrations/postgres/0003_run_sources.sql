-- 0003: reruns. A run made by `dpicl rerun` re-runs a past run's stages from a stage on its stored artifacts;
-- this links it to the run it re-ran (source) and to the answer_backlog run whose subsamples and teacher outputs
-- it reuses (root). No foreign key to runs, as on DuckDB, which treats the UPDATE that finishes a run as delete + insert.
CREATE TABLE run_sources (
    run_id         VARCHAR PRIMARY KEY,
    source_run_id  VARCHAR NOT NULL,
    root_run_id    VARCHAR NOT NULL,
    from_stage     VARCHAR NOT NULL,
    created_at     TIMESTAMP NOT NULL DEFAULT current_timestamp
);
