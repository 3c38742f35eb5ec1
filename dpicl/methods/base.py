"""What a method is (docs/ARCHITECTURE.md, "Adding a method"): its settings, the plan that prices it, and the steps
that run it. The ledger charges ``plan.event()`` and every step draws its noise from the same Plan object, so what is
charged and what is used cannot come from different places (privacy invariant 9, docs/PRIVACY.md).

Four kinds of method run through the pipeline:

* ``ensemble``: teachers answer from subsamples; the method aggregates their outputs (paying first) and releases
  an answer from the DP aggregate and public data (esa, rnm, ksa-jem, ksa-ptr, sga, ksa-public);
* ``token``: private decoding, one mechanism per token, paid per answer before the first token (dps-mozo,
  adapmixed);
* ``synthesis``: writes DP synthetic demonstrations for one charge, answers nothing (dp-fewshot);
* ``public``: answers from public data and earlier DP releases only, for free (synthetic-icl).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dpicl.privacy.accounting.events import PrivacyEvent
from dpicl.privacy.sampling import default_sampling_rate

if TYPE_CHECKING:
    from dpicl.config import Config

Kind = Literal["ensemble", "token", "synthesis", "public"]


class MethodSettings(BaseModel):
    """A method's section of a run config (`method:`); one subclass per method, validated here and nowhere else."""

    # every setting carries an attribute docstring (its description: `dpicl methods NAME` prints it)
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    name: str


class EnsembleSettings(MethodSettings):
    """What every ensemble method shares: N teachers × s shots drawn per query by Poisson sampling."""

    teachers: int = Field(10, ge=1)
    """Teacher prompts per query, each over its own disjoint part of a fresh sample of the private data."""
    shots: int = Field(4, ge=1)
    """Private demonstrations per teacher prompt."""
    sampling_rate: float | None = Field(None, gt=0, le=1)
    """Poisson sampling rate per record and query (what each release is charged for); None: teachers·shots /
    |private dataset| (the papers' q)."""
    # random or nearest, what a teacher shows is a function of its own sampled records and the query: one record
    # still reaches one teacher, at no extra cost (docs/PRIVACY.md); "nearest" pays only through the higher rate
    private_demonstrations: Literal["random", "nearest"] = "random"
    """Which of its sampled records a teacher shows: `random`, `shots` of them in an order drawn per query (the
    papers), or `nearest`, the `shots` most similar to the query by embedding (`embedding.model`), the nearest last.
    `nearest` needs a `sampling_rate` above the default, so that each teacher samples several records to choose
    from."""
    planned_queries: int = Field(100, ge=1)
    """Number of queries the budget is planned to pay for: the per-query noise is calibrated so that this many
    releases compose to the budget's (ε, δ)."""


class PublicEnsembleSettings(EnsembleSettings):
    """An ensemble method that also prompts public teachers (`teachers` × `shots` public demonstrations per query)."""

    # public data and the query only: no privacy cost either way (public_fewshot too)
    public_demonstrations: Literal["random", "nearest"] = "random"
    """Which public records the public teachers show: `random`, a draw fixed per query (paper 004), or `nearest`,
    the query's most similar ones by embedding (`embedding.model`). No privacy cost either way."""
    public_shots: int | None = Field(None, ge=1)
    """Demonstrations per public teacher; None: `shots` (public prompts run batched: more shots cost less there)."""
    # the few-shot answer joins the public teachers' outputs, so SGA can release it when the private answers lie
    # nearest it
    public_fewshot: int | None = Field(None, ge=1)
    """One more public prompt per query showing its `public_fewshot` most similar public records (the nearest last),
    i.e. the free public few-shot prompt, whose answer joins the public teachers' outputs; None: no such prompt.
    Needs `public_demonstrations: nearest`; no privacy cost."""

    @model_validator(mode="after")
    def _fewshot_needs_nearest(self):
        if self.public_fewshot is not None and self.public_demonstrations != "nearest":
            raise ValueError("public_fewshot shows the query's most similar public records: set "
                             "public_demonstrations: nearest with it")
        return self

    @property
    def public_shot_count(self) -> int:
        return self.public_shots or self.shots

    @property
    def public_ranked_count(self) -> int:
        """How many of the query's most similar public records the public prompts show."""
        return max(self.teachers * self.public_shot_count, self.public_fewshot or 0)


class TokenSettings(MethodSettings):
    """Token-level private decoding: one mechanism per generated token, at most `generation.max_new_tokens` tokens
    per answer; the per-answer cost is reserved before decoding starts."""

    top_k: int = Field(100, ge=1)
    """Size of the public vocabulary K: the top-k tokens of the public (zero-shot) next-token distribution."""
    planned_queries: int = Field(100, ge=1)
    """Number of answers the budget is planned to pay for: the per-token mechanism is calibrated so that this many
    answers of at most `generation.max_new_tokens` tokens compose to the budget's (ε, δ)."""


