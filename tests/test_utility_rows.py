"""benchmarks/utility.py --token-level and --runs: repetitions run apart become rows with their mean, spread
and share of the gap."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
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


def run(seed: int, scores: list[float], zero_shot: float, non_private: float, queries: int = 100) -> dict:
    """One utility.py --json object: one row whose score is the mean of `scores` (its releases)."""
    return {"queries": queries, "repetitions": len(scores), "seed": seed,
            "rows": [{"dataset": "samsum", "method": "esa", "epsilon": 3.0, "metric": "rougeL",
                      "score": float(np.mean(scores)), "std": float(np.std(scores)) if len(scores) > 1 else None,
                      "zero_shot": zero_shot, "non_private": non_private, "public_few_shot": None,
                      "queries": queries, "repetitions": len(scores), "releases_averaged": len(scores)}]}


def test_pooled_runs_equal_one_run_of_all_their_repetitions(utility, tmp_path):
    # a {"runs": [...]} file with a two-repetition run, and a log whose last line is a one-repetition run
    (tmp_path / "runs.json").write_text(json.dumps({"runs": [run(0, [18.0, 21.0], 17.0, 23.0)]}))
    (tmp_path / "seed2.log").write_text("  samsum rep 0: 600 s\n| table |\n" + json.dumps(run(2, [24.0], 18.0, 26.0))
                                        + "\n")
    [row] = utility.pooled_rows([tmp_path / "runs.json", tmp_path / "seed2.log"])
    assert row["score"] == pytest.approx(np.mean([18.0, 21.0, 24.0]))
    assert row["std"] == pytest.approx(np.std([18.0, 21.0, 24.0]))
    assert (row["repetitions"], row["releases_averaged"], row["seeds"]) == (3, 3, [0, 2])
    zero, ceiling = (2 * 17.0 + 18.0) / 3, (2 * 23.0 + 26.0) / 3  # baselines weighted by repetitions
    assert (row["zero_shot"], row["non_private"]) == (pytest.approx(zero), pytest.approx(ceiling))
    assert row["gap_recovered"] == pytest.approx((21.0 - zero) / (ceiling - zero))


def test_pooling_refuses_runs_that_repeat_a_seed_or_differ_in_queries(utility, tmp_path):
    (tmp_path / "a.json").write_text(json.dumps(run(1, [18.0], 17.0, 23.0)))
    (tmp_path / "b.json").write_text(json.dumps(run(1, [20.0], 17.0, 23.0)))
    (tmp_path / "c.json").write_text(json.dumps(run(2, [20.0], 17.0, 23.0, queries=30)))
    with pytest.raises(SystemExit, match="seed 1"):
        utility.pooled_rows([tmp_path / "a.json", tmp_path / "b.json"])
    with pytest.raises(SystemExit, match="different numbers of queries"):
        utility.pooled_rows([tmp_path / "a.json", tmp_path / "c.json"])
