"""benchmarks/utility.py --token-level: one token_level.py file per repetition becomes rows with their mean, spread
and share of the gap."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def utility():
    sys.path.insert(0, str(BENCHMARKS))  # utility.py imports its neighbours as a script does
    try:
        spec = importlib.util.spec_from_file_location("utility", BENCHMARKS / "utility.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))


def repetition(tmp_path: Path, name: str, scores: dict[str, tuple[float, int]]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"rows": {k: {"rougeL": v, "queries": n} for k, (v, n) in scores.items()}}))
    return path


def test_settings_average_over_the_repetitions_that_ran_them(utility, tmp_path):
    first = repetition(tmp_path, "r0.json", {"zero-shot": (10.0, 100), "few-shot (non-private)": (50.0, 100),
                                             "dps-mozo ε=3": (20.0, 100), "adapmixed ε=1": (12.0, 100)})
    second = repetition(tmp_path, "r1.json", {"zero-shot": (10.0, 100), "few-shot (non-private)": (40.0, 100),
                                              "dps-mozo ε=3": (30.0, 75)})
    rows = {(r["method"], r["epsilon"]): r for r in utility.token_level_rows([first, second])}
    assert set(rows) == {("dps-mozo", 3.0), ("adapmixed", 1.0)}
    mozo = rows["dps-mozo", 3.0]
    assert (mozo["score"], mozo["std"], mozo["repetitions"], mozo["queries"]) == (25.0, 5.0, 2, 75)
    assert mozo["non_private"] == 45.0 and mozo["gap_recovered"] == pytest.approx(15 / 35)
    alone = rows["adapmixed", 1.0]
    assert alone["repetitions"] == 1 and alone["std"] is None  # one release shows no spread
