"""Content-addressed artifacts, runs, and the backlog/record helpers."""

import numpy as np
import pytest

from dpicl.storage.artifacts import artifact_key, get_artifact, get_artifacts, has_artifact, put_artifact
from dpicl.storage.ingest import FieldMap, ingest_queries
from dpicl.storage.queries import backlog_counts, get_dataset, load_records, pending_queries, set_query_status
from dpicl.storage.runs import config_hash, create_run, finish_run, get_run

from .conftest import write


def test_artifact_key_is_canonical_and_sensitive():
    key = artifact_key("infer", ["p1", "p2"], {"model": "m", "temperature": 0.0})
    assert len(key) == 64 and int(key, 16) >= 0
    assert key == artifact_key("infer", ["p1", "p2"], {"temperature": 0.0, "model": "m"})
    assert key != artifact_key("infer", ["p2", "p1"], {"model": "m", "temperature": 0.0})
    assert key != artifact_key("embed", ["p1", "p2"], {"model": "m", "temperature": 0.0})
    assert key != artifact_key("infer", ["p1", "p2"], {"model": "m", "temperature": 0.5})


def test_json_artifact_round_trip_and_idempotent_put(con):
    key = artifact_key("prompt", [], {"q": 1})
    payload = {"prompts": ["a", "é ü"], "n": 3, "nested": {"x": [1.5, None, True]}}
    assert not has_artifact(con, key)
    assert put_artifact(con, key, "prompt", "bl", "q1", payload, private=True, run_id="r1") == key
    assert has_artifact(con, key)
    assert get_artifact(con, key) == payload
    assert put_artifact(con, key, "prompt", "bl", "q1", {"other": "payload"}, private=True) == key
    assert get_artifact(con, key) == payload  # the first put stands
    row = con.execute("SELECT stage, backlog, query_id, private, format, run_id FROM artifacts").fetchall()
    assert row == [("prompt", "bl", "q1", True, "json", "r1")]


def test_npy_artifact_round_trip(con):
    array = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    key = put_artifact(con, "k-npy", "embed", "bl", "q1", array, private=False)
    back = get_artifact(con, key)
    assert isinstance(back, np.ndarray) and back.dtype == np.float32 and back.shape == (3, 4)
    np.testing.assert_array_equal(back, array)
    assert con.execute("SELECT format, private FROM artifacts WHERE key = ?", [key]).fetchone() == ("npy", False)


def test_object_arrays_are_refused(con):
    with pytest.raises(ValueError):
        put_artifact(con, "k", "s", "b", "q", np.array([{"a": 1}], dtype=object), private=True)
    assert not has_artifact(con, "k")


def test_get_artifacts_in_one_query_and_missing_keys(con):
    put_artifact(con, "a", "s", "b", "q", [1, 2], private=True)
    put_artifact(con, "b", "s", "b", "q", np.ones(2), private=True)
    found = get_artifacts(con, ["a", "b", "missing"])
    assert set(found) == {"a", "b"} and found["a"] == [1, 2]
    np.testing.assert_array_equal(found["b"], np.ones(2))
    assert get_artifacts(con, []) == {}
    with pytest.raises(KeyError) as caught:
        get_artifact(con, "missing")
    assert caught.value.args == ("missing",)


def test_runs(con):
    config = {"method": {"name": "esa", "teachers": 4}, "batch": 3}
    create_run(con, "run-1", "esa", "tiny", "bl", config, flow_run_id="flow-9")
    run = get_run(con, "run-1")
    assert run["config"] == config and run["status"] == "running" and run["finished_at"] is None
    assert run["flow_run_id"] == "flow-9" and run["method"] == "esa"
    assert run["config_hash"] == config_hash({"batch": 3, "method": {"teachers": 4, "name": "esa"}})
    assert run["config_hash"] != config_hash({"batch": 4, "method": {"name": "esa", "teachers": 4}})
    finish_run(con, "run-1", "completed")
    run = get_run(con, "run-1")
    assert run["status"] == "completed" and run["finished_at"] >= run["started_at"]
    assert get_run(con, "nope") is None
    with pytest.raises(LookupError, match="nope"):
        finish_run(con, "nope", "failed")


def test_the_current_plan_is_the_latest_paid_one_not_a_later_free_rerun(con):
    """After a free `rerun --from release`, `dpicl budget show` said the budget paid for unlimited queries."""
    import time

    from dpicl.privacy.accounting.events import PublicDataEvent
    from dpicl.privacy.mechanisms import esa
    from dpicl.storage.runs import latest_plan_event, store_plan

    assert latest_plan_event(con, "tiny") is None
    free = PublicDataEvent("sga:post-processing").to_json()
    paid = [esa.cost(noise_multiplier=nm, sampling_rate=0.1).to_json() for nm in (2.0, 3.0)]
    for run_id, event in (("free-first", free), ("paid-1", paid[0]), ("paid-2", paid[1]), ("free-rerun", free)):
        create_run(con, run_id, "esa", "tiny", "bl", {}, None)
        store_plan(con, run_id, "bl", {}, event)
        if run_id == "free-first":
            assert latest_plan_event(con, "tiny") == free  # only free runs: the free plan
        time.sleep(0.01)  # distinct start times
    assert latest_plan_event(con, "tiny") == paid[1]


def test_a_run_stored_before_empty_answers_existed_reads_as_letting_answers_end_blank(con):
    """Its outputs were generated when the model could end an answer at once: a rerun must not take them for outputs
    of today's default (`generation.empty_answers: false`), nor regenerate its public outputs that way."""
    create_run(con, "old", "esa", "tiny", "bl", {"generation": {"max_new_tokens": 8}}, None)
    create_run(con, "new", "esa", "tiny", "bl", {"generation": {"max_new_tokens": 8, "empty_answers": False}}, None)
    assert get_run(con, "old")["config"]["generation"] == {"max_new_tokens": 8, "empty_answers": True}
    assert get_run(con, "new")["config"]["generation"]["empty_answers"] is False


def test_query_status_and_counts(con, tmp_path):
    path = write(tmp_path, "b.csv", "id,q\nq1,a\nq2,b\nq3,c\n")
    ingest_queries(con, path, "bl", FieldMap(id="id", input="q", output=None))
    assert backlog_counts(con, "bl") == {"pending": 3}
    set_query_status(con, "bl", ["q1", "q3"], "answered")
    set_query_status(con, "bl", ["q2"], "refused_budget")
    assert backlog_counts(con, "bl") == {"answered": 2, "refused_budget": 1}
    assert pending_queries(con, "bl") == []
    with pytest.raises(ValueError, match="status"):
        set_query_status(con, "bl", ["q1"], "done")
    assert backlog_counts(con, "unknown") == {}


def test_unknown_dataset_says_how_to_ingest_it(con):
    with pytest.raises(LookupError, match="'ghost'.*ingest"):
        get_dataset(con, "ghost")
    with pytest.raises(LookupError, match="ghost"):
        load_records(con, "ghost")
