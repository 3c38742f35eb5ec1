"""DPS-MOZO (paper 000): per token, one-shot prompts mixed with the zero-shot prompt inside a Rényi ball, sampled
from their product; also DPS-MOZO+Off, which writes DP synthetic demonstrations (`synthesize_demos`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dpicl.decoding import dps_mozo_answer
from dpicl.methods import register
from dpicl.methods.base import Plan, TokenMethod, TokenSettings, check_synthesis_inputs
from dpicl.privacy.accounting.events import ComposedEvent
from dpicl.privacy.mechanisms import dps_mozo
from dpicl.prompts import render_prompt, zero_shot_prompt


class DPSMozoSettings(TokenSettings):
    """DPS-MOZO (paper 000): per token, `shots` one-shot prompts with demonstrations drawn without replacement,
    each mixed in logit space with the zero-shot prompt inside a Rényi ball at order 2α; the next token is sampled
    from their normalised product. β (a token costs 4βα at order α) from the budget (`alpha`: the Rényi order,
    default chosen as in 000) unless given. For replacement neighbours. Proven for `shots: 1` only (the default;
    the paper used 4): more shots rest on the paper's unproven claim and are refused unless
    `accept_unproven_guarantee: true`, whose ledger entries are labelled so (docs/PRIVACY.md)."""

    name: Literal["dps-mozo"] = "dps-mozo"
    shots: int = Field(1, ge=1)
    """One-shot prompts per token, their demonstrations drawn without replacement from the private data. Proven for
    1 only (paper 000 used 4): more need `accept_unproven_guarantee: true`."""
    alpha: int | None = Field(None, ge=2)
    """Rényi order α at which a token's cost (4βα) is charged; None: the smallest order whose fixed-order budget is
    at least ε/2 (as in paper 000)."""
    beta: float | None = Field(None, gt=0)
    """Rényi-ball parameter β of the mixing (a token costs 4βα at order α; larger: more private influence, more
    cost); None: calibrated from the budget for `planned_queries` answers; given: charged for what it costs."""
    accept_unproven_guarantee: bool = False
    """Allow `shots` > 1, spending the budget on paper 000's unproven (α, 4βα) claim for the product of several
    mixtures; the ledger entries are labelled so."""
    demos: int = Field(4, ge=1)
    """DPS-MOZO+Off (`synthesize_demos`): demonstrations to write, the outputs of as many public inputs."""


class DPSMozoPlan(Plan):
    dataset_size: int
    shots: int
    sampling_rate: float
    tokens_per_query: int
    steps: int
    top_k: int
    alpha: int
    epsilon_tilde: float
    beta: float
    guarantee: str
    accept_unproven_guarantee: bool
    ball_order: float
    radius: float
    pairwise_factor: float
    rdp_per_token_unamplified: float
    rdp_per_token: float
    lambda_max: float
    neighbouring: str
    epsilon_certified: float
    beta_given: bool = False  # β chosen by hand (config `beta`): certified for what it really costs

    def event(self, sampling_rate=None, tokens=None):
        """One answer's event at the planned rate and tokens (or those given); refuses shots > 1 unless the plan
        accepted the unproven guarantee (the label then says so)."""
        return dps_mozo.cost(self.beta, self.alpha, self.sampling_rate if sampling_rate is None else sampling_rate,
                             self.tokens_per_query if tokens is None else tokens, shots=self.shots,
                             accept_unproven_guarantee=self.accept_unproven_guarantee)

    def describe(self) -> str:
        if self.guarantee == dps_mozo.PROVEN:
            basis = (f"{self.pairwise_factor:.4f}·r = 4βα = {4 * self.beta * self.alpha:.4f} per token at order α, "
                     "proven (weak triangle inequality)")
        else:
            basis = (f"4βα = {4 * self.beta * self.alpha:.4f} per token at order α — paper 000's UNPROVEN claim "
                     "(shots > 1, accepted explicitly)")
        return (f"  {self.shots} one-shot prompt(s) per token (without replacement from {self.dataset_size} "
                f"records), at most {self.tokens_per_query} tokens per answer: β = {self.beta:.5f} at order "
                f"α = {self.alpha} (RDP budget ε̃ = {self.epsilon_tilde:.4f}), Rényi ball radius "
                f"r = {self.radius:.5f} at order {self.ball_order:g}; {basis}; the RDP accountant certifies "
                f"ε = {self.epsilon_certified:.5f}, for replacement neighbours")


@register
class DPSMozo(TokenMethod):
    name = "dps-mozo"
    summary = ("DPS-MOZO: per token, one-shot prompts mixed with the zero-shot prompt inside a Rényi ball, sampled "
               "from their product (proven for one shot; more only with accept_unproven_guarantee)")
    paper = ("000: Flemings, Gan, Li, Razaviyayn, Annavaram — Differentially Private In-context Learning via "
             "Sampling Few-shot Mixed with Zero-shot Outputs")
    Settings = DPSMozoSettings
    Plan = DPSMozoPlan
    options = ("dataset_size", "max_new_tokens", "shots", "alpha", "beta", "accept_unproven_guarantee", "top_k")
    required = ("dataset_size", "max_new_tokens")
    plan_details = ("beta", "alpha", "sampling_rate")
    synthesis_task_types = ("summarization", "generation")

    def check_config(self, cfg):
        super().check_config(cfg)
        check_synthesis_inputs(cfg)

    def sampling_rate(self, settings, facts):
        return min(1.0, settings.shots / facts.dataset_size)

    def plan_options(self, settings, facts):
        return {"dataset_size": facts.dataset_size, "max_new_tokens": facts.max_new_tokens, "shots": settings.shots,
                "alpha": settings.alpha, "beta": settings.beta, "top_k": settings.top_k,
                "accept_unproven_guarantee": settings.accept_unproven_guarantee}

    def calibrate(self, sampling_rate, queries, epsilon, delta, *, dataset_size, max_new_tokens, shots=1, alpha=None,
                  beta=None, accept_unproven_guarantee=None, top_k=dps_mozo.DEFAULT_TOP_K):
        # shots > 1 is refused here, before anything is charged or drawn, unless accept_unproven_guarantee is True
        result = dps_mozo.plan(dataset_size, shots, queries, max_new_tokens, epsilon, delta, alpha=alpha,
                               top_k=top_k, accept_unproven_guarantee=accept_unproven_guarantee is True)
        if beta is None:
            return DPSMozoPlan(**result)
        # a radius chosen by hand (config `beta`): certify what it really costs; the ledger refuses what the budget
        # cannot pay
        if not beta > 0:
            raise ValueError(f"--beta must be > 0 (got {beta})")
        alpha, q, steps = result["alpha"], result["sampling_rate"], result["steps"]
        orders = list(range(2, alpha + 1))
        certified = float(dps_mozo.bbghs_epsilon(steps * dps_mozo.dps_mozo_rdp(beta, alpha, q, orders), orders,
                                                 delta))
        return DPSMozoPlan(**{
            **result, "beta": float(beta), "radius": dps_mozo.ball_radius(beta, alpha, result["shots"]),
            "rdp_per_token_unamplified": 4.0 * beta * alpha, "beta_given": True, "epsilon_certified": certified,
            "rdp_per_token": float(dps_mozo.dps_mozo_rdp(beta, alpha, q, [alpha])[0])})

    def answer(self, cfg, backend, plan, records, teacher_key, query, paid, rng):
        demos = [(r.input, r.output) for r in records]
        paid(plan.event(sampling_rate=min(1.0, plan.shots / len(demos)), tokens=cfg.generation.max_new_tokens))
        return self._decode(cfg, backend, plan, demos, query, rng)

    def _decode(self, cfg, backend, plan, demos, query, rng):
        gen = cfg.generation
        return dps_mozo_answer(backend, zero_shot_prompt(cfg.task, query),
                               lambda i: render_prompt(cfg.task, [demos[i]], query), len(demos), shots=plan.shots,
                               top_k=plan.top_k, beta=plan.beta, alpha=plan.alpha, max_new_tokens=gen.max_new_tokens,
                               stop=gen.stop, rng=rng)

    # ---- DPS-MOZO+Off: `demos` answers to public inputs, charged together as one ledger entry --------------------

    def synthesis_plan(self, cfg, pools, epsilon, delta):
        m, n = cfg.method, len(pools[None])
        plan = self.calibrate(min(1.0, m.shots / n), m.demos, epsilon, delta, dataset_size=n,
                              max_new_tokens=cfg.generation.max_new_tokens, shots=m.shots, alpha=m.alpha, beta=m.beta,
                              top_k=m.top_k, accept_unproven_guarantee=m.accept_unproven_guarantee)
        return plan, ComposedEvent(plan.event(), m.demos)

    def synthesis_used(self, cfg, plan, pool, texts):
        """The event of `texts` answers decoded from `pool` with the run's settings."""
        step = plan.event(sampling_rate=min(1.0, plan.shots / len(pool)), tokens=cfg.generation.max_new_tokens)
        return ComposedEvent(step, texts)

    def synthesize_text(self, cfg, backend, plan, pool, teacher_key, label, public_input, rng):
        demos = [(r.input, r.output) for r in pool]
        return public_input, self._decode(cfg, backend, plan, demos, public_input, rng).text
