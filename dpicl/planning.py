"""`dpicl plan`: the one planning entry point. Every method registers how to calibrate its per-query
parameters for a target (ε, δ) and number of queries, and the privacy event one query then costs;
a plan can be costed before any private data is touched (STYLE.md, OpenDP)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpicl.privacy.accounting import max_additional
from dpicl.privacy.accounting.events import FixedOrderRDPEvent, PrivacyEvent, PublicDataEvent
from dpicl.privacy.mechanisms import adapmixed, dp_fewshot, dps_mozo, esa, joint_em, ksa_ptr, rnm, sga


def _gaussian_line(result: dict[str, Any]) -> str:
    return (f"  noise multiplier {result['noise_multiplier']:.5f} per unit sensitivity; sensitivity "
            f"{result['sensitivity']:g}; noise std σ = {result['sigma']:.5f}")


def _jem_line(result: dict[str, Any]) -> str:
    return (f"  per-query ε_EM = {result['epsilon_em']:.5f} (joint exponential mechanism, utility sensitivity "
            f"{result['sensitivity']:g}); the RDP accountant certifies ε = {result['epsilon_certified']:.5f}")


def _ptr_line(result: dict[str, Any]) -> str:
    return (f"  FindBestK ε_EM = {result['epsilon_em']:.5f}; PTR noise multiplier {result['noise_multiplier']:.5f} "
            f"(σ = {result['sigma']:.5f}, sensitivity {result['sensitivity']:g}); δ0 = {result['delta0']:.4g} "
            f"per query (failures take {result['failure_delta']:.3g} of δ), offset {result['offset']:.3f}; "
            f"the RDP accountant certifies ε = {result['epsilon_certified']:.5f}")


def _sga_line(result: dict[str, Any]) -> str:
    counts = ", ".join(f"{b:.3g}" for b in result["count_scales"])
    return (f"  DPM with {result['levels']} levels: split choices ε_EM = {result['em_epsilon']:.5f} per query "
            f"(per level {', '.join(f'{e:.4g}' for e in result['em_epsilons'])}); child counts ε = "
            f"{result['count_epsilon']:.5f} (Laplace scales {counts}); leaf sums: noise multiplier "
            f"{result['noise_multiplier']:.5f} (σ = {result['sigma']:.5f}, sensitivity {result['sensitivity']:g}); "
            f"the RDP accountant certifies ε = {result['epsilon_certified']:.5f}")


def _mozo_line(result: dict[str, Any]) -> str:
    if result.get("guarantee") == dps_mozo.PROVEN:
        basis = (f"{result['pairwise_factor']:.4f}·r = 4βα = {4 * result['beta'] * result['alpha']:.4f} per token at "
                 "order α, proven (weak triangle inequality)")
    else:
        basis = (f"4βα = {4 * result['beta'] * result['alpha']:.4f} per token at order α — paper 000's UNPROVEN "
                 "claim (shots > 1, accepted explicitly)")
    return (f"  {result['shots']} one-shot prompt(s) per token (without replacement from {result['dataset_size']} "
            f"records), at most {result['tokens_per_query']} tokens per answer: β = {result['beta']:.5f} at order "
            f"α = {result['alpha']} (RDP budget ε̃ = {result['epsilon_tilde']:.4f}), Rényi ball radius "
            f"r = {result['radius']:.5f} at order {result['ball_order']:g}; {basis}; the RDP accountant certifies "
            f"ε = {result['epsilon_certified']:.5f}, for replacement neighbours")


def _adapmixed_line(result: dict[str, Any]) -> str:
    return (f"  {result['members']} members, at most {result['tokens_per_query']} tokens per answer: Rényi ball "
            f"β = {result['beta']:.6g} at order α = {result['alpha']}; reserved per answer (data-independent bound) "
            f"RDP {result['rdp_per_query']:.5g} of the budget {result['rdp_budget']:.4f}; the accountant certifies "
            f"ε = {result['epsilon_certified']:.5f}")


def _fewshot_line(result: dict[str, Any]) -> str:
    if result["mechanism"] == "gaussian":
        noise = (f"Gaussian noise multiplier {result['noise_multiplier']:.5f} (σ = {result['sigma']:.5f} on the mean "
                 f"of {result['splits']} splits)")
    else:
        noise = (f"report-noisy-max ε0 = {result['epsilon0']:.5f} per token (amplified "
                 f"{result['amplified_epsilon']:.5f})")
    return (f"  {result['tokens']} tokens from one pool (one ledger charge): {noise}; the accountant certifies "
            f"ε = {result['epsilon_certified']:.5f}")


def _mozo_plan(sampling_rate, queries, epsilon, delta, *, dataset_size, max_new_tokens, shots=1, alpha=None,
               beta=None, accept_unproven_guarantee=None):
    # shots > 1 is refused here, before anything is charged or drawn, unless accept_unproven_guarantee is True
    result = dps_mozo.plan(dataset_size, shots, queries, max_new_tokens, epsilon, delta, alpha=alpha,
                           accept_unproven_guarantee=accept_unproven_guarantee is True)
    if beta is None:
        return result
    # a radius chosen by hand (config `beta`, as `answer_backlog` charges it): certify what it really costs
    if not beta > 0:
        raise ValueError(f"--beta must be > 0 (got {beta})")
    alpha, q, steps = result["alpha"], result["sampling_rate"], result["steps"]
    orders = list(range(2, alpha + 1))
    certified = float(dps_mozo.bbghs_epsilon(steps * dps_mozo.dps_mozo_rdp(beta, alpha, q, orders), orders, delta))
    return {**result, "beta": float(beta), "radius": dps_mozo.ball_radius(beta, alpha, result["shots"]),
            "rdp_per_token_unamplified": 4.0 * beta * alpha, "beta_given": True, "epsilon_certified": certified,
            "rdp_per_token": float(dps_mozo.dps_mozo_rdp(beta, alpha, q, [alpha])[0])}


def _mozo_event(result: dict[str, Any]) -> PrivacyEvent:
    """One answer's event; refuses shots > 1 unless the plan was made with accept_unproven_guarantee (the label
    then says so). β may have been replaced in ``result`` after planning (a hand-chosen radius)."""
    accepted = result.get("accept_unproven_guarantee") is True
    return dps_mozo.cost(result["beta"], result["alpha"], result["sampling_rate"], result["tokens_per_query"],
                         shots=result["shots"], accept_unproven_guarantee=accepted)


def _adapmixed_plan(sampling_rate, queries, epsilon, delta, *, max_new_tokens, members=20, alpha=18, beta=None,
                    screen_lambda=adapmixed.SCREEN_LAMBDA, screen_sigma=adapmixed.SCREEN_SIGMA):
    return adapmixed.plan(queries, max_new_tokens, epsilon, delta, members=members, alpha=alpha, beta=beta,
                          screen_lam=screen_lambda, screen_sigma=screen_sigma)


def _fewshot_plan(sampling_rate, queries, epsilon, delta, *, max_new_tokens, splits=10, mechanism="gaussian"):
    """`queries` demonstrations of at most `max_new_tokens` tokens each, all from one pool."""
    result = dp_fewshot.plan(sampling_rate, queries * max_new_tokens, epsilon, delta, splits=splits,
                             mechanism=mechanism)
    return {**result, "queries": queries, "max_new_tokens": max_new_tokens}


@dataclass(frozen=True)
class PlannedMethod:
    name: str
    summary: str
    plan: Callable[..., dict[str, Any]]  # (sampling_rate, queries, epsilon, delta, **options) -> parameters
    event: Callable[[dict[str, Any]], PrivacyEvent]  # plan result -> per-query event
    describe: Callable[[dict[str, Any]], str] = _gaussian_line  # plan result -> its parameter line
    options: tuple[str, ...] = ()  # keyword options `plan` accepts beyond (q, T, ε, δ)


METHODS: dict[str, PlannedMethod] = {
    "esa": PlannedMethod(
        "esa",
        "Embedding Space Aggregation (paper 001): Gaussian noise on the sum of teacher embeddings, Δ = 2",
        esa.plan,
        lambda result: esa.cost(result["noise_multiplier"], result["sampling_rate"]),
    ),
    "rnm": PlannedMethod(
        "rnm",
        "Report-Noisy-Max voting (paper 001): Gaussian noise on the teachers' label-vote histogram, Δ = √2",
        rnm.plan,
        lambda result: rnm.cost(result["noise_multiplier"], result["sampling_rate"]),
    ),
    "ksa-jem": PlannedMethod(
        "ksa-jem",
        "Keyword Space Aggregation, joint EM (paper 001): k ranked words of the public prompt, Δ = 2",
        joint_em.plan,
        lambda result: joint_em.cost(result["epsilon_em"], result["sampling_rate"]),
        _jem_line,
    ),
    "ksa-ptr": PlannedMethod(
        "ksa-ptr",
        "Keyword Space Aggregation, FindBestK + propose-test-release (paper 001): the certified top word set",
        ksa_ptr.plan,
        lambda result: ksa_ptr.cost(result["epsilon_em"], result["noise_multiplier"], result["delta0"],
                                    result["sampling_rate"]),
        _ptr_line,
        ("delta0_fraction", "em_epsilon"),
    ),
    "sga": PlannedMethod(
        "sga",
        "Semantic groups with public candidates (paper 004): DPM clustering of private + public outputs, the "
        "public outputs nearest the largest noisy clusters",
        sga.plan,
        lambda result: sga.cost(result["em_epsilon"], result["count_epsilon"], result["noise_multiplier"],
                                result["levels"], result["sampling_rate"]),
        _sga_line,
        ("levels", "em_epsilon", "count_epsilon"),
    ),
    "ksa-public": PlannedMethod(
        "ksa-public",
        "Keyword Space Aggregation with public data (paper 004): joint EM over words of public outputs, Δ = 2",
        joint_em.plan,
        lambda result: joint_em.cost(result["epsilon_em"], result["sampling_rate"], mechanism="ksa_public"),
        _jem_line,
    ),
    "dps-mozo": PlannedMethod(
        "dps-mozo",
        "DPS-MOZO (paper 000): per token, one-shot prompts mixed with the zero-shot prompt inside a Rényi ball, "
        "sampled from their product (proven for one shot; more only with accept_unproven_guarantee)",
        _mozo_plan,
        _mozo_event,
        _mozo_line,
        ("dataset_size", "max_new_tokens", "shots", "alpha", "beta", "accept_unproven_guarantee"),
    ),
    "adapmixed": PlannedMethod(
        "adapmixed",
        "AdaPMixED (paper 003): noisy screening, then members over disjoint private parts mixed with the public "
        "zero-shot distribution inside a Rényi ball",
        _adapmixed_plan,
        lambda result: FixedOrderRDPEvent(result["alpha"], result["rdp_per_query"], "adapmixed"),
        _adapmixed_line,
        ("max_new_tokens", "members", "alpha", "beta", "screen_lambda", "screen_sigma"),
    ),
    "synthetic-icl": PlannedMethod(
        "synthetic-icl",
        "In-context learning with DP synthetic demonstrations (synthesize_demos): post-processing, free",
        lambda sampling_rate, queries, epsilon, delta: {"queries": queries, "epsilon": epsilon, "delta": delta},
        lambda result: PublicDataEvent("synthetic-icl"),
        lambda result: "  every answer uses public data and earlier DP releases only: it costs nothing",
    ),
    "dp-fewshot": PlannedMethod(
        "dp-fewshot",
        "DP few-shot generation (paper 002): synthetic demonstrations token by token from noisy means of the "
        "splits' next-token distributions; --queries is the number of demonstrations",
        _fewshot_plan,
        lambda result: dp_fewshot.cost(result),
        _fewshot_line,
        ("max_new_tokens", "splits", "mechanism"),
    ),
}


def _method(name: str) -> PlannedMethod:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(METHODS)}")
    return METHODS[name]


def plan(method: str, *, sampling_rate: float, queries: int, epsilon: float, delta: float,
         **options: Any) -> dict[str, Any]:
    """Per-query parameters of ``method``; ``options`` set to None are left at the method's default."""
    if not 0 < sampling_rate <= 1:
        raise ValueError(f"--sampling-rate must be in (0, 1] (got {sampling_rate})")
    if queries < 1 or epsilon <= 0 or not 0 < delta < 1:
        raise ValueError("need --queries ≥ 1, --epsilon > 0 and 0 < --delta < 1")
    m = _method(method)
    given = {name: value for name, value in options.items() if value is not None}
    unknown = sorted(set(given) - set(m.options))
    if unknown:
        raise ValueError(f"method {method!r} takes no option {', '.join(unknown)}")
    missing = [name for name in REQUIRED.get(method, ()) if name not in given]
    if missing:
        raise ValueError(f"method {method!r} needs {', '.join('--' + n.replace('_', '-') for n in missing)}")
    return {**m.plan(sampling_rate, queries, epsilon, delta, **given), "method": method}


