"""Defaults shared by the stage tasks."""

from __future__ import annotations

from prefect.cache_policies import NO_CACHE

# Stage tasks pass artifact keys and counts only; results are never persisted by Prefect (privacy
# invariant 5) and caching happens in DuckDB by content key, not in Prefect.
STAGE = dict(persist_result=False, cache_policy=NO_CACHE)
