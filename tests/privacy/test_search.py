"""The core's one root finder (dpicl/privacy/search.py): whatever the predicate, the answer is a point where it held
(the feasible end of the bracket), to the precision asked; and no other module bisects by hand."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpicl.privacy
from dpicl.privacy.search import bisect, bisect_int, doubling, largest, smallest

thresholds = st.floats(min_value=1e-6, max_value=1e5, allow_nan=False, allow_infinity=False)


class Counting:
    """A predicate that records where it was asked."""

    def __init__(self, predicate):
        self.predicate, self.asked = predicate, []

    def __call__(self, x):
        self.asked.append(x)
        return self.predicate(x)


@settings(max_examples=200, deadline=None)
@given(c=thresholds, rel_tol=st.sampled_from([1e-2, 1e-4, 1e-6]), relative_to=st.sampled_from(["upper", "lower"]))
def test_the_largest_feasible_is_feasible_and_within_the_precision(c, rel_tol, relative_to):
    fits = Counting(lambda x: x <= c)
    x = largest(fits, start=1.0, limit=1e6, rel_tol=rel_tol, relative_to=relative_to)
    assert x <= c and (x == 0.0 or fits(x))
    assert c - x <= rel_tol * c / (1 - rel_tol)
    assert all(a > 0 for a in fits.asked)  # 0 ("nothing") is never asked


@settings(max_examples=200, deadline=None)
@given(c=thresholds, rel_tol=st.sampled_from([1e-2, 1e-4, 1e-6]), relative_to=st.sampled_from(["upper", "lower"]))
def test_the_smallest_feasible_is_feasible_and_within_the_precision(c, rel_tol, relative_to):
    # e.g. the smallest noise multiplier that the accountant certifies: never one just below the boundary
    fits = Counting(lambda nm: nm >= c)
    nm = smallest(fits, start=1.0, limit=1e6, rel_tol=rel_tol, relative_to=relative_to)
    assert nm >= c
    assert nm - c <= rel_tol * nm
    assert fits(nm)


@settings(max_examples=100, deadline=None)
@given(points=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=20), steps=st.integers(0, 60))
def test_a_predicate_that_is_not_monotone_still_gets_a_point_where_it_held(points, steps):
    # feasible on a union of small intervals: the answer is the caller's ok end or a point found feasible
    def feasible(x):
        return any(abs(x - p) < 1e-3 for p in points) or x == 0.0

    checked = Counting(feasible)
    x = bisect(checked, 0.0, 1.0, steps=steps)
    assert feasible(x) and x != 1.0
    assert x == 0.0 or x in checked.asked
    assert len(checked.asked) <= steps


def test_the_bad_end_is_never_returned_nor_asked():
    fits = Counting(lambda x: x <= 0.3)
    assert bisect(fits, 0.0, 1.0, rel_tol=1e-9) <= 0.3
    assert 1.0 not in fits.asked and 0.0 not in fits.asked
    fits = Counting(lambda nm: nm >= 0.3)
    assert bisect(fits, 1.0, 0.0, rel_tol=1e-9) >= 0.3
    assert 1.0 not in fits.asked and 0.0 not in fits.asked


def test_the_precision_is_relative_to_the_end_asked_for():
    # width ≤ tol · upper end vs ≤ tol · lower end: the lower-end rule is the stricter one
    upper = Counting(lambda x: x <= 1.0)
    lower = Counting(lambda x: x <= 1.0)
    bisect(upper, 0.5, 2.0, rel_tol=0.1)
    bisect(lower, 0.5, 2.0, rel_tol=0.1, relative_to="lower")
    assert len(lower.asked) >= len(upper.asked)
    with pytest.raises(ValueError, match="relative_to"):
        bisect(lambda x: True, 0.0, 1.0, rel_tol=0.1, relative_to="middle")
    with pytest.raises(ValueError, match="precision"):
        bisect(lambda x: True, 0.0, 1.0)


def test_steps_bound_the_evaluations_and_floating_point_ends_the_search():
    fits = Counting(lambda x: x <= 1 / 3)
    assert bisect(fits, 0.0, 1.0, steps=40) <= 1 / 3 and len(fits.asked) == 40
    fits = Counting(lambda x: x <= 1 / 3)
    x = bisect(fits, 0.0, 1.0, steps=10_000)  # no midpoint is left long before 10 000 steps
    assert x <= 1 / 3 and math.nextafter(x, 1.0) > 1 / 3 and len(fits.asked) < 100
    fits = Counting(lambda x: x <= 0.0)
    assert bisect(fits, 0.0, 1.0, rel_tol=1e-6) == 0.0 and len(fits.asked) < 1100  # nothing fits: it still stops


def test_geometric_midpoints_across_decades():
    fits = Counting(lambda nm: nm >= 0.02)
    nm = bisect(fits, 1e4, 1e-3, rel_tol=1e-4, geometric_above=4)
    assert 0.02 <= nm <= 0.02 / (1 - 1e-4)
    assert fits.asked[0] == pytest.approx(math.sqrt(1e4 * 1e-3))  # the first step is geometric


def test_giving_up_below_a_floor():
    assert largest(lambda x: x <= 1e-9, limit=1e3, rel_tol=1e-4, give_up_below=1e-6) is None
    assert largest(lambda x: x <= 1e-3, limit=1e3, rel_tol=1e-4, give_up_below=1e-6) <= 1e-3


def test_doubling_and_its_limit():
    assert doubling(lambda x: x <= 5, 1, 100) == (4, 8)
    assert doubling(lambda x: x <= 5, 8, 100) == (None, 8)
    assert doubling(lambda x: True, 1.0, 1e3) == (512.0, None)  # 1024 > 1e3 is not asked
    assert largest(lambda x: True, limit=1e3, rel_tol=1e-6) == 512.0
    assert smallest(lambda x: False, limit=1e3, rel_tol=1e-6) is None


@settings(max_examples=200, deadline=None)
@given(k=st.integers(0, 10_000), extra=st.integers(1, 10_000))
def test_the_largest_integer_that_fits(k, extra):
    fits = Counting(lambda n: n <= k)
    assert bisect_int(fits, 0, k + extra) == k
    assert k + extra not in fits.asked


def test_no_module_of_the_core_bisects_by_hand():
    # one root finder: a hand-rolled (lo + hi) / 2 or // 2 in any other function would be a second one
    root = Path(dpicl.privacy.__file__).parent
    allowed = {
        # all member rows at once (numpy arrays); every λ is then re-checked row by row with the shared function
        ("mechanisms/adapmixed.py", "choose_lambdas"),
        # a safeguarded interpolation search (each accountant call costs about a second), not a plain bisection
        ("accounting/calibration.py", "max_additional"),
    }
    pattern = re.compile(r"\(\s*\w+\s*\+\s*\w+\s*\)\s*//?\s*2")
    found = []
    for path in root.rglob("*.py"):
        if path.name == "search.py":  # the root finder itself
            continue
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.col_offset == 0 \
                    and pattern.search(ast.get_source_segment(source, node)) \
                    and (path.relative_to(root).as_posix(), node.name) not in allowed:
                found.append(f"{path.relative_to(root)}: {node.name}")
    assert found == []
