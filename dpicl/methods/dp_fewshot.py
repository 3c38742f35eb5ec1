"""DP few-shot generation (paper 002): synthetic demonstrations token by token from noisy means of the splits'
next-token distributions, written as a public dataset by `synthesize_demos` for one ledger charge."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dpicl.decoding import dp_fewshot_text
from dpicl.methods import register
from dpicl.methods.base import Method, Plan, TokenSettings, check_synthesis_inputs
from dpicl.privacy.mechanisms import dp_fewshot
from dpicl.privacy.sampling import assign_teachers
from dpicl.prompts import render_prompt, zero_shot_prompt


class DPFewShotSettings(TokenSettings):
    """DP few-shot generation (paper 002), for the `synthesize_demos` flow: `demos` synthetic demonstrations
    (per label for classification), each token from a fresh Poisson sample of the private data split into
    `splits` groups of ≤ `shots` demonstrations, the mean of their next-token distributions over the public
    top-k with Gaussian noise (PRV-calibrated over all tokens) or exponential noise (report-noisy-max)."""

    name: Literal["dp-fewshot"] = "dp-fewshot"
    planned_queries: int = Field(100, ge=1)
    """Not used by dp-fewshot: `demos` sets how many texts the budget is planned for."""
    splits: int = Field(10, ge=1)
    """Groups the private sample of each token step is split into, one prompt each; the noise is added to the mean
    of their next-token distributions."""
    shots: int = Field(2, ge=1)
    """Private demonstrations per split prompt (at most)."""
    mechanism: Literal["gaussian", "exponential"] = "gaussian"
    """Noise per token: `gaussian` (Gaussian noise on the mean distribution, calibrated over all tokens) or
    `exponential` (report-noisy-max)."""
    demos: int = Field(4, ge=1)
    """Synthetic demonstrations to write (per label for classification), of at most `generation.max_new_tokens`
    tokens each: the budget is planned for demos × max_new_tokens token steps."""
    sampling_rate: float | None = Field(None, gt=0, le=1)
    """Poisson sampling rate per record and token step; None: splits·shots / the size of the smallest label pool
    (the whole private dataset for open-form tasks)."""


class DPFewShotPlan(Plan):
    """`queries` demonstrations of at most `max_new_tokens` tokens each from one pool: `tokens` token steps."""

    mechanism: Literal["gaussian", "exponential"]
    splits: int
    sampling_rate: float
    tokens: int
    max_new_tokens: int
    sensitivity: float
    epsilon_certified: float
    # gaussian
    noise_multiplier: float | None = None
    sigma: float | None = None
    noise_multiplier_uncertified: float | None = None
    # exponential (report-noisy-max)
    epsilon0: float | None = None
    amplified_epsilon: float | None = None
    noise_scale: float | None = None

    def event(self, sampling_rate=None, tokens=None):
        """All token steps of one pool as one composed event (at the rate and token count given, if any)."""
        used = {"sampling_rate": sampling_rate} if sampling_rate is not None else {}
        return dp_fewshot.cost({**self.numbers(), **used, **({"tokens": tokens} if tokens is not None else {})})

    def describe(self) -> str:
        if self.mechanism == "gaussian":
            noise = (f"Gaussian noise multiplier {self.noise_multiplier:.5f} (σ = {self.sigma:.5f} on the mean of "
                     f"{self.splits} splits)")
        else:
            noise = f"report-noisy-max ε0 = {self.epsilon0:.5f} per token (amplified {self.amplified_epsilon:.5f})"
        return (f"  {self.tokens} tokens from one pool (one ledger charge): {noise}; the accountant certifies "
                f"ε = {self.epsilon_certified:.5f}")


@register
class DPFewShot(Method):
    name = "dp-fewshot"
    kind = "synthesis"
    summary = ("DP few-shot generation: synthetic demonstrations token by token from noisy means of the splits' "
               "next-token distributions; --queries is the number of demonstrations")
    paper = "002: Privacy-Preserving In-Context Learning with Differentially Private Few-Shot Generation"
    Settings = DPFewShotSettings
    Plan = DPFewShotPlan
    task_types = ("summarization", "generation", "classification")
    options = ("max_new_tokens", "splits", "mechanism")
    required = ("max_new_tokens",)
    unit = "syntheses"
    synthesis_task_types = task_types

    def check_config(self, cfg):
        super().check_config(cfg)
        if cfg.synthetic is None:
            raise ValueError("method 'dp-fewshot' writes synthetic demonstrations: set synthetic.name to the name of "
                             "the public dataset to create")
        check_synthesis_inputs(cfg)

    def calibrate(self, sampling_rate, queries, epsilon, delta, *, max_new_tokens, splits=10, mechanism="gaussian"):
        result = dp_fewshot.plan(sampling_rate, queries * max_new_tokens, epsilon, delta, splits=splits,
                                 mechanism=mechanism)
        return DPFewShotPlan(**{**result, "queries": queries, "max_new_tokens": max_new_tokens})

    def sampling_rate(self, settings, facts):
        # each label is generated from its own pool: the smallest pool sets the charged rate
        return settings.sampling_rate or dp_fewshot.pool_sampling_rate(
            facts.label_pool_sizes or (facts.dataset_size,), settings.splits, settings.shots)

    def planned_queries(self, settings):
        return settings.demos

    def plan_options(self, settings, facts):
        return {"max_new_tokens": facts.max_new_tokens, "splits": settings.splits, "mechanism": settings.mechanism}

    # ---- synthesis ----------------------------------------------------------------------------------------------

    def synthesis_plan(self, cfg, pools, epsilon, delta):
        facts_sizes = tuple(len(p) for p in pools.values())
        m = cfg.method
        rate = m.sampling_rate or dp_fewshot.pool_sampling_rate(facts_sizes, m.splits, m.shots)
        plan = self.calibrate(rate, m.demos, epsilon, delta, max_new_tokens=cfg.generation.max_new_tokens,
                              splits=m.splits, mechanism=m.mechanism)
        return plan, plan.event()

    def synthesis_used(self, cfg, plan, pool, texts):
        """Every pool is sampled at the charged rate; `texts` texts of at most max_new_tokens tokens from it."""
        return plan.event(tokens=texts * cfg.generation.max_new_tokens)

    def synthesize_text(self, cfg, backend, plan, pool, teacher_key, label, public_input, rng):
        m, gen, syn = cfg.method, cfg.generation, cfg.synthetic
        ids = [r.record_id for r in pool]
        by_id = {r.record_id: r for r in pool}
        if label is None:  # open-form: the demonstration's output for a public input
            public_prompt = zero_shot_prompt(cfg.task, public_input)

            def render(split):
                return render_prompt(cfg.task, [(by_id[r].input, by_id[r].output) for r in split], public_input)
        else:  # classification: an input for the label, demonstrations in the label template
            prefix = syn.label_template.format(output=label, input="").rstrip()
            head = [syn.instruction] if syn.instruction else []
            public_prompt = cfg.task.separator.join([*head, prefix])

            def render(split):
                shown = [syn.label_template.format(output=label, input=by_id[r].input) for r in split]
                return cfg.task.separator.join([*head, *shown, prefix])

        def private_prompts() -> list[str]:  # a fresh Poisson sample at the charged rate for every token
            return [render(split) for split in assign_teachers(ids, teacher_key, plan.splits, m.shots,
                                                               plan.sampling_rate, rng)]

        text = dp_fewshot_text(backend, public_prompt, private_prompts, mechanism=plan.mechanism, top_k=m.top_k,
                               noise_multiplier=plan.noise_multiplier, epsilon0=plan.epsilon0,
                               max_new_tokens=gen.max_new_tokens, stop=gen.stop, rng=rng).text
        return (public_input, text) if label is None else (text, label)
