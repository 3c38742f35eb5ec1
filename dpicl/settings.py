"""dpicl's environment variables in one place (pydantic-settings): read when asked, so a test or a command that sets
one takes effect at once. README, "Environment", lists them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """`DPICL_DB`, `DPICL_CACHE`, `DPICL_PROGRESS` (an empty value counts as unset)."""

    model_config = SettingsConfigDict(env_prefix="DPICL_", env_ignore_empty=True, extra="ignore")

    # the DuckDB file, or a postgresql:// URL
    db: str = "dpicl.duckdb"
    # converted models, stored calibration searches
    cache: Path = Field(default_factory=lambda: Path.home() / ".cache" / "dpicl")
    # progress bars on a terminal (dpicl.progress)
    progress: bool = True


def settings() -> Settings:
    """The settings as the environment has them now."""
    return Settings()
