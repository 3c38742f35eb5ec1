-- The PostgreSQL schema: the same tables, columns and versions as the DuckDB migrations beside this folder
-- (BYTEA for BLOB, DOUBLE PRECISION for DOUBLE); tests/storage/test_postgres.py compares the two.
-- 0001: datasets, backlog, runs, stage artifacts, budgets, ledger, releases.
CREATE TABLE datasets (
    name          VARCHAR PRIMARY KEY,
    kind          VARCHAR NOT NULL CHECK (kind IN ('private', 'public')),
    task          VARCHAR NOT NULL,
    source_path   VARCHAR NOT NULL,
    source_sha256 VARCHAR NOT NULL,
    field_map     JSON NOT NULL,
    n_records     BIGINT NOT NULL,
    -- key of the keyed hash that assigns a record to a teacher (depends on the record only)
    teacher_key   BYTEA NOT NULL,
    created_at    TIMESTAMP NOT NULL DEFAULT current_timestamp
);

CREATE TABLE records (
    dataset   VARCHAR NOT NULL REFERENCES datasets (name),
    record_id VARCHAR NOT NULL,
    row_no    BIGINT NOT NULL,
    input     VARCHAR NOT NULL,
    output    VARCHAR,
    PRIMARY KEY (dataset, record_id)
);

CREATE TABLE queries (
    backlog       VARCHAR NOT NULL,
    query_id      VARCHAR NOT NULL,
    row_no        BIGINT NOT NULL,
    input         VARCHAR NOT NULL,
    reference     VARCHAR,
    -- pending | answered | refused_budget
    status        VARCHAR NOT NULL DEFAULT 'pending',
    source_path   VARCHAR NOT NULL,
    created_at    TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (backlog, query_id)
);

CREATE TABLE runs (
    run_id       VARCHAR PRIMARY KEY,
    flow_run_id  VARCHAR,
    method       VARCHAR NOT NULL,
    dataset      VARCHAR NOT NULL,
    backlog      VARCHAR NOT NULL,
    config       JSON NOT NULL,
    config_hash  VARCHAR NOT NULL,
    status       VARCHAR NOT NULL DEFAULT 'running',
    started_at   TIMESTAMP NOT NULL DEFAULT current_timestamp,
    finished_at  TIMESTAMP
);

-- Stage outputs, content-addressed: key = sha256(stage, parent keys, parameters).
CREATE TABLE artifacts (
    key         VARCHAR PRIMARY KEY,
    stage       VARCHAR NOT NULL,
    backlog     VARCHAR NOT NULL,
    query_id    VARCHAR NOT NULL,
    private     BOOLEAN NOT NULL,
    format      VARCHAR NOT NULL CHECK (format IN ('json', 'npy')),
    payload     BYTEA NOT NULL,
    run_id      VARCHAR,
    created_at  TIMESTAMP NOT NULL DEFAULT current_timestamp
);

-- One budget per private dataset: its total is accounted over every ledger entry of that dataset.
CREATE TABLE budgets (
    dataset     VARCHAR PRIMARY KEY REFERENCES datasets (name),
    epsilon     DOUBLE PRECISION NOT NULL CHECK (epsilon > 0),
    delta       DOUBLE PRECISION NOT NULL CHECK (delta > 0 AND delta < 1),
    created_at  TIMESTAMP NOT NULL DEFAULT current_timestamp
);

CREATE SEQUENCE ledger_seq START 1;
-- A ledger entry is a spend: it is written (and committed) before the mechanism draws its noise
-- and is never deleted or refunded, also when no release follows.
CREATE TABLE ledger (
    entry_id        BIGINT PRIMARY KEY DEFAULT nextval('ledger_seq'),
    -- no foreign key, as on DuckDB (which treats the UPDATE that locks the budget row as delete + insert)
    dataset         VARCHAR NOT NULL,
    run_id          VARCHAR NOT NULL,
    backlog         VARCHAR NOT NULL,
    query_id        VARCHAR NOT NULL,
    mechanism       VARCHAR NOT NULL,
    event           JSON NOT NULL,
    epsilon_before  DOUBLE PRECISION NOT NULL,
    epsilon_after   DOUBLE PRECISION NOT NULL,
    created_at      TIMESTAMP NOT NULL DEFAULT current_timestamp
);

CREATE TABLE releases (
    backlog     VARCHAR NOT NULL,
    query_id    VARCHAR NOT NULL,
    entry_id    BIGINT NOT NULL UNIQUE REFERENCES ledger (entry_id),
    run_id      VARCHAR NOT NULL,
    mechanism   VARCHAR NOT NULL,
    answer      VARCHAR NOT NULL,
    details     JSON NOT NULL,
    created_at  TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (backlog, query_id)
);