# options without a default
REQUIRED = {"dps-mozo": ("dataset_size", "max_new_tokens"), "adapmixed": ("max_new_tokens",),
            "dp-fewshot": ("max_new_tokens",)}


def budget_state(con, dataset: str) -> dict[str, Any]:
    """The open budget of a dataset, its composed state and spent ε (closes the connection)."""
    from dpicl.storage import get_dataset
    from dpicl.storage.ledger import budget_state as composed_state
    from dpicl.storage.ledger import budget_summary, require_budget

    try:
        budget = require_budget(con, dataset)
        info = get_dataset(con, dataset)
        # dp-fewshot generates each label from its own pool: the smallest pool sets the charged rate
        pools = [n for (n,) in con.execute("SELECT count(*) FROM records WHERE dataset = ? GROUP BY output",
                                           [dataset]).fetchall()] if info["task"] == "classification" else []
        return {
            "dataset": dataset,
            "epsilon_limit": budget.epsilon,
            "delta": budget.delta,
            "n_records": info["n_records"],
            "label_pool_sizes": pools,
            "counts": composed_state(con, dataset),
            "epsilon_spent": budget_summary(con, dataset)["epsilon_spent"],
        }
    finally:
        con.close()


def payable(state: dict[str, Any], method: str, result: dict[str, Any]) -> dict[str, Any]:
    """How many more queries planned like `result` the open budget can pay for."""
    from dpicl.privacy.accounting.composed import composed_events

    spent = composed_events(state["counts"])
    event = _method(method).event(result)
    free = isinstance(event, PublicDataEvent)
    return {
        "dataset": state["dataset"],
        "epsilon_limit": state["epsilon_limit"],
        "delta": state["delta"],
        "epsilon_spent": state["epsilon_spent"],
        "ledger_entries": sum(state["counts"].values()),
        # a free method (post-processing) is never limited by the budget: no count
        "queries_payable": None if free else max_additional(spent, event, state["epsilon_limit"], state["delta"]),
        "free": free,
    }


def describe(result: dict[str, Any]) -> str:
    m = _method(result["method"])
    lines = [
        f"[bold]{m.name}[/] — {m.summary}",
        f"  target: ε = {result['epsilon']:g}, δ = {result['delta']:g} over {result['queries']} queries"
        + (f", sampling rate q = {result['sampling_rate']:.6g}" if "sampling_rate" in result else ""),
        m.describe(result),
    ]
    if "budget" in result:
        b = result["budget"]
        if b.get("free"):
            pays = "costs nothing: any number of queries"
        elif result["method"] == "dp-fewshot":  # one ledger charge pays for a whole synthesis
            pays = (f"pays for {b['queries_payable']} more syntheses of {result['queries']} demonstrations at these "
                    "settings")
        else:
            pays = f"pays for {b['queries_payable']} more queries at these settings"
        lines.append(f"  open budget of {b['dataset']!r}: ε {b['epsilon_spent']:.4f} of {b['epsilon_limit']:g} spent "
                     f"({b['ledger_entries']} entries) — {pays}")
    return "\n".join(lines)
