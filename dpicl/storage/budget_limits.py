"""Which (ε, δ) a privacy budget may be opened with (`dpicl.storage.ledger.open_budget`).

ε must be a finite number in (0, `MAX_EPSILON`]: above that the guarantee promises nothing (e^100 ≈ 10^43), and
the accountants and calibrations would overflow long before. δ must lie in (`MIN_DELTA`, 1): the PRV accountant,
which checks every spend, evaluates ε at δ − 1e-10 (`dpicl.privacy.accounting.prv.DEFAULT_DELTA_ERROR`), so a
smaller δ (e.g. a subnormal 1e-320) is one no spend could ever be checked against. NaN fails every comparison and
is refused with the rest. δ must also be below 1/n for a dataset of n records (`delta_problem`): a mechanism that
publishes one record of the n outright, chosen at random, is (0, 1/n)-DP, so a δ of 1/n or more permits that.
"""

from __future__ import annotations

import math
from numbers import Real

MAX_EPSILON = 100.0
MIN_DELTA = 1e-10  # the PRV accountant's delta_error; tests/hardening check the two agree


def budget_problem(epsilon: object, delta: object) -> str | None:
    """Why a budget cannot be opened with (ε, δ), or None if it can. Numbers only: nothing private here."""
    for name, value in (("ε", epsilon), ("δ", delta)):
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
            return f"{name} must be a finite number (got {value!r}); give e.g. --epsilon 2 --delta 1e-5"
    if not 0 < epsilon <= MAX_EPSILON:
        return f"ε must be greater than 0 and at most {MAX_EPSILON:g} (got {epsilon:g})"
    if not MIN_DELTA < delta < 1:
        return (f"δ must be greater than {MIN_DELTA:g} (the smallest δ the PRV accountant can check spending "
                f"against) and less than 1 (got {delta:g}); well below 1/|dataset| is usual, e.g. 1e-5")
    return None


def delta_problem(delta: float, records: int) -> str | None:
    """Why δ is too large for a dataset of `records` records (δ ≥ 1/n), or None. Numbers only."""
    if delta * records < 1:
        return None
    suggestion = 10.0 ** math.floor(math.log10(0.1 / records))
    return (f"δ = {delta:g} is not below 1/n = 1/{records} for this dataset of {records} records: with δ ≥ 1/n, "
            f"a mechanism that publishes a whole record outright would meet the guarantee; give e.g. --delta "
            f"{suggestion:g} (well below 1/n)")
