"""DuckDB storage: schema and migrations, ingest of datasets and backlogs, stage artifacts, runs.

The budget ledger and releases live in `dpicl.storage.ledger`.
"""

from dpicl.storage.artifacts import artifact_key, get_artifact, get_artifacts, has_artifact, put_artifact
from dpicl.storage.db import DatabaseLockedError, SchemaVersionError, connect, default_db_path, transaction
from dpicl.storage.ingest import FieldMap, IngestError, IngestReport, ingest_dataset, ingest_queries
from dpicl.storage.queries import (
    Query,
    Record,
    backlog_counts,
    get_dataset,
    get_queries,
    load_public_records,
    load_records,
    pending_queries,
    set_query_status,
)
from dpicl.storage.runs import create_run, finish_run, get_run

__all__ = [
    "DatabaseLockedError", "FieldMap", "IngestError", "IngestReport", "Query", "Record", "SchemaVersionError",
    "artifact_key", "backlog_counts", "connect", "create_run", "default_db_path", "finish_run", "get_artifact",
    "get_artifacts", "get_dataset", "get_queries", "get_run", "has_artifact", "ingest_dataset", "ingest_queries",
    "load_public_records", "load_records", "pending_queries", "put_artifact", "set_query_status", "transaction",
]
