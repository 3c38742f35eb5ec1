"""AdaPMixED (paper 003) for in-context learning: noisy screening, then members over disjoint private parts mixed
with the public zero-shot distribution inside a Rényi ball."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dpicl.decoding import adapmixed_answer
from dpicl.methods import register
from dpicl.methods.base import Plan, TokenMethod, TokenSettings
from dpicl.privacy.accounting.events import FixedOrderRDPEvent
from dpicl.privacy.accounting.guard import PrivacyGuardError
from dpicl.privacy.mechanisms import adapmixed
from dpicl.privacy.sampling import assign_teachers
from dpicl.prompts import render_prompt, zero_shot_prompt


class AdaPMixEDSettings(TokenSettings):
    """AdaPMixED (paper 003) for ICL: `members` prompts over disjoint parts of the private data (a record's part
    is a keyed hash of it), each with `shots` demonstrations; the zero-shot prompt is the public member. Per
    token a noisy screen decides between the public distribution and the PMixED mixture (each member mixed with
    the public one inside a Rényi ball of radius β·α). Defaults from 003 Table 4 except `members` (CPU-sized)."""

    name: Literal["adapmixed"] = "adapmixed"
    members: int = Field(20, ge=1)
    """Member prompts, each over its own disjoint part of the private data (a record's part is a keyed hash of it);
    paper 003 used 100."""
    shots: int = Field(1, ge=1)
    """Demonstrations each member prompt shows from its part (at most)."""
    alpha: int = Field(adapmixed.ALPHA, ge=2)
    """Rényi order α at which each answer's cost is charged."""
    beta: float | None = Field(None, gt=0)
    """Rényi-ball parameter β: each member is mixed with the public distribution within radius β·α (larger: more
    private influence, more cost); None: the largest β the budget allows for `planned_queries` answers."""
    top_k: int = Field(adapmixed.TOP_K, ge=1)
    """Size of the noisy screen's support K: the top-k tokens of the public (zero-shot) distribution (does not
    change the cost)."""
    screen_lambda: float = Field(adapmixed.SCREEN_LAMBDA, gt=0, le=1)
    """Weight λ of each member in the screening mixture λ·p_i + (1−λ)·p_0 (the screen's cost grows with λ²)."""
    screen_sigma: float = Field(adapmixed.SCREEN_SIGMA, gt=0)
    """Standard deviation σ of the Gaussian noise on the screening mixture (the screen's cost falls with σ²)."""
    threshold: float = Field(adapmixed.THRESHOLD, gt=0)
    """Screen threshold T: a token is decoded from the private mixture when the noisy screen's Rényi divergence
    from the public distribution is at most T, else from the public distribution (does not change the cost)."""


_DEFAULTS = AdaPMixEDSettings()


class AdaPMixEDPlan(Plan):
    beta: float
    alpha: int
    members: int
    tokens_per_query: int
    screen_lam: float
    screen_sigma: float
    top_k: int
    threshold: float
    rdp_per_query: float
    rdp_budget: float
    rdp_total: float
    conversion_term: float
    screen_rdp_per_token: float
    member_rdp_per_token: float
    epsilon_certified: float

    def event(self, sampling_rate=None):
        return FixedOrderRDPEvent(self.alpha, self.rdp_per_query, adapmixed.METHOD)

    def describe(self) -> str:
        return (f"  {self.members} members, at most {self.tokens_per_query} tokens per answer: Rényi ball "
                f"β = {self.beta:.6g} at order α = {self.alpha}; reserved per answer (data-independent bound) "
                f"RDP {self.rdp_per_query:.5g} of the budget {self.rdp_budget:.4f}; the accountant certifies "
                f"ε = {self.epsilon_certified:.5f}")


@register
class AdaPMixED(TokenMethod):
    name = "adapmixed"
    summary = ("AdaPMixED: noisy screening, then members over disjoint private parts mixed with the public "
               "zero-shot distribution inside a Rényi ball")
    paper = ("003: Flemings, Razaviyayn, Annavaram — Adaptively Private Next-Token Prediction of Large Language "
             "Models")
    subsamples = False
    Settings = AdaPMixEDSettings
    Plan = AdaPMixEDPlan
    options = ("max_new_tokens", "members", "alpha", "beta", "screen_lambda", "screen_sigma", "top_k", "threshold")
    required = ("max_new_tokens",)
    plan_details = ("beta", "alpha", "rdp_per_query")

    def plan_options(self, settings, facts):
        return {"max_new_tokens": facts.max_new_tokens, "members": settings.members, "alpha": settings.alpha,
                "beta": settings.beta, "screen_lambda": settings.screen_lambda,
                "screen_sigma": settings.screen_sigma, "top_k": settings.top_k, "threshold": settings.threshold}

    def calibrate(self, sampling_rate, queries, epsilon, delta, *, max_new_tokens, members=_DEFAULTS.members,
                  alpha=_DEFAULTS.alpha, beta=None, screen_lambda=_DEFAULTS.screen_lambda,
                  screen_sigma=_DEFAULTS.screen_sigma, top_k=_DEFAULTS.top_k, threshold=_DEFAULTS.threshold):
        return AdaPMixEDPlan(**adapmixed.plan(queries, max_new_tokens, epsilon, delta, members=members, alpha=alpha,
                                              beta=beta, screen_lam=screen_lambda, screen_sigma=screen_sigma,
                                              top_k=top_k, threshold=threshold))

    def answer(self, cfg, backend, plan, records, teacher_key, query, paid, rng):
        # every record in one member's part (keyed hash of the record), `shots` of them in its prompt
        gen = cfg.generation
        demos = {r.record_id: (r.input, r.output) for r in records}
        paid(adapmixed.cost(plan.alpha, plan.beta, plan.members, gen.max_new_tokens, plan.screen_lam,
                            plan.screen_sigma))
        parts = assign_teachers(list(demos), teacher_key, plan.members, cfg.method.shots, 1.0, rng)
        members = [render_prompt(cfg.task, [demos[r] for r in part], query) for part in parts]
        if len(members) != plan.members:  # one record must reach one member of the `members` charged for
            raise PrivacyGuardError(f"{len(members)} members were built where {plan.members} were charged for")
        return adapmixed_answer(backend, zero_shot_prompt(cfg.task, query), members, beta=plan.beta,
                                alpha=plan.alpha, top_k=plan.top_k, screen_lambda=plan.screen_lam,
                                screen_sigma=plan.screen_sigma, threshold=plan.threshold,
                                max_new_tokens=gen.max_new_tokens, stop=gen.stop, rng=rng)