class Plan(BaseModel):
    """A method's data-independent parameters for (ε, δ) over `queries` releases: typed, frozen, and the only
    source of what a release is charged and of the noise it draws."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str
    epsilon: float
    delta: float
    queries: int

    @abstractmethod  # pydantic's model metaclass is an ABCMeta
    def event(self, sampling_rate: float | None = None) -> PrivacyEvent:
        """The privacy event one release costs (at ``sampling_rate`` instead of the planned rate, where given)."""

    def describe(self) -> str:
        """Its parameters in one line of `dpicl plan` output (rich markup)."""
        return ""

    def numbers(self) -> dict[str, Any]:
        """What a run stores (JSON numbers and strings)."""
        return self.model_dump(mode="json")

    @classmethod
    def restore(cls, stored: Mapping[str, Any]):
        """The plan a run stored; keys an older version stored and this one no longer has are left out."""
        return cls.model_validate({k: v for k, v in stored.items() if k in cls.model_fields})


@dataclass(frozen=True)
class Facts:
    """The public facts a plan may depend on: the private dataset's size (and per-label pool sizes), and the most
    tokens one answer may decode."""

    dataset_size: int
    max_new_tokens: int = 40
    label_pool_sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class Budget:
    epsilon: float
    delta: float


@dataclass(frozen=True)
class PublicTexts:
    """Public texts an ensemble method embeds beside the teacher outputs: the stage key of the texts, and the stage
    keys (and artifact stage) of their embeddings."""

    source: str
    embeddings: str
    texts: str
    stage: str


class Method(ABC):
    """One registered method. Subclasses set the class attributes and implement the steps of their kind."""

    name: ClassVar[str]
    summary: ClassVar[str]
    paper: ClassVar[str]
    kind: ClassVar[Kind]
    Settings: ClassVar[type[MethodSettings]]
    Plan: ClassVar[type[Plan]]
    task_types: ClassVar[tuple[str, ...]] = ("summarization", "generation")
    needs_public: ClassVar[bool] = False
    # whether its charge assumes a subsample of the private data (its sampling rate then follows the dataset size)
    subsamples: ClassVar[bool] = True
    # keyword options of `calibrate` beyond (q, T, ε, δ) (`dpicl plan` flags); those without a default
    options: ClassVar[tuple[str, ...]] = ()
    required: ClassVar[tuple[str, ...]] = ()
    # the plan's parameters stored with each release
    plan_details: ClassVar[tuple[str, ...]] = ()
    # what a `dpicl plan` budget line counts
    unit: ClassVar[str] = "queries"

    # ---- planning (data-independent) ---------------------------------------------------------------------------

    @abstractmethod
    def calibrate(self, sampling_rate: float, queries: int, epsilon: float, delta: float, **options: Any) -> Plan:
        """The plan for a sampling rate, a number of releases, a target (ε, δ) and the method's options."""

    def sampling_rate(self, settings: MethodSettings, facts: Facts) -> float:
        return 1.0

    def plan_options(self, settings: MethodSettings, facts: Facts) -> dict[str, Any]:
        """The settings (and public facts) that shape the plan beyond (q, T, ε, δ)."""
        return {}

    def planned_queries(self, settings: MethodSettings) -> int:
        return getattr(settings, "planned_queries", 1)

    def plan(self, settings: MethodSettings, facts: Facts, budget: Budget) -> Plan:
        """What a run stores when it opens, and what every step of the run reads."""
        return self.calibrate(self.sampling_rate(settings, facts), self.planned_queries(settings), budget.epsilon,
                              budget.delta, **self.plan_options(settings, facts))

    def warnings(self, settings: MethodSettings, plan: Plan) -> list[str]:
        """Why a valid plan would buy (almost) nothing with these settings: shown by `dpicl plan`, the pre-flight of
        `dpicl answer` and the run's log, before any budget is spent."""
        return []

    def check_config(self, cfg: Config) -> None:
        """Refuse a config this method cannot run (ValueError naming the keys to change)."""
        if cfg.task.type not in self.task_types:
            raise ValueError(f"method {self.name!r} does not answer {cfg.task.type} tasks (it answers "
                             f"{', '.join(self.task_types)} tasks)")
        if self.needs_public and not cfg.public_dataset:
            raise ValueError(f"method {self.name!r} needs a public dataset: set public_dataset to the name of a "
                             "dataset ingested with kind public")

    def release_details(self, settings: MethodSettings, plan: Plan) -> dict[str, Any]:
        """Public numbers kept with each release: the plan's parameters and the settings that shaped it."""
        return {k: getattr(plan, k) for k in self.plan_details}


def check_synthesis_inputs(cfg: Config) -> None:
    """Synthetic demonstrations of an open-form task answer inputs of the public dataset."""
    if cfg.synthetic is not None and cfg.task.type != "classification" and not cfg.public_dataset:
        raise ValueError("synthesizing demonstrations for an open-form task needs public inputs: set public_dataset")


