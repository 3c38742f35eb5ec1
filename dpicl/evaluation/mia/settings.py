"""The DP settings the attacks run at: each method planned by ``dpicl.planning`` as deployed (``epsilon``), and
the ε that bounds the experiment as run, with the target forced into the demonstrations (``epsilon_experiment``;
see ``dpicl.evaluation.mia`` for what the two mean). Numbers only."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dpicl.evaluation.mia.common import _number
from dpicl.methods.adapmixed import AdaPMixED
from dpicl.methods.dps_mozo import DPSMozo
from dpicl.privacy.mechanisms import adapmixed, dps_mozo


@dataclass(frozen=True)
class DPSetting:
    """One DP configuration of a method: the planned ε (as deployed), the mechanism parameters (numbers), and the
    ε that bounds the experiment as run (the target always in the demonstrations)."""

    epsilon: float
    params: Mapping[str, float]
    epsilon_experiment: float | None = None
    delta: float | None = None


@functools.lru_cache(maxsize=64)  # plans are frozen: the cached one is shared
def cached_plan(method: str, sampling_rate: float, queries: int, epsilon: float, delta: float, options: tuple = ()):
    """``dpicl.planning.plan``, computed once per arguments: a calibration can take a minute."""
    from dpicl import planning

    return planning.plan(method, sampling_rate=sampling_rate, queries=queries, epsilon=epsilon, delta=delta,
                         **dict(options))


def planned_setting(method: str, epsilon: float, delta: float, *, sampling_rate: float, queries: int,
                    forced_queries: int = 1, forced: Mapping[str, float] | None = None,
                    **options) -> tuple[dict, DPSetting]:
    """The pipeline's plan of ``method`` for ``queries`` queries at ``sampling_rate`` (``dpicl.planning``) and
    its ``DPSetting``: the plan's numbers, and as ``epsilon_experiment`` the accountant's ε of ``forced_queries``
    invocations of the same mechanism at sampling rate 1 (the target forced into each of them; ``forced``
    overrides other entries of the plan for that event, e.g. dp-fewshot's tokens of one demonstration)."""
    from dpicl.privacy.accounting import total_epsilon

    plan = cached_plan(method, sampling_rate, queries, epsilon, delta, tuple(sorted(options.items())))
    event = plan.event(sampling_rate=1.0, **(forced or {}))
    params = {k: float(v) for k, v in plan.numbers().items() if _number(v) and not isinstance(v, bool)}
    return plan, DPSetting(epsilon, params, total_epsilon([event] * forced_queries, delta), delta)


def plan_probability_settings(epsilons: Sequence[float], delta: float, *, n_records: int, queries: int,
                              max_new_tokens: int, mozo_shots: int = 1, mozo_top_k: int = dps_mozo.DEFAULT_TOP_K,
                              ada_members: int = 4, ada_alpha: int = adapmixed.ALPHA) -> dict[str, list[DPSetting]]:
    """DPS-MOZO and AdaPMixED settings for each ε, planned for ``queries`` queries of ``max_new_tokens`` tokens.
    ``epsilon_experiment``: DPS-MOZO with the target in every token of every query (sampling rate 1); AdaPMixED
    has no subsampling, so its planned ε already holds (the target is one member throughout)."""
    from dpicl import planning
    from dpicl.privacy.accounting import total_epsilon
    from dpicl.privacy.accounting.events import DPSMozoEvent

    out: dict[str, list[DPSetting]] = {DPSMozo.name: [], AdaPMixED.name: []}
    for eps in epsilons:
        p = planning.plan(DPSMozo.name, sampling_rate=mozo_shots / n_records, queries=queries, epsilon=eps,
                          delta=delta, dataset_size=n_records, max_new_tokens=max_new_tokens, shots=mozo_shots,
                          # an attack measures the mechanism as configured, proven or not; it charges no budget
                          accept_unproven_guarantee=mozo_shots > 1)
        forced = [DPSMozoEvent(p.beta, p.alpha, 1.0, max_new_tokens)] * queries
        out[DPSMozo.name].append(DPSetting(eps, {"beta": p.beta, "alpha": p.alpha, "top_k": mozo_top_k,
                                               "shots": mozo_shots, "sampling_rate": p.sampling_rate},
                                         total_epsilon(forced, delta), delta))
        p = planning.plan(AdaPMixED.name, sampling_rate=1.0, queries=queries, epsilon=eps, delta=delta,
                          max_new_tokens=max_new_tokens, members=ada_members, alpha=ada_alpha)
        events = [p.event()] * queries
        out[AdaPMixED.name].append(DPSetting(eps, {"beta": p.beta, "alpha": p.alpha,
                                                "members": ada_members}, total_epsilon(events, delta), delta))
    return out
