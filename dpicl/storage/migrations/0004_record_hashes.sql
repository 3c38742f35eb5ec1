-- 0004: the content of private data backs one privacy budget only. Ingest compares a new dataset's records
-- with those already registered by their content hash (dpicl/storage/ingest.py), so a copy of private data
-- under another name, reordered, partly changed or as public data is refused unless declared distinct.

-- The record's content hash: SHA-256 of its input and output (never its id), each length-prefixed so that no
-- two different (input, output) pairs serialise alike; a missing output is 'null'. Ingest calls this macro,
-- so stored and new hashes always agree; a change must come as a new migration that re-hashes every record.
CREATE MACRO dpicl_record_sha256(input, output) AS sha256(
    'dpicl-record-v1' || chr(0) || strlen(input) || ':' || input || chr(0)
    || coalesce(strlen(output) || ':' || output, 'null'));

CREATE TABLE record_hashes (
    dataset         VARCHAR NOT NULL,
    record_id       VARCHAR NOT NULL,
    content_sha256  VARCHAR NOT NULL,
    PRIMARY KEY (dataset, record_id)
);
INSERT INTO record_hashes SELECT dataset, record_id, dpicl_record_sha256(input, output) FROM records;

-- A dataset declared a different population (--distinct-from-existing) records that in its field_map
-- (`distinct_from_existing`): DuckDB cannot add a column to `datasets` while other tables reference it.
