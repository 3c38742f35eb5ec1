"""Progress bars (dpicl.progress) are drawn on a terminal only; numbers in log lines are rounded for people."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from dpicl import progress
from dpicl.planning import for_people


def test_track_yields_every_item_and_draws_nothing_into_a_log(capfd, monkeypatch):
    assert not progress.shown()  # pytest captures stderr: not a terminal
    assert list(progress.track(iter(range(7)), "work")) == list(range(7))
    assert capfd.readouterr().err == ""


def test_track_draws_on_a_terminal_unless_turned_off(monkeypatch):
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert progress.shown()
    monkeypatch.setenv("DPICL_PROGRESS", "0")
    assert not progress.shown()


@given(st.floats(min_value=1e-12, max_value=1e12))
def test_plan_numbers_in_log_lines_keep_four_significant_digits(value):
    shown = for_people({"sigma": value, "teachers": 10})
    number, teachers = shown.split(", ")
    assert teachers == "teachers=10"
    rounded = float(number.removeprefix("sigma="))
    assert math.isclose(rounded, value, rel_tol=5e-4)
    digits = number.removeprefix("sigma=").split("e")[0].replace(".", "").lstrip("0")
    assert len(digits) <= 4
