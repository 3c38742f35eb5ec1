-- 0004: the content of private data backs one privacy budget only (DuckDB's 0004 says how). On PostgreSQL the
-- records' content hashes are computed where the file is read and validated (an in-memory DuckDB, with the same
-- `dpicl_record_sha256` macro: dpicl/storage/ingest.py), so this schema needs only the table. A PostgreSQL
-- database gets every migration at once, before any record: there is nothing to re-hash here.
CREATE TABLE record_hashes (
    dataset         VARCHAR NOT NULL,
    record_id       VARCHAR NOT NULL,
    content_sha256  VARCHAR NOT NULL,
    PRIMARY KEY (dataset, record_id)
);
