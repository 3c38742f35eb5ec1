"""Small helpers shared by the stage tasks: task defaults and the run's random generator."""

from __future__ import annotations

import hashlib

from prefect.cache_policies import NO_CACHE

from dpicl.config import Config
from dpicl.privacy.rng import make_rng

# Stage tasks pass artifact keys and counts only; results are never persisted by Prefect (privacy
# invariant 5) and caching happens in DuckDB by content key, not in Prefect.
STAGE = dict(persist_result=False, cache_policy=NO_CACHE)


def rng_for(cfg: Config, *labels: str):
    """A cryptographically seeded generator; with `seed` in the config (test mode only) a derived one."""
    if cfg.seed is None:
        return make_rng()
    digest = hashlib.sha256(":".join([str(cfg.seed), *labels]).encode()).digest()
    return make_rng(int.from_bytes(digest[:8], "big"))
