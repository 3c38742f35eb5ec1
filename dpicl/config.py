"""Run configuration: one YAML file per method × dataset, validated by pydantic.

Configuration enters once, at the flow's entry point; tasks receive the path (never private text).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

CONFIG_DIR = Path(__file__).parent / "configs"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskConfig(_Strict):
    """How demonstrations and queries become prompts (plain completion format, STACK.md)."""

    type: Literal["summarization", "generation"] = "summarization"
    instruction: str = ""
    demo_template: str = "Input:\n{input}\nOutput: {output}"
    query_template: str = "Input:\n{input}\nOutput:"
    separator: str = "\n\n"

    @field_validator("demo_template")
    @classmethod
    def _demo_fields(cls, v: str) -> str:
        if "{input}" not in v or "{output}" not in v:
            raise ValueError("demo_template must contain {input} and {output}")
        return v

    @field_validator("query_template")
    @classmethod
    def _query_fields(cls, v: str) -> str:
        if "{input}" not in v or "{output}" in v:
            raise ValueError("query_template must contain {input} and not {output}")
        return v


class ModelConfig(_Strict):
    llm: str = "smollm2"
    backend: Literal["hf"] = "hf"
    device: str = "auto"
    dtype: str = "float32"
    threads: int | None = None
    batch_size: int = Field(16, ge=1)


class GenerationConfig(_Strict):
    max_new_tokens: int = Field(40, ge=1)
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    stop: list[str] = ["\n"]


class EmbeddingConfig(_Strict):
    model: str = "all-MiniLM-L6-v2"
    batch_size: int = Field(64, ge=1)


class ESAConfig(_Strict):
    """ESA (paper 001 §3.2.1): teachers' output embeddings → noisy mean → nearest zero-shot candidate."""

    name: Literal["esa"] = "esa"
    teachers: int = Field(10, ge=1)
    shots: int = Field(4, ge=1)
    candidates: int = Field(8, ge=1)
    candidate_temperature: float = Field(1.0, gt=0)
    candidate_top_p: float = Field(0.95, gt=0, le=1)
    # Poisson rate per record and query; default teachers·shots / |private dataset| (the papers' q)
    sampling_rate: float | None = Field(None, gt=0, le=1)
    # number of queries the budget is planned to pay for: the per-query noise is calibrated so that
    # this many releases compose to the budget's (ε, δ)
    planned_queries: int = Field(100, ge=1)


class Fields(_Strict):
    """Which column of the file holds each field (DuckDB reads JSON, JSONL, CSV and Parquet)."""

    id: str | None = None
    input: str = "input"
    output: str | None = "output"
    reference: str | None = None


class DataSource(_Strict):
    """A file to ingest: a private or public dataset, or a backlog of queries."""

    name: str
    path: str  # relative paths are relative to the config file
    kind: Literal["private", "public", "queries"]
    task: str = "summarization"
    fields: Fields = Fields()


class Config(_Strict):
    name: str
    private_dataset: str
    backlog: str
    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    generation: GenerationConfig = GenerationConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    method: ESAConfig = ESAConfig()
    # queries handled per stage batch: one backend call covers all prompts of this many queries
    batch_queries: int = Field(8, ge=1)
    # files `dpicl ingest --config` registers (optional)
    data: list[DataSource] = []
    # fixed seeds only in test/benchmark mode (privacy invariant 6; enforced by dpicl.privacy.rng)
    seed: int | None = None

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file and the offending keys."""


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A path, or the name of a bundled config (`demo` → dpicl/configs/demo.yaml)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    bundled = CONFIG_DIR / f"{name_or_path}.yaml"
    if bundled.is_file():
        return bundled
    names = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))
    raise ConfigError(f"no config file {str(name_or_path)!r} (bundled configs: {', '.join(names)})")


def load_config(name_or_path: str | Path) -> Config:
    path = resolve_config_path(name_or_path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        for source in raw.get("data") or []:
            if isinstance(source, dict) and "path" in source:
                source["path"] = str((path.parent / source["path"]).resolve())
        return Config.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors())
        raise ConfigError(f"{path}: {problems}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err})") from None
