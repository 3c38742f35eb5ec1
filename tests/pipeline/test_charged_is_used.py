"""What is charged is what is used (privacy invariant 9, docs/PRIVACY.md), through the flows with fake models:

* a run's tasks use the config and plan stored when it opened, never the config file edited since;
* dp-fewshot samples at the rate it is charged for;
* before the first draw of every method the parameters about to be used are checked against the reserved event,
  and a mismatch draws nothing.
"""

from __future__ import annotations

import pytest
import yaml

from dpicl.flows import answer_backlog as answer_flow
from dpicl.flows.answer_backlog import answer_backlog
from dpicl.flows.synthesize_demos import synthesize_demos
from dpicl.privacy.accounting.events import event_from_json
from dpicl.privacy.accounting.guard import PrivacyGuardError, require_paid
from dpicl.privacy.mechanisms import esa
from dpicl.storage.db import connect
from dpicl.storage.ledger import ledger_events, stored_releases
from tests.pipeline.conftest import PLANNED
from tests.pipeline.test_methods import LABELS, classification_env  # noqa: F401 (fixture)
from tests.pipeline.test_token_methods import public_env  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow  # each flow run starts Prefect

MAX_TOKENS = 6


def _edit(config: str, **changes) -> None:
    raw = yaml.safe_load(open(config))
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            raw.setdefault(section, {})[name] = value
        else:
            raw[section] = value
    open(config, "w").write(yaml.safe_dump(raw))


def _ledger_and_releases(db: str):
    con = connect(db, read_only=True)
    try:
        return [event_from_json(e) for e in ledger_events(con, "tiny")], stored_releases(con, "tiny-backlog")
    finally:
        con.close()


def _count(db: str, sql: str) -> int:
    con = connect(db, read_only=True)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def _edit_after_open(monkeypatch, config: str, **changes) -> None:
    """Edit the config file right after the run opened (a scheduled run's YAML edited mid-run)."""
    real = answer_flow.open_run

    def open_then_edit(*args, **kwargs):
        run = real(*args, **kwargs)
        _edit(config, **changes)
        return run

    monkeypatch.setattr(answer_flow, "open_run", open_then_edit)


# ------------------------------------------------------------------------------------------ the guard itself

def test_require_paid_accepts_the_reserved_event_and_names_what_differs():
    reserved = esa.cost(1.25, 0.01)
    require_paid(reserved.to_json(), esa.cost(1.25, 0.01))
    with pytest.raises(PrivacyGuardError, match=r"sampling_rate: reserved 0\.01, used 0\.1"):
        require_paid(reserved.to_json(), esa.cost(1.25, 0.1))
    with pytest.raises(PrivacyGuardError, match="noise_multiplier"):
        require_paid(reserved, esa.cost(1.0, 0.01))


# ------------------------------------------------------------------------------- item 2: the stored config only

def test_adapmixed_decodes_with_the_stored_config_when_the_file_is_edited_mid_run(pipeline_env, fake_models,
                                                                                  monkeypatch):
    config, db = pipeline_env
    _edit(config, method={"name": "adapmixed", "members": 3, "top_k": 10, "planned_queries": PLANNED},
          generation={"max_new_tokens": MAX_TOKENS, "stop": ["\n"]})
    _edit_after_open(monkeypatch, config, generation={"max_new_tokens": 200, "stop": []},
                     method={"name": "adapmixed", "members": 16, "top_k": 10, "planned_queries": PLANNED,
                             "screen_sigma": 1e-4})
    result = answer_backlog(config=config, db=db)
    events, releases = _ledger_and_releases(db)
    assert result["answered"] == PLANNED
    backend, _ = fake_models
    # every token step asked the backend for the 3 stored members (and the public one alone), never 16
    assert {n for n, kind in backend.calls if kind == -2.0} == {3, 1}
    assert all(r["details"]["steps"] <= MAX_TOKENS for r in releases)


def test_esa_infers_with_the_stored_config_when_the_file_is_edited_mid_run(pipeline_env, fake_models, monkeypatch):
    config, db = pipeline_env  # esa, 4 teachers
    _edit_after_open(monkeypatch, config, method={"name": "esa", "teachers": 9, "shots": 1, "candidates": 3,
                                                  "planned_queries": PLANNED})
    result = answer_backlog(config=config, db=db)
    _, releases = _ledger_and_releases(db)
    assert result["answered"] == PLANNED
    assert {r["details"]["teachers"] for r in releases} == {4}
    backend, _ = fake_models
    greedy_batches = [n for n, temperature in backend.calls if temperature == 0.0]
    # per query 4 teacher prompts (not 9) and the greedy zero-shot candidate
    assert sum(greedy_batches) == (4 + 1) * PLANNED


# ---------------------------------------------------------------------- item 1: dp-fewshot samples at its charge

def _record_sampling_rates(monkeypatch) -> list[float]:
    from dpicl.methods import dp_fewshot

    rates: list[float] = []
    real = dp_fewshot.assign_teachers

    def recording(ids, key, teachers, shots, rate, rng):
        rates.append(rate)
        return real(ids, key, teachers, shots, rate, rng)

    monkeypatch.setattr(dp_fewshot, "assign_teachers", recording)
    return rates


