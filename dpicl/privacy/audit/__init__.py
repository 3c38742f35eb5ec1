"""Empirical privacy audits of the mechanisms (issue 7, item 3): a statistical lower bound on ε, compared with
the ε the accountants claim.

Each audit runs the shipped mechanism many times on a pair of worst-case neighbouring inputs (synthetic data
only), turns its outputs into threshold or set events, and bounds ε from below with Clopper–Pearson intervals on
held-out trials (``estimate``; the event is chosen on the other half of the trials, so there is no
multiple-comparisons bias). An audit passes when the lower bound does not exceed the claimed ε of one invocation
(sampling rate 1). A lower bound can only refute a claim, never prove one; deliberately broken variants of every
mechanism (tests only) show that the audits have the power to refute.

    from dpicl.privacy.audit import run_audit
    result = run_audit("esa", seed=0)
    result.passed, result.claimed_epsilon, result.epsilon_lower_bound

Names: ``AUDITS`` (``rnm``, ``esa``, ``ksa-jem``, ``ksa-ptr``, ``sga``, ``dp-fewshot-gaussian``,
``dp-fewshot-exponential``, ``dps-mozo``, ``adapmixed``).
"""

from __future__ import annotations

from .cases import DEFAULT_DELTA
from .estimate import EventBound, SamplePair, clopper_pearson, epsilon_lower_bound, lower_bound_from_pairs, pair_epsilon
from .runner import AUDITS, DEFAULT_CONFIDENCE, AuditResult, MechanismAudit, run_audit

__all__ = [
    "AUDITS",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_DELTA",
    "AuditResult",
    "EventBound",
    "MechanismAudit",
    "SamplePair",
    "clopper_pearson",
    "epsilon_lower_bound",
    "lower_bound_from_pairs",
    "pair_epsilon",
    "run_audit",
]
