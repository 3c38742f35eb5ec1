"""Run configuration: one YAML file per method × dataset, validated by pydantic.

Configuration enters once, at the flow's entry point; tasks receive the path (never private text).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import typing
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from dpicl import methods
from dpicl.data_paths import data_path
from dpicl.methods.base import MethodSettings

CONFIG_DIR = Path(__file__).parent / "configs"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskConfig(_Strict):
    """How demonstrations and queries become prompts (plain completion format, docs/STACK.md).

    A classification task names its label set; teachers then predict the label whose first token is the most
    likely next token after the prompt (paper 001's logit bias, done locally).
    """

    type: Literal["summarization", "generation", "classification"] = "summarization"
    instruction: str = ""
    demo_template: str = "Input:\n{input}\nOutput: {output}"
    query_template: str = "Input:\n{input}\nOutput:"
    separator: str = "\n\n"
    labels: list[str] = []
    # what precedes a label after the query prompt ("Sentiment:" + " positive")
    label_prefix: str = " "
    # classification: contextual calibration of every vote (Zhao et al. 2021): each prompt's label distribution is
    # divided by the mean one its own demonstrations give these content-free inputs (dpicl/inference/teachers.py);
    # one extra forward pass per prompt and input
    calibrate: bool = False
    content_free_inputs: list[str] = ["N/A", "", "[MASK]"]

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

    @model_validator(mode="after")
    def _labels(self) -> TaskConfig:
        if self.type == "classification" and len(set(self.labels)) < 2:
            raise ValueError("a classification task needs at least two distinct labels (task.labels)")
        if self.type != "classification" and self.labels:
            raise ValueError("task.labels is only used by classification tasks")
        if self.calibrate and (self.type != "classification" or not self.content_free_inputs):
            raise ValueError("task.calibrate needs a classification task and at least one content_free_inputs")
        return self


class ModelConfig(_Strict):
    """The LLM and the backend that runs it (docs/ops/backends.md).

    `hf` (transformers, in process) and `vllm` (in-process vLLM engine; extra `vllm`) load `llm`: an embedded
    model name or a local model directory. `openai` (extra `openai`) sends `llm` as the model name to the
    OpenAI-compatible server at `base_url`; its API key comes from the environment variable `api_key_env`,
    never from config. `device`, `dtype`, `threads` and `batch_size` apply to `hf` (and `vllm`: all but
    `batch_size`, as it schedules its own batches); a server decides them for itself.

    `batch_invariant` (default true; privacy invariant 10, docs/PRIVACY.md): each teacher's output is
    a function of its own prompt alone. `hf` then runs every prompt in its own forward passes and `batch_size`
    is unused. `false` opts out: `hf` batches `batch_size` prompts of similar length (faster), and the result of
    one prompt may differ, in its last bits or a greedy token, with the other prompts of the call, so one record
    can change more than one teacher's output and the per-record sensitivity the noise is calibrated to is not
    guaranteed. `vllm` (continuous batching, prefix caching) and `openai` (a server batches requests as it
    likes) cannot guarantee it: they are refused unless the config says `batch_invariant: false`.
    """

    llm: str = "smollm2"
    backend: Literal["hf", "vllm", "openai"] = "hf"
    device: str = "auto"
    # auto: bfloat16 on a GPU and on a CPU with BF16 instructions, float32 on other CPUs (where bfloat16 is several
    # times slower)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    threads: int | None = Field(None, ge=1)
    batch_size: int = Field(16, ge=1)
    # false: faster batched inference, teacher outputs may depend on the batch (privacy caveat, docs/PRIVACY.md);
    # required for vllm and openai, which cannot be batch invariant
    batch_invariant: bool = True
    # hf: greedy prompts run at once, each alone in its forward passes on its own thread (same outputs; for idle
    # cores: the demo sets 2)
    parallel_prompts: int = Field(1, ge=1)
    # hf: greedy private prompts decode in groups of this many (each prefilled alone, consecutive prompts in input
    # order, attention row by row: rows stay apart to the bit; docs/PRIVACY.md); 1: each prompt alone
    decode_rows: int = Field(1, ge=1)
    # vllm: the engine's context length (default: the model's)
    max_model_len: int | None = Field(None, ge=1)
    # vllm: torch.compile the model (default: on CUDA; off on CPU, where a start then takes about 1.5 minutes more
    # and generation gets about 1.2x faster: for long backlogs)
    compile: bool | None = None
    # openai: the server's base URL (up to /v1), e.g. a `vllm serve` container
    base_url: str = "http://127.0.0.1:8000/v1"
    # openai: the environment variable holding the API key (unset: no Authorization header)
    api_key_env: str = "DPICL_OPENAI_API_KEY"
    # openai: seconds per request, concurrent requests, retries of transient failures (429, 5xx, network)
    timeout: float = Field(120.0, gt=0)
    max_concurrency: int = Field(8, ge=1)
    max_retries: int = Field(4, ge=0)
    # openai: a local tokenizer (model directory or embedded name) for label_logprobs / next_token_logprobs;
    # default: llm
    tokenizer: str | None = None

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return v.rstrip("/")

    @model_validator(mode="after")
    def _batch_invariance_possible(self) -> ModelConfig:
        if self.backend != "hf" and self.batch_invariant:
            from dpicl.inference.base import batch_dependence_message

            raise ValueError(batch_dependence_message(self.backend))
        if self.compile is not None and self.backend != "vllm":
            raise ValueError(f"model.compile applies to the vllm backend only (backend is {self.backend!r}): "
                             "remove it")
        return self

    @model_serializer(mode="wrap")
    def _without_unset_backend_options(self, handler):
        # Artifact keys and run hashes include this dump: leaving out backend options at their defaults keeps
        # the keys of configs written before these options existed (their cached artifacts stay valid).
        data = handler(self)
        for name in _BACKEND_OPTIONS:
            if name in data and data[name] == ModelConfig.model_fields[name].default:
                del data[name]
        return data


# Left out of the dump at their defaults. batch_invariant: an opt-out changes the outputs, so it is in the keys
# when false; the default keeps the keys of configs written before the option existed.
_BACKEND_OPTIONS = ("batch_invariant", "parallel_prompts", "decode_rows", "max_model_len", "compile", "base_url",
                    "api_key_env", "timeout", "max_concurrency", "max_retries", "tokenizer")


class GenerationConfig(_Strict):
    max_new_tokens: int = Field(40, ge=1)
    temperature: float = Field(0.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    stop: list[str] = ["\n"]
    # false: an answer does not end before its first visible character (`hf` and `vllm` keep the end-of-sequence
    # token from ending it until then; `openai` cannot): instruction-tuned models often end at once after an
    # "Answer:" cue, an empty answer. True: answers end wherever the model ends them (docs/ops/backends.md)
    empty_answers: bool = False


class EmbeddingConfig(_Strict):
    model: str = "all-MiniLM-L6-v2"
    batch_size: int = Field(64, ge=1)


class Fields(_Strict):
    """Which column of the file holds each field (DuckDB reads JSON, JSONL, CSV and Parquet)."""

    id: str | None = None
    input: str = "input"
    output: str | None = "output"
    reference: str | None = None


class Subset(_Strict):
    """A deterministic part of a file: the rows whose keyed hash (of the id field, else the row number) falls in
    `keep` of `buckets` buckets. Sources over the same file with the same buckets and salt and disjoint `keep`
    are disjoint, e.g. a 2:1 private/public split: keep [0, 1] and keep [2] of 3 buckets."""

    buckets: int = Field(ge=2)
    keep: list[int] = Field(min_length=1)
    salt: str = "dpicl-subset"

    @model_validator(mode="after")
    def _keep_in_range(self) -> Subset:
        bad = [b for b in self.keep if not 0 <= b < self.buckets]
        if bad or len(set(self.keep)) != len(self.keep):
            raise ValueError(f"subset.keep must list distinct buckets in 0..{self.buckets - 1} (got {self.keep})")
        return self


class DataSource(_Strict):
    """A file to ingest: a private or public dataset, or a backlog of queries."""

    name: str
    path: str  # relative paths are relative to the config file
    kind: Literal["private", "public", "queries"]
    task: str = "summarization"
    fields: Fields = Fields()
    # how to read the file: by default from its extension (.json .jsonl .csv .tsv .parquet); "lines" reads
    # one record per line and splits it with `pattern`, a regular expression whose named groups are the columns
    format: Literal["json", "jsonl", "csv", "tsv", "parquet", "lines"] | None = None
    pattern: str | None = None
    # CSV/TSV without a header row: the columns are named column1, column2, …
    header: bool = True
    # raw label value in the file -> label name (applied to the output and reference fields), e.g. {"0": negative}
    labels: dict[str, str] | None = None
    # leave out rows whose input (or a dataset's output) is missing or empty instead of refusing the file
    skip_empty: bool = False
    # ingest only a deterministic part of the file (see Subset)
    subset: Subset | None = None
    # a dataset whose content repeats registered private data (or, private, public data) is refused; true declares
    # it is about a different population, and is recorded with the dataset (dpicl/storage/ingest.py)
    distinct_from_existing: bool = False


class SyntheticConfig(_Strict):
    """What `synthesize_demos` writes: the dataset `name` (kind public) of DP synthetic demonstrations. Open-form
    tasks generate the output of `demos` inputs of the public dataset; classification tasks generate an input per
    label with `label_template` (the label as {output}, the generated text as {input}: the demonstration format
    with the roles swapped, e.g. 'Type: {output}\nText: {input}'), one pool of private records per label."""

    name: str
    label_template: str = "Label: {output}\nText: {input}"
    # the instruction of the generation prompts (classification; open-form tasks use task.instruction)
    instruction: str = ""
    # the ε to calibrate the synthesis for (default: the whole budget); one ledger charge pays for it
    epsilon: float | None = Field(None, gt=0)

    @field_validator("label_template")
    @classmethod
    def _label_fields(cls, v: str) -> str:
        if not v.rstrip().endswith("{input}") or "{output}" not in v:
            raise ValueError("label_template must contain {output} and end with {input} (the generated text)")
        return v


class Config(_Strict):
    name: str
    private_dataset: str
    backlog: str
    # demonstrations anyone may see: the public ensemble of sga and ksa-public (paper 004)
    public_dataset: str | None = None
    task: TaskConfig = TaskConfig()
    model: ModelConfig = ModelConfig()
    generation: GenerationConfig = GenerationConfig()
    embedding: EmbeddingConfig = EmbeddingConfig()
    # the method and its settings (dpicl/methods/: each method validates its own section)
    method: SerializeAsAny[MethodSettings] = Field(default_factory=lambda: methods.get(methods.DEFAULT).Settings())
    # queries handled per stage batch: one backend call covers all prompts of this many queries
    batch_queries: int = Field(8, ge=1)
    # synthesize_demos: where the DP synthetic demonstrations go (a new public dataset) and, for open-form
    # tasks, the public dataset whose inputs they answer (default: public_dataset)
    synthetic: SyntheticConfig | None = None
    # files `dpicl ingest CONFIG` registers (optional)
    data: list[DataSource] = []

    @model_validator(mode="before")
    @classmethod
    def _no_seed(cls, raw):
        # answer, synthesize, serve and rerun draw noise from a cryptographically seeded generator only (privacy
        # invariant 6, docs/PRIVACY.md), whatever the environment: a fixed seed makes the noise predictable
        if isinstance(raw, dict) and raw.get("seed") is not None:
            raise ValueError("`seed` is not accepted in a run config: answering and synthesizing always draw noise "
                             "from a cryptographically seeded generator. Remove it (reproducible benchmark runs: "
                             "`dpicl evaluate --seed N`, `dpicl audit --seed N`)")
        if isinstance(raw, dict) and "seed" in raw:  # `seed: null`, as runs before this check stored it
            raw = {k: v for k, v in raw.items() if k != "seed"}
        return raw

    @field_validator("method", mode="before")
    @classmethod
    def _method_settings(cls, raw):
        """The section is validated by the settings model of the method it names (the registry's)."""
        if isinstance(raw, MethodSettings):
            return raw
        if not isinstance(raw, dict):
            raise ValueError("method must be a mapping with a name (e.g. method: {name: esa})")
        if "name" not in raw:
            raise ValueError(f"method needs a name; one of: {', '.join(methods.names())}")
        return methods.get(raw["name"]).Settings.model_validate(raw)

    @model_validator(mode="after")
    def _method_fits_config(self) -> Config:
        methods.get(self.method.name).check_config(self)
        return self

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
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
        # the file's shape first: a list, a scalar or nothing at all is no config (and would crash below)
        if raw is None:
            raise ConfigError(f"{path}: the config is empty; it must be a mapping of settings (name, method, ...)")
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the config is {_yaml_kind(raw)}, not a mapping of settings (name, "
                              "method, ...)")
        if not isinstance(raw.get("data") or [], list):
            raise ConfigError(f"{path}: data must be a list of files to ingest")
        for source in raw.get("data") or []:
            if isinstance(source, dict) and isinstance(source.get("path"), str):
                source["path"] = data_path(source["path"], path.parent)
        return Config.model_validate(raw)
    except ValidationError as err:
        problems = "; ".join(_problem(e, raw) for e in err.errors())
        raise ConfigError(f"{path}: {problems}") from None
    except yaml.YAMLError as err:
        # the problem and its position only: the library's message quotes the offending lines
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where} ({getattr(err, 'problem', None) or 'cannot parse'})"
                          ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: is not UTF-8 text; save the config as UTF-8") from None
    except (OSError, RecursionError) as err:  # unreadable, or nested too deep to parse
        raise ConfigError(f"{path}: cannot be read ({type(err).__name__})") from None


def _problem(error: dict, raw: object) -> str:
    """One validation error as `where: what` (no `where` for the config as a whole, no pydantic prefix)."""
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = _unknown_key(error["loc"], raw)
    where = ".".join(map(str, error["loc"]))
    return f"{where}: {message}" if where else message


def _unknown_key(loc: tuple, raw: object) -> str:
    """A key no section has: the closest valid one of its section, else the section's keys."""
    section = _section_model(loc[:-1], raw)
    keys = [k for k in section.model_fields if not (k == "name" and loc[0] == "method")] if section else []
    close = difflib.get_close_matches(str(loc[-1]), keys, n=1, cutoff=0.6)
    if loc[0] == "method" and isinstance(raw, dict) and isinstance(raw.get("method"), dict):
        where = f"`dpicl methods {raw['method'].get('name')}` explains each"
    else:
        where = f"the keys here: {', '.join(keys)}" if keys else "see dpicl/configs/demo.yaml"
    return f"not a setting here ({f'did you mean `{close[0]}`? ' if close else 'a misspelling? '}{where})"


def _section_model(path: tuple, raw: object) -> type[BaseModel] | None:
    """The model that validates the config section at `path` (the method's settings model under `method`)."""
    if path[:1] == ("method",):
        section = raw.get("method") if isinstance(raw, dict) else None
        name = section.get("name") if isinstance(section, dict) else None
        return methods.get(name).Settings if len(path) == 1 and name in methods.names() else None
    model: type[BaseModel] = Config
    for part in path:
        if isinstance(part, int):  # an item of a list section (`data`): its model is the one chosen already
            continue
        field = model.model_fields.get(str(part))
        candidates = typing.get_args(field.annotation) or (field.annotation,) if field is not None else ()
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


def _yaml_kind(value: object) -> str:
    return "a list" if isinstance(value, list) else f"a single value ({type(value).__name__})"
