-- 0002: results of privacy–utility sweeps (flow `evaluate`): one metric value per setting and repetition.
CREATE TABLE evaluations (
    sweep_id     VARCHAR NOT NULL,
    flow_run_id  VARCHAR,
    dataset      VARCHAR NOT NULL,
    backlog      VARCHAR NOT NULL,
    queries      INTEGER NOT NULL,
    setting      VARCHAR NOT NULL,
    -- NULL for the baselines (zero-shot, few-shot); 'inf' for aggregation without noise
    method       VARCHAR,
    epsilon      DOUBLE PRECISION,
    delta        DOUBLE PRECISION,
    repetition   INTEGER NOT NULL,
    metric       VARCHAR NOT NULL,
    value        DOUBLE PRECISION NOT NULL,
    created_at   TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (sweep_id, setting, repetition, metric)
);