def test_dp_fewshot_samples_every_token_at_the_charged_rate(public_env, monkeypatch):  # noqa: F811
    config, db = public_env  # 60 private records: splits·shots/|pool| would be 6/60 = 0.1
    _edit(config, method={"name": "dp-fewshot", "splits": 3, "shots": 2, "demos": 2, "top_k": 10,
                          "sampling_rate": 0.01},
          generation={"max_new_tokens": MAX_TOKENS, "stop": ["\n"]}, public_dataset="tiny-public",
          synthetic={"name": "tiny-synthetic", "epsilon": 1.0})
    rates = _record_sampling_rates(monkeypatch)
    synthesize_demos(config=config, db=db)
    (event,), _ = _ledger_and_releases(db)
    assert rates and set(rates) == {event.event.sampling_rate} == {0.01}


def test_dp_fewshot_samples_each_label_pool_at_the_charged_rate(classification_env, monkeypatch):  # noqa: F811
    config, db = classification_env
    _edit(config, method={"name": "dp-fewshot", "splits": 2, "shots": 2, "demos": 1, "top_k": 10},
          synthetic={"name": "cls-synthetic"}, generation={"max_new_tokens": MAX_TOKENS, "stop": ["\n"]})
    rates = _record_sampling_rates(monkeypatch)
    synthesize_demos(config=config, db=db)
    (event,), _ = _ledger_and_releases(db)
    assert len(LABELS) <= len(rates) and set(rates) == {event.event.sampling_rate}


# ----------------------------------------------------------- item 3: a mismatch raises and nothing is drawn

# the per-query plan number each method passes to its mechanism, tampered after the event was priced
TAMPERED = {
    "esa": ({"name": "esa", "candidates": 3}, "noise_multiplier"),
    "ksa-jem": ({"name": "ksa-jem", "k": 3}, "epsilon_em"),
    "ksa-ptr": ({"name": "ksa-ptr"}, "delta0"),
    "sga": ({"name": "sga", "levels": 2, "k": 2, "select": "top1"}, "sigma"),
    "ksa-public": ({"name": "ksa-public", "k": 3}, "epsilon_em"),
    "adapmixed": ({"name": "adapmixed", "members": 3, "top_k": 10}, "beta"),
    "dps-mozo": ({"name": "dps-mozo", "shots": 1, "top_k": 10}, "beta"),
    "esa-rate": ({"name": "esa", "candidates": 3}, "sampling_rate"),
}


def _tamper(monkeypatch, key: str) -> None:
    """The numbers a run stores (and its tasks read) differ from the plan whose event the run reserves."""
    from dpicl.methods.base import Plan

    real = Plan.numbers

    def tampered(plan):
        numbers = real(plan)
        numbers[key] = numbers[key] * 0.5
        return numbers

    monkeypatch.setattr(Plan, "numbers", tampered)


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_plan_that_differs_from_the_reserved_event_draws_nothing(public_env, monkeypatch, case):  # noqa: F811
    config, db = public_env
    method, key = TAMPERED[case]
    token_level = method["name"] in ("adapmixed", "dps-mozo")
    _edit(config, method={**({} if token_level else {"teachers": 4, "shots": 2}), "planned_queries": PLANNED,
                          **method},
          generation={"max_new_tokens": MAX_TOKENS, "stop": ["\n"]}, public_dataset="tiny-public")
    _tamper(monkeypatch, key)
    with pytest.raises(PrivacyGuardError, match="refusing to draw"):
        answer_backlog(config=config, db=db)
    _, releases = _ledger_and_releases(db)
    assert releases == []
    assert _count(db, "SELECT count(*) FROM artifacts WHERE stage IN ('aggregate', 'settlement')") == 0
    if key == "sampling_rate":  # checked before a single subsample is drawn
        assert _count(db, "SELECT count(*) FROM artifacts WHERE stage = 'sample'") == 0


def test_rnm_with_a_plan_that_differs_from_the_reserved_event_draws_nothing(classification_env,  # noqa: F811
                                                                             monkeypatch):
    config, db = classification_env
    _tamper(monkeypatch, "noise_multiplier")
    with pytest.raises(PrivacyGuardError, match="noise_multiplier"):
        answer_backlog(config=config, db=db)
    assert _ledger_and_releases(db)[1] == []
    assert _count(db, "SELECT count(*) FROM artifacts WHERE stage = 'aggregate'") == 0


def test_dp_fewshot_with_a_plan_that_differs_from_its_charge_generates_nothing(public_env, monkeypatch):  # noqa: F811

    config, db = public_env
    _edit(config, method={"name": "dp-fewshot", "splits": 3, "shots": 2, "demos": 2, "top_k": 10},
          generation={"max_new_tokens": MAX_TOKENS, "stop": ["\n"]}, public_dataset="tiny-public",
          synthetic={"name": "tiny-synthetic", "epsilon": 1.0})
    from dpicl.methods.dp_fewshot import DPFewShot

    real = DPFewShot.synthesis_plan

    def tampered(self, *args, **kwargs):
        plan, event = real(self, *args, **kwargs)
        return plan.model_copy(update={"sampling_rate": plan.sampling_rate * 2}), event

    monkeypatch.setattr(DPFewShot, "synthesis_plan", tampered)
    with pytest.raises(PrivacyGuardError, match="sampling_rate"):
        synthesize_demos(config=config, db=db)
    assert _count(db, "SELECT count(*) FROM datasets WHERE name = 'tiny-synthetic'") == 0