class EnsembleMethod(Method):
    """Teachers → DP aggregate (paid first) → release from the aggregate and public data."""

    kind: ClassVar[Kind] = "ensemble"
    # the stage keys `aggregate` reads, and those `release` reads besides the DP aggregate (all public)
    inputs: ClassVar[tuple[str, ...]]
    release_needs: ClassVar[tuple[str, ...]] = ()
    # settings read by the release step only (changing them is post-processing: `rerun --from release`)
    release_only: ClassVar[frozenset[str]] = frozenset()
    # public texts embedded beside the teacher outputs (esa, sga); None: no embed stage
    public_texts: ClassVar[PublicTexts | None] = None
    # sampled zero-shot candidates inferred beside the teachers (ESA's; `candidate_params` says how)
    samples_candidates: ClassVar[bool] = False

    def sampling_rate(self, settings: EnsembleSettings, facts: Facts) -> float:
        return settings.sampling_rate or default_sampling_rate(settings.teachers, settings.shots, facts.dataset_size)

    def warnings(self, settings: EnsembleSettings, plan: Plan) -> list[str]:
        found = []
        if settings.sampling_rate is None and plan.sampling_rate >= 1:
            found.append(f"teachers × shots ({settings.teachers * settings.shots}) is at least the private "
                         "dataset's size: the default sampling rate teachers·shots/|D| is capped at 1, so every "
                         "record is used for every query (no amplification by subsampling) and the teachers show "
                         "fewer than `shots` records each; use fewer teachers or shots, or more records")
        if settings.private_demonstrations == "nearest" and settings.sampling_rate is None:
            found.append(f"private_demonstrations: nearest at the default sampling rate ({plan.sampling_rate:.4g}: "
                         "teachers·shots/|D|) gives each teacher about `shots` sampled records, so it has almost "
                         "none to choose from; set method.sampling_rate to about 3 times that (each release is "
                         "charged for the higher rate: `dpicl plan` shows the noise)")
        return found

    @abstractmethod
    def aggregate(self, cfg: Config, plan: Plan, rate: float, inputs: Mapping[str, Any], rng, paid) -> Any:
        """The DP aggregate of one query: calls ``paid(event)`` with the event of exactly the parameters it passes
        to its mechanism (which raises unless the ledger reserved that event), and only then draws."""

    @abstractmethod
    def release(self, cfg: Config, aggregates: Mapping[str, Any], public: Mapping[str, Mapping[str, Any]],
                queries: Mapping[str, str], backend) -> Iterator[tuple[str, str, dict]]:
        """(query id, answer, public details) per DP aggregate, from public data only (post-processing)."""

    def release_details(self, settings: EnsembleSettings, plan: Plan) -> dict[str, Any]:
        return {"teachers": settings.teachers, **super().release_details(settings, plan)}

    # ---- evaluation (`dpicl evaluate`, benchmarks): the same aggregate and release, plus what only a sweep needs --

    def nonprivate(self, cfg: Config, inputs: Mapping[str, Any], rng) -> Any:
        """The aggregate without noise (the papers' "ε = ∞" rows), in the shape `release` takes. Never released."""
        raise ValueError(f"method {self.name!r} has no noise-free aggregate: a sweep cannot give its ε = ∞ row")

    def evaluation_variants(self, cfg: Config) -> dict[str, Config]:
        """Row suffix → config of each release a sweep scores from one aggregate ("" is the method's own)."""
        return {"": cfg}

    def pass_rate(self, aggregates: list) -> float | None:
        """The share of aggregates that passed a data-dependent test, for methods that have one (else None)."""
        return None


class TokenMethod(Method):
    """Private decoding, paid per answer before the first token."""

    kind: ClassVar[Kind] = "token"

    @abstractmethod
    def answer(self, cfg: Config, backend, plan: Plan, records: list, teacher_key: bytes, query: str, paid, rng):
        """Decode one answer (a `dpicl.decoding.Decoded`); ``paid(event)`` before any draw."""


class GaussianPlan(Plan):
    """A Poisson-subsampled Gaussian mechanism calibrated by the accountant (`plan_gaussian`)."""

    noise_multiplier: float
    sensitivity: float
    sigma: float
    sampling_rate: float
    # the searched value, before certifying it against the accountant's upper bound
    noise_multiplier_uncertified: float

    def describe(self) -> str:
        return (f"  noise multiplier {self.noise_multiplier:.5f} per unit sensitivity; sensitivity "
                f"{self.sensitivity:g}; noise std σ = {self.sigma:.5f}")


def aggregate_as_planned(cfg: Config, plan: Plan, inputs: Mapping[str, Any], rng) -> Any:
    """One DP aggregate outside the ledger (evaluation and benchmarks, which release nothing), checked against the
    event of its own plan as the pipeline checks it against the reservation."""
    from dpicl import methods
    from dpicl.privacy.accounting.guard import require_paid

    planned = plan.event()
    return methods.get(cfg.method.name).aggregate(cfg, plan, plan.sampling_rate, inputs, rng,
                                                  lambda used: require_paid(planned, used))
